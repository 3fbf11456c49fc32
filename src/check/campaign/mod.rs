//! Judging the trials of a fault campaign (`fencecheck torture`): each trial's workers did the
//! counter workload (take the lease, read the counter, write it plus one with the token) and
//! recorded what they observed as one [`Trace`]. A trial is judged by what users care about —
//! increments lost, stale writes stored, two holders' work overlapping — by
//! `storage_in_lease_order` over its history, by replaying its trace through the model
//! ([`super::trace::validate`]), and by checking its counter's register history for
//! linearizability ([`linearize::check`]).

use super::linearize::{self, Checked, LinearizeError, Operation};
use super::trace::{validate, work_stopped_before_successor, Replay, TraceError, Validated};
use crate::protocol::{
    storage_in_lease_order, History, HistoryError, HistoryEvent, Observed, Trace,
};
use std::fmt;

/// A fault the nemesis injected, on the trace's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The worker it struck, or `server` for the lock service.
    pub who: String,
    /// What it was, in a few words (`paused`, `stalled`, `killed and restarted`, ...).
    pub what: String,
    /// When it began (µs).
    pub from_us: u64,
    /// When it ended (µs).
    pub to_us: u64,
}

/// What one trial recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrialRecord {
    /// Every worker's observations, in time order.
    pub trace: Trace,
    /// The counter's value read back after the trial.
    pub final_value: u64,
    /// The faults the nemesis injected.
    pub faults: Vec<Fault>,
    /// The counter as a fenced register: every write the workers sent (the value they wrote,
    /// their token, when it was sent and answered) and the read of the final value, for
    /// [`linearize::check`].
    pub register: Vec<Operation<u64>>,
}

/// The verdict on one trial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrialVerdict {
    /// Grants.
    pub acquisitions: usize,
    /// Increments the storage accepted.
    pub accepted: u64,
    /// Writes the storage refused as stale.
    pub rejected: u64,
    /// Accepted increments missing from the final value.
    pub lost: u64,
    /// The longest time two workers' work under their leases overlapped (µs), from their own
    /// records: `work-started` to `work-stopped` (traces without them: grant to the write's
    /// answer).
    pub overlap_us: u64,
    /// `storage_in_lease_order` over the trial's grants and accepted writes, each write placed
    /// where the storage could have applied it: inside its window from send to answer, as early
    /// as the lease order allows. It is broken only when a write of an older lease was sent after
    /// a write of a newer lease had been answered as accepted (a late answer to an early write,
    /// as a stalled link gives, breaks nothing).
    pub lease_order: Result<(), HistoryError>,
    /// The trace replayed through the model.
    pub validation: Result<Validated, TraceError>,
    /// The register history checked for linearizability.
    pub linearizable: Result<Checked, LinearizeError<u64>>,
    /// How the trace was replayed (the TTL, the storage's rule, whether work may overlap).
    pub replay: Replay,
    /// Whether the fault bit: a write was refused as stale, or a holder worked on after a later
    /// lease was granted (`work_stopped_before_successor` broken, from the workers' records). A
    /// trial the fault did not strike shows nothing about the fencing, whatever its verdict.
    pub struck: bool,
}

impl TrialVerdict {
    /// Whether the trial broke anything: an increment lost, a write stored out of lease order,
    /// a trace the model cannot explain, or a register history that cannot be linearized.
    pub fn violated(&self) -> bool {
        self.lost > 0
            || self.lease_order.is_err()
            || self.validation.is_err()
            || self.linearizable.is_err()
    }
}

