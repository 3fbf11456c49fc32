//! Throwaway servers for tests, demos and benchmarks: `redis-server`, a PostgreSQL cluster, etcd,
//! ZooKeeper and fencecheck Raft nodes, each on 127.0.0.1 at a free port with its own temporary
//! directory, stopped (by the PID this process started) and removed when dropped.
//!
//! PostgreSQL refuses to run as root; when this process is root the cluster is created and run as
//! the `postgres` user.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// A `redis-server` of our own.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    persistent: bool,
    dir: TempDir,
}

impl RedisServer {
    /// Starts `redis-server` on a free port. With `persistent`, every write is in an append-only
    /// file synced before the reply (`appendonly yes`, `appendfsync always`), so a `kill -9`
    /// loses nothing; without, a restart starts empty.
    pub fn start(persistent: bool) -> Result<Self, ServerError> {
        retry_port_clash("redis-server", || Self::start_once(persistent))
    }

    fn start_once(persistent: bool) -> Result<Self, ServerError> {
        if find_on_path("redis-server").is_none() {
            return Err(ServerError::Missing {
                binary: "redis-server".into(),
                hint: "Debian: apt-get install redis-server",
            });
        }
        let dir = TempDir::new("redis").map_err(|e| failed("creating a temp dir", e))?;
        let port = free_port().map_err(|e| failed("finding a free port", e))?;
        let mut server = RedisServer {
            child: None,
            port,
            persistent,
            dir,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), ServerError> {
        let log = self.dir.path().join("redis.log");
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--daemonize", "no", "--protected-mode", "yes"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log);
        if self.persistent {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| failed("starting redis-server", e))?;
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if self.ping() {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(failed(
                    format!("redis-server on port {}", self.port),
                    format!("exited with {status}; {}", log_tail(&log)),
                ));
            }
            if Instant::now() > until {
                return Err(failed(
                    format!("redis-server on port {}", self.port),
                    format!("not answering PING after 10 s; {}", log_tail(&log)),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// `kill -9` the server (no chance to save anything).
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server with SIGKILL if it runs, then starts it again on the same port and
    /// directory (so a persistent server reloads its append-only file).
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill9();
        self.spawn()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, libc::SIGTERM, Duration::from_secs(2));
        }
    }
}

/// A throwaway PostgreSQL cluster of our own.
#[derive(Debug)]
pub struct PgServer {
    child: Child,
    port: u16,
    _dir: TempDir,
}

/// Whether PostgreSQL's server programs (`initdb`, `postgres`) are installed.
pub fn postgres_installed() -> bool {
    pg_bin_dir().is_some()
}

fn pg_bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("FENCECHECK_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .or_else(|| find_on_path("initdb").and_then(|p| p.parent().map(Path::to_path_buf)))
}

/// The uid and gid to run PostgreSQL as: the `postgres` user when we are root, else ourselves.
fn pg_identity() -> Result<Option<(u32, u32)>, ServerError> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Ok(None);
    }
    let name = std::ffi::CString::new("postgres").expect("no NUL");
    // SAFETY: getpwnam with a valid C string; the result is read at once, before any other call
    // that could overwrite its static buffer.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(failed(
            "running PostgreSQL as root",
            "PostgreSQL refuses to run as root and there is no `postgres` user to run it as \
             (Debian: apt-get install postgresql creates one)",
        ));
    }
    // SAFETY: pw is non-null and points to a valid passwd record.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Ok(Some((uid, gid)))
}

impl PgServer {
    /// Creates a cluster in a temp dir (trust authentication, user `postgres`, fsync off) and
    /// starts it on a free port of 127.0.0.1.
    pub fn start() -> Result<Self, ServerError> {
        retry_port_clash("postgres", Self::start_once)
    }

