//! Trace validation of real runs: pause trials on the in-process lock and on Redis, recorded by
//! the library's `Recorder` and replayed through the model's lock service and storage
//! (`check::trace::validate`). The controls: Redis locks running mutated acquire scripts (one
//! grants while a live lease exists, one hands out a repeated token) and unfenced storage judged
//! as fenced; the same validator rejects each of their traces.
#![cfg(feature = "backends")]

use fencecheck::backend::{
    Acquired, BackendError, FencedStorage, Grant, Holder, LocalFencedMap, LocalLock, LockService,
    Recorder, RedisLock, Ttl,
};
use fencecheck::check::trace::{validate, Replay, TraceError};
use fencecheck::protocol::{FencePolicy, Token, Trace};
use fencecheck_testkit::{started_or_skip, RedisServer};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One pause trial: A takes the lease and writes, stops for the lease's TTL plus `overshoot`
/// without renewing, B takes the lease and writes, A writes late. Returns the trace and whether
/// A's late write was stored.
async fn pause_trial<L: LockService, S: FencedStorage>(
    lock: L,
    store: Arc<S>,
    key: &str,
    overshoot: Duration,
) -> (Trace, bool) {
    let recorder = Recorder::new();
    let lock = recorder.lock(lock);
    let (a_store, b_store) = (
        recorder.store(store.clone(), "A"),
        recorder.store(store, "B"),
    );
    let ttl = lock.ttl().granted();
    let a = lock.acquire("A", ttl).await.unwrap().expect("A is granted");
    assert!(a_store
        .write(key, a.token, b"a1")
        .await
        .unwrap()
        .is_accepted());
    // While A's lease is live, B is told it is busy.
    assert!(matches!(
        lock.try_acquire("B").await.unwrap(),
        Acquired::Busy { .. }
    ));
    tokio::time::sleep(ttl + overshoot).await; // A is paused: no renewal, no write
    let b = lock.acquire("B", ttl).await.unwrap().expect("B is granted");
    assert!(b_store
        .write(key, b.token, b"b1")
        .await
        .unwrap()
        .is_accepted());
    let late = a_store.write(key, a.token, b"a2").await.unwrap();
    assert!(lock.release("B", b.token).await.unwrap());
    (recorder.trace(), late.is_accepted())
}

fn validated(trace: &Trace, replay: &Replay, what: &str) -> usize {
    match validate(trace, replay) {
        Ok(v) => v.events,
        Err(e) => panic!("{what}: {e}"),
    }
}

#[tokio::test]
async fn in_process_pause_trials_are_explained_by_the_model() {
    let ttl = Duration::from_millis(60);
    let replay = Replay::new(ttl, FencePolicy::Fenced);
    let mut events = 0;
    for i in 0..20u64 {
        let lock = LocalLock::new(ttl).unwrap();
        let store = Arc::new(LocalFencedMap::new(FencePolicy::Fenced));
        let overshoot = Duration::from_millis(5 + i * 3);
        let (trace, stale) = pause_trial(lock, store, "k", overshoot).await;
        assert!(!stale, "trial {i}: fenced storage took the late write");
        events += validated(&trace, &replay, &format!("in-process trial {i}"));
    }
    eprintln!("in-process lock: 20 pause trials, {events} events, every trace explained");

    // Control: the late write lands on unfenced storage. The trace is one the model explains
    // with unfenced storage and not with fenced storage.
    let lock = LocalLock::new(ttl).unwrap();
    let store = Arc::new(LocalFencedMap::new(FencePolicy::AcceptAll));
    let (trace, stale) = pause_trial(lock, store, "k", Duration::from_millis(5)).await;
    assert!(stale);
    validated(
        &trace,
        &Replay::new(ttl, FencePolicy::AcceptAll),
        "unfenced",
    );
    let err = validate(&trace, &replay).unwrap_err();
    assert!(
        matches!(err, TraceError::Unexplained { ref reason, .. } if reason.contains("rejected")),
        "{err}"
    );
}

/// A Redis lock whose acquire runs a mutated script (the lease's keys, renewal and release are
/// the real lock's).
struct MutantRedis {
    real: RedisLock,
    conn: redis::aio::MultiplexedConnection,
    script: redis::Script,
}

impl MutantRedis {
    async fn new(url: &str, name: &str, ttl: Duration, from: &str, to: &str) -> MutantRedis {
        let acquire = fencecheck::backend::redis_scripts::ACQUIRE;
        assert!(
            acquire.contains(from),
            "the mutation must change the script"
        );
        let client = redis::Client::open(url).unwrap();
        MutantRedis {
            real: RedisLock::connect(url, name, ttl).unwrap(),
            conn: client.get_multiplexed_async_connection().await.unwrap(),
            script: redis::Script::new(&acquire.replace(from, to)),
        }
    }
}

