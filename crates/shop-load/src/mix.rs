//! The request mix: what a shopper does next.

use crate::Shopper;
use crate::rng::Rng;

/// One kind of request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `GET /items/{id}`, a Zipf-popular item.
    ViewItem,
    /// `GET /`.
    Home,
    /// `GET /api/me` (every page's script calls it).
    Me,
    /// `POST /cart`.
    AddToCart,
    /// `POST /login` as a demo user.
    Login,
    /// `POST /checkout`.
    Checkout,
    /// `GET /items` or `GET /c/{category}`: the first page, or one deep in.
    Browse,
    /// `GET /search?q=`: one or two catalogue words.
    Search,
    /// `POST /signup` as a new account (a guest only).
    SignUp,
}

impl Action {
    /// A page a browser shows (and then calls `/api/me` for).
    pub fn is_page(self) -> bool {
        matches!(
            self,
            Action::ViewItem | Action::Home | Action::Browse | Action::Search
        )
    }
}

/// Relative weights of the actions. Logins and checkouts only happen when they can
/// (a guest logs in, a logged-in shopper with a cart checks out); otherwise the
/// request becomes an item view.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    /// Item page views.
    pub view: f64,
    /// Home pages.
    pub home: f64,
    /// `/api/me` calls.
    pub me: f64,
    /// Cart adds.
    pub add_to_cart: f64,
    /// Logins.
    pub login: f64,
    /// Checkouts (about 0.1% of views by default).
    pub checkout: f64,
    /// Listing pages.
    pub browse: f64,
    /// Searches.
    pub search: f64,
    /// Sign-ups.
    pub sign_up: f64,
    /// Pages are viewed as a browser views them: the HTML, then the per-user call
    /// (`/api/me`) every page's script makes, and on an item page that does not
    /// carry its insights (an older shop's) the call for them
    /// (`/api/items/{id}/insights`), on the same connection, with the session's
    /// cookie. The report counts page views and times each part. Off: the HTML
    /// alone (to measure one path by itself).
    pub page_parts: bool,
}

impl Default for Mix {
    fn default() -> Self {
        Self {
            view: 0.83,
            home: 0.03,
            // Every page calls it already (`page_parts`).
            me: 0.0,
            add_to_cart: 0.025,
            login: 0.004,
            checkout: 0.001,
            browse: 0.03,
            search: 0.02,
            sign_up: 0.0005,
            page_parts: true,
        }
    }
}

impl Mix {
    /// Nothing at all (a base to set one weight on).
    fn none() -> Self {
        Self {
            view: 0.0,
            home: 0.0,
            me: 0.0,
            add_to_cart: 0.0,
            login: 0.0,
            checkout: 0.0,
            browse: 0.0,
            search: 0.0,
            sign_up: 0.0,
            page_parts: false,
        }
    }

    /// Item views only: to measure the page-cache path by itself.
    pub fn views_only() -> Self {
        Self {
            view: 1.0,
            ..Self::none()
        }
    }

    /// Item page views as a browser makes them (see [`Mix::page_parts`]): the
    /// whole cost of a page view.
    pub fn page_views() -> Self {
        Self {
            view: 1.0,
            page_parts: true,
            ..Self::none()
        }
    }

    /// Listing pages only (`/items`, `/c/{category}`).
    pub fn browse_only() -> Self {
        Self {
            browse: 1.0,
            ..Self::none()
        }
    }

    /// Searches only.
    pub fn search_only() -> Self {
        Self {
            search: 1.0,
            ..Self::none()
        }
    }

    pub(crate) fn pick(&self, rng: &mut Rng, shopper: &Shopper) -> Action {
        let weighted = [
            (self.home, Action::Home),
            (self.me, Action::Me),
            (self.add_to_cart, Action::AddToCart),
            (self.login, Action::Login),
            (self.checkout, Action::Checkout),
            (self.browse, Action::Browse),
            (self.search, Action::Search),
            (self.sign_up, Action::SignUp),
        ];
        let total = self.view + weighted.iter().map(|(w, _)| w).sum::<f64>();
        let mut x = rng.unit() * total;
        for (weight, action) in weighted {
            if x < weight {
                return match action {
                    Action::Login | Action::SignUp if shopper.logged_in => Action::ViewItem,
                    Action::Checkout if !shopper.logged_in || shopper.cart_lines == 0 => {
                        Action::ViewItem
                    }
                    other => other,
                };
            }
            x -= weight;
        }
        Action::ViewItem
    }
}
