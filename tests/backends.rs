//! The Redis lock, the Redis and PostgreSQL fenced stores, and keepalive, on real servers this
//! test starts (127.0.0.1, free ports, temp dirs). A missing server binary is a loud skip, or a
//! failure under FENCECHECK_REQUIRE_SERVERS=1.
#![cfg(feature = "backends")]

mod common;

use common::contract::{
    blind_campaign_is_caught, election_contract, granted, lock_contract, lost_signal_contract,
    stale, storage_contract,
};

use fencecheck::backend::{
    hold, Acquired, BackendError, FencedStorage, Grant, KeepaliveOptions, LocalFencedMap,
    LocalLock, LockService, LostReason, PgFencedStore, RedisFencedStore, RedisLock, RedisOptions,
};
use fencecheck::protocol::{one_leader_per_term, FencePolicy, Token};
use fencecheck_testkit::{started_or_skip, PgServer, RedisServer};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test]
async fn elections_on_every_backend_give_one_leader_per_term() {
    let wins = election_contract(Arc::new(
        LocalLock::new(Duration::from_millis(300)).unwrap(),
    ))
    .await;
    one_leader_per_term(&wins).unwrap();
    if let Some(redis) = started_or_skip("redis election", RedisServer::start(false)) {
        let lock =
            RedisLock::connect(&redis.url(), "election", Duration::from_millis(300)).unwrap();
        let wins = election_contract(Arc::new(lock)).await;
        one_leader_per_term(&wins).unwrap();
    }
    // Negative control: a blind campaign lets two candidates win one term, and the same checker
    // says so.
    blind_campaign_is_caught(LocalLock::new(Duration::from_secs(5)).unwrap()).await;
}

#[tokio::test]
async fn in_process_backend_meets_the_contract() {
    lock_contract(&LocalLock::new(Duration::from_millis(150)).unwrap()).await;
    lost_signal_contract(Arc::new(
        LocalLock::new(Duration::from_millis(150)).unwrap(),
    ))
    .await;
    storage_contract(&LocalFencedMap::new(FencePolicy::Fenced), true).await;
    storage_contract(&LocalFencedMap::new(FencePolicy::AcceptAll), false).await;
}

#[tokio::test]
async fn redis_lock_and_store_meet_the_contract() {
    let Some(redis) = started_or_skip("redis contract", RedisServer::start(false)) else {
        return;
    };
    let lock = RedisLock::connect(&redis.url(), "contract", Duration::from_millis(150)).unwrap();
    lock_contract(&lock).await;
    lost_signal_contract(Arc::new(lock)).await;
    storage_contract(
        &RedisFencedStore::connect(&redis.url(), "fenced").unwrap(),
        true,
    )
    .await;
    let unfenced = RedisFencedStore::connect_with(
        &redis.url(),
        "unfenced",
        FencePolicy::AcceptAll,
        RedisOptions::default(),
    )
    .unwrap();
    storage_contract(&unfenced, false).await;
}

#[tokio::test]
async fn redis_lock_keeps_its_keys_in_one_cluster_slot() {
    let lock = RedisLock::connect(
        "redis://127.0.0.1:1",
        "jobs/nightly",
        Duration::from_secs(1),
    )
    .unwrap();
    let (lock_key, token_key) = lock.keys();
    assert_eq!(lock_key, "fencecheck:{jobs/nightly}:lock");
    assert_eq!(token_key, "fencecheck:{jobs/nightly}:token");
}

