//! The keys of sessions: the session index (per shard), each session's own keys
//! (viewed items, cart, checkout hold) and each user's index of sessions.

use super::*;

impl Keys {
    /// Hash: session token -> user id, for the logged-in sessions of one shard.
    pub fn login_in(&self, shard: Shard) -> &str {
        &self.shard(shard).login
    }

    /// Sorted set: session token -> last-seen unix time, for every session of one shard.
    pub fn recent_in(&self, shard: Shard) -> &str {
        &self.shard(shard).recent
    }

    /// Sorted set: session token -> last-seen unix time, for the *guest* sessions of
    /// one shard (not logged in, no cart): a subset of [`Keys::recent_in`], which the
    /// cleaner empties first and whose idle members expire. Not one of the book's
    /// keys: the book's code neither reads nor needs it (its sessions are all in
    /// `recent:`, and the cleaner drops entries whose session is gone).
    pub fn guests_in(&self, shard: Shard) -> &str {
        &self.shard(shard).guests
    }

    /// Sorted set: session token -> last-seen unix time, for the *anonymous
    /// shoppers* of one shard (not logged in, holding a cart): a subset of
    /// [`Keys::recent_in`], which the cleaner empties after the guests and before
    /// any logged-in session, so a flood of cookieless cart posts never removes a
    /// shopper who logged in. Kept by the cart, the touch and login; not one of the
    /// book's keys.
    pub fn anonymous_in(&self, shard: Shard) -> &str {
        &self.shard(shard).anonymous
    }

    /// [`Keys::anonymous_in`] the token's shard.
    pub fn anonymous_of(&self, token: &SessionToken) -> &str {
        self.anonymous_in(self.shard_of(token))
    }

    /// Sorted set: session token -> unix time it logged in, for the logged-in
    /// sessions of one shard: what the absolute lifetime counts from (the touch
    /// refuses, and the cleaner removes, a session logged in longer ago). Not one
    /// of the book's keys; a login the book's code wrote gets its entry at the
    /// shop's first touch of it.
    pub fn logins_in(&self, shard: Shard) -> &str {
        &self.shard(shard).logins
    }

    /// [`Keys::logins_in`] the token's shard.
    pub fn logins_of(&self, token: &SessionToken) -> &str {
        self.logins_in(self.shard_of(token))
    }

    /// [`Keys::guests_in`] the token's shard.
    pub fn guests_of(&self, token: &SessionToken) -> &str {
        self.guests_in(self.shard_of(token))
    }

    /// [`Keys::login_in`] the token's shard.
    pub fn login_of(&self, token: &SessionToken) -> &str {
        self.login_in(self.shard_of(token))
    }

    /// [`Keys::recent_in`] the token's shard.
    pub fn recent_of(&self, token: &SessionToken) -> &str {
        self.recent_in(self.shard_of(token))
    }

    /// Sorted set: session token -> unix time it ended (logout, ended from the
    /// account page, the old token at login, past its lifetime at a touch), for
    /// the last [`crate::session::ENDED_FOR`] of one shard, at most
    /// [`crate::session::ENDED_MAX`]: a touch held back before the end
    /// (write-behind) and written after it is refused, so it does not bring the
    /// session back with its history under the old token. Trimmed at each end;
    /// not one of the book's keys.
    pub fn ended_in(&self, shard: Shard) -> &str {
        &self.shard(shard).ended
    }

    /// [`Keys::ended_in`] the token's shard.
    pub fn ended_of(&self, token: &SessionToken) -> &str {
        self.ended_in(self.shard_of(token))
    }

    /// Sorted set: item id -> time viewed, the session's most recent views.
    pub fn viewed_by(&self, token: &SessionToken) -> String {
        self.viewed_by_member(self.shard_of(token), token.expose())
    }

    /// Hash: item id -> quantity, the session's cart.
    pub fn cart(&self, token: &SessionToken) -> String {
        self.cart_member(self.shard_of(token), token.expose())
    }

