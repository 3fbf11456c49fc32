//! fencecheck: distributed locks and leader election made checkable.
//!
//! - [`protocol`]: the sans-IO core (lease table, fencing rule, tokens) that everything calls.
//! - [`local`]: the in-process fenced lease lock and fenced store, checked by loom.
//! - [`backend`]: the same lock and fenced storage on Redis and PostgreSQL, with keepalive.
//! - [`client`]: check your own lock client in the models' world ([`verify`]).
//! - [`models`]: Stateright models of lock protocols built on the core.
//! - [`check`]: running the models and comparing verdicts with their declared expectations.
//! - [`report`]: rendering verdicts, counterexample diagrams and benchmark results.
#![deny(missing_docs)]

#[cfg(all(feature = "backends", not(loom)))]
pub mod backend;
pub mod check;
pub mod client;
pub mod local;
#[path = "../models/mod.rs"]
pub mod models;
pub mod protocol;
pub mod report;
pub mod sync;

pub use client::verify;
