//! Throwaway servers on 127.0.0.1 for `demo` and `torture`, where the user named none: started
//! on free ports in temporary directories, said on stdout, stopped when dropped.

use super::UsageError;
use fencecheck_testkit::{EtcdCluster, PgServer, RedisServer, ZkCluster};

/// The servers a command started; each is stopped when this is dropped.
#[derive(Default)]
pub(super) struct Started {
    redis: Option<RedisServer>,
    etcd: Option<EtcdCluster>,
    zk: Option<ZkCluster>,
    pg: Option<PgServer>,
}

fn failed(e: impl std::fmt::Display) -> UsageError {
    UsageError(e.to_string())
}

impl Started {
    /// Starts a redis-server; its URL.
    pub(super) fn redis(&mut self) -> Result<String, UsageError> {
        let server = RedisServer::start(false).map_err(failed)?;
        println!(
            "started a throwaway redis-server on 127.0.0.1:{}",
            server.port()
        );
        let url = server.url();
        self.redis = Some(server);
        Ok(url)
    }

    /// Starts a one-member etcd cluster; its endpoints.
    pub(super) fn etcd(&mut self) -> Result<Vec<String>, UsageError> {
        let cluster = EtcdCluster::start(1).map_err(failed)?;
        println!("started a throwaway etcd on {}", cluster.endpoints()[0]);
        let endpoints = cluster.endpoints();
        self.etcd = Some(cluster);
        Ok(endpoints)
    }

    /// Starts a one-server ZooKeeper; its connect string.
    pub(super) fn zk(&mut self) -> Result<String, UsageError> {
        let server = ZkCluster::start(1).map_err(failed)?;
        println!("started a throwaway ZooKeeper on {}", server.address(0));
        let connect = server.connect_string();
        self.zk = Some(server);
        Ok(connect)
    }

    /// Starts a PostgreSQL cluster; its URL.
    pub(super) fn pg(&mut self) -> Result<String, UsageError> {
        let server = PgServer::start().map_err(failed)?;
        println!(
            "started a throwaway PostgreSQL on 127.0.0.1:{}",
            server.port()
        );
        let url = server.url();
        self.pg = Some(server);
        Ok(url)
    }
}
