//! What a lock client observes, as one event schema every backend and the in-process lock can
//! record: requests sent and the answers that came back, writes sent and what the storage said,
//! and the client's own conclusion that its lease is gone.
//!
//! A [`Trace`] holds the events of every client of one lock (and its storage) in the order they
//! were observed, each stamped with the time it was observed in microseconds on one clock.
//! `check::trace` replays a trace through the models' own lock service and storage and names the
//! first event they cannot explain.

use super::token::Token;
use std::fmt;

/// One thing a client observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Observed {
    /// It asked for the lease.
    AcquireSent,
    /// The lease is its own, with this token.
    Granted {
        /// The fencing token.
        token: Token,
    },
    /// The service said the lease is held by someone else.
    Busy,
    /// It asked the service to extend its lease.
    RenewSent {
        /// The lease's token.
        token: Token,
    },
    /// The service answered a renewal: extended (`ok`) or no longer its lease.
    Renewed {
        /// The lease's token.
        token: Token,
        /// Whether the lease was extended.
        ok: bool,
    },
    /// It concluded that its lease is gone (its deadline passed, a renewal failed, the server
    /// said so). The client's own inference: no server step.
    LeaseLost {
        /// The lease's token.
        token: Token,
    },
    /// It sent a write under this token.
    WriteSent {
        /// The writer's token.
        token: Token,
    },
    /// The storage stored the write.
    WriteAccepted {
        /// The writer's token.
        token: Token,
    },
    /// The storage refused the write: it had accepted `highest`, newer than the writer's.
    WriteRejected {
        /// The writer's token.
        token: Token,
        /// The highest token the storage had accepted.
        highest: Token,
    },
    /// It asked the service to release its lease.
    ReleaseSent {
        /// The lease's token.
        token: Token,
    },
    /// The service answered the release: freed (`ok`) or no longer its lease.
    Released {
        /// The lease's token.
        token: Token,
        /// Whether the lease was still its own and is now free.
        ok: bool,
    },
    /// The guarded work began under this lease (a supervised command started, a worker entered
    /// its critical section). The client's own record: no server step.
    WorkStarted {
        /// The lease's token.
        token: Token,
    },
    /// The guarded work is over (the command's whole process group reaped, the critical
    /// section left). The client's own record: no server step.
    WorkStopped {
        /// The lease's token.
        token: Token,
    },
}

impl Observed {
    /// Whether this is a request (sent by the client) rather than an answer or an inference.
    pub fn is_request(&self) -> bool {
        matches!(
            self,
            Observed::AcquireSent
                | Observed::RenewSent { .. }
                | Observed::WriteSent { .. }
                | Observed::ReleaseSent { .. }
        )
    }
}

impl fmt::Display for Observed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Observed::AcquireSent => write!(f, "asks for the lease"),
            Observed::Granted { token } => write!(f, "is granted the lease, token {token}"),
            Observed::Busy => write!(f, "is told the lease is busy"),
            Observed::RenewSent { token } => write!(f, "asks to renew lease {token}"),
            Observed::Renewed { token, ok: true } => write!(f, "has lease {token} renewed"),
            Observed::Renewed { token, ok: false } => {
                write!(f, "is refused the renewal of lease {token}")
            }
            Observed::LeaseLost { token } => write!(f, "concludes lease {token} is lost"),
            Observed::WriteSent { token } => write!(f, "writes with token {token}"),
            Observed::WriteAccepted { token } => write!(f, "has its write ({token}) accepted"),
            Observed::WriteRejected { token, highest } => {
                write!(
                    f,
                    "has its write ({token}) rejected, storage holds {highest}"
                )
            }
            Observed::ReleaseSent { token } => write!(f, "releases lease {token}"),
            Observed::Released { token, ok: true } => write!(f, "has lease {token} released"),
            Observed::Released { token, ok: false } => {
                write!(f, "is told lease {token} was no longer its own")
            }
            Observed::WorkStarted { token } => write!(f, "starts its work under lease {token}"),
            Observed::WorkStopped { token } => {
                write!(f, "has stopped its work under lease {token}")
            }
        }
    }
}

