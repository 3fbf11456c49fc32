//! `work_stopped_before_successor` over a recorded trace: no client works under a lease once a
//! later lease has been granted. The works come from the clients' own `work-started` and
//! `work-stopped` records (a supervisor records when it started the command and when it reaped
//! the command's whole process group); a later lease exists at the latest when its holder
//! observed the grant. A work never recorded as stopped (its recorder died with it, as a
//! supervisor killed with `kill -9` does) has no verdict: it is counted apart, never passed as
//! stopped in time.

use crate::protocol::{Observed, Token, Trace};
use std::fmt;

/// A work that went on after a later lease was granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkOverlap {
    /// Who worked on.
    pub holder: String,
    /// The lease it worked under.
    pub token: Token,
    /// When its work was recorded as stopped (µs).
    pub stopped_us: u64,
    /// Who was granted the later lease.
    pub successor: String,
    /// The later lease.
    pub successor_token: Token,
    /// When the successor observed its grant (µs).
    pub granted_us: u64,
    /// How long the holder worked on after that grant (µs).
    pub after_grant_us: u64,
    /// How long both worked at once (µs), when the successor's work started before the
    /// holder's stopped.
    pub both_worked_us: Option<u64>,
}

fn ms(us: u64) -> String {
    format!("{}.{:03} ms", us / 1000, us % 1000)
}

impl fmt::Display for WorkOverlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "work_stopped_before_successor is violated: {} worked under lease {} until {}, {} \
             after {} was granted lease {} at {}",
            self.holder,
            self.token,
            ms(self.stopped_us),
            ms(self.after_grant_us),
            self.successor,
            self.successor_token,
            ms(self.granted_us)
        )?;
        if let Some(both) = self.both_worked_us {
            write!(f, "; both worked at once for {}", ms(both))?;
        }
        Ok(())
    }
}

/// One work: who, under which lease, from when to when (µs; `None`: never recorded stopped).
struct Work<'a> {
    who: &'a str,
    token: Token,
    from: u64,
    to: Option<u64>,
}

/// The works a trace records, when none went on after a later grant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Works {
    /// Works recorded as stopped before any later lease was granted.
    pub stopped: usize,
    /// Works never recorded as stopped: the trace cannot say when they ended.
    pub unknown: usize,
}

