//! `fencecheck run`: run a command while holding a lease, like `flock` across machines; and the
//! hidden `fencecheck worker` the pause tests drive line by line.

use super::UsageError;
use clap::{Args, ValueEnum};
use fencecheck::backend::{
    hold, Acquired, BackendError, EtcdLock, EtcdOptions, FencedStorage, Grant, KeepaliveOptions,
    LockService, PgFencedStore, RedisLock, RedisOptions, WriteOutcome, ZkLock, ZkOptions,
};
use fencecheck::protocol::{FencePolicy, Token};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// Exit status when the lock is held by someone else (and `--wait` did not get it).
pub(super) const EXIT_LOCK_BUSY: u8 = 75;
/// Exit status when the lease was lost while the command ran and the command was terminated.
pub(super) const EXIT_LEASE_LOST: u8 = 76;
/// Exit status when the lock service could not be used (unreachable, timed out, refused).
pub(super) const EXIT_BACKEND: u8 = 69;

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
}

/// The lock service chosen on the command line, connected.
enum AnyLock {
    Redis(Arc<RedisLock>),
    Etcd(Arc<EtcdLock>),
    Zk(Arc<ZkLock>),
}

/// Where each backend is, from the command line.
struct Servers<'a> {
    redis_url: &'a str,
    endpoints: Vec<String>,
    zk: &'a str,
}

/// Connects the chosen backend; every request bounded by `timeout`.
async fn connect_lock(
    backend: Backend,
    servers: &Servers<'_>,
    name: &str,
    ttl: Duration,
    timeout: Duration,
) -> Result<AnyLock, BackendError> {
    Ok(match backend {
        Backend::Redis => {
            let options = RedisOptions {
                connect_timeout: timeout,
                response_timeout: timeout,
            };
            AnyLock::Redis(Arc::new(RedisLock::connect_with(
                servers.redis_url,
                name,
                ttl,
                options,
            )?))
        }
        Backend::Etcd => {
            let options = EtcdOptions {
                connect_timeout: timeout,
                request_timeout: timeout,
            };
            AnyLock::Etcd(Arc::new(
                EtcdLock::connect_with(&servers.endpoints, name, ttl, options).await?,
            ))
        }
        Backend::Zookeeper => {
            let options = ZkOptions {
                connect_timeout: timeout,
                request_timeout: timeout,
            };
            AnyLock::Zk(Arc::new(
                ZkLock::connect_with(servers.zk, name, ttl, options).await?,
            ))
        }
    })
}

fn endpoints_of(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect()
}

/// Parses `30s`, `500ms`, `2m`, `1h`, `1.5s`.
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
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
    Ok(Duration::from_secs_f64(secs))
}

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// Where the lock lives.
    #[arg(long, value_enum, default_value_t = Backend::Redis)]
    backend: Backend,
    /// The Redis server (`redis://HOST:PORT[/DB]`).
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// The etcd cluster's client URLs, comma-separated.
    #[arg(long, value_name = "A,B,C", default_value = "http://127.0.0.1:2379")]
    endpoints: String,
    /// The ZooKeeper ensemble, HOST:PORT comma-separated. The TTL becomes the session timeout,
    /// which the servers clamp to their [minSessionTimeout, maxSessionTimeout].
    #[arg(long, value_name = "HOST:PORT,...", default_value = "127.0.0.1:2181")]
    zk: String,
    /// The lock's name: every `run` with the same name excludes the others.
    #[arg(long, value_name = "NAME")]
    name: String,
    /// The lease's time to live (e.g. 30s). A holder that dies frees the lock after this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    ttl: Duration,
    /// Wait for the lock instead of giving up at once; with a DURATION, give up after it.
    #[arg(long, value_name = "DURATION", num_args = 0..=1, default_missing_value = "forever")]
    wait: Option<String>,
    /// After the lease is lost, how long the command has between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    grace: Duration,
    /// Margin subtracted from the lease's deadline for clock drift (default: 1 % of the TTL
    /// plus 2 ms).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    drift: Option<Duration>,
    /// This holder's name in the lock (default: HOSTNAME:PID).
    #[arg(long, value_name = "ID")]
    owner: Option<String>,
    /// Bound on connecting to and each request to the lock service.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
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
    match e {
        BackendError::Invalid { .. } => Err(UsageError(e.to_string())),
        other => {
            eprintln!("fencecheck run: {other}");
            Ok(ExitCode::from(EXIT_BACKEND))
        }
    }
}

