//! `fencecheck run`: run a command while holding a lease, like `flock` across machines.

use super::floor::{FloorError, TokenFloor};
use super::{parse_duration, UsageError};
use clap::{Args, ValueEnum};
use fencecheck::backend::{
    connect, default_drift, default_grace, hold, parse_endpoints, Acquired, BackendError,
    ErrorKind, Grant, KeepaliveOptions, LockService, LockSpec, Recorder, Stop,
};
use fencecheck::protocol::{safe_deadline, Observed, Phase, ScheduleError, StopPolicy};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use super::exit::{
    HELD_ELSEWHERE as EXIT_LOCK_BUSY, LEASE_LOST as EXIT_LEASE_LOST,
    TOKEN_RESET as EXIT_TOKEN_REGRESSED, UNAVAILABLE as EXIT_BACKEND,
};

/// Where the lock lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum Backend {
    /// A Redis server (`--redis-url`).
    Redis,
    /// An etcd cluster (`--endpoints`); compatible with `etcdctl lock NAME`.
    Etcd,
    /// A ZooKeeper ensemble (`--zk`); a NAME starting with `/` is a lock path shared with
    /// Curator's InterProcessMutex.
    Zookeeper,
    /// A fencecheck Raft cluster (`--raft`, nodes started with `fencecheck raft-node`).
    Raft,
}

/// The servers' addresses: the flags `run` and `demo` share. Where one is not given, `run` uses
/// the server's default local address and `demo` starts a throwaway server.
#[derive(Debug, Args)]
pub(super) struct ServerArgs {
    /// The Redis server, `redis://HOST:PORT[/DB]` (run: default redis://127.0.0.1:6379; demo:
    /// default a throwaway redis-server).
    #[arg(long, value_name = "URL")]
    pub(super) redis_url: Option<String>,
    /// The etcd cluster's client URLs, comma-separated (run: default http://127.0.0.1:2379; demo:
    /// default a throwaway one-member cluster).
    #[arg(long, value_name = "A,B,C")]
    pub(super) endpoints: Option<String>,
    /// The ZooKeeper ensemble, HOST:PORT comma-separated (run: default 127.0.0.1:2181; demo:
    /// default a throwaway server). The TTL becomes the session timeout, which the servers clamp
    /// to their [minSessionTimeout, maxSessionTimeout].
    #[arg(long, value_name = "HOST:PORT,...")]
    pub(super) zk: Option<String>,
    /// The fencecheck Raft cluster's nodes, HOST:PORT comma-separated (run: default
    /// 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003; demo: default a throwaway three-node cluster).
    #[arg(long, value_name = "HOST:PORT,...")]
    pub(super) raft: Option<String>,
}

impl ServerArgs {
    /// The lock on `backend` at the address given for it; `None` when none was given.
    pub(super) fn given(&self, backend: Backend) -> Option<LockSpec> {
        match backend {
            Backend::Redis => self.redis_url.clone().map(|url| LockSpec::Redis { url }),
            Backend::Etcd => self.endpoints.as_deref().map(|e| LockSpec::Etcd {
                endpoints: parse_endpoints(e),
            }),
            Backend::Zookeeper => self
                .zk
                .clone()
                .map(|connect| LockSpec::Zookeeper { connect }),
            Backend::Raft => self.raft.as_deref().map(|n| LockSpec::Raft {
                nodes: parse_endpoints(n),
            }),
        }
    }
}

/// Where the lock lives.
#[derive(Debug, Args)]
pub(super) struct LockArgs {
    /// Where the lock lives.
    #[arg(long, value_enum, default_value_t = Backend::Redis)]
    pub(super) backend: Backend,
    #[command(flatten)]
    pub(super) servers: ServerArgs,
}

