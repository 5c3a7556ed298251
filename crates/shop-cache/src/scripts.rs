//! The Lua scripts, each loaded once per process and run by hash (`EVALSHA`, with
//! `redis::Script` falling back to loading it when the server does not know it).
//!
//! A script is used where several commands must happen as one: Redis runs a script
//! with nothing else in between. Each script's source sits beside the module that
//! calls it (`src/cart/cart_set.lua` for `cart.rs`), one file each, and is loaded
//! here, the one list of them; `row_cache/batched.lua` holds helpers the row
//! cache's scripts start with (one command of each kind for a whole batch),
//! `session/end_token.lua` the session scripts that end a token, and
//! `cart/take_lines.lua` the scripts that take an order's lines out of a cart.

use std::sync::LazyLock;

use redis::Script;

/// A session's request: `recent:`, `login:` and `viewed:<token>` in one call (the
/// global `viewed:` is written by the view flusher).
pub static TOUCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("session/end_token.lua"),
        include_str!("session/views/touch.lua")
    ))
});

/// The view flusher's counts for the ranking, many items in one call.
pub static COUNT_VIEWS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("session/views/count_views.lua")));

/// The view flusher's distinct viewers, many items (of one slot) in one call.
pub static ADD_VIEWERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("session/views/add_viewers.lua")));

/// Login: moves cart and history to a fresh token and retires the old one.
pub static LOGIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("session/end_token.lua"),
        include_str!("session/login.lua")
    ))
});

/// The session cleaner's pick-and-delete.
pub static CLEAN_SESSIONS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("session_cleaner/clean_sessions.lua")));

/// The view rescale: trim `viewed:` and halve it, once per interval.
pub static RESCALE_VIEWS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("analytics/rescale_views.lua")));

/// An `EVAL` of `script` over `keys`, for a pipeline: a pipeline cannot load a
/// script a node lacks and run it again, as [`Script`] does for one call, so
/// scripts that go in pipelines are sent with their text (Redis keeps it cached).
pub fn eval(script: &str, keys: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    cmd
}

/// Replaces a cached row's copy after its source changed, if it is cached.
pub static REPLACE_ROW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("row_cache/replace_row.lua")));

/// Ends a flash sale now (its item was retired).
pub static SALE_END: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("flash_sale/sale_end.lua")));

/// Takes a lock (`SET NX PX`) unless its holder abandoned it already.
pub static TAKE_LOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lock/take.lua")));

/// Gives up a lock whose take went unanswered (marks it, lets it go).
pub static ABANDON_LOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lock/abandon.lua")));

/// Releases a `SET NX PX` lock only if the caller still holds it.
pub static UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lock/unlock.lua")));

/// The row cache's `schedule_row_cache`, on the server's clock.
pub static SCHEDULE_ROW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("row_cache/schedule_row.lua")));

/// A row refresher's claim of the earliest due rows (up to a batch).
pub static CLAIM_ROW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("row_cache/batched.lua"),
        include_str!("row_cache/claim_row.lua")
    ))
});

/// A row refresher's stores, removals or retries after reading the database, for
/// a batch in one call.
pub static FINISH_ROW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("row_cache/batched.lua"),
        include_str!("row_cache/finish_row.lua")
    ))
});

/// Records an order for the shopper insights (buyers, also-bought pairs).
pub static RECORD_ORDER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("insights/record_order.lua")));

/// Sets a cart line, refusing a new line on a full cart.
pub static CART_SET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("cart/cart_set.lua")));

/// Removes a cart line; an emptied guest's cart makes it a guest again.
pub static CART_REMOVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("cart/cart_remove.lua")));

/// Removes the lines an order took from an account's cart, once per order.
pub static CART_TAKE_ORDER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("cart/take_lines.lua"),
        include_str!("cart/cart_take_order.lua")
    ))
});

/// Removes the lines an order took, each only if its quantity is still the one
/// ordered.
pub static CART_TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("cart/take_lines.lua"),
        include_str!("cart/cart_take.lua")
    ))
});

/// Merges a session's cart into its user's, once per session.
pub static CART_MERGE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("cart/cart_merge.lua")));

/// Counts one login attempt in a fixed window and says whether it is allowed.
pub static LOGIN_ATTEMPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("login_limit/login_attempt.lua")));

/// Lists a session in its user's index and counts the index, in one call.
pub static INDEX_SESSION: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("session/user_sessions/index_session.lua")));

/// Ends one session: logout, or one of a user's if it is still theirs.
pub static END_SESSION: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("session/end_token.lua"),
        include_str!("session/user_sessions/end_session.lua")
    ))
});

/// Lets a login attempt on one account name through (and counts it), or not.
pub static LOGIN_NAME_GATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("login_limit/login_name_gate.lua")));

/// Settles a counted login attempt on one account name: a success uncounted, a
/// failure starting the slow-down.
pub static LOGIN_NAME_SETTLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("login_limit/login_name_settle.lua")));

/// Loads a flash sale (changing one of the same item that has not ended, else
/// replacing it).
pub static SALE_OPEN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("flash_sale/sale_open.lua")));

/// Decides one flash-sale buy: an earlier answer, a refusal or a reservation.
pub static SALE_RESERVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("flash_sale/sale_reserve.lua")));

/// Confirms, releases or voids a flash-sale reservation, once.
pub static SALE_SETTLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("flash_sale/sale_settle.lua")));

/// Sets a quiet sale's stock to the database's.
pub static SALE_CORRECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("flash_sale/sale_correct.lua")));
