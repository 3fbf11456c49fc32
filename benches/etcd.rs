//! `EtcdLock` acquire + release on a one-member and a three-member cluster this benchmark starts,
//! against the floor of a raw put-if-absent transaction plus a delete on the same cluster.
//!
//! Round trips: our acquire is two (lease grant, then one transaction that creates the key and
//! reads the lowest key) and our release two (a compare-and-delete transaction, then the lease
//! revoke); the floor is one each way, with no lease.

mod common;

use common::{acquire_release, bench_against_floor};
use criterion::{criterion_group, criterion_main, Criterion};
use fencecheck::backend::etcd_rpc::{Compare, Members, RequestOp, TxnRequest};
use fencecheck::backend::EtcdLock;
use fencecheck_testkit::EtcdCluster;
use std::time::Duration;

fn bench_cluster(c: &mut Criterion, members: usize) {
    let cluster = EtcdCluster::start(members).expect("etcd starts");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let endpoints = cluster.endpoints();
    let lock = rt
        .block_on(EtcdLock::connect(
            &endpoints,
            "bench",
            Duration::from_secs(30),
        ))
        .unwrap();
    let rpc = {
        let _in_runtime = rt.enter();
        Members::new(&endpoints, Duration::from_secs(2), Duration::from_secs(2)).unwrap()
    };
    let client = rpc.client(0);
    let fenced = || acquire_release(&rt, &lock);
    let floor = || {
        rt.block_on(async {
            let txn = TxnRequest {
                compare: vec![Compare::created_at("floor/k", 0)],
                success: vec![RequestOp::put("floor/k", "owner", 0)],
                failure: vec![],
            };
            assert!(client.txn(txn).await.unwrap().succeeded);
            assert_eq!(client.delete("floor/k").await.unwrap(), 1);
        })
    };
    bench_against_floor(
        c,
        &format!("etcd/{members}_members/acquire_release"),
        ("put_if_absent_delete_floor", floor),
        ("fenced_acquire_release", fenced),
        "a raw put-if-absent transaction plus a delete on the same cluster",
    );
}

fn one_member(c: &mut Criterion) {
    bench_cluster(c, 1);
}

fn three_members(c: &mut Criterion) {
    bench_cluster(c, 3);
}

criterion_group! {
    name = benches;
    config = common::server_config();
    targets = one_member, three_members
}
criterion_main!(benches);
