//! `fencecheck run`: run a command while holding a lease, like `flock` across machines.

use super::floor::{FloorError, TokenFloor};
use super::target::LockArg;
use super::{parse_duration, UsageError};
use clap::Args;
use fencecheck::backend::{
    connect, hold_on, BackendError, ErrorKind, Grant, HeldLease, KeepaliveOptions, LockService,
    LockSpec, Recorder, Stop,
};
use fencecheck::protocol::{safe_deadline, Observed, Phase, Schedule, ScheduleError, TTL_NOTE};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

mod acquire;
mod supervise;

use acquire::{acquire_lease, ride_out};

use supervise::{
    die_with, end_group, exit_code_of, group_alive, signal_group, tell_watchdog, Signals, Watchdog,
};

use super::exit::{
    HELD_ELSEWHERE as EXIT_LOCK_BUSY, LEASE_LOST as EXIT_LEASE_LOST,
    TOKEN_RESET as EXIT_TOKEN_REGRESSED, UNAVAILABLE as EXIT_BACKEND,
};

/// Where the lock lives.
#[derive(Debug, Args)]
pub(super) struct LockArgs {
    /// The lock service: redis://HOST:PORT[/DB], etcd://HOST:PORT[,HOST:PORT...] (a member may
    /// be a full http:// URL), zk://HOST:PORT[,...] (a NAME starting with / is a lock path
    /// shared with Curator's InterProcessMutex) or raft://HOST:PORT[,...] (nodes started with
    /// `fencecheck raft-node`); or a kind alone (redis, etcd, zk, raft) for its usual local
    /// address.
    #[arg(long, value_name = "SPEC", default_value = "redis")]
    pub(super) lock: LockArg,
}

impl LockArgs {
    /// The lock service's kind, as `--lock` spells it.
    pub(super) fn backend_name(&self) -> &'static str {
        self.lock.kind().name()
    }

    /// The lock service's address: the one given, or the kind's usual local one. The in-process
    /// lock is refused: `run` coordinates processes, possibly on many machines.
    pub(super) fn spec(&self) -> Result<LockSpec, UsageError> {
        match &self.lock {
            LockArg::At(spec) => Ok(spec.clone()),
            LockArg::Kind(kind) => kind.default_spec().ok_or_else(|| {
                UsageError(
                    "--lock local: the in-process lock cannot coordinate separate runs; expected \
                     a lock service such as redis://HOST:PORT or etcd://HOST:PORT"
                        .into(),
                )
            }),
        }
    }
}

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    #[command(flatten)]
    lock: LockArgs,
    /// The lock's name: every `run` with the same name excludes the others.
    #[arg(long, value_name = "NAME")]
    name: String,
    /// The lease's time to live (e.g. 30s). A holder that dies frees the lock after this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    ttl: Duration,
    /// Wait for the lock instead of giving up at once; with a DURATION, give up after it. An
    /// unreachable lock service is waited out too (retries back off from 50 ms to 1 s).
    #[arg(long, value_name = "DURATION", num_args = 0..=1, default_missing_value = "forever")]
    wait: Option<String>,
    /// How long the command has between SIGTERM and SIGKILL. Both come inside the lease:
    /// SIGTERM at the safe deadline minus the grace, SIGKILL at the safe deadline; so the grace
    /// must fit in TTL minus drift (default: a quarter of that, at most 10s). Renewals come
    /// often enough that two fall before SIGTERM is due.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    grace: Option<Duration>,
    /// Margin subtracted from the lease's deadline for clock drift (default: 1 % of the TTL
    /// plus 2 ms).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    drift: Option<Duration>,
    /// This holder's name in the lock (default: HOSTNAME:PID).
    #[arg(long, value_name = "ID")]
    owner: Option<String>,
    /// Where the token floor is kept: the highest token a run on this machine was granted, per
    /// lock service and NAME (default: $XDG_STATE_HOME/fencecheck or
    /// ~/.local/state/fencecheck). A grant at or below it is refused with exit 78.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// Do not keep or check the token floor across runs.
    #[arg(long, conflicts_with = "state_dir")]
    no_token_floor: bool,
    /// Bound on connecting to and each request to the lock service.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
    /// Append what this run observes of the lock to FILE as it happens: the acquire and its
    /// answer, every renewal and its answer, the moment it concludes the lease is lost, the
    /// release. One line per event, stamped with the machine's monotonic clock, so the files of
    /// several runs on one machine merge; `fencecheck validate` replays them through the model.
    #[arg(long, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
    /// The command and its arguments (after `--`). It gets FENCECHECK_TOKEN, FENCECHECK_LOCK and
    /// FENCECHECK_OWNER in its environment.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("{host}:{}", std::process::id())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
}

