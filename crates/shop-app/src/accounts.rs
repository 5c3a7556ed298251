//! Logging in, signing up and logging out: the attempt counted against the login
//! limits (Redis; a device cookie lets it through a name that failures slowed
//! down), the password checked or the account created (the database), the attempt
//! settled (a failure stays counted against the name, a success is taken off and
//! earns the browser its device cookie), then the session moved to a fresh token
//! for the user with the guest's history carried over and its cart merged into the
//! account's (Redis), all in that order.
//!
//! The caller has parsed the form already (names and passwords within bounds, a
//! new account's rules checked: `shop_domain::account`), and renders the answer.

use std::time::Duration;

use shop_cache::cart::{Carts, Merged};
use shop_cache::domain::UserId;
use shop_cache::domain::client::ClientAddress;
use shop_cache::login_limit::{Attempt, LoginLimiter};
use shop_cache::session::{Device, SessionToken, Sessions};
use shop_db::Db;

use crate::AppError;

/// A login or sign-up that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedIn {
    /// Who.
    pub user: UserId,
    /// The session's new token, for the cookie.
    pub token: SessionToken,
    /// The device cookie's value for this browser: with it, its later login
    /// attempts on this account go through a limit that failures filled.
    pub device: String,
    /// What of the guest's cart did not fit the account's (lines past its cap
    /// of lines, units past the most of one item): the shopper is to be told.
    pub merged: Merged,
}

/// What a login or sign-up came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The user is logged in on a new token (the old one no longer works).
    LoggedIn(LoggedIn),
    /// A login with an unknown name or a wrong password (which, not said).
    WrongPassword,
    /// A sign-up for a name another account has.
    NameTaken,
    /// Too many attempts from this address, or a name slowed down by failures
    /// (and no device cookie for it): try again after `retry_after`. Nothing was
    /// checked.
    TooMany {
        /// When the window that refused ends.
        retry_after: Duration,
    },
}

/// A password change: who, from which session, the current and new passwords.
#[derive(Debug, Clone, Copy)]
pub struct PasswordChange<'a> {
    /// The logged-in user.
    pub user: UserId,
    /// Their session, the one kept.
    pub session: &'a SessionToken,
    /// The client's address, counted against the per-address limit.
    pub address: Option<&'a ClientAddress>,
    /// The client's device cookie, if it sent one.
    pub device: Option<&'a str>,
    /// The password now.
    pub current: &'a str,
    /// The password from now on (its rules already checked).
    pub new: &'a str,
    /// Where the client is, for the new token's entry in the list of sessions.
    pub from: &'a Device,
}

/// What a password change came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordChanged {
    /// Changed (committed); other sessions of the user ended.
    Changed {
        /// How many other sessions ended; `None` when they could not all be
        /// ended (Redis failing): the user should log them out themselves.
        ended: Option<u64>,
        /// The asking session's new token (the old one is worth nothing now), if
        /// the move succeeded.
        token: Option<SessionToken>,
    },
    /// The current password was wrong: nothing changed.
    WrongPassword,
    /// Too many attempts: try again after `retry_after`. Nothing was checked.
    TooMany {
        /// When the window that refused ends.
        retry_after: Duration,
    },
}

/// One attempt's who and where.
#[derive(Debug, Clone, Copy)]
pub struct Attempted<'a> {
    /// The session the attempt came from (a guest's, usually).
    pub session: &'a SessionToken,
    /// The client's address, counted against the per-address limit.
    pub address: Option<&'a ClientAddress>,
    /// The account name.
    pub name: &'a str,
    /// The password.
    pub password: &'a str,
    /// The client's device cookie, if it sent one.
    pub device: Option<&'a str>,
    /// Where the client is (its browser, its network), for the user's list of
    /// sessions.
    pub from: &'a Device,
    /// The form's one-time key bound to the presented cookie: a double submit gets
    /// the same new token (see `shop_cache::session::Sessions::login`).
    pub once: Option<&'a str>,
}

/// The stores logins work on.
#[derive(Clone, Copy)]
pub struct Accounts<'a> {
    /// Users and their password hashes.
    pub db: &'a Db,
    /// Sessions, moved to a new token at login.
    pub sessions: &'a Sessions,
    /// Carts: a guest's joins the account's at login.
    pub carts: &'a Carts,
    /// Login attempt counters.
    pub limiter: &'a LoginLimiter,
}

