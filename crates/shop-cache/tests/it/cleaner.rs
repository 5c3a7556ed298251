use std::collections::{HashMap, HashSet};
use std::time::Duration;

use redis::AsyncCommands;
use shop_cache::cart::Carts;
use shop_cache::domain::ItemId;
use shop_cache::keys::{Keys, Shard};
use shop_cache::session::{SessionToken, Sessions, Touch};
use shop_cache::session_cleaner::{BadBatch, CleanerStep, SessionCleaner};
use tokio_util::sync::CancellationToken;

use crate::{Fixture, both_layouts};

/// The session shards the cleaner tests split the index into on a cluster: few
/// enough that a few dozen sessions give each shard an excess over its share of the
/// cap, so what is kept and removed can be counted exactly.
const SHARDS: u32 = 4;

/// A fresh token in `shard`.
fn token_in(keys: &Keys, shard: Shard) -> SessionToken {
    loop {
        let token = SessionToken::generate();
        if keys.shard_of(&token) == shard {
            return token;
        }
    }
}

/// `n` fresh tokens dealt over the shards in turn (token `i` in shard `i % S`), so
/// that any run of S consecutive tokens fills every shard once: with a cap that is a
/// multiple of S, the cleaner's per-shard shares (`cap / S`) add up to the same
/// sessions as one index capped at `cap` would keep.
fn dealt_tokens(keys: &Keys, n: usize) -> Vec<SessionToken> {
    let shards: Vec<Shard> = keys.shards().collect();
    (0..n)
        .map(|i| token_in(keys, shards[i % shards.len()]))
        .collect()
}

/// `n` sessions, oldest first, dealt over the shards, each with one viewed item and
/// one cart line; their views are written to the ranking.
async fn sessions_with_data(fx: &Fixture, n: usize) -> Vec<SessionToken> {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let tokens = dealt_tokens(&fx.keys, n);
    for (i, t) in tokens.iter().enumerate() {
        let item = ItemId::new(i as u64 % 50 + 1).unwrap();
        sessions
            .touch(t, Touch::request().view(item))
            .await
            .unwrap();
        carts.set(t, item, 1).await.unwrap();
    }
    sessions.flush_views().await.unwrap();
    tokens
}

/// The live sessions of each shard (members of its `recent:`).
async fn recent_by_shard(fx: &Fixture) -> HashMap<Shard, HashSet<String>> {
    let mut raw = fx.raw().await;
    let mut out = HashMap::new();
    for shard in fx.keys.shards() {
        let members: Vec<String> = raw.zrange(fx.keys.recent_in(shard), 0, -1).await.unwrap();
        out.insert(shard, members.into_iter().collect());
    }
    out
}

/// Every live session.
async fn recent(fx: &Fixture) -> HashSet<String> {
    recent_by_shard(fx).await.into_values().flatten().collect()
}

/// Every `viewed:<token>` and `cart:<token>` belongs to a live session of its shard.
async fn assert_no_orphans(fx: &Fixture) {
    let live = recent_by_shard(fx).await;
    for key in fx.all_keys().await {
        let mut per_session = false;
        let mut owned = false;
        for shard in fx.keys.shards() {
            let stems = [
                fx.keys.viewed_by_member(shard, ""),
                fx.keys.cart_member(shard, ""),
            ];
            for stem in &stems {
                // An empty rest is the book's global `viewed:`, not a session's key.
                if let Some(token) = key.strip_prefix(stem.as_str()).filter(|t| !t.is_empty()) {
                    per_session = true;
                    owned |= live[&shard].contains(token);
                }
            }
        }
        assert!(!per_session || owned, "orphan key {key}");
    }
}

/// Whether each of the session's own keys (history, cart) exists: 0, 1 or 2.
async fn own_keys(fx: &Fixture, t: &SessionToken) -> u64 {
    // Both carry the session's shard tag: one slot, one command.
    fx.raw()
        .await
        .exists(&[fx.keys.viewed_by(t), fx.keys.cart(t)])
        .await
        .unwrap()
}

