//! The keys of the login limits, the login form's one-time keys, device proofs and
//! per-client rate limits.

use super::*;

impl Keys {
    /// String: the user and new session a login form's one-time key produced (or
    /// `<user> -` while it is being made), so a double-submitted form logs in once.
    /// A key of its own: the second submit comes from another session, in any
    /// shard. The client's key is hashed: no client text becomes part of a key.
    pub fn login_once(&self, form_key: &str) -> String {
        format!("{}login-once:{}", self.0.prefix, digest(form_key))
    }

    /// String: a login attempt counter for one client address or account name
    /// (`scope` is `ip` or `name`) in the current window; the value is hashed.
    pub fn login_attempts(&self, scope: &str, value: &str) -> String {
        self.rate_limit(&format!("login:{scope}"), value)
    }

    /// The two keys of one account name's login limit, in one slot (a hash tag of
    /// the name's digest) so one script reads and writes both: the counter of
    /// attempts that were not successful logins in the current window (string),
    /// and the slow-down slot (string, expiring) that lets one attempt through
    /// every so often once the counter is full.
    pub fn login_name_limit(&self, name: &str) -> (String, String) {
        let d = digest(name);
        (
            format!("{}limit:login:name:{{n{d}}}", self.0.prefix),
            format!("{}limit:login:slow:{{n{d}}}", self.0.prefix),
        )
    }

    /// String: the failed login attempts on `name` made with one device cookie
    /// (`cookie`) in the current window, in the name's slot: a device cookie
    /// lets its holder through the name's slow-down only while these stay under
    /// the name's limit.
    pub fn login_device_failures(&self, name: &str, cookie: &str) -> String {
        format!(
            "{}limit:login:dev:{{n{}}}:{}",
            self.0.prefix,
            digest(name),
            digest(cookie)
        )
    }

    /// String: the key that signs device cookies (a browser's proof that it logged
    /// in to an account before), random, made by the first web server that needs
    /// it and shared by all.
    pub fn device_key(&self) -> String {
        format!("{}device-key", self.0.prefix)
    }

    /// String: a rate-limit counter of one kind of request (`scope`, e.g. `buy`)
    /// by one client (`who`: an account id) in the current window; hashed.
    pub fn rate_limit(&self, scope: &str, who: &str) -> String {
        format!("{}limit:{scope}:{}", self.0.prefix, digest(who))
    }
}
