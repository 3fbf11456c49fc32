//! Throwaway servers for tests, demos and benchmarks: `redis-server`, a PostgreSQL cluster, etcd,
//! ZooKeeper and fencecheck Raft nodes (the three replicated ones as one [`Cluster`] type), each on 127.0.0.1 at a free port with its own temporary
//! directory, stopped (by the PID this process started) and removed when dropped.
//!
//! PostgreSQL refuses to run as root; when this process is root the cluster is created and run as
//! the `postgres` user.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod cluster;
mod etcd;
mod postgres;
mod raft;
mod redis;
mod zookeeper;

pub use cluster::{Cluster, Kind, Member};
pub use etcd::{Etcd, EtcdCluster};
pub use postgres::{postgres_installed, PgServer};
pub use raft::{Raft, RaftCluster};
pub use redis::RedisServer;
pub use zookeeper::{ZkCluster, ZooKeeper};

/// Set to `1` to make a missing server binary a test failure instead of a skip.
pub const REQUIRE_SERVERS_ENV: &str = "FENCECHECK_REQUIRE_SERVERS";

/// Whether `FENCECHECK_REQUIRE_SERVERS=1`.
pub fn servers_required() -> bool {
    std::env::var(REQUIRE_SERVERS_ENV).is_ok_and(|v| v == "1")
}

/// A server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The server's binary is not installed.
    #[error("{binary} is not installed ({hint})")]
    Missing {
        /// The binary looked for.
        binary: String,
        /// How to install it.
        hint: &'static str,
    },
    /// It is installed but did not start.
    #[error("{what} failed: {detail}")]
    Failed {
        /// What was being done.
        what: String,
        /// Why, with the server's log tail.
        detail: String,
    },
}

impl ServerError {
    /// Whether the binary is missing (a skip, unless servers are required).
    pub fn is_missing(&self) -> bool {
        matches!(self, ServerError::Missing { .. })
    }

    /// Whether it failed because a port was already in use.
    pub fn is_port_clash(&self) -> bool {
        matches!(self, ServerError::Failed { detail, .. }
            if detail.to_ascii_lowercase().contains("address already in use"))
    }
}

/// Member `i`'s network node when a cluster is started in nodes from `first`; `None` on
/// 127.0.0.1.
fn node_for(first: Option<u8>, i: usize) -> Result<Option<crate::netns::Node>, ServerError> {
    let Some(first) = first else { return Ok(None) };
    let index = u8::try_from(usize::from(first) + i).map_err(|_| {
        failed(
            format!("network node {first} + {i}"),
            "expected at most 250",
        )
    })?;
    crate::netns::Node::create(index)
        .map(Some)
        .map_err(|e| failed(format!("network node {index}"), e))
}

fn failed(what: impl Into<String>, detail: impl ToString) -> ServerError {
    ServerError::Failed {
        what: what.into(),
        detail: detail.to_string(),
    }
}

/// A TCP port on 127.0.0.1 that is free now (bound, then released for a server to take), never
/// one handed out before by this process, and chosen below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`) when there is room there.
///
/// Ports in the ephemeral range are also what the kernel gives every outgoing connection: between
/// the check here and the server's own `bind`, or while a killed server is down before its
/// restart on the same port, a client socket elsewhere on the machine (an etcd member dialling its
/// peers, say) can take the port, and the server then fails with "address already in use". Below
/// the range only another listener can take it.
pub fn free_port() -> std::io::Result<u16> {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    let (low, size) = port_band();
    if size > 0 {
        // Start somewhere different in each process so that two test runs rarely probe the same
        // ports; step by a prime so every port of the band is visited once.
        let seed = u64::from(std::process::id()) * 7919 + u64::from(subsec_nanos());
        let start = seed % u64::from(size);
        for i in 0..u64::from(size) {
            let port = low + ((start + i * 4099) % u64::from(size)) as u16;
            if handed.contains(&port) {
                continue;
            }
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                handed.insert(port);
                return Ok(port);
            }
        }
    }
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if handed.insert(port) {
            return Ok(port);
        }
    }
}

/// The band `free_port` chooses from: `(first port, how many)`, up to 16,384 ports just below the
/// ephemeral range and above 1024; empty when the range starts too low to leave 1,024 ports.
fn port_band() -> (u16, u16) {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let first = low.saturating_sub(16384).max(1025);
    match low.checked_sub(first) {
        Some(size) if size >= 1024 => (first, size),
        _ => (first, 0),
    }
}

