//! Leader leases in a Raft group: how long a leader may answer reads from its own state, and how
//! long a node waits before it helps elect another leader, when clocks run at different rates.
//!
//! A leader sends a heartbeat at `start` on its own clock; once a quorum has acknowledged it, the
//! leader may serve reads without a round trip until its clock shows `start + lease()`. A node
//! that received the heartbeat at `heard` on its clock votes for no other leader (and a new
//! leader takes no write) until its clock shows `heard + election_timeout`. Every quorum that
//! elects a new leader holds a node that acknowledged the heartbeat, so the new leader's first
//! write comes after the old leader's last lease read, provided that every clock runs at a rate
//! within `1 ± drift` of real time:
//!
//! the leader's lease lasts at most `lease / (1 - drift)` of real time from the heartbeat, and
//! the voter waits at least `election_timeout / (1 + drift)` of real time from a moment no
//! earlier than the heartbeat; [`LeaderLease::lease`] is `election_timeout × (1 - drift) /
//! (1 + drift)`, rounded down, so the first ends before the second.
//!
//! The `raft-leader-lease` models check this rule with clocks inside and outside the bound.

use std::fmt;

/// A drift bound in parts per thousand: every clock runs at a rate within `(1000 ± per_mille) /
/// 1000` of real time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Drift {
    per_mille: u64,
}

impl Drift {
    /// A bound of `per_mille` / 1000; `None` from 1000 on (a clock that may stop bounds nothing).
    pub const fn per_mille(per_mille: u64) -> Option<Drift> {
        if per_mille < 1000 {
            Some(Drift { per_mille })
        } else {
            None
        }
    }

    /// The bound in parts per thousand.
    pub const fn get(self) -> u64 {
        self.per_mille
    }
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{} %", self.per_mille / 10, self.per_mille % 10)
    }
}

/// Why a leader-lease rule was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaderLeaseError {
    /// An election timeout of zero leaves no lease.
    #[error("the election timeout must be positive")]
    ZeroTimeout,
    /// The drift bound leaves a lease of zero at this timeout.
    #[error(
        "an election timeout of {election_timeout} with drift {drift} leaves no lease: \
         lengthen the timeout"
    )]
    NoLease {
        /// The election timeout.
        election_timeout: u64,
        /// The drift bound.
        drift: Drift,
    },
}

/// The leader-lease rule for one election timeout and drift bound, in any unit of time (each
/// node counts on its own clock).
///
/// ```
/// use fencecheck::protocol::{Drift, LeaderLease};
///
/// // Elections wait 100 ticks; clocks stay within 10 % of real time.
/// let rule = LeaderLease::new(100, Drift::per_mille(100).unwrap()).unwrap();
/// assert_eq!(rule.lease(), 81); // 100 × 0.9 / 1.1, rounded down
/// assert!(rule.may_serve(0, 80));
/// assert!(!rule.may_serve(0, 81));
/// assert!(!rule.may_vote(Some(5), 104));
/// assert!(rule.may_vote(Some(5), 105));
/// assert!(rule.may_vote(None, 0)); // never heard from the leader: nothing to wait out
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaderLease {
    election_timeout: u64,
    drift: Drift,
    lease: u64,
}

impl LeaderLease {
    /// The rule for `election_timeout` and `drift`.
    ///
    /// # Errors
    /// [`LeaderLeaseError::ZeroTimeout`]; [`LeaderLeaseError::NoLease`] when the drift leaves a
    /// lease of zero.
    pub fn new(election_timeout: u64, drift: Drift) -> Result<LeaderLease, LeaderLeaseError> {
        if election_timeout == 0 {
            return Err(LeaderLeaseError::ZeroTimeout);
        }
        let d = u128::from(drift.get());
        let lease = u128::from(election_timeout) * (1000 - d) / (1000 + d);
        let lease = u64::try_from(lease).expect("at most the election timeout");
        if lease == 0 {
            return Err(LeaderLeaseError::NoLease {
                election_timeout,
                drift,
            });
        }
        Ok(LeaderLease {
            election_timeout,
            drift,
            lease,
        })
    }

    /// How long a node waits after hearing from the leader before it votes for another.
    pub fn election_timeout(&self) -> u64 {
        self.election_timeout
    }

    /// The drift bound the lease is computed for.
    pub fn drift(&self) -> Drift {
        self.drift
    }