#[tokio::test]
async fn postgres_store_meets_the_contract_and_fences_a_transaction() {
    let Some(pg) = started_or_skip("postgres contract", PgServer::start()) else {
        return;
    };
    let store = PgFencedStore::connect(&pg.url(), "fenced").await.unwrap();
    storage_contract(&store, true).await;
    let unfenced = PgFencedStore::connect_with(
        &pg.url(),
        "unfenced",
        FencePolicy::AcceptAll,
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    storage_contract(&unfenced, false).await;

    // The guard inside the user's own transaction.
    let (mut client, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("CREATE TABLE ledger (n int); INSERT INTO ledger VALUES (0)")
        .await
        .unwrap();
    for (token, expect_ok) in [(5u64, true), (4, false), (5, true), (6, true), (1, false)] {
        let tx = client.transaction().await.unwrap();
        let outcome = store.fence(&tx, "ledger", Token::new(token)).await.unwrap();
        assert_eq!(
            outcome.is_accepted(),
            expect_ok,
            "token {token}: {outcome:?}"
        );
        if outcome.is_accepted() {
            tx.execute("UPDATE ledger SET n = n + 1", &[])
                .await
                .unwrap();
            tx.commit().await.unwrap();
        } else {
            assert_eq!(outcome, stale(token, if token == 4 { 5 } else { 6 }));
        }
    }
    let n: i32 = client
        .query_one("SELECT n FROM ledger", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 3);
}

#[tokio::test]
async fn bad_input_is_a_clear_error_not_a_hang() {
    let ttl = Duration::from_secs(30);
    let e = RedisLock::connect("127.0.0.1:6379", "x", ttl)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.starts_with("invalid redis url: \"127.0.0.1:6379\""),
        "{e}"
    );
    let e = RedisLock::connect("redis://127.0.0.1:1", "", ttl)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("invalid lock name: it is empty"), "{e}");
    let e = RedisLock::connect("redis://127.0.0.1:1", "x", Duration::ZERO)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("invalid ttl"), "{e}");
    let e = RedisLock::connect("redis://127.0.0.1:1", "x", Duration::from_secs(90_000))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("longer than the 24 h maximum"), "{e}");

    // Nothing listens on the port: the error comes quickly and names the address.
    let port = fencecheck_testkit::free_port().unwrap();
    let lock = RedisLock::connect(&format!("redis://127.0.0.1:{port}"), "x", ttl).unwrap();
    let t0 = Instant::now();
    let e = lock.try_acquire("a").await.unwrap_err();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    assert!(matches!(e, BackendError::Connect { .. }), "{e}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");

    let t0 = Instant::now();
    let e = PgFencedStore::connect(&format!("host=127.0.0.1 port={port} user=postgres"), "t")
        .await
        .err()
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(6),
        "took {:?}",
        t0.elapsed()
    );
    assert!(e.to_string().contains("cannot connect to postgres"), "{e}");
    let e = PgFencedStore::connect("host=127.0.0.1 port=notaport", "t")
        .await
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("invalid postgres url"), "{e}");
    let e = PgFencedStore::connect("host=127.0.0.1", "drop table")
        .await
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("invalid table name"), "{e}");
}

#[tokio::test]
async fn a_stopped_redis_server_times_out_within_the_bound() {
    let Some(redis) = started_or_skip("redis timeout", RedisServer::start(false)) else {
        return;
    };
    let options = RedisOptions {
        connect_timeout: Duration::from_millis(300),
        response_timeout: Duration::from_millis(300),
    };
    let lock = RedisLock::connect_with(&redis.url(), "t", Duration::from_secs(5), options).unwrap();
    granted(lock.try_acquire("a").await.unwrap());
    let pid = redis.pid().unwrap();
    fencecheck_testkit::signal(pid, libc::SIGSTOP).unwrap();
    let t0 = Instant::now();
    let e = lock.try_acquire("b").await.unwrap_err();
    let took = t0.elapsed();
    fencecheck_testkit::signal(pid, libc::SIGCONT).unwrap();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(e.to_string().contains("redis"), "{e}");
}

/// A call cut off by its caller's timeout (its future dropped while the server was stopped) does
/// not leave its reply for the next call: the lock opens a new connection, and the next acquire
/// reads its own grant.
#[tokio::test]
async fn a_call_cut_off_by_its_caller_leaves_no_reply_for_the_next() {
    let Some(redis) = started_or_skip("redis cut-off call", RedisServer::start(false)) else {
        return;
    };
    let lock = RedisLock::connect(&redis.url(), "cut", Duration::from_secs(5)).unwrap();
    assert!(lock.holder().await.unwrap().is_none());
    let pid = redis.pid().unwrap();
    fencecheck_testkit::signal(pid, libc::SIGSTOP).unwrap();
    let cut = tokio::time::timeout(Duration::from_millis(200), lock.holder()).await;
    fencecheck_testkit::signal(pid, libc::SIGCONT).unwrap();
    assert!(cut.is_err(), "answered while the server was stopped");
    let grant = granted(lock.try_acquire("a").await.unwrap());
    assert_eq!(grant.token.get(), 1);
    assert!(lock.release("a", grant.token).await.unwrap());
    assert!(lock.holder().await.unwrap().is_none());
}

