//! A shopper's sessions through the router: the list, ending one or the others,
//! the password change, the cap per user.

use axum::http::{StatusCode, header};
use shop_testapp::{PASSWORD, TestApp, cookie_of, json, text};
use shop_web::WebConfig;

/// The sessions `/api/me/sessions` lists for `cookie`.
async fn sessions(app: &TestApp, cookie: &str) -> Vec<serde_json::Value> {
    let resp = app.get("/api/me/sessions", Some(cookie)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    json(resp).await["sessions"].as_array().unwrap().clone()
}

/// The user `/api/me` sees for `cookie` (null when logged out).
async fn who(app: &TestApp, cookie: &str) -> serde_json::Value {
    app.me(cookie).await["user"]["name"].clone()
}

#[tokio::test]
async fn a_session_ended_on_the_devices_page_is_logged_out_on_its_next_request() {
    let app = TestApp::start().await;
    let phone = app.logged_in("dana").await;
    let laptop = app.log_in("dana").await;
    let list = sessions(&app, &laptop).await;
    assert_eq!(list.len(), 2);
    let token = |c: &str| c.split_once('=').unwrap().1.to_owned();
    for s in &list {
        let id = s["id"].as_str().unwrap();
        assert!(
            !id.contains(&token(&phone)) && !id.contains(&token(&laptop)),
            "opaque ids"
        );
        assert!(s["created"].as_u64().unwrap() > 0 && s["last_seen"].as_u64().unwrap() > 0);
    }
    let current: Vec<bool> = list
        .iter()
        .map(|s| s["current"].as_bool().unwrap())
        .collect();
    assert_eq!(current.iter().filter(|c| **c).count(), 1);
    let phone_id = list
        .iter()
        .find(|s| !s["current"].as_bool().unwrap())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Not logged in, malformed, unknown: refused, nothing ended.
    let guest = app.visitor().await;
    let end = |id: &str| format!("/api/me/sessions/{id}/end");
    assert_eq!(
        app.post(&end(&phone_id), Some(&guest), "", true)
            .await
            .status(),
        StatusCode::UNAUTHORIZED
    );
    for bad in ["nope", "0123456789abcdef01234567"] {
        assert_eq!(
            app.post(&end(bad), Some(&laptop), "", true).await.status(),
            StatusCode::NOT_FOUND,
            "{bad}"
        );
    }
    assert_eq!(who(&app, &phone).await, "dana");

    // Ended from the laptop: the phone's next request is a logged-out visitor's.
    let resp = app.post(&end(&phone_id), Some(&laptop), "", true).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(json(resp).await["ended"], true);
    assert_eq!(who(&app, &phone).await, serde_json::Value::Null);
    assert_eq!(who(&app, &laptop).await, "dana");
    assert_eq!(sessions(&app, &laptop).await.len(), 1);
    // A form post answers with a redirect back to the account page.
    let third = app.log_in("dana").await;
    let third_id = sessions(&app, &third)
        .await
        .into_iter()
        .find(|s| s["current"] == true)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = app.post(&end(&third_id), Some(&laptop), "", false).await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[header::LOCATION], "/account");
    assert_eq!(who(&app, &third).await, serde_json::Value::Null);
    // Ending the session asking is a logout, with a new cookie.
    let laptop_id = sessions(&app, &laptop).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = app.post(&end(&laptop_id), Some(&laptop), "", true).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(cookie_of(&resp).is_some_and(|c| c != laptop));
    assert_eq!(who(&app, &laptop).await, serde_json::Value::Null);
}

#[tokio::test]
async fn log_out_everywhere_else_keeps_only_this_session() {
    let app = TestApp::start().await;
    let first = app.logged_in("erik").await;
    let mut others = vec![first];
    for _ in 0..3 {
        others.push(app.log_in("erik").await);
    }
    let here = app.log_in("erik").await;
    let stranger = app.logged_in("fay").await;
    let resp = app
        .post("/api/me/sessions/end-others", Some(&here), "", true)
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(json(resp).await["ended"], 4);
    for c in &others {
        assert_eq!(who(&app, c).await, serde_json::Value::Null);
    }
    assert_eq!(who(&app, &here).await, "erik");
    assert_eq!(who(&app, &stranger).await, "fay");
    let list = sessions(&app, &here).await;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["current"], true);
}

