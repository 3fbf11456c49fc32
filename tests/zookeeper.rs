//! The ZooKeeper lock on real ZooKeeper servers this test starts (one server, and a three-server
//! ensemble for the faults): the backend contract, interoperation with Apache Curator's mutex,
//! bounded errors, and the lock working through the loss of the ensemble's leader.
#![cfg(feature = "backends")]

mod common;

use common::contract::{election_contract, lock_contract, lost_signal_contract};
use fencecheck::backend::servers::{started_or_skip, ZkCluster};
use fencecheck::backend::{Acquired, LockService, ZkLock, ZkOptions};
use fencecheck::protocol::one_leader_per_term;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(1);

#[tokio::test]
async fn zookeeper_lock_meets_the_contract() {
    let Some(zk) = started_or_skip("ZooKeeper contract", ZkCluster::start(1)) else {
        return;
    };
    let lock = ZkLock::connect(&zk.connect_string(), "contract", TTL)
        .await
        .unwrap();
    assert_eq!(
        lock.ttl(),
        TTL,
        "the server granted the session timeout asked for"
    );
    lock_contract(&lock).await;
    lost_signal_contract(Arc::new(lock)).await;
    let lock = ZkLock::connect(&zk.connect_string(), "election", TTL)
        .await
        .unwrap();
    let wins = election_contract(Arc::new(lock)).await;
    one_leader_per_term(&wins).unwrap();
}

#[tokio::test]
async fn bad_input_and_unreachable_ensembles_are_clear_errors() {
    for (connect, name, expected) in [
        ("", "x", "invalid ZooKeeper connect string: it is empty"),
        (
            "127.0.0.1",
            "x",
            "invalid ZooKeeper connect string: \"127.0.0.1\"",
        ),
        ("127.0.0.1:2181/chroot", "x", "expected HOST:PORT"),
        ("127.0.0.1:1", "", "invalid lock name: it is empty"),
        ("127.0.0.1:1", "/a//b", "invalid lock name"),
        ("127.0.0.1:1", "/zookeeper/quota", "reserved by ZooKeeper"),
    ] {
        let e = ZkLock::connect(connect, name, TTL)
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(expected), "{connect:?} {name:?}: {e}");
    }
    let e = ZkLock::connect("127.0.0.1:1", "x", Duration::ZERO)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("invalid ttl"), "{e}");

    // Every server down: an error naming the ensemble within the bound, not a hang.
    let connect = (0..3)
        .map(|_| {
            format!(
                "127.0.0.1:{}",
                fencecheck::backend::servers::free_port().unwrap()
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    let options = ZkOptions {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
    };
    let t0 = Instant::now();
    let e = ZkLock::connect_with(&connect, "x", TTL, options)
        .await
        .err()
        .unwrap()
        .to_string();
    let took = t0.elapsed();
    assert!(e.contains("zookeeper") && e.contains(&connect), "{e}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test]
async fn tokens_are_creation_zxids_and_the_session_timeout_is_the_servers() {
    let Some(zk) = started_or_skip("ZooKeeper tokens", ZkCluster::start(1)) else {
        return;
    };
    let lock = ZkLock::connect(&zk.connect_string(), "/locks/tokens", TTL)
        .await
        .unwrap();
    assert_eq!(lock.path(), "/locks/tokens");
    let mut last = None;
    for i in 0..5 {
        let owner = format!("w{i}");
        let Acquired::Granted(g) = lock.try_acquire(&owner).await.unwrap() else {
            panic!("free lock refused");
        };
        let h = lock.holder().await.unwrap().unwrap();
        assert_eq!((h.owner.as_str(), h.token), (owner.as_str(), g.token));
        if let Some(prev) = last {
            assert!(g.token > prev, "{:?} after {prev:?}", g.token);
        }
        last = Some(g.token);
        assert!(lock.release(&owner, g.token).await.unwrap());
    }
    // The server clamps the session timeout to its maximum (60 s here); the lock reports it.
    let long = ZkLock::connect(&zk.connect_string(), "x", Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(long.ttl(), Duration::from_secs(60));
}