both_layouts! {
async fn over_the_cap_by_n_removes_exactly_the_n_oldest(fx: Fixture) {
    let fx = fx.with_session_shards(SHARDS);
    // 32 sessions over a cap of 24: 8 too many, two in each of 4 shards.
    let tokens = sessions_with_data(&fx, 32).await;
    let login = Sessions::new(fx.conn.clone(), fx.keys.clone());
    // A survivor logged in (by the book's code), to check its login: entry stays.
    let mut raw = fx.raw().await;
    let _: () = raw
        .hset(fx.keys.login_of(&tokens[31]), tokens[31].expose(), 2)
        .await
        .unwrap();

    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 24, 100).unwrap();
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(8));
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Idle);

    let live = recent(&fx).await;
    assert_eq!(live.len(), 24);
    for (i, t) in tokens.iter().enumerate() {
        let exists = own_keys(&fx, t).await;
        if i < 8 {
            assert!(!live.contains(t.expose()), "session {i} should be gone");
            assert_eq!(exists, 0, "session {i}'s history and cart should be gone");
        } else {
            assert!(live.contains(t.expose()), "session {i} should remain");
            assert_eq!(exists, 2, "session {i}'s history and cart should remain");
        }
    }
    assert_eq!(login.check_token(&tokens[0]).await.unwrap(), None);
    assert!(login.check_token(&tokens[31]).await.unwrap().is_some());
    // The global view counts are not per-session data: cleaning keeps them.
    let views: u64 = raw.zcard(fx.keys.item_views()).await.unwrap();
    assert_eq!(views, 32);
    assert_no_orphans(&fx).await;
}

async fn the_cap_removes_every_guest_before_any_shopper(fx: Fixture) {
    let fx = fx.with_session_shards(SHARDS);
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let user = shop_cache::domain::UserId::new(7).unwrap();
    // The oldest: 16 shoppers (8 with a cart, 8 logged in); then 16 guests, newer.
    let mut shoppers = sessions_with_data(&fx, 8).await;
    for t in dealt_tokens(&fx.keys, 8) {
        shoppers.push(sessions.login(&t, user, None).await.unwrap());
    }
    let guests = dealt_tokens(&fx.keys, 16);
    for t in &guests {
        sessions.touch(t, Touch::request().view(ItemId::new(1).unwrap())).await.unwrap();
    }
    // A cap of 20: 12 too many. The 12 go from the guests, though every shopper
    // is older; then the next step at a cap of 8 takes the last 4 guests and 4 of
    // the shoppers, the oldest.
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 20, 100).unwrap();
    while cleaner.step().await.unwrap() != CleanerStep::Idle {}
    let live = recent(&fx).await;
    assert_eq!(live.len(), 20);
    for t in &shoppers {
        assert!(live.contains(t.expose()), "a shopper went while guests were left");
    }
    assert_eq!(guests.iter().filter(|t| live.contains(t.expose())).count(), 4);

    // One step: the last guests, then the oldest shoppers, in each shard.
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 8, 100).unwrap();
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(12));
    let live = recent(&fx).await;
    assert_eq!(live.len(), 8);
    assert!(guests.iter().all(|t| !live.contains(t.expose())), "every guest first");
    assert_no_orphans(&fx).await;
}

async fn the_cap_removes_anonymous_carts_before_any_logged_in_shopper(fx: Fixture) {
    let fx = fx.with_session_shards(SHARDS);
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let user = shop_cache::domain::UserId::new(7).unwrap();
    let item = ItemId::new(3).unwrap();
    // The oldest: 8 logged-in shoppers, each with a cart line.
    let mut logged_in = Vec::new();
    for t in dealt_tokens(&fx.keys, 8) {
        let t = sessions.login(&t, user, None).await.unwrap();
        carts.set(&t, item, 1).await.unwrap();
        logged_in.push(t);
    }
    // Then 16 carts nobody logged in to, as cookieless cart posts start them
    // (one of them a guest first); then 8 guests, the newest.
    let anonymous = dealt_tokens(&fx.keys, 16);
    sessions.touch(&anonymous[0], Touch::request()).await.unwrap();
    for t in &anonymous {
        carts.set(t, item, 1).await.unwrap();
    }
    let guests = dealt_tokens(&fx.keys, 8);
    for t in &guests {
        sessions.touch(t, Touch::request()).await.unwrap();
    }
    let mut raw = fx.raw().await;
    let mut listed = 0u64;
    for shard in fx.keys.shards() {
        listed += raw.zcard::<_, u64>(fx.keys.anonymous_in(shard)).await.unwrap();
    }
    assert_eq!(listed, 16, "every cart without a login, and only those");

    // A cap of 12: 20 too many. Every guest goes, then the 12 oldest anonymous
    // carts, though every logged-in shopper is older.
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 12, 100).unwrap();
    while cleaner.step().await.unwrap() != CleanerStep::Idle {}
    let live = recent(&fx).await;
    assert_eq!(live.len(), 12);
    for t in &logged_in {
        assert!(live.contains(t.expose()), "a logged-in shopper went while carts without a login were left");
    }
    assert!(guests.iter().all(|t| !live.contains(t.expose())), "every guest first");
    assert!(anonymous[12..].iter().all(|t| live.contains(t.expose())), "the newest anonymous carts stay");

    // A cap of 4: the last anonymous carts, then the oldest logged-in shoppers.
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 4, 100).unwrap();
    while cleaner.step().await.unwrap() != CleanerStep::Idle {}
    let live = recent(&fx).await;
    assert_eq!(live.len(), 4);
    assert!(anonymous.iter().all(|t| !live.contains(t.expose())));
    assert!(logged_in[4..].iter().all(|t| live.contains(t.expose())), "the newest logins stay");
    let mut listed = 0u64;
    for shard in fx.keys.shards() {
        listed += raw.zcard::<_, u64>(fx.keys.anonymous_in(shard)).await.unwrap();
    }
    assert_eq!(listed, 0, "removed sessions leave anonymous:");
    assert_no_orphans(&fx).await;
}

