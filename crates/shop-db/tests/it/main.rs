//! Integration tests of the SQL layer, each on its own SQLite file and, where a
//! server answers, its own PostgreSQL database.

mod catalogue;
mod connect;
mod flash;
mod items;
mod locks;
mod orders;
mod search;
mod seed;
mod stock;
mod users;

use shop_db::Db;
use shop_testkit::TestDb;

/// Every backend this machine offers, each with a fresh, migrated database.
pub async fn databases() -> Vec<(TestDb, Db)> {
    let mut out = Vec::new();
    for test_db in TestDb::all().await {
        let db = Db::connect(test_db.url()).await.unwrap();
        out.push((test_db, db));
    }
    out
}
mod write_faults;