impl Observed {
    /// The observation as words, the form trace files keep: a keyword and its numbers
    /// (`granted 7`, `renewed 7 true`, `rejected 7 9`). [`Observed::from_words`] reads it back.
    ///
    /// ```
    /// use fencecheck::protocol::{Observed, Token};
    ///
    /// let seen = Observed::WriteRejected { token: Token::new(7), highest: Token::new(9) };
    /// assert_eq!(seen.words(), "rejected 7 9");
    /// assert_eq!(Observed::from_words("rejected 7 9"), Ok(seen));
    /// ```
    pub fn words(&self) -> String {
        match self {
            Observed::AcquireSent => "acquire-sent".into(),
            Observed::Granted { token } => format!("granted {token}"),
            Observed::Busy => "busy".into(),
            Observed::RenewSent { token } => format!("renew-sent {token}"),
            Observed::Renewed { token, ok } => format!("renewed {token} {ok}"),
            Observed::LeaseLost { token } => format!("lease-lost {token}"),
            Observed::WriteSent { token } => format!("write-sent {token}"),
            Observed::WriteAccepted { token } => format!("accepted {token}"),
            Observed::WriteRejected { token, highest } => format!("rejected {token} {highest}"),
            Observed::ReleaseSent { token } => format!("release-sent {token}"),
            Observed::Released { token, ok } => format!("released {token} {ok}"),
            Observed::WorkStarted { token } => format!("work-started {token}"),
            Observed::WorkStopped { token } => format!("work-stopped {token}"),
        }
    }

    /// Reads [`Observed::words`] back. Words after the ones an observation needs are ignored
    /// (a grant may be followed by its TTL). The error names what was expected.
    pub fn from_words(text: &str) -> Result<Observed, String> {
        let mut words = text.split_whitespace();
        let kind = words.next().ok_or("an empty observation")?;
        let mut token = |what: &str| -> Result<Token, String> {
            let word = words
                .next()
                .ok_or_else(|| format!("`{kind}` needs {what} after it"))?;
            word.parse()
                .map(Token::new)
                .map_err(|_| format!("`{kind}`: {what} must be a whole number, not {word:?}"))
        };
        let seen = match kind {
            "acquire-sent" => Observed::AcquireSent,
            "granted" => Observed::Granted {
                token: token("a token")?,
            },
            "busy" => Observed::Busy,
            "renew-sent" => Observed::RenewSent {
                token: token("a token")?,
            },
            "lease-lost" => Observed::LeaseLost {
                token: token("a token")?,
            },
            "write-sent" => Observed::WriteSent {
                token: token("a token")?,
            },
            "accepted" => Observed::WriteAccepted {
                token: token("a token")?,
            },
            "rejected" => Observed::WriteRejected {
                token: token("a token")?,
                highest: token("the storage's highest token")?,
            },
            "release-sent" => Observed::ReleaseSent {
                token: token("a token")?,
            },
            "work-started" => Observed::WorkStarted {
                token: token("a token")?,
            },
            "work-stopped" => Observed::WorkStopped {
                token: token("a token")?,
            },
            "renewed" | "released" => {
                let t = token("a token")?;
                let ok = match words.next() {
                    Some("true") => true,
                    Some("false") => false,
                    other => {
                        return Err(format!(
                            "`{kind}` needs true or false after its token, not {other:?}"
                        ))
                    }
                };
                if kind == "renewed" {
                    Observed::Renewed { token: t, ok }
                } else {
                    Observed::Released { token: t, ok }
                }
            }
            other => {
                return Err(format!(
                    "unknown observation {other:?} (expected acquire-sent, granted, busy, \
                     renew-sent, renewed, lease-lost, write-sent, accepted, rejected, \
                     release-sent, released, work-started or work-stopped)"
                ))
            }
        };
        Ok(seen)
    }
}

