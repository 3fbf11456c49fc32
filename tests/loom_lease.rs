//! loom: the in-process `LeaseLock` and `FencedStore` under every interleaving (up to a
//! preemption bound) of 2-3 threads, with and without a clock step that expires the lease.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release --target-dir target/loom --test loom_lease`
//!
//! Checked: (a) at most one unexpired holder at any instant; (b) tokens unique and strictly
//! increasing in grant order; (c) a stale writer never overwrites a newer token's value; (d) a
//! stale release or extend never frees or prolongs the current lease; (e) a try refused without
//! the mutex names a lease that was granted, token and expiry together, never a torn mix of two.
//! Each check runs the same code against a deliberately broken lock or store, which loom must
//! catch (`#[should_panic]`).
#![cfg(loom)]

use fencecheck::local::AcquireError;
use fencecheck::local::{Clock, FencedStore, LeaseLock, ManualClock};
use fencecheck::protocol::{Acquire, Lease, LeaseError, LeaseTable, StaleWrite, Token};
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::time::Duration;

/// The lease time-to-live, in nanoseconds of the manual clock; a clock step advances it by this.
const TTL: u64 = 10;

/// A refused try's answer: the live lease's token and expiry.
type Refusal = (Token, u64);

/// The operations the checks drive: the lock's raw API.
trait RawLock: Send + Sync + 'static {
    fn acquire(&self, owner: u8) -> Result<Lease<u8>, Refusal>;
    fn extend(&self, owner: u8, token: Token) -> Result<Lease<u8>, LeaseError>;
    fn release(&self, owner: u8, token: Token) -> Result<Lease<u8>, LeaseError>;
    fn holder(&self) -> Option<Lease<u8>>;
}

impl RawLock for LeaseLock<u8, std::sync::Arc<ManualClock>> {
    /// The guard API's try, whose refusals read the published lease without the mutex.
    fn acquire(&self, owner: u8) -> Result<Lease<u8>, Refusal> {
        match self.try_acquire(owner) {
            Ok(guard) => Ok(guard.into_lease()),
            Err(AcquireError::Busy { token, expires_at }) => Err((token, expires_at)),
            Err(e) => panic!("unexpected error in a small test: {e}"),
        }
    }
    fn extend(&self, owner: u8, token: Token) -> Result<Lease<u8>, LeaseError> {
        self.extend_raw(&owner, token)
    }
    fn release(&self, owner: u8, token: Token) -> Result<Lease<u8>, LeaseError> {
        self.release_raw(&owner, token)
    }
    fn holder(&self) -> Option<Lease<u8>> {
        LeaseLock::holder(self)
    }
}

/// Negative control: checks that the lease is free and takes the token by a load then a store,
/// each in its own step, instead of one atomic step under the lock.
struct CheckThenActLock {
    lease: Mutex<Option<Lease<u8>>>,
    last_token: AtomicU64,
    clock: std::sync::Arc<ManualClock>,
}

impl RawLock for CheckThenActLock {
    fn acquire(&self, owner: u8) -> Result<Lease<u8>, Refusal> {
        let now = self.clock.now();
        let live = self
            .lease
            .lock()
            .unwrap()
            .clone()
            .filter(|l| l.is_live(now));
        if let Some(live) = live {
            return Err((live.token, live.expires_at));
        }
        let token = self.last_token.load(Ordering::SeqCst) + 1;
        self.last_token.store(token, Ordering::SeqCst);
        let lease = Lease {
            owner,
            token: Token::new(token),
            expires_at: now + TTL,
        };
        *self.lease.lock().unwrap() = Some(lease.clone());
        Ok(lease)
    }
    fn extend(&self, _owner: u8, token: Token) -> Result<Lease<u8>, LeaseError> {
        Err(LeaseError::NotHolder {
            token,
            current: None,
        })
    }
    fn release(&self, owner: u8, token: Token) -> Result<Lease<u8>, LeaseError> {
        let mut lease = self.lease.lock().unwrap();
        match lease.as_ref() {
            Some(l) if l.owner == owner && l.token == token => Ok(lease.take().unwrap()),
            _ => Err(LeaseError::NotHolder {
                token,
                current: None,
            }),
        }
    }
    fn holder(&self) -> Option<Lease<u8>> {
        let now = self.clock.now();
        self.lease
            .lock()
            .unwrap()
            .clone()
            .filter(|l| l.is_live(now))
    }
}

/// Negative control for (d): releases whatever lease is there, without looking at the token.
struct TokenBlindReleaseLock(LeaseLock<u8, std::sync::Arc<ManualClock>>);

