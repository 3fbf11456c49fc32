//! The replicated state machine: the protocol core's [`LeaseTable`] for each lock and a core
//! [`Fence`] for each stored key, changed only by committed log entries.
//!
//! Every node applies the same entries in the same order, so every node computes the same tokens
//! and the same verdicts. Time inside the machine is the proposer's clock stamped on each command,
//! never lowered: `now` is the largest stamp applied so far.

use crate::protocol::{Acquire, Fence, FencePolicy, LeaseError, LeaseTable, Token};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One command in the Raft log: what a client asked for, stamped with the proposing node's clock
/// (µs since the Unix epoch) when it received the request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    /// The proposer's clock when it received the request.
    pub at_us: u64,
    /// What to do.
    pub op: Op,
}

/// A client's request, applied by the state machine in log order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Take lock `lock` for `owner` for `ttl_us` if it is free or expired.
    Acquire {
        /// The lock's name.
        lock: String,
        /// Who asks.
        owner: String,
        /// The lease's time to live.
        ttl_us: u64,
    },
    /// Renew `owner`'s lease with `token` for another `ttl_us`.
    Extend {
        /// The lock's name.
        lock: String,
        /// The holder.
        owner: String,
        /// Its lease's token.
        token: u64,
        /// The new time to live.
        ttl_us: u64,
    },
    /// Release `owner`'s lease with `token`.
    Release {
        /// The lock's name.
        lock: String,
        /// The holder.
        owner: String,
        /// Its lease's token.
        token: u64,
    },
    /// Publish `value` under `owner`'s live lease with `token`.
    Publish {
        /// The lock's name.
        lock: String,
        /// The holder.
        owner: String,
        /// Its lease's token.
        token: u64,
        /// What to publish.
        value: String,
    },
    /// Who holds lock `lock`.
    Holder {
        /// The lock's name.
        lock: String,
    },
    /// Store `value` under `key` if `token` passes the key's fence.
    Write {
        /// The key.
        key: String,
        /// The writer's fencing token.
        token: u64,
        /// The value.
        value: Vec<u8>,
        /// The fence a new key gets (an existing key keeps its own).
        policy: FencePolicy,
    },
    /// The value stored under `key` and its token.
    Read {
        /// The key.
        key: String,
    },
}

impl Op {
    /// Whether applying this command twice leaves the state and the answer as applying it once
    /// does: reads, and writes and publications under one token (a fence accepts an equal
    /// token again; a later token's write in between refuses the repeat). A client may send these
    /// again after a node gave no answer; never an acquire, extend or release.
    pub fn repeatable(&self) -> bool {
        matches!(
            self,
            Op::Holder { .. } | Op::Read { .. } | Op::Write { .. } | Op::Publish { .. }
        )
    }
}

/// The state machine's answer to one [`Op`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Entries that carry no command (blank entries, membership changes).
    Nothing,
    /// The lease was granted (acquire) or renewed (extend) under `token`.
    Granted {
        /// The lease's fencing token.
        token: u64,
    },
    /// Another owner holds a live lease for `remaining_us` more.
    Busy {
        /// The holder.
        holder: String,
        /// How long its lease has left on the machine's clock.
        remaining_us: u64,
    },
    /// The owner and token do not hold a live lease (expired, released, or another's).
    NotHeld,
    /// Released; `live` tells whether the lease was still live (an expired one frees nothing).
    Released {
        /// The lease had not expired yet.
        live: bool,
    },
    /// Published.
    Published,
    /// The lock's current holder: owner, token and published value.
    Holder(Option<(String, u64, Option<String>)>),
    /// The write was stored.
    Accepted,
    /// The write was refused: the key had seen `highest`.
    Stale {
        /// The highest token the key had accepted.
        highest: u64,
    },
    /// A key's token and value.
    Value(Option<(u64, Vec<u8>)>),
    /// The lease table refused the operation (token space exhausted, clock overflow).
    Refused(String),
}

/// One lock's replicated row.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct LockRow {
    table: LeaseTable<String>,
    /// The value published under the current lease, with that lease's token.
    published: Option<(u64, String)>,
}

