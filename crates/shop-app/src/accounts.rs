//! Logging in, signing up and logging out: the attempt counted against the login
//! limits (Redis; a device cookie lets it through a name that failures slowed
//! down), the password checked or the account created (the database), the attempt
//! settled (a failure stays counted against the name, a success is taken off and
//! earns the browser its device cookie), then the session moved to a fresh token
//! for the user with the guest's cart and history carried over (Redis), all in
//! that order.
//!
//! The caller has parsed the form already (names and passwords within bounds, a
//! new account's rules checked: `shop_domain::account`), and renders the answer.

use std::time::Duration;

use shop_cache::domain::UserId;
use shop_cache::login_limit::{Attempt, LoginLimiter};
use shop_cache::session::{SessionToken, Sessions};
use shop_db::Db;

use crate::AppError;

/// What a login or sign-up came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The user is logged in on `token`, the session's new token (the old one no
    /// longer works).
    LoggedIn {
        /// Who.
        user: UserId,
        /// The session's new token, for the cookie.
        token: SessionToken,
        /// The device cookie's value for this browser: with it, its later login
        /// attempts on this account go through a limit that failures filled.
        device: String,
    },
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

/// One attempt's who and where.
#[derive(Debug, Clone, Copy)]
pub struct Attempted<'a> {
    /// The session the attempt came from (a guest's, usually).
    pub session: &'a SessionToken,
    /// The client's address, counted against the per-address limit.
    pub address: Option<&'a str>,
    /// The account name.
    pub name: &'a str,
    /// The password.
    pub password: &'a str,
    /// The client's device cookie, if it sent one.
    pub device: Option<&'a str>,
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
    /// Login attempt counters.
    pub limiter: &'a LoginLimiter,
}

impl Accounts<'_> {
    /// Logs in with a name and password.
    pub async fn log_in(&self, attempt: Attempted<'_>) -> Result<Outcome, AppError> {
        if let Some(refused) = self.count(&attempt).await? {
            return Ok(refused);
        }
        match self
            .db
            .check_password(attempt.name, attempt.password)
            .await?
        {
            Some(user) => self.logged_in(&attempt, user).await,
            None => {
                self.limiter.failed(attempt.name).await?;
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
                    self.limiter.failed(attempt.name).await?;
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

    /// Moves the session to a fresh token for `user`, cart and history kept; the
    /// attempt is taken off the name's count, and the browser gets its device
    /// cookie.
    async fn logged_in(&self, attempt: &Attempted<'_>, user: UserId) -> Result<Outcome, AppError> {
        let device = self.limiter.succeeded(attempt.name).await?;
        let token = self
            .sessions
            .login(attempt.session, user, attempt.once)
            .await?;
        Ok(Outcome::LoggedIn {
            user,
            token,
            device,
        })
    }
}