/// Judges one trial, replaying its trace with `replay`.
///
/// ```
/// use fencecheck::check::campaign::{judge, TrialRecord};
/// use fencecheck::check::trace::Replay;
/// use fencecheck::protocol::{FencePolicy, Observed, Token, Trace};
/// use std::time::Duration;
///
/// let t = Token::new(1);
/// let mut trace = Trace::new();
/// trace.record(0, "w1", Observed::AcquireSent);
/// trace.record(100, "w1", Observed::Granted { token: t });
/// trace.record(200, "w1", Observed::WriteSent { token: t });
/// trace.record(300, "w1", Observed::WriteAccepted { token: t });
/// let record = TrialRecord { trace, final_value: 1, faults: vec![], register: vec![] };
/// let verdict = judge(&record, &Replay::new(Duration::from_millis(50), FencePolicy::Fenced));
/// assert_eq!((verdict.accepted, verdict.lost), (1, 0));
/// assert!(!verdict.violated());
/// ```
pub fn judge(record: &TrialRecord, replay: &Replay) -> TrialVerdict {
    let (mut acquisitions, mut accepted, mut rejected) = (0, 0, 0);
    // The history's events with the time each is placed at; grants and rejections at their
    // answers, accepted writes placed later by `place_accepted`.
    let mut timed: Vec<(u64, HistoryEvent)> = Vec::new();
    // Accepted writes: (index in `timed`, epoch of the writer's grant, sent, answered).
    let mut writes: Vec<(usize, usize, u64, u64)> = Vec::new();
    let mut grants = 0usize;
    // Per worker: its latest grant's epoch and its write in flight.
    let mut epoch_of: Vec<(&str, usize)> = Vec::new();
    let mut sent_at: Vec<(&str, u64)> = Vec::new();
    for e in record.trace.events() {
        let who = e.who.as_str();
        match e.what {
            Observed::Granted { token } => {
                acquisitions += 1;
                grants += 1;
                timed.push((
                    e.at_us,
                    HistoryEvent::Granted {
                        who: who.into(),
                        token,
                    },
                ));
                epoch_of.retain(|(w, _)| *w != who);
                epoch_of.push((who, grants));
            }
            Observed::WriteSent { .. } => {
                sent_at.retain(|(w, _)| *w != who);
                sent_at.push((who, e.at_us));
            }
            Observed::WriteAccepted { .. } | Observed::WriteRejected { .. } => {
                let sent = sent_at
                    .iter()
                    .position(|(w, _)| *w == who)
                    .map_or(e.at_us, |k| sent_at.remove(k).1);
                if matches!(e.what, Observed::WriteAccepted { .. }) {
                    accepted += 1;
                    let epoch = epoch_of.iter().find(|(w, _)| *w == who).map(|&(_, n)| n);
                    if let Some(epoch) = epoch {
                        writes.push((timed.len(), epoch, sent, e.at_us));
                    }
                    timed.push((e.at_us, HistoryEvent::Accepted { who: who.into() }));
                } else {
                    rejected += 1;
                    timed.push((e.at_us, HistoryEvent::Rejected { who: who.into() }));
                }
            }
            _ => {}
        }
    }
    place_accepted(&mut timed, &mut writes);
    // A stable sort: events placed at the same time keep the order they were observed in.
    timed.sort_by_key(|(at, _)| *at);
    let mut history = History::new();
    for (_, event) in timed {
        history.push(event);
    }
    let work = work_spans(&record.trace);
    let mut overlap_us = 0;
    for (i, (a, a0, a1)) in work.iter().enumerate() {
        for (b, b0, b1) in &work[i + 1..] {
            if a != b {
                overlap_us = overlap_us.max(a1.min(b1).saturating_sub(*a0.max(b0)));
            }
        }
    }
    TrialVerdict {
        acquisitions,
        accepted,
        rejected,
        lost: accepted.saturating_sub(record.final_value),
        overlap_us,
        lease_order: storage_in_lease_order(&history),
        validation: validate(&record.trace, replay),
        linearizable: linearize::check(&record.register),
        replay: *replay,
        struck: rejected > 0 || work_stopped_before_successor(&record.trace).is_err(),
    }
}

/// Each worker's works (who, from, to; µs): from `work-started` to `work-stopped` when the trace
/// records them, else from each grant to the write's answer.
fn work_spans(trace: &Trace) -> Vec<(&str, u64, u64)> {
    let recorded = trace
        .events()
        .iter()
        .any(|e| matches!(e.what, Observed::WorkStarted { .. }));
    let mut open: Vec<(&str, u64)> = Vec::new();
    let mut work = Vec::new();
    for e in trace.events() {
        let who = e.who.as_str();
        let (starts, stops) = match e.what {
            Observed::WorkStarted { .. } => (recorded, false),
            Observed::Granted { .. } => (!recorded, false),
            Observed::WorkStopped { .. } => (false, recorded),
            Observed::WriteAccepted { .. } | Observed::WriteRejected { .. } => (false, !recorded),
            _ => (false, false),
        };
        if starts {
            open.retain(|(w, _)| *w != who);
            open.push((who, e.at_us));
        } else if stops {
            if let Some(k) = open.iter().position(|(w, _)| *w == who) {
                let (who, from) = open.remove(k);
                work.push((who, from, e.at_us));
            }
        }
    }
    work
}