    /// String: the checkout holding the session's cart (a random value of the
    /// holder's), so two checkouts of one cart (two tabs) cannot both order it.
    /// It expires on its own (a server that died mid-checkout holds it no longer).
    pub fn checkout_hold(&self, token: &SessionToken) -> String {
        format!("{}checkout:{}", self.0.prefix, token.expose())
    }

    /// In the book layout (one node), what goes before a token in the names of its
    /// `viewed:<token>` and `cart:<token>` keys, for the one script that names a
    /// session's keys itself (the cleaner's: see the module docs); none in the
    /// cluster layout, whose scripts are given every key.
    pub fn session_stems(&self, shard: Shard) -> Option<(&str, &str)> {
        match self.0.layout {
            Layout::Book => {
                let names = self.shard(shard);
                Some((&names.viewed_by, &names.cart))
            }
            Layout::Cluster { .. } => None,
        }
    }

    /// [`Keys::viewed_by`] for a member read back from a shard's `recent:` (by the
    /// cleaner). Not parsed as a [`SessionToken`]: sessions written by the book's
    /// own code have other tokens (UUIDs), and their keys must go with them.
    pub fn viewed_by_member(&self, shard: Shard, member: &str) -> String {
        format!("{}{member}", self.shard(shard).viewed_by)
    }

    /// [`Keys::cart`] for a member read back from a shard's `recent:`.
    pub fn cart_member(&self, shard: Shard, member: &str) -> String {
        format!("{}{member}", self.shard(shard).cart)
    }

    /// Hash: session id -> the session (its token, when it logged in, its device):
    /// every logged-in session of one user, the index behind "log out everywhere"
    /// and the cap per user (see [`crate::session::user_sessions`]). On a cluster
    /// it is under the user's own tag (`{u<id>}`), in another slot than the
    /// sessions it lists.
    pub fn user_sessions(&self, user: crate::domain::UserId) -> String {
        self.user_keyed("user-sessions", user)
    }

    /// Hash: item id -> quantity, the cart of a logged-in user, which every
    /// session of theirs reads and writes (see [`crate::cart`]). It expires when
    /// left untouched (the account cart's lifetime). On a cluster under the user's
    /// tag (`{u<id>}`).
    pub fn user_cart(&self, user: crate::domain::UserId) -> String {
        self.user_keyed("user-cart", user)
    }

    /// Sorted set: merge id (session token and a digest of the lines) -> unix
    /// time, the carts merged into the user's
    /// cart at a login, so a retried merge adds nothing twice. Kept as long as a
    /// login lasts, the newest thousand at most.
    pub fn user_cart_merges(&self, user: crate::domain::UserId) -> String {
        self.user_keyed("user-cart-merges", user)
    }

    /// Sorted set: `<order id>@<placed at>` -> unix time, the orders whose
    /// lines have left the user's cart, so a take done again (its first answer
    /// was lost, or the database did not hear of it) takes nothing twice. Kept
    /// [`CART_TAKES_KEPT_FOR`](crate::cart::CART_TAKES_KEPT_FOR) after the
    /// last, the newest [`CART_TAKES_KEPT`](crate::cart::CART_TAKES_KEPT) at most.
    pub fn user_cart_takes(&self, user: crate::domain::UserId) -> String {
        self.user_keyed("user-cart-takes", user)
    }

    /// String: the checkout holding the user's cart (as [`Keys::checkout_hold`]).
    pub fn user_checkout_hold(&self, user: crate::domain::UserId) -> String {
        self.user_keyed("user-checkout", user)
    }

    /// `<prefix><name>:<user>`, on a cluster under the user's tag.
    fn user_keyed(&self, name: &str, user: crate::domain::UserId) -> String {
        match self.0.layout {
            Layout::Book => format!("{}{name}:{user}", self.0.prefix),
            Layout::Cluster { .. } => format!("{}{name}:{{u{user}}}", self.0.prefix),
        }
    }

    /// String: how many times the user's password has changed (a counter, absent
    /// until the first change), beside their list of sessions: a login whose
    /// password check raced a change sees it move, and is undone.
    pub fn password_epoch(&self, user: crate::domain::UserId) -> String {
        self.user_keyed("password-epoch", user)
    }
}
