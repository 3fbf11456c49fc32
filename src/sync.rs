//! The one switch between the production primitives and `loom::sync`.
//!
//! Every atomic, mutex and condition variable in the library comes from here, so that a build
//! with `RUSTFLAGS="--cfg loom"` runs the same code under loom's scheduler. Outside loom the
//! mutex and condition variable are `parking_lot`'s (smaller and faster uncontended than
//! `std`'s). The mutex does not poison: a panic while holding it leaves the protected state as
//! the last completed operation wrote it, which for the lease table and the fence is always a
//! consistent state.

#[cfg(loom)]
use loom::sync as imp;
#[cfg(not(loom))]
use parking_lot as imp;

/// Atomics: `std::sync::atomic` or `loom::sync::atomic`.
pub mod atomic {
    #[cfg(loom)]
    pub use loom::sync::atomic::{fence, AtomicU64, Ordering};
    #[cfg(not(loom))]
    pub use std::sync::atomic::{fence, AtomicU64, Ordering};
}

pub use imp::MutexGuard;

/// Shared ownership. Always `std`'s, also under loom: it only moves a clock between threads, and
/// tests share a `ManualClock` through it.
pub use std::sync::Arc;

/// A mutual-exclusion lock whose `lock` never reports poisoning.
#[derive(Debug, Default)]
pub struct Mutex<T>(imp::Mutex<T>);

impl<T> Mutex<T> {
    /// A new unlocked mutex holding `value`.
    pub fn new(value: T) -> Self {
        Mutex(imp::Mutex::new(value))
    }

    /// Locks the mutex, blocking until it is free.
    #[cfg(not(loom))]
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock()
    }

    /// Locks the mutex, blocking until it is free.
    #[cfg(loom)]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A condition variable paired with [`Mutex`].
#[derive(Debug, Default)]
pub struct Condvar(imp::Condvar);

impl Condvar {
    /// A new condition variable.
    pub fn new() -> Self {
        Condvar(imp::Condvar::new())
    }

    /// Waits for a notification or until `timeout` passes.
    #[cfg(not(loom))]
    pub fn wait_timeout<'a, T>(
        &self,
        mut guard: MutexGuard<'a, T>,
        timeout: std::time::Duration,
    ) -> MutexGuard<'a, T> {
        self.0.wait_for(&mut guard, timeout);
        guard
    }

    /// Waits for a notification (loom has no time, so the timeout is not modelled).
    #[cfg(loom)]
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: std::time::Duration,
    ) -> MutexGuard<'a, T> {
        match self.0.wait_timeout(guard, timeout) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        self.0.notify_all();
    }
}
