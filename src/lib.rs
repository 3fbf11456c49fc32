//! fencecheck: distributed locks and leader election made checkable.
//!
//! - [`protocol`]: the sans-IO core (lease table, fencing rule, tokens) that everything calls.
//! - [`local`]: the in-process fenced lease lock and fenced store, checked by loom.
//! - [`backend`]: the same lock and fenced storage on Redis, etcd, ZooKeeper, PostgreSQL and
//!   the Raft lock database, with keepalive.
//! - [`client`]: check your own lock client in the models' world ([`verify`]).
//! - [`models`]: Stateright models of lock protocols built on the core.
//! - [`raftdb`]: the Raft lock database that `fencecheck raft-node` serves (openraft).
//! - [`campaign`]: the fault campaign (`fencecheck torture`): workers, nemeses, histories.
//! - [`check`]: running the models and comparing verdicts with their declared expectations.
//! - [`report`]: rendering verdicts, counterexample diagrams and benchmark results.
#![deny(missing_docs)]

#[cfg(all(feature = "backends", not(loom)))]
pub mod backend;
#[cfg(all(feature = "backends", not(loom)))]
pub mod campaign;
pub mod check;
pub mod client;
pub mod local;
#[path = "../models/mod.rs"]
pub mod models;
pub mod protocol;
#[cfg(all(feature = "backends", not(loom)))]
pub mod raftdb;
pub mod report;
pub mod sync;

pub use check::verify::{try_verify, verify};

/// The README's Rust examples, compiled as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;
