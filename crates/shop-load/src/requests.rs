//! What each action of the mix sends, and what a shopper learns from the answer.

use crate::client::Reply;
use crate::mix::Action;
use crate::rng::Rng;
use crate::{Shared, Shopper};

/// Demo accounts `shop seed` creates; shoppers who log in use these.
const LOGINS: [(&str, &str); 3] = [
    ("alice", "alice-password"),
    ("bob", "bob-password"),
    ("carol", "carol-password"),
];

pub(crate) fn request_for(
    action: Action,
    rng: &mut Rng,
    shared: &Shared,
    shopper: &Shopper,
) -> (&'static str, String, Option<String>) {
    match action {
        Action::ViewItem => ("GET", format!("/items/{}", shared.zipf.sample(rng)), None),
        Action::Home => ("GET", "/".to_owned(), None),
        Action::Me => ("GET", crate::ME.to_owned(), None),
        Action::AddToCart => {
            let item = shared.zipf.sample(rng);
            (
                "POST",
                "/cart".to_owned(),
                Some(format!("item={item}&count=1")),
            )
        }
        Action::Login => {
            let (name, password) = LOGINS[rng.below(LOGINS.len() as u64) as usize];
            (
                "POST",
                "/login".to_owned(),
                Some(format!("name={name}&password={password}")),
            )
        }
        Action::Checkout => match &shopper.cart_version {
            Some(version) => {
                let key = format!("load-{}-{}", shared.config.seed, rng.next());
                (
                    "POST",
                    "/checkout".to_owned(),
                    Some(format!("key={key}&cart_version={version}")),
                )
            }
            None => ("GET", "/cart".to_owned(), None),
        },
        Action::Browse => {
            // Half the time the first page, else a page anywhere in the catalogue:
            // after a multiple of the shop's 24 items a page, where the whole
            // listing's "next" links lead (and the pages the shop caches) in a
            // catalogue of consecutive ids; in a department, such an `after` is
            // rarely where its links lead, so those are rendered each time, as a
            // crawler's made-up pages are.
            let after = if rng.unit() < 0.5 {
                String::new()
            } else {
                let pages = (shared.config.items / 24).max(1);
                format!("?after={}", 24 * (1 + rng.below(pages)))
            };
            let categories = &shared.config.categories;
            let path = if categories.is_empty() || rng.unit() < 0.3 {
                "/items".to_owned()
            } else {
                format!(
                    "/c/{}",
                    categories[rng.below(categories.len() as u64) as usize]
                )
            };
            ("GET", format!("{path}{after}"), None)
        }
        Action::Search => {
            let words = &shared.config.search_words;
            let q = if words.is_empty() {
                "item".to_owned()
            } else {
                let two = rng.unit() < 0.5;
                let mut pick = || words[rng.below(words.len() as u64) as usize].clone();
                if two {
                    format!("{}+{}", pick(), pick())
                } else {
                    pick()
                }
            };
            ("GET", format!("/search?q={q}"), None)
        }
        Action::SignUp => {
            let name = format!(
                "load{}x{}",
                shared.config.seed,
                rng.next() % 1_000_000_000_000
            );
            (
                "POST",
                "/signup".to_owned(),
                Some(format!("name={name}&password=load-password")),
            )
        }
    }
}

/// Updates the shopper from the answer: a new session cookie, a login, a cart.
pub(crate) fn learn(shopper: &mut Shopper, action: Action, reply: &Reply) {
    if let Some(cookie) = &reply.session_cookie {
        if shopper.cookie.as_ref() != Some(cookie)
            && !matches!(action, Action::Login | Action::SignUp)
        {
            // A fresh session (first visit, or the old one was cleaned).
            shopper.logged_in = false;
            shopper.cart_lines = 0;
        }
        shopper.cookie = Some(cookie.clone());
    }
    let ok = reply.status < 400;
    match action {
        Action::Login | Action::SignUp if ok => shopper.logged_in = true,
        Action::AddToCart if ok => {
            shopper.cart_lines += 1;
            shopper.cart_version = None;
        }
        // The cart page (or a refused checkout's, showing what changed) carries
        // the version to confirm; a placed order empties the cart.
        Action::Checkout => match cart_version_in(&reply.body) {
            Some(version) => shopper.cart_version = Some(version),
            None if ok => {
                shopper.cart_lines = 0;
                shopper.cart_version = None;
            }
            None => shopper.cart_version = None,
        },
        _ => {}
    }
}

/// The `cart_version` a cart page's checkout form carries, if `body` is one.
fn cart_version_in(body: &[u8]) -> Option<String> {
    const FIELD: &[u8] = b"name=\"cart_version\" value=\"";
    let start = body.windows(FIELD.len()).position(|w| w == FIELD)? + FIELD.len();
    let len = body[start..].iter().position(|&b| b == b'"')?;
    String::from_utf8(body[start..start + len].to_vec()).ok()
}