impl RawLock for TokenBlindReleaseLock {
    fn acquire(&self, owner: u8) -> Result<Lease<u8>, Refusal> {
        self.0.acquire(owner)
    }
    fn extend(&self, owner: u8, token: Token) -> Result<Lease<u8>, LeaseError> {
        self.0.extend(owner, token)
    }
    fn release(&self, _owner: u8, token: Token) -> Result<Lease<u8>, LeaseError> {
        match self.0.holder() {
            Some(l) => self.0.release(l.owner, l.token),
            None => Err(LeaseError::NotHolder {
                token,
                current: None,
            }),
        }
    }
    fn holder(&self) -> Option<Lease<u8>> {
        self.0.holder()
    }
}

/// Negative control for (e): publishes the lease's token and expiry in two stores and refuses
/// on two loads of them, with no sequence number to tell a torn read.
struct TornReadLock {
    table: Mutex<LeaseTable<u8>>,
    token: AtomicU64,
    expires_at: AtomicU64,
    clock: std::sync::Arc<ManualClock>,
}

impl RawLock for TornReadLock {
    fn acquire(&self, owner: u8) -> Result<Lease<u8>, Refusal> {
        let token = self.token.load(Ordering::SeqCst);
        let expires_at = self.expires_at.load(Ordering::SeqCst);
        if self.clock.now() < expires_at {
            return Err((Token::new(token), expires_at));
        }
        let mut table = self.table.lock().unwrap();
        match table.acquire(owner, self.clock.now(), TTL).unwrap() {
            Acquire::Granted(lease) => {
                self.token.store(lease.token.get(), Ordering::SeqCst);
                self.expires_at.store(lease.expires_at, Ordering::SeqCst);
                Ok(lease)
            }
            Acquire::Busy {
                token, expires_at, ..
            } => Err((token, expires_at)),
        }
    }
    fn extend(&self, owner: u8, token: Token) -> Result<Lease<u8>, LeaseError> {
        let mut table = self.table.lock().unwrap();
        let lease = table.extend(&owner, token, self.clock.now(), TTL)?;
        self.expires_at.store(lease.expires_at, Ordering::SeqCst);
        Ok(lease)
    }
    fn release(&self, owner: u8, token: Token) -> Result<Lease<u8>, LeaseError> {
        let mut table = self.table.lock().unwrap();
        let lease = table.release(&owner, token)?;
        self.expires_at.store(0, Ordering::SeqCst);
        Ok(lease)
    }
    fn holder(&self) -> Option<Lease<u8>> {
        self.table.lock().unwrap().holder(self.clock.now()).cloned()
    }
}

trait Store: Send + Sync + 'static {
    fn write(&self, token: Token, value: u8) -> Result<(), StaleWrite>;
    fn read(&self) -> Option<(u8, Token)>;
}

impl Store for FencedStore<u8> {
    fn write(&self, token: Token, value: u8) -> Result<(), StaleWrite> {
        FencedStore::write(self, token, value)
    }
    fn read(&self) -> Option<(u8, Token)> {
        FencedStore::read(self)
    }
}

/// Negative control: checks the fence, then writes, in two separate steps.
#[derive(Default)]
struct CheckThenWriteStore {
    highest: Mutex<Option<Token>>,
    value: Mutex<Option<(u8, Token)>>,
}

impl Store for CheckThenWriteStore {
    fn write(&self, token: Token, value: u8) -> Result<(), StaleWrite> {
        if let Some(highest) = *self.highest.lock().unwrap() {
            if token < highest {
                return Err(StaleWrite { token, highest });
            }
        }
        *self.value.lock().unwrap() = Some((value, token));
        let mut highest = self.highest.lock().unwrap();
        *highest = (*highest).max(Some(token));
        Ok(())
    }
    fn read(&self) -> Option<(u8, Token)> {
        *self.value.lock().unwrap()
    }
}

/// Ghost bookkeeping the checks read; never consulted by the code under test.
#[derive(Default)]
struct Ghost {
    /// Leases whose holders are between acquiring and releasing: (token, granted at, expires at).
    inside: Mutex<Vec<(Token, u64, u64)>>,
    /// The largest token whose holder has started releasing.
    released_max: AtomicU64,
    /// Every token granted.
    granted: Mutex<Vec<Token>>,
    /// Every write the store accepted.
    accepted: Mutex<Vec<Token>>,
    /// Every lease granted, as (token, expiry).
    leases: Mutex<Vec<Refusal>>,
    /// Every refusal's answer.
    refusals: Mutex<Vec<Refusal>>,
}