/// The comment that names, in a trace file, the TTL the lock service granted (`# ttl-us N`):
/// `fencecheck validate` replays with it.
pub const TTL_NOTE: &str = "ttl-us";

/// One observation: when (microseconds on the trace's clock), who, what.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TraceEvent {
    /// When it was observed, in microseconds since the trace began.
    pub at_us: u64,
    /// The client that observed it.
    pub who: String,
    /// What it observed.
    pub what: Observed,
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.at_us / 1000;
        let frac = self.at_us % 1000;
        write!(f, "{ms:>6}.{frac:03} ms  {} {}", self.who, self.what)
    }
}

impl TraceEvent {
    /// The event as one line of a trace file: time (µs), who and the observation's
    /// [words](Observed::words), separated by tabs (a tab in `who` becomes a space).
    ///
    /// ```
    /// use fencecheck::protocol::{Observed, Token, TraceEvent};
    ///
    /// let e = TraceEvent { at_us: 1_200, who: "host:42".into(), what: Observed::Granted { token: Token::new(3) } };
    /// assert_eq!(e.line(), "1200\thost:42\tgranted 3");
    /// assert_eq!(TraceEvent::parse_line(&e.line()), Ok(e));
    /// ```
    pub fn line(&self) -> String {
        format!(
            "{}\t{}\t{}",
            self.at_us,
            self.who.replace('\t', " "),
            self.what.words()
        )
    }

    /// Reads [`TraceEvent::line`] back; the error says what the line lacks.
    pub fn parse_line(line: &str) -> Result<TraceEvent, String> {
        let mut fields = line.splitn(3, '\t');
        let (Some(at), Some(who), Some(what)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(
                "expected three tab-separated fields: microseconds, who, observation".into(),
            );
        };
        let at_us = at
            .trim()
            .parse()
            .map_err(|_| format!("the time must be whole microseconds, not {at:?}"))?;
        Ok(TraceEvent {
            at_us,
            who: who.to_string(),
            what: Observed::from_words(what)?,
        })
    }
}

/// The observations of every client of one lock, in the order they were observed.
///
/// ```
/// use fencecheck::protocol::{Observed, Token, Trace};
///
/// let mut trace = Trace::new();
/// trace.record(0, "A", Observed::AcquireSent);
/// trace.record(1_200, "A", Observed::Granted { token: Token::new(1) });
/// assert_eq!(trace.len(), 2);
/// assert!(trace.to_string().contains("A is granted the lease, token 1"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    events: Vec<TraceEvent>,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// `who` observed `what` at `at_us`. An event stamped earlier than the one before it is
    /// stamped with the earlier event's time: observations are kept in the order they were made.
    pub fn record(&mut self, at_us: u64, who: &str, what: Observed) {
        let at_us = self.events.last().map_or(at_us, |e| e.at_us.max(at_us));
        self.events.push(TraceEvent {
            at_us,
            who: who.to_string(),
            what,
        });
    }

    /// The events in the order they were observed.
    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// How many events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// No events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

