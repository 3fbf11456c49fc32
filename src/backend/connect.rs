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

impl LockSpec {
    /// The lock service's identity, the same for every spelling of one service: each member's
    /// host resolved (its first IPv4 address, else its first address; the name itself, lower
    /// case, when it does not resolve), the default port and Redis database filled in,
    /// credentials dropped, members sorted (a ZooKeeper chroot kept). `fencecheck run`'s token
    /// floor is keyed by it, so `redis://localhost:6379` and `redis://127.0.0.1:6379/0` share one.
    pub fn identity(&self) -> String {
        let strip = |e: &str| e.split_once("://").map_or(e, |(_, rest)| rest).to_string();
        match self {
            LockSpec::Redis { url } => {
                let rest = strip(url);
                let (authority, db) = rest.split_once('/').unwrap_or((&rest, ""));
                let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
                let db = match db.trim_matches('/') {
                    "" => "0",
                    db => db,
                };
                format!("redis://{}/{db}", canonical_address(host, 6379))
            }
            LockSpec::Etcd { endpoints } => {
                members("etcd", endpoints.iter().map(|e| strip(e)), 2379, "")
            }
            LockSpec::Zookeeper { connect } => {
                let (hosts, chroot) = match connect.find('/') {
                    Some(at) => connect.split_at(at),
                    None => (connect.as_str(), ""),
                };
                members("zk", hosts.split(',').map(String::from), 2181, chroot)
            }
            LockSpec::Raft { nodes } => members("raft", nodes.iter().cloned(), 7001, ""),
        }
    }
}

/// `scheme://` and the sorted canonical addresses of `list`, then `suffix`.
fn members(scheme: &str, list: impl Iterator<Item = String>, port: u16, suffix: &str) -> String {
    let mut addresses: Vec<String> = list
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .map(|m| canonical_address(&m, port))
        .collect();
    addresses.sort();
    addresses.dedup();
    format!("{scheme}://{}{suffix}", addresses.join(","))
}

/// `HOST[:PORT]` as `IP:PORT`: `port` when none is given, the host resolved to its first IPv4
/// address (else its first address), or kept in lower case when it does not resolve.
fn canonical_address(address: &str, port: u16) -> String {
    use std::net::ToSocketAddrs;
    let with_port = match address.rsplit_once(':') {
        Some((_, p)) if p.parse::<u16>().is_ok() && !address.ends_with(']') => address.to_string(),
        _ => format!("{address}:{port}"),
    };
    match with_port.to_socket_addrs() {
        Ok(resolved) => {
            let mut resolved: Vec<_> = resolved.collect();
            resolved.sort_by_key(|a| (!a.is_ipv4(), *a));
            match resolved.first() {
                Some(a) => a.to_string(),
                None => with_port.to_ascii_lowercase(),
            }
        }
        Err(_) => with_port.to_ascii_lowercase(),
    }
}

/// Why an address of a lock spec names no port a server could listen on: port 0 (which asks the
/// system for any free port) or a port that is not a number from 1 to 65535. No port is fine (the
/// service's usual one).
fn bad_port(address: &str) -> Option<String> {
    let address = address.split_once("://").map_or(address, |(_, rest)| rest);
    let address = address.rsplit_once('@').map_or(address, |(_, host)| host);
    let address = address.split('/').next().unwrap_or(address);
    if address.ends_with(']') {
        return None;
    }
    let (_, port) = address.rsplit_once(':')?;
    match port.parse::<u16>() {
        Ok(0) => Some(format!(
            "{address}: port 0 is no server's port (expected 1 to 65535)"
        )),
        Ok(_) => None,
        Err(_) => Some(format!(
            "{address}: port {port:?} is not a number from 1 to 65535"
        )),
    }
}

/// What a lock spec string may be (the message of every refusal).
const SPEC_FORMS: &str = "expected redis://HOST:PORT[/DB], etcd://HOST:PORT[,HOST:PORT...], \
                          zk://HOST:PORT[,HOST:PORT...] or raft://HOST:PORT[,HOST:PORT...]";

impl std::str::FromStr for LockSpec {
    type Err = BackendError;

    /// One string for a lock service: `redis://HOST:PORT[/DB]`, `etcd://HOST:PORT,...` (each
    /// member `http://HOST:PORT`, or a full URL given as one), `zk://HOST:PORT,...` or
    /// `raft://HOST:PORT,...`.
    fn from_str(text: &str) -> Result<LockSpec, BackendError> {
        let bad = |why: &str| {
            BackendError::invalid("lock spec", format!("{text:?}: {why}; {SPEC_FORMS}"))
        };
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(bad("no scheme"));
        };
        let list = || {
            let items = parse_endpoints(rest);
            if items.is_empty() {
                Err(bad("no address"))
            } else {
                Ok(items)
            }
        };
        if let Some(why) = parse_endpoints(rest).iter().find_map(|a| bad_port(a)) {
            return Err(bad(&why));
        }
        Ok(match scheme {
            "redis" if !rest.is_empty() => LockSpec::Redis {
                url: text.to_string(),
            },
            "redis" => return Err(bad("no address")),
            "etcd" => LockSpec::Etcd {
                endpoints: list()?
                    .into_iter()
                    .map(|e| {
                        if e.contains("://") {
                            e
                        } else {
                            format!("http://{e}")
                        }
                    })
                    .collect(),
            },
            "zk" => LockSpec::Zookeeper {
                connect: list()?.join(","),
            },
            "raft" => LockSpec::Raft { nodes: list()? },
            // Refused rather than spoken to in plaintext, as etcd's https endpoints are.
            "rediss" => {
                return Err(bad(
                    "Redis over TLS is not supported, and a rediss URL is never spoken to in \
                     plaintext",
                ))
            }
            _ => return Err(bad(&format!("unknown scheme {scheme:?}"))),
        })
    }
}