/// Runs `start` again, up to three times in all, while it fails because a port it was given was
/// taken before the server could bind it.
fn retry_port_clash<T>(
    what: &str,
    mut start: impl FnMut() -> Result<T, ServerError>,
) -> Result<T, ServerError> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(e) if attempt < 3 && e.is_port_clash() => {
                eprintln!("{what}: a port was taken before the server bound it; retrying on new ports ({e})");
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// The nanoseconds part of the wall clock now: a cheap value that differs between processes.
fn subsec_nanos() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}

/// A directory removed when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory under the system temp dir, named after `label`.
    pub fn new(label: &str) -> std::io::Result<Self> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = subsec_nanos();
        let path = std::env::temp_dir().join(format!(
            "fencecheck-{label}-{}-{}-{nanos}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// A fresh, empty directory under `base` (for example the test's `CARGO_TARGET_TMPDIR`), named
/// after `label`, this process and a sequence number; left for `base`'s owner to clean. Give each
/// `fencecheck run` its own state (`XDG_STATE_HOME`) so that token floors of earlier test runs,
/// against servers long gone, never meet a fresh server.
pub fn fresh_dir(base: impl AsRef<Path>, label: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let path = base.as_ref().join(format!(
        "{label}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).expect("create a scratch directory");
    path
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where `binary` is on PATH, if it is.
pub fn find_on_path(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(binary))
        .find(|p| p.is_file())
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(8)..].join("\n");
    if tail.is_empty() {
        "(log empty)".into()
    } else {
        format!("log tail:\n{tail}")
    }
}

/// Sends `signal` to `pid` (a process this harness started).
pub fn signal(pid: u32, signal: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) with a PID we started and a valid signal number has no memory effects.
    let rc = unsafe { libc::kill(pid as libc::pid_t, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn stop_child(child: &mut Child, first: i32, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = signal(child.id(), first);
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Stops a cluster member this harness started (resumed first, in case a test stopped it).
fn stop_member(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = signal(child.id(), libc::SIGCONT);
        stop_child(&mut child, libc::SIGTERM, Duration::from_secs(2));
    }
}

/// `kill -9` of a cluster member this harness started.
fn kill_member(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// For tests: the started server, or `None` after a loud notice when its binary is missing and
/// `FENCECHECK_REQUIRE_SERVERS` is not `1`. Panics when the server is required, or installed but
/// failing to start.
pub fn started_or_skip<T>(test: &str, started: Result<T, ServerError>) -> Option<T> {
    match started {
        Ok(server) => Some(server),
        Err(e) if e.is_missing() && !servers_required() => {
            eprintln!(
                "\n*** SKIPPED {test}: {e}. Set {REQUIRE_SERVERS_ENV}=1 to make this a failure. ***\n"
            );
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let (first, size) = port_band();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..300 {
            let port = free_port().unwrap();
            assert!(seen.insert(port), "port {port} handed out twice");
            if size > 0 {
                assert!(
                    (first..first + size).contains(&port),
                    "port {port} outside the band {first}..{}",
                    first + size
                );
            }
            // Another test thread's fork may hold the check's socket until its child execs:
            // give that a moment.
            let bound = (0..50).find_map(|_| {
                let r = TcpListener::bind(("127.0.0.1", port));
                if r.is_err() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                r.ok()
            });
            assert!(
                bound.is_some(),
                "port {port} was handed out but cannot be bound"
            );
        }
    }

    #[test]
    fn a_port_clash_is_retried_and_nothing_else_is() {
        let clash = || {
            failed(
                "etcd member m2",
                "listen tcp 127.0.0.1:42683: bind: address already in use",
            )
        };
        let mut calls = 0;
        let started = retry_port_clash("test", || {
            calls += 1;
            if calls < 3 {
                Err(clash())
            } else {
                Ok(calls)
            }
        });
        assert_eq!(started.unwrap(), 3, "two clashes, then a start");

        let mut calls = 0;
        let gave_up = retry_port_clash("test", || -> Result<(), _> {
            calls += 1;
            Err(clash())
        });
        assert!(gave_up.unwrap_err().is_port_clash());
        assert_eq!(calls, 3, "three attempts in all");

        // Control: any other failure is reported at once.
        let mut calls = 0;
        let other = retry_port_clash("test", || -> Result<(), _> {
            calls += 1;
            Err(failed("etcd member m0", "not healthy after 30s"))
        });
        assert!(!other.unwrap_err().is_port_clash());
        assert_eq!(calls, 1);
    }
}
