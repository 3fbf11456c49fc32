//! `redis-server`: one throwaway server, with or without append-only persistence, that can be
//! killed and restarted on its port.

use super::{failed, find_on_path, free_port, log_tail, retry_port_clash, stop_child};
use super::{ServerError, TempDir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servers::servers_required;
    use std::net::TcpListener;
    use std::path::PathBuf;

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
