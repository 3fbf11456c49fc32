//! Throwaway etcd clusters: one member or three, whose members can be killed and restarted, and
//! which names its leader.

use super::{failed, find_on_path, free_port, kill_member, log_tail, retry_port_clash};
use super::{stop_member, ServerError, TempDir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