impl Ghost {
    /// (a) no two live leases overlap in time; (b) a lease that ended before this one began,
    /// or was released before this one was granted, has a smaller token.
    fn enter(&self, lease: &Lease<u8>, released_before_acquire: u64) {
        let granted_at = lease.expires_at - TTL;
        let mut inside = self.inside.lock().unwrap();
        for &(token, other_granted, other_expires) in inside.iter() {
            let disjoint = other_expires <= granted_at || lease.expires_at <= other_granted;
            assert!(
                disjoint,
                "violation (a): two unexpired holders: tokens {token} and {}",
                lease.token
            );
            if other_expires <= granted_at {
                assert!(
                    token < lease.token,
                    "violation (b): token {} granted after {token}",
                    lease.token
                );
            }
        }
        assert!(
            lease.token.get() > released_before_acquire,
            "violation (b): token {} granted after token {released_before_acquire} was released",
            lease.token
        );
        inside.push((lease.token, granted_at, lease.expires_at));
        self.granted.lock().unwrap().push(lease.token);
        self.leases
            .lock()
            .unwrap()
            .push((lease.token, lease.expires_at));
    }

    fn leave(&self, lease: &Lease<u8>) {
        self.released_max
            .fetch_max(lease.token.get(), Ordering::SeqCst);
        self.inside.lock().unwrap().retain(|e| e.0 != lease.token);
    }

    /// (b) tokens unique; (c) the stored value carries the highest accepted token; (e) every
    /// refusal named a granted lease.
    fn finish(&self, store: &impl Store) {
        let leases = self.leases.lock().unwrap();
        for (token, expires_at) in self.refusals.lock().unwrap().iter() {
            assert!(
                leases.contains(&(*token, *expires_at)),
                "violation (e): a refusal named lease {token} until {expires_at}, never granted \
                 (granted: {:?})",
                *leases
            );
        }
        let mut granted = self.granted.lock().unwrap().clone();
        let n = granted.len();
        granted.sort();
        granted.dedup();
        assert_eq!(granted.len(), n, "violation (b): a token was granted twice");
        let accepted = self.accepted.lock().unwrap();
        if let Some(max) = accepted.iter().max() {
            let (_, stored) = store.read().expect("a write was accepted");
            assert_eq!(
                stored, *max,
                "violation (c): a stale write overwrote token {max}'s value"
            );
        }
    }
}