impl fmt::Display for Trace {
    /// A timeline, one event per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.events.iter().enumerate() {
            writeln!(f, "{:>3}. {e}", i + 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_their_order_and_their_time_never_goes_back() {
        let mut t = Trace::new();
        assert!(t.is_empty());
        t.record(5_000, "A", Observed::AcquireSent);
        t.record(4_000, "B", Observed::AcquireSent);
        t.record(
            7_250,
            "A",
            Observed::Granted {
                token: Token::new(3),
            },
        );
        assert_eq!(t.len(), 3);
        assert!(!t.is_empty());
        let at: Vec<u64> = t.events().iter().map(|e| e.at_us).collect();
        assert_eq!(at, [5_000, 5_000, 7_250]);
        assert_eq!(t.events()[1].who, "B");
        assert_eq!(
            t.to_string(),
            "  1.      5.000 ms  A asks for the lease\n  \
             2.      5.000 ms  B asks for the lease\n  \
             3.      7.250 ms  A is granted the lease, token 3\n"
        );
    }

    #[test]
    fn every_observation_survives_its_words_and_bad_lines_say_what_they_lack() {
        let t = Token::new(5);
        let all = [
            Observed::AcquireSent,
            Observed::Granted { token: t },
            Observed::Busy,
            Observed::RenewSent { token: t },
            Observed::Renewed { token: t, ok: true },
            Observed::Renewed {
                token: t,
                ok: false,
            },
            Observed::LeaseLost { token: t },
            Observed::WriteSent { token: t },
            Observed::WriteAccepted { token: t },
            Observed::WriteRejected {
                token: t,
                highest: Token::new(6),
            },
            Observed::ReleaseSent { token: t },
            Observed::Released { token: t, ok: true },
            Observed::Released {
                token: t,
                ok: false,
            },
            Observed::WorkStarted { token: t },
            Observed::WorkStopped { token: t },
        ];
        for seen in all {
            assert_eq!(Observed::from_words(&seen.words()), Ok(seen));
            let e = TraceEvent {
                at_us: 42,
                who: "a\tb".into(),
                what: seen,
            };
            let back = TraceEvent::parse_line(&e.line()).unwrap();
            assert_eq!(
                (back.at_us, back.who.as_str(), back.what),
                (42, "a b", seen)
            );
        }
        assert_eq!(
            Observed::from_words("granted 7 300000"),
            Ok(Observed::Granted {
                token: Token::new(7)
            })
        );
        for (bad, says) in [
            ("", "empty"),
            ("granted", "needs a token"),
            ("granted x", "whole number"),
            ("renewed 3 maybe", "true or false"),
            ("stolen 3", "unknown observation"),
        ] {
            let err = Observed::from_words(bad).unwrap_err();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
        assert!(TraceEvent::parse_line("12 granted 3")
            .unwrap_err()
            .contains("three tab-separated"));
        assert!(TraceEvent::parse_line("soon\tA\tbusy")
            .unwrap_err()
            .contains("microseconds"));
    }

    #[test]
    fn every_observation_reads_as_a_sentence() {
        let t = Token::new(4);
        let h = Token::new(9);
        let cases = [
            (Observed::AcquireSent, "asks for the lease", true),
            (
                Observed::Granted { token: t },
                "is granted the lease, token 4",
                false,
            ),
            (Observed::Busy, "is told the lease is busy", false),
            (
                Observed::RenewSent { token: t },
                "asks to renew lease 4",
                true,
            ),
            (
                Observed::Renewed { token: t, ok: true },
                "has lease 4 renewed",
                false,
            ),
            (
                Observed::Renewed {
                    token: t,
                    ok: false,
                },
                "is refused the renewal of lease 4",
                false,
            ),
            (
                Observed::LeaseLost { token: t },
                "concludes lease 4 is lost",
                false,
            ),
            (
                Observed::WriteSent { token: t },
                "writes with token 4",
                true,
            ),
            (
                Observed::WriteAccepted { token: t },
                "has its write (4) accepted",
                false,
            ),
            (
                Observed::WriteRejected {
                    token: t,
                    highest: h,
                },
                "has its write (4) rejected, storage holds 9",
                false,
            ),
            (Observed::ReleaseSent { token: t }, "releases lease 4", true),
            (
                Observed::Released { token: t, ok: true },
                "has lease 4 released",
                false,
            ),
            (
                Observed::Released {
                    token: t,
                    ok: false,
                },
                "is told lease 4 was no longer its own",
                false,
            ),
        ];
        for (what, text, request) in cases {
            assert_eq!(what.to_string(), text);
            assert_eq!(what.is_request(), request, "{text}");
        }
    }
}
