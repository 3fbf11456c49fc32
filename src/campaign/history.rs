//! The campaign's history: the lines the workers printed become one trial's record — the trace
//! of lock and storage observations, the counter as a fenced register's operations, and the
//! faults the nemesis injected — on one clock that starts at the trial's first line.

use crate::check::campaign::{Fault, TrialRecord};
use crate::check::linearize::{Answer, Call, Operation};
use crate::protocol::{Observed, Token, Trace};

/// A line a worker printed: who, when (µs, CLOCK_MONOTONIC), what.
pub(super) struct Line {
    pub(super) worker: usize,
    pub(super) at: u64,
    pub(super) text: String,
}

/// A fault in force or over, on the machine's monotonic clock (µs).
#[derive(Clone, Debug)]
pub(super) struct Struck {
    pub(super) who: String,
    pub(super) what: String,
    pub(super) from: u64,
    pub(super) to: u64,
}

/// The trial's record from its workers' lines and its faults; the final value and the read of
/// it are added once the workers have exited.
pub(super) fn record(mut lines: Vec<Line>, faults: Vec<Struck>, workers: usize) -> TrialRecord {
    lines.sort_by_key(|l| l.at);
    let origin = lines.first().map_or(0, |l| l.at);
    let mut trace = Trace::new();
    for l in &lines {
        if let Some(what) = observed(&l.text) {
            trace.record(l.at - origin, &format!("w{}", l.worker + 1), what);
        }
    }
    let faults = faults
        .into_iter()
        .map(|s| Fault {
            who: s.who,
            what: s.what,
            from_us: s.from.saturating_sub(origin),
            to_us: s.to.saturating_sub(origin),
        })
        .collect();
    TrialRecord {
        register: register_history(&lines, origin, workers),
        trace,
        final_value: 0,
        faults,
    }
}

/// The workers' writes as operations on the counter's fenced register: each write with its
/// token and the value it wrote (the counter it read plus one), from when it was sent to its
/// answer.
fn register_history(lines: &[Line], origin: u64, workers: usize) -> Vec<Operation<u64>> {
    let mut ops = Vec::new();
    let mut read: Vec<Option<u64>> = vec![None; workers];
    let mut sent: Vec<Option<(Token, u64)>> = vec![None; workers];
    for l in lines {
        let w = l.worker;
        let mut words = l.text.split(' ');
        let kind = words.next().unwrap_or_default();
        let mut number = || words.next().and_then(|t| t.parse::<u64>().ok());
        let answer = match kind {
            "read" => {
                read[w] = number();
                continue;
            }
            "write-sent" => {
                sent[w] = number().map(|t| (Token::new(t), l.at - origin));
                continue;
            }
            "accepted" => Answer::Accepted,
            "rejected" => {
                let (_, highest) = (number(), number());
                let Some(highest) = highest else { continue };
                Answer::Stale {
                    highest: Token::new(highest),
                }
            }
            _ => continue,
        };
        let Some((token, invoked)) = sent[w].take() else {
            continue;
        };
        let value = read[w].take().map_or(0, |v| v + 1);
        ops.push(Operation {
            key: 0,
            call: Call::Write { token, value },
            invoked,
            completed: Some((l.at - origin, answer)),
        });
    }
    for (w, s) in sent.into_iter().enumerate() {
        if let Some((token, invoked)) = s {
            let value = read[w].map_or(0, |v| v + 1);
            ops.push(Operation {
                key: 0,
                call: Call::Write { token, value },
                invoked,
                completed: None,
            });
        }
    }
    ops
}

/// What a worker's line says it observed (`read` and `done` are not observations of the lock or
/// the storage).
fn observed(text: &str) -> Option<Observed> {
    Observed::from_words(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::worker::counter;

    #[test]
    fn worker_lines_become_observations() {
        let t = Token::new(7);
        assert_eq!(observed("acquire-sent"), Some(Observed::AcquireSent));
        assert_eq!(
            observed("granted 7 300000"),
            Some(Observed::Granted { token: t })
        );
        assert_eq!(observed("busy"), Some(Observed::Busy));
        assert_eq!(
            observed("write-sent 7"),
            Some(Observed::WriteSent { token: t })
        );
        assert_eq!(
            observed("accepted 7"),
            Some(Observed::WriteAccepted { token: t })
        );
        assert_eq!(
            observed("rejected 7 9"),
            Some(Observed::WriteRejected {
                token: t,
                highest: Token::new(9)
            })
        );
        assert_eq!(
            observed("release-sent 7"),
            Some(Observed::ReleaseSent { token: t })
        );
        assert_eq!(
            observed("released 7 false"),
            Some(Observed::Released {
                token: t,
                ok: false
            })
        );
        assert_eq!(observed("read 12"), None);
        assert_eq!(observed("granted x"), None);
        assert_eq!((counter(b"41"), counter(b""), counter(b"junk")), (41, 0, 0));
    }

    #[test]
    fn the_workers_writes_become_register_operations() {
        let line = |worker, at, text: &str| Line {
            worker,
            at,
            text: text.to_string(),
        };
        let lines = [
            line(0, 100, "write-sent 5"),
            line(0, 110, "read 3"),
            line(0, 120, "accepted 5"),
            line(1, 130, "write-sent 4"),
            line(1, 140, "rejected 4 5"),
            line(0, 150, "write-sent 6"),
        ];
        let ops = register_history(&lines, 100, 2);
        let write = |t, value| Call::Write {
            token: Token::new(t),
            value,
        };
        assert_eq!(ops.len(), 3);
        assert_eq!(
            (&ops[0].call, ops[0].invoked, &ops[0].completed),
            (&write(5, 4), 0, &Some((20, Answer::Accepted)))
        );
        assert_eq!(
            (&ops[1].call, &ops[1].completed),
            (
                &write(4, 0),
                &Some((
                    40,
                    Answer::Stale {
                        highest: Token::new(5)
                    }
                ))
            )
        );
        assert_eq!((&ops[2].call, &ops[2].completed), (&write(6, 0), &None));
    }
}
