//! `shop`: the one binary. Parses flags, sets up logging, runs the subcommand; the
//! wiring is in the library half (`lib.rs`), the logic in the other crates.
//!
//! The allocator is mimalloc: every request allocates its headers, its pipeline and
//! its answer, and glibc's malloc and free were a large share of the process's
//! CPU under cached item views (the profile and what the change measured:
//! BENCHMARKS.md).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = match shop::config::parse(std::env::args().collect()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let filter = shop::logging::filter(std::env::var("SHOP_LOG").ok().as_deref());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours for a terminal, plain text for log files and service managers.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        // A line logged while a request is served says which request it was.
        .map_event_format(shop_web::request_log::NamedRequests)
        .init();
    match shop::run(cli).await {
        // Done, but its answer could not all be written (141: a reader gone).
        Ok(()) => match shop::output::failed() {
            Some(code) => std::process::ExitCode::from(code),
            None => std::process::ExitCode::SUCCESS,
        },
        Err(error) => {
            eprintln!("shop: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