#[tokio::test]
async fn a_password_change_leaves_only_the_current_session() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let other = app.logged_in("gus").await;
        let here = app.log_in("gus").await;
        let change = |current: &str, new: &str| format!("current={current}&new={new}");
        // Wrong current password: 403 (logged in, but not that password),
        // nothing changed or ended.
        let resp = app
            .post(
                "/account/password",
                Some(&here),
                &change("wrong-one", "brand-new-pass"),
                true,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{kind}");
        assert_eq!(who(&app, &other).await, "gus", "{kind}");
        // A new password against the sign-up rules: 400.
        let resp = app
            .post(
                "/account/password",
                Some(&here),
                &change(PASSWORD, "short"),
                true,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{kind}");
        // The password it has: 400, no device logged out for nothing.
        let resp = app
            .post(
                "/account/password",
                Some(&here),
                &change(PASSWORD, PASSWORD),
                true,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{kind}");
        assert!(
            json(resp).await["message"]
                .as_str()
                .is_some_and(|said| said.contains("the one you have")),
            "{kind}"
        );
        assert_eq!(who(&app, &other).await, "gus", "{kind}");
        // Not logged in: 401.
        let guest = app.visitor().await;
        let resp = app
            .post(
                "/account/password",
                Some(&guest),
                &change(PASSWORD, "brand-new-pass"),
                true,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{kind}");

        let resp = app
            .post(
                "/account/password",
                Some(&here),
                &change(PASSWORD, "brand-new-pass"),
                true,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::OK, "{kind}");
        // The session asking moves to a new token: the old cookie is worthless.
        let moved = cookie_of(&resp).expect("a new cookie");
        assert_eq!(json(resp).await["ended"], 1, "{kind}");
        assert_eq!(who(&app, &other).await, serde_json::Value::Null, "{kind}");
        assert_eq!(who(&app, &here).await, serde_json::Value::Null, "{kind}");
        let here = moved;
        assert_eq!(who(&app, &here).await, "gus", "{kind}");
        assert_eq!(
            sessions(&app, &here).await.len(),
            1,
            "{kind}: only this one"
        );
        assert_eq!(
            app.db.check_password("gus", PASSWORD).await.unwrap(),
            None,
            "{kind}"
        );
        assert!(
            app.db
                .check_password("gus", "brand-new-pass")
                .await
                .unwrap()
                .is_some(),
            "{kind}"
        );
        // The form: a page, then a redirect to the account page.
        let page = app.get("/account/password", Some(&here)).await;
        assert_eq!(page.status(), StatusCode::OK, "{kind}");
        assert!(text(page).await.contains("name=\"current\""), "{kind}");
        let resp = app
            .post(
                "/account/password",
                Some(&here),
                &change("brand-new-pass", "newer-password"),
                false,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{kind}");
    }
}

#[tokio::test]
async fn the_account_page_lists_the_devices() {
    let app = TestApp::start().await;
    let one = app.logged_in("hal").await;
    let _two = app.log_in("hal").await;
    let page = text(app.get("/account", Some(&one)).await).await;
    assert_eq!(page.matches("class=\"session\"").count(), 2, "{page}");
    assert!(page.contains("(this device)"));
    assert!(page.contains("Log out everywhere else"));
    assert!(page.contains("action=\"/api/me/sessions/"));
}

#[tokio::test]
async fn a_login_past_the_cap_per_user_logs_out_the_least_recently_seen() {
    let app = TestApp::with_config(WebConfig {
        max_sessions_per_user: 2,
        ..WebConfig::default()
    })
    .await;
    let first = app.logged_in("ivy").await;
    let second = app.log_in("ivy").await;
    // The first is used again; the second is now the least recently seen.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(who(&app, &first).await, "ivy");
    // `/api/me` holds its touch back: written by the process's next flush
    // (within a tenth of a second), as here.
    app.flush_views().await;
    let third = app.log_in("ivy").await;
    assert_eq!(who(&app, &second).await, serde_json::Value::Null);
    assert_eq!(who(&app, &first).await, "ivy");
    assert_eq!(who(&app, &third).await, "ivy");
    assert_eq!(sessions(&app, &third).await.len(), 2);
}
