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
    // Like other command-line tools, the commands that only print stop quietly when the reader
    // goes away (`fencecheck list | head`) instead of panicking on a broken pipe. Every other
    // command talks to servers or serves (`run`, `demo`, `torture` and its workers, `raft-node`,
    // `explore`): a peer closing its socket must be an error they report, not a signal that kills
    // them mid-trial (or, for `run`, the supervisor of a running job), so they keep std's default
    // of ignoring SIGPIPE. A new command ignores it too until it is named here. Children get the
    // default back from std.
    let prints_only = matches!(
        std::env::args().nth(1).as_deref(),
        None | Some("check" | "list" | "validate" | "report" | "help" | "--help" | "-h")
            | Some("--version" | "-V")
    );
    #[cfg(unix)]
    if prints_only {
        // SAFETY: called first in main, before any thread exists; restores the default
        // disposition.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    cli::main()
}