impl Accounts<'_> {
    /// Logs in with a name and password. A password change that lands while the
    /// password is being checked (argon2 takes tens of milliseconds) wins: the
    /// login sees the user's password epoch move and is undone, so a change ends
    /// every session the old password opens, this one included.
    pub async fn log_in(&self, attempt: Attempted<'_>) -> Result<Outcome, AppError> {
        if let Some(refused) = self.count(&attempt).await? {
            return Ok(refused);
        }
        let epoch = match self.db.user_named(attempt.name).await? {
            Some(user) => Some(self.sessions.password_epoch(user).await?),
            None => None,
        };
        match self
            .db
            .check_password(attempt.name, attempt.password)
            .await?
        {
            Some(user) => {
                let outcome = self.logged_in(&attempt, user).await?;
                if let Outcome::LoggedIn(LoggedIn { token, .. }) = &outcome
                    && epoch != Some(self.sessions.password_epoch(user).await?)
                {
                    self.sessions.logout(token).await?;
                    return Ok(Outcome::WrongPassword);
                }
                Ok(outcome)
            }
            None => {
                self.limiter.failed(attempt.name, attempt.device).await?;
                Ok(Outcome::WrongPassword)
            }
        }
    }

    /// Creates an account and logs it in. A name already taken is
    /// [`Outcome::NameTaken`], unless the password is that account's: then it is
    /// the same form sent twice, and it logs in.
    pub async fn sign_up(&self, attempt: Attempted<'_>) -> Result<Outcome, AppError> {
        if let Some(refused) = self.count(&attempt).await? {
            return Ok(refused);
        }
        let user = match self.db.create_user(attempt.name, attempt.password).await? {
            Some(user) => {
                tracing::info!(user = user.get(), "new account");
                user
            }
            None => match self
                .db
                .check_password(attempt.name, attempt.password)
                .await?
            {
                Some(user) => user,
                None => {
                    self.limiter.failed(attempt.name, attempt.device).await?;
                    return Ok(Outcome::NameTaken);
                }
            },
        };
        self.logged_in(&attempt, user).await
    }

    /// Ends the session (its login, history and cart); returns a fresh token for
    /// the cookie, whose session starts (lazily, like any new visitor's) when it
    /// comes back.
    pub async fn log_out(&self, session: &SessionToken) -> Result<SessionToken, AppError> {
        self.sessions.logout(session).await?;
        Ok(SessionToken::generate())
    }

    /// Changes a logged-in user's password: the current one checked (counted
    /// against the login limits like a login: a stolen session cannot guess it
    /// faster than a login could), the new one stored, then every other session
    /// of the user ended. The caller has checked the new password's rules.
    pub async fn change_password(
        &self,
        change: PasswordChange<'_>,
    ) -> Result<PasswordChanged, AppError> {
        let Some(name) = self.db.user_name(change.user).await? else {
            return Ok(PasswordChanged::WrongPassword);
        };
        match self
            .limiter
            .attempt(change.address, &name, change.device)
            .await?
        {
            Attempt::Allowed => {}
            Attempt::Refused { retry_after } => {
                return Ok(PasswordChanged::TooMany { retry_after });
            }
        }
        if self.db.check_password(&name, change.current).await? != Some(change.user) {
            self.limiter.failed(&name, change.device).await?;
            return Ok(PasswordChanged::WrongPassword);
        }
        self.limiter.succeeded(&name).await?;
        self.db.set_password(change.user, change.new).await?;
        // Committed: from here on the answer is "changed", whatever fails after.
        let ended = self
            .end_after_change(change.user, Some(change.session))
            .await;
        // The session asking moves to a new token too: the cookie most likely to
        // have been stolen is this one.
        let token = match self
            .sessions
            .login_from(change.session, change.user, None, change.from)
            .await
        {
            Ok(token) => Some(token),
            Err(error) => {
                tracing::warn!(%error, "a password change could not rotate its own session");
                None
            }
        };
        tracing::info!(user = change.user.get(), ?ended, "password changed");
        Ok(PasswordChanged::Changed { ended, token })
    }

    /// After a committed change: the epoch moved, then the user's sessions but
    /// `keep` ended, tried twice. `None` when they could not all be ended (Redis
    /// failing): the password is changed all the same, and the user is told to
    /// log out the other devices themselves.
    async fn end_after_change(&self, user: UserId, keep: Option<&SessionToken>) -> Option<u64> {
        for _ in 0..2 {
            let ended = async {
                self.sessions.password_changed(user).await?;
                self.sessions.end_others(user, keep).await
            };
            match ended.await {
                Ok(n) => return Some(n),
                Err(error) => {
                    tracing::error!(%error, user = user.get(), "a password change could not end the other sessions");
                }
            }
        }
        None
    }

    /// Sets a user's password from outside (an operator's `shop users
    /// set-password`) and ends every session of the user. Returns how many ended.
    pub async fn reset_password(
        &self,
        user: UserId,
        password: &str,
    ) -> Result<Option<u64>, AppError> {
        self.db.set_password(user, password).await?;
        Ok(self.end_after_change(user, None).await)
    }

    /// Counts the attempt against the limits: the refusal, if over.
    async fn count(&self, attempt: &Attempted<'_>) -> Result<Option<Outcome>, AppError> {
        Ok(
            match self
                .limiter
                .attempt(attempt.address, attempt.name, attempt.device)
                .await?
            {
                Attempt::Allowed => None,
                Attempt::Refused { retry_after } => Some(Outcome::TooMany { retry_after }),
            },
        )
    }

    /// Moves the session to a fresh token for `user`, history kept and the guest's
    /// cart merged into the account's; the attempt is taken off the name's count,
    /// and the browser gets its device cookie.
    async fn logged_in(&self, attempt: &Attempted<'_>, user: UserId) -> Result<Outcome, AppError> {
        let device = self.limiter.succeeded(attempt.name).await?;
        let token = self
            .sessions
            .login_from(attempt.session, user, attempt.once, attempt.from)
            .await?;
        // Logged in: a merge that fails now is finished at the session's next
        // cart read (the lines wait under the new token), not an error.
        let merged = match self.carts.merge_into_account(&token, user).await {
            Ok(merged) => merged,
            Err(error) => {
                tracing::warn!(%error, "a login could not merge the guest's cart yet");
                Merged::default()
            }
        };
        if merged != Merged::default() {
            tracing::info!(
                user = user.get(),
                left_out = merged.left_out,
                cut = merged.cut,
                "a guest's cart did not fit the account's: lines left out, units cut"
            );
        }
        Ok(Outcome::LoggedIn(LoggedIn {
            user,
            token,
            device,
            merged,
        }))
    }
}