    /// How long, on its own clock, a leader may serve reads after the heartbeat a quorum
    /// acknowledged: the election timeout × (1 − drift) / (1 + drift), rounded down.
    pub fn lease(&self) -> u64 {
        self.lease
    }

    /// Whether a leader whose acknowledged heartbeat left at `start` (its clock) may answer a
    /// read from its own state at `now` (its clock): only before `start + lease()`.
    pub fn may_serve(&self, start: u64, now: u64) -> bool {
        now.saturating_sub(start) < self.lease && now >= start
    }

    /// Whether a node that last heard from the leader at `heard` (its clock; `None`: never) may
    /// vote for another leader at `now` (its clock): from `heard + election_timeout()` on.
    pub fn may_vote(&self, heard: Option<u64>, now: u64) -> bool {
        heard.is_none_or(|h| now >= h.saturating_add(self.election_timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_rules_are_refused_and_bounds_read_back() {
        assert_eq!(Drift::per_mille(1000), None);
        assert_eq!(Drift::per_mille(999).map(Drift::get), Some(999));
        assert_eq!(Drift::per_mille(25).unwrap().to_string(), "2.5 %");
        let ten = Drift::per_mille(100).unwrap();
        assert_eq!(LeaderLease::new(0, ten), Err(LeaderLeaseError::ZeroTimeout));
        let err = LeaderLease::new(1, ten).unwrap_err();
        assert_eq!(
            err,
            LeaderLeaseError::NoLease {
                election_timeout: 1,
                drift: ten
            }
        );
        assert!(err.to_string().contains("drift 10.0 %"), "{err}");
        let rule = LeaderLease::new(100, ten).unwrap();
        assert_eq!(
            (rule.election_timeout(), rule.drift(), rule.lease()),
            (100, ten, 81)
        );
        let exact = LeaderLease::new(100, Drift::per_mille(0).unwrap()).unwrap();
        assert_eq!(exact.lease(), 100);
        assert_eq!(
            LeaderLease::new(u64::MAX, Drift::per_mille(0).unwrap())
                .unwrap()
                .lease(),
            u64::MAX
        );
    }

    #[test]
    fn serving_ends_at_the_lease_and_voting_starts_at_the_timeout() {
        let rule = LeaderLease::new(100, Drift::per_mille(100).unwrap()).unwrap();
        assert!(rule.may_serve(10, 10));
        assert!(rule.may_serve(10, 90));
        assert!(!rule.may_serve(10, 91));
        assert!(
            !rule.may_serve(10, 9),
            "a clock behind the start serves nothing"
        );
        assert!(!rule.may_vote(Some(10), 109));
        assert!(rule.may_vote(Some(10), 110));
        assert!(!rule.may_vote(Some(u64::MAX), u64::MAX - 1));
        assert!(rule.may_vote(None, 0));
    }

    /// Real time in thousandths of a tick: a clock at `rate` per mille of real time shows
    /// `real × rate / 1000`. For every timeout and drift, and the extreme rates within the
    /// bound, the leader's last serving moment comes before the first moment a voter that heard
    /// the heartbeat no earlier than it was sent may vote.
    #[test]
    fn within_the_bound_the_last_lease_read_precedes_the_first_vote() {
        for timeout in [1u64, 2, 3, 7, 10, 64, 100, 999] {
            for per_mille in [0u64, 1, 10, 50, 100, 250, 333, 500, 900] {
                let Ok(rule) = LeaderLease::new(timeout, Drift::per_mille(per_mille).unwrap())
                else {
                    continue;
                };
                let (slow, fast) = (1000 - per_mille, 1000 + per_mille);
                // The first real instant (in 1/1000 ticks) a clock at `rate` shows `local`.
                let real_at = |local: u64, rate: u64| (local * 1_000_000).div_ceil(rate);
                // The leader at the slowest rate stops serving when its clock shows the lease.
                let stops = real_at(rule.lease(), slow);
                // A voter at the fastest rate that heard at the heartbeat's own instant.
                let votes = real_at(timeout, fast);
                assert!(
                    stops <= votes,
                    "timeout {timeout}, drift {per_mille}‰: serving until {stops}, voting from {votes}"
                );
                // And the lease is the longest with that property: one more tick, at the
                // slowest rate, would last longer than the fastest voter waits.
                assert!(
                    (rule.lease() + 1) * fast > timeout * slow,
                    "timeout {timeout}, drift {per_mille}‰: the lease {} could be longer",
                    rule.lease()
                );
            }
        }
    }
}