fn backend_failure(e: BackendError) -> Result<ExitCode, UsageError> {
    match e.kind() {
        ErrorKind::Invalid => Err(UsageError(e.to_string())),
        _ => {
            eprintln!("fencecheck run: {e}");
            Ok(ExitCode::from(EXIT_BACKEND))
        }
    }
}

/// The checks that need no server: a positive timeout, and a stop schedule that fits the TTL.
fn check_args(args: &RunArgs) -> Result<(), UsageError> {
    if args.timeout.is_zero() {
        return Err(UsageError(
            "--timeout 0s: expected a positive bound on each request, such as 2s".into(),
        ));
    }
    fencecheck::backend::Ttl::new(args.ttl)
        .map_err(|e| UsageError(fencecheck::backend::BackendError::from(e).to_string()))?;
    keepalive(args).schedule(args.ttl).map_err(|e| {
        let flag = match e {
            ScheduleError::DriftTooLarge { drift, .. } if args.drift.is_none() => {
                format!("the default --drift of {drift:?} (1 % of the TTL + 2 ms)")
            }
            ScheduleError::DriftTooLarge { drift, .. } => format!("--drift {drift:?}"),
            ScheduleError::GraceTooLong { grace, .. } => format!("--grace {grace:?}"),
        };
        UsageError(format!("{flag} with --ttl {:?}: {e}", args.ttl))
    })?;
    Ok(())
}

pub(super) fn run(args: RunArgs) -> Result<ExitCode, UsageError> {
    check_args(&args)?;
    let spec = args.lock.spec()?;
    let floor = if args.no_token_floor {
        None
    } else {
        let dir = args
            .state_dir
            .clone()
            .or_else(super::floor::default_dir)
            .ok_or_else(|| {
                UsageError(
                    "no directory for the token floor: neither XDG_STATE_HOME nor HOME is set; \
                 pass --state-dir DIR or --no-token-floor"
                        .into(),
                )
            })?;
        Some(TokenFloor::new(&dir, &spec, &args.name))
    };
    let wait = match args.wait.as_deref() {
        None => Some(Duration::ZERO),
        Some("forever") => None,
        Some(text) => Some(parse_duration(text).map_err(|e| UsageError(format!("--wait {e}")))?),
    };
    let owner = args.owner.clone().unwrap_or_else(default_owner);
    let recorder = match &args.trace {
        None => None,
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| UsageError(format!("--trace {}: {e}", path.display())))?;
            Some(Recorder::writing_to(file))
        }
    };
    let runtime = runtime();
    let code = runtime.block_on(async move {
        // With --wait, an unreachable or slow lock service is waited out like a busy lock.
        let until = wait.map(|d| Instant::now() + d);
        let connected = ride_out(args.wait.is_some(), until, || {
            connect(&spec, &args.name, args.ttl, args.timeout)
        })
        .await;
        match connected {
            Ok(lock) => {
                let ttl = lock.ttl();
                if ttl.adjusted() {
                    // etcd counts whole seconds; ZooKeeper clamps session timeouts to its bounds.
                    eprintln!(
                        "fencecheck run: {} grants leases of {ttl}; the stop schedule counts with \
                         what it grants",
                        args.lock.backend_name()
                    );
                }
                if let Some(r) = &recorder {
                    // The TTL the server grants, for `fencecheck validate` to replay with.
                    r.note(&format!(
                        "{TTL_NOTE} {} (lock {:?} on {}, owner {owner})",
                        ttl.granted().as_micros(),
                        args.name,
                        args.lock.backend_name()
                    ));
                }
                let waiting = (wait, until);
                let code = match &recorder {
                    Some(r) => {
                        let traced = Arc::new(r.lock(lock));
                        run_holding(traced, owner, waiting, floor, Some(r), args).await
                    }
                    None => run_holding(Arc::new(lock), owner, waiting, floor, None, args).await,
                };
                if let Some(e) = recorder.as_ref().and_then(Recorder::write_error) {
                    eprintln!("fencecheck run: warning: the trace file is incomplete: {e}");
                }
                code
            }
            Err(e) => backend_failure(e),
        }
    });
    // A host-name lookup still in flight (the resolver cannot be interrupted) must not hold the
    // exit for its own timeout: what `run` had to do is done.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