async fn a_cart_emptied_or_logged_in_leaves_the_anonymous_list(fx: Fixture) {
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let (a, b) = (SessionToken::generate(), SessionToken::generate());
    let item = ItemId::new(3).unwrap();
    carts.set(&a, item, 1).await.unwrap();
    carts.set(&b, item, 1).await.unwrap();
    let mut raw = fx.raw().await;
    let lister = raw.clone();
    let listed = |t: &SessionToken| {
        let key = fx.keys.anonymous_of(t).to_owned();
        let token = t.expose().to_owned();
        let mut raw = lister.clone();
        async move { raw.zscore::<_, _, Option<f64>>(key, token).await.unwrap().is_some() }
    };
    assert!(listed(&a).await && listed(&b).await);
    // Emptied: a guest again.
    carts.set(&a, item, 0).await.unwrap();
    assert!(!listed(&a).await);
    let guest: Option<f64> = raw.zscore(fx.keys.guests_of(&a), a.expose()).await.unwrap();
    assert!(guest.is_some(), "an emptied cart's session is a guest again");
    // Logged in: neither.
    let b2 = sessions.login(&b, shop_cache::domain::UserId::new(4).unwrap(), None).await.unwrap();
    assert!(!listed(&b).await && !listed(&b2).await);
    // A touch keeps the time of a listed one.
    let c = SessionToken::generate();
    carts.set(&c, item, 1).await.unwrap();
    let first: f64 = raw.zscore(fx.keys.anonymous_of(&c), c.expose()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        sessions.touch(&c, Touch::request()).await.unwrap();
        let now: f64 = raw.zscore(fx.keys.anonymous_of(&c), c.expose()).await.unwrap();
        let seen: f64 = raw.zscore(fx.keys.recent_of(&c), c.expose()).await.unwrap();
        assert_eq!(now, seen, "anonymous: holds the last visit");
        if now > first {
            break;
        }
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn an_anonymous_cart_idle_past_its_lifetime_leaves_the_index_with_it(fx: Fixture) {
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let t = SessionToken::generate();
    carts.set(&t, ItemId::new(3).unwrap(), 1).await.unwrap();
    let lifetimes = shop_cache::session::Lifetimes {
        idle: Duration::from_secs(1),
        guest_idle: Duration::from_secs(1),
        absolute: Duration::from_secs(90 * 24 * 3600),
    };
    // Under the cap: it goes only by its lifetime.
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 1_000, 100)
        .unwrap()
        .with_lifetimes(lifetimes);
    let mut raw = fx.raw().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while recent(&fx).await.contains(t.expose()) {
        assert!(std::time::Instant::now() < deadline, "the idle cart was never removed");
        cleaner.step().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let listed: Option<f64> = raw.zscore(fx.keys.anonymous_of(&t), t.expose()).await.unwrap();
    assert_eq!(listed, None, "no entry left behind in anonymous:");
    assert_no_orphans(&fx).await;
}

async fn idle_guests_expire_whatever_the_cap_and_shoppers_stay(fx: Fixture) {
    let fx = fx.with_session_shards(SHARDS);
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let shoppers = sessions_with_data(&fx, 8).await;
    let guests = dealt_tokens(&fx.keys, 8);
    for t in &guests {
        sessions.touch(t, Touch::request()).await.unwrap();
    }
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 1_000, 100)
        .unwrap()
        .with_guest_idle(Duration::from_secs(1));
    // Under the cap and nobody idle yet: nothing goes.
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Idle);
    // One guest keeps coming back; the others are idle past a second.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        sessions.touch(&guests[0], Touch::request()).await.unwrap();
        cleaner.step().await.unwrap();
        let live = recent(&fx).await;
        if guests[1..].iter().all(|t| !live.contains(t.expose())) {
            assert!(live.contains(guests[0].expose()), "a guest seen just now stays");
            for t in &shoppers {
                assert!(live.contains(t.expose()), "a shopper never idles out as a guest");
            }
            break;
        }
        assert!(std::time::Instant::now() < deadline, "idle guests were never removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_no_orphans(&fx).await;
}

async fn each_shard_keeps_its_share_of_the_cap_and_loses_its_oldest(fx: Fixture) {
    // The default shard count, sessions spread by their random tokens (unevenly):
    // every shard keeps its newest `cap / S` (rounded up) and loses the rest.
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let tokens: Vec<SessionToken> = (0..300).map(|_| SessionToken::generate()).collect();
    for t in &tokens {
        sessions
            .touch(t, Touch::request().view(ItemId::new(1).unwrap()))
            .await
            .unwrap();
    }
    let shards = fx.keys.shards().len() as u64;
    let cap: u64 = 100;
    let share = cap.div_ceil(shards) as usize;
    let mut by_shard: HashMap<Shard, Vec<&SessionToken>> = HashMap::new();
    for t in &tokens {
        by_shard.entry(fx.keys.shard_of(t)).or_default().push(t);
    }
    let expected_gone: HashSet<&str> = by_shard
        .values()
        .flat_map(|oldest_first| {
            let excess = oldest_first.len().saturating_sub(share);
            oldest_first[..excess].iter().map(|t| t.expose())
        })
        .collect();
    assert!(!expected_gone.is_empty());

    let batch = shop_cache::session_cleaner::MAX_BATCH;
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), cap, batch).unwrap();
    assert_eq!(
        cleaner.step().await.unwrap(),
        CleanerStep::Cleaned(expected_gone.len() as u64)
    );
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Idle);
    let live = recent(&fx).await;
    for t in &tokens {
        assert_eq!(
            live.contains(t.expose()),
            !expected_gone.contains(t.expose()),
            "session in shard {}",
            fx.keys.shard_of(t).get()
        );
        let exists = own_keys(&fx, t).await;
        assert_eq!(exists, u64::from(live.contains(t.expose())));
    }
    assert!(live.len() as u64 <= cap + shards);
    assert_no_orphans(&fx).await;
}

