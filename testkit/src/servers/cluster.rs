//! One cluster type for every replicated server: members started, stopped, killed and restarted
//! on their own directories, waited for until they serve, and asked who leads. What differs
//! between etcd, ZooKeeper and Raft nodes (the command line, the health probe, the leader probe)
//! is a [`Kind`].

use super::{failed, kill_member, log_tail, stop_member, ServerError, TempDir};
use crate::netns::Node;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What one kind of server brings to a [`Cluster`].
pub trait Kind {
    /// A member in messages: "etcd member", "ZooKeeper server", "raft node".
    const MEMBER: &'static str;
    /// How long a member may take to serve after it is started.
    const BOUND: Duration;
    /// Whether starting waits for a leader as well as for every member to serve.
    const AWAIT_LEADER: bool;

    /// The command that starts member `i` (the cluster sets its standard streams).
    fn command(&self, i: usize, member: &Member) -> Command;
    /// Whether `member` serves clients now.
    fn serving(&self, member: &Member) -> bool;
    /// The index of the member that leads now, among those `running` (indices into `members`).
    fn leader(&self, members: &[Member], running: &[usize]) -> Option<usize>;
}

/// One member: its host and ports (the client port first), data directory and log, the network
/// node it runs in (if any), and its process while it runs.
#[derive(Debug)]
pub struct Member {
    pub(super) host: String,
    pub(super) ports: Vec<u16>,
    pub(super) data: PathBuf,
    pub(super) log: PathBuf,
    node: Option<Node>,
    child: Option<Child>,
}

impl Member {
    /// A member on 127.0.0.1, or on its node's address when it runs in `node`.
    pub(super) fn new(ports: Vec<u16>, data: PathBuf, log: PathBuf, node: Option<Node>) -> Self {
        let host = node
            .as_ref()
            .map_or("127.0.0.1".to_string(), |n| n.addr().to_string());
        Member {
            host,
            ports,
            data,
            log,
            node,
            child: None,
        }
    }

    /// The port clients connect to.
    pub(super) fn client_port(&self) -> u16 {
        self.ports[0]
    }

    /// `HOST:PORT` of the client port.
    pub(super) fn address(&self) -> String {
        format!("{}:{}", self.host, self.client_port())
    }
}

/// A throwaway cluster of `K` servers on 127.0.0.1 (or each in a network node of its own, see
/// [`crate::netns`]), removed (and its processes stopped) when
/// dropped.
#[derive(Debug)]
pub struct Cluster<K: Kind> {
    pub(super) kind: K,
    pub(super) members: Vec<Member>,
    _dir: TempDir,
}

impl<K: Kind> Cluster<K> {
    /// Starts every member and waits until each serves (and, for kinds that ask, a leader).
    pub(super) fn launch(kind: K, members: Vec<Member>, dir: TempDir) -> Result<Self, ServerError> {
        let mut cluster = Cluster {
            kind,
            members,
            _dir: dir,
        };
        cluster.start_all()?;
        Ok(cluster)
    }

    /// Starts every member and waits until each serves (and, for kinds that ask, a leader).
    fn start_all(&mut self) -> Result<(), ServerError> {
        for i in 0..self.size() {
            self.spawn(i)?;
        }
        for i in 0..self.size() {
            self.await_serving(i)?;
        }
        if K::AWAIT_LEADER {
            self.await_leader()?;
        }
        Ok(())
    }

    fn spawn(&mut self, i: usize) -> Result<(), ServerError> {
        let m = &self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .map_err(|e| failed(format!("creating the log of {}", self.name(i)), e))?;
        let out = log.try_clone().map_err(|e| failed("opening the log", e))?;
        let mut command = self.kind.command(i, m);
        if let Some(node) = &m.node {
            node.enter(&mut command);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(log)
            .spawn()
            .map_err(|e| failed(format!("starting {}", self.name(i)), e))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    fn name(&self, i: usize) -> String {
        format!("{} {}", K::MEMBER, i + 1)
    }

    /// Polls until `ready`, failing when member `i` exits or `K::BOUND` passes.
    fn await_until(
        &mut self,
        i: usize,
        waiting_for: &str,
        ready: impl Fn(&Self) -> bool,
    ) -> Result<(), ServerError> {
        let until = Instant::now() + K::BOUND;
        loop {
            if ready(self) {
                return Ok(());
            }
            let m = &mut self.members[i];
            if let Some(Ok(Some(status))) = m.child.as_mut().map(|c| c.try_wait()) {
                let detail = format!("exited with {status}; {}", log_tail(&m.log));
                return Err(failed(self.name(i), detail));
            }
            if Instant::now() > until {
                let detail = format!("{waiting_for} after {:?}; {}", K::BOUND, log_tail(&m.log));
                return Err(failed(self.name(i), detail));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn await_serving(&mut self, i: usize) -> Result<(), ServerError> {
        self.await_until(i, "not serving", |c| c.kind.serving(&c.members[i]))
    }

    fn await_leader(&mut self) -> Result<(), ServerError> {
        self.await_until(0, "no leader", |c| c.leader().is_some())
    }

    /// How many members the cluster has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Member `i`'s PID while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(|c| c.id())
    }

    /// The index of the member that leads now, asked of the running members.
    pub fn leader(&self) -> Option<usize> {
        let running: Vec<usize> = (0..self.size())
            .filter(|&i| self.members[i].child.is_some())
            .collect();
        self.kind.leader(&self.members, &running)
    }

    /// The network node member `i` runs in, when the cluster was started in nodes.
    pub fn node(&self, i: usize) -> Option<&Node> {
        self.members[i].node.as_ref()
    }

    /// Stops member `i` (SIGTERM, then SIGKILL if it lingers).
    pub fn stop(&mut self, i: usize) {
        stop_member(&mut self.members[i].child);
    }

    /// `kill -9` member `i`.
    pub fn kill9(&mut self, i: usize) {
        kill_member(&mut self.members[i].child);
    }

    /// Starts member `i` again on its directory (killing it first if it runs) and waits until it
    /// serves (and, for kinds that ask, until the cluster has a leader).
    pub fn restart(&mut self, i: usize) -> Result<(), ServerError> {
        self.kill9(i);
        self.spawn(i)?;
        self.await_serving(i)?;
        if K::AWAIT_LEADER {
            self.await_leader()?;
        }
        Ok(())
    }

    /// `kill -9` every member at once, start them all again on their directories, and wait as
    /// at the start.
    pub fn restart_all(&mut self) -> Result<(), ServerError> {
        for i in 0..self.size() {
            self.kill9(i);
        }
        self.start_all()
    }
}

impl<K: Kind> Drop for Cluster<K> {
    fn drop(&mut self) {
        for m in &mut self.members {
            stop_member(&mut m.child);
        }
    }
}
