//! `LeaseLock`: the protocol core's [`LeaseTable`] behind a mutex, with a clock and RAII guards.

use super::clock::{Clock, SystemClock};
use super::published::Published;
use crate::protocol::{Acquire, Lease, LeaseError, LeaseTable, Token};
use crate::sync::{Condvar, Mutex};
use std::fmt;
use std::time::Duration;

/// Why an acquire did not return a lease.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AcquireError {
    /// A live lease is held (by another owner, or by the caller: the lock is not reentrant).
    /// [`LeaseLock::holder`] names the owner; the refusal itself does not, because it is answered
    /// without taking the lock's mutex.
    #[error("lease {token} is held until {expires_at} ns on the lock's clock")]
    Busy {
        /// The live lease's fencing token.
        token: Token,
        /// When it expires, on the lock's clock, unless extended or released first.
        expires_at: u64,
    },
    /// `acquire_timeout` waited the whole timeout without the lease coming free.
    #[error("no lease within {timeout:?}")]
    TimedOut {
        /// The timeout that passed.
        timeout: Duration,
    },
    /// The lease table refused the operation (token space exhausted, clock overflow).
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

/// An in-process lease lock with fencing tokens.
///
/// Like a mutex, one owner at a time holds it; unlike a mutex, the holding ends by itself when
/// the lease's time-to-live passes, so a stuck holder cannot block the others forever. Every
/// grant carries a [`Token`] larger than every earlier grant's: pass it to a
/// [`FencedStore`](super::FencedStore) (or any storage that applies the fencing rule) and a
/// holder whose lease expired while it was paused cannot overwrite a newer holder's write.
///
/// The rules are the protocol core's [`LeaseTable`]; this type adds a mutex, a [`Clock`] and a
/// condition variable for waiting. After every change the table's lease is also published
/// (its token and expiry; a grant's under a sequence number), so that a [`try_acquire`](Self::try_acquire)
/// that finds it live is refused by reading alone: refusals neither take the mutex nor write
/// anything another thread reads.
///
/// # Examples
/// ```
/// use fencecheck::local::{FencedStore, LeaseLock};
/// use std::time::Duration;
///
/// let lock = LeaseLock::new(Duration::from_secs(30)).unwrap();
/// let store = FencedStore::new();
/// let guard = lock.try_acquire("worker-A").unwrap();
/// store.write(guard.token(), "written-by-A").unwrap();
/// assert!(lock.try_acquire("worker-B").is_err()); // busy while A's lease lives
/// drop(guard); // released on drop
/// let guard = lock.try_acquire("worker-B").unwrap();
/// assert_eq!(guard.token().get(), 2);
/// ```
///
/// # Differences from `std::sync::Mutex`
/// - Holding is bounded in time: check [`LeaseGuard::is_expired`] or fence your writes; a guard
///   that outlives its lease no longer excludes anyone.
/// - It is not reentrant: the holder asking again is told the lock is busy.
/// - It protects no data of its own; the data lives in fenced storage.
///
/// # Fairness
/// None: when a lease is freed, every waiter wakes and the first to take the mutex wins.
pub struct LeaseLock<O, C = SystemClock> {
    state: Mutex<State<O>>,
    /// The table's current lease, for tries that are refused without the mutex.
    published: Published,
    freed: Condvar,
    clock: C,
    ttl: u64,
}

#[derive(Debug)]
struct State<O> {
    table: LeaseTable<O>,
    /// Threads blocked in `acquire_timeout`; release notifies only when there are some.
    waiters: usize,
}

