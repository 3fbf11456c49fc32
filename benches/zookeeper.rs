//! `ZkLock` acquire + release on one ZooKeeper server and on a three-server ensemble this
//! benchmark starts, against the floor of a raw create-ephemeral-sequential plus a delete on the
//! same servers, in the same run. On the ensemble both connect to the same follower.
//!
//! Round trips: our acquire sends the create and the list of contenders together on one session
//! (one round trip; ZooKeeper answers a session's requests in order), our release is one delete;
//! the floor is the create and the delete alone.

mod common;

use common::{acquire_release, paired_ops};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fencecheck::backend::ZkLock;
use fencecheck_testkit::ZkCluster;
use std::time::Duration;
use zookeeper_client::{Acls, Client, CreateMode};

fn bench_ensemble(c: &mut Criterion, servers: usize) {
    let zk = ZkCluster::start(servers).expect("ZooKeeper starts");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Both clients talk to the same server (on the ensemble, a follower, which forwards writes
    // to the leader), so the comparison does not depend on where each session landed.
    let server = match zk.leader() {
        Some(leader) if servers > 1 => (leader + 1) % servers,
        _ => 0,
    };
    let connect = zk.address(server);
    let lock = rt
        .block_on(ZkLock::connect(&connect, "bench", Duration::from_secs(30)))
        .unwrap();
    let client = rt.block_on(Client::connect(&connect)).unwrap();
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    rt.block_on(client.mkdir("/floor", &persistent)).unwrap();
    let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let floor = || {
        rt.block_on(async {
            let (_, sequence) = client
                .create("/floor/lock-", b"owner", &ephemeral)
                .await
                .unwrap();
            client
                .delete(&format!("/floor/lock-{sequence}"), None)
                .await
                .unwrap();
        })
    };
    // The recipe's own floor: the create with the list of contenders pipelined behind it (how the
    // lock learns its place in the queue), then the delete.
    let recipe_floor = || {
        rt.block_on(async {
            let create = client.create("/floor/lock-", b"owner", &ephemeral);
            let list = client.list_children("/floor");
            let (created, listed) = tokio::join!(create, list);
            let (_, sequence) = created.unwrap();
            assert!(!listed.unwrap().is_empty());
            client
                .delete(&format!("/floor/lock-{sequence}"), None)
                .await
                .unwrap();
        })
    };
    let fenced = || acquire_release(&rt, &lock);
    // The servers are JVMs: run the operations measured below for a few seconds first, so
    // whichever is measured first does not pay for the JIT warming up.
    let until = std::time::Instant::now() + Duration::from_secs(4);
    while std::time::Instant::now() < until {
        fenced();
        floor();
        recipe_floor();
    }
    let mut g = c.benchmark_group(format!("zookeeper/{servers}_servers/acquire_release"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("create_ephemeral_sequential_delete_floor", |b| {
        b.iter(floor)
    });
    g.bench_function("create_list_delete_floor", |b| b.iter(recipe_floor));
    g.bench_function("fenced_acquire_release", |b| b.iter(fenced));
    g.finish();
    paired_ops(
        &format!("zookeeper/{servers}_servers/acquire_release/paired"),
        ("create_ephemeral_sequential_delete_floor", floor),
        ("fenced_acquire_release", fenced),
        "a raw create-ephemeral-sequential plus a delete on the same server",
    );
    // Against the recipe's floor: what the lock costs beyond the operations the recipe needs.
    paired_ops(
        &format!("zookeeper/{servers}_servers/acquire_release/paired_over_recipe"),
        ("create_list_delete_floor", recipe_floor),
        ("fenced_acquire_release", fenced),
        "a raw create-ephemeral-sequential with the list of children pipelined, then a delete",
    );
}

fn one_server(c: &mut Criterion) {
    bench_ensemble(c, 1);
}

fn three_servers(c: &mut Criterion) {
    bench_ensemble(c, 3);
}

criterion_group! {
    name = benches;
    config = common::server_config();
    targets = one_server, three_servers
}
criterion_main!(benches);
