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
    // head`) instead of panicking on a broken pipe. Not for the commands that talk to servers: a
    // server closing its socket must be an error they report, not a signal that kills them (and,
    // for `run`, the supervisor of a running job). Their children get the default back from std.
    let talks_to_servers = matches!(std::env::args().nth(1).as_deref(), Some("run" | "demo"));
    #[cfg(unix)]
    if !talks_to_servers {
        // SAFETY: called first in main, before any thread exists; restores the default
        // disposition.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    cli::main()
}
