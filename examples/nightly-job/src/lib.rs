//! A nightly-job runner, written the way people write them: every instance asks for the lease,
//! and the one that gets it runs tonight's job, which ends by writing the night's report.
//!
//! The runner is sans-IO (`fencecheck::client::Client`): the same state machine drives the real
//! program (which turns its commands into calls on a lock and a database) and the check in
//! `tests/`, which places two instances in fencecheck's world of expiring leases and delayed
//! messages.
//!
//! [`Runner::naive`] makes sure it still holds the lease right before it writes, and writes
//! without the token: a pause between the check and the write lets a stale report land after
//! the next holder's. [`Runner::fenced`] sends the lease's token with the write and lets the
//! storage refuse an older one.

use fencecheck::client::{Client, Command, Commands, Event, Grant};

/// One instance of the runner.
#[derive(Clone, Copy, Debug)]
pub struct Runner {
    /// Whether it writes with the lease's token (else it checks the lease, then writes without).
    fenced: bool,
}

impl Runner {
    /// Checks the lease, then writes the report without the token.
    pub fn naive() -> Runner {
        Runner { fenced: false }
    }

    /// Writes the report with the lease's token.
    pub fn fenced() -> Runner {
        Runner { fenced: true }
    }
}

/// Where an instance is in tonight's run.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Night {
    /// Waiting for the lease.
    Waiting,
    /// Holds the lease and asked whether it still does.
    Checking(Grant),
    /// The job ran; its report is on the way to the database.
    Reporting(Grant),
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
            (Night::Waiting, Event::Granted(lease)) if self.fenced => {
                out.write(lease); // the report, with the lease's token
                Some(Night::Reporting(*lease))
            }
            (Night::Waiting, Event::Granted(lease)) => {
                out.check_lease(lease); // "do I still hold it?"
                Some(Night::Checking(*lease))
            }
            (Night::Checking(lease), Event::LeaseStatus { live: true, .. }) => {
                out.write_unfenced(lease); // yes: run the job, send the report
                Some(Night::Reporting(*lease))
            }
            (Night::Checking(_), Event::LeaseStatus { live: false, .. }) => Some(Night::Done),
            (Night::Reporting(lease), Event::WriteAccepted { .. }) => {
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
            (Event::Granted(lease), _) => format!(
                "{me} gets the lease (token {}), runs the job, sends the report with the token",
                lease.token()
            ),
            (Event::LeaseStatus { live: true, .. }, _) => {
                format!("{me} hears the lease is still its own, runs the job, sends the report")
            }
            (Event::WriteAccepted { .. }, _) => format!("{me} hears the report is stored"),
            _ => return None,
        })
    }
}