/// Runs `f` under loom with the given preemption bound and reports how many interleavings it
/// explored.
fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let iterations = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = iterations.clone();
    let started = std::time::Instant::now();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    println!(
        "loom: {} interleavings at preemption bound {bound} in {:.2} s",
        iterations.load(std::sync::atomic::Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
}

/// `workers` threads each try once to take the lease, write, and release; with `clock_step`, one
/// more thread advances the clock past the ttl at any point, expiring whatever lease is live.
fn contend<L: RawLock, S: Store>(
    workers: u8,
    clock_step: bool,
    make: impl Fn(std::sync::Arc<ManualClock>) -> (L, S),
) {
    let clock = std::sync::Arc::new(ManualClock::new(0));
    let (lock, store) = make(clock.clone());
    let (lock, store, ghost) = (Arc::new(lock), Arc::new(store), Arc::new(Ghost::default()));
    let mut handles = Vec::new();
    for me in 0..workers {
        let (lock, store, ghost) = (lock.clone(), store.clone(), ghost.clone());
        handles.push(thread::spawn(move || {
            // Read before acquiring: any lease released by now was granted before ours.
            let released = ghost.released_max.load(Ordering::SeqCst);
            match lock.acquire(me) {
                Ok(lease) => {
                    ghost.enter(&lease, released);
                    match store.write(lease.token, me) {
                        Ok(()) => ghost.accepted.lock().unwrap().push(lease.token),
                        Err(stale) => {
                            assert!(stale.highest > stale.token, "violation (c): {stale}")
                        }
                    }
                    ghost.leave(&lease);
                    let _ = lock.release(me, lease.token);
                }
                Err(refusal) => ghost.refusals.lock().unwrap().push(refusal),
            }
        }));
    }
    if clock_step {
        let clock = clock.clone();
        handles.push(thread::spawn(move || clock.advance_nanos(TTL)));
    }
    for h in handles {
        h.join().unwrap();
    }
    ghost.finish(&*store);
}

fn real(
    clock: std::sync::Arc<ManualClock>,
) -> (LeaseLock<u8, std::sync::Arc<ManualClock>>, FencedStore<u8>) {
    let lock = LeaseLock::with_clock(Duration::from_nanos(TTL), clock).unwrap();
    (lock, FencedStore::new())
}

fn broken_lock(clock: std::sync::Arc<ManualClock>) -> (CheckThenActLock, FencedStore<u8>) {
    let lock = CheckThenActLock {
        lease: Mutex::new(None),
        last_token: AtomicU64::new(0),
        clock,
    };
    (lock, FencedStore::new())
}

fn torn_read_lock(clock: std::sync::Arc<ManualClock>) -> (TornReadLock, FencedStore<u8>) {
    let lock = TornReadLock {
        table: Mutex::new(LeaseTable::new()),
        token: AtomicU64::new(0),
        expires_at: AtomicU64::new(0),
        clock,
    };
    (lock, FencedStore::new())
}

fn broken_store(
    clock: std::sync::Arc<ManualClock>,
) -> (
    LeaseLock<u8, std::sync::Arc<ManualClock>>,
    CheckThenWriteStore,
) {
    (real(clock).0, CheckThenWriteStore::default())
}

/// (d): worker 0 holds the lease from the start; the clock expires it; worker 1 takes it; worker 0
/// then (in any order with the rest) tries to extend and release with its stale token. Worker 1's
/// lease must survive both, and the extend must fail.
fn stale_release_and_extend<L: RawLock>(make: impl Fn(std::sync::Arc<ManualClock>) -> L) {
    let clock = std::sync::Arc::new(ManualClock::new(0));
    let lock = Arc::new(make(clock.clone()));
    let first = lock.acquire(0).expect("a fresh lock is free");
    let stale = {
        let (lock, clock) = (lock.clone(), clock.clone());
        thread::spawn(move || {
            clock.advance_nanos(TTL);
            assert!(
                lock.extend(0, first.token).is_err(),
                "violation (d): an expired lease was extended"
            );
            let _ = lock.release(0, first.token);
        })
    };
    let second = {
        let lock = lock.clone();
        thread::spawn(move || {
            if let Ok(lease) = lock.acquire(1) {
                assert!(lease.token > first.token, "violation (b): token order");
                let holder = lock.holder().map(|l| l.token);
                assert_eq!(
                    holder,
                    Some(lease.token),
                    "violation (d): a stale release freed the new lease"
                );
                lock.release(1, lease.token)
                    .expect("violation (d): the new holder's release was refused");
            }
        })
    };
    stale.join().unwrap();
    second.join().unwrap();
}

/// (e) across an extend and a release: worker 0 holds lease 1 until `TTL`; it extends it by half
/// a ttl later and then releases it, while worker 1 tries. A refusal names lease 1 with its first
/// or its extended expiry; a grant carries token 2.
fn refusal_across_extend_and_release() {
    let clock = std::sync::Arc::new(ManualClock::new(0));
    let lock = Arc::new(real(clock.clone()).0);
    let first = lock.acquire(0).expect("a fresh lock is free");
    let holder = {
        let lock = lock.clone();
        thread::spawn(move || {
            clock.advance_nanos(TTL / 2);
            let extended = lock.extend(0, first.token).expect("the lease is live");
            assert_eq!(extended.expires_at, TTL + TTL / 2);
            lock.release(0, first.token).expect("the holder's release");
        })
    };
    let trier = thread::spawn(move || match lock.acquire(1) {
        Ok(lease) => assert_eq!(lease.token, Token::new(2), "violation (b): token order"),
        Err((token, expires_at)) => assert!(
            token == first.token && [TTL, TTL + TTL / 2].contains(&expires_at),
            "violation (e): a refusal named lease {token} until {expires_at}"
        ),
    });
    holder.join().unwrap();
    trier.join().unwrap();
}

#[test]
fn loom_two_workers_bound_3() {
    model(3, || contend(2, false, real));
}

#[test]
fn loom_two_workers_with_clock_step_bound_2() {
    model(2, || contend(2, true, real));
}

#[test]
fn loom_three_workers_bound_2() {
    model(2, || contend(3, false, real));
}

#[test]
fn loom_three_workers_with_clock_step_bound_1() {
    model(1, || contend(3, true, real));
}

#[test]
fn loom_stale_release_and_extend_bound_3() {
    model(3, || stale_release_and_extend(|clock| real(clock).0));
}

#[test]
fn loom_refusal_across_extend_and_release_bound_3() {
    model(3, refusal_across_extend_and_release);
}

#[test]
#[should_panic(expected = "violation (")]
fn loom_negative_control_check_then_act_lock_is_caught() {
    model(2, || contend(2, false, broken_lock));
}

#[test]
#[should_panic(expected = "violation (c)")]
fn loom_negative_control_check_then_write_store_is_caught() {
    model(2, || contend(2, true, broken_store));
}

#[test]
#[should_panic(expected = "violation (e)")]
fn loom_negative_control_torn_refusal_is_caught() {
    model(2, || contend(2, false, torn_read_lock));
}

#[test]
#[should_panic(expected = "violation (d)")]
fn loom_negative_control_token_blind_release_is_caught() {
    model(3, || {
        stale_release_and_extend(|clock| TokenBlindReleaseLock(real(clock).0))
    });
}
