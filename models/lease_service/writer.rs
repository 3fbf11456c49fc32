//! The catalog's client: takes the lease, writes with its token, releases.

use super::{Client, Command, Commands, Event, Lease};

/// The catalog's client's view of the lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientState {
    /// Its acquire request is in flight or waiting; `left` writes still to make.
    Acquiring {
        /// Writes still to make.
        left: u8,
        /// Times it may still ask again after losing its lease.
        retries: u8,
    },
    /// It believes it holds the lease `grant`; one write is in flight.
    Holding {
        /// The lease it was granted.
        grant: Lease,
        /// Writes still to make, counting the one in flight.
        left: u8,
        /// Times it may still ask again after losing its lease.
        retries: u8,
    },
    /// It has made all its writes (and released the lease, unless a rejection told it the lease
    /// was already lost).
    Done,
}

/// The catalog's client: asks for the lease, makes `writes` writes one at a time with its token,
/// then releases. A rejected write tells it the lease was lost: it stops believing and, with
/// retries left and writes to make, asks again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Writer {
    /// Writes to make.
    pub writes: u8,
    /// Times it asks for the lease again after learning it lost it.
    pub retries: u8,
}

impl Client for Writer {
    type State = ClientState;

    fn start(&self, out: &mut Commands) -> ClientState {
        out.acquire();
        ClientState::Acquiring {
            left: self.writes,
            retries: self.retries,
        }
    }

    fn on_event(
        &self,
        state: &ClientState,
        event: &Event,
        out: &mut Commands,
    ) -> Option<ClientState> {
        match (state, event) {
            (ClientState::Acquiring { left, retries }, Event::Granted(grant)) => {
                out.write(grant);
                Some(ClientState::Holding {
                    grant: *grant,
                    left: *left,
                    retries: *retries,
                })
            }
            (
                ClientState::Holding {
                    grant,
                    left,
                    retries,
                },
                Event::WriteAccepted { .. },
            ) => {
                if *left > 1 {
                    out.write(grant);
                    Some(ClientState::Holding {
                        grant: *grant,
                        left: left - 1,
                        retries: *retries,
                    })
                } else {
                    out.release(grant);
                    Some(ClientState::Done)
                }
            }
            (ClientState::Holding { left, retries, .. }, Event::WriteRejected { .. }) => {
                // The lease was lost: stop believing; ask again for the writes still to make, if
                // the retry budget allows, else give them up.
                if *left > 1 && *retries > 0 {
                    out.acquire();
                    Some(ClientState::Acquiring {
                        left: left - 1,
                        retries: retries - 1,
                    })
                } else {
                    Some(ClientState::Done)
                }
            }
            _ => None,
        }
    }

    fn holds(&self, state: &ClientState) -> bool {
        matches!(state, ClientState::Holding { .. })
    }

    fn finished(&self, state: &ClientState) -> bool {
        *state == ClientState::Done
    }

    fn narrate(
        &self,
        me: &str,
        event: &Event,
        _before: &ClientState,
        after: &ClientState,
        _sent: &[Command],
    ) -> Option<String> {
        Some(match event {
            Event::Granted(grant) => {
                let token = grant.token();
                format!(
                    "{me} receives its lease (token {token}) and sends a write with token {token}"
                )
            }
            Event::WriteAccepted { grant } => {
                let token = grant.token();
                let next = match after {
                    ClientState::Done => format!("and releases the lease (token {token})"),
                    _ => format!("and sends its next write with token {token}"),
                };
                format!("{me} learns its write is stored {next}")
            }
            Event::WriteRejected { grant, highest } => format!(
                "{me} learns its write was refused (token {} < {highest}), stops believing it \
                 holds the lease and asks again",
                grant.token()
            ),
            _ => return None,
        })
    }
}
