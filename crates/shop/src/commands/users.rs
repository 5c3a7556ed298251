//! `shop users`: adding accounts and admins, and setting a password (which logs
//! the account out everywhere).

use anyhow::Context;

use crate::config::UsersCommand;
use crate::connect::{connect_existing_db, connect_redis};

/// The password on the first line of standard input (so it never shows in the
/// process list or the shell's history).
fn password_from_stdin() -> anyhow::Result<String> {
    let mut password = String::new();
    std::io::stdin()
        .read_line(&mut password)
        .context("reading the password from standard input")?;
    Ok(password.trim_end_matches(['\r', '\n']).to_owned())
}

/// Runs `shop users`.
pub async fn run(command: UsersCommand) -> anyhow::Result<()> {
    match command {
        UsersCommand::Add {
            name,
            admin,
            database,
        } => {
            // An account belongs to a shop that exists: run where there is
            // none, this would add it to a new, empty database and say "added".
            let db = connect_existing_db(&database).await?;
            let password = password_from_stdin()?;
            shop_cache::domain::account::check_new_account(&name, &password)?;
            if db.create_user(&name, &password).await?.is_none() {
                anyhow::bail!("the name {name:?} is taken");
            }
            if admin {
                db.grant_admin(&name).await?;
            }
            crate::say!("added {name}{}", if admin { " (admin)" } else { "" });
            Ok(())
        }
        UsersCommand::SetPassword {
            name,
            database,
            redis,
        } => {
            let password = password_from_stdin()?;
            shop_cache::domain::account::check_new_password(&password)?;
            let db = connect_existing_db(&database).await?;
            let Some(user) = db.user_named(&name).await? else {
                anyhow::bail!("there is no user {name:?}");
            };
            let (conn, keys) = connect_redis(&redis).await?;
            let sessions = shop_cache::session::Sessions::new(conn.clone(), keys.clone());
            let carts = shop_cache::cart::Carts::new(
                conn.clone(),
                keys.clone(),
                shop_cache::cart::DEFAULT_MAX_QUANTITY,
            );
            let limiter = shop_cache::login_limit::LoginLimiter::new(
                conn,
                keys,
                shop_cache::login_limit::LoginLimits::default(),
            );
            let accounts = shop_app::accounts::Accounts {
                db: &db,
                sessions: &sessions,
                carts: &carts,
                limiter: &limiter,
            };
            match accounts.reset_password(user, &password).await? {
                Some(ended) => {
                    crate::say!("{name}'s password is set; {ended} session(s) logged out");
                    Ok(())
                }
                None => anyhow::bail!(
                    "{name}'s password is set, but their sessions could not all be logged \
                     out (Redis failing): run the command again once Redis answers"
                ),
            }
        }
        UsersCommand::GrantAdmin { name, database } => {
            let db = connect_existing_db(&database).await?;
            if !db.grant_admin(&name).await? {
                anyhow::bail!("there is no user {name:?}");
            }
            crate::say!("{name} is an admin: /ops is open to them");
            Ok(())
        }
    }
}
