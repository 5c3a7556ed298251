//! `shop users`: adding accounts and admins.

use anyhow::Context;

use crate::config::UsersCommand;
use crate::connect::connect_db;

/// Runs `shop users`.
pub async fn run(command: UsersCommand) -> anyhow::Result<()> {
    match command {
        UsersCommand::Add {
            name,
            admin,
            database,
        } => {
            let mut password = String::new();
            std::io::stdin()
                .read_line(&mut password)
                .context("reading the password from standard input")?;
            let password = password.trim_end_matches(['\r', '\n']);
            shop_cache::domain::account::check_new_account(&name, password)?;
            let db = connect_db(&database).await?;
            if db.create_user(&name, password).await?.is_none() {
                anyhow::bail!("the name {name:?} is taken");
            }
            if admin {
                db.grant_admin(&name).await?;
            }
            println!("added {name}{}", if admin { " (admin)" } else { "" });
            Ok(())
        }
        UsersCommand::GrantAdmin { name, database } => {
            let db = connect_db(&database).await?;
            if !db.grant_admin(&name).await? {
                anyhow::bail!("there is no user {name:?}");
            }
            println!("{name} is an admin: /ops is open to them");
            Ok(())
        }
    }
}
