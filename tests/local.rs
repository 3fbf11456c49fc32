//! The in-process lock's safe API: guards, expiry, waiting, and its error paths.

use fencecheck::local::{AcquireError, FencedStore, LeaseLock, ManualClock};
use fencecheck::protocol::{FencePolicy, LeaseError, Token};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn manual(ttl_ns: u64) -> (Arc<ManualClock>, LeaseLock<&'static str, Arc<ManualClock>>) {
    let clock = Arc::new(ManualClock::new(0));
    let lock = LeaseLock::with_clock(Duration::from_nanos(ttl_ns), clock.clone()).unwrap();
    (clock, lock)
}

#[test]
fn zero_and_enormous_ttls_are_refused() {
    assert_eq!(
        LeaseLock::<u8>::new(Duration::ZERO).unwrap_err(),
        LeaseError::ZeroTtl
    );
    assert!(matches!(
        LeaseLock::<u8>::new(Duration::MAX).unwrap_err(),
        LeaseError::DeadlineOverflow { .. }
    ));
}

#[test]
fn guard_releases_on_drop_and_tokens_increase() {
    let (_clock, lock) = manual(100);
    let a = lock.try_acquire("a").unwrap();
    assert_eq!(a.token(), Token::new(1));
    assert_eq!(a.owner(), &"a");
    assert_eq!(a.expires_at(), 100);
    assert_eq!(
        lock.try_acquire("b").unwrap_err(),
        AcquireError::Busy {
            token: Token::new(1),
            expires_at: 100
        }
    );
    drop(a);
    assert_eq!(lock.holder(), None);
    let b = lock.try_acquire("b").unwrap();
    assert_eq!(b.token(), Token::new(2));
    assert_eq!(b.release(), Ok(()));
    assert_eq!(lock.holder(), None);
}

#[test]
fn expiry_frees_the_lease_and_the_stale_guard_cannot_touch_the_new_one() {
    let (clock, lock) = manual(100);
    let mut a = lock.try_acquire("a").unwrap();
    clock.advance_nanos(60);
    assert!(!a.is_expired());
    assert_eq!(a.remaining(), Duration::from_nanos(40));
    a.extend().unwrap();
    assert_eq!(a.expires_at(), 160);
    clock.advance_nanos(100);
    assert!(a.is_expired());
    assert_eq!(a.remaining(), Duration::ZERO);
    let b = lock.try_acquire("b").unwrap();
    assert_eq!(
        a.extend(),
        Err(LeaseError::NotHolder {
            token: Token::new(1),
            current: Some(Token::new(2))
        })
    );
    // The stale guard's drop must not free b's lease.
    drop(a);
    assert_eq!(lock.holder().map(|l| l.token), Some(b.token()));
    let store = FencedStore::new();
    store.write(b.token(), "b").unwrap();
    let stale = store.write(Token::new(1), "a").unwrap_err();
    assert_eq!((stale.token, stale.highest), (Token::new(1), Token::new(2)));
    assert_eq!(store.read(), Some(("b", Token::new(2))));
    assert_eq!(store.highest(), Some(Token::new(2)));
}

#[test]
fn a_borrowed_clock_works_and_debug_output_names_the_lease() {
    let clock = ManualClock::new(0);
    let lock = LeaseLock::with_clock(Duration::from_nanos(100), &clock).unwrap();
    assert_eq!(lock.ttl(), Duration::from_nanos(100));
    let mut g = lock.try_acquire("a").unwrap();
    assert!(format!("{lock:?}").contains("ttl_ns: 100"));
    assert!(format!("{g:?}").contains("token: Token(1)"));
    clock.advance_nanos(100);
    assert!(g.is_expired());
    assert!(g.extend().is_err());
    let b = lock.try_acquire("b").unwrap();
    assert_eq!(b.token(), Token::new(2));
    // The stale guard's explicit release reports that it held nothing.
    assert_eq!(
        g.release(),
        Err(LeaseError::NotHolder {
            token: Token::new(1),
            current: Some(Token::new(2))
        })
    );
    assert_eq!(lock.holder().map(|l| l.owner), Some("b"));
}

