//! One way in to every lock service: where it lives ([`LockSpec`]), connected as one type
//! ([`AnyLock`]) that implements [`LockService`]. `fencecheck run`, `demo` and the test workers all
//! connect through [`connect`], so the list of backends is written once.

use super::contract::{Acquired, BackendError, Grant, Holder, LockService};
use super::etcd::{EtcdLock, EtcdOptions};
use super::raft::{RaftLock, RaftOptions};
use super::redis::{RedisLock, RedisOptions};
use super::zookeeper::{ZkLock, ZkOptions};
use crate::protocol::Token;
use crate::protocol::Ttl;
use std::time::Duration;

/// Where a lock service lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockSpec {
    /// A Redis server, `redis://HOST:PORT`.
    Redis {
        /// The server's URL.
        url: String,
    },
    /// An etcd cluster; compatible with `etcdctl lock NAME`.
    Etcd {
        /// Client URLs of its members, `http://HOST:PORT`.
        endpoints: Vec<String>,
    },
    /// A ZooKeeper ensemble; a lock name starting with `/` is a path shared with Curator's
    /// `InterProcessMutex`.
    Zookeeper {
        /// `HOST:PORT,HOST:PORT,...`.
        connect: String,
    },
    /// A fencecheck Raft cluster (`fencecheck raft-node`).
    Raft {
        /// Its nodes, `HOST:PORT`.
        nodes: Vec<String>,
    },
}

impl LockSpec {
    /// The backend's name: `redis`, `etcd`, `zookeeper` or `raft`.
    pub fn backend(&self) -> &'static str {
        match self {
            LockSpec::Redis { .. } => "redis",
            LockSpec::Etcd { .. } => "etcd",
            LockSpec::Zookeeper { .. } => "zookeeper",
            LockSpec::Raft { .. } => "raft",
        }
    }
}

/// A comma-separated list of endpoints, blanks dropped.
pub fn parse_endpoints(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect()
}

/// A connected lock service of any kind.
pub enum AnyLock {
    /// On Redis.
    Redis(RedisLock),
    /// On etcd.
    Etcd(EtcdLock),
    /// On ZooKeeper.
    Zookeeper(ZkLock),
    /// On a fencecheck Raft cluster.
    Raft(RaftLock),
}

/// Connects to the lock named `name` with lease `ttl` at `spec`; connecting and every request
/// bounded by `timeout`.
pub async fn connect(
    spec: &LockSpec,
    name: &str,
    ttl: Duration,
    timeout: Duration,
) -> Result<AnyLock, BackendError> {
    Ok(match spec {
        LockSpec::Redis { url } => {
            let options = RedisOptions {
                connect_timeout: timeout,
                response_timeout: timeout,
            };
            AnyLock::Redis(RedisLock::connect_with(url, name, ttl, options)?)
        }
        LockSpec::Etcd { endpoints } => {
            let options = EtcdOptions {
                connect_timeout: timeout,
                request_timeout: timeout,
            };
            AnyLock::Etcd(EtcdLock::connect_with(endpoints, name, ttl, options).await?)
        }
        LockSpec::Zookeeper { connect } => {
            let options = ZkOptions {
                connect_timeout: timeout,
                request_timeout: timeout,
            };
            AnyLock::Zookeeper(ZkLock::connect_with(connect, name, ttl, options).await?)
        }
        LockSpec::Raft { nodes } => {
            let options = RaftOptions {
                request_timeout: timeout,
            };
            AnyLock::Raft(RaftLock::connect_with(nodes, name, ttl, options)?)
        }
    })
}

/// Runs `$call` on whichever lock `$lock` is.
macro_rules! each {
    ($lock:expr, $l:ident => $call:expr) => {
        match $lock {
            AnyLock::Redis($l) => $call,
            AnyLock::Etcd($l) => $call,
            AnyLock::Raft($l) => $call,
            AnyLock::Zookeeper($l) => $call,
        }
    };
}

impl LockService for AnyLock {
    fn ttl(&self) -> Ttl {
        each!(self, l => l.ttl())
    }

    async fn try_acquire(&self, owner: &str) -> Result<Acquired, BackendError> {
        each!(self, l => l.try_acquire(owner).await)
    }

    async fn extend(&self, owner: &str, token: Token) -> Result<Option<Grant>, BackendError> {
        each!(self, l => l.extend(owner, token).await)
    }

    async fn publish(&self, owner: &str, token: Token, value: &str) -> Result<bool, BackendError> {
        each!(self, l => l.publish(owner, token, value).await)
    }

    async fn holder(&self) -> Result<Option<Holder>, BackendError> {
        each!(self, l => l.holder().await)
    }

    async fn release(&self, owner: &str, token: Token) -> Result<bool, BackendError> {
        each!(self, l => l.release(owner, token).await)
    }

    async fn acquire(&self, owner: &str, timeout: Duration) -> Result<Option<Grant>, BackendError> {
        each!(self, l => l.acquire(owner, timeout).await)
    }
}
