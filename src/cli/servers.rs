//! Throwaway servers on 127.0.0.1 for `demo` and `torture`, where the user named none: started
//! on free ports in temporary directories, said on stdout, stopped when dropped.

use super::UsageError;
use fencecheck_testkit::netns::Node;
use fencecheck_testkit::{Cluster, Kind};
use fencecheck_testkit::{EtcdCluster, PgServer, RaftCluster, RedisServer, ZkCluster};

/// The servers a command started; each is stopped when this is dropped.
#[derive(Default)]
pub(super) struct Started {
    redis: Option<RedisServer>,
    etcd: Option<EtcdCluster>,
    zk: Option<ZkCluster>,
    pg: Option<PgServer>,
    raft: Option<RaftCluster>,
    /// Where the servers run: `None` on 127.0.0.1; `Some(first)`: each cluster member in a
    /// network node of its own from `first`, PostgreSQL on the switch's hub (see
    /// `fencecheck_testkit::netns`; the caller made the switch).
    nodes: Option<u8>,
    /// The member a partition cut off, until healed.
    isolated: Option<usize>,
}

fn failed(e: impl std::fmt::Display) -> UsageError {
    UsageError(e.to_string())
}

impl Started {
    /// Servers started from now on run in network nodes from `first` (see [`Started::nodes`]).
    pub(super) fn in_nodes(first: u8) -> Started {
        Started {
            nodes: Some(first),
            ..Started::default()
        }
    }

    /// Starts a redis-server; its URL.
    pub(super) fn redis(&mut self) -> Result<String, UsageError> {
        self.redis_with(false)
    }

    /// Starts a redis-server, `persistent` (every write synced to an append-only file before
    /// the reply, so a `kill -9` loses no token) or not; its URL.
    pub(super) fn redis_with(&mut self, persistent: bool) -> Result<String, UsageError> {
        let server = RedisServer::start(persistent).map_err(failed)?;
        println!(
            "started a throwaway redis-server{} on 127.0.0.1:{}",
            if persistent {
                " (append-only, fsync always)"
            } else {
                ""
            },
            server.port()
        );
        let url = server.url();
        self.redis = Some(server);
        Ok(url)
    }

    /// Starts a one-member etcd cluster; its endpoints.
    pub(super) fn etcd(&mut self) -> Result<Vec<String>, UsageError> {
        self.etcd_with(1)
    }

    /// Starts an etcd cluster of `members`; its endpoints.
    pub(super) fn etcd_with(&mut self, members: usize) -> Result<Vec<String>, UsageError> {
        let cluster = match self.nodes {
            Some(first) => EtcdCluster::start_in_nodes(members, first),
            None => EtcdCluster::start(members),
        }
        .map_err(failed)?;
        let endpoints = cluster.endpoints();
        println!("started a throwaway etcd on {}", endpoints.join(","));
        self.etcd = Some(cluster);
        Ok(endpoints)
    }

    /// Starts a three-node fencecheck Raft cluster (this program's `raft-node`); its nodes.
    pub(super) fn raft(&mut self) -> Result<Vec<String>, UsageError> {
        let me = std::env::current_exe().map_err(|e| {
            UsageError(format!("cannot find this program to start raft nodes: {e}"))
        })?;
        let cluster = match self.nodes {
            Some(first) => RaftCluster::start_in_nodes(me, 3, first),
            None => RaftCluster::start(me, 3),
        }
        .map_err(failed)?;
        let nodes = cluster.nodes();
        println!(
            "started a throwaway 3-node raft cluster on {}",
            nodes.join(",")
        );
        self.raft = Some(cluster);
        Ok(nodes)
    }

    /// Starts a one-server ZooKeeper; its connect string.
    pub(super) fn zk(&mut self) -> Result<String, UsageError> {
        self.zk_with(1)
    }

    /// Starts a ZooKeeper ensemble of `servers`; its connect string.
    pub(super) fn zk_with(&mut self, servers: usize) -> Result<String, UsageError> {
        let cluster = match self.nodes {
            Some(first) => ZkCluster::start_in_nodes(servers, first),
            None => ZkCluster::start(servers),
        }
        .map_err(failed)?;
        let connect = cluster.connect_string();
        println!("started a throwaway ZooKeeper on {connect}");
        self.zk = Some(cluster);
        Ok(connect)
    }

    /// Starts a PostgreSQL cluster; its URL.
    pub(super) fn pg(&mut self) -> Result<String, UsageError> {
        let server = match self.nodes {
            Some(_) => PgServer::start_on_hub(),
            None => PgServer::start(),
        }
        .map_err(failed)?;
        println!("started a throwaway PostgreSQL: {}", server.url());
        let url = server.url();
        self.pg = Some(server);
        Ok(url)
    }

    /// `kill -9` the lock server this command started (the leader of a cluster), then start it
    /// again on its data directory and wait until it serves; says which it was. `None` when
    /// this command started no lock server.
    pub(super) fn kill_and_restart(&mut self) -> Result<Option<String>, UsageError> {
        if let Some(r) = &mut self.redis {
            r.restart().map_err(failed)?;
            return Ok(Some("redis-server".into()));
        }
        if let Some(c) = &mut self.etcd {
            let i = c.leader().unwrap_or(0);
            c.restart(i).map_err(failed)?;
            return Ok(Some(format!("etcd member {} of {}", i + 1, c.size())));
        }
        if let Some(c) = &mut self.zk {
            let i = c.leader().unwrap_or(0);
            c.restart(i).map_err(failed)?;
            return Ok(Some(format!("ZooKeeper server {} of {}", i + 1, c.size())));
        }
        if let Some(c) = &mut self.raft {
            let i = c.leader().unwrap_or(0);
            c.restart(i).map_err(failed)?;
            return Ok(Some(format!("raft node {} of {}", i + 1, c.size())));
        }
        Ok(None)
    }

    /// Cuts the leader of the cluster this command started in network nodes off from every
    /// other node; says which it was. `None` when no cluster runs in nodes (or none leads).
    pub(super) fn isolate_leader(&mut self) -> Result<Option<String>, UsageError> {
        let Some((i, node, which)) = self.leader_node() else {
            return Ok(None);
        };
        node.isolate().map_err(failed)?;
        self.isolated = Some(i);
        Ok(Some(which))
    }

    /// Undoes [`Started::isolate_leader`].
    pub(super) fn heal(&mut self) -> Result<(), UsageError> {
        if let Some(i) = self.isolated.take() {
            self.member_node(i)
                .map_or(Ok(()), Node::heal)
                .map_err(failed)?;
        }
        Ok(())
    }

    /// The leader of the cluster this command started in network nodes: its index, its node and
    /// what to call it.
    fn leader_node(&self) -> Option<(usize, &Node, String)> {
        fn leader<'a, K: Kind>(c: &'a Cluster<K>, what: &str) -> Option<(usize, &'a Node, String)> {
            let i = c.leader()?;
            let which = format!("{what} {} of {} (the leader)", i + 1, c.size());
            Some((i, c.node(i)?, which))
        }
        match (&self.etcd, &self.zk, &self.raft) {
            (Some(c), _, _) => leader(c, "etcd member"),
            (_, Some(c), _) => leader(c, "ZooKeeper server"),
            (_, _, Some(c)) => leader(c, "raft node"),
            _ => None,
        }
    }

    fn member_node(&self, i: usize) -> Option<&Node> {
        match (&self.etcd, &self.zk, &self.raft) {
            (Some(c), _, _) => c.node(i),
            (_, Some(c), _) => c.node(i),
            (_, _, Some(c)) => c.node(i),
            _ => None,
        }
    }
}