async fn run_holding<L: LockService + 'static>(
    lock: Arc<L>,
    owner: String,
    waiting: (Option<Duration>, Option<Instant>),
    floor: Option<TokenFloor>,
    recorder: Option<&Recorder>,
    args: RunArgs,
) -> Result<ExitCode, UsageError> {
    // A grant that arrived too late to run on is handed back, and asked for again while the
    // wait lasts (a server stopped, then answering a request queued before the stop).
    let (grant, schedule) = loop {
        let grant = match acquire_lease(&lock, &owner, waiting, &args).await {
            Ok(grant) => grant,
            Err(code) => return code,
        };
        match judge_grant(lock.as_ref(), &owner, &grant, floor.as_ref(), &args).await {
            Ok(schedule) => break (grant, schedule),
            Err(Judged::Late(why)) if may_wait_on(waiting) => {
                eprintln!("fencecheck run: {why}; asking again (--wait)");
            }
            Err(Judged::Late(why)) => {
                eprintln!("fencecheck run: {why}; not running the command");
                return Ok(ExitCode::from(EXIT_LEASE_LOST));
            }
            Err(Judged::Refused(code)) => return code,
        }
    };
    let token = grant.token;
    let grace = schedule.policy.grace();
    let mut held = hold_on(Arc::clone(&lock), grant, schedule);
    // The watchdog runs before the command exists: the command tells it its process group from
    // between fork and exec, so no process the command starts can escape a supervisor killed at
    // any moment.
    let watchdog = match Watchdog::start() {
        Ok(w) => w,
        Err(e) => {
            let _ = held.release().await;
            return Err(UsageError(format!(
                "cannot start the watchdog that ends the command if this supervisor is killed: {e}"
            )));
        }
    };
    let mut child = match spawn_command(&args, token, &owner, &watchdog) {
        Ok(c) => c,
        Err(e) => {
            let _ = held.release().await;
            return Err(UsageError(format!(
                "cannot start {:?}: {e}",
                args.command[0]
            )));
        }
    };
    let group = child.id().map(|pid| pid as libc::pid_t);
    let record = |what: Observed| {
        if let Some(r) = recorder {
            r.record(&owner, what);
        }
    };
    record(Observed::WorkStarted { token });
    let concluded_lost = || record(Observed::LeaseLost { token });
    let status = supervise(&mut child, &mut held, group, &args.name, &concluded_lost).await;
    let status = status.map_err(|e| UsageError(format!("waiting for the command: {e}")))?;
    // What the command left running in its group ends before the lease is released: when it
    // finished on its own, its leftovers get SIGTERM and the grace; when it is being stopped, the
    // group keeps the schedule it had. SIGKILL at the force-stop time either way.
    let force_at = held.force_stop_at();
    let working = held.phase() == Phase::Working;
    let by = if working {
        if group_alive(group) {
            signal_group(group, libc::SIGTERM);
        }
        force_at.min(Instant::now() + grace)
    } else {
        force_at
    };
    end_group(group, by).await;
    // The command's whole process group is gone.
    record(Observed::WorkStopped { token });
    drop(watchdog);
    Ok(release_after(held, working, status).await)
}

/// Why a grant runs nothing.
enum Judged {
    /// It arrived with too little of the lease left: what to say of it.
    Late(String),
    /// Refused for good (the token floor, a TTL the schedule cannot use): what `run` returns.
    Refused(Result<ExitCode, UsageError>),
}

/// Whether `run` still waits: `--wait` not given as zero and not run out.
fn may_wait_on((wait, until): (Option<Duration>, Option<Instant>)) -> bool {
    wait.is_none_or(|d| !d.is_zero()) && until.is_none_or(|u| Instant::now() < u)
}

/// Whether the command may run under `grant`: its token above the floor, the schedule built
/// from the TTL the server granted (etcd rounds it up, ZooKeeper clamps it), and more than the
/// grace left before the safe deadline. A grant refused here is released.
async fn judge_grant<L: LockService>(
    lock: &L,
    owner: &str,
    grant: &Grant,
    floor: Option<&TokenFloor>,
    args: &RunArgs,
) -> Result<Schedule, Judged> {
    let token = grant.token;
    let refused = match floor.map(|f| (f, f.admit(token))) {
        None | Some((_, Ok(()))) => None,
        Some((f, Err(FloorError::Regressed { floor: seen }))) => {
            eprintln!(
                "fencecheck run: token went backwards on lock {:?}: granted {token} after a run \
                 here was granted {seen}, so the lock service lost its token counter (restart \
                 without persistence?); not running. Leases from before the loss are not fenced \
                 from new ones: persist the counter, then remove {} to accept it",
                args.name,
                f.path().display()
            );
            Some(Ok(ExitCode::from(EXIT_TOKEN_REGRESSED)))
        }
        Some((_, Err(FloorError::Io(e)))) => Some(Err(UsageError(format!(
            "token floor: {e}; pass --state-dir DIR or --no-token-floor"
        )))),
    };
    let granted = grant.ttl;
    let schedule = match (refused, keepalive(args).schedule(granted)) {
        (Some(refused), _) => Err(Judged::Refused(refused)),
        (None, Err(e)) => Err(Judged::Refused(Err(UsageError(format!(
            "the server granted a TTL of {granted:?}: {e}"
        ))))),
        (None, Ok(schedule)) => Ok(schedule),
    };
    // A grant that arrived with too little of the lease left (a late reply, a pause) runs nothing.
    // Judged on the grant itself, before any renewal is sent: a renewal racing this check must not
    // decide whether the command starts.
    let schedule = schedule.and_then(|schedule| {
        let since_sent = Instant::now().saturating_duration_since(grant.sent_at);
        let deadline = safe_deadline(Duration::ZERO, granted, schedule.drift);
        if schedule.policy.may_start(since_sent, deadline) {
            return Ok(schedule);
        }
        Err(Judged::Late(format!(
            "the lease on {:?} (token {token}) arrived with {:?} left before its safe deadline, \
             not more than the grace {:?}",
            args.name,
            deadline.saturating_sub(since_sent),
            schedule.policy.grace(),
        )))
    });
    if schedule.is_err() {
        let _ = lock.release(owner, token).await;
    }
    schedule
}

