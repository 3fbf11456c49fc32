//! Backend-neutral locks and fenced storage, and their implementations on real servers.
//!
//! - [`LockService`]: a lease lock that hands out fencing tokens — [`RedisLock`], [`EtcdLock`],
//!   [`ZkLock`], and the in-process [`LeaseLock`](crate::local::LeaseLock) through [`LocalLock`].
//! - [`FencedStorage`]: storage that rejects a write whose token is older than one it has seen —
//!   [`PgFencedStore`], [`RedisFencedStore`], and the in-process [`LocalFencedMap`].
//! - [`connect`]: any of the lock services from where it lives ([`LockSpec`]), as one
//!   [`AnyLock`].
//! - [`LeaderElection`]: leader election on any [`LockService`]; the term is the leader's token.
//! - [`hold`]: keeps a granted lease alive in the background and signals when it is lost, using a
//!   deadline counted from when the acquire request was *sent*.
//!
//! Backends are async (tokio). Every call that reaches a server is bounded by a timeout, so an
//! unreachable server is an error within that bound, never a hang.

mod connect;
mod contract;
mod election;
mod etcd;
mod keepalive;
mod local;
mod postgres;
mod probe;
mod queue;
pub mod raft;
mod redis;
mod redis_conn;
pub mod retry;
mod traced;
mod zookeeper;

pub use self::connect::{connect, parse_endpoints, AnyLock, LockSpec};
pub use self::contract::{
    validate_name, Acquired, BackendError, Cause, ErrorKind, FencedStorage, Grant, Holder,
    LockService, Stored, WriteOutcome, WriteResult,
};
pub use self::election::{LeaderElection, Leadership};
pub use self::etcd::rpc as etcd_rpc;
pub use self::etcd::{EtcdLock, EtcdOptions};
pub use self::keepalive::{hold, hold_on, HeldLease, KeepaliveOptions, LostReason, Stop};
pub use self::local::{LocalFencedMap, LocalLock};
pub use self::postgres::PgFencedStore;
pub use self::redis::{scripts as redis_scripts, RedisFencedStore, RedisLock, RedisOptions};
pub use self::traced::{monotonic_us, Recorder, TracedLock, TracedStore};
pub use self::zookeeper::{ZkElection, ZkLock, ZkOptions};
pub use crate::protocol::{default_drift, default_grace, Ttl, TtlError, MAX_TTL};
