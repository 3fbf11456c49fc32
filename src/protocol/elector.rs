//! Leader election over a lease *record* the store never expires: a Kubernetes `Lease` as
//! client-go's `leaderelection` uses it.
//!
//! The record names the holder (`holderIdentity`), when it last renewed (`renewTime`, by the
//! holder's own clock) and how many times the holder changed (`leaseTransitions`). The API server
//! only compares-and-sets it by `resourceVersion`; nothing on the server ends a lease. Each
//! candidate judges expiry by its **own** clock: the lease is over `leaseDuration` after the
//! candidate last *saw the record change*. A leader renews every `retryPeriod` and stops leading
//! when `renewDeadline` passes without a successful renewal — counted, as client-go counts it,
//! from when the last successful update's *reply* arrived.
//!
//! So a renewal whose reply is slow moves the leader's end later than the server's record shows
//! (kubernetes#44887), and a record change is not a lock: only `leaseTransitions`, carried to the
//! storage as a fencing token, keeps a deposed leader's late write out (kube-rs#1056).

use super::token::Token;

/// client-go's three durations, in the caller's time unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ElectionTiming {
    lease_duration: u64,
    renew_deadline: u64,
    retry_period: u64,
}

/// Durations client-go's `NewLeaderElector` refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    /// `leaseDuration` must be greater than `renewDeadline`.
    #[error("leaseDuration {lease_duration} must be greater than renewDeadline {renew_deadline}")]
    LeaseNotLongerThanDeadline {
        /// The lease duration.
        lease_duration: u64,
        /// The renew deadline.
        renew_deadline: u64,
    },
    /// `renewDeadline` must be greater than `retryPeriod` (client-go also scales it by 1.2).
    #[error("renewDeadline {renew_deadline} must be greater than retryPeriod {retry_period}")]
    DeadlineNotLongerThanRetry {
        /// The renew deadline.
        renew_deadline: u64,
        /// The retry period.
        retry_period: u64,
    },
    /// `retryPeriod` must be positive.
    #[error("retryPeriod must be positive")]
    NoRetryPeriod,
}

impl ElectionTiming {
    /// The durations, checked as client-go checks them: `lease_duration > renew_deadline >
    /// retry_period > 0`.
    pub fn new(
        lease_duration: u64,
        renew_deadline: u64,
        retry_period: u64,
    ) -> Result<Self, TimingError> {
        if retry_period == 0 {
            return Err(TimingError::NoRetryPeriod);
        }
        if renew_deadline <= retry_period {
            return Err(TimingError::DeadlineNotLongerThanRetry {
                renew_deadline,
                retry_period,
            });
        }
        if lease_duration <= renew_deadline {
            return Err(TimingError::LeaseNotLongerThanDeadline {
                lease_duration,
                renew_deadline,
            });
        }
        Ok(ElectionTiming {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }

    /// `leaseDuration`: how long after a candidate last saw the record change it may take over.
    pub fn lease_duration(&self) -> u64 {
        self.lease_duration
    }

    /// `renewDeadline`: how long a leader keeps trying to renew before it stops leading.
    pub fn renew_deadline(&self) -> u64 {
        self.renew_deadline
    }

    /// `retryPeriod`: how often candidates try and leaders renew.
    pub fn retry_period(&self) -> u64 {
        self.retry_period
    }

    /// How late a leader stops leading, after the reply of its last successful update:
    /// `retryPeriod` (the wait before the next renewal) plus `renewDeadline`.
    pub fn leads_for(&self) -> u64 {
        self.retry_period + self.renew_deadline
    }

    /// What the durations leave for request latency and clock-rate skew: `leaseDuration −
    /// retryPeriod − renewDeadline`. A renewal reply slower than this lets a candidate take over
    /// while the old leader still leads.
    pub fn margin(&self) -> u64 {
        self.lease_duration - self.leads_for().min(self.lease_duration)
    }
}

/// `LeaderElectionRecord`: what the Lease object holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseRecord<O> {
    /// `holderIdentity`; `None` when nobody holds it.
    pub holder: Option<O>,
    /// `renewTime`, by the holder's clock.
    pub renew_time: u64,
    /// `leaseTransitions`: how many times the holder changed. Carried to storage, it is a fencing
    /// token (see [`LeaseRecord::token`]).
    pub transitions: u64,
}

impl<O> LeaseRecord<O> {
    /// The fencing token of this record's holder: `leaseTransitions + 1`, so the first holder has
    /// token 1 (tokens are positive) and every change of holder a larger one.
    pub fn token(&self) -> Token {
        Token::new(self.transitions.saturating_add(1))
    }
}

/// An update whose `resourceVersion` is no longer the object's: someone updated it since.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("conflict: resourceVersion {sent} is stale, the object is at {current}")]
pub struct Conflict {
    /// The version the update named.
    pub sent: u64,
    /// The object's version.
    pub current: u64,
}

/// The Lease object in the API server: the record and its `resourceVersion`, replaced only by an
/// update naming the current version (optimistic concurrency).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseObject<O> {
    record: LeaseRecord<O>,
    version: u64,
}

