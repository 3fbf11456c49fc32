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

/// The clock-drift margin used when none is given: 1 % of the TTL plus 2 ms (covers a clock rate
/// error of about 1 % between the holder's machine and the server, and timer slack).
pub fn default_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The grace period used when none is given: a quarter of the lease's safe window (TTL minus
/// drift), at most 10 s.
pub fn default_grace(ttl: Duration, drift: Duration) -> Duration {
    (ttl.saturating_sub(drift) / 4).min(Duration::from_secs(10))
}

/// How often a held lease is renewed when nothing else is asked: a third of the TTL (so two
/// renewals may fail before the lease ends), at least 1 ms.
pub fn renew_every(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(1))
}

/// A held lease's whole schedule, built once from the TTL the server granted: how often to
/// renew, the clock-drift margin, and the stop policy. Every default and every check of a
/// holder's margins is made here; `fencecheck run`, the keepalive and the election take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// How often to renew.
    pub every: Duration,
    /// Subtracted from every deadline to cover the server's clock running faster than ours.
    pub drift: Duration,
    /// When work may start, when it is asked to stop and when it is killed.
    pub policy: StopPolicy,
}

impl Schedule {
    /// The schedule of a lease of `ttl`, with what the caller asked for (`None`: the default).
    ///
    /// Defaults: the drift margin [`default_drift`], the grace [`default_grace`], and renewals
    /// every [`renew_every`] (a third of the TTL) unless that would not put two renewals before
    /// the gentle stop at deadline − grace: then a third of the time before that stop, so that a
    /// long grace on a healthy server never stops the work for want of a renewal. Refused when
    /// the drift margin or the grace does not fit in the TTL.
    pub fn new(
        ttl: Duration,
        every: Option<Duration>,
        drift: Option<Duration>,
        grace: Option<Duration>,
    ) -> Result<Self, ScheduleError> {
        let drift = drift.unwrap_or_else(|| default_drift(ttl));
        let grace = grace.unwrap_or_else(|| default_grace(ttl, drift));
        let policy = StopPolicy::new(ttl, drift, grace)?;
        let every = match every {
            Some(every) => every.max(Duration::from_millis(1)),
            None => {
                // StopPolicy::new has checked that grace < ttl - drift.
                let before_stop = ttl - drift - grace;
                let third = renew_every(ttl);
                if third * 2 < before_stop {
                    third
                } else {
                    (before_stop / 3).max(Duration::from_millis(1))
                }
            }
        };
        Ok(Schedule {
            every,
            drift,
            policy,
        })
    }
}

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
    pub fn timer(&self, deadline: Duration) -> StopTimer {
        StopTimer {
            grace: self.grace,
            deadline,
            force_at: None,
            phase: Phase::Working,
        }
    }
}

/// The safe deadline a successful request gives: its **send** time + the TTL the server granted −
/// the drift margin (the server started its TTL after the request left, so neither a slow reply
/// nor a pause can stretch it). No window at all when the drift is not shorter than the TTL.
pub fn safe_deadline(sent: Duration, ttl: Duration, drift: Duration) -> Duration {
    sent + ttl.saturating_sub(drift)
}

/// The renewing side of a held lease: when the next renewal is due and the safe deadline each
/// successful request gives. Time is an input, as for [`StopTimer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Renewals {
    ttl: Duration,
    drift: Duration,
    every: Duration,
    deadline: Duration,
    next: Duration,
}

impl Renewals {
    /// After a grant whose request was sent at `sent`, for a lease of `ttl` (as granted) with
    /// drift margin `drift`, renewed every `every`.
    pub fn new(ttl: Duration, drift: Duration, every: Duration, sent: Duration) -> Self {
        Renewals {
            ttl,
            drift,
            every,
            deadline: safe_deadline(sent, ttl, drift),
            next: sent + every,
        }
    }

    /// The safe deadline now.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// When to send the next renewal: `every` after the last successful request was sent (or
    /// sooner after a failure), never later than the deadline.
    pub fn next_at(&self) -> Duration {
        self.next.min(self.deadline)
    }

    /// Whether the safe deadline has passed at `now`: the lease may be gone.
    pub fn expired(&self, now: Duration) -> bool {
        now >= self.deadline
    }

    /// A renewal sent at `sent` succeeded: the deadline moves to its safe deadline (never
    /// backwards: an older request's late answer changes nothing) and the next renewal is due
    /// `every` after it was sent. Returns the deadline.
    pub fn answered(&mut self, sent: Duration) -> Duration {
        self.deadline = self.deadline.max(safe_deadline(sent, self.ttl, self.drift));
        self.next = sent + self.every;
        self.deadline
    }

