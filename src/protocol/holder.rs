//! One held lease and the work it guards: when the work may start, when it must be asked to stop,
//! when it must be killed. Sans-IO: time is an input (a [`Duration`] since any fixed origin the
//! caller keeps, such as the process's first monotonic reading) and the answers are what to do
//! next; `fencecheck run` and the library's keepalive drive it with real timers and signals.
//!
//! The rules:
//! - the **deadline** is the last successful request's *send* time + the TTL the server granted −
//!   a drift margin (the caller computes it; it only ever moves forward);
//! - work **starts** only with more than the grace period left before the deadline: a grant whose
//!   deadline has passed, or is about to, runs nothing;
//! - the **gentle stop** (SIGTERM) comes at deadline − grace and the **force stop** (SIGKILL) at
//!   the deadline, so the whole stop happens inside the lease; a grace that does not fit in
//!   TTL − drift is refused up front;
//! - a lease the server says is gone (revoked, taken) stops the work gently at once and forcibly
//!   at the earlier of the deadline and now + grace.

use std::time::Duration;

/// Why a stop schedule was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The drift margin leaves no time in the lease.
    #[error("drift {drift:?} is not shorter than the lease's TTL {ttl:?}: no safe window is left")]
    DriftTooLarge {
        /// The TTL.
        ttl: Duration,
        /// The drift margin.
        drift: Duration,
    },
    /// The grace period does not fit in the lease's safe window.
    #[error(
        "grace {grace:?} does not fit in the lease's safe window of {window:?} (TTL minus drift): \
         the command would be stopped after the lease ends; use a shorter grace or a longer TTL"
    )]
    GraceTooLong {
        /// The grace period.
        grace: Duration,
        /// TTL − drift.
        window: Duration,
    },
}

/// The fixed part of a holder's schedule: the margins, checked against the TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StopPolicy {
    grace: Duration,
}

impl StopPolicy {
    /// A schedule for a lease of `ttl` with clock-drift margin `drift` and `grace` between the
    /// gentle and the forced stop. Refused when `drift >= ttl` or `grace >= ttl - drift`.
    pub fn new(ttl: Duration, drift: Duration, grace: Duration) -> Result<Self, ScheduleError> {
        let window = ttl
            .checked_sub(drift)
            .filter(|w| !w.is_zero())
            .ok_or(ScheduleError::DriftTooLarge { ttl, drift })?;
        if grace >= window {
            return Err(ScheduleError::GraceTooLong { grace, window });
        }
        Ok(StopPolicy { grace })
    }

    /// The grace period.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Whether work may start at `now` under a lease whose safe deadline is `deadline`: more than
    /// the grace period must be left, so the stop schedule fits before the deadline.
    pub fn may_start(&self, now: Duration, deadline: Duration) -> bool {
        deadline
            .checked_sub(now)
            .is_some_and(|left| left > self.grace)
    }

    /// The holder of a lease with safe deadline `deadline` whose work has started.
    pub fn holder(&self, deadline: Duration) -> Holder {
        Holder {
            grace: self.grace,
            deadline,
            force_at: None,
            phase: Phase::Working,
        }
    }
}

/// Where the work is in its stop schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Running, inside the lease.
    Working,
    /// Asked to stop (SIGTERM sent); killed at the force-stop time if still running.
    Stopping,
    /// Killed (SIGKILL sent).
    Killed,
}

/// What the supervisor must do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Nothing until `until` (or an earlier input).
    WaitUntil(Duration),
    /// Ask the work to stop (SIGTERM to its process group), then call [`Holder::tick`] again.
    StopGently,
    /// Kill the work (SIGKILL to its process group).
    ForceStop,
    /// Everything has been sent; wait for the work to exit.
    Done,
}

/// One held lease and the work it guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    grace: Duration,
    deadline: Duration,
    /// Set when the server said the lease is gone: the force stop comes no later than this.
    force_at: Option<Duration>,
    phase: Phase,
}

impl Holder {
    /// The safe deadline now.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The phase of the stop schedule.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// A renewal sent before `deadline - ttl + drift` succeeded: the safe deadline moves to
    /// `deadline` (never backwards). Once the work is being stopped, a renewal does not call the
    /// stop off: the signal has been sent.
    pub fn renewed(&mut self, deadline: Duration) {
        if self.phase == Phase::Working && self.force_at.is_none() {
            self.deadline = self.deadline.max(deadline);
        }
    }

