//! TTL-only, but each client checks on its own clock that its lease is still valid right before
//! it writes.
//!
//! The check does not close the gap: a pause between the check and the write (the write message
//! delayed) still lets a stale write in, so `storage_in_lease_order` is violated at the storage that
//! accepts every write. With `drift`, the client's clock runs slower than the lock service's by up
//! to `drift` ticks, so it believes its lease valid for longer than the service does: two clients
//! believe at once (`single_believer` violated) even without a pause. The same writes also reach a
//! second, fenced storage (the core `Fence`), where `fenced_storage_in_lease_order` holds.
//!
//! Time is one global logical clock, the lock service's; a step `tick` advances it. The lease
//! table is the protocol core's `LeaseTable`.

use super::{
    declared_properties, meaning, prop, Declared, Declares, Expect, Expected, Narrate, Params, Step,
};
use crate::protocol::{Acquire, Fence, LeaseOrder, LeaseTable, Token};
use stateright::{Expectation, Model, Property};

/// A lease lasts this many ticks.
pub const TTL: u64 = 2;

/// The model.
#[derive(Clone, Debug)]
pub struct CheckBeforeWriteModel {
    /// Clients, each making one write.
    pub clients: usize,
    /// How many ticks longer a client believes its lease lasts than the lock service does.
    pub drift: u64,
}

/// A client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Wants the lease.
    Idle,
    /// Holds a lease; on its own clock the lease is valid while `now < valid_until`.
    Holding {
        /// The fencing token.
        token: Token,
        /// Ghost: the grant.
        epoch: u8,
        /// The deadline on the client's own (slower) clock, in the service's time.
        valid_until: u64,
    },
    /// Has sent its write (or found its lease expired at the check and given up).
    Done,
}

/// A write in flight: (token, epoch, client).
pub type Write = (Token, u8, u8);

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CbwState {
    /// The lock service's clock.
    pub now: u64,
    /// The lock service's table.
    pub table: LeaseTable<u8>,
    /// Each client.
    pub clients: Vec<Client>,
    /// Writes sent and not yet delivered, sorted.
    pub in_flight: Vec<Write>,
    /// The fenced storage.
    pub fence: Fence,
    /// Ghost: grants so far.
    pub grants: u8,
    /// Ghost: `storage_in_lease_order` at the accept-all storage (the library's checker over the
    /// grants whose writes it stored).
    pub plain: LeaseOrder<u8>,
    /// Ghost: the same at the fenced storage.
    pub fenced: LeaseOrder<u8>,
}

/// What happens next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CbwAction {
    /// A client asks for the lease.
    Acquire(u8),
    /// A client checks its lease on its own clock and, if valid, sends its write.
    CheckAndWrite(u8),
    /// The write with this token, epoch and sender reaches both storages.
    Deliver(Write),
    /// Time passes.
    Tick,
}

impl CheckBeforeWriteModel {
    fn max_time(&self) -> u64 {
        (self.clients as u64 + 1) * TTL + self.drift
    }
}

fn believes(c: &Client, now: u64) -> bool {
    matches!(c, Client::Holding { valid_until, .. } if now < *valid_until)
}

impl Model for CheckBeforeWriteModel {
    type State = CbwState;
    type Action = CbwAction;

    fn init_states(&self) -> Vec<CbwState> {
        vec![CbwState {
            now: 0,
            table: LeaseTable::new(),
            clients: vec![Client::Idle; self.clients],
            in_flight: Vec::new(),
            fence: Fence::fenced(),
            grants: 0,
            plain: LeaseOrder::new(),
            fenced: LeaseOrder::new(),
        }]
    }

    fn actions(&self, s: &CbwState, actions: &mut Vec<CbwAction>) {
        for (i, c) in s.clients.iter().enumerate() {
            match c {
                Client::Idle => actions.push(CbwAction::Acquire(i as u8)),
                Client::Holding { .. } => actions.push(CbwAction::CheckAndWrite(i as u8)),
                Client::Done => {}
            }
        }
        actions.extend(super::distinct(&s.in_flight).map(CbwAction::Deliver));
        // Time moves only while something still waits on it.
        let waiting = s.clients.iter().any(|c| *c != Client::Done);
        if waiting && s.now < self.max_time() {
            actions.push(CbwAction::Tick);
        }
    }