impl<O> Default for LeaseObject<O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<O> LeaseObject<O> {
    /// An object nobody holds, at version 1, with no transitions.
    pub fn new() -> Self {
        LeaseObject {
            record: LeaseRecord {
                holder: None,
                renew_time: 0,
                transitions: 0,
            },
            version: 1,
        }
    }

    /// The record and its version (a GET).
    pub fn get(&self) -> (&LeaseRecord<O>, u64) {
        (&self.record, self.version)
    }

    /// Replaces the record if `version` is still current (an UPDATE); the new version.
    pub fn update(&mut self, version: u64, record: LeaseRecord<O>) -> Result<u64, Conflict> {
        if version != self.version {
            return Err(Conflict {
                sent: version,
                current: self.version,
            });
        }
        self.record = record;
        self.version += 1;
        Ok(self.version)
    }
}

/// What a candidate does after reading the record.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Attempt<O> {
    /// Someone else holds a lease that has not expired by this candidate's clock: try again a
    /// `retryPeriod` later.
    Wait,
    /// Send this update, compare-and-set on `version`: take the lease (a new holder, one more
    /// transition) or renew it (the same holder and transitions, a new `renewTime`).
    Update {
        /// The version read.
        version: u64,
        /// The record to write.
        record: LeaseRecord<O>,
    },
}

/// One candidate of client-go's `LeaderElector`, sans-IO: it is told what it read and what its
/// updates returned, with `now` by its own clock, and says what to send and whether it leads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Elector<O> {
    me: O,
    timing: ElectionTiming,
    /// The version last seen and when (our clock) it was first seen: `observedTime`.
    observed: Option<(u64, u64)>,
    /// Leading: the token of the record we hold and when our last successful update's reply
    /// arrived.
    leading: Option<(Token, u64)>,
}

impl<O: Clone + PartialEq> Elector<O> {
    /// A candidate named `me`.
    pub fn new(me: O, timing: ElectionTiming) -> Self {
        Elector {
            me,
            timing,
            observed: None,
            leading: None,
        }
    }

    /// client-go's `tryAcquireOrRenew` after its GET returned `record` at `version`, at `now`.
    /// A version not seen before restarts this candidate's count of the lease; the lease is
    /// another's and live until `leaseDuration` after that.
    pub fn on_read(&mut self, record: &LeaseRecord<O>, version: u64, now: u64) -> Attempt<O> {
        if self.observed.map(|(v, _)| v) != Some(version) {
            self.observed = Some((version, now));
        }
        let seen_at = self.observed.map_or(now, |(_, at)| at);
        let mine = record.holder.as_ref() == Some(&self.me);
        let live = seen_at + self.timing.lease_duration > now;
        if record.holder.is_some() && !mine && live {
            return Attempt::Wait;
        }
        let transitions = if mine {
            record.transitions
        } else {
            record.transitions + 1
        };
        Attempt::Update {
            version,
            record: LeaseRecord {
                holder: Some(self.me.clone()),
                renew_time: now,
                transitions,
            },
        }
    }