    /// A renewal failed at `now` (an error, not a refusal): try again after a quarter of the
    /// period (at least 5 ms); the deadline stays where it was.
    pub fn failed(&mut self, now: Duration) {
        self.next = now + (self.every / 4).max(Duration::from_millis(5));
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
pub enum StopStep {
    /// Nothing until `until` (or an earlier input).
    WaitUntil(Duration),
    /// Ask the work to stop (SIGTERM to its process group), then call [`StopTimer::tick`] again.
    StopGently,
    /// Kill the work (SIGKILL to its process group).
    ForceStop,
    /// Everything has been sent; wait for the work to exit.
    Done,
}

/// One held lease and the work it guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StopTimer {
    grace: Duration,
    deadline: Duration,
    /// Set when the server said the lease is gone: the force stop comes no later than this.
    force_at: Option<Duration>,
    phase: Phase,
}

impl StopTimer {
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
    pub fn tick(&mut self, now: Duration) -> StopStep {
        match self.phase {
            Phase::Working if now >= self.stop_at() => {
                self.phase = Phase::Stopping;
                StopStep::StopGently
            }
            Phase::Working => StopStep::WaitUntil(self.stop_at()),
            Phase::Stopping if now >= self.force_stop_at() => {
                self.phase = Phase::Killed;
                StopStep::ForceStop
            }
            Phase::Stopping => StopStep::WaitUntil(self.force_stop_at()),
            Phase::Killed => StopStep::Done,
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
    fn the_defaults_are_the_documented_ones() {
        assert_eq!(default_drift(ms(1000)), ms(12));
        assert_eq!(default_drift(ms(0)), ms(2));
        assert_eq!(default_grace(ms(1000), ms(12)), ms(247));
        assert_eq!(
            default_grace(ms(100_000), ms(1002)),
            Duration::from_secs(10)
        );
        assert_eq!(default_grace(ms(5), ms(12)), Duration::ZERO);
        assert_eq!(renew_every(ms(3000)), ms(1000));
        assert_eq!(renew_every(Duration::from_micros(3)), ms(1));
    }

    #[test]
    fn a_schedule_puts_two_renewals_before_the_gentle_stop() {
        // The defaults: a third of the TTL already fits.
        let s = Schedule::new(ms(3000), None, None, None).unwrap();
        assert_eq!(
            (s.every, s.drift, s.policy.grace()),
            (ms(1000), ms(32), ms(742))
        );
        // A long grace: 3 s TTL, 2 s grace leaves 968 ms before the gentle stop.
        let s = Schedule::new(ms(3000), None, None, Some(ms(2000))).unwrap();
        assert_eq!(s.every, ms(968) / 3);
        assert!(s.every * 2 < ms(3000) - s.drift - ms(2000));
        // Exactly at the edge: two thirds of the TTL is not before the stop.
        let s = Schedule::new(ms(3000), None, Some(ms(0)), Some(ms(1000))).unwrap();
        assert_eq!(s.every, ms(2000) / 3);
        // What was asked is kept.
        let s = Schedule::new(ms(3000), Some(ms(5)), Some(ms(7)), Some(ms(11))).unwrap();
        assert_eq!((s.every, s.drift, s.policy.grace()), (ms(5), ms(7), ms(11)));
        assert_eq!(
            Schedule::new(ms(3000), Some(ms(0)), None, None)
                .unwrap()
                .every,
            ms(1)
        );
        // The margins are checked.
        assert!(matches!(
            Schedule::new(ms(3000), None, None, Some(ms(2968))),
            Err(ScheduleError::GraceTooLong { .. })
        ));
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
    fn renewals_are_dated_from_the_send_time_and_never_move_the_deadline_back() {
        assert_eq!(safe_deadline(ms(100), ms(1000), ms(12)), ms(1088));
        assert_eq!(safe_deadline(ms(100), ms(10), ms(12)), ms(100), "no window");
        let mut r = Renewals::new(ms(900), ms(10), ms(300), ms(0));
        assert_eq!((r.deadline(), r.next_at()), (ms(890), ms(300)));
        assert!(!r.expired(ms(889)) && r.expired(ms(890)));
        // A renewal sent at 300 and answered late: dated from 300, not from its answer.
        assert_eq!(r.answered(ms(300)), ms(1190));
        assert_eq!(r.next_at(), ms(600));
        // An older request's late answer never moves the deadline back.
        assert_eq!(r.answered(ms(200)), ms(1190));
        // Failures retry sooner, never after the deadline.
        r.failed(ms(610));
        assert_eq!(r.next_at(), ms(685));
        r.failed(ms(1180));
        assert_eq!(r.next_at(), ms(1190));
        let mut quick = Renewals::new(ms(900), ms(10), ms(8), ms(0));
        quick.failed(ms(1));
        assert_eq!(quick.next_at(), ms(6), "at least 5 ms");
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
        let mut h = p.timer(ms(990));
        assert_eq!(h.tick(ms(0)), StopStep::WaitUntil(ms(790)));
        h.renewed(ms(1300));
        h.renewed(ms(1200)); // an older renewal's answer never moves it back
        assert_eq!(h.deadline(), ms(1300));
        assert_eq!(h.tick(ms(1099)), StopStep::WaitUntil(ms(1100)));
        assert_eq!(h.tick(ms(1100)), StopStep::StopGently);
        assert_eq!(h.phase(), Phase::Stopping);
        h.renewed(ms(5000)); // too late: the stop has begun
        assert_eq!(h.tick(ms(1100)), StopStep::WaitUntil(ms(1300)));
        assert_eq!(h.tick(ms(1300)), StopStep::ForceStop);
        assert_eq!(h.tick(ms(1400)), StopStep::Done);
        assert_eq!(h.phase(), Phase::Killed);
    }

    #[test]
    fn a_revoked_lease_stops_at_once_and_kills_within_the_grace() {
        let p = StopPolicy::new(ms(1000), ms(10), ms(200)).unwrap();
        let mut h = p.timer(ms(990));
        h.revoked(ms(100));
        h.renewed(ms(5000)); // nothing renews a revoked lease
        assert_eq!(h.tick(ms(100)), StopStep::StopGently);
        assert_eq!(h.tick(ms(100)), StopStep::WaitUntil(ms(300)));
        assert_eq!(h.tick(ms(300)), StopStep::ForceStop);
        // Revoked close to the deadline: the kill comes at the deadline, not after it.
        let mut late = p.timer(ms(990));
        late.revoked(ms(900));
        late.revoked(ms(950)); // a second report never postpones it
        assert_eq!(late.tick(ms(950)), StopStep::StopGently);
        assert_eq!(late.force_stop_at(), ms(990));
    }
}