    /// The server says the lease is gone (revoked, expired, taken) at `now`.
    pub fn revoked(&mut self, now: Duration) {
        let force = self.deadline.min(now + self.grace);
        self.force_at = Some(self.force_at.map_or(force, |f| f.min(force)));
    }

    /// The time by which the work must have been killed.
    pub fn force_stop_at(&self) -> Duration {
        self.force_at
            .map_or(self.deadline, |f| f.min(self.deadline))
    }

    /// The time of the gentle stop.
    pub fn stop_at(&self) -> Duration {
        match self.force_at {
            // Revoked: at once.
            Some(_) => Duration::ZERO,
            None => self.deadline.saturating_sub(self.grace),
        }
    }

    /// What to do at `now`.
    pub fn tick(&mut self, now: Duration) -> Step {
        match self.phase {
            Phase::Working if now >= self.stop_at() => {
                self.phase = Phase::Stopping;
                Step::StopGently
            }
            Phase::Working => Step::WaitUntil(self.stop_at()),
            Phase::Stopping if now >= self.force_stop_at() => {
                self.phase = Phase::Killed;
                Step::ForceStop
            }
            Phase::Stopping => Step::WaitUntil(self.force_stop_at()),
            Phase::Killed => Step::Done,
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
    fn margins_are_checked_against_the_ttl() {
        assert_eq!(
            StopPolicy::new(ms(100), ms(100), ms(0)),
            Err(ScheduleError::DriftTooLarge {
                ttl: ms(100),
                drift: ms(100)
            })
        );
        assert_eq!(
            StopPolicy::new(ms(100), ms(10), ms(90)),
            Err(ScheduleError::GraceTooLong {
                grace: ms(90),
                window: ms(90)
            })
        );
        assert!(
            StopPolicy::new(ms(100), ms(10), ms(95)).is_err(),
            "longer than the window"
        );
        assert_eq!(
            StopPolicy::new(ms(100), ms(10), ms(89)).unwrap().grace(),
            ms(89)
        );
    }

    #[test]
    fn work_starts_only_with_more_than_the_grace_left() {
        let p = StopPolicy::new(ms(1000), ms(10), ms(200)).unwrap();
        assert!(p.may_start(ms(0), ms(990)));
        assert!(p.may_start(ms(789), ms(990)));
        assert!(!p.may_start(ms(790), ms(990)), "exactly the grace left");
        assert!(!p.may_start(ms(2000), ms(990)), "dead on arrival");
    }

    #[test]
    fn the_whole_stop_happens_inside_the_lease() {
        let p = StopPolicy::new(ms(1000), ms(10), ms(200)).unwrap();
        let mut h = p.holder(ms(990));
        assert_eq!(h.tick(ms(0)), Step::WaitUntil(ms(790)));
        h.renewed(ms(1300));
        h.renewed(ms(1200)); // an older renewal's answer never moves it back
        assert_eq!(h.deadline(), ms(1300));
        assert_eq!(h.tick(ms(1099)), Step::WaitUntil(ms(1100)));
        assert_eq!(h.tick(ms(1100)), Step::StopGently);
        assert_eq!(h.phase(), Phase::Stopping);
        h.renewed(ms(5000)); // too late: the stop has begun
        assert_eq!(h.tick(ms(1100)), Step::WaitUntil(ms(1300)));
        assert_eq!(h.tick(ms(1300)), Step::ForceStop);
        assert_eq!(h.tick(ms(1400)), Step::Done);
        assert_eq!(h.phase(), Phase::Killed);
    }

    #[test]
    fn a_revoked_lease_stops_at_once_and_kills_within_the_grace() {
        let p = StopPolicy::new(ms(1000), ms(10), ms(200)).unwrap();
        let mut h = p.holder(ms(990));
        h.revoked(ms(100));
        h.renewed(ms(5000)); // nothing renews a revoked lease
        assert_eq!(h.tick(ms(100)), Step::StopGently);
        assert_eq!(h.tick(ms(100)), Step::WaitUntil(ms(300)));
        assert_eq!(h.tick(ms(300)), Step::ForceStop);
        // Revoked close to the deadline: the kill comes at the deadline, not after it.
        let mut late = p.holder(ms(990));
        late.revoked(ms(900));
        late.revoked(ms(950)); // a second report never postpones it
        assert_eq!(late.tick(ms(950)), Step::StopGently);
        assert_eq!(late.force_stop_at(), ms(990));
    }
}