impl std::fmt::Display for LockSpec {
    /// The string [`FromStr`](std::str::FromStr) reads back to the same spec.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockSpec::Redis { url } => f.write_str(url),
            LockSpec::Etcd { endpoints } => {
                let short: Vec<&str> = endpoints
                    .iter()
                    .map(|e| e.strip_prefix("http://").unwrap_or(e))
                    .collect();
                write!(f, "etcd://{}", short.join(","))
            }
            LockSpec::Zookeeper { connect } => write!(f, "zk://{connect}"),
            LockSpec::Raft { nodes } => write!(f, "raft://{}", nodes.join(",")),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_one_service_has_one_identity() {
        let id = |text: &str| text.parse::<LockSpec>().unwrap().identity();
        let redis = id("redis://127.0.0.1:6379");
        assert_eq!(redis, "redis://127.0.0.1:6379/0");
        for alias in [
            "redis://localhost:6379",
            "redis://localhost",
            "redis://127.0.0.1:6379/0",
            "redis://user:secret@127.0.0.1:6379/0",
        ] {
            assert_eq!(id(alias), redis, "{alias}");
        }
        assert_ne!(id("redis://127.0.0.1:6379/1"), redis, "another database");
        assert_ne!(id("redis://127.0.0.1:6380"), redis, "another port");
        assert_eq!(
            id("etcd://localhost:2379,http://127.0.0.2:2379"),
            id("etcd://127.0.0.2,127.0.0.1:2379")
        );
        assert_eq!(
            id("zk://127.0.0.2:2181,localhost:2181/app"),
            "zk://127.0.0.1:2181,127.0.0.2:2181/app"
        );
        assert_ne!(id("zk://127.0.0.1:2181/app"), id("zk://127.0.0.1:2181"));
        assert_eq!(
            id("raft://b.invalid:7002,A.invalid:7001"),
            "raft://a.invalid:7001,b.invalid:7002"
        );
    }

    #[test]
    fn port_zero_or_no_number_is_refused_for_every_kind() {
        for text in [
            "redis://127.0.0.1:0",
            "redis://user:pw@127.0.0.1:0/1",
            "etcd://127.0.0.1:2379,127.0.0.1:0",
            "etcd://http://127.0.0.1:0",
            "zk://127.0.0.1:0/app",
            "raft://127.0.0.1:7001,127.0.0.1:0",
            "raft://127.0.0.1:http",
            "redis://127.0.0.1:70000",
        ] {
            let err = text.parse::<LockSpec>().expect_err(text).to_string();
            assert!(err.contains("port"), "{text}: {err}");
        }
        for fine in [
            "redis://localhost",
            "zk://[::1]:2181",
            "etcd://127.0.0.1:2379",
        ] {
            assert!(fine.parse::<LockSpec>().is_ok(), "{fine}");
        }
    }

    #[test]
    fn a_spec_is_one_string_that_reads_back_the_same() {
        for (text, spec) in [
            (
                "redis://127.0.0.1:6379/2",
                LockSpec::Redis {
                    url: "redis://127.0.0.1:6379/2".into(),
                },
            ),
            (
                "etcd://a:2379,b:2379",
                LockSpec::Etcd {
                    endpoints: vec!["http://a:2379".into(), "http://b:2379".into()],
                },
            ),
            (
                "zk://a:2181,b:2181",
                LockSpec::Zookeeper {
                    connect: "a:2181,b:2181".into(),
                },
            ),
            (
                "raft://a:7001,b:7002,c:7003",
                LockSpec::Raft {
                    nodes: vec!["a:7001".into(), "b:7002".into(), "c:7003".into()],
                },
            ),
        ] {
            assert_eq!(text.parse::<LockSpec>().unwrap(), spec, "{text}");
            assert_eq!(spec.to_string(), text);
        }
        // A member given with its own scheme keeps it.
        let tls: LockSpec = "etcd://https://a:2379".parse().unwrap();
        assert_eq!(tls.to_string().parse::<LockSpec>().unwrap(), tls);
    }

    #[test]
    fn a_bad_spec_names_the_input_and_what_was_expected() {
        for bad in [
            "",
            "127.0.0.1:6379",
            "ftp://a:1",
            "etcd://",
            "zk:// , ",
            "redis://",
        ] {
            let e = bad.parse::<LockSpec>().unwrap_err().to_string();
            assert!(
                e.contains("invalid lock spec") && e.contains("expected redis://"),
                "{bad:?}: {e}"
            );
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        // TLS is refused by name, never spoken to in plaintext.
        let e = "rediss://a:6380"
            .parse::<LockSpec>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("Redis over TLS is not supported"), "{e}");
    }
}
