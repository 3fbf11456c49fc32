//! Throwaway clusters of fencecheck Raft nodes (a given `fencecheck` binary running `raft-node`).

use super::cluster::{Cluster, Kind, Member};
use super::{failed, free_port, retry_port_clash, ServerError, TempDir};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A throwaway fencecheck Raft cluster on 127.0.0.1: one `fencecheck raft-node` process per node,
/// each with its own port and directory (vote and log, kept across restarts). `binary` is the
/// fencecheck executable (tests: `env!("CARGO_BIN_EXE_fencecheck")`). Heartbeats every 30 ms and
/// election timeouts of 150–300 ms keep leader changes quick.
pub type RaftCluster = Cluster<Raft>;

/// fencecheck's Raft nodes as a [`Kind`] of cluster: the binary, extra flags for every node, and
/// the member list.
#[derive(Debug)]
pub struct Raft {
    binary: PathBuf,
    extra: Vec<String>,
    list: String,
}

/// A node's view of the cluster, as its `Status` answer gives it: (leader id, term).
fn raft_status(m: &Member) -> Option<(Option<u64>, u64)> {
    let addr: SocketAddr = m.address().parse().ok()?;
    let limit = Duration::from_millis(500);
    let mut s = TcpStream::connect_timeout(&addr, limit).ok()?;
    s.set_read_timeout(Some(limit)).ok()?;
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

impl Kind for Raft {
    const MEMBER: &'static str = "raft node";
    const BOUND: Duration = Duration::from_secs(30);
    const AWAIT_LEADER: bool = true;

    fn command(&self, i: usize, m: &Member) -> Command {
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
        command
    }

    fn serving(&self, m: &Member) -> bool {
        raft_status(m).is_some()
    }

    /// The node that names itself leader in the highest term any running node reports.
    fn leader(&self, members: &[Member], running: &[usize]) -> Option<usize> {
        let views: Vec<(usize, Option<u64>, u64)> = running
            .iter()
            .filter_map(|&i| raft_status(&members[i]).map(|(l, t)| (i, l, t)))
            .collect();
        let top = views.iter().map(|v| v.2).max()?;
        views
            .iter()
            .find(|(i, leader, term)| *term == top && *leader == Some(*i as u64 + 1))
            .map(|v| v.0)
    }
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
        retry_port_clash("raft", || {
            Self::start_once(binary.clone(), size, extra, None)
        })
    }

    /// As [`RaftCluster::start`], node `i` in network node `first + i` (see [`crate::netns`]).
    pub fn start_in_nodes(
        binary: impl Into<PathBuf>,
        size: usize,
        first: u8,
    ) -> Result<Self, ServerError> {
        let binary = binary.into();
        retry_port_clash("raft", || {
            Self::start_once(binary.clone(), size, &[], Some(first))
        })
    }

    fn start_once(
        binary: PathBuf,
        size: usize,
        extra: &[&str],
        first: Option<u8>,
    ) -> Result<Self, ServerError> {
        if !binary.exists() {
            return Err(ServerError::Missing {
                binary: binary.display().to_string(),
                hint: "build it: cargo build",
            });
        }
        let dir = TempDir::new("raft").map_err(|e| failed("creating a temp dir", e))?;
        let mut members = Vec::new();
        for i in 1..=size {
            let port = free_port().map_err(|e| failed("finding a free port", e))?;
            let (data, log) = (format!("n{i}.data"), format!("n{i}.log"));
            let node = super::node_for(first, i - 1)?;
            members.push(Member::new(
                vec![port],
                dir.path().join(data),
                dir.path().join(log),
                node,
            ));
        }
        let list = members
            .iter()
            .enumerate()
            .map(|(i, m)| format!("{}={}", i + 1, m.address()))
            .collect::<Vec<_>>()
            .join(",");
        let extra = extra.iter().map(|s| s.to_string()).collect();
        Cluster::launch(
            Raft {
                binary,
                extra,
                list,
            },
            members,
            dir,
        )
    }

    /// The nodes' addresses, `HOST:PORT`.
    pub fn nodes(&self) -> Vec<String> {
        self.members.iter().map(Member::address).collect()
    }
}
