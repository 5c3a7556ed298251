//! Edits that are never silently reverted: every item has a version each change
//! bumps, the admin form carries it, and a form saved from an older version is
//! refused (409) with the item as it is now.

use axum::http::StatusCode;
use shop_cache::domain::ItemId;
use shop_cache::domain::catalogue::{ItemEdit, ItemFields};
use shop_db::catalogue::RetiredInImport;
use shop_testapp::{TestApp, json, text};

fn item(n: u64) -> ItemId {
    ItemId::new(n).unwrap()
}

/// The version an admin form carries.
fn version_in(form: &str) -> i64 {
    form.split("name=\"version\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the form carries the version")
        .parse()
        .unwrap()
}

#[tokio::test]
async fn two_admin_saves_from_the_same_version_never_revert_each_other() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let admin = app.logged_in("ada").await;
        app.db.grant_admin("ada").await.unwrap();
        let before = app.db.item(item(3)).await.unwrap().unwrap();
        // Two tabs load the form.
        let form = text(app.get("/admin/items/3", Some(&admin)).await).await;
        let version = version_in(&form);
        assert_eq!(version, before.version, "{kind}");
        let fields = |price: i64, title: &str| {
            format!(
                "version={version}&title={title}&description=d&price_cents={price}&category={}",
                before.category
            )
        };

        // The first tab saves a new price.
        let first = app
            .post(
                "/admin/items/3",
                Some(&admin),
                &fields(3_499, "Kettle"),
                false,
            )
            .await;
        assert_eq!(first.status(), StatusCode::SEE_OTHER, "{kind}");
        let saved = app.db.item(item(3)).await.unwrap().unwrap();
        assert_eq!(
            (saved.price_cents, saved.version),
            (3_499, version + 1),
            "{kind}"
        );

        // The second tab, loaded before, saves its title with the old price.
        let second = app
            .post(
                "/admin/items/3",
                Some(&admin),
                &fields(before.price_cents, "Kettle deluxe"),
                false,
            )
            .await;
        assert_eq!(second.status(), StatusCode::CONFLICT, "{kind}");
        let page = text(second).await;
        assert!(page.contains("nothing was saved"), "{kind}: {page}");
        assert!(
            page.contains(&format!("price_cents: you sent “{}”", before.price_cents)),
            "{kind}: {page}"
        );
        assert!(
            page.contains("value=\"3499\""),
            "{kind}: the current values: {page}"
        );
        assert_eq!(version_in(&page), version + 1, "{kind}: to edit again");
        assert_eq!(
            app.db.item(item(3)).await.unwrap().unwrap(),
            saved,
            "{kind}: nothing changed"
        );

        // The same as JSON, for scripts.
        let resp = app
            .post(
                "/admin/items/3",
                Some(&admin),
                &fields(before.price_cents, "Kettle"),
                true,
            )
            .await;
        assert_eq!(resp.status(), StatusCode::CONFLICT, "{kind}");
        let body = json(resp).await;
        assert_eq!(body["error"], "stale", "{kind}: {body}");
        assert_eq!(body["version"], version + 1, "{kind}");
        assert_eq!(body["current"]["price_cents"], 3_499, "{kind}");
        assert_eq!(
            body["differs"],
            serde_json::json!(["price_cents"]),
            "{kind}"
        );

        // From the version it shows now, the second save goes through.
        let again = format!(
            "version={}&title=Kettle+deluxe&price_cents=3499",
            version + 1
        );
        let resp = app
            .post("/admin/items/3", Some(&admin), &again, false)
            .await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER, "{kind}");
        let now = app.db.item(item(3)).await.unwrap().unwrap();
        assert_eq!(
            (now.title.as_str(), now.price_cents, now.version),
            ("Kettle deluxe", 3_499, version + 2),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn every_change_bumps_the_version_and_a_change_to_nothing_does_not() {
    for app in TestApp::builder().start_on_every_database().await {
        let kind = app.kind();
        let catalogue = app.state.catalogue();
        let v = |app: &TestApp, id: u64| {
            let db = app.db.clone();
            async move { db.item(item(id)).await.unwrap().unwrap().version }
        };
        let start = v(&app, 4).await;
        let edit = ItemEdit::new(None, None, Some(777), None).unwrap();
        catalogue.update(item(4), &edit, None).await.unwrap();
        assert_eq!(v(&app, 4).await, start + 1, "{kind}: an edit");
        catalogue.update(item(4), &edit, None).await.unwrap();
        assert_eq!(v(&app, 4).await, start + 1, "{kind}: the same values again");
        let stale = catalogue.update(item(4), &edit, Some(start)).await;
        assert!(
            matches!(
                stale,
                Err(shop_app::catalogue::CatalogueError::Stale { .. })
            ),
            "{kind}: {stale:?}"
        );
        let fields = ItemFields::new("Imported", "d", 100, "garden").unwrap();
        catalogue
            .import_chunk(&[(item(4), fields.clone(), 0)], RetiredInImport::Keep)
            .await
            .unwrap();
        assert_eq!(v(&app, 4).await, start + 2, "{kind}: an import line");
        catalogue
            .import_chunk(&[(item(4), fields, 0)], RetiredInImport::Keep)
            .await
            .unwrap();
        assert_eq!(v(&app, 4).await, start + 2, "{kind}: the same line again");
        catalogue.retire(item(4)).await.unwrap();
        assert_eq!(v(&app, 4).await, start + 3, "{kind}: retired");
        catalogue.retire(item(4)).await.unwrap();
        assert_eq!(v(&app, 4).await, start + 3, "{kind}: retired again");
    }
}
