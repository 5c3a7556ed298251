//! The rules for a new account's name and password: one place, for the sign-up
//! page and the `shop users add` command alike.

use crate::InvalidInput;

/// Shortest password accepted, in characters.
pub const MIN_PASSWORD: usize = 10;
/// Longest password accepted, in bytes: the login form refuses longer ones before
/// hashing, so a longer one could never be used.
pub const MAX_PASSWORD: usize = 200;
/// Shortest name.
pub const MIN_NAME: usize = 3;
/// Longest name.
pub const MAX_NAME: usize = 32;

/// Checks a new account's name and password. Names are 3 to 32 of lowercase
/// ASCII letters, digits, `.`, `_` and `-`, starting with a letter or digit: one
/// spelling per name (no `Alice` beside `alice`, no look-alike letters from other
/// scripts), safe in URLs and logs.
pub fn check_new_account(name: &str, password: &str) -> Result<(), InvalidInput> {
    let name_ok = (MIN_NAME..=MAX_NAME).contains(&name.len())
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if !name_ok {
        return Err(InvalidInput::UserName);
    }
    check_new_password(password)
}

/// Checks a new password (a sign-up's, or a password change's): at least
/// [`MIN_PASSWORD`] characters, at most [`MAX_PASSWORD`] bytes, and not one
/// character over and over (ten spaces, `aaaaaaaaaa`: the first guesses of
/// anyone who tries).
pub fn check_new_password(password: &str) -> Result<(), InvalidInput> {
    let mut chars = password.chars();
    let first = chars.next();
    let one_repeated = chars.all(|c| Some(c) == first);
    if password.chars().count() < MIN_PASSWORD || password.len() > MAX_PASSWORD || one_repeated {
        return Err(InvalidInput::Password);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_passwords() {
        let pw = "ten chars!";
        for ok in [
            "abc",
            "alice",
            "bob.smith",
            "x_1-2",
            "9lives",
            &"a".repeat(32),
        ] {
            assert_eq!(check_new_account(ok, pw), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "ab",
            "Alice",
            "al ice",
            ".alice",
            "-x-",
            "_ab",
            "al\u{0456}ce",
            "a/b",
            "a\nb",
            &"a".repeat(33),
        ] {
            assert_eq!(
                check_new_account(bad, pw),
                Err(InvalidInput::UserName),
                "{bad:?}"
            );
        }
        assert_eq!(
            check_new_account("alice", "nine char"),
            Err(InvalidInput::Password)
        );
        assert_eq!(check_new_account("alice", "ünïcödé!!!"), Ok(()));
        assert_eq!(check_new_account("alice", &"pw".repeat(100)), Ok(()));
        assert_eq!(
            check_new_account("alice", &format!("{}x", "pw".repeat(100))),
            Err(InvalidInput::Password)
        );
        for same in [
            "          ",
            "\t\t\t\t\t\t\t\t\t\t",
            "aaaaaaaaaaaa",
            "ééééééééééé",
        ] {
            assert_eq!(
                check_new_account("alice", same),
                Err(InvalidInput::Password),
                "{same:?}"
            );
        }
        assert_eq!(check_new_account("alice", "          a"), Ok(()));
    }
}
