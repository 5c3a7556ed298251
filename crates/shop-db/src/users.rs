//! Registered users and their passwords (argon2id hashes, never the password).

use argon2::Argon2;
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use shop_domain::UserId;
use sqlx::Row;

use crate::{Db, DbError, unix_now};

/// Hashes a password with argon2id and a random salt, off the async threads.
pub async fn hash_password(password: &str) -> Result<String, DbError> {
    let password = password.to_owned();
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| DbError::Password(e.to_string()))
    })
    .await
    .map_err(|e| DbError::Password(e.to_string()))?
}

impl Db {
    /// Registers a user; `None` if the name is taken.
    pub async fn create_user(&self, name: &str, password: &str) -> Result<Option<UserId>, DbError> {
        let hash = hash_password(password).await?;
        let row = sqlx::query(
            "INSERT INTO users (name, password_hash, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING RETURNING id",
        )
        .bind(name)
        .bind(hash)
        .bind(unix_now())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| user_id(r.try_get("id")?)).transpose()
    }

    /// The user with this name and password, or `None` (unknown name or wrong
    /// password: callers must not say which).
    pub async fn check_password(
        &self,
        name: &str,
        password: &str,
    ) -> Result<Option<UserId>, DbError> {
        let row = sqlx::query("SELECT id, password_hash FROM users WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let id = user_id(row.try_get("id")?)?;
        let hash: String = row.try_get("password_hash")?;
        let password = password.to_owned();
        let ok = tokio::task::spawn_blocking(move || {
            PasswordHash::new(&hash)
                .map(|parsed| {
                    Argon2::default()
                        .verify_password(password.as_bytes(), &parsed)
                        .is_ok()
                })
                .map_err(|_| DbError::Corrupt {
                    what: "users.password_hash",
                })
        })
        .await
        .map_err(|e| DbError::Password(e.to_string()))??;
        Ok(ok.then_some(id))
    }

    /// The user's name, for pages.
    pub async fn user_name(&self, id: UserId) -> Result<Option<String>, DbError> {
        let row = sqlx::query("SELECT name FROM users WHERE id = $1")
            .bind(id.to_i64())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("name")).transpose()?)
    }
}

pub(crate) fn user_id(raw: i64) -> Result<UserId, DbError> {
    UserId::from_i64(raw).map_err(|_| DbError::Corrupt { what: "users.id" })
}
