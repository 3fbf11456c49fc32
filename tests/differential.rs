//! Differential property test: random operation sequences through the protocol core (the
//! reference: `LeaseTable` + `Fence`) and through `RedisLock` + `RedisFencedStore` +
//! `PgFencedStore` on real servers must give the same answers, call by call.
#![cfg(feature = "backends")]

use fencecheck::backend::{
    Acquired, FencedStorage, LockService, PgFencedStore, RedisFencedStore, RedisLock, RedisOptions,
    WriteOutcome,
};
use fencecheck::protocol::{Acquire, Fence, FencePolicy, LeaseTable, Token};
use fencecheck_testkit::{started_or_skip, PgServer, RedisServer};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Clone, Debug)]
enum Op {
    Acquire(u8),
    Extend(u8),
    Release(u8),
    /// The current lease runs out (Redis: PEXPIRE 1 ms and wait; core: time moves to its end).
    Expire,
    /// Owner writes with its latest token.
    Write(u8),
    /// A write carrying an arbitrary token (stale or from nowhere).
    WriteToken(u64),
    /// Release with an arbitrary token.
    ReleaseToken(u8, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3u8).prop_map(Op::Acquire),
        2 => (0..3u8).prop_map(Op::Extend),
        2 => (0..3u8).prop_map(Op::Release),
        2 => Just(Op::Expire),
        3 => (0..3u8).prop_map(Op::Write),
        1 => (1..6u64).prop_map(Op::WriteToken),
        1 => ((0..3u8), (1..6u64)).prop_map(|(o, t)| Op::ReleaseToken(o, t)),
    ]
}

/// The core, as the reference every backend must match.
struct Reference {
    table: LeaseTable<String>,
    fence: Fence,
    now: u64,
}

const TTL_MS: u64 = 1_000_000;

struct Backends<'a> {
    lock: RedisLock,
    redis_store: &'a RedisFencedStore,
    pg_store: &'a PgFencedStore,
    key: String,
    conn: redis::aio::MultiplexedConnection,
}

fn owner(i: u8) -> String {
    format!("owner-{i}")
}

/// What one call answered, in a backend-neutral form.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    Granted(u64),
    Busy(String),
    Done(bool),
    Write(WriteOutcome),
    Skipped,
}

async fn run_ops(ops: &[Op], b: &Backends<'_>) -> Result<(), TestCaseError> {
    let mut r = Reference {
        table: LeaseTable::new(),
        fence: Fence::fenced(),
        now: 0,
    };
    let mut tokens: HashMap<u8, Token> = HashMap::new();
    for (step, op) in ops.iter().enumerate() {
        let (want, got) = match op {
            Op::Acquire(i) => {
                let want = match r.table.acquire(owner(*i), r.now, TTL_MS).unwrap() {
                    Acquire::Granted(l) => Answer::Granted(l.token.get()),
                    Acquire::Busy { holder, .. } => Answer::Busy(holder),
                };
                let got = match b.lock.try_acquire(&owner(*i)).await.unwrap() {
                    Acquired::Granted(g) => {
                        tokens.insert(*i, g.token);
                        Answer::Granted(g.token.get())
                    }
                    Acquired::Busy { holder, .. } => Answer::Busy(holder.unwrap_or_default()),
                };
                (want, got)
            }
            Op::Extend(i) => match tokens.get(i) {
                None => (Answer::Skipped, Answer::Skipped),
                Some(&t) => {
                    let want = r.table.extend(&owner(*i), t, r.now, TTL_MS).is_ok();
                    let got = b.lock.extend(&owner(*i), t).await.unwrap().is_some();
                    (Answer::Done(want), Answer::Done(got))
                }
            },
            Op::Release(i) | Op::ReleaseToken(i, _) => {
                let token = match op {
                    Op::ReleaseToken(_, t) => Some(Token::new(*t)),
                    _ => tokens.get(i).copied(),
                };
                match token {
                    None => (Answer::Skipped, Answer::Skipped),
                    Some(t) => {
                        // The contract: releasing an expired lease frees nothing -> false.
                        let now = r.now;
                        let want = r.table.release(&owner(*i), t).is_ok_and(|l| l.is_live(now));
                        let got = b.lock.release(&owner(*i), t).await.unwrap();
                        (Answer::Done(want), Answer::Done(got))
                    }
                }
            }
            Op::Expire => {
                if let Some(live) = r.table.holder(r.now) {
                    r.now = live.expires_at;
                    let mut conn = b.conn.clone();
                    let (lock_key, _) = b.lock.keys();
                    let _: i64 = redis::cmd("PEXPIRE")
                        .arg(lock_key)
                        .arg(1)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
                (Answer::Skipped, Answer::Skipped)
            }
            Op::Write(_) | Op::WriteToken(_) => {
                let token = match op {
                    Op::Write(i) => tokens.get(i).copied(),
                    Op::WriteToken(t) => Some(Token::new(*t)),
                    _ => unreachable!(),
                };
                match token {
                    None => (Answer::Skipped, Answer::Skipped),
                    Some(t) => {
                        let want = match r.fence.admit(t) {
                            Ok(()) => WriteOutcome::Accepted,
                            Err(stale) => WriteOutcome::Stale(stale),
                        };
                        let value = format!("step {step}");
                        let redis = b
                            .redis_store
                            .write(&b.key, t, value.as_bytes())
                            .await
                            .unwrap();
                        let pg = b.pg_store.write(&b.key, t, value.as_bytes()).await.unwrap();
                        prop_assert_eq!(&pg, &want, "postgres differs at step {}: {:?}", step, op);
                        (Answer::Write(want), Answer::Write(redis))
                    }
                }
            }
        };
        prop_assert_eq!(want, got, "redis differs at step {}: {:?}", step, op);
    }
    Ok(())
}

fn differential(
    redis: &RedisServer,
    pg: &PgServer,
    store_policy: FencePolicy,
    cases: u32,
) -> Result<(), String> {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (redis_store, pg_store, conn) = rt.block_on(async {
        let rs = RedisFencedStore::connect_with(
            &redis.url(),
            "diff",
            store_policy,
            RedisOptions::default(),
        )
        .unwrap();
        let ps = PgFencedStore::connect(&pg.url(), "diff").await.unwrap();
        let conn = redis::Client::open(redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        (rs, ps, conn)
    });
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..40), |ops| {
        let n = CASE.fetch_add(1, Ordering::Relaxed);
        let backends = Backends {
            lock: RedisLock::connect(
                &redis.url(),
                &format!("diff-{n}"),
                Duration::from_millis(TTL_MS),
            )
            .unwrap(),
            redis_store: &redis_store,
            pg_store: &pg_store,
            key: format!("key-{n}"),
            conn: conn.clone(),
        };
        rt.block_on(run_ops(&ops, &backends))
    });
    result.map_err(|e| e.to_string())
}

#[test]
fn redis_and_postgres_backends_answer_like_the_protocol_core() {
    let Some(redis) = started_or_skip("differential (redis)", RedisServer::start(false)) else {
        return;
    };
    let Some(pg) = started_or_skip("differential (postgres)", PgServer::start()) else {
        return;
    };
    if let Err(e) = differential(&redis, &pg, FencePolicy::Fenced, 128) {
        panic!("{e}");
    }
    // Negative control: a Redis store that accepts every write is told apart from the core.
    let caught = differential(&redis, &pg, FencePolicy::AcceptAll, 128)
        .expect_err("an accept-all store passed the differential test");
    assert!(caught.contains("redis differs"), "{caught}");
}