impl<O: fmt::Debug, C> fmt::Debug for LeaseLock<O, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseLock")
            .field("ttl_ns", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl<O: Clone + Eq + fmt::Debug> LeaseLock<O, SystemClock> {
    /// A lock on the system's monotonic clock whose leases last `ttl`.
    ///
    /// # Errors
    /// [`LeaseError::ZeroTtl`] for a zero ttl; [`LeaseError::DeadlineOverflow`] for a ttl longer
    /// than `u64::MAX` nanoseconds.
    pub fn new(ttl: Duration) -> Result<Self, LeaseError> {
        Self::with_clock(ttl, SystemClock::new())
    }
}

impl<O: Clone + Eq + fmt::Debug, C: Clock> LeaseLock<O, C> {
    /// A lock whose leases last `ttl` on `clock`.
    ///
    /// # Errors
    /// As [`LeaseLock::new`].
    pub fn with_clock(ttl: Duration, clock: C) -> Result<Self, LeaseError> {
        let ttl_ns = u64::try_from(ttl.as_nanos()).map_err(|_| LeaseError::DeadlineOverflow {
            now: 0,
            ttl: u64::MAX,
        })?;
        if ttl_ns == 0 {
            return Err(LeaseError::ZeroTtl);
        }
        Ok(LeaseLock {
            state: Mutex::new(State {
                table: LeaseTable::new(),
                waiters: 0,
            }),
            published: Published::default(),
            freed: Condvar::new(),
            clock,
            ttl: ttl_ns,
        })
    }

    /// The lease duration in nanoseconds of the lock's clock.
    pub fn ttl(&self) -> Duration {
        Duration::from_nanos(self.ttl)
    }

    /// The lock's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Takes the lease for `owner` if it is free (or expired), without waiting.
    ///
    /// # Errors
    /// [`AcquireError::Busy`] while another lease lives; [`AcquireError::Lease`] if the table
    /// refuses (token space exhausted).
    #[inline]
    pub fn try_acquire(&self, owner: O) -> Result<LeaseGuard<'_, O, C>, AcquireError> {
        if let Some(live) = self.live_published() {
            return Err(AcquireError::Busy {
                token: live.token,
                expires_at: live.expires_at,
            });
        }
        self.try_acquire_locked(owner)
    }

    /// The rest of `try_acquire`, under the mutex: the lease looked free, expired or changing.
    fn try_acquire_locked(&self, owner: O) -> Result<LeaseGuard<'_, O, C>, AcquireError> {
        match self.try_acquire_raw(owner)? {
            Acquire::Granted(lease) => Ok(LeaseGuard {
                lock: self,
                lease,
                held: true,
            }),
            Acquire::Busy {
                token, expires_at, ..
            } => Err(AcquireError::Busy { token, expires_at }),
        }
    }

    /// The published lease if it is live now: a refusal that reads and never writes. A lease
    /// published live was live when it was read (the clock is read after it and never goes back).
    #[inline]
    fn live_published(&self) -> Option<Lease<()>> {
        let published = self.published.read()?;
        published.is_live(self.clock.now()).then_some(published)
    }

    /// The table's acquire under the mutex, publishing a grant for the readers without it.
    fn acquire_locked(
        &self,
        state: &mut State<O>,
        owner: O,
        now: u64,
    ) -> Result<Acquire<O>, LeaseError> {
        let answer = state.table.acquire(owner, now, self.ttl)?;
        if let Acquire::Granted(lease) = &answer {
            self.published.grant(lease);
        }
        Ok(answer)
    }

    /// Waits up to `timeout` for the lease, waking when it is released or when the current
    /// lease's expiry comes, never spinning.
    ///
    /// # Errors
    /// [`AcquireError::TimedOut`] when the timeout passes first.
    pub fn acquire_timeout(
        &self,
        owner: O,
        timeout: Duration,
    ) -> Result<LeaseGuard<'_, O, C>, AcquireError> {
        let timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        let mut state = self.state.lock();
        let deadline = self.clock.now().saturating_add(timeout_ns);
        loop {
            let now = self.clock.now();
            match self.acquire_locked(&mut state, owner.clone(), now)? {
                Acquire::Granted(lease) => {
                    return Ok(LeaseGuard {
                        lock: self,
                        lease,
                        held: true,
                    })
                }
                Acquire::Busy { expires_at, .. } => {
                    if now >= deadline {
                        return Err(AcquireError::TimedOut { timeout });
                    }
                    // Sleep until the earlier of our deadline and the holder's expiry; a release
                    // wakes us sooner. The cap keeps a waiter on a manual clock re-reading it.
                    let nap = nap(now, deadline, expires_at);
                    state.waiters += 1;
                    state = self.freed.wait_timeout(state, nap);
                    state.waiters -= 1;
                }
            }
        }
    }

    /// How many threads are blocked in [`acquire_timeout`](Self::acquire_timeout) right now.
    pub fn waiting(&self) -> usize {
        self.state.lock().waiters
    }

    /// The live lease at this moment, if any (a snapshot: it may change at once).
    pub fn holder(&self) -> Option<Lease<O>> {
        let state = self.state.lock();
        state.table.holder(self.clock.now()).cloned()
    }

    /// The raw acquire: the table's answer, with no guard. Pair a grant with
    /// [`release_raw`](Self::release_raw).
    ///
    /// # Errors
    /// As [`LeaseTable::acquire`].
    pub fn try_acquire_raw(&self, owner: O) -> Result<Acquire<O>, LeaseError> {
        let mut state = self.state.lock();
        // The clock is read under the mutex so that grants are ordered by time as well as by
        // token: a later grant never sees an earlier `now`.
        let now = self.clock.now();
        self.acquire_locked(&mut state, owner, now)
    }

    /// Extends `owner`'s lease with `token` by the lock's ttl from now.
    ///
    /// # Errors
    /// [`LeaseError::NotHolder`] for a stale token or another owner; [`LeaseError::Expired`]
    /// when the lease already ran out.
    pub fn extend_raw(&self, owner: &O, token: Token) -> Result<Lease<O>, LeaseError> {
        let mut state = self.state.lock();
        let now = self.clock.now();
        let extended = state.table.extend(owner, token, now, self.ttl)?;
        self.published.extend(extended.expires_at);
        Ok(extended)
    }

    /// Releases `owner`'s lease with `token`, waking waiters.
    ///
    /// # Errors
    /// [`LeaseError::NotHolder`] for a stale token or another owner; nothing changes then.
    pub fn release_raw(&self, owner: &O, token: Token) -> Result<Lease<O>, LeaseError> {
        let mut state = self.state.lock();
        let released = state.table.release(owner, token)?;
        self.published.release();
        let wake = state.waiters > 0;
        drop(state);
        if wake {
            self.freed.notify_all();
        }
        Ok(released)
    }
}