#[test]
fn a_refusal_names_the_live_lease_as_extended_and_frees_at_its_expiry() {
    let (clock, lock) = manual(100);
    let mut a = lock.try_acquire("a").unwrap();
    clock.advance_nanos(60);
    a.extend().unwrap();
    let busy = |expires_at| AcquireError::Busy {
        token: Token::new(1),
        expires_at,
    };
    // Past the first expiry the extended lease still refuses, and says until when.
    clock.advance_nanos(50);
    assert_eq!(lock.try_acquire("b").unwrap_err(), busy(160));
    assert_eq!(
        lock.try_acquire("a").unwrap_err(),
        busy(160),
        "not reentrant"
    );
    assert_eq!(
        busy(160).to_string(),
        "lease 1 is held until 160 ns on the lock's clock"
    );
    clock.advance_nanos(50);
    assert_eq!(lock.try_acquire("b").unwrap().token(), Token::new(2));
}

#[test]
fn a_lease_taken_from_its_guard_stays_held_until_released_raw() {
    let (_clock, lock) = manual(100);
    let lease = lock.try_acquire("a").unwrap().into_lease();
    assert_eq!((lease.owner, lease.token), ("a", Token::new(1)));
    assert_eq!(lock.holder(), Some(lease.clone()));
    assert!(
        lock.try_acquire("b").is_err(),
        "the guard's drop released nothing"
    );
    lock.release_raw(&"a", lease.token).unwrap();
    assert_eq!(lock.try_acquire("b").unwrap().token(), Token::new(2));
}

#[test]
fn an_expired_guard_cannot_extend() {
    let (clock, lock) = manual(100);
    let mut a = lock.try_acquire("a").unwrap();
    clock.advance_nanos(100);
    assert_eq!(
        a.extend(),
        Err(LeaseError::Expired {
            token: Token::new(1),
            expired_at: 100
        })
    );
}

#[test]
fn acquire_timeout_gives_up_on_time() {
    let lock = LeaseLock::new(Duration::from_secs(60)).unwrap();
    let _held = lock.try_acquire(1).unwrap();
    let started = Instant::now();
    let err = lock
        .acquire_timeout(2, Duration::from_millis(50))
        .unwrap_err();
    let waited = started.elapsed();
    assert_eq!(
        err,
        AcquireError::TimedOut {
            timeout: Duration::from_millis(50)
        }
    );
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}

#[test]
fn acquire_timeout_wakes_on_release_and_on_expiry() {
    let lock = Arc::new(LeaseLock::new(Duration::from_secs(60)).unwrap());
    let held = lock.try_acquire(1).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let g = lock.acquire_timeout(2, Duration::from_secs(30));
            (g.map(|g| g.token()), Instant::now())
        });
        while lock.waiting() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let released = Instant::now();
        drop(held);
        let (token, woke) = waiter.join().unwrap();
        assert_eq!(token, Ok(Token::new(2)));
        // Woken by the release, not by its next nap ending (naps last up to 200 ms here).
        assert!(
            woke - released < Duration::from_millis(100),
            "{:?}",
            woke - released
        );
    });
    assert_eq!(lock.waiting(), 0);

    let short = LeaseLock::new(Duration::from_millis(30)).unwrap();
    let _paused = short.try_acquire(1).unwrap();
    let started = Instant::now();
    let g = short.acquire_timeout(2, Duration::from_secs(30)).unwrap();
    assert_eq!(g.token(), Token::new(2));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn accept_all_store_lets_the_stale_write_in() {
    let store = FencedStore::with_policy(FencePolicy::AcceptAll);
    store.write(Token::new(2), "b").unwrap();
    store.write(Token::new(1), "a").unwrap();
    assert_eq!(store.read(), Some(("a", Token::new(1))));
}
