//! Argument parsing and dispatch. Exit codes: 0 success, 1 a verdict differs from its
//! expectation (or a search was cut short), 2 bad usage.

mod check;
#[cfg(feature = "backends")]
mod demo;
mod exit;
#[cfg(feature = "backends")]
mod floor;
#[cfg(feature = "backends")]
mod raft_node;
mod report;
#[cfg(feature = "backends")]
mod run;
#[cfg(feature = "backends")]
mod servers;
#[cfg(feature = "backends")]
mod target;
#[cfg(feature = "backends")]
mod torture;
mod validate;

use clap::{Args, Parser, Subcommand};
use fencecheck::check::catalog;
use std::process::ExitCode;

/// fencecheck: check distributed-lock protocols exhaustively, and run the fenced lease lock.
#[derive(Debug, Parser)]
#[command(name = "fencecheck", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check models exhaustively and compare each verdict with what the model declares.
    ///
    /// Exit status: 0 when every verdict matches its expectation, 1 when one differs (or a
    /// search was cut short by --max-states without --allow-incomplete), 2 on bad usage.
    Check(CheckArgs),
    /// List the models, what each represents, and what each declares.
    List,
    /// Serve Stateright's Explorer for a model on 127.0.0.1 (browse its states by hand).
    Explore(ExploreArgs),
    /// Run the story for real: two workers, a real TTL, a real pause, fenced storage.
    #[cfg(feature = "backends")]
    Demo(demo::DemoArgs),
    /// Regenerate reports/: verdicts, counterexample diagrams and benchmark results.
    ///
    /// Checks every model afresh and reads criterion's saved estimates from the last
    /// `cargo bench`. Exit status 1 when a verdict differs from its declaration.
    Report(report::ReportArgs),
    /// Run a command while holding a lock, stopping it before its lease can end.
    ///
    /// Acquires the lease, starts CMD in its own process group with the fencing token in
    /// FENCECHECK_TOKEN, and renews the lease every TTL/3 (sooner for a long --grace). If
    /// renewals fail, the group gets SIGTERM at the lease's safe deadline minus --grace and
    /// SIGKILL at the deadline; if the
    /// server says the lease is gone, SIGTERM at once. The command dies with this supervisor
    /// (kill -9 included); INT, TERM, HUP, QUIT, USR1 and USR2 are passed to its group.
    ///
    /// It cannot stop work on time while it is itself paused (SIGSTOP, a stopped VM), nor reach
    /// a job that left the process group: pass FENCECHECK_TOKEN to fenced storage for that.
    ///
    /// Exit status: CMD's own (128+N if killed by signal N); 75 when the lock is held elsewhere
    /// (and --wait did not get it); 76 when the lease was lost or about to end and CMD was
    /// stopped, or the grant came too late to start it; 78 when the granted token is not above
    /// one an earlier run on this machine was granted (the service lost its token counter; CMD
    /// not run); 69 when the lock service could not be used; 2 on bad usage.
    #[cfg(feature = "backends")]
    Run(run::RunArgs),
    /// A fault campaign against a lock service: worker processes add to a counter in PostgreSQL
    /// under the lease while a nemesis strikes one of them or the server.
    ///
    /// Each trial starts --workers processes of this program that take the lease, read the
    /// counter, and write it plus one with the fencing token (in one transaction fenced by the
    /// token). The nemeses take turns: pause (SIGSTOP a holder past its TTL), stall (freeze its
    /// links to the lock service and PostgreSQL), kill-server (kill -9 and restart a server this
    /// command started) and clock-skew (a worker under libfaketime). Every worker reports what it
    /// observes; each trial is judged by increments lost, storage_in_lease_order, trace
    /// validation against the model and linearizability of the counter. Servers not given by
    /// flag are started as throwaway ones on 127.0.0.1. --no-fence is the control that loses
    /// increments.
    ///
    /// Exit status: 0 when every trial kept every rule, 1 when one broke one, 2 on bad usage or
    /// when the campaign could not run.
    #[cfg(feature = "backends")]
    Torture(torture::TortureArgs),
    /// Replay recorded traces through the model: is every observed answer one the lock service
    /// and fenced storage of the model could have given?
    ///
    /// Reads the files `run --trace` writes (or any program writing the same lines), merges their
    /// events by time and replays them, placing each request anywhere between its send and its
    /// answer and each lease's end where its TTL runs out (within --slack). Names the first event
    /// no placement explains, with the model's state and the timeline up to it.
    ///
    /// Exit status: 0 when the model explains every event, 1 when it cannot (or the search gave
    /// up), 2 on bad usage or an unreadable file.
    Validate(validate::ValidateArgs),
    /// Serve one node of a fencecheck Raft cluster: the `raft` backend's server.
    ///
    /// Locks and fenced keys live in one Raft group (openraft): every acquire, renewal, release
    /// and fenced write is one committed log entry applied to the protocol core's lease table and
    /// fence, so tokens increase across leader changes and a write is fenced by the same log that
    /// orders the grants. Serves peers and clients on its own --members address.
    ///
    /// Exit status: 69 when the node cannot start or stops serving; 2 on bad usage.
    #[cfg(feature = "backends")]
    RaftNode(raft_node::RaftNodeArgs),
    /// One worker of a `torture` trial (started by `torture`).
    #[cfg(feature = "backends")]
    #[command(hide = true)]
    TortureWorker(torture::WorkerArgs),
}