pub(super) fn run(args: RunArgs) -> Result<ExitCode, UsageError> {
    let wait = match args.wait.as_deref() {
        None => Some(Duration::ZERO),
        Some("forever") => None,
        Some(text) => Some(parse_duration(text).map_err(|e| UsageError(format!("--wait {e}")))?),
    };
    let owner = args.owner.clone().unwrap_or_else(default_owner);
    runtime().block_on(async move {
        let servers = Servers {
            redis_url: &args.redis_url,
            endpoints: endpoints_of(&args.endpoints),
            zk: &args.zk,
        };
        let lock = connect_lock(args.backend, &servers, &args.name, args.ttl, args.timeout).await;
        match lock {
            Ok(AnyLock::Redis(l)) => run_holding(l, owner, wait, args).await,
            Ok(AnyLock::Etcd(l)) => run_holding(l, owner, wait, args).await,
            Ok(AnyLock::Zk(l)) => run_holding(l, owner, wait, args).await,
            Err(e) => backend_failure(e),
        }
    })
}

async fn run_holding<L: LockService + 'static>(
    lock: Arc<L>,
    owner: String,
    wait: Option<Duration>,
    args: RunArgs,
) -> Result<ExitCode, UsageError> {
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
            Err(e) => Err(e),
        },
        Some(d) => lock.acquire(&owner, d).await,
        // "Forever": a century, re-armed never in practice.
        None => {
            lock.acquire(&owner, Duration::from_secs(100 * 365 * 86_400))
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
    let keepalive = KeepaliveOptions {
        every: None,
        drift: args.drift,
    };
    let mut held = hold(Arc::clone(&lock), grant, keepalive);
    let mut child = match tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("FENCECHECK_TOKEN", token.to_string())
        .env("FENCECHECK_LOCK", &args.name)
        .env("FENCECHECK_OWNER", &owner)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            let _ = held.release().await;
            return Err(UsageError(format!(
                "cannot start {:?}: {e}",
                args.command[0]
            )));
        }
    };
    let pid = child.id();
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .expect("install SIGINT handler");
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    let forward = |sig: i32| {
        if let Some(pid) = pid {
            // SAFETY: kill(2) on the PID of our own child.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| UsageError(format!("waiting for the command: {e}")))?;
                match held.release().await {
                    Ok(true) => {}
                    Ok(false) => eprintln!(
                        "fencecheck run: warning: the lease (token {token}) had already ended \
                         when the command finished"
                    ),
                    Err(e) => eprintln!("fencecheck run: warning: release failed: {e}"),
                }
                return Ok(exit_code_of(status));
            }
            reason = held.lost() => {
                eprintln!(
                    "fencecheck run: lease on {:?} (token {token}) lost: {reason}; sending \
                     SIGTERM to the command",
                    args.name
                );
                forward(libc::SIGTERM);
                let status = match tokio::time::timeout(args.grace, child.wait()).await {
                    Ok(s) => s.ok(),
                    Err(_) => {
                        eprintln!(
                            "fencecheck run: the command did not stop within {:?}; SIGKILL",
                            args.grace
                        );
                        forward(libc::SIGKILL);
                        child.wait().await.ok()
                    }
                };
                if let Some(s) = status {
                    eprintln!("fencecheck run: the command ended: {s}");
                }
                return Ok(ExitCode::from(EXIT_LEASE_LOST));
            }
            _ = interrupt.recv() => forward(libc::SIGINT),
            _ = terminate.recv() => forward(libc::SIGTERM),
        }
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