/// Checks `work_stopped_before_successor`: the works counted when it holds, the first overlap
/// (by the successor's grant) when it does not.
///
/// ```
/// use fencecheck::check::trace::work_stopped_before_successor;
/// use fencecheck::protocol::{Observed, Token, Trace};
///
/// let (t1, t2) = (Token::new(1), Token::new(2));
/// let mut t = Trace::new();
/// t.record(0, "A", Observed::Granted { token: t1 });
/// t.record(10, "A", Observed::WorkStarted { token: t1 });
/// t.record(5_000, "B", Observed::Granted { token: t2 });
/// t.record(7_000, "A", Observed::WorkStopped { token: t1 });
/// let overlap = work_stopped_before_successor(&t).unwrap_err();
/// assert_eq!((overlap.holder.as_str(), overlap.after_grant_us), ("A", 2_000));
/// ```
pub fn work_stopped_before_successor(trace: &Trace) -> Result<Works, Box<WorkOverlap>> {
    let events = trace.events();
    let end = events.last().map_or(0, |e| e.at_us);
    let mut works: Vec<Work> = Vec::new();
    let mut grants: Vec<(u64, &str, Token)> = Vec::new();
    for e in events {
        match e.what {
            Observed::Granted { token } => grants.push((e.at_us, &e.who, token)),
            Observed::WorkStarted { token } => works.push(Work {
                who: &e.who,
                token,
                from: e.at_us,
                to: None,
            }),
            Observed::WorkStopped { token } => {
                let open = works
                    .iter_mut()
                    .rev()
                    .find(|w| w.who == e.who && w.token == token && w.to.is_none());
                if let Some(w) = open {
                    w.to = Some(e.at_us);
                }
            }
            _ => {}
        }
    }
    let mut first: Option<WorkOverlap> = None;
    let mut count = Works::default();
    for w in &works {
        let Some(stop) = w.to else {
            count.unknown += 1;
            continue;
        };
        count.stopped += 1;
        let Some(&(granted, successor, later)) = grants
            .iter()
            .find(|&&(at, _, token)| token > w.token && at < stop)
        else {
            continue;
        };
        let both = works
            .iter()
            .filter(|o| o.token == later && o.who == successor)
            .map(|o| {
                stop.min(o.to.unwrap_or(end))
                    .saturating_sub(w.from.max(o.from))
            })
            .max()
            .filter(|&us| us > 0);
        if first.as_ref().is_none_or(|f| granted < f.granted_us) {
            first = Some(WorkOverlap {
                holder: w.who.to_string(),
                token: w.token,
                stopped_us: stop,
                successor: successor.to_string(),
                successor_token: later,
                granted_us: granted,
                after_grant_us: stop - granted,
                both_worked_us: both,
            });
        }
    }
    match first {
        Some(overlap) => Err(Box::new(overlap)),
        None => Ok(count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> Token {
        Token::new(n)
    }

    /// A holds lease 1 and works from 1 ms; B is granted lease 2 at 50 ms and works from 51 ms
    /// to 60 ms; A's work stops at `a_stops` (never, when `None`).
    fn handover(a_stops: Option<u64>) -> Trace {
        let mut tr = Trace::new();
        tr.record(0, "A", Observed::Granted { token: t(1) });
        tr.record(1_000, "A", Observed::WorkStarted { token: t(1) });
        let mut later = vec![
            (50_000, "B", Observed::Granted { token: t(2) }),
            (51_000, "B", Observed::WorkStarted { token: t(2) }),
            (60_000, "B", Observed::WorkStopped { token: t(2) }),
        ];
        if let Some(at) = a_stops {
            later.push((at, "A", Observed::WorkStopped { token: t(1) }));
        }
        later.sort_by_key(|&(at, _, _)| at);
        for (at, who, what) in later {
            tr.record(at, who, what);
        }
        tr
    }

    #[test]
    fn work_that_stops_before_the_next_grant_holds() {
        let both = Works {
            stopped: 2,
            unknown: 0,
        };
        assert_eq!(
            work_stopped_before_successor(&handover(Some(49_999))),
            Ok(both)
        );
        assert_eq!(
            work_stopped_before_successor(&Trace::new()),
            Ok(Works::default())
        );
    }

    #[test]
    fn work_that_runs_past_the_next_grant_is_named_with_its_milliseconds() {
        let overlap = work_stopped_before_successor(&handover(Some(55_000))).unwrap_err();
        assert_eq!(
            overlap.to_string(),
            "work_stopped_before_successor is violated: A worked under lease 1 until 55.000 ms, \
             5.000 ms after B was granted lease 2 at 50.000 ms; both worked at once for 4.000 ms"
        );
        // Never recorded as stopped: no verdict on it, and it is counted apart.
        let open = Works {
            stopped: 1,
            unknown: 1,
        };
        assert_eq!(work_stopped_before_successor(&handover(None)), Ok(open));
    }

    #[test]
    fn an_older_leases_grant_after_a_work_is_no_successor() {
        let mut tr = Trace::new();
        tr.record(0, "B", Observed::Granted { token: t(2) });
        tr.record(1, "B", Observed::WorkStarted { token: t(2) });
        tr.record(2, "A", Observed::Granted { token: t(1) });
        tr.record(3, "B", Observed::WorkStopped { token: t(2) });
        let one = Works {
            stopped: 1,
            unknown: 0,
        };
        assert_eq!(work_stopped_before_successor(&tr), Ok(one));
    }
}
