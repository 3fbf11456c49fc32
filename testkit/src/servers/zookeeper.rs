//! Throwaway ZooKeeper: one server or an ensemble, whose servers can be killed and restarted, and
//! which names its leader.

use super::cluster::{Cluster, Kind, Member};
use super::{failed, find_on_path, free_port, retry_port_clash, ServerError, TempDir};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Where Debian's `zookeeper` package (through `libzookeeper-java`) puts its jars and
/// configuration.
const ZK_CLASSPATH: &str = "/usr/share/java/*:/etc/zookeeper/conf";
const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";

/// A throwaway ZooKeeper server or ensemble on 127.0.0.1 (or each server in a network node of its
/// own, see [`crate::netns`]): one JVM per server, each with its own
/// `zoo.cfg`, data directory and ports. A 100 ms tick keeps session expiry quick: sessions may
/// last from 200 ms (2 ticks) to 60 s. The transaction log is written without fsync
/// (`forceSync=no`): a killed server keeps what the OS has, and disk flushes do not swamp the
/// timings on a small machine. Do not copy that setting to production.
pub type ZkCluster = Cluster<ZooKeeper>;

/// ZooKeeper as a [`Kind`] of cluster: each server reads its own `zoo.cfg`, kept beside its data
/// directory.
#[derive(Debug)]
pub struct ZooKeeper;

/// Sends a four-letter command to member `m`'s client port; returns the answer. A member that
/// does not answer within half a second (stopped, or cut off by a partition) gives `None`.
fn four_letter(m: &Member, command: &str) -> Option<String> {
    let addr: SocketAddr = m.address().parse().ok()?;
    let limit = Duration::from_millis(500);
    let mut s = TcpStream::connect_timeout(&addr, limit).ok()?;
    s.set_read_timeout(Some(limit)).ok()?;
    s.write_all(command.as_bytes()).ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// The server's mode (`leader`, `follower`, `standalone`) once it serves clients.
fn mode(m: &Member) -> Option<String> {
    let answer = four_letter(m, "srvr")?;
    answer
        .lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_string())
}

impl Kind for ZooKeeper {
    const MEMBER: &'static str = "ZooKeeper server";
    const BOUND: Duration = Duration::from_secs(60);
    const AWAIT_LEADER: bool = false;

    fn command(&self, _: usize, m: &Member) -> Command {
        let mut command = Command::new("java");
        command
            .args(["-Xmx256m", "-XX:+UseSerialGC"])
            .arg("-Dzookeeper.root.logger=WARN,CONSOLE")
            .args(["-cp", ZK_CLASSPATH])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(m.data.with_extension("cfg"));
        command
    }

    fn serving(&self, m: &Member) -> bool {
        mode(m).is_some()
    }

    /// The ensemble's leader (the standalone server for a single one).
    fn leader(&self, members: &[Member], running: &[usize]) -> Option<usize> {
        running
            .iter()
            .copied()
            .find(|&i| matches!(mode(&members[i]).as_deref(), Some("leader" | "standalone")))
    }
}

/// Member `m`'s `zoo.cfg` (with the ensemble's `servers` lines when there is more than one).
fn config(m: &Member, servers: &str) -> String {
    format!(
        "tickTime=100\ninitLimit=50\nsyncLimit=10\nminSessionTimeout=200\n\
         maxSessionTimeout=60000\ndataDir={}\nclientPort={}\n\
         clientPortAddress={}\nadmin.enableServer=false\n\
         4lw.commands.whitelist=srvr,ruok\nstandaloneEnabled=true\n\
         preAllocSize=1024\nforceSync=no\n{servers}",
        m.data.display(),
        m.client_port(),
        m.host
    )
}

impl ZkCluster {
    /// Starts `size` servers (1: standalone; 3: an ensemble) and waits until each serves clients.
    pub fn start(size: usize) -> Result<Self, ServerError> {
        retry_port_clash("ZooKeeper", || Self::start_once(size, None))
    }

    /// As [`ZkCluster::start`], server `i` in network node `first + i` (see [`crate::netns`]).
    pub fn start_in_nodes(size: usize, first: u8) -> Result<Self, ServerError> {
        retry_port_clash("ZooKeeper", || Self::start_once(size, Some(first)))
    }

    fn start_once(size: usize, first: Option<u8>) -> Result<Self, ServerError> {
        if !Path::new(ZK_JAR).is_file() || find_on_path("java").is_none() {
            return Err(ServerError::Missing {
                binary: format!("ZooKeeper (java and {ZK_JAR})"),
                hint: "Debian: apt-get install zookeeper",
            });
        }
        let dir = TempDir::new("zookeeper").map_err(|e| failed("creating a temp dir", e))?;
        let port = || free_port().map_err(|e| failed("finding a free port", e));
        let mut members = Vec::new();
        for i in 0..size {
            let (data, log) = (format!("s{}.data", i + 1), format!("s{}.log", i + 1));
            let (data, log) = (dir.path().join(data), dir.path().join(log));
            let node = super::node_for(first, i)?;
            let ports = vec![port()?, port()?, port()?];
            members.push(Member::new(ports, data, log, node));
        }
        let servers: String = match size {
            1 => String::new(),
            _ => (members.iter().enumerate())
                .map(|(i, m)| {
                    format!(
                        "server.{}={}:{}:{}\n",
                        i + 1,
                        m.host,
                        m.ports[1],
                        m.ports[2]
                    )
                })
                .collect(),
        };
        for (i, m) in members.iter().enumerate() {
            std::fs::create_dir_all(&m.data).map_err(|e| failed("creating a data dir", e))?;
            if size > 1 {
                std::fs::write(m.data.join("myid"), format!("{}\n", i + 1))
                    .map_err(|e| failed("writing myid", e))?;
            }
            let cfg = config(m, &servers);
            std::fs::write(m.data.with_extension("cfg"), cfg)
                .map_err(|e| failed("writing zoo.cfg", e))?;
        }
        Cluster::launch(ZooKeeper, members, dir)
    }

    /// The connect string: `HOST:PORT,...`.
    pub fn connect_string(&self) -> String {
        let addresses: Vec<String> = self.members.iter().map(Member::address).collect();
        addresses.join(",")
    }

    /// Server `i`'s `HOST:PORT`.
    pub fn address(&self, i: usize) -> String {
        self.members[i].address()
    }
}