/// A lock whose replies arrive `delay` after the server acted. With `stamp_on_reply` it
/// (wrongly) dates each grant from the reply's arrival: the classic keepalive bug.
struct SlowReplies<L> {
    inner: L,
    delay: Duration,
    stamp_on_reply: bool,
}

impl<L: LockService> LockService for SlowReplies<L> {
    fn ttl(&self) -> fencecheck::backend::Ttl {
        self.inner.ttl()
    }
    async fn try_acquire(&self, owner: &str) -> Result<Acquired, BackendError> {
        let r = self.inner.try_acquire(owner).await;
        tokio::time::sleep(self.delay).await;
        match r {
            Ok(Acquired::Granted(mut g)) if self.stamp_on_reply => {
                g.sent_at = Instant::now();
                Ok(Acquired::Granted(g))
            }
            other => other,
        }
    }
    async fn extend(&self, owner: &str, token: Token) -> Result<Option<Grant>, BackendError> {
        let r = self.inner.extend(owner, token).await;
        tokio::time::sleep(self.delay).await;
        match r {
            Ok(Some(mut g)) if self.stamp_on_reply => {
                g.sent_at = Instant::now();
                Ok(Some(g))
            }
            other => other,
        }
    }
    async fn holder(&self) -> Result<Option<fencecheck::backend::Holder>, BackendError> {
        self.inner.holder().await
    }
    async fn publish(&self, owner: &str, token: Token, value: &str) -> Result<bool, BackendError> {
        self.inner.publish(owner, token, value).await
    }
    async fn release(&self, owner: &str, token: Token) -> Result<bool, BackendError> {
        self.inner.release(owner, token).await
    }
}

/// The held lease's deadline never passes the server's end of the lease: the request's send
/// time plus the TTL. Returns whether that held.
async fn deadline_within_server_lease(stamp_on_reply: bool) -> bool {
    let ttl = Duration::from_millis(400);
    let lock = Arc::new(SlowReplies {
        inner: LocalLock::new(ttl).unwrap(),
        delay: Duration::from_millis(60),
        stamp_on_reply,
    });
    let sent = Instant::now();
    let grant = granted(lock.try_acquire("a").await.unwrap());
    let options = KeepaliveOptions {
        every: Some(Duration::from_secs(60)),
        drift: Some(Duration::from_millis(5)),
        grace: None,
    };
    let held = hold(Arc::clone(&lock), grant, options).expect("the schedule fits");
    held.deadline() <= sent + ttl
}

#[tokio::test]
async fn safe_deadline_counts_from_the_request_not_the_reply() {
    assert!(deadline_within_server_lease(false).await);
    // Negative control: dating the grant from the reply puts the deadline past the server's.
    assert!(!deadline_within_server_lease(true).await);
}

