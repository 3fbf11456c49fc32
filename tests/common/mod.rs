//! Helpers shared by the backend test crates.
#![allow(dead_code)]

pub mod contract;