/// One stored key's replicated row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct KeyRow {
    fence: Fence,
    token: u64,
    value: Vec<u8>,
}

/// The replicated state: every lock's lease table and every key's fence and value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    now_us: u64,
    locks: BTreeMap<String, LockRow>,
    keys: BTreeMap<String, KeyRow>,
}

impl Machine {
    /// An empty machine.
    pub fn new() -> Self {
        Self::default()
    }

    /// The machine's clock: the largest stamp applied.
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// Applies one committed command.
    pub fn apply(&mut self, command: &Command) -> Reply {
        self.now_us = self.now_us.max(command.at_us);
        let now = self.now_us;
        match &command.op {
            Op::Acquire {
                lock,
                owner,
                ttl_us,
            } => {
                let row = self.locks.entry(lock.clone()).or_default();
                match row.table.acquire(owner.clone(), now, *ttl_us) {
                    Ok(Acquire::Granted(lease)) => {
                        row.published = None;
                        Reply::Granted {
                            token: lease.token.get(),
                        }
                    }
                    Ok(Acquire::Busy {
                        holder, expires_at, ..
                    }) => Reply::Busy {
                        holder,
                        remaining_us: expires_at.saturating_sub(now),
                    },
                    Err(e) => Reply::Refused(e.to_string()),
                }
            }
            Op::Extend {
                lock,
                owner,
                token,
                ttl_us,
            } => {
                let Some(row) = self.locks.get_mut(lock) else {
                    return Reply::NotHeld;
                };
                match row.table.extend(owner, Token::new(*token), now, *ttl_us) {
                    Ok(lease) => Reply::Granted {
                        token: lease.token.get(),
                    },
                    Err(e) => not_held(e),
                }
            }
            Op::Release { lock, owner, token } => {
                let Some(row) = self.locks.get_mut(lock) else {
                    return Reply::NotHeld;
                };
                match row.table.release(owner, Token::new(*token)) {
                    Ok(lease) => {
                        row.published = None;
                        Reply::Released {
                            live: lease.is_live(now),
                        }
                    }
                    Err(e) => not_held(e),
                }
            }
            Op::Publish {
                lock,
                owner,
                token,
                value,
            } => {
                let Some(row) = self.locks.get_mut(lock) else {
                    return Reply::NotHeld;
                };
                let holds = row
                    .table
                    .holder(now)
                    .is_some_and(|l| l.owner == *owner && l.token.get() == *token);
                if holds {
                    row.published = Some((*token, value.clone()));
                    Reply::Published
                } else {
                    Reply::NotHeld
                }
            }
            Op::Holder { lock } => Reply::Holder(self.locks.get(lock).and_then(|row| {
                let lease = row.table.holder(now)?;
                let token = lease.token.get();
                let value = row
                    .published
                    .as_ref()
                    .filter(|(t, _)| *t == token)
                    .map(|(_, v)| v.clone());
                Some((lease.owner.clone(), token, value))
            })),
            Op::Write {
                key,
                token,
                value,
                policy,
            } => {
                let row = self.keys.entry(key.clone()).or_insert_with(|| KeyRow {
                    fence: Fence::new(*policy),
                    token: *token,
                    value: Vec::new(),
                });
                match row.fence.admit(Token::new(*token)) {
                    Ok(()) => {
                        row.token = *token;
                        row.value.clone_from(value);
                        Reply::Accepted
                    }
                    Err(stale) => Reply::Stale {
                        highest: stale.highest.get(),
                    },
                }
            }
            Op::Read { key } => {
                Reply::Value(self.keys.get(key).map(|r| (r.token, r.value.clone())))
            }
        }
    }
}

