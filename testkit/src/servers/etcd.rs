//! Throwaway etcd clusters: one member or three, whose members can be killed and restarted, and
//! which names its leader.

use super::cluster::{Cluster, Kind, Member};
use super::{failed, find_on_path, free_port, retry_port_clash, ServerError, TempDir};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

/// A throwaway etcd cluster of one or more members on 127.0.0.1, each with its own ports and data
/// directory. Short heartbeat and election timeouts (25 ms / 250 ms) keep leader changes and the
/// minimum lease TTL (375 ms) short.
pub type EtcdCluster = Cluster<Etcd>;

/// etcd as a [`Kind`] of cluster: the initial member list every member starts with.
#[derive(Debug)]
pub struct Etcd {
    initial: String,
}

/// One HTTP/1.1 exchange with member `m`'s client port; returns the body.
fn http(m: &Member, method: &str, path: &str, body: &str) -> Option<String> {
    let addr: SocketAddr = m.address().parse().ok()?;
    let limit = Duration::from_millis(500);
    let mut s = TcpStream::connect_timeout(&addr, limit).ok()?;
    s.set_read_timeout(Some(limit)).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// A member's (own id, the leader's id), as its status answer gives them.
fn status(member: &Member) -> Option<(String, String)> {
    let body = http(member, "POST", "/v3/maintenance/status", "{}")?;
    let v = serde_json::from_str::<serde_json::Value>(&body).ok()?;
    let me = v["header"]["member_id"].as_str()?.to_string();
    Some((me, v["leader"].as_str()?.to_string()))
}

fn url(m: &Member, port: u16) -> String {
    format!("http://{}:{port}", m.host)
}

impl Kind for Etcd {
    const MEMBER: &'static str = "etcd member";
    const BOUND: Duration = Duration::from_secs(30);
    const AWAIT_LEADER: bool = false;

    fn command(&self, i: usize, m: &Member) -> Command {
        let (client, peer) = (url(m, m.ports[0]), url(m, m.ports[1]));
        let mut command = Command::new("etcd");
        command
            .args(["--name", &format!("m{i}")])
            .arg("--data-dir")
            .arg(&m.data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial])
            .args(["--initial-cluster-state", "new"])
            .args(["--heartbeat-interval", "25", "--election-timeout", "250"]);
        command
    }

    fn serving(&self, m: &Member) -> bool {
        http(m, "GET", "/health", "").is_some_and(|b| b.contains("\"health\":\"true\""))
    }

    fn leader(&self, members: &[Member], running: &[usize]) -> Option<usize> {
        let leader = running.iter().find_map(|&i| status(&members[i]))?.1;
        running
            .iter()
            .copied()
            .find(|&i| status(&members[i]).is_some_and(|(me, _)| me == leader))
    }
}

impl EtcdCluster {
    /// Starts `size` members and waits until every one reports healthy.
    pub fn start(size: usize) -> Result<Self, ServerError> {
        retry_port_clash("etcd", || Self::start_once(size, None))
    }

    /// As [`EtcdCluster::start`], member `i` in network node `first + i` (see [`crate::netns`]).
    pub fn start_in_nodes(size: usize, first: u8) -> Result<Self, ServerError> {
        retry_port_clash("etcd", || Self::start_once(size, Some(first)))
    }

    fn start_once(size: usize, first: Option<u8>) -> Result<Self, ServerError> {
        if find_on_path("etcd").is_none() {
            return Err(ServerError::Missing {
                binary: "etcd".into(),
                hint: "Debian: apt-get install etcd-server",
            });
        }
        let dir = TempDir::new("etcd").map_err(|e| failed("creating a temp dir", e))?;
        let port = || free_port().map_err(|e| failed("finding a free port", e));
        let mut members = Vec::new();
        for i in 0..size {
            let (data, log) = (format!("m{i}.data"), format!("m{i}.log"));
            let (data, log) = (dir.path().join(data), dir.path().join(log));
            let node = super::node_for(first, i)?;
            members.push(Member::new(vec![port()?, port()?], data, log, node));
        }
        let initial = members
            .iter()
            .enumerate()
            .map(|(i, m)| format!("m{i}={}", url(m, m.ports[1])))
            .collect::<Vec<_>>()
            .join(",");
        Cluster::launch(Etcd { initial }, members, dir)
    }

    /// The members' client URLs (`http://HOST:PORT`).
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| url(m, m.client_port()))
            .collect()
    }
}