    fn next_state(&self, s: &CbwState, action: CbwAction) -> Option<CbwState> {
        let mut next = s.clone();
        match action {
            CbwAction::Acquire(i) => {
                let Acquire::Granted(lease) = next.table.acquire(i, s.now, TTL).ok()? else {
                    return None;
                };
                next.grants += 1;
                next.clients[i as usize] = Client::Holding {
                    token: lease.token,
                    epoch: next.grants,
                    valid_until: lease.expires_at + self.drift,
                };
            }
            CbwAction::CheckAndWrite(i) => {
                let Client::Holding { token, epoch, .. } = s.clients[i as usize] else {
                    return None;
                };
                if believes(&s.clients[i as usize], s.now) {
                    next.in_flight.push((token, epoch, i));
                    next.in_flight.sort();
                }
                next.clients[i as usize] = Client::Done;
            }
            CbwAction::Deliver(w) => {
                let at = next.in_flight.iter().position(|x| *x == w)?;
                next.in_flight.remove(at);
                let (token, epoch, _) = w;
                next.plain.accept(epoch);
                if next.fence.admit(token).is_ok() {
                    next.fenced.accept(epoch);
                }
            }
            CbwAction::Tick => next.now += 1,
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        declared_properties(self)
    }
}

impl Narrate for CheckBeforeWriteModel {
    fn narrate(&self, before: &CbwState, action: &CbwAction, after: &CbwState) -> Step {
        let who = |i: &u8| format!("client-{i}");
        match action {
            CbwAction::Acquire(i) => {
                let text = match after.clients[*i as usize] {
                    Client::Holding { token, valid_until, .. } => format!(
                        "{} acquires the lease (token {token}) at t={}; by its own clock it is valid until t={valid_until}",
                        who(i),
                        after.now
                    ),
                    _ => format!("{} asks for the lease", who(i)),
                };
                Step {
                    from: who(i),
                    to: "lock-service".into(),
                    text,
                }
            }
            CbwAction::CheckAndWrite(i) => {
                let sent = after.in_flight.len() > before.in_flight.len();
                let text = match before.clients[*i as usize] {
                    Client::Holding { token, .. } if sent => format!(
                        "{} checks its lease at t={}: valid; sends its write with token {token}",
                        who(i),
                        before.now
                    ),
                    _ => format!(
                        "{} checks its lease at t={}: expired; does not write",
                        who(i),
                        before.now
                    ),
                };
                Step {
                    from: who(i),
                    to: "storage".into(),
                    text,
                }
            }
            CbwAction::Deliver((token, _, sender)) => {
                let fenced = if after.fence.highest() == before.fence.highest()
                    && before.fence.highest().is_some_and(|h| *token < h)
                {
                    "rejected by the fenced storage"
                } else {
                    "accepted by the fenced storage"
                };
                Step {
                    from: who(sender),
                    to: "storage".into(),
                    text: format!(
                        "{}'s write with token {token} arrives: accepted by the plain storage, {fenced}",
                        who(sender)
                    ),
                }
            }
            CbwAction::Tick => Step {
                from: "lock-service".into(),
                to: "lock-service".into(),
                text: format!("time passes (t={} -> t={})", before.now, after.now),
            },
        }
    }
}

not_symmetric!(CheckBeforeWriteModel, CbwState);

/// Every property of this model, declared once.
const DECLARED: &[Declared<CheckBeforeWriteModel>] = &[
    Declared {
        name: prop::STORAGE_IN_LEASE_ORDER,
        kind: Expectation::Always,
        meaning: "the accept-all storage never stores an older lease's write after a newer one's",
        expect: Expect::Violated,
        condition: |_: &CheckBeforeWriteModel, s: &CbwState| s.plain.holds(),
    },
    Declared {
        name: "fenced_storage_in_lease_order",
        kind: Expectation::Always,
        meaning: "the fenced storage never stores an older lease's write after a newer one's",
        expect: Expect::Holds,
        condition: |_: &CheckBeforeWriteModel, s: &CbwState| s.fenced.holds(),
    },
    Declared {
        name: prop::SINGLE_BELIEVER,
        kind: Expectation::Always,
        meaning: "at most one client believes, by its own clock, that it holds the lease",
        expect: Expect::When {
            rule: "violated when client clocks drift",
            when: |m| Expected::holds_if(m.drift == 0),
        },
        condition: |_: &CheckBeforeWriteModel, s: &CbwState| {
            s.clients.iter().filter(|c| believes(c, s.now)).count() <= 1
        },
    },
    Declared {
        name: prop::WRITE_ACCEPTED,
        kind: Expectation::Sometimes,
        meaning: meaning::WRITE_ACCEPTED,
        expect: Expect::Holds,
        condition: |_: &CheckBeforeWriteModel, s: &CbwState| s.plain.newest().is_some(),
    },
    Declared {
        name: prop::LEASE_REGRANTED,
        kind: Expectation::Sometimes,
        meaning: meaning::LEASE_REGRANTED,
        expect: Expect::Holds,
        condition: |_: &CheckBeforeWriteModel, s: &CbwState| s.grants >= 2,
    },
];

impl Declares for CheckBeforeWriteModel {
    fn declarations(&self) -> &'static [Declared<Self>] {
        DECLARED
    }
}

catalog_entry! {
    CheckBeforeWriteModel, clients: 2..=6, defaults: Params::sized(3, 1, 0);
    /// The catalog entry without drift.
    CheckBeforeWrite "check-before-write": "TTL-only, the client checks its lease on its own clock right before writing",
        |p| CheckBeforeWriteModel { clients: p.clients, drift: 0 };
    /// The catalog entry with client clocks one tick slow.
    ClockDrift "clock-drift": "check-before-write with client clocks up to one tick slower than the lock service's",
        |p| CheckBeforeWriteModel { clients: p.clients, drift: 1 };
}