/// The longest a waiter sleeps before re-reading the clock (a manual clock moves without
/// waking anyone).
const MAX_NAP: Duration = Duration::from_millis(200);

/// How long a waiter sleeps at `now`: until its own deadline or the holder's expiry, whichever
/// comes first, and never longer than [`MAX_NAP`]. A release wakes it sooner.
fn nap(now: u64, deadline: u64, expires_at: u64) -> Duration {
    Duration::from_nanos(deadline.min(expires_at).saturating_sub(now)).min(MAX_NAP)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    use crate::local::ManualClock;
    use std::sync::{mpsc, Arc};

    /// A try that finds the lease live answers while another thread holds the mutex: it never
    /// takes it. (Had it, it would wait for the holder, and the answer would not come.)
    #[test]
    fn a_refused_try_does_not_take_the_mutex() {
        let clock = Arc::new(ManualClock::new(0));
        let lock = Arc::new(LeaseLock::with_clock(Duration::from_nanos(100), clock).unwrap());
        let held = lock.try_acquire_raw(1u8).unwrap();
        assert!(matches!(held, Acquire::Granted(_)));
        let (answered, answer) = mpsc::channel();
        let mutex = lock.state.lock();
        let trier = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                let refusal = lock.try_acquire(2).map(|g| g.token()).unwrap_err();
                answered.send(refusal).unwrap();
            })
        };
        let refusal = answer.recv_timeout(Duration::from_secs(5));
        drop(mutex);
        trier.join().unwrap();
        assert_eq!(
            refusal.expect("the refused try waited for the mutex"),
            AcquireError::Busy {
                token: Token::new(1),
                expires_at: 100
            }
        );
    }

    #[test]
    fn a_waiter_naps_until_the_first_of_its_deadline_and_the_expiry() {
        assert_eq!(nap(100, 150, 130), Duration::from_nanos(30));
        assert_eq!(nap(100, 120, 130), Duration::from_nanos(20));
        assert_eq!(nap(100, 100, 130), Duration::ZERO);
        assert_eq!(nap(0, u64::MAX, u64::MAX), MAX_NAP);
    }
}

/// A held lease; released when dropped.
#[must_use = "if unused the lease is released at once"]
pub struct LeaseGuard<'a, O: Clone + Eq + fmt::Debug, C: Clock> {
    lock: &'a LeaseLock<O, C>,
    lease: Lease<O>,
    /// False once `release` ran, so that drop does not release twice.
    held: bool,
}

impl<O: Clone + Eq + fmt::Debug, C: Clock> fmt::Debug for LeaseGuard<'_, O, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("lease", &self.lease)
            .finish()
    }
}

impl<O: Clone + Eq + fmt::Debug, C: Clock> LeaseGuard<'_, O, C> {
    /// The fencing token of this lease: pass it with every write.
    pub fn token(&self) -> Token {
        self.lease.token
    }

    /// The owner this lease was granted to.
    pub fn owner(&self) -> &O {
        &self.lease.owner
    }

    /// When the lease expires, in nanoseconds on the lock's clock.
    pub fn expires_at(&self) -> u64 {
        self.lease.expires_at
    }

    /// Whether the lease has run out by the lock's clock. An expired guard still releases on
    /// drop, which frees nothing if the lease was granted to someone else meanwhile.
    pub fn is_expired(&self) -> bool {
        !self.lease.is_live(self.lock.clock.now())
    }

    /// Time left on the lease (zero once expired).
    pub fn remaining(&self) -> Duration {
        Duration::from_nanos(self.lease.expires_at.saturating_sub(self.lock.clock.now()))
    }

    /// Extends the lease by the lock's ttl from now.
    ///
    /// # Errors
    /// [`LeaseError::Expired`] if it already ran out, [`LeaseError::NotHolder`] if it was
    /// granted to someone else meanwhile. The guard then no longer holds anything.
    pub fn extend(&mut self) -> Result<(), LeaseError> {
        self.lease = self.lock.extend_raw(&self.lease.owner, self.lease.token)?;
        Ok(())
    }

    /// Gives the lease up to the caller without releasing it: it stays held until it expires or
    /// [`LeaseLock::release_raw`] frees it with its owner and token.
    pub fn into_lease(mut self) -> Lease<O> {
        self.held = false;
        self.lease.clone()
    }

    /// Releases the lease now and says whether it was still ours to release.
    ///
    /// # Errors
    /// [`LeaseError::NotHolder`] if the lease expired and was granted to someone else.
    pub fn release(mut self) -> Result<(), LeaseError> {
        self.held = false;
        self.lock
            .release_raw(&self.lease.owner, self.lease.token)
            .map(drop)
    }
}

impl<O: Clone + Eq + fmt::Debug, C: Clock> Drop for LeaseGuard<'_, O, C> {
    fn drop(&mut self) {
        if self.held {
            // A stale release is refused by the table and changes nothing; that is the point.
            let _ = self.lock.release_raw(&self.lease.owner, self.lease.token);
        }
    }
}