impl LockService for MutantRedis {
    fn ttl(&self) -> Ttl {
        self.real.ttl()
    }

    async fn try_acquire(&self, owner: &str) -> Result<Acquired, BackendError> {
        let (lock, counter) = self.real.keys();
        let ttl_ms = self.ttl().granted().as_millis() as u64;
        let sent_at = Instant::now();
        let (granted, token, _): (i64, String, i64) = self
            .script
            .key(lock)
            .key(counter)
            .arg(owner)
            .arg(ttl_ms)
            .arg(0)
            .invoke_async(&mut self.conn.clone())
            .await
            .unwrap();
        if granted != 1 {
            return Ok(Acquired::Busy {
                holder: None,
                remaining: None,
            });
        }
        Ok(Acquired::Granted(Grant {
            token: Token::new(token.parse().unwrap()),
            owner: owner.into(),
            ttl: self.ttl().granted(),
            sent_at,
        }))
    }

    async fn extend(&self, owner: &str, token: Token) -> Result<Option<Grant>, BackendError> {
        self.real.extend(owner, token).await
    }

    async fn publish(&self, owner: &str, token: Token, value: &str) -> Result<bool, BackendError> {
        self.real.publish(owner, token, value).await
    }

    async fn holder(&self) -> Result<Option<Holder>, BackendError> {
        self.real.holder().await
    }

    async fn release(&self, owner: &str, token: Token) -> Result<bool, BackendError> {
        self.real.release(owner, token).await
    }
}

/// Two clients race for a lease: A acquires, B tries while A's lease is live, then (after the
/// lease ran out) B acquires. The trace of what they saw.
async fn race<L: LockService>(lock: L) -> Trace {
    let recorder = Recorder::new();
    let lock = recorder.lock(lock);
    let ttl = lock.ttl().granted();
    lock.try_acquire("A").await.unwrap();
    lock.try_acquire("B").await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(20)).await;
    lock.acquire("B", ttl).await.unwrap();
    recorder.trace()
}

#[tokio::test]
async fn redis_pause_trials_validate_and_mutant_scripts_are_rejected() {
    let Some(redis) = started_or_skip("trace validation (redis)", RedisServer::start(false)) else {
        return;
    };
    let url = redis.url();
    let ttl = Duration::from_millis(150);
    let replay = Replay::new(ttl, FencePolicy::Fenced);
    let store = Arc::new(LocalFencedMap::new(FencePolicy::Fenced));
    let mut events = 0;
    for i in 0..20u64 {
        let lock = RedisLock::connect(&url, &format!("trace-{i}"), ttl).unwrap();
        let key = format!("k{i}");
        let overshoot = Duration::from_millis(10 + i * 7);
        let (trace, stale) = pause_trial(lock, store.clone(), &key, overshoot).await;
        assert!(!stale, "trial {i}");
        events += validated(&trace, &replay, &format!("redis trial {i}"));
    }
    eprintln!("redis lock: 20 pause trials, {events} events, every trace explained");

    // The real script's race is explained.
    let real = RedisLock::connect(&url, "race-real", ttl).unwrap();
    validated(&race(real).await, &replay, "real script");

    // Control 1: a script that grants while a live lease exists (the check of the held key
    // removed). B's grant comes while A's lease is live.
    let blind = MutantRedis::new(
        &url,
        "race-blind",
        ttl,
        "if held then return {0, held, redis.call('PTTL', KEYS[1])} end",
        "",
    )
    .await;
    let trace = race(blind).await;
    match validate(&trace, &replay) {
        Err(TraceError::Unexplained { index, reason, .. }) => {
            assert_eq!(index, 3, "B's first grant\n{trace}");
            assert!(reason.ends_with("it answers busy"), "{reason}");
            eprintln!(
                "control (grants while held): rejected at event {}: {reason}",
                index + 1
            );
            eprintln!("{}", validate(&trace, &replay).unwrap_err());
        }
        other => panic!("a grant during a live lease passed: {other:?}\n{trace}"),
    }

    // Control 2: a script that reads the counter instead of incrementing it: every grant
    // carries the same token.
    let repeat = MutantRedis::new(
        &url,
        "race-repeat",
        ttl,
        "local t = redis.call('INCR', KEYS[2])",
        "local t = tonumber(redis.call('GET', KEYS[2]) or '7')",
    )
    .await;
    let trace = race(repeat).await;
    match validate(&trace, &replay) {
        Err(TraceError::Unexplained { index, reason, .. }) => {
            assert!(
                reason.contains("is not larger than the last grant's"),
                "{reason}"
            );
            eprintln!(
                "control (repeated token): rejected at event {}: {reason}",
                index + 1
            );
        }
        other => panic!("a repeated token passed: {other:?}\n{trace}"),
    }
}
