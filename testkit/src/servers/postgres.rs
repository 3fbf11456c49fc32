//! A throwaway PostgreSQL cluster (run as the `postgres` user when this process is root).

use super::{failed, find_on_path, free_port, log_tail, retry_port_clash, stop_child};
use super::{ServerError, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A throwaway PostgreSQL cluster of our own.
#[derive(Debug)]
pub struct PgServer {
    child: Child,
    host: String,
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
        retry_port_clash("postgres", || Self::start_once(None))
    }

    /// As [`PgServer::start`], also listening on the network switch's [`crate::netns::HUB`] and
    /// trusting the nodes behind it (`10.200.0.0/16`); [`PgServer::url`] then names the hub.
    pub fn start_on_hub() -> Result<Self, ServerError> {
        retry_port_clash("postgres", || Self::start_once(Some(crate::netns::HUB)))
    }

    fn start_once(hub: Option<std::net::Ipv4Addr>) -> Result<Self, ServerError> {
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
        let mut listen = "127.0.0.1".to_string();
        if let Some(hub) = hub {
            listen.push_str(&format!(",{hub}"));
            let mut hba = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("pg_hba.conf"))
                .map_err(|e| failed("opening pg_hba.conf", e))?;
            std::io::Write::write_all(&mut hba, b"host all all 10.200.0.0/16 trust\n")
                .map_err(|e| failed("writing pg_hba.conf", e))?;
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
            .args([
                "-c",
                &format!("listen_addresses={listen}"),
                "-c",
                "fsync=off",
            ])
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
            host: hub.map_or("127.0.0.1".into(), |h| h.to_string()),
            port,
            _dir: dir,
        })
    }

    /// A connection string for user `postgres`, database `postgres`.
    pub fn url(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.host, self.port
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