async fn a_step_removes_at_most_a_batch(fx: Fixture) {
    let fx = fx.with_session_shards(SHARDS);
    // 25 sessions per shard; a batch is per shard.
    let shards = fx.keys.shards().len() as u64;
    let tokens = sessions_with_data(&fx, 25 * shards as usize).await;
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 0, 10).unwrap();
    assert_eq!(
        cleaner.step().await.unwrap(),
        CleanerStep::Cleaned(10 * shards)
    );
    assert_eq!(
        cleaner.step().await.unwrap(),
        CleanerStep::Cleaned(10 * shards)
    );
    assert_eq!(
        cleaner.step().await.unwrap(),
        CleanerStep::Cleaned(5 * shards)
    );
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Idle);
    // What is left is item-level data (view counts, distinct viewers, the view
    // writers' last calls), not sessions'.
    let window = shop_cache::insights::current_window();
    let mut item_level: HashSet<String> = HashSet::from([fx.keys.item_views().to_owned()]);
    for n in 1..=50 {
        for w in [window - 1, window] {
            item_level.insert(fx.keys.viewers(ItemId::new(n).unwrap(), w));
        }
    }
    let left = fx.all_keys().await;
    assert!(left.contains(&fx.keys.item_views().to_owned()), "{left:?}");
    let writers = fx.keys.ranking_writer("");
    assert!(
        left.iter()
            .all(|k| item_level.contains(k) || k.starts_with(&writers)),
        "{left:?}"
    );
    for t in &tokens {
        assert_eq!(own_keys(&fx, t).await, 0);
    }
}

async fn batch_must_be_in_range(fx: Fixture) {
    assert!(matches!(
        SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 10, 0),
        Err(BadBatch::Batch(0))
    ));
    assert!(SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 10, 2_001).is_err());
}