impl LockArgs {
    /// The chosen backend's name, as `--backend` spells it.
    pub(super) fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Redis => "redis",
            Backend::Etcd => "etcd",
            Backend::Zookeeper => "zookeeper",
            Backend::Raft => "raft",
        }
    }

    /// The chosen backend and its address (the server's default local address when none was
    /// given).
    pub(super) fn spec(&self) -> LockSpec {
        self.servers
            .given(self.backend)
            .unwrap_or_else(|| match self.backend {
                Backend::Redis => LockSpec::Redis {
                    url: "redis://127.0.0.1:6379".into(),
                },
                Backend::Etcd => LockSpec::Etcd {
                    endpoints: vec!["http://127.0.0.1:2379".into()],
                },
                Backend::Zookeeper => LockSpec::Zookeeper {
                    connect: "127.0.0.1:2181".into(),
                },
                Backend::Raft => LockSpec::Raft {
                    nodes: parse_endpoints("127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"),
                },
            })
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
    /// must fit in TTL minus drift (default: a quarter of that, at most 10s).
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
    let drift = args.drift.unwrap_or_else(|| default_drift(args.ttl));
    StopPolicy::new(args.ttl, drift, grace_for(args, args.ttl)).map_err(|e| {
        let flag = match e {
            ScheduleError::DriftTooLarge { .. } if args.drift.is_none() => {
                format!("the default --drift of {drift:?} (1 % of the TTL + 2 ms)")
            }
            ScheduleError::DriftTooLarge { .. } => format!("--drift {drift:?}"),
            ScheduleError::GraceTooLong { grace, .. } => format!("--grace {grace:?}"),
        };
        UsageError(format!("{flag} with --ttl {:?}: {e}", args.ttl))
    })?;
    Ok(())
}

pub(super) fn run(args: RunArgs) -> Result<ExitCode, UsageError> {
    check_args(&args)?;
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
        Some(TokenFloor::new(&dir, &args.lock.spec(), &args.name))
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
    runtime().block_on(async move {
        // With --wait, an unreachable or slow lock service is waited out like a busy lock.
        let until = wait.map(|d| Instant::now() + d);
        let spec = args.lock.spec();
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
                        "ttl-us {} (lock {:?} on {}, owner {owner})",
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
    })
}

/// After an acquire that timed out on the client, the server may have granted it all the same:
/// frees a lease the server shows for `owner` (unique to this run: HOST:PID by default), so it
/// does not keep everyone out for a whole TTL. Best effort; says what it did.
async fn free_own_lease<L: LockService>(lock: &L, owner: &str) {
    if let Ok(Some(h)) = lock.holder().await {
        if h.owner == owner && lock.release(owner, h.token).await.unwrap_or(false) {
            eprintln!(
                "fencecheck run: the acquire timed out after the server had granted it; released \
                 that lease (token {})",
                h.token
            );
        }
    }
}

/// Runs `attempt` until it succeeds or fails for a reason other than reachability; when `retry`,
/// an unreachable or slow service is tried again with a backoff (50 ms doubling to 1 s) until
/// `until` (`None`: for ever). One line says so the first time.
async fn ride_out<T, F, Fut>(
    retry: bool,
    until: Option<Instant>,
    mut attempt: F,
) -> Result<T, BackendError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BackendError>>,
{
    let mut backoff = fencecheck::backend::retry::RIDE_OUT;
    let mut said = false;
    loop {
        match attempt().await {
            Err(e) if retry && e.is_transient() => {
                let Some(pause) = backoff.next_pause(Instant::now(), until) else {
                    return Err(e);
                };
                if !said {
                    eprintln!("fencecheck run: {e}; retrying until --wait runs out");
                    said = true;
                }
                tokio::time::sleep(pause).await;
            }
            other => return other,
        }
    }
}

