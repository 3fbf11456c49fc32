//! Where the in-process lock reads time from.

use crate::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A monotonic source of time in nanoseconds since the clock's own origin.
///
/// The lock reads it once per acquire or extend and never on release.
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin; never decreases.
    fn now(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for crate::sync::Arc<C> {
    fn now(&self) -> u64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> u64 {
        (**self).now()
    }
}

/// The machine's monotonic clock (`std::time::Instant`), counted from the clock's creation.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> u64 {
        // Saturates after 584 years of uptime, which no lease outlives.
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The kernel's coarse monotonic clock (`CLOCK_MONOTONIC_COARSE` on Linux), counted from the
/// clock's creation: a read costs a few nanoseconds instead of the twenty or so of
/// [`SystemClock`], at the price of moving only once per kernel tick ([`resolution`]).
///
/// The lock's safety needs only a clock that never goes back, shared by the lock and its
/// holders: every grant, expiry and `is_expired` of one [`LeaseLock`](super::LeaseLock) is judged
/// on the same readings. What the tick changes is the length of a lease in real time, which lies
/// between `ttl - resolution` and `ttl + resolution`; pick it where leases last far longer than a
/// tick. Outside Linux it reads `std::time::Instant`.
///
/// [`resolution`]: CoarseClock::resolution
#[derive(Clone, Copy, Debug)]
pub struct CoarseClock {
    origin: u64,
}

impl CoarseClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        CoarseClock {
            origin: coarse::now(),
        }
    }

    /// The step between two different readings: the kernel's tick (1 to 10 ms), or one
    /// nanosecond where the clock is `Instant`.
    pub fn resolution() -> Duration {
        coarse::resolution()
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> u64 {
        coarse::now().saturating_sub(self.origin)
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod coarse {
    use std::time::Duration;

    fn nanos(ts: &libc::timespec) -> u64 {
        // Both fields are non-negative for a monotonic clock; a failed conversion cannot happen.
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
        secs.saturating_mul(1_000_000_000).saturating_add(nanos)
    }

    #[inline]
    pub(super) fn now() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call's duration, and
        // CLOCK_MONOTONIC_COARSE exists on every kernel since 2.6.32, so the call cannot fail.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        nanos(&ts)
    }

    pub(super) fn resolution() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: as in `now`.
        unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        Duration::from_nanos(nanos(&ts))
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
use instant_fallback as coarse;

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod instant_fallback {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    pub(super) fn now() -> u64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    pub(super) fn resolution() -> Duration {
        Duration::from_nanos(1)
    }
}

/// A clock that one background thread moves forward once per [`TICK`](TickClock::TICK): a read
/// is a single load of a word that changes a thousand times a second, so it costs about as much
/// as reading memory (a [`CoarseClock`] read asks the kernel's clock page).
///
/// The price: a reading lags real time by up to a tick plus however long the thread waits to be
/// scheduled. While the thread waits, time stands still for the lock and for its holders alike,
/// so leases last longer in real time but never overlap: as with any clock, the lock's safety
/// needs only that it never goes back and that the lock and its holders read the same one. The
/// thread is started by the first `TickClock::new` of the process and runs until it exits.
#[derive(Clone, Copy, Debug)]
pub struct TickClock {
    origin: u64,
}

impl TickClock {
    /// How often the thread moves the clock.
    pub const TICK: Duration = Duration::from_millis(1);

    /// A clock whose origin is now (give or take a tick).
    pub fn new() -> Self {
        tick::start();
        TickClock {
            origin: tick::now(),
        }
    }
}

impl Default for TickClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TickClock {
    #[inline]
    fn now(&self) -> u64 {
        tick::now().saturating_sub(self.origin)
    }
}

/// The process's one ticking word. It is `std`'s atomic even under loom, whose atomics cannot
/// be statics; no loom test reads this clock.
mod tick {
    use super::TickClock;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    use std::time::Instant;

    /// Nanoseconds since the process's first `TickClock`, as of the last tick.
    static NOW: AtomicU64 = AtomicU64::new(0);
    static STARTED: OnceLock<()> = OnceLock::new();

    /// The last tick's reading; 0 until the ticker has started (every `TickClock` starts it).
    #[inline]
    pub(super) fn now() -> u64 {
        // Acquire pairs with the ticker's Release (free on x86 and ARM's load-acquire).
        NOW.load(Ordering::Acquire)
    }

    /// Starts the ticker, once per process. A process that cannot start a thread cannot keep
    /// this clock: the panic says so where the clock is made.
    pub(super) fn start() {
        STARTED.get_or_init(spawn);
    }

    fn spawn() {
        let origin = Instant::now();
        std::thread::Builder::new()
            .name("fencecheck-tick".into())
            .spawn(move || loop {
                std::thread::sleep(TickClock::TICK);
                let elapsed = u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
                NOW.fetch_max(elapsed, Ordering::Release);
            })
            .expect("TickClock: the thread that moves the clock could not be started");
    }
}

/// A clock that moves only when told to: tests and demos use it to expire a lease at an exact
/// point. Under loom its reads and advances are scheduling points.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock that reads `start` nanoseconds.
    pub fn new(start: u64) -> Self {
        ManualClock {
            now: AtomicU64::new(start),
        }
    }

    /// Moves the clock forward by `by` (saturating at `u64::MAX` nanoseconds).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.advance_nanos(by);
    }

    /// Moves the clock forward by `by` nanoseconds (saturating).
    pub fn advance_nanos(&self, by: u64) {
        // Release pairs with the Acquire load in `now`: whoever sees the new time also sees
        // what the advancing thread did before advancing.
        let mut current = self.now.load(Ordering::Relaxed);
        loop {
            let next = current.saturating_add(by);
            match self
                .now
                .compare_exchange(current, next, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced_and_saturates() {
        let c = ManualClock::new(5);
        assert_eq!(c.now(), 5);
        c.advance(Duration::from_nanos(10));
        assert_eq!(c.now(), 15);
        c.advance(Duration::MAX);
        assert_eq!(c.now(), u64::MAX);
    }

    #[test]
    fn coarse_clock_starts_near_zero_and_keeps_pace_with_instant() {
        let res = CoarseClock::resolution();
        assert!(
            res > Duration::ZERO && res <= Duration::from_millis(20),
            "resolution {res:?}"
        );
        let clock = CoarseClock::new();
        let started = Instant::now();
        let first = clock.now();
        assert!(
            first <= res.as_nanos() as u64,
            "fresh clock reads {first} ns"
        );
        std::thread::sleep(Duration::from_millis(60));
        let coarse = Duration::from_nanos(clock.now() - first);
        let fine = started.elapsed();
        // The coarse reading lags by at most a tick at either end.
        assert!(
            coarse + 2 * res >= Duration::from_millis(60) && coarse <= fine + 2 * res,
            "coarse {coarse:?} against Instant {fine:?} (tick {res:?})"
        );
        let mut last = clock.now();
        for _ in 0..1000 {
            let next = clock.now();
            assert!(next >= last);
            last = next;
        }
    }

    #[test]
    fn tick_clock_keeps_pace_with_instant_a_tick_behind() {
        let clock = TickClock::new();
        let started = Instant::now();
        let first = clock.now();
        std::thread::sleep(Duration::from_millis(50));
        let mut last = clock.now();
        let fine = started.elapsed();
        let moved = Duration::from_nanos(last - first);
        // Up to a tick behind at either end, plus the ticker's scheduling on a busy machine.
        let slack = 10 * TickClock::TICK;
        assert!(
            moved + slack >= Duration::from_millis(50) && moved <= fine + slack,
            "ticked {moved:?} against Instant {fine:?}"
        );
        for _ in 0..1000 {
            let next = clock.now();
            assert!(next >= last);
            last = next;
        }
        assert!(TickClock::default().now() <= 2 * TickClock::TICK.as_nanos() as u64);
    }

    #[test]
    fn system_clock_is_monotonic() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
