//! Standard output without a panic. `println!` panics when the reader has gone (`| head`)
//! or the write fails (`> /dev/full`). Here a reader that stopped early has taken all it
//! wanted, so the process ends quietly with status 0; any other failure to write is a
//! runtime failure, one line on standard error and status 1. Standard output carries
//! reports and streamed text only: the files a command writes are committed before
//! anything is printed about them, so ending here never leaves one half written.

use std::fmt;
use std::io::Write;

/// Writes `args` to standard output and flushes it, or ends the process as above.
pub fn write(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to standard output: {e}");
        std::process::exit(1);
    }
}

/// `println!` through [`write`]. (The fuzz tests include this folder without the
/// commands that print, hence the allowance.)
#[allow(unused_macros)]
macro_rules! out {
    () => {
        $crate::cli::io::stdout::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::io::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through [`write`].
#[allow(unused_macros)]
macro_rules! out_inline {
    ($($arg:tt)*) => {
        $crate::cli::io::stdout::write(format_args!($($arg)*))
    };
}

#[allow(unused_imports)]
pub(crate) use {out, out_inline};
