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
    fn system_clock_is_monotonic() {
        let c = SystemClock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }
}
