//! `fencecheck run`: run a command while holding a lease, like `flock` across machines.

use super::UsageError;
use clap::{Args, ValueEnum};
use fencecheck::backend::{
    connect, hold, parse_endpoints, Acquired, AnyLock, BackendError, Grant, KeepaliveOptions,
    LockService, LockSpec,
};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

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

/// Where the lock lives: the flags `run` shares with `demo`'s real backends.
#[derive(Debug, Args)]
pub(super) struct LockArgs {
    /// Where the lock lives.
    #[arg(long, value_enum, default_value_t = Backend::Redis)]
    pub(super) backend: Backend,
    /// The Redis server (`redis://HOST:PORT[/DB]`).
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379")]
    pub(super) redis_url: String,
    /// The etcd cluster's client URLs, comma-separated.
    #[arg(long, value_name = "A,B,C", default_value = "http://127.0.0.1:2379")]
    pub(super) endpoints: String,
    /// The ZooKeeper ensemble, HOST:PORT comma-separated. The TTL becomes the session timeout,
    /// which the servers clamp to their [minSessionTimeout, maxSessionTimeout].
    #[arg(long, value_name = "HOST:PORT,...", default_value = "127.0.0.1:2181")]
    pub(super) zk: String,
}

impl LockArgs {
    /// The chosen backend and its address.
    pub(super) fn spec(&self) -> LockSpec {
        match self.backend {
            Backend::Redis => LockSpec::Redis {
                url: self.redis_url.clone(),
            },
            Backend::Etcd => LockSpec::Etcd {
                endpoints: parse_endpoints(&self.endpoints),
            },
            Backend::Zookeeper => LockSpec::Zookeeper {
                connect: self.zk.clone(),
            },
        }
    }
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
    #[command(flatten)]
    lock: LockArgs,
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
        match connect(&args.lock.spec(), &args.name, args.ttl, args.timeout).await {
            Ok(lock) => run_holding(Arc::new(lock), owner, wait, args).await,
            Err(e) => backend_failure(e),
        }
    })
}

async fn run_holding(
    lock: Arc<AnyLock>,
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
