//! A command's answer on standard output. A reader that went away (`shop sale
//! start ... | head -1`, a closed terminal) no longer gets lines, and the
//! command goes on to its end (its remaining steps, its clean-up: a managed
//! Redis stopped) and then exits with the shell's code for a broken pipe (141;
//! 1 for another failure to write, said on standard error), where `println!`
//! panicked with a backtrace.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// The exit code a failed write of a line left for the command (0: none
/// failed): 141 for a reader that went away, 1 for any other failure.
static FAILED: AtomicU8 = AtomicU8::new(0);

/// Prints `args` and a newline on standard output; see the module docs.
pub fn line(args: std::fmt::Arguments<'_>) {
    if FAILED.load(Ordering::Relaxed) != 0 {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(error) = writeln!(out, "{args}").and_then(|()| out.flush()) {
        let code = if error.kind() == std::io::ErrorKind::BrokenPipe {
            141
        } else {
            eprintln!("shop: cannot write to standard output: {error}");
            1
        };
        FAILED.store(code, Ordering::Relaxed);
    }
}

/// The exit code of a command whose lines could not all be written (141 for a
/// reader that went away), `None` if every line was.
pub fn failed() -> Option<u8> {
    match FAILED.load(Ordering::Relaxed) {
        0 => None,
        code => Some(code),
    }
}

/// `println!` for a command's answer: see [`line()`].
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
