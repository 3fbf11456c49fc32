//! A lock service as every command names it: `--lock`, one string. Either a lock service's
//! address ([`LockSpec`]: `redis://HOST:PORT[/DB]`, `etcd://HOST:PORT,...`, `zk://HOST:PORT,...`,
//! `raft://HOST:PORT,...`) or a kind alone (`local`, `redis`, `etcd`, `zk`, `raft`): `run` then
//! uses that server's usual local address, `demo` and `torture` start a throwaway one.

use fencecheck::backend::{parse_endpoints, LockSpec};

/// The kinds of lock service the commands know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// The in-process lease lock (`demo` and `torture` only: one process).
    Local,
    Redis,
    Etcd,
    Zookeeper,
    Raft,
}

impl Kind {
    /// The kind's name in `--lock`.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Local => "local",
            Kind::Redis => "redis",
            Kind::Etcd => "etcd",
            Kind::Zookeeper => "zk",
            Kind::Raft => "raft",
        }
    }

    /// The server's usual local address; `None` for the in-process lock.
    pub(super) fn default_spec(self) -> Option<LockSpec> {
        Some(match self {
            Kind::Local => return None,
            Kind::Redis => LockSpec::Redis {
                url: "redis://127.0.0.1:6379".into(),
            },
            Kind::Etcd => LockSpec::Etcd {
                endpoints: vec!["http://127.0.0.1:2379".into()],
            },
            Kind::Zookeeper => LockSpec::Zookeeper {
                connect: "127.0.0.1:2181".into(),
            },
            Kind::Raft => LockSpec::Raft {
                nodes: parse_endpoints("127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"),
            },
        })
    }
}

/// What `--lock` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum LockArg {
    /// A kind alone.
    Kind(Kind),
    /// A lock service at an address.
    At(LockSpec),
}

impl LockArg {
    /// The lock service's kind.
    pub(super) fn kind(&self) -> Kind {
        match self {
            LockArg::Kind(kind) => *kind,
            LockArg::At(LockSpec::Redis { .. }) => Kind::Redis,
            LockArg::At(LockSpec::Etcd { .. }) => Kind::Etcd,
            LockArg::At(LockSpec::Zookeeper { .. }) => Kind::Zookeeper,
            LockArg::At(LockSpec::Raft { .. }) => Kind::Raft,
        }
    }

    /// The address given, if one was.
    pub(super) fn given(&self) -> Option<&LockSpec> {
        match self {
            LockArg::Kind(_) => None,
            LockArg::At(spec) => Some(spec),
        }
    }
}

impl std::str::FromStr for LockArg {
    type Err = String;

    fn from_str(text: &str) -> Result<LockArg, String> {
        Ok(match text {
            "local" => LockArg::Kind(Kind::Local),
            "redis" => LockArg::Kind(Kind::Redis),
            "etcd" => LockArg::Kind(Kind::Etcd),
            "zk" | "zookeeper" => LockArg::Kind(Kind::Zookeeper),
            "raft" => LockArg::Kind(Kind::Raft),
            _ => LockArg::At(
                text.parse::<LockSpec>()
                    .map_err(|e| format!("{e}; or a kind alone: local, redis, etcd, zk or raft"))?,
            ),
        })
    }
}

impl std::fmt::Display for LockArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockArg::Kind(kind) => f.write_str(kind.name()),
            LockArg::At(spec) => write!(f, "{spec}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_alone_or_an_address() {
        for (text, kind) in [
            ("local", Kind::Local),
            ("redis", Kind::Redis),
            ("etcd", Kind::Etcd),
            ("zk", Kind::Zookeeper),
            ("zookeeper", Kind::Zookeeper),
            ("raft", Kind::Raft),
        ] {
            let arg: LockArg = text.parse().unwrap();
            assert_eq!((arg.kind(), arg.given()), (kind, None), "{text}");
        }
        for (text, kind) in [
            ("redis://10.0.0.5:6380/2", Kind::Redis),
            ("etcd://a:2379,b:2379", Kind::Etcd),
            ("zk://a:2181", Kind::Zookeeper),
            ("raft://a:7001,b:7002", Kind::Raft),
        ] {
            let arg: LockArg = text.parse().unwrap();
            assert_eq!(arg.kind(), kind, "{text}");
            assert_eq!(arg.to_string(), text);
            assert!(arg.given().is_some());
        }
        let err = "mysql://x".parse::<LockArg>().unwrap_err();
        assert!(
            err.contains("\"mysql://x\"") && err.contains("a kind alone"),
            "{err}"
        );
    }

    #[test]
    fn every_server_kind_has_a_usual_address_and_the_local_lock_none() {
        assert_eq!(Kind::Local.default_spec(), None);
        for kind in [Kind::Redis, Kind::Etcd, Kind::Zookeeper, Kind::Raft] {
            let spec = kind.default_spec().expect("a server");
            assert_eq!(LockArg::At(spec).kind(), kind);
        }
    }
}