    /// The update of `record` succeeded with `version`; its reply arrived at `now`. Returns the
    /// token when this took the lease (not when it renewed the one we lead).
    pub fn on_updated(&mut self, record: &LeaseRecord<O>, version: u64, now: u64) -> Option<Token> {
        self.observed = Some((version, now));
        let token = record.token();
        let renewed = self.leads(now) && self.leading.map(|(t, _)| t) == Some(token);
        self.leading = Some((token, now));
        (!renewed).then_some(token)
    }

    /// Whether this candidate leads at `now`: its last successful update's reply arrived less
    /// than `retryPeriod + renewDeadline` ago.
    pub fn leads(&self, now: u64) -> bool {
        self.leading
            .is_some_and(|(_, at)| now < at + self.timing.leads_for())
    }

    /// The token of the lease this candidate leads under at `now`.
    pub fn term(&self, now: u64) -> Option<Token> {
        self.leading
            .filter(|_| self.leads(now))
            .map(|(token, _)| token)
    }

    /// Whether a leader's renewal is due at `now`: `retryPeriod` after its last success.
    pub fn renewal_due(&self, now: u64) -> bool {
        self.leading
            .is_some_and(|(_, at)| now >= at + self.timing.retry_period)
    }

    /// When this candidate stops leading unless it renews: `None` when it does not lead.
    pub fn steps_down_at(&self) -> Option<u64> {
        self.leading.map(|(_, at)| at + self.timing.leads_for())
    }

