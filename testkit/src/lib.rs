//! fencecheck's test harness, kept out of the library: throwaway servers (`redis-server`,
//! PostgreSQL, etcd, ZooKeeper, fencecheck Raft nodes) on 127.0.0.1 at free ports in temporary
//! directories, signals for fault injection, and the `FENCECHECK_REQUIRE_SERVERS` switch that
//! turns a missing server binary from a loud skip into a failure.
//!
//! A dev-dependency of fencecheck's tests and benchmarks; `fencecheck demo` reaches its throwaway
//! servers through it too. It depends on nothing of fencecheck's, so it cannot reach into the
//! protocol or the backends it is used to test.
#![deny(missing_docs)]

pub mod netns;
pub mod proxy;
pub mod servers;

pub use proxy::{FreezableProxy, SilentListener};
pub use servers::*;