async fn a_session_touched_after_the_pick_survives(fx: Fixture) {
    // The book's race, made deterministic: a cleaner reads the oldest sessions with
    // their last-seen times, one of them is seen again, then the cleaner's script
    // runs on what it read. The session seen again must survive; the next oldest
    // is not taken in its place within this call (it was not picked).
    let fx = fx.with_session_shards(SHARDS);
    let shard = fx.keys.shards().next().unwrap();
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let tokens: Vec<SessionToken> = (0..5).map(|_| token_in(&fx.keys, shard)).collect();
    for t in &tokens {
        sessions
            .touch(t, Touch::request().view(ItemId::new(1).unwrap()))
            .await
            .unwrap();
    }
    let mut raw = fx.raw().await;
    let recent_key = fx.keys.recent_in(shard);
    // The pick, as the cleaner makes it: the two oldest guests (cap 3), and the
    // bound of their index (the newer one's time).
    let picked: Vec<(String, String)> = redis::cmd("ZRANGE")
        .arg(fx.keys.guests_in(shard))
        .arg(0)
        .arg(1)
        .arg("WITHSCORES")
        .query_async(&mut raw)
        .await
        .unwrap();
    let picked_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert_eq!(picked[0].0, tokens[0].expose());
    assert_eq!(picked[1].0, tokens[1].expose());
    // Session 0 comes back between the pick and the delete.
    sessions.touch(&tokens[0], Touch::request()).await.unwrap();

    let mut call = shop_cache::scripts::CLEAN_SESSIONS.prepare_invoke();
    // Picked from guests: for the excess; picking no more (a batch of 0).
    call.key(recent_key)
        .key(fx.keys.login_in(shard))
        .key(fx.keys.guests_in(shard))
        .key(fx.keys.logins_in(shard))
        .key(fx.keys.anonymous_in(shard))
        .arg(3)
        .arg(86_400)
        .arg(30 * 86_400)
        .arg(90 * 86_400)
        .arg(0)
        .arg(format!("{picked_at:.6}"))
        // No idle, no login candidates; two guests up to the newer one's time; no
        // anonymous, no oldest.
        .arg(0)
        .arg("")
        .arg(0)
        .arg("")
        .arg(2)
        .arg(&picked[1].1)
        .arg(0)
        .arg("")
        .arg(0)
        .arg("")
        // Keys given, as on a cluster (the script does not name them itself).
        .arg("")
        .arg("");
    for (member, _) in &picked {
        call.key(fx.keys.viewed_by_member(shard, member))
            .key(fx.keys.cart_member(shard, member))
            .arg(member);
    }
    type Kinds = Vec<(String, Vec<String>)>;
    let (removed, _micros, _mended, _owners, next, _at): (u64, u64, u64, Vec<String>, Kinds, String) =
        call.invoke_async(&mut raw).await.unwrap();
    assert!(
        next.iter().all(|(_, tokens)| tokens.is_empty()),
        "a batch of 0 picks nothing"
    );
    assert_eq!(removed, 1, "only the session not seen since the pick");
    let live = recent(&fx).await;
    assert!(
        live.contains(tokens[0].expose()),
        "the session seen again survives"
    );
    assert!(!live.contains(tokens[1].expose()));
    assert!(live.contains(tokens[2].expose()), "not picked, not removed");
    assert_eq!(sessions.recently_viewed(&tokens[0]).await.unwrap().len(), 1);
    assert_eq!(own_keys(&fx, &tokens[1]).await, 0);

    // The next step sees it as the newest, and takes the oldest left instead (a cap
    // that leaves this shard 3).
    let cap = 3 * fx.keys.shards().len() as u64;
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), cap, 100).unwrap();
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(1));
    let live = recent(&fx).await;
    assert!(live.contains(tokens[0].expose()));
    assert!(!live.contains(tokens[2].expose()));
    assert_no_orphans(&fx).await;
}

async fn a_step_is_one_call_per_shard_and_skips_candidates_seen_since_their_pick(fx: Fixture) {
    // 10 shoppers a shard, cap 0, a batch of 3: each step is one script call per
    // shard. On a cluster it removes the 3 candidates the last call picked and
    // picks the next 3; on one node it picks and removes the 3 oldest at once.
    let fx = fx.with_session_shards(SHARDS);
    let shards = fx.keys.shards().len();
    let on_one_node = fx.keys.session_stems(fx.keys.shards().next().unwrap()).is_some();
    let tokens = sessions_with_data(&fx, 10 * shards).await;
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 0, 3).unwrap();
    // The first step has nothing carried over. On a cluster: a call that picks,
    // then one that removes and picks the next (sessions 3, 4 and 5 of each shard).
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(3 * shards as u64));
    // Session 3 of every shard is seen again (on a cluster, after its pick).
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    for t in &tokens[3 * shards..4 * shards] {
        sessions.touch(t, Touch::request()).await.unwrap();
    }
    let sent = fx.conn.commands_sent();
    // On a cluster the candidate seen again is skipped (2 go); on one node it is
    // the newest now, and the next 3 oldest go.
    let second = if on_one_node { 3 } else { 2 };
    assert_eq!(
        cleaner.step().await.unwrap(),
        CleanerStep::Cleaned(second * shards as u64)
    );
    assert_eq!(
        fx.conn.commands_sent() - sent,
        shards as u64,
        "one call per shard"
    );
    let live = recent(&fx).await;
    let kept_from = if on_one_node { 7 } else { 6 } * shards;
    for (i, t) in tokens.iter().enumerate() {
        let kept = (3 * shards..4 * shards).contains(&i) || i >= kept_from;
        assert_eq!(live.contains(t.expose()), kept, "session {i}");
    }
    while cleaner.step().await.unwrap() != CleanerStep::Idle {}
    assert!(recent(&fx).await.is_empty(), "the ones seen again go later");
    assert_no_orphans(&fx).await;
}

