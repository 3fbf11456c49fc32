//! The `fencecheck` command line.

mod cli;

use std::process::ExitCode;

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
