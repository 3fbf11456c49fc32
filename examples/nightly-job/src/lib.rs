//! A nightly-job runner, written the way people write them: every instance asks for the lease,
//! and the one that gets it runs tonight's job, which ends by writing the night's report.
//!
//! The runner is sans-IO (`fencecheck::client::Client`): the same state machine drives the real
//! program (which turns its commands into calls on a lock and a database) and the check in
//! `tests/`, which places two instances in fencecheck's world of expiring leases and delayed
//! messages.
//!
//! [`Guard::CheckLease`] makes sure it still holds the lease right before it writes, and writes
//! without the token: a pause between the check and the write lets a stale report land after
//! the next holder's. [`Guard::Token`] sends the lease's token with the write and lets the storage
//! refuse an older one: the reports stay in lease order, but two instances can each run the job
//! and store a report. [`Guard::Once`] keys the report by the night, so the second finds it done:
//! the job's effect is stored once.

use fencecheck::client::{Client, Command, Commands, Event, Lease};

/// How the runner guards the night's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Asks the lock whether the lease is still its own, then writes without the token.
    CheckLease,
    /// Writes with the lease's fencing token; the storage refuses an older one.
    Token,
    /// Writes once: the report is keyed by the night, and a second write finds it done.
    Once,
}

/// One instance of the runner.
#[derive(Clone, Copy, Debug)]
pub struct Runner(pub Guard);

/// Where an instance is in tonight's run.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Night {
    /// Waiting for the lease.
    Waiting,
    /// Holds the lease and asked whether it still does.
    Checking(Lease),
    /// The job ran; its report is on the way to the database.
    Reporting(Lease),
    /// Done for tonight (its report stored, refused, or not its turn).
    Done,
}

impl Client for Runner {
    type State = Night;

    fn start(&self, out: &mut Commands) -> Night {
        out.acquire();
        Night::Waiting
    }

    fn on_event(&self, night: &Night, event: &Event, out: &mut Commands) -> Option<Night> {
        match (night, event) {
            (Night::Waiting, Event::Granted(lease)) => match self.0 {
                Guard::CheckLease => {
                    out.check_lease(lease); // "do I still hold it?"
                    Some(Night::Checking(*lease))
                }
                Guard::Token => {
                    out.write(lease); // run the job; the report goes with the token
                    Some(Night::Reporting(*lease))
                }
                Guard::Once => {
                    out.write_once(lease); // run the job; the report is keyed by the night
                    Some(Night::Reporting(*lease))
                }
            },
            (Night::Checking(lease), Event::LeaseStatus { live: true, .. }) => {
                out.write_unfenced(lease); // yes: run the job, send the report
                Some(Night::Reporting(*lease))
            }
            (Night::Checking(_), Event::LeaseStatus { live: false, .. }) => Some(Night::Done),
            (Night::Reporting(lease), Event::WriteAccepted { .. } | Event::AlreadyDone { .. }) => {
                out.release(lease);
                Some(Night::Done)
            }
            (Night::Reporting(_), Event::WriteRejected { .. }) => Some(Night::Done),
            _ => None,
        }
    }

    fn holds(&self, night: &Night) -> bool {
        matches!(night, Night::Checking(_) | Night::Reporting(_))
    }

    fn finished(&self, night: &Night) -> bool {
        *night == Night::Done
    }

    fn narrate(
        &self,
        me: &str,
        event: &Event,
        _before: &Night,
        _after: &Night,
        sent: &[Command],
    ) -> Option<String> {
        Some(match (event, sent) {
            (Event::Granted(lease), [Command::CheckLease(_)]) => format!(
                "{me} gets the lease (token {}) and makes sure it still holds it",
                lease.token()
            ),
            (Event::Granted(lease), [Command::Write(_)]) => format!(
                "{me} gets the lease (token {}), runs the job, sends the report with the token",
                lease.token()
            ),
            (Event::Granted(lease), _) => format!(
                "{me} gets the lease (token {}), runs the job, sends the night's report",
                lease.token()
            ),
            (Event::AlreadyDone { .. }, _) => format!("{me} hears tonight's report exists"),
            (Event::LeaseStatus { live: true, .. }, _) => {
                format!("{me} hears the lease is still its own, runs the job, sends the report")
            }
            (Event::WriteAccepted { .. }, _) => format!("{me} hears the report is stored"),
            _ => return None,
        })
    }
}