async fn guests_arriving_between_steps_do_not_hold_up_shoppers_over_the_cap(fx: Fixture) {
    // The shoppers alone are over the cap (0): they must go, though a new guest
    // arrives in every shard before every step; each newcomer goes too, after
    // being picked (guests first) by the step after its arrival.
    let fx = fx.with_session_shards(SHARDS);
    let shards = fx.keys.shards().len();
    let shoppers = sessions_with_data(&fx, 6 * shards).await;
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 0, 2).unwrap();
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let mut guests = Vec::new();
    for _ in 0..20 {
        cleaner.step().await.unwrap();
        let live = recent(&fx).await;
        if shoppers.iter().all(|t| !live.contains(t.expose())) {
            break;
        }
        for t in dealt_tokens(&fx.keys, shards) {
            sessions.touch(&t, Touch::request()).await.unwrap();
            guests.push(t);
        }
    }
    let live = recent(&fx).await;
    assert!(
        shoppers.iter().all(|t| !live.contains(t.expose())),
        "the shoppers over the cap went while guests kept coming"
    );
    while cleaner.step().await.unwrap() != CleanerStep::Idle {}
    assert!(recent(&fx).await.is_empty(), "and the guests");
    assert_no_orphans(&fx).await;
}

async fn one_step_takes_the_guest_then_the_oldest_shoppers_up_to_the_batch(fx: Fixture) {
    // One shard, a batch of 3, cap 0: 3 shoppers (the oldest), then a guest. The
    // first step picks the guest and, no guest being left, the 2 oldest shoppers,
    // and removes all three; the newest shopper waits for the next step.
    let fx = fx.with_session_shards(SHARDS);
    let shard = fx.keys.shards().next().unwrap();
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let shoppers: Vec<SessionToken> = (0..3).map(|_| token_in(&fx.keys, shard)).collect();
    for t in &shoppers {
        carts.set(t, ItemId::new(1).unwrap(), 1).await.unwrap();
    }
    let guest = token_in(&fx.keys, shard);
    sessions.touch(&guest, Touch::request()).await.unwrap();
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 0, 3).unwrap();
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(3));
    let live = recent(&fx).await;
    assert!(!live.contains(guest.expose()));
    assert!(!live.contains(shoppers[0].expose()) && !live.contains(shoppers[1].expose()));
    assert!(live.contains(shoppers[2].expose()));
    while cleaner.step().await.unwrap() != CleanerStep::Idle {}
    assert_no_orphans(&fx).await;
}

/// Two cleaners run while sessions are being touched: nothing touched after the
/// cleaning started is lost, nothing is removed twice, nothing is left orphaned.
#[multi_thread]
async fn concurrent_cleaners_keep_sessions_touched_during_cleaning(fx: Fixture) {
    // Multiples of the shard count, so every shard holds the same share.
    const OLD: usize = 2_000;
    const CAP: u64 = 1_000;
    const NEW: usize = 300;
    const RETOUCHED: usize = 200;

    let fx = fx.with_session_shards(SHARDS);
    let old = sessions_with_data(&fx, OLD).await;

    // Fresh activity during cleaning: new sessions, and the newest old sessions
    // seen again (they are never the oldest, so no cleaner may take them).
    let mut fresh = dealt_tokens(&fx.keys, NEW);
    fresh.extend(old[OLD - RETOUCHED..].iter().cloned());

    let done = CancellationToken::new();
    let cleaner = |fx: &Fixture, done: CancellationToken| {
        let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), CAP, 7).unwrap();
        async move {
            let mut removed = 0;
            loop {
                match cleaner.step().await.unwrap() {
                    CleanerStep::Cleaned(n) => removed += n,
                    CleanerStep::Idle if done.is_cancelled() => return removed,
                    CleanerStep::Idle => tokio::task::yield_now().await,
                }
            }
        }
    };
    let a = tokio::spawn(cleaner(&fx, done.clone()));
    let b = tokio::spawn(cleaner(&fx, done.clone()));

    // Shoppers all (a cart line first, which starts a new session as a shopper's),
    // so the cleaner orders them by age alone.
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    for (i, t) in fresh.iter().enumerate() {
        let item = ItemId::new(1_000 + i as u64).unwrap();
        carts.set(t, item, 1).await.unwrap();
        sessions.touch(t, Touch::request().view(item)).await.unwrap();
    }
    done.cancel();
    let removed = a.await.unwrap() + b.await.unwrap();

    let live = recent(&fx).await;
    assert_eq!(live.len() as u64, CAP);
    let mut raw = fx.raw().await;
    for t in &fresh {
        assert!(
            live.contains(t.expose()),
            "a session touched during cleaning was lost"
        );
        let history: u64 = raw.zcard(fx.keys.viewed_by(t)).await.unwrap();
        assert!(history >= 1, "a fresh session lost its history");
    }
    // Exactly the oldest untouched sessions went, each counted once.
    let expected_gone = (OLD + NEW) as u64 - CAP;
    assert_eq!(removed, expected_gone, "sum of both cleaners' counts");
    for (i, t) in old.iter().enumerate() {
        assert_eq!(
            live.contains(t.expose()),
            i as u64 >= expected_gone,
            "old session {i}"
        );
    }
    assert_no_orphans(&fx).await;
}