/// Places each accepted write inside its window (sent to answered) at the earliest time that
/// keeps the writes in lease order: in epoch order, each at the later of its send and the place
/// of the write before it, but never after its own answer. When every write fits, the placed
/// history is in lease order; when one cannot (an older lease's write was sent after a newer
/// lease's write was answered), every placement inside the windows breaks the order, and this
/// one does too.
fn place_accepted(timed: &mut [(u64, HistoryEvent)], writes: &mut [(usize, usize, u64, u64)]) {
    writes.sort_by_key(|&(_, epoch, sent, _)| (epoch, sent));
    let mut at = 0u64;
    for &(index, _, sent, answered) in writes.iter() {
        at = at.max(sent).min(answered);
        timed[index].0 = at;
    }
}

/// The totals of a campaign.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Trials judged.
    pub trials: usize,
    /// Grants in all.
    pub acquisitions: usize,
    /// Increments accepted.
    pub accepted: u64,
    /// Writes rejected as stale.
    pub rejected: u64,
    /// Increments lost.
    pub lost: u64,
    /// Trials whose history broke `storage_in_lease_order`.
    pub out_of_order: usize,
    /// Trials whose trace the model explains.
    pub explained: usize,
    /// Trials whose register history is linearizable.
    pub linearizable: usize,
    /// The longest overlap of two workers' work (µs).
    pub max_overlap_us: u64,
    /// Trials that broke anything.
    pub violated: usize,
    /// Per nemesis, in the order first seen.
    pub strikes: Vec<Strikes>,
}

/// How one nemesis fared over a campaign.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Strikes {
    /// Its name.
    pub nemesis: String,
    /// The trials it was given.
    pub trials: usize,
    /// The trials it struck ([`TrialVerdict::struck`]).
    pub struck: usize,
    /// The trials that broke a rule ([`TrialVerdict::violated`]).
    pub violated: usize,
}

impl Totals {
    /// Adds one trial's verdict.
    pub fn add(&mut self, v: &TrialVerdict) {
        self.trials += 1;
        self.acquisitions += v.acquisitions;
        self.accepted += v.accepted;
        self.rejected += v.rejected;
        self.lost += v.lost;
        self.out_of_order += usize::from(v.lease_order.is_err());
        self.explained += usize::from(v.validation.is_ok());
        self.linearizable += usize::from(v.linearizable.is_ok());
        self.max_overlap_us = self.max_overlap_us.max(v.overlap_us);
        self.violated += usize::from(v.violated());
    }

    /// Adds one trial's verdict, the trial having been given `nemesis`.
    pub fn add_struck_by(&mut self, nemesis: &str, v: &TrialVerdict) {
        self.add(v);
        let k = match self.strikes.iter().position(|s| s.nemesis == nemesis) {
            Some(k) => k,
            None => {
                self.strikes.push(Strikes {
                    nemesis: nemesis.to_string(),
                    ..Strikes::default()
                });
                self.strikes.len() - 1
            }
        };
        let s = &mut self.strikes[k];
        s.trials += 1;
        s.struck += usize::from(v.struck);
        s.violated += usize::from(v.violated());
    }
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.trials;
        writeln!(f, "trials                 {n}")?;
        writeln!(f, "acquisitions           {}", self.acquisitions)?;
        writeln!(f, "writes accepted        {}", self.accepted)?;
        writeln!(f, "writes rejected        {}", self.rejected)?;
        writeln!(f, "increments lost        {}", self.lost)?;
        let held = n - self.out_of_order;
        writeln!(f, "storage_in_lease_order held in {held} of {n} trials")?;
        writeln!(
            f,
            "trace validation       {} of {n} traces explained by the model",
            self.explained
        )?;
        writeln!(
            f,
            "linearizability        {} of {n} register histories linearizable",
            self.linearizable
        )?;
        writeln!(
            f,
            "work overlap           {} ms at most (two holders' work, from their own records)",
            self.max_overlap_us / 1000
        )?;
        for s in &self.strikes {
            writeln!(
                f,
                "nemesis {:<14} struck {} of {} trials, broke a rule in {} (struck: a write \
                 refused, or work going on after a later grant)",
                s.nemesis, s.struck, s.trials, s.violated
            )?;
        }
        write!(f, "trials violated        {}", self.violated)
    }
}

/// The index of the trial to show: the one that lost most increments, then the one with most
/// rejected writes, then the one with the longest overlap.
pub fn worst(verdicts: &[TrialVerdict]) -> Option<usize> {
    (0..verdicts.len()).max_by_key(|&i| {
        let v = &verdicts[i];
        (v.violated(), v.lost, v.rejected, v.overlap_us)
    })
}

#[cfg(test)]
mod tests;
