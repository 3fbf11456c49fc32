//! Throwaway clusters of fencecheck Raft nodes (a given `fencecheck` binary running `raft-node`).

use super::{failed, free_port, kill_member, log_tail, retry_port_clash, stop_member};
use super::{ServerError, TempDir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