async fn the_loop_cleans_then_stops_promptly_on_shutdown(fx: Fixture) {
    let fx = fx.with_session_shards(SHARDS);
    sessions_with_data(&fx, 250).await;
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 20, 100).unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(shop_cache::daemon::run(cleaner, shutdown.clone()));

    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sessions.count().await.unwrap() > 20 {
        assert!(tokio::time::Instant::now() < deadline, "loop did not clean");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Now idle (sleeping its 1 s pause): shutdown must not wait for the pause.
    tokio::time::sleep(Duration::from_millis(50)).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_millis(500), task)
        .await
        .expect("the loop stops before its idle pause ends")
        .unwrap();
    assert_eq!(sessions.count().await.unwrap(), 20);
    assert_no_orphans(&fx).await;
}
}

both_layouts! {
async fn a_guest_logged_in_or_given_a_cart_behind_the_shops_back_is_not_removed_as_a_guest(fx: Fixture) {
    let fx = fx.with_session_shards(SHARDS);
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let shard = fx.keys.shards().next().unwrap();
    let tokens: Vec<SessionToken> = (0..8).map(|_| token_in(&fx.keys, shard)).collect();
    for t in &tokens {
        sessions.touch(t, Touch::request()).await.unwrap();
    }
    // The book's own code logs one in and fills another's cart, writing login: and
    // cart: only: both still listed in guests:.
    let mut raw = fx.raw().await;
    let _: () = raw.hset(fx.keys.login_of(&tokens[0]), tokens[0].expose(), 5).await.unwrap();
    let _: () = raw.hset(fx.keys.cart(&tokens[1]), 9, 1).await.unwrap();
    // A cap of two in their shard: every guest goes; those two are no guests, so
    // they stay.
    let cap = 2 * fx.keys.shards().len() as u64;
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), cap, 100).unwrap();
    while cleaner.step().await.unwrap() != CleanerStep::Idle {}
    let live = recent(&fx).await;
    assert_eq!(live.len(), 2);
    assert!(live.contains(tokens[0].expose()) && live.contains(tokens[1].expose()), "{live:?}");
    assert_no_orphans(&fx).await;
}

async fn a_guest_seen_again_behind_the_shops_back_is_judged_by_its_last_visit(fx: Fixture) {
    let fx = fx.with_session_shards(SHARDS);
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let shard = fx.keys.shards().next().unwrap();
    let (a, b) = (token_in(&fx.keys, shard), token_in(&fx.keys, shard));
    sessions.touch(&a, Touch::request()).await.unwrap();
    sessions.touch(&b, Touch::request()).await.unwrap();
    // The book's update_token touches `a` again: recent: only, guests: not.
    let mut raw = fx.raw().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 1.0;
    let _: () = raw.zadd(fx.keys.recent_in(shard), a.expose(), now).await.unwrap();
    // One of the two must go: `b`, the one not seen since.
    let cap = fx.keys.shards().len() as u64;
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), cap, 100).unwrap();
    while cleaner.step().await.unwrap() != CleanerStep::Idle {}
    let live = recent(&fx).await;
    assert!(live.contains(a.expose()) && !live.contains(b.expose()), "{live:?}");
    let seen: Option<f64> = raw.zscore(fx.keys.guests_in(shard), a.expose()).await.unwrap();
    assert_eq!(seen, Some(now), "its guest entry set right");
}

