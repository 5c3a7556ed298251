//! The error type of the workflows.

use shop_cache::CacheError;
use shop_db::DbError;

/// What can stop a workflow. The web tier maps each to a status in one place.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Redis failed, or refused the input.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The outcome of this idempotency key is not known yet (an earlier request
    /// with it is still being answered, or its order could not be recorded and
    /// waits for the reconciler): retry with the same key shortly.
    #[error("the outcome is not known yet; retry with the same key")]
    Pending,
    /// A flash buy's unit was reserved but its order could not be written (the
    /// database failed or was busy): the reservation is settled by the
    /// reconciler once `settled_within` has passed, by what the database then
    /// holds (almost always: not bought, the unit back on sale). The same key
    /// then gets that answer.
    #[error("the order could not be written; its outcome is settled within {settled_within:?}")]
    NotRecorded {
        /// How long until the reservation is settled.
        settled_within: std::time::Duration,
    },
    /// Another checkout of this cart held it for longer than a checkout waits
    /// for it (`orders::CHECKOUT_WAIT`); nothing was done: look at the cart
    /// again once it is over.
    #[error("another checkout of this cart is in progress")]
    CartBusy,
}