fn not_held(e: LeaseError) -> Reply {
    match e {
        LeaseError::NotHolder { .. } | LeaseError::Expired { .. } => Reply::NotHeld,
        e => Reply::Refused(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(at_us: u64, op: Op) -> Command {
        Command { at_us, op }
    }

    fn acquire(owner: &str) -> Op {
        Op::Acquire {
            lock: "l".into(),
            owner: owner.into(),
            ttl_us: 100,
        }
    }

    fn write(token: u64, value: &str) -> Op {
        Op::Write {
            key: "k".into(),
            token,
            value: value.as_bytes().to_vec(),
            policy: FencePolicy::Fenced,
        }
    }

    #[test]
    fn a_paused_holders_write_is_fenced_after_the_lease_passes_on() {
        let mut m = Machine::new();
        assert_eq!(m.apply(&at(0, acquire("a"))), Reply::Granted { token: 1 });
        assert_eq!(
            m.apply(&at(50, acquire("b"))),
            Reply::Busy {
                holder: "a".into(),
                remaining_us: 50
            }
        );
        assert_eq!(m.apply(&at(100, acquire("b"))), Reply::Granted { token: 2 });
        assert_eq!(m.apply(&at(101, write(2, "b"))), Reply::Accepted);
        assert_eq!(
            m.apply(&at(102, write(1, "a"))),
            Reply::Stale { highest: 2 }
        );
        let read = Op::Read { key: "k".into() };
        assert_eq!(
            m.apply(&at(103, read)),
            Reply::Value(Some((2, b"b".to_vec())))
        );
        // a's stale token neither renews nor releases b's lease.
        let extend = Op::Extend {
            lock: "l".into(),
            owner: "a".into(),
            token: 1,
            ttl_us: 100,
        };
        assert_eq!(m.apply(&at(104, extend)), Reply::NotHeld);
    }

    #[test]
    fn the_clock_never_goes_back_and_a_stale_stamp_expires_nothing_early() {
        let mut m = Machine::new();
        assert_eq!(
            m.apply(&at(1_000, acquire("a"))),
            Reply::Granted { token: 1 }
        );
        // A command stamped earlier (by another proposer) is applied at the machine's time.
        assert_eq!(
            m.apply(&at(10, acquire("b"))),
            Reply::Busy {
                holder: "a".into(),
                remaining_us: 100
            }
        );
        assert_eq!(m.now_us(), 1_000);
    }

    #[test]
    fn publish_holder_and_release_follow_the_lease() {
        let mut m = Machine::new();
        m.apply(&at(0, acquire("a")));
        let publish = |owner: &str, token| Op::Publish {
            lock: "l".into(),
            owner: owner.into(),
            token,
            value: "addr".into(),
        };
        assert_eq!(m.apply(&at(1, publish("b", 1))), Reply::NotHeld);
        assert_eq!(m.apply(&at(2, publish("a", 1))), Reply::Published);
        let holder = || Op::Holder { lock: "l".into() };
        assert_eq!(
            m.apply(&at(3, holder())),
            Reply::Holder(Some(("a".into(), 1, Some("addr".into()))))
        );
        let release = |at_us| {
            at(
                at_us,
                Op::Release {
                    lock: "l".into(),
                    owner: "a".into(),
                    token: 1,
                },
            )
        };
        assert_eq!(m.apply(&release(4)), Reply::Released { live: true });
        assert_eq!(m.apply(&at(5, holder())), Reply::Holder(None));
        assert_eq!(m.apply(&release(6)), Reply::NotHeld);
        // A lease released after it expired freed nothing.
        m.apply(&at(10, acquire("a")));
        let late = at(
            500,
            Op::Release {
                lock: "l".into(),
                owner: "a".into(),
                token: 2,
            },
        );
        assert_eq!(m.apply(&late), Reply::Released { live: false });
    }

    #[test]
    fn an_unfenced_key_takes_every_write_the_control() {
        let mut m = Machine::new();
        let mut w = |token, policy| {
            m.apply(&at(
                0,
                Op::Write {
                    key: "k".into(),
                    token,
                    value: vec![],
                    policy,
                },
            ))
        };
        assert_eq!(w(2, FencePolicy::AcceptAll), Reply::Accepted);
        assert_eq!(w(1, FencePolicy::AcceptAll), Reply::Accepted);
    }

    #[test]
    fn the_machine_survives_a_snapshot_round_trip() {
        let mut m = Machine::new();
        m.apply(&at(0, acquire("a")));
        m.apply(&at(1, write(1, "x")));
        let copy: Machine = serde_json::from_slice(&serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(copy, m);
    }
}
