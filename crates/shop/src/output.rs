//! A command's answer on standard output. A reader that went away (`shop sale
//! start ... | head -1`, a closed terminal) ends the command quietly with the
//! shell's code for a broken pipe (141), where `println!` panicked with a
//! backtrace: what the command did is done by the time it says so.

use std::io::Write;

/// Prints `args` and a newline on standard output; see the module docs.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{args}").and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(141),
        Err(error) => {
            eprintln!("shop: cannot write to standard output: {error}");
            std::process::exit(1);
        }
    }
}

/// `println!` for a command's answer: see [`line()`].
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
