//! One cart per account, driven from outside as shoppers on several browsers do:
//! a logged-in user's cart is the same on every device, a guest's cart joins it at
//! login (once, however the login is retried or raced), and logging out (here or
//! everywhere) ends sessions, not the cart. On one node here; on a cluster in
//! `cluster.rs`, through [`account_carts_follow_the_shopper`].

use std::collections::BTreeMap;

use crate::e2e::{Binary, request, seeded, stop};

/// The cart `/api/me` shows the cookie's session: item -> quantity.
fn cart(addr: &str, cookie: &str) -> BTreeMap<u64, u64> {
    let me = request(addr, "GET", "/api/me", Some(cookie), None);
    assert_eq!(me.status, 200, "{}", me.body);
    let me: serde_json::Value = serde_json::from_str(&me.body).unwrap();
    me["cart"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["item"].as_u64().unwrap(), l["quantity"].as_u64().unwrap()))
        .collect()
}

/// Puts `count` of `item` in the cookie's cart (a form post, as the page's).
fn put(addr: &str, cookie: &str, item: u64, count: u64) {
    let form = format!("item={item}&count={count}");
    let reply = request(addr, "POST", "/cart", Some(cookie), Some(&form));
    assert_eq!(reply.status, 303, "{}", reply.body);
}

/// A new browser: a visitor's cookie.
fn browser(addr: &str) -> String {
    request(addr, "GET", "/", None, None)
        .session_cookie()
        .expect("a visitor gets a cookie")
}

/// Logs `name` (a demo user) in on the browser holding `cookie`: its new cookie.
fn log_in_on(addr: &str, cookie: &str, name: &str) -> String {
    let form = format!("name={name}&password={name}-password");
    let reply = request(addr, "POST", "/login", Some(cookie), Some(&form));
    assert_eq!(reply.status, 303, "{}", reply.body);
    reply
        .session_cookie()
        .expect("a login moves to a new cookie")
}

/// The whole story against the shop at `addr` (demo users alice and bob).
pub fn account_carts_follow_the_shopper(addr: &str) {
    let lines = |pairs: &[(u64, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();

    // Alice fills her cart on the laptop (browser A), then logs in on the phone
    // (browser B) and sees it there.
    let laptop = log_in_on(addr, &browser(addr), "alice");
    put(addr, &laptop, 3, 2);
    let phone_guest = browser(addr);
    // On the phone, as a guest first: one more of item 3, and item 5.
    put(addr, &phone_guest, 3, 1);
    put(addr, &phone_guest, 5, 1);
    assert_eq!(cart(addr, &phone_guest), lines(&[(3, 1), (5, 1)]));
    let phone = log_in_on(addr, &phone_guest, "alice");
    // Merged at login: quantities added per item.
    assert_eq!(cart(addr, &phone), lines(&[(3, 3), (5, 1)]));
    assert_eq!(
        cart(addr, &laptop),
        lines(&[(3, 3), (5, 1)]),
        "the same on both"
    );
    // A change on one shows on the other at the next page.
    put(addr, &phone, 8, 4);
    assert_eq!(cart(addr, &laptop), lines(&[(3, 3), (5, 1), (8, 4)]));

    // The laptop logs out: it goes on with an empty guest cart; logged in again,
    // the cart is there.
    let out = request(addr, "POST", "/logout", Some(&laptop), Some(""));
    assert_eq!(out.status, 303, "{}", out.body);
    let laptop_guest = out.session_cookie().unwrap_or_else(|| browser(addr));
    assert!(cart(addr, &laptop_guest).is_empty());
    let laptop = log_in_on(addr, &laptop_guest, "alice");
    assert_eq!(cart(addr, &laptop), lines(&[(3, 3), (5, 1), (8, 4)]));

    // "Log out everywhere" from the phone: the other sessions end, the cart stays.
    let ended = request(
        addr,
        "POST",
        "/api/me/sessions/end-others",
        Some(&phone),
        Some(""),
    );
    assert!(ended.status < 400, "{} {}", ended.status, ended.body);
    assert!(cart(addr, &laptop).is_empty(), "the laptop is logged out");
    assert_eq!(cart(addr, &phone), lines(&[(3, 3), (5, 1), (8, 4)]));
    let tablet = log_in_on(addr, &browser(addr), "alice");
    assert_eq!(cart(addr, &tablet), lines(&[(3, 3), (5, 1), (8, 4)]));

    // Two logins of one guest's browser at once (a double submit): its cart joins
    // bob's once.
    let guest = browser(addr);
    put(addr, &guest, 7, 2);
    let logins: Vec<_> = (0..2)
        .map(|_| {
            let (addr, guest) = (addr.to_owned(), guest.clone());
            std::thread::spawn(move || {
                let form = "name=bob&password=bob-password";
                request(&addr, "POST", "/login", Some(&guest), Some(form))
            })
        })
        .collect();
    let mut bob = None;
    for login in logins {
        let reply = login.join().unwrap();
        if reply.status == 303 {
            bob = reply.session_cookie();
        }
    }
    let bob = bob.expect("a login went through");
    assert_eq!(cart(addr, &bob), lines(&[(7, 2)]), "merged once");
    // Bob's cart is not alice's.
    assert_eq!(cart(addr, &tablet), lines(&[(3, 3), (5, 1), (8, 4)]));
}

#[tokio::test]
async fn account_carts_follow_the_shopper_on_one_node() {
    let test_shop = seeded(30).await;
    let (server, addr) = test_shop.serve(&[]);
    account_carts_follow_the_shopper(&addr);
    assert!(stop(server).success());
}