/// Model sizes shared by `check` and `explore`.
#[derive(Debug, Args)]
struct SizeArgs {
    /// Number of clients (1 to 8; default: each model's own, see `fencecheck list`).
    #[arg(long, value_name = "N")]
    clients: Option<usize>,
    /// Writes per client (1 to 4; default: each model's own).
    #[arg(long, value_name = "N")]
    writes: Option<u64>,
    /// Times a client asks for the lease again after a rejected write told it the lease was
    /// lost (0 to 3; default: each model's own). Each retry multiplies the state space.
    #[arg(long, value_name = "N")]
    retries: Option<u64>,
    /// Build a deliberately broken variant into the model (a negative control); `fencecheck
    /// list` names each model's mutants. Without MODEL, checks the models it applies to.
    #[arg(long, value_name = "NAME")]
    mutant: Option<String>,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// Models to check (default: all). See `fencecheck list`.
    #[arg(value_name = "MODEL")]
    models: Vec<String>,
    #[command(flatten)]
    size: SizeArgs,
    /// Checker threads (default: one per core).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Turn symmetry reduction over the clients off.
    #[arg(long)]
    no_symmetry: bool,
    /// Stop each search once it finds more than this many distinct states (the count the
    /// results show); undecided properties are reported as incomplete. Runs the lean search.
    #[arg(long, value_name = "N")]
    max_states: Option<usize>,
    /// Exit 0 even when a search was cut short by --max-states.
    #[arg(long)]
    allow_incomplete: bool,
    /// The search that decides the verdicts: Stateright's checker, or fencecheck's own lean
    /// search (the same states and verdicts; less work per state, and threads share work).
    /// Default: lean.
    #[arg(long, value_enum)]
    engine: Option<EngineArg>,
    /// Print the results as JSON (one object per model and property) instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the results as JUnit XML to FILE (one test case per model and property).
    #[arg(long, value_name = "FILE")]
    junit: Option<std::path::PathBuf>,
    /// Override a declared expectation, e.g. `fenced.storage_in_lease_order=violated`
    /// (for testing a gate). Repeatable.
    #[arg(long, value_name = "MODEL.PROPERTY=holds|violated")]
    expect: Vec<String>,
}

/// `--engine`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum EngineArg {
    /// Stateright's depth-first checker.
    Stateright,
    /// fencecheck's own depth-first search.
    Lean,
}

#[derive(Debug, Args)]
struct ExploreArgs {
    /// The model to explore.
    #[arg(value_name = "MODEL")]
    model: String,
    #[command(flatten)]
    size: SizeArgs,
    /// Port on 127.0.0.1.
    #[arg(long, value_name = "P", default_value_t = 3000)]
    port: u16,
}

/// A usage error: one line naming the input and what was expected; exit 2.
#[derive(Debug)]
pub(crate) struct UsageError(pub String);

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            use clap::error::ErrorKind;
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) {
                let _ = err.print();
                return ExitCode::SUCCESS;
            }
            if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                use clap::CommandFactory;
                let commands: Vec<String> = Cli::command()
                    .get_subcommands()
                    .filter(|c| !c.is_hide_set())
                    .map(|c| c.get_name().to_string())
                    .collect();
                eprintln!(
                    "error: no command given; expected one of: {} (see `fencecheck --help`)",
                    commands.join(", ")
                );
                return exit::code(exit::USAGE);
            }
            // One line: clap's own message without the usage block that follows it.
            let rendered = err.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("{} (see `fencecheck --help`)", message.join("; "));
            return exit::code(exit::USAGE);
        }
    };
    let result = match cli.command {
        Command::Check(args) => check::run(args),
        Command::List => {
            check::list();
            Ok(exit::code(exit::OK))
        }
        Command::Explore(args) => check::explore(args),
        #[cfg(feature = "backends")]
        Command::Demo(args) => demo::run(args),
        Command::Report(args) => report::run(args),
        Command::Validate(args) => validate::run(args),
        #[cfg(feature = "backends")]
        Command::Run(args) => run::run(args),
        #[cfg(feature = "backends")]
        Command::Torture(args) => torture::run(args),
        #[cfg(feature = "backends")]
        Command::TortureWorker(args) => torture::worker(args),
        #[cfg(feature = "backends")]
        Command::RaftNode(args) => raft_node::run(args),
    };
    result.unwrap_or_else(|UsageError(message)| {
        eprintln!("error: {message}");
        exit::code(exit::USAGE)
    })
}

/// Parses `30s`, `500ms`, `2m`, `1h`, `1.5s`.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} has no unit; expected e.g. 500ms, 30s, 2m or 1h"))?;
    let (number, unit) = t.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a number followed by ms, s, m or h"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?}; expected ms, s, m or h"
            ))
        }
    };
    let secs = n * scale;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("{text:?} is too long"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// The valid model names, for error messages.
pub(crate) fn model_names() -> String {
    catalog()
        .iter()
        .map(|m| m.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes `contents` to `path` through a temporary file and a rename, so that a failure never
/// leaves a half-written report.
fn write_file(path: &std::path::Path, contents: &str) -> Result<(), UsageError> {
    let fail = |e: std::io::Error| UsageError(format!("cannot write {}: {e}", path.display()));
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)
}
