//! The one retry policy of the backends: how long to wait before trying again, named for what is
//! being waited on, and never past a deadline.
//!
//! Every loop in `backend/` and `fencecheck run` that tries again (polling a busy lock, waiting in
//! a queue, a request sent to another member, a reconnect, riding out an outage) takes its pauses
//! from a [`Backoff`] made from one of the policies below, so the constants live here and nowhere
//! else.

use std::time::{Duration, Instant};

/// A delay that starts at `first` and doubles after each pause up to `max` (constant when
/// `first == max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

/// Polling a lock someone else holds: 5 ms doubling to 200 ms.
pub const POLL_BUSY: Backoff =
    Backoff::doubling(Duration::from_millis(5), Duration::from_millis(200));

/// Waiting in a queue for the predecessor to leave (etcd, whose recipe has no watch here): 10 ms
/// doubling to 100 ms.
pub const WAIT_IN_LINE: Backoff =
    Backoff::doubling(Duration::from_millis(10), Duration::from_millis(100));

/// Sending a request again after a lost connection or on another member: 20 ms each time.
pub const RESEND: Backoff = Backoff::constant(Duration::from_millis(20));

/// Connecting again while no server accepts the connection yet: 50 ms each time.
pub const RECONNECT: Backoff = Backoff::constant(Duration::from_millis(50));

/// Watching for a new leader: 20 ms each time.
pub const WATCH: Backoff = Backoff::constant(Duration::from_millis(20));

/// Riding out an outage of the lock service (`fencecheck run --wait`): 50 ms doubling to 1 s, so a
/// long outage costs one request a second.
pub const RIDE_OUT: Backoff = Backoff::doubling(Duration::from_millis(50), Duration::from_secs(1));

impl Backoff {
    /// Starts at `first`, doubles after each pause, never above `max`.
    pub const fn doubling(first: Duration, max: Duration) -> Self {
        Backoff { next: first, max }
    }

    /// The same pause every time.
    pub const fn constant(pause: Duration) -> Self {
        Backoff {
            next: pause,
            max: pause,
        }
    }

    /// The longest pause it makes.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The next pause, cut short at `deadline` (when there is one), and advances the policy.
    /// `None` when the deadline has passed at `now`: give up instead of trying again.
    pub fn next_pause(&mut self, now: Instant, deadline: Option<Instant>) -> Option<Duration> {
        let left = match deadline {
            Some(d) if d <= now => return None,
            Some(d) => d - now,
            None => Duration::MAX,
        };
        let pause = self.next.min(self.max).min(left);
        self.next = self.next.saturating_mul(2).min(self.max);
        Some(pause)
    }

    /// Sleeps for the next pause; `false` (without sleeping) when the deadline has passed.
    pub async fn pause(&mut self, deadline: Option<Instant>) -> bool {
        match self.next_pause(Instant::now(), deadline) {
            Some(d) => {
                tokio::time::sleep(d).await;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn doubles_up_to_the_cap() {
        let now = Instant::now();
        let mut b = POLL_BUSY;
        let pauses: Vec<_> = (0..8).map(|_| b.next_pause(now, None).unwrap()).collect();
        assert_eq!(
            pauses,
            [
                ms(5),
                ms(10),
                ms(20),
                ms(40),
                ms(80),
                ms(160),
                ms(200),
                ms(200)
            ]
        );
        let mut c = RESEND;
        assert_eq!(c.next_pause(now, None), Some(ms(20)));
        assert_eq!(c.next_pause(now, None), Some(ms(20)));
    }

    #[test]
    fn never_sleeps_past_the_deadline() {
        let now = Instant::now();
        let mut b = RIDE_OUT;
        assert_eq!(b.next_pause(now, Some(now + ms(30))), Some(ms(30)));
        assert_eq!(b.next_pause(now, Some(now)), None);
        assert_eq!(b.next_pause(now + ms(1), Some(now)), None);
        // A pause cut short still advances the policy.
        assert_eq!(b.next_pause(now, None), Some(ms(100)));
    }
}
