//! Trace validation: a recorded [`Trace`] replayed through the models' own lock service and
//! storage (`serve` and `store` of the lease-service model, the steps `fencecheck check`
//! explores), asking of every observed answer: is it one the model could have given?
//!
//! The steps nobody observes are searched for. Each request is handled by the service at some
//! moment between when it was sent and when its answer was observed; requests of different
//! clients may be handled in any order that fits those windows; a lease ends when its TTL has
//! run on the service's clock, which is the trace's clock within `slack`. Real tokens are matched
//! to the model's by grant order, so a token that repeats or goes backwards cannot be explained.
//!
//! The moments tried for a request are the ends of its window and the moment the live lease
//! ends (just before and at it): the service's answers change only there. The search is
//! memoised and bounded ([`Replay::max_states`]); a trace it cannot finish is an error, never a
//! pass.

use crate::protocol::{Fence, FencePolicy, LeaseTable, Trace, TraceEvent};
use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

mod search;
mod work;

use search::{Search, World};
pub use work::{work_stopped_before_successor, WorkOverlap, Works};

/// How to replay a trace: the lease's TTL as the server grants it, how far the service's clock
/// may be from the trace's, and what the storage does with a stale token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replay {
    /// The TTL the server grants, in microseconds.
    pub ttl_us: u64,
    /// How far (µs) the moment a lease ends on the server may be from where the trace's clock
    /// puts it.
    pub slack_us: u64,
    /// The storage's rule.
    pub policy: FencePolicy,
    /// Give up (with an error) after this many search states.
    pub max_states: usize,
    /// Whether a holder may work on after a later lease was granted: for clients whose work's
    /// every write carries the token to fenced storage (the campaign's workers), which the replay
    /// checks. Otherwise the trace must show `work_stopped_before_successor`.
    pub work_may_overlap: bool,
}

impl Replay {
    /// A replay of a lock granting `ttl` in front of storage with `policy`; slack 2 ms plus 1 %
    /// of the TTL; at most a million search states.
    pub fn new(ttl: Duration, policy: FencePolicy) -> Self {
        let ttl_us = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
        Replay {
            ttl_us,
            slack_us: 2_000 + ttl_us / 100,
            policy,
            max_states: 1_000_000,
            work_may_overlap: false,
        }
    }

    /// The same replay letting a holder's work overlap its successor's
    /// ([`Replay::work_may_overlap`]).
    pub fn work_may_overlap(self) -> Self {
        Replay {
            work_may_overlap: true,
            ..self
        }
    }

    /// The same replay with another slack.
    pub fn slack(self, slack: Duration) -> Self {
        let slack_us = u64::try_from(slack.as_micros()).unwrap_or(u64::MAX);
        Replay { slack_us, ..self }
    }
}

/// A trace the model explains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validated {
    /// Events replayed.
    pub events: usize,
    /// Grants among them.
    pub grants: usize,
    /// Search states visited.
    pub states: usize,
    /// Works recorded (`work-started`): stopped before any later grant, or never recorded as
    /// stopped. None counted when the replay lets work overlap.
    pub works: Works,
}

/// Why a trace was not validated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// An observed event is no step the model allows, however the unobserved steps are placed.
    #[error(
        "event {} cannot be explained by the model: {reason}\n  the event: {}\n  model state: \
         {state}\n{timeline}",
        index + 1,
        event
    )]
    Unexplained {
        /// Index of the first event no placement of the unobserved steps explains.
        index: usize,
        /// That event.
        event: Box<TraceEvent>,
        /// What the model does instead.
        reason: String,
        /// The model's lock service and storage just before it (real tokens, client names).
        state: String,
        /// The trace up to that event, the event marked.
        timeline: String,
    },
    /// The search passed [`Replay::max_states`] before finishing.
    #[error(
        "trace validation gave up after {states} search states (Replay::max_states): no verdict"
    )]
    TooLarge {
        /// States visited.
        states: usize,
    },
    /// Every event is explained, but a holder worked on after a later lease was granted.
    #[error("{0}")]
    WorkOverlap(Box<WorkOverlap>),
    /// The replay's TTL is zero.
    #[error("replay ttl must be at least 1 µs")]
    ZeroTtl,
}

/// Replays `trace` through the model's lock service and storage.
///
/// ```
/// use fencecheck::check::trace::{validate, Replay};
/// use fencecheck::protocol::{FencePolicy, Observed, Token, Trace};
/// use std::time::Duration;
///
/// let replay = Replay::new(Duration::from_millis(100), FencePolicy::Fenced);
/// let mut t = Trace::new();
/// t.record(0, "A", Observed::AcquireSent);
/// t.record(1_000, "A", Observed::Granted { token: Token::new(1) });
/// t.record(2_000, "B", Observed::AcquireSent);
/// // A's lease (100 ms) is live: no lock service grants B the lease 3 ms in.
/// t.record(3_000, "B", Observed::Granted { token: Token::new(2) });
/// let err = validate(&t, &replay).unwrap_err();
/// assert!(err.to_string().starts_with("event 4 cannot be explained"));
/// ```
pub fn validate(trace: &Trace, replay: &Replay) -> Result<Validated, TraceError> {
    if replay.ttl_us == 0 {
        return Err(TraceError::ZeroTtl);
    }
    let events = trace.events();
    let mut names: Vec<&str> = Vec::new();
    let clients = events
        .iter()
        .map(|e| match names.iter().position(|n| *n == e.who) {
            Some(i) => i,
            None => {
                names.push(&e.who);
                names.len() - 1
            }
        })
        .collect();
    let mut search = Search {
        replay,
        events,
        clients,
        names,
        seen: HashSet::new(),
        deepest: None,
        grants: 0,
    };
    let start = World {
        table: LeaseTable::new(),
        fence: Fence::new(replay.policy),
        now: events.first().map_or(0, |e| e.at_us),
        tokens: Vec::new(),
        pending: Vec::new(),
    };
    match search.explore(0, start) {
        Some(true) => {
            let works = if replay.work_may_overlap {
                Works::default()
            } else {
                work_stopped_before_successor(trace).map_err(TraceError::WorkOverlap)?
            };
            Ok(Validated {
                events: events.len(),
                grants: search.grants,
                states: search.seen.len(),
                works,
            })
        }
        None => Err(TraceError::TooLarge {
            states: search.seen.len(),
        }),
        Some(false) => {
            let (index, reason, state) = search.deepest.expect("a failed search records why");
            let mut timeline = String::new();
            for (i, e) in events.iter().enumerate().take(index + 1) {
                let mark = if i == index { ">>" } else { "  " };
                timeline.push_str(&format!("{mark}{:>3}. {e}\n", i + 1));
            }
            Err(TraceError::Unexplained {
                index,
                event: Box::new(events[index].clone()),
                reason,
                state,
                timeline,
            })
        }
    }
}

impl fmt::Display for Validated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} events ({} grants) explained by the model ({} search states)",
            self.events, self.grants, self.states
        )?;
        if self.works.stopped > 0 {
            write!(
                f,
                "; {} works stopped before any later grant",
                self.works.stopped
            )?;
        }
        if self.works.unknown > 0 {
            write!(
                f,
                "; {} never recorded as stopped (no verdict on them)",
                self.works.unknown
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