#[derive(Debug, Args)]
pub(super) struct WorkerArgs {
    /// Where the lock lives.
    #[arg(long, value_enum, default_value_t = Backend::Redis)]
    backend: Backend,
    /// The Redis holding the lock.
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// The etcd cluster holding the lock.
    #[arg(long, value_name = "A,B,C", default_value = "http://127.0.0.1:2379")]
    endpoints: String,
    /// The ZooKeeper ensemble holding the lock.
    #[arg(long, value_name = "HOST:PORT,...", default_value = "127.0.0.1:2181")]
    zk: String,
    /// The PostgreSQL holding the data.
    #[arg(long, value_name = "URL")]
    pg_url: String,
    /// Lock name.
    #[arg(long)]
    name: String,
    /// Lease TTL.
    #[arg(long, value_parser = parse_duration)]
    ttl: Duration,
    /// This worker's owner name.
    #[arg(long)]
    owner: String,
    /// The key to write.
    #[arg(long, default_value = "data")]
    key: String,
    /// The table to write.
    #[arg(long, default_value = "fenced")]
    table: String,
    /// Write through a plain upsert that ignores tokens (the negative control).
    #[arg(long)]
    unfenced: bool,
}

/// A worker driven over stdin, one command a line; it answers one line each:
/// `acquire` -> `GRANTED <token>` (waits up to 30 s) · `write <value>` -> `ACCEPTED` or `REJECTED
/// <highest>` (no lease check: the check happened before the pause) · `write-if-held <value>` ->
/// like `write`, or `LOST <reason>` when the safe deadline passed · `release` -> `RELEASED
/// <true|false>` · EOF ends it.
pub(super) fn worker(args: WorkerArgs) -> Result<ExitCode, UsageError> {
    runtime().block_on(async move {
        let fail = |e: BackendError| UsageError(format!("worker {}: {e}", args.owner));
        let servers = Servers {
            redis_url: &args.redis_url,
            endpoints: endpoints_of(&args.endpoints),
            zk: &args.zk,
        };
        let timeout = Duration::from_secs(2);
        let lock = connect_lock(args.backend, &servers, &args.name, args.ttl, timeout)
            .await
            .map_err(fail)?;
        match lock {
            AnyLock::Redis(l) => serve_worker(l, &args).await,
            AnyLock::Etcd(l) => serve_worker(l, &args).await,
            AnyLock::Zk(l) => serve_worker(l, &args).await,
        }
    })
}

async fn serve_worker<L: LockService + 'static>(
    lock: Arc<L>,
    args: &WorkerArgs,
) -> Result<ExitCode, UsageError> {
    {
        let fail = |e: BackendError| UsageError(format!("worker {}: {e}", args.owner));
        let policy = if args.unfenced {
            FencePolicy::AcceptAll
        } else {
            FencePolicy::Fenced
        };
        let store =
            PgFencedStore::connect_with(&args.pg_url, &args.table, policy, Duration::from_secs(5))
                .await
                .map_err(fail)?;
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        let mut held = None;
        let say = |line: String| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        };
        while let Ok(Some(line)) = lines.next_line().await {
            let (cmd, arg) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            match cmd {
                "acquire" => match lock.acquire(&args.owner, Duration::from_secs(30)).await {
                    Ok(Some(g)) => {
                        say(format!("GRANTED {}", g.token));
                        held = Some(hold(Arc::clone(&lock), g, KeepaliveOptions::default()));
                    }
                    Ok(None) => say("BUSY".into()),
                    Err(e) => say(format!("ERROR {e}")),
                },
                "write" | "write-if-held" => {
                    let Some(h) = held.as_ref() else {
                        say("ERROR no lease".into());
                        continue;
                    };
                    if cmd == "write-if-held" {
                        if let Some(reason) = h.lost_reason() {
                            say(format!("LOST {reason}"));
                            continue;
                        }
                    }
                    let token: Token = h.token();
                    match store.write(&args.key, token, arg.as_bytes()).await {
                        Ok(WriteOutcome::Accepted) => say("ACCEPTED".into()),
                        Ok(WriteOutcome::Stale(s)) => say(format!("REJECTED {}", s.highest)),
                        Err(e) => say(format!("ERROR {e}")),
                    }
                }
                "release" => match held.take() {
                    Some(h) => match h.release().await {
                        Ok(done) => say(format!("RELEASED {done}")),
                        Err(e) => say(format!("ERROR {e}")),
                    },
                    None => say("RELEASED false".into()),
                },
                other => say(format!("ERROR unknown command {other:?}")),
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}
