//! The settings file (TOML) under the command line: its values become the
//! arguments' defaults, so flags and variables still win and every value passes
//! the same checks.

use clap::{CommandFactory, FromArgMatches};

use super::cli::Cli;
use super::settings::Settings;

/// Parses the command line, with the settings file named by `--config FILE` (or
/// `SHOP_CONFIG`) under it: flags beat the environment, which beats the file,
/// which beats the compiled-in defaults (see the module doc).
pub fn parse(args: Vec<String>) -> Result<Cli, clap::Error> {
    let mut cmd = Cli::command();
    if let Some(path) = config_file_path(&args) {
        let values = read_config_file(&path)
            .map_err(|message| cmd.error(clap::error::ErrorKind::InvalidValue, message))?;
        cmd = with_defaults(cmd, &values);
    }
    let matches = cmd.try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

pub(super) fn config_file_path(args: &[String]) -> Option<String> {
    let flag = args.iter().enumerate().find_map(|(i, a)| {
        if a == "--config" {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix("--config=").map(str::to_owned)
        }
    });
    flag.or_else(|| std::env::var("SHOP_CONFIG").ok())
}

/// The file's settings, as each field's name and its values in command-line form,
/// once the file has been read into [`Settings`] (so its keys and types are right).
pub(super) fn read_config_file(path: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {path}: {e}"))?;
    Settings::from_toml(&text).map_err(|e| format!("{path}: {e}"))?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| format!("{path}: {}", toml_error(&text, &e)))?;
    let mut values = Vec::new();
    for (_, section) in table {
        let toml::Value::Table(section) = section else {
            unreachable!("Settings refuses keys outside its sections");
        };
        for (key, value) in section {
            let value = match value {
                toml::Value::Array(list) => list.iter().map(flag_form).collect(),
                one => vec![flag_form(&one)],
            };
            values.push((key, value));
        }
    }
    Ok(values)
}

/// A TOML error as its line number and message, without the quoted line the
/// `toml` crate would print: that line may hold a password (a misspelt
/// `database_url = "postgres://shop:secret@..."`).
pub(super) fn toml_error(text: &str, error: &toml::de::Error) -> String {
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let start = before.rfind('\n').map_or(0, |i| i + 1);
            let key = text[start..]
                .lines()
                .next()
                .and_then(|l| l.split_once('='))
                .map(|(key, _)| format!(" (`{}`)", key.trim()))
                .unwrap_or_default();
            format!("line {line}{key}: {}", error.message())
        }
        None => error.message().to_owned(),
    }
}

/// A TOML value as it would be written after its flag.
pub(super) fn flag_form(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Makes each file value the default of the arguments of that name (a settings
/// field's argument is named after the field), in every subcommand.
pub(super) fn with_defaults(
    mut cmd: clap::Command,
    values: &[(String, Vec<String>)],
) -> clap::Command {
    let ids: Vec<(String, Vec<String>)> = cmd
        .get_arguments()
        .filter_map(|a| {
            let (_, value) = values.iter().find(|(k, _)| a.get_id() == k.as_str())?;
            Some((a.get_id().to_string(), value.clone()))
        })
        .collect();
    for (id, value) in ids {
        cmd = cmd.mut_arg(id, |a| a.default_values(value));
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    for name in subs {
        cmd = cmd.mut_subcommand(name, |s| with_defaults(s, values));
    }
    cmd
}
