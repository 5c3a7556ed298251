//! Tests of the configuration: the command line, the layering, the settings file.

use clap::{CommandFactory, Parser};
use shop_cache::session_cleaner::DEFAULT_CAP;
use shop_page_cache as page_cache;

use super::cli::*;
use super::file::*;
use super::secret::*;
use super::settings::*;

#[test]
fn verify_cli() {
    Cli::command().debug_assert();
}

/// Every flag of every command, as `--name`.
fn every_flag(command: &clap::Command, out: &mut Vec<String>) {
    for arg in command.get_arguments() {
        if let Some(long) = arg.get_long() {
            out.push(format!("--{long}"));
        }
    }
    for sub in command.get_subcommands() {
        every_flag(sub, out);
    }
}

/// The configuration reference (`docs/configuration.md`) names every flag: a flag
/// added to the CLI without its row fails here.
#[test]
fn the_configuration_reference_names_every_flag() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let mut flags = Vec::new();
    every_flag(&Cli::command(), &mut flags);
    flags.sort();
    flags.dedup();
    assert!(flags.len() > 40, "{flags:?}");
    let missing: Vec<&String> = flags
        .iter()
        .filter(|flag| !doc.contains(&format!("`{flag}")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md: {missing:?}"
    );
}

#[test]
fn passwords_are_redacted() {
    assert_eq!(
        redact_url("redis://user:secret@host:6379/0"),
        "redis://user:***@host:6379/0"
    );
    assert_eq!(redact_url("redis://:secret@host"), "redis://:***@host");
    assert_eq!(
        redact_url("postgres://postgres@127.0.0.1/shop"),
        "postgres://postgres@127.0.0.1/shop"
    );
    assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
    assert_eq!(redact_url("unix:///tmp/r.sock"), "unix:///tmp/r.sock");
    // Passwords given as query parameters, which the drivers accept too.
    assert_eq!(
        redact_url("postgres://shop@db/shop?password=hunter2&sslmode=require"),
        "postgres://shop@db/shop?password=***&sslmode=require"
    );
    assert_eq!(
        redact_url("redis://h:6379/0?Pass=x&protocol=resp3#frag"),
        "redis://h:6379/0?Pass=***&protocol=resp3#frag"
    );
    assert_eq!(
        redact_url("postgres://u:a@b@db/x?sslpassword=p&pwd=q&auth_token=t"),
        "postgres://u:***@db/x?sslpassword=***&pwd=***&auth_token=***"
    );
    assert_eq!(redact_url("redis://h?password"), "redis://h?password");
}

#[test]
fn urls_from_the_command_line_print_without_their_password() {
    let cli = Cli::try_parse_from([
        "shop",
        "serve",
        "--redis-url",
        "redis://u:hunter2@h:6379",
        "--database-url",
        "postgres://shop:s3cret@db/shop",
    ])
    .unwrap();
    let everything = format!("{cli:?}");
    assert!(!everything.contains("hunter2"), "{everything}");
    assert!(!everything.contains("s3cret"), "{everything}");
    assert!(everything.contains("redis://u:***@h:6379"), "{everything}");
    let Command::Serve(serve) = cli.command else {
        panic!("serve");
    };
    assert_eq!(
        serve.settings.database.database_url.expose(),
        "postgres://shop:s3cret@db/shop"
    );
    assert_eq!(
        serve.settings.database.database_url.to_string(),
        "postgres://shop:***@db/shop"
    );
}