async fn a_guest_seen_again_behind_the_shops_back_still_holds_up_the_shoppers(fx: Fixture) {
    // One shard, cap 0, a batch of 2: two old guests, then a shopper, then a guest.
    // The first step removes the two old guests and picks the last guest and, no
    // guest being left, the shopper. The book's code then touches that guest
    // (recent: only): the next step sets its guest entry right and must keep the
    // shopper, since the guest it was picked behind is still there.
    let fx = fx.with_session_shards(SHARDS);
    let shard = fx.keys.shards().next().unwrap();
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let carts = Carts::new(fx.conn.clone(), fx.keys.clone(), 99);
    let old: Vec<SessionToken> = (0..2).map(|_| token_in(&fx.keys, shard)).collect();
    for t in &old {
        sessions.touch(t, Touch::request()).await.unwrap();
    }
    let shopper = token_in(&fx.keys, shard);
    carts.set(&shopper, ItemId::new(1).unwrap(), 1).await.unwrap();
    let guest = token_in(&fx.keys, shard);
    sessions.touch(&guest, Touch::request()).await.unwrap();
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 0, 2).unwrap();
    assert_eq!(cleaner.step().await.unwrap(), CleanerStep::Cleaned(2));
    let mut raw = fx.raw().await;
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 1.0;
    let _: () = raw.zadd(fx.keys.recent_in(shard), guest.expose(), later).await.unwrap();
    cleaner.step().await.unwrap();
    let live = recent(&fx).await;
    assert!(live.contains(shopper.expose()), "the shopper waits for the guest: {live:?}");
    assert!(live.contains(guest.expose()), "{live:?}");
    let seen: Option<f64> = raw.zscore(fx.keys.guests_in(shard), guest.expose()).await.unwrap();
    assert_eq!(seen, Some(later), "its guest entry set right");
    while cleaner.step().await.unwrap() != CleanerStep::Idle {}
    assert!(recent(&fx).await.is_empty());
    assert_no_orphans(&fx).await;
}

async fn a_session_scored_ahead_of_the_clock_is_removed_not_picked_forever(fx: Fixture) {
    // The book's code on a host whose clock is an hour ahead wrote a session; over
    // the cap (0) it goes like any other, and the cleaner comes to rest.
    let fx = fx.with_session_shards(SHARDS);
    let shard = fx.keys.shards().next().unwrap();
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let (ahead, guest) = (token_in(&fx.keys, shard), token_in(&fx.keys, shard));
    sessions.touch(&guest, Touch::request()).await.unwrap();
    let mut raw = fx.raw().await;
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 3_600.0;
    let _: () = raw.zadd(fx.keys.recent_in(shard), ahead.expose(), later).await.unwrap();
    let _: () = raw.hset(fx.keys.cart(&ahead), 3, 1).await.unwrap();
    let cleaner = SessionCleaner::new(fx.conn.clone(), fx.keys.clone(), 0, 10).unwrap();
    let mut steps = 0;
    while cleaner.step().await.unwrap() != CleanerStep::Idle {
        steps += 1;
        assert!(steps < 10, "the cleaner never came to rest");
    }
    assert!(recent(&fx).await.is_empty());
    assert_no_orphans(&fx).await;
}

async fn an_upgrade_lists_the_guests_it_finds(fx: Fixture) {
    let fx = fx.with_session_shards(SHARDS);
    let sessions = Sessions::new(fx.conn.clone(), fx.keys.clone());
    let tokens = dealt_tokens(&fx.keys, 12);
    let mut raw = fx.raw().await;
    // Sessions as a shop before guests: wrote them: recent:, some logged in, some
    // with a cart.
    for (i, t) in tokens.iter().enumerate() {
        let _: () = raw.zadd(fx.keys.recent_of(t), t.expose(), 1_000 + i as i64).await.unwrap();
        match i % 3 {
            0 => { let _: () = raw.hset(fx.keys.login_of(t), t.expose(), 4).await.unwrap(); }
            1 => { let _: () = raw.hset(fx.keys.cart(t), 2, 1).await.unwrap(); }
            _ => {}
        }
    }
    assert_eq!(sessions.index_guests().await.unwrap(), 8, "4 guests, 4 anonymous carts");
    assert_eq!(sessions.index_guests().await.unwrap(), 0, "once");
    for (i, t) in tokens.iter().enumerate() {
        let seen: Option<f64> = raw.zscore(fx.keys.guests_of(t), t.expose()).await.unwrap();
        assert_eq!(seen, (i % 3 == 2).then_some(1_000.0 + i as f64), "session {i}");
        let seen: Option<f64> = raw.zscore(fx.keys.anonymous_of(t), t.expose()).await.unwrap();
        assert_eq!(seen, (i % 3 == 1).then_some(1_000.0 + i as f64), "session {i}");
    }
}
}
