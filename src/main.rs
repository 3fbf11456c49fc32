//! The `fencecheck` command line.

#[cfg(not(loom))]
mod cli;

use std::process::ExitCode;

#[cfg(loom)]
fn main() -> ExitCode {
    eprintln!("fencecheck was built with --cfg loom for the loom tests only");
    ExitCode::FAILURE
}

#[cfg(not(loom))]
fn main() -> ExitCode {
    // Like other command-line tools, stop quietly when the reader goes away (`fencecheck list |
    // head`) instead of panicking on a broken pipe.
    #[cfg(unix)]
    // SAFETY: called first in main, before any thread exists; restores the default disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    cli::main()
}