#[test]
fn bad_values_are_refused_with_the_setting_named() {
    for (args, setting) in [
        (
            vec!["shop", "work", "--cleaner-batch", "0"],
            "--cleaner-batch",
        ),
        (vec!["shop", "work", "--session-cap=-1"], "--session-cap"),
        (
            vec!["shop", "work", "--cleaner-duty", "0"],
            "--cleaner-duty",
        ),
        (
            vec!["shop", "work", "--cleaner-duty", "101"],
            "--cleaner-duty",
        ),
        (vec!["shop", "serve", "--redis-pool", "0"], "--redis-pool"),
        (vec!["shop", "serve", "--redis-pool", "65"], "--redis-pool"),
        (vec!["shop", "serve", "--bind", "nowhere"], "--bind"),
        (vec!["shop", "seed", "--items", "0"], "--items"),
        (vec!["shop", "rows", "schedule", "abc", "1"], "<ID>"),
    ] {
        let err = Cli::try_parse_from(&args).unwrap_err().to_string();
        assert!(err.contains(setting), "{args:?}: {err}");
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A settings file in a directory of its own, removed when dropped.
struct ConfigFile(tempfile::TempDir);

impl ConfigFile {
    fn new() -> Self {
        Self(tempfile::tempdir().unwrap())
    }

    fn write(&self, text: &str) -> String {
        let file = self.0.path().join("shop.toml");
        std::fs::write(&file, text).unwrap();
        file.display().to_string()
    }
}

#[test]
fn a_config_file_sets_defaults_that_flags_override() {
    let file = ConfigFile::new();
    let path = file.write(
        "# a comment\n[workers]\nsession_cap = 1234\ncleaner_batch = 7\n\n\
         [database]\ndatabase_url = \"sqlite:x.db\"\n\
         [redis]\nredis_cluster = [\"127.0.0.1:7000\", \"127.0.0.1:7001\"]\n",
    );
    let cli = parse(args(&[
        "shop",
        "work",
        "--config",
        &path,
        "--cleaner-batch",
        "9",
    ]))
    .unwrap();
    let Command::Work(work) = cli.command else {
        panic!("not work")
    };
    assert_eq!(work.workers.session_cap, 1234, "from the file");
    assert_eq!(work.workers.cleaner_batch, 9, "the flag wins");
    assert_eq!(work.workers.cleaner_duty, 10, "the compiled-in default");
    assert_eq!(work.database.database_url.expose(), "sqlite:x.db");
    assert_eq!(
        work.redis.redis_cluster,
        ["127.0.0.1:7000", "127.0.0.1:7001"]
    );

    let path = file.write(
        "[server]\nbind = \"0.0.0.0:9000\"\n[web]\nsecure_cookies = true\ndemo_sale = false\n\
         flash_decider = \"database\"\n",
    );
    let cli = parse(args(&["shop", "serve", "--config", &path])).unwrap();
    let Command::Serve(serve) = cli.command else {
        panic!("not serve")
    };
    let Settings { server, web, .. } = serve.settings;
    assert_eq!(server.bind.to_string(), "0.0.0.0:9000");
    assert!(web.secure_cookies, "a switch turned on by the file");
    assert_eq!(
        web.demo_sale,
        Some(false),
        "a default turned off by the file"
    );
    assert_eq!(web.flash_decider, FlashDeciderArg::Database);
}

#[test]
fn a_config_file_is_checked_as_the_command_line_is() {
    let file = ConfigFile::new();
    for (text, says) in [
        ("[workers]\ncleaner_batch = 0\n", "--cleaner-batch"),
        ("[server]\nbind = \"nowhere\"\n", "bind"),
        ("[workers]\nsession_cap = \"many\"\n", "session_cap"),
        ("[workers]\nno_such = 1\n", "unknown field `no_such`"),
        ("[nowhere]\nx = 1\n", "unknown field `nowhere`"),
        ("session_cap = 1\n", "unknown field `session_cap`"),
        ("not a setting\n", "line 1: "),
    ] {
        let path = file.write(text);
        let err = parse(args(&["shop", "work", "--config", &path]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{text:?}: {err}");
    }
    let err = parse(args(&[
        "shop",
        "work",
        "--config",
        "/nonexistent/shop.toml",
    ]))
    .unwrap_err()
    .to_string();
    assert!(err.contains("cannot read config file"), "{err}");
}

#[test]
fn the_defaults_are_the_flags_defaults() {
    let settings = Settings::default();
    assert_eq!(settings.workers.session_cap, DEFAULT_CAP);
    assert_eq!(settings.web.page_ttl, page_cache::DEFAULT_TTL.as_secs());
    assert_eq!(settings.server.bind.to_string(), "127.0.0.1:8080");
    assert_eq!(
        settings.database.database_url.expose(),
        "sqlite:data/shop.db"
    );
    assert!(settings.redis.redis_url.is_none());
    let partial = Settings::from_toml("[web]\nrank_limit = 3\n").unwrap();
    assert_eq!(partial.web.rank_limit, 3);
    assert_eq!(
        partial.web.page_ttl, settings.web.page_ttl,
        "the rest defaulted"
    );
}

#[test]
fn a_negative_delay_is_a_value_not_a_flag() {
    let cli = Cli::try_parse_from(["shop", "rows", "schedule", "5", "-1"]).unwrap();
    let Command::Rows(RowsArgs {
        command: RowsCommand::Schedule { delay, .. },
        ..
    }) = cli.command
    else {
        panic!("parsed as something else");
    };
    assert_eq!(delay, -1.0);
}

/// The web settings `shop serve <flags>` gets (with the settings file `file`).
fn serve_web(flags: &[&str], file: Option<&str>) -> WebSettings {
    let mut line = vec!["shop", "serve"];
    if let Some(path) = file {
        line.extend(["--config", path]);
    }
    line.extend(flags);
    let Command::Serve(serve) = parse(args(&line)).unwrap().command else {
        panic!("not serve")
    };
    serve.settings.web
}

#[test]
fn nothing_made_up_unless_demo_asks_and_the_finer_switches_follow_it() {
    let plain = serve_web(&[], None);
    assert!(!plain.demo && !plain.demo_sale() && !plain.demo_users());

    let demo = serve_web(&["--demo"], None);
    assert!(demo.demo && demo.demo_sale() && demo.demo_users());

    let no_sale = serve_web(&["--demo", "--demo-sale", "false"], None);
    assert!(!no_sale.demo_sale() && no_sale.demo_users());
    let no_users = serve_web(&["--demo", "--demo-users=false"], None);
    assert!(no_users.demo_sale() && !no_users.demo_users());

    // A bare switch still turns its part on, as before `--demo` existed.
    let users = serve_web(&["--demo-users"], None);
    assert!(users.demo_users() && !users.demo_sale());
    let sale = serve_web(&["--demo-sale", "--bind", "127.0.0.1:0"], None);
    assert!(sale.demo_sale() && !sale.demo_users());

    let file = ConfigFile::new();
    let path = file.write("[web]\ndemo = true\ndemo_users = false\n");
    let from_file = serve_web(&[], Some(&path));
    assert!(from_file.demo && from_file.demo_sale() && !from_file.demo_users());
    assert_eq!(from_file.demo_items, shop_db::seed::DEFAULT_ITEMS);
}