#[tokio::test]
async fn keepalive_renews_and_signals_loss() {
    let Some(redis) = started_or_skip("keepalive", RedisServer::start(false)) else {
        return;
    };
    let ttl = Duration::from_millis(300);
    let options = RedisOptions {
        connect_timeout: Duration::from_millis(200),
        response_timeout: Duration::from_millis(200),
    };
    let lock = Arc::new(RedisLock::connect_with(&redis.url(), "ka", ttl, options).unwrap());
    let grant = granted(lock.try_acquire("a").await.unwrap());
    let mut held =
        hold(Arc::clone(&lock), grant, KeepaliveOptions::default()).expect("the schedule fits");
    // Held across several TTLs by renewals alone.
    tokio::time::sleep(ttl * 4).await;
    assert!(!held.is_lost(), "{:?}", held.lost_reason());
    assert!(matches!(
        lock.try_acquire("b").await.unwrap(),
        Acquired::Busy { .. }
    ));
    let first_deadline = held.deadline();
    assert!(first_deadline > Instant::now());

    // The key disappears (as if expired and taken): the next renewal is refused -> Revoked.
    let (lock_key, _) = lock.keys();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(lock_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let t0 = Instant::now();
    let reason = tokio::time::timeout(ttl, held.lost())
        .await
        .expect("no loss signal");
    assert_eq!(reason, LostReason::Revoked);
    assert!(t0.elapsed() < ttl / 3 + Duration::from_millis(60));
    assert!(held.is_lost());

    // The server stops answering: renewals time out and the deadline ends the lease, no later
    // than the last successful request's send time + ttl.
    let grant = granted(lock.try_acquire("c").await.unwrap());
    let mut held =
        hold(Arc::clone(&lock), grant, KeepaliveOptions::default()).expect("the schedule fits");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let pid = redis.pid().unwrap();
    fencecheck_testkit::signal(pid, libc::SIGSTOP).unwrap();
    let deadline = held.deadline();
    let reason = tokio::time::timeout(ttl * 2, held.lost()).await;
    let at = Instant::now();
    fencecheck_testkit::signal(pid, libc::SIGCONT).unwrap();
    let reason = reason.expect("no loss signal while the server was stopped");
    assert!(
        matches!(reason, LostReason::DeadlinePassed { .. }),
        "{reason:?}"
    );
    assert!(at >= deadline, "signalled before the deadline");
    assert!(
        at < deadline + Duration::from_millis(100),
        "signalled {:?} late",
        at - deadline
    );
    held.release().await.ok();
}

/// try_acquire, retrying once if the first call after a server restart meets the dropped
/// connection.
async fn acquire_after_restart(lock: &RedisLock, owner: &str) -> Result<Acquired, BackendError> {
    match lock.try_acquire(owner).await {
        Err(BackendError::Dropped { .. }) => lock.try_acquire(owner).await,
        other => other,
    }
}

async fn three_grants(lock: &RedisLock, store: &PgFencedStore, key: &str) {
    for expect in 1..=3u64 {
        let g = granted(lock.try_acquire("w").await.unwrap());
        assert_eq!(g.token, Token::new(expect));
        assert!(store.write(key, g.token, b"v").await.unwrap().is_accepted());
        assert!(lock.release("w", g.token).await.unwrap());
    }
}

#[tokio::test]
async fn redis_restart_without_persistence_is_detected_and_fenced_storage_stays_safe() {
    let Some(mut redis) = started_or_skip("redis restart", RedisServer::start(false)) else {
        return;
    };
    let Some(pg) = started_or_skip("redis restart (postgres)", PgServer::start()) else {
        return;
    };
    let ttl = Duration::from_secs(5);
    let store = PgFencedStore::connect(&pg.url(), "restart").await.unwrap();
    let lock = RedisLock::connect(&redis.url(), "job", ttl).unwrap();
    three_grants(&lock, &store, "k").await;

    redis.restart().unwrap(); // kill -9, start again: the token counter is gone
                              // The client that saw token 3 refuses the regressed grant and leaves the lock free.
    match acquire_after_restart(&lock, "w").await {
        Err(BackendError::TokenRegressed { issued, seen, .. }) => {
            assert_eq!((issued, seen), (Token::new(1), Token::new(3)));
        }
        other => panic!("expected TokenRegressed, got {other:?}"),
    }
    // A fresh client has no memory of token 3 and is granted token 2 ...
    let fresh = RedisLock::connect(&redis.url(), "job", ttl).unwrap();
    let g = granted(fresh.try_acquire("x").await.unwrap());
    assert_eq!(g.token, Token::new(2));
    // ... which fenced storage refuses: safety holds, progress stops (the token-reset model).
    assert_eq!(store.write("k", g.token, b"x").await.unwrap(), stale(2, 3));
    assert!(fresh.release("x", g.token).await.unwrap());

    // Recovery: raise the counter to the storage's highest token.
    let highest = store.read("k").await.unwrap().unwrap().token;
    assert_eq!(
        lock.raise_token_floor(highest).await.unwrap(),
        Token::new(3)
    );
    let g = granted(lock.try_acquire("w").await.unwrap());
    assert_eq!(g.token, Token::new(4));
    assert!(store.write("k", g.token, b"w").await.unwrap().is_accepted());
}

#[tokio::test]
async fn redis_restart_with_appendfsync_always_keeps_tokens_monotonic() {
    let Some(mut redis) = started_or_skip("redis restart (aof)", RedisServer::start(true)) else {
        return;
    };
    let Some(pg) = started_or_skip("redis restart (aof, postgres)", PgServer::start()) else {
        return;
    };
    let store = PgFencedStore::connect(&pg.url(), "restart").await.unwrap();
    let lock = RedisLock::connect(&redis.url(), "job", Duration::from_secs(5)).unwrap();
    three_grants(&lock, &store, "k").await;
    redis.restart().unwrap();
    let g = granted(acquire_after_restart(&lock, "w").await.unwrap());
    assert_eq!(g.token, Token::new(4));
    assert!(store.write("k", g.token, b"w").await.unwrap().is_accepted());
}