async fn run_holding<L: LockService + 'static>(
    lock: Arc<L>,
    owner: String,
    (wait, until): (Option<Duration>, Option<Instant>),
    floor: Option<TokenFloor>,
    recorder: Option<&Recorder>,
    args: RunArgs,
) -> Result<ExitCode, UsageError> {
    let concluded_lost = |token| {
        if let Some(r) = recorder {
            r.record(&owner, Observed::LeaseLost { token });
        }
    };
    let acquired = match wait {
        Some(d) if d.is_zero() => match lock.try_acquire(&owner).await {
            Ok(Acquired::Granted(g)) => Ok(Some(g)),
            Ok(Acquired::Busy { holder, .. }) => {
                eprintln!(
                    "fencecheck run: lock {:?} is held by {}; not running (use --wait to queue)",
                    args.name,
                    holder.as_deref().unwrap_or("someone else")
                );
                return Ok(ExitCode::from(EXIT_LOCK_BUSY));
            }
            Err(e) if e.kind() == ErrorKind::Timeout => {
                free_own_lease(lock.as_ref(), &owner).await;
                Err(e)
            }
            Err(e) => Err(e),
        },
        // The time left of --wait at each attempt ("forever": a century), the outage ridden out.
        Some(_) | None => {
            let century = Duration::from_secs(100 * 365 * 86_400);
            let timed_out = std::cell::Cell::new(false);
            ride_out(true, until, || {
                let left = until.map_or(century, |u| u.saturating_duration_since(Instant::now()));
                let (lock, owner, timed_out) = (&lock, &owner, &timed_out);
                async move {
                    if timed_out.get() {
                        free_own_lease(lock.as_ref(), owner).await;
                    }
                    let r = lock.acquire(owner, left).await;
                    timed_out.set(r.as_ref().is_err_and(|e| e.kind() == ErrorKind::Timeout));
                    r
                }
            })
            .await
        }
    };
    let grant: Grant = match acquired {
        Ok(Some(g)) => g,
        Ok(None) => {
            eprintln!(
                "fencecheck run: lock {:?} still held after waiting {}; not running",
                args.name,
                args.wait.as_deref().unwrap_or("")
            );
            return Ok(ExitCode::from(EXIT_LOCK_BUSY));
        }
        Err(e) => return backend_failure(e),
    };
    let token = grant.token;
    match floor.as_ref().map(|f| f.admit(token)) {
        None | Some(Ok(())) => {}
        Some(Err(FloorError::Regressed { floor: seen })) => {
            let _ = lock.release(&owner, token).await;
            eprintln!(
                "fencecheck run: token went backwards on lock {:?}: granted {token} after a run \
                 here was granted {seen}, so the lock service lost its token counter (restart \
                 without persistence?); not running. Leases from before the loss are not fenced \
                 from new ones: persist the counter, then remove {} to accept it",
                args.name,
                floor
                    .as_ref()
                    .map_or(String::new(), |f| f.path().display().to_string())
            );
            return Ok(ExitCode::from(EXIT_TOKEN_REGRESSED));
        }
        Some(Err(FloorError::Io(e))) => {
            let _ = lock.release(&owner, token).await;
            return Err(UsageError(format!(
                "token floor: {e}; pass --state-dir DIR or --no-token-floor"
            )));
        }
    }
    // The schedule comes from what the server granted (etcd rounds the TTL up, ZooKeeper clamps it).
    let granted = grant.ttl;
    let drift = args.drift.unwrap_or_else(|| default_drift(granted));
    let grace = grace_for(&args, granted);
    let policy = match StopPolicy::new(granted, drift, grace) {
        Ok(policy) => policy,
        Err(e) => {
            let _ = lock.release(&owner, token).await;
            return Err(UsageError(format!(
                "the server granted a TTL of {granted:?}: {e}"
            )));
        }
    };
    // A grant that arrived with too little of the lease left (a late reply, a pause) runs nothing.
    // Judged on the grant itself, before any renewal is sent: a renewal racing this check must not
    // decide whether the command starts.
    let since_sent = Instant::now().saturating_duration_since(grant.sent_at);
    let deadline = safe_deadline(Duration::ZERO, granted, drift);
    if !policy.may_start(since_sent, deadline) {
        let _ = lock.release(&owner, token).await;
        eprintln!(
            "fencecheck run: the lease on {:?} (token {token}) arrived with {:?} left before \
             its safe deadline, not more than the grace {grace:?}; not running the command",
            args.name,
            deadline.saturating_sub(since_sent),
        );
        return Ok(ExitCode::from(EXIT_LEASE_LOST));
    }
    let keepalive = KeepaliveOptions {
        every: None,
        drift: Some(drift),
        grace: Some(grace),
    };
    let mut held = match hold(Arc::clone(&lock), grant, keepalive) {
        Ok(held) => held,
        Err(e) => {
            let _ = lock.release(&owner, token).await;
            return Err(UsageError(format!(
                "the server granted a TTL of {granted:?}: {e}"
            )));
        }
    };
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
    let report_to = watchdog.report_fd();
    let supervisor = std::process::id();
    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("FENCECHECK_TOKEN", token.to_string())
        .env("FENCECHECK_LOCK", &args.name)
        .env("FENCECHECK_OWNER", &owner)
        // Its own process group: every signal goes to the command and all it starts.
        .process_group(0);
    // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid, getpid, write).
    unsafe {
        command.pre_exec(move || {
            die_with(supervisor)?;
            tell_watchdog(report_to)
        });
    }
    let mut child = match command.spawn() {
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
    let mut signals = Signals::install();
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            stop = held.next_stop() => match stop {
                Stop::Gently { lost: Some(reason) } => {
                    concluded_lost(token);
                    eprintln!(
                        "fencecheck run: lease on {:?} (token {token}) lost: {reason}; sending \
                         SIGTERM to the command's process group",
                        args.name
                    );
                    signal_group(group, libc::SIGTERM);
                }
                Stop::Gently { lost: None } => {
                    concluded_lost(token);
                    eprintln!(
                        "fencecheck run: lease on {:?} (token {token}) not renewed; sending \
                         SIGTERM to the command's process group {:?} before the lease's safe \
                         deadline",
                        args.name,
                        held.force_stop_at().saturating_duration_since(Instant::now())
                    );
                    signal_group(group, libc::SIGTERM);
                }
                Stop::Force => {
                    eprintln!(
                        "fencecheck run: the command did not stop within the grace ({grace:?}); \
                         SIGKILL to its process group at the lease's deadline"
                    );
                    signal_group(group, libc::SIGKILL);
                }
            },
            sig = signals.next() => signal_group(group, sig),
        }
    };
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
    drop(watchdog);
    if !working {
        eprintln!("fencecheck run: the command ended: {status}");
        // The lease may still be ours (stopped on our own deadline, renewals failing): free it
        // for the next holder. The release names this lease's token, so it frees nothing newer.
        match held.release().await {
            Ok(true) => eprintln!("fencecheck run: released the lease (token {token})"),
            Ok(false) => {}
            Err(e) => eprintln!("fencecheck run: could not release the lease: {e}"),
        }
        return Ok(ExitCode::from(EXIT_LEASE_LOST));
    }
    match held.release().await {
        Ok(true) => {}
        Ok(false) => eprintln!(
            "fencecheck run: warning: the lease (token {token}) had already ended when the \
             command finished"
        ),
        Err(e) => eprintln!("fencecheck run: warning: release failed: {e}"),
    }
    Ok(exit_code_of(status))
}