    fn start_once() -> Result<Self, ServerError> {
        use std::os::unix::process::CommandExt;
        let bin = pg_bin_dir().ok_or(ServerError::Missing {
            binary: "postgres (PostgreSQL server)".into(),
            hint: "Debian: apt-get install postgresql; or set FENCECHECK_PG_BIN to its bin dir",
        })?;
        let identity = pg_identity()?;
        let dir = TempDir::new("pg").map_err(|e| failed("creating a temp dir", e))?;
        if let Some((uid, gid)) = identity {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| failed("handing the temp dir to the postgres user", e))?;
        }
        let as_pg = |cmd: &mut Command| {
            if let Some((uid, gid)) = identity {
                cmd.uid(uid).gid(gid).env("HOME", "/tmp");
            }
        };
        let data = dir.path().join("data");
        let log = dir.path().join("postgres.log");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .stdin(Stdio::null());
        as_pg(&mut initdb);
        let out = initdb
            .output()
            .map_err(|e| failed(format!("running {}", bin.join("initdb").display()), e))?;
        if !out.status.success() {
            return Err(failed(
                "initdb",
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        let port = free_port().map_err(|e| failed("finding a free port", e))?;
        let log_file =
            std::fs::File::create(&log).map_err(|e| failed("creating the server log", e))?;
        if let Some((uid, gid)) = identity {
            let _ = std::os::unix::fs::chown(&log, Some(uid), Some(gid));
        }
        let mut postgres = Command::new(bin.join("postgres"));
        postgres
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        as_pg(&mut postgres);
        let mut child = postgres
            .spawn()
            .map_err(|e| failed("starting postgres", e))?;
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = Command::new(bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(failed(
                    format!("postgres on port {port}"),
                    format!("exited with {status}; {}", log_tail(&log)),
                ));
            }
            if Instant::now() > until {
                stop_child(&mut child, libc::SIGQUIT, Duration::from_secs(2));
                return Err(failed(
                    format!("postgres on port {port}"),
                    format!("not ready after 30 s; {}", log_tail(&log)),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(PgServer {
            child,
            port,
            _dir: dir,
        })
    }

    /// A connection string for user `postgres`, database `postgres`.
    pub fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGQUIT: immediate shutdown; the cluster is thrown away anyway.
        stop_child(&mut self.child, libc::SIGQUIT, Duration::from_secs(5));
    }
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

/// A throwaway etcd cluster of one or more members on 127.0.0.1, each with its own ports and data
/// directory. Short heartbeat and election timeouts (25 ms / 250 ms) keep leader changes and the
/// minimum lease TTL (375 ms) short.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<EtcdMember>,
    initial: String,
    _dir: TempDir,
}

#[derive(Debug)]
struct EtcdMember {
    name: String,
    client_port: u16,
    peer_port: u16,
    data: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// One HTTP/1.1 exchange on 127.0.0.1:`port`; returns the body.
fn http(port: u16, method: &str, path: &str, body: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

impl EtcdCluster {
    /// Starts `size` members and waits until every one reports healthy.
    pub fn start(size: usize) -> Result<Self, ServerError> {
        retry_port_clash("etcd", || Self::start_once(size))
    }

    fn start_once(size: usize) -> Result<Self, ServerError> {
        if find_on_path("etcd").is_none() {
            return Err(ServerError::Missing {
                binary: "etcd".into(),
                hint: "Debian: apt-get install etcd-server",
            });
        }
        let dir = TempDir::new("etcd").map_err(|e| failed("creating a temp dir", e))?;
        let mut members = Vec::new();
        for i in 0..size {
            let port = || free_port().map_err(|e| failed("finding a free port", e));
            members.push(EtcdMember {
                name: format!("m{i}"),
                client_port: port()?,
                peer_port: port()?,
                data: dir.path().join(format!("m{i}.data")),
                log: dir.path().join(format!("m{i}.log")),
                child: None,
            });
        }
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            members,
            initial,
            _dir: dir,
        };
        for i in 0..size {
            cluster.spawn(i)?;
        }
        for i in 0..size {
            cluster.wait_healthy(i, Duration::from_secs(30))?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<(), ServerError> {
        let m = &mut self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .map_err(|e| failed("creating the etcd log", e))?;
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args([
                "--initial-cluster",
                &self.initial,
                "--initial-cluster-state",
                "new",
            ])
            .args(["--heartbeat-interval", "25", "--election-timeout", "250"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| failed("starting etcd", e))?;
        m.child = Some(child);
        Ok(())
    }

    fn wait_healthy(&mut self, i: usize, bound: Duration) -> Result<(), ServerError> {
        let until = Instant::now() + bound;
        loop {
            let m = &mut self.members[i];
            if http(m.client_port, "GET", "/health", "")
                .is_some_and(|b| b.contains("\"health\":\"true\""))
            {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = m.child.as_mut().map(|c| c.try_wait()) {
                return Err(failed(
                    format!("etcd member {}", m.name),
                    format!("exited with {status}; {}", log_tail(&m.log)),
                ));
            }
            if Instant::now() > until {
                return Err(failed(
                    format!("etcd member {}", m.name),
                    format!("not healthy after {bound:?}; {}", log_tail(&m.log)),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The members' client URLs (`http://127.0.0.1:PORT`).
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// How many members the cluster has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Member `i`'s PID while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(|c| c.id())
    }

    /// The index of the member that is leader now, asked of every running member.
    pub fn leader(&self) -> Option<usize> {
        for m in &self.members {
            if m.child.is_none() {
                continue;
            }
            let Some(body) = http(m.client_port, "POST", "/v3/maintenance/status", "{}") else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else {
                continue;
            };
            let (leader, me) = (v["leader"].as_str(), v["header"]["member_id"].as_str());
            if let (Some(leader), Some(me)) = (leader, me) {
                if leader == me {
                    return self.members.iter().position(|x| x.name == m.name);
                }
                // Ask the others which of them has this id.
                for (j, other) in self.members.iter().enumerate() {
                    let body = http(other.client_port, "POST", "/v3/maintenance/status", "{}");
                    let id = body
                        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
                        .and_then(|v| v["header"]["member_id"].as_str().map(String::from));
                    if id.as_deref() == Some(leader) {
                        return Some(j);
                    }
                }
            }
        }
        None
    }

    /// `kill -9` member `i`.
    pub fn kill9(&mut self, i: usize) {
        kill_member(&mut self.members[i].child);
    }

    /// Starts member `i` again on its data directory and waits until it is healthy.
    pub fn restart(&mut self, i: usize) -> Result<(), ServerError> {
        self.kill9(i);
        self.spawn(i)?;
        self.wait_healthy(i, Duration::from_secs(30))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            stop_member(&mut m.child);
        }
    }
}

/// Where Debian's `zookeeper` package (through `libzookeeper-java`) puts its jars and
/// configuration.
const ZK_CLASSPATH: &str = "/usr/share/java/*:/etc/zookeeper/conf";
const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";

/// A throwaway ZooKeeper server or ensemble on 127.0.0.1: one JVM per server, each with its own
/// `zoo.cfg`, data directory and ports. A 100 ms tick keeps session expiry quick: sessions may
/// last from 200 ms (2 ticks) to 60 s. The transaction log is written without fsync
/// (`forceSync=no`): a killed server keeps what the OS has, and disk flushes do not swamp the
/// timings on a small machine. Do not copy that setting to production.
#[derive(Debug)]
pub struct ZkCluster {
    members: Vec<ZkMember>,
    _dir: TempDir,
}

#[derive(Debug)]
struct ZkMember {
    client_port: u16,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// Sends a four-letter command to 127.0.0.1:`port`; returns the answer.
fn four_letter(port: u16, command: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(command.as_bytes()).ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    Some(answer)
}

impl ZkCluster {
    /// Starts `size` servers (1: standalone; 3: an ensemble) and waits until each serves clients.
    pub fn start(size: usize) -> Result<Self, ServerError> {
        retry_port_clash("ZooKeeper", || Self::start_once(size))
    }

    fn start_once(size: usize) -> Result<Self, ServerError> {
        if !Path::new(ZK_JAR).is_file() || find_on_path("java").is_none() {
            return Err(ServerError::Missing {
                binary: format!("ZooKeeper (java and {ZK_JAR})"),
                hint: "Debian: apt-get install zookeeper",
            });
        }
        let dir = TempDir::new("zookeeper").map_err(|e| failed("creating a temp dir", e))?;
        let port = || free_port().map_err(|e| failed("finding a free port", e));
        let mut ports = Vec::new();
        for _ in 0..size {
            ports.push((port()?, port()?, port()?));
        }
        let servers: String = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer, election))| {
                format!("server.{}=127.0.0.1:{peer}:{election}\n", i + 1)
            })
            .collect();
        let mut members = Vec::new();
        for (i, (client_port, _, _)) in ports.iter().enumerate() {
            let data = dir.path().join(format!("s{}.data", i + 1));
            std::fs::create_dir_all(&data).map_err(|e| failed("creating a data dir", e))?;
            let mut cfg = format!(
                "tickTime=100\ninitLimit=50\nsyncLimit=10\nminSessionTimeout=200\n\
                 maxSessionTimeout=60000\ndataDir={}\nclientPort={client_port}\n\
                 clientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=srvr,ruok\nstandaloneEnabled=true\n\
                 preAllocSize=1024\nforceSync=no\n",
                data.display()
            );
            if size > 1 {
                cfg.push_str(&servers);
                std::fs::write(data.join("myid"), format!("{}\n", i + 1))
                    .map_err(|e| failed("writing myid", e))?;
            }
            let config = dir.path().join(format!("s{}.cfg", i + 1));
            std::fs::write(&config, cfg).map_err(|e| failed("writing zoo.cfg", e))?;
            members.push(ZkMember {
                client_port: *client_port,
                config,
                log: dir.path().join(format!("s{}.log", i + 1)),
                child: None,
            });
        }
        let mut cluster = ZkCluster { members, _dir: dir };
        for i in 0..size {
            cluster.spawn(i)?;
        }
        for i in 0..size {
            cluster.wait_serving(i, Duration::from_secs(60))?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<(), ServerError> {
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .map_err(|e| failed("creating the ZooKeeper log", e))?;
        let child = Command::new("java")
            .args([
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-Dzookeeper.root.logger=WARN,CONSOLE",
            ])
            .args(["-cp", ZK_CLASSPATH])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&m.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| failed("opening the log", e))?)
            .stderr(log)
            .spawn()
            .map_err(|e| failed("starting ZooKeeper", e))?;
        m.child = Some(child);
        Ok(())
    }

    /// The server's mode (`leader`, `follower`, `standalone`) once it serves clients.
    fn mode(&self, i: usize) -> Option<String> {
        let answer = four_letter(self.members[i].client_port, "srvr")?;
        answer
            .lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_string())
    }

    fn wait_serving(&mut self, i: usize, bound: Duration) -> Result<(), ServerError> {
        let until = Instant::now() + bound;
        loop {
            if self.mode(i).is_some() {
                return Ok(());
            }
            let m = &mut self.members[i];
            if let Some(Ok(Some(status))) = m.child.as_mut().map(|c| c.try_wait()) {
                return Err(failed(
                    format!("ZooKeeper server {}", i + 1),
                    format!("exited with {status}; {}", log_tail(&m.log)),
                ));
            }
            if Instant::now() > until {
                return Err(failed(
                    format!("ZooKeeper server {}", i + 1),
                    format!("not serving after {bound:?}; {}", log_tail(&m.log)),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The connect string: `127.0.0.1:PORT,...`.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Server `i`'s `HOST:PORT`.
    pub fn address(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.members[i].client_port)
    }

    /// How many servers there are.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Server `i`'s PID while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(|c| c.id())
    }

    /// The index of the ensemble's leader now (the standalone server for a single one).
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .find(|&i| matches!(self.mode(i).as_deref(), Some("leader" | "standalone")))
    }

    /// `kill -9` server `i`.
    pub fn kill9(&mut self, i: usize) {
        kill_member(&mut self.members[i].child);
    }

    /// Starts server `i` again on its data directory and waits until it serves clients.
    pub fn restart(&mut self, i: usize) -> Result<(), ServerError> {
        self.kill9(i);
        self.spawn(i)?;
        self.wait_serving(i, Duration::from_secs(60))
    }
}

impl Drop for ZkCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            stop_member(&mut m.child);
        }
    }
}

/// A throwaway fencecheck Raft cluster on 127.0.0.1: one `fencecheck raft-node` process per node,
/// each with its own port and directory (vote and log, kept across restarts). `binary` is the
/// fencecheck executable (tests: `env!("CARGO_BIN_EXE_fencecheck")`). Heartbeats every 30 ms and
/// election timeouts of 150–300 ms keep leader changes quick.
#[derive(Debug)]
pub struct RaftCluster {
    binary: PathBuf,
    extra: Vec<String>,
    members: Vec<RaftMember>,
    list: String,
    _dir: TempDir,
}

#[derive(Debug)]
struct RaftMember {
    port: u16,
    data: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// A node's view of the cluster, as its `Status` answer gives it: (leader id, term).
fn raft_status(port: u16) -> Option<(Option<u64>, u64)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    let body = b"\"Status\"";
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    s.write_all(&frame).ok()?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut answer = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut answer).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&answer).ok()?;
    let status = &v["Status"];
    Some((status["leader"].as_u64(), status["term"].as_u64()?))
}

impl RaftCluster {
    /// Starts `size` nodes of `binary` and waits until they agree on a leader.
    pub fn start(binary: impl Into<PathBuf>, size: usize) -> Result<Self, ServerError> {
        Self::start_with(binary, size, &[])
    }

    /// As [`RaftCluster::start`], with `extra` flags for every node (such as a deliberately
    /// broken variant for a negative control).
    pub fn start_with(
        binary: impl Into<PathBuf>,
        size: usize,
        extra: &[&str],
    ) -> Result<Self, ServerError> {
        let binary = binary.into();
        retry_port_clash("raft", || Self::start_once(binary.clone(), size, extra))
    }

    fn start_once(binary: PathBuf, size: usize, extra: &[&str]) -> Result<Self, ServerError> {
        if !binary.exists() {
            return Err(ServerError::Missing {
                binary: binary.display().to_string(),
                hint: "build it: cargo build",
            });
        }
        let dir = TempDir::new("raft").map_err(|e| failed("creating a temp dir", e))?;
        let mut members = Vec::new();
        for i in 0..size {
            members.push(RaftMember {
                port: free_port().map_err(|e| failed("finding a free port", e))?,
                data: dir.path().join(format!("n{}.data", i + 1)),
                log: dir.path().join(format!("n{}.log", i + 1)),
                child: None,
            });
        }
        let list = members
            .iter()
            .enumerate()
            .map(|(i, m)| format!("{}=127.0.0.1:{}", i + 1, m.port))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = RaftCluster {
            binary,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            members,
            list,
            _dir: dir,
        };
        for i in 0..size {
            cluster.spawn(i)?;
        }
        cluster.wait_leader(Duration::from_secs(30))?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<(), ServerError> {
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .map_err(|e| failed("creating the node's log", e))?;
        let mut command = Command::new(&self.binary);
        command
            .args(["raft-node", "--id", &(i + 1).to_string()])
            .args(["--members", &self.list])
            .arg("--dir")
            .arg(&m.data)
            .args(["--heartbeat", "30ms", "--election", "150ms"])
            .args(&self.extra);
        if i == 0 {
            command.arg("--init");
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| failed("starting a raft node", e))?;
        m.child = Some(child);
        Ok(())
    }

    /// Waits until a running node names a leader that itself says it leads.
    fn wait_leader(&mut self, bound: Duration) -> Result<(), ServerError> {
        let until = Instant::now() + bound;
        loop {
            if self.leader().is_some() {
                return Ok(());
            }
            for (i, m) in self.members.iter_mut().enumerate() {
                if let Some(Ok(Some(status))) = m.child.as_mut().map(|c| c.try_wait()) {
                    return Err(failed(
                        format!("raft node {}", i + 1),
                        format!("exited with {status}; {}", log_tail(&m.log)),
                    ));
                }
            }
            if Instant::now() > until {
                return Err(failed(
                    "raft cluster",
                    format!(
                        "no leader after {bound:?}; {}",
                        log_tail(&self.members[0].log)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The nodes' addresses, `127.0.0.1:PORT`.
    pub fn nodes(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port))
            .collect()
    }

    /// How many nodes the cluster has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Node `i`'s PID while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(|c| c.id())
    }

    /// The index of the node that leads now: one that names itself leader in the highest term
    /// any running node reports.
    pub fn leader(&self) -> Option<usize> {
        let views: Vec<(usize, Option<u64>, u64)> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .filter_map(|i| raft_status(self.members[i].port).map(|(l, t)| (i, l, t)))
            .collect();
        let top = views.iter().map(|v| v.2).max()?;
        views
            .iter()
            .find(|(i, leader, term)| *term == top && *leader == Some(*i as u64 + 1))
            .map(|v| v.0)
    }

    /// `kill -9` node `i`.
    pub fn kill9(&mut self, i: usize) {
        kill_member(&mut self.members[i].child);
    }

    /// Starts node `i` again on its directory and waits until the cluster has a leader.
    pub fn restart(&mut self, i: usize) -> Result<(), ServerError> {
        self.kill9(i);
        self.spawn(i)?;
        let until = Instant::now() + Duration::from_secs(30);
        while raft_status(self.members[i].port).is_none() {
            if Instant::now() > until {
                return Err(failed(
                    format!("raft node {}", i + 1),
                    format!(
                        "not serving after a restart; {}",
                        log_tail(&self.members[i].log)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.wait_leader(Duration::from_secs(30))
    }

    /// `kill -9` every node at once, start them all again on their directories, and wait until
    /// they have a leader.
    pub fn restart_all(&mut self) -> Result<(), ServerError> {
        for i in 0..self.members.len() {
            self.kill9(i);
        }
        for i in 0..self.members.len() {
            self.spawn(i)?;
        }
        self.wait_leader(Duration::from_secs(30))
    }
}

impl Drop for RaftCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            stop_member(&mut m.child);
        }
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

    /// The classifier read against what a real `redis-server` says when its port is taken, and
    /// against a real failure of another kind (a bad option).
    #[test]
    fn redis_server_on_a_taken_port_is_a_port_clash() {
        if find_on_path("redis-server").is_none() {
            assert!(!servers_required(), "redis-server is not installed");
            eprintln!("SKIPPED: redis-server is not installed");
            return;
        }
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut server = RedisServer {
            child: None,
            port: taken.local_addr().unwrap().port(),
            persistent: false,
            dir: TempDir::new("redis-clash").unwrap(),
        };
        let err = server.spawn().expect_err("the port is taken");
        assert!(err.is_port_clash(), "not seen as a clash: {err}");

        let mut server = RedisServer {
            child: None,
            port: free_port().unwrap(),
            persistent: false,
            dir: TempDir(PathBuf::from("/nonexistent/fencecheck")),
        };
        let err = server.spawn().expect_err("no such directory");
        assert!(!err.is_port_clash(), "seen as a clash: {err}");
    }
}
