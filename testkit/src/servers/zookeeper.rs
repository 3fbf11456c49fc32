//! Throwaway ZooKeeper: one server or an ensemble, whose servers can be killed and restarted, and
//! which names its leader.

use super::{failed, find_on_path, free_port, kill_member, log_tail, retry_port_clash};
use super::{stop_member, ServerError, TempDir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