/// Starts the command in its own process group with the lease in its environment, tied to this
/// supervisor (it dies with it) and reported to the watchdog.
fn spawn_command(
    args: &RunArgs,
    token: fencecheck::protocol::Token,
    owner: &str,
    watchdog: &Watchdog,
) -> std::io::Result<tokio::process::Child> {
    let report_to = watchdog.report_fd();
    let supervisor = std::process::id();
    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("FENCECHECK_TOKEN", token.to_string())
        .env("FENCECHECK_LOCK", &args.name)
        .env("FENCECHECK_OWNER", owner)
        // Its own process group: every signal goes to the command and all it starts.
        .process_group(0);
    // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid, getpid, write).
    unsafe {
        command.pre_exec(move || {
            die_with(supervisor)?;
            tell_watchdog(report_to)
        });
    }
    command.spawn()
}

/// Waits for the command while the lease's schedule asks it to stop (SIGTERM) and kills it
/// (SIGKILL) when due, and passes this process's signals on to its group.
async fn supervise<L: LockService + 'static>(
    child: &mut tokio::process::Child,
    held: &mut HeldLease<L>,
    group: Option<libc::pid_t>,
    name: &str,
    concluded_lost: &dyn Fn(),
) -> std::io::Result<std::process::ExitStatus> {
    let token = held.token();
    let mut signals = Signals::install();
    loop {
        tokio::select! {
            status = child.wait() => return status,
            stop = held.next_stop() => match stop {
                Stop::Gently { lost: Some(reason) } => {
                    concluded_lost();
                    eprintln!(
                        "fencecheck run: lease on {name:?} (token {token}) lost: {reason}; \
                         sending SIGTERM to the command's process group"
                    );
                    signal_group(group, libc::SIGTERM);
                }
                Stop::Gently { lost: None } => {
                    concluded_lost();
                    eprintln!(
                        "fencecheck run: lease on {name:?} (token {token}) not renewed; sending \
                         SIGTERM to the command's process group {:?} before the lease's safe \
                         deadline",
                        held.force_stop_at().saturating_duration_since(Instant::now())
                    );
                    signal_group(group, libc::SIGTERM);
                }
                Stop::Force => {
                    eprintln!(
                        "fencecheck run: the command did not stop within the grace ({:?}); \
                         SIGKILL to its process group at the lease's deadline",
                        held.grace()
                    );
                    signal_group(group, libc::SIGKILL);
                }
            },
            sig = signals.next() => signal_group(group, sig),
        }
    }
}

/// Releases the lease once the command's group is gone, and the exit status: the command's own
/// when it finished while the lease held, [`EXIT_LEASE_LOST`] when it was stopped.
async fn release_after<L: LockService + 'static>(
    held: HeldLease<L>,
    working: bool,
    status: std::process::ExitStatus,
) -> ExitCode {
    let token = held.token();
    if !working {
        eprintln!("fencecheck run: the command ended: {status}");
        // The lease may still be ours (stopped on our own deadline, renewals failing): free it
        // for the next holder. The release names this lease's token, so it frees nothing newer.
        match held.release().await {
            Ok(true) => eprintln!("fencecheck run: released the lease (token {token})"),
            Ok(false) => {}
            Err(e) => eprintln!("fencecheck run: could not release the lease: {e}"),
        }
        return ExitCode::from(EXIT_LEASE_LOST);
    }
    match held.release().await {
        Ok(true) => {}
        Ok(false) => eprintln!(
            "fencecheck run: warning: the lease (token {token}) had already ended when the \
             command finished"
        ),
        Err(e) => eprintln!("fencecheck run: warning: release failed: {e}"),
    }
    exit_code_of(status)
}

/// The holder's options as the flags give them; [`KeepaliveOptions::schedule`] fills in the
/// defaults for the TTL at hand.
fn keepalive(args: &RunArgs) -> KeepaliveOptions {
    KeepaliveOptions {
        every: None,
        drift: args.drift,
        grace: args.grace,
    }
}
