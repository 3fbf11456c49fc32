//! The Raft backend on a three-node cluster this benchmark starts (`fencecheck raft-node`
//! processes): acquire + release and a fenced write, each against the same Raft group's plain
//! write (a key made without a fence) measured in the same run.
//!
//! Round trips: every call is one request to the leader and one committed log entry (the
//! leader's append and fsync, one replication round to a follower and its fsync), so acquire +
//! release is two round trips and two commits; its floor here is two plain writes. A fenced
//! write and a plain write are one each: the fence costs only the state machine's comparison.

mod common;

use common::{acquire_release, bench_against_floor};
use criterion::{criterion_group, criterion_main, Criterion};
use fencecheck::backend::raft::{RaftFencedStore, RaftLock, RaftOptions};
use fencecheck::backend::{FencedStorage, LockService};
use fencecheck::protocol::{FencePolicy, Token};
use fencecheck_testkit::RaftCluster;
use std::time::Duration;

fn three_nodes(c: &mut Criterion) {
    let cluster = RaftCluster::start(env!("CARGO_BIN_EXE_fencecheck"), 3).expect("raft starts");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let nodes = cluster.nodes();
    let lock = RaftLock::connect(&nodes, "bench", Duration::from_secs(30)).unwrap();
    let options = RaftOptions::default();
    let fenced = RaftFencedStore::connect(&nodes, "fenced", FencePolicy::Fenced, options).unwrap();
    let plain = RaftFencedStore::connect(&nodes, "plain", FencePolicy::AcceptAll, options).unwrap();

    let acquire_release = || acquire_release(&rt, &lock);
    let two_plain_writes = || {
        rt.block_on(async {
            for _ in 0..2 {
                let done = plain.write("floor", Token::new(1), b"v").await.unwrap();
                assert!(done.is_accepted());
            }
        })
    };
    bench_against_floor(
        c,
        "raft/3_nodes/acquire_release",
        ("two_plain_writes_floor", two_plain_writes),
        ("fenced_acquire_release", acquire_release),
        "two plain writes to the same Raft group",
    );

    let grant = rt
        .block_on(lock.acquire("writer", Duration::from_secs(5)))
        .unwrap()
        .expect("the bench lock is free");
    let fenced_write = || {
        rt.block_on(async {
            let done = fenced.write("k", grant.token, b"v").await.unwrap();
            assert!(done.is_accepted());
        })
    };
    let plain_write = || {
        rt.block_on(async {
            let done = plain.write("k", grant.token, b"v").await.unwrap();
            assert!(done.is_accepted());
        })
    };
    bench_against_floor(
        c,
        "raft/3_nodes/write",
        ("plain_write_floor", plain_write),
        ("fenced_write", fenced_write),
        "a plain write to the same Raft group",
    );
}

criterion_group! {
    name = benches;
    config = common::server_config();
    targets = three_nodes
}
criterion_main!(benches);