    /// The candidate's name.
    pub fn me(&self) -> &O {
        &self.me
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> ElectionTiming {
        ElectionTiming::new(4, 2, 1).unwrap()
    }

    #[test]
    fn timings_are_checked_as_client_go_checks_them() {
        assert_eq!(
            ElectionTiming::new(4, 2, 0),
            Err(TimingError::NoRetryPeriod)
        );
        assert!(matches!(
            ElectionTiming::new(4, 2, 2),
            Err(TimingError::DeadlineNotLongerThanRetry { .. })
        ));
        assert!(matches!(
            ElectionTiming::new(2, 2, 1),
            Err(TimingError::LeaseNotLongerThanDeadline { .. })
        ));
        let t = ElectionTiming::new(15, 10, 2).unwrap();
        assert_eq!(
            (t.lease_duration(), t.renew_deadline(), t.retry_period()),
            (15, 10, 2)
        );
        assert_eq!((t.leads_for(), t.margin()), (12, 3));
        assert_eq!(ElectionTiming::new(5, 4, 3).unwrap().margin(), 0);
        assert!(TimingError::NoRetryPeriod
            .to_string()
            .contains("retryPeriod"));
    }

    #[test]
    fn the_object_takes_an_update_only_at_its_current_version() {
        let mut obj = LeaseObject::<u8>::default();
        let (rec, v) = obj.get();
        assert_eq!((rec.holder, rec.transitions, v), (None, 0, 1));
        let new = LeaseRecord {
            holder: Some(7),
            renew_time: 3,
            transitions: 1,
        };
        assert_eq!(obj.update(1, new.clone()), Ok(2));
        assert_eq!(obj.get(), (&new, 2));
        assert_eq!(
            obj.update(1, new.clone()),
            Err(Conflict {
                sent: 1,
                current: 2
            })
        );
        assert_eq!(obj.get().1, 2);
        assert_eq!(new.token(), Token::new(2));
    }

    #[test]
    fn a_candidate_takes_a_free_lease_with_one_more_transition() {
        let mut a = Elector::new('a', timing());
        let obj = LeaseObject::new();
        let (rec, v) = obj.get();
        let Attempt::Update { version, record } = a.on_read(rec, v, 0) else {
            panic!("a free lease is taken")
        };
        assert_eq!(version, 1);
        assert_eq!(
            record,
            LeaseRecord {
                holder: Some('a'),
                renew_time: 0,
                transitions: 1
            }
        );
        assert_eq!(a.me(), &'a');
    }

    #[test]
    fn another_holders_lease_lives_until_lease_duration_after_it_was_seen_to_change() {
        let mut b = Elector::new('b', timing());
        let held = LeaseRecord {
            holder: Some('a'),
            renew_time: 100,
            transitions: 1,
        };
        // First seen at 2: live until 6 by b's clock, whatever renewTime says.
        assert_eq!(b.on_read(&held, 5, 2), Attempt::Wait);
        assert_eq!(b.on_read(&held, 5, 5), Attempt::Wait);
        let Attempt::Update { version, record } = b.on_read(&held, 5, 6) else {
            panic!("expired by b's clock")
        };
        assert_eq!(
            (version, record.holder, record.transitions),
            (5, Some('b'), 2)
        );
        // A new version restarts the count.
        assert_eq!(b.on_read(&held, 6, 7), Attempt::Wait);
        assert_eq!(b.on_read(&held, 6, 10), Attempt::Wait);
        assert!(matches!(b.on_read(&held, 6, 11), Attempt::Update { .. }));
    }

    #[test]
    fn a_holder_renews_its_own_lease_keeping_the_transitions() {
        let mut a = Elector::new('a', timing());
        let mine = LeaseRecord {
            holder: Some('a'),
            renew_time: 0,
            transitions: 3,
        };
        let Attempt::Update { record, .. } = a.on_read(&mine, 9, 1) else {
            panic!("renews")
        };
        assert_eq!((record.transitions, record.renew_time), (3, 1));
    }

    #[test]
    fn a_leader_leads_until_retry_period_plus_renew_deadline_after_its_last_reply() {
        let mut a = Elector::new('a', timing());
        assert!(!a.leads(0) && a.term(0).is_none() && a.steps_down_at().is_none());
        assert!(!a.renewal_due(0));
        let rec = LeaseRecord {
            holder: Some('a'),
            renew_time: 0,
            transitions: 1,
        };
        // Taken: the token is returned once.
        assert_eq!(a.on_updated(&rec, 2, 1), Some(Token::new(2)));
        assert!(a.leads(1) && a.leads(3));
        assert!(!a.leads(4), "1 + retryPeriod 1 + renewDeadline 2");
        assert_eq!(a.term(3), Some(Token::new(2)));
        assert_eq!(a.term(4), None);
        assert_eq!(a.steps_down_at(), Some(4));
        assert!(!a.renewal_due(1) && a.renewal_due(2));
        // Renewed while leading: no new token, a later end.
        assert_eq!(a.on_updated(&rec, 3, 3), None);
        assert_eq!(a.steps_down_at(), Some(6));
        // Renewed after it stopped leading: taken again, the token is returned again.
        assert_eq!(a.on_updated(&rec, 4, 6), Some(Token::new(2)));
        // The successful update is what it has seen last: another holder under that version is
        // live until leaseDuration after the update's reply.
        let other = LeaseRecord {
            holder: Some('b'),
            renew_time: 0,
            transitions: 2,
        };
        assert_eq!(
            a.on_read(&other, 4, 9),
            Attempt::Wait,
            "seen at 6, live to 10"
        );
        assert!(matches!(a.on_read(&other, 4, 10), Attempt::Update { .. }));
        // A lease under another token ends leadership's renewals: taking it returns the token.
        let taken = LeaseRecord {
            holder: Some('a'),
            renew_time: 0,
            transitions: 5,
        };
        assert_eq!(a.on_updated(&taken, 8, 7), Some(Token::new(6)));
    }
}