/// The grace between SIGTERM and SIGKILL: `--grace`, or a quarter of the safe window up to 10 s.
fn grace_for(args: &RunArgs, ttl: Duration) -> Duration {
    args.grace
        .unwrap_or_else(|| default_grace(ttl, args.drift.unwrap_or_else(|| default_drift(ttl))))
}

/// In the command's process, before exec: die with the supervisor (SIGKILL when the thread that
/// forked it ends, which here is the supervisor's main thread), and do not start at all if the
/// supervisor is already gone.
fn die_with(supervisor: u32) -> std::io::Result<()> {
    // SAFETY: prctl and getppid are async-signal-safe and touch no memory of ours.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() as u32 != supervisor {
            return Err(std::io::Error::other("the supervisor is gone"));
        }
    }
    Ok(())
}

/// In the command's process, before exec: writes its PID (its process group, from
/// `process_group(0)`) to the watchdog's pipe as one decimal line. One `write` of at most 21
/// bytes to a pipe is atomic.
fn tell_watchdog(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: getpid is async-signal-safe.
    let (buf, len) = decimal_line(unsafe { libc::getpid() } as u64);
    // SAFETY: write(2) from a stack buffer we own, to a descriptor the supervisor keeps open.
    let n = unsafe { libc::write(fd, buf[buf.len() - len..].as_ptr().cast(), len) };
    if n == len as isize {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `n` followed by a newline, right-aligned in a stack buffer (no allocation: this runs between
/// fork and exec), and its length.
fn decimal_line(mut n: u64) -> ([u8; 21], usize) {
    let mut buf = [0u8; 21];
    let mut at = buf.len() - 1;
    buf[at] = b'\n';
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    (buf, buf.len() - at)
}

/// Sends `sig` to the command's whole process group.
fn signal_group(group: Option<libc::pid_t>, sig: i32) {
    if let Some(g) = group {
        // SAFETY: kill(2) on the process group our own child leads.
        unsafe { libc::kill(-g, sig) };
    }
}

/// Whether the command's process group still has members.
fn group_alive(group: Option<libc::pid_t>) -> bool {
    // SAFETY: kill(2) with signal 0 only asks whether the group still has members.
    group.is_some_and(|g| unsafe { libc::kill(-g, 0) } == 0)
}

/// Waits until the command's process group is empty or `by`; then kills what is left and waits
/// (up to a second) for it to go.
async fn end_group(group: Option<libc::pid_t>, by: Instant) {
    while group_alive(group) && Instant::now() < by {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if !group_alive(group) {
        return;
    }
    signal_group(group, libc::SIGKILL);
    let until = Instant::now() + Duration::from_secs(1);
    while group_alive(group) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A process that kills the command's group when the supervisor dies however it dies (kill -9
/// included): it waits for the end of a pipe only the supervisor holds. PR_SET_PDEATHSIG reaches the
/// command itself; this reaches what the command started.
///
/// It is started before the command, and the command writes its process group to the pipe before
/// it execs, so it knows the group before any process of the group can exist. Started after the
/// command (as it once was), a supervisor killed in between left the command's children running.
struct Watchdog {
    child: std::process::Child,
    pipe: std::os::fd::OwnedFd,
}

impl Watchdog {
    fn start() -> std::io::Result<Self> {
        use std::os::fd::FromRawFd;
        use std::os::unix::process::CommandExt;
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two fds we then own; O_CLOEXEC keeps the write end out of every
        // process we start once it execs.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both fds were just created and are owned by nothing else.
        let (read, write) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        // The first line is the group; the end of the pipe is the supervisor's death. With no
        // group (the supervisor died before the command told it), there is nothing to kill.
        let child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .stdin(read)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            // Out of the terminal's group, so a Ctrl-C meant for the supervisor does not end it.
            .process_group(0)
            .spawn()?;
        Ok(Watchdog { child, pipe: write })
    }

    /// The pipe's write end, for the command to write its process group to before it execs.
    fn report_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.pipe.as_raw_fd()
    }
}

/// The watchdog's shell: read the group, wait for the end of the pipe, kill the group.
const WATCHDOG_SCRIPT: &str =
    "read g; while read _; do :; done; case $g in [0-9]*) kill -9 -$g 2>/dev/null;; esac";

impl Drop for Watchdog {
    fn drop(&mut self) {
        // The supervisor is ending normally: stop the watchdog before the pipe closes, so it
        // never signals a process group number that may have been reused.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The terminating signals a supervisor passes on to the command's group instead of dying of them.
struct Signals(Vec<(i32, tokio::signal::unix::Signal)>);

impl Signals {
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let kinds = [
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGQUIT, SignalKind::quit()),
            (libc::SIGUSR1, SignalKind::user_defined1()),
            (libc::SIGUSR2, SignalKind::user_defined2()),
        ];
        Signals(
            kinds
                .into_iter()
                .filter_map(|(n, k)| signal(k).ok().map(|s| (n, s)))
                .collect(),
        )
    }

    /// The next signal received.
    async fn next(&mut self) -> i32 {
        std::future::poll_fn(|cx| {
            for (n, s) in &mut self.0 {
                if s.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*n);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}

#[cfg(test)]
impl Watchdog {
    /// What a killed supervisor leaves: the pipe's write end closed with no orderly stop.
    fn supervisor_dies(self) -> std::process::Child {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: each field is read once and `this` is never dropped, so neither is freed twice.
        let (child, pipe) = unsafe { (std::ptr::read(&this.child), std::ptr::read(&this.pipe)) };
        drop(pipe);
        child
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;

    #[test]
    fn a_pid_is_written_as_one_decimal_line() {
        for n in [0u64, 7, 10, 4_194_304, u64::MAX] {
            let (buf, len) = decimal_line(n);
            assert_eq!(&buf[buf.len() - len..], format!("{n}\n").as_bytes());
        }
    }

    /// Starts `sh` in a group of its own with a background `sleep`, telling the watchdog its group
    /// from before exec when `tell`; returns the shell and the sleep's PID.
    fn group_with_a_background_job(w: &Watchdog, tell: bool) -> (std::process::Child, i32) {
        let fd = w.report_fd();
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .process_group(0);
        if tell {
            // SAFETY: tell_watchdog makes only async-signal-safe calls.
            unsafe { cmd.pre_exec(move || tell_watchdog(fd)) };
        }
        let mut sh = cmd.spawn().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(sh.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (sh, line.trim().parse().unwrap())
    }

    fn alive(pid: i32) -> bool {
        // SAFETY: kill(2) with signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    #[test]
    fn the_watchdog_kills_the_group_it_was_told_when_the_supervisor_dies() {
        let w = Watchdog::start().unwrap();
        let (mut sh, job) = group_with_a_background_job(&w, true);
        let status = w.supervisor_dies().wait().unwrap();
        assert!(status.success(), "the watchdog's shell: {status}");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(sh.wait().unwrap().signal(), Some(libc::SIGKILL));
        let until = Instant::now() + Duration::from_secs(2);
        while alive(job) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !alive(job),
            "the background job {job} outlived the supervisor"
        );
    }

    /// The control: a watchdog that was never told the group (a supervisor killed before it
    /// knew, the old order) kills nothing, and the background job lives on.
    #[test]
    fn a_watchdog_not_told_the_group_kills_nothing() {
        let w = Watchdog::start().unwrap();
        let (mut sh, job) = group_with_a_background_job(&w, false);
        w.supervisor_dies().wait().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let survived = alive(job);
        // SAFETY: kill(2) on the group of the shell this test started.
        unsafe { libc::kill(-(sh.id() as i32), libc::SIGKILL) };
        sh.wait().unwrap();
        assert!(
            survived,
            "the job {job} died without a watchdog that knew its group"
        );
    }
}
