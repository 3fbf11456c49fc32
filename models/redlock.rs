//! Redlock: M independent lock nodes (default 3), each running the core `LeaseTable`; a client
//! holds the lock when it holds grants from a majority that are still valid by its own clock.
//!
//! Without faults, majorities intersect and `single_majority_holder` holds. A node that restarts
//! without persistence forgets its keys, and a node whose clock jumps forward expires its leases
//! early: either lets a second client assemble a majority while the first still holds one. The
//! storage accepts every write, so a paused holder's late write breaks `storage_in_lease_order`.
//! And the per-node counters do not make a fencing token: taking the largest counter among a
//! majority's grants repeats a token (`tokens_increase` violated).

use super::{
    declared_properties, prop, Declared, Declares, Expect, Expected, Narrate, Params, Step,
};
use crate::protocol::{Acquire, LeaseOrder, LeaseTable, Token, TokenOrder};
use stateright::{Expectation, Model, Property};

/// A lease lasts this many ticks.
pub const TTL: u64 = 1;
/// Lock nodes.
pub const NODES: usize = 3;

/// Which fault the model allows (once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// None.
    None,
    /// One node restarts and forgets its keys and counter.
    Restart,
    /// One node's clock jumps forward by a ttl.
    ClockJump,
}

/// The model.
#[derive(Clone, Debug)]
pub struct RedlockModel {
    /// Clients.
    pub clients: usize,
    /// The fault allowed.
    pub fault: Fault,
}

/// A client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Asking nodes; per node: not asked (`None`), refused, or granted at a time with a token.
    Acquiring {
        /// Per node.
        asked: [Option<Option<(Token, u64)>>; NODES],
    },
    /// Believes it holds the lock until `valid_until` (by its own clock), with `token` the
    /// largest per-node counter among its grants.
    Holding {
        /// The would-be fencing token.
        token: Token,
        /// Ghost: the order in which clients came to hold the lock.
        epoch: u8,
        /// The earliest expiry among its majority's grants, by its clock.
        valid_until: u64,
    },
    /// Gave up (no majority) or is finished.
    Done,
}

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RedlockState {
    /// Global time.
    pub now: u64,
    /// Each node's table and how far its clock runs ahead of global time.
    pub nodes: [(LeaseTable<u8>, u64); NODES],
    /// Whether the fault has happened.
    pub faulted: bool,
    /// Each client.
    pub clients: Vec<Client>,
    /// Writes in flight: (epoch, client), sorted.
    pub in_flight: Vec<(u8, u8)>,
    /// Ghost: holders so far.
    pub holders: u8,
    /// Ghost: `tokens_increase` over the holders' tokens (the library's checker).
    pub tokens: TokenOrder<Token>,
    /// Ghost: `storage_in_lease_order` over the stored writes' epochs (the library's checker).
    pub lease_order: LeaseOrder<u8>,
}

/// What happens next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RedlockAction {
    /// A client asks a node for the lock.
    Ask(u8, u8),
    /// A client counts its valid grants: with a majority it holds the lock and writes.
    Decide(u8),
    /// Time passes.
    Tick,
    /// The fault strikes a node.
    Fault(u8),
    /// A holder's write reaches the storage (which accepts every write).
    Deliver((u8, u8)),
}

fn majority() -> usize {
    NODES / 2 + 1
}

fn believes(c: &Client, now: u64) -> bool {
    matches!(c, Client::Holding { valid_until, .. } if now < *valid_until)
}

impl RedlockModel {
    fn max_time(&self) -> u64 {
        (self.clients as u64 + 1) * TTL
    }
}

impl Model for RedlockModel {
    type State = RedlockState;
    type Action = RedlockAction;

    fn init_states(&self) -> Vec<RedlockState> {
        vec![RedlockState {
            now: 0,
            nodes: std::array::from_fn(|_| (LeaseTable::new(), 0)),
            faulted: false,
            clients: vec![
                Client::Acquiring {
                    asked: [None; NODES]
                };
                self.clients
            ],
            in_flight: Vec::new(),
            holders: 0,
            tokens: TokenOrder::new(),
            lease_order: LeaseOrder::new(),
        }]
    }

    fn actions(&self, s: &RedlockState, actions: &mut Vec<RedlockAction>) {
        for (i, c) in s.clients.iter().enumerate() {
            if let Client::Acquiring { asked } = c {
                for (n, a) in asked.iter().enumerate() {
                    if a.is_none() {
                        actions.push(RedlockAction::Ask(i as u8, n as u8));
                    }
                }
                // Like Redlock, a client asks every node before counting its grants.
                if asked.iter().all(Option::is_some) {
                    actions.push(RedlockAction::Decide(i as u8));
                }
            }
        }
        if self.fault != Fault::None && !s.faulted {
            for n in 0..NODES {
                actions.push(RedlockAction::Fault(n as u8));
            }
        }
        actions.extend(super::distinct(&s.in_flight).map(RedlockAction::Deliver));
        let waiting = s.clients.iter().any(|c| *c != Client::Done);
        if waiting && s.now < self.max_time() {
            actions.push(RedlockAction::Tick);
        }
    }

    fn next_state(&self, s: &RedlockState, action: RedlockAction) -> Option<RedlockState> {
        let mut next = s.clone();
        match action {
            RedlockAction::Ask(i, n) => {
                let (table, offset) = &mut next.nodes[n as usize];
                let answer = match table.acquire(i, s.now + *offset, TTL).ok()? {
                    Acquire::Granted(lease) => Some((lease.token, s.now)),
                    Acquire::Busy { .. } => None,
                };
                let Client::Acquiring { asked } = &mut next.clients[i as usize] else {
                    return None;
                };
                asked[n as usize] = Some(answer);
            }
            RedlockAction::Decide(i) => {
                let Client::Acquiring { asked } = &s.clients[i as usize] else {
                    return None;
                };
                let valid: Vec<(Token, u64)> = asked
                    .iter()
                    .flatten()
                    .flatten()
                    .filter(|(_, at)| s.now < at + TTL)
                    .copied()
                    .collect();
                next.clients[i as usize] = if valid.len() >= majority() {
                    let token = valid.iter().map(|(t, _)| *t).max()?;
                    let valid_until = valid.iter().map(|(_, at)| at + TTL).min()?;
                    next.holders += 1;
                    next.tokens.grant(token);
                    next.in_flight.push((next.holders, i));
                    next.in_flight.sort();
                    Client::Holding {
                        token,
                        epoch: next.holders,
                        valid_until,
                    }
                } else {
                    Client::Done
                };
            }
            RedlockAction::Tick => next.now += 1,
            RedlockAction::Fault(n) => {
                next.faulted = true;
                let (table, offset) = &mut next.nodes[n as usize];
                match self.fault {
                    Fault::Restart => *table = LeaseTable::new(),
                    Fault::ClockJump => *offset += TTL,
                    Fault::None => return None,
                }
            }
            RedlockAction::Deliver(w) => {
                let at = next.in_flight.iter().position(|x| *x == w)?;
                next.in_flight.remove(at);
                let (epoch, _) = w;
                next.lease_order.accept(epoch);
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        declared_properties(self)
    }
}

impl Narrate for RedlockModel {
    fn narrate(&self, before: &RedlockState, action: &RedlockAction, after: &RedlockState) -> Step {
        let who = |i: &u8| format!("client-{i}");
        let node = |n: &u8| format!("node-{n}");
        match action {
            RedlockAction::Ask(i, n) => {
                let answer = match &after.clients[*i as usize] {
                    Client::Acquiring { asked } => match asked[*n as usize] {
                        Some(Some((token, _))) => format!("granted (counter {token})"),
                        _ => "refused".to_string(),
                    },
                    _ => String::new(),
                };
                Step {
                    from: who(i),
                    to: node(n),
                    text: format!("{} asks {} at t={}: {answer}", who(i), node(n), before.now),
                }
            }
            RedlockAction::Decide(i) => {
                let text = match &after.clients[*i as usize] {
                    Client::Holding { token, valid_until, .. } => format!(
                        "{} has a majority: holds the lock until t={valid_until} with token {token} (largest counter); sends a write",
                        who(i)
                    ),
                    _ => format!("{} has no majority and gives up", who(i)),
                };
                Step {
                    from: who(i),
                    to: who(i),
                    text,
                }
            }
            RedlockAction::Tick => Step {
                from: "clock".into(),
                to: "clock".into(),
                text: format!("time passes (t={} -> t={})", before.now, after.now),
            },
            RedlockAction::Fault(n) => Step {
                from: node(n),
                to: node(n),
                text: match self.fault {
                    Fault::Restart => format!(
                        "{} restarts without persistence and forgets its keys",
                        node(n)
                    ),
                    _ => format!(
                        "{}'s clock jumps forward by {TTL}: its leases expire early",
                        node(n)
                    ),
                },
            },
            RedlockAction::Deliver((epoch, i)) => Step {
                from: who(i),
                to: "storage".into(),
                text: format!(
                    "{}'s write (holder #{epoch}) reaches the storage: accepted",
                    who(i)
                ),
            },
        }
    }
}

not_symmetric!(RedlockModel, RedlockState);

/// Every property of this model, declared once.
const DECLARED: &[Declared<RedlockModel>] = &[
    Declared {
        name: "single_majority_holder",
        kind: Expectation::Always,
        meaning: "at most one client holds valid grants from a majority",
        expect: Expect::When {
            rule: "violated when a node restarts or a clock jumps",
            when: |m| Expected::holds_if(m.fault == Fault::None),
        },
        condition: |_: &RedlockModel, s: &RedlockState| {
            s.clients.iter().filter(|c| believes(c, s.now)).count() <= 1
        },
    },
    Declared {
        name: prop::STORAGE_IN_LEASE_ORDER,
        kind: Expectation::Always,
        meaning: "storage (no fencing) never stores an older holder's write after a newer one's",
        expect: Expect::Violated,
        condition: |_: &RedlockModel, s: &RedlockState| s.lease_order.holds(),
    },
    Declared {
        name: prop::TOKENS_INCREASE,
        kind: Expectation::Always,
        meaning: "the largest per-node counter of each new holder is larger than the last",
        expect: Expect::Violated,
        condition: |_: &RedlockModel, s: &RedlockState| s.tokens.holds(),
    },
    Declared {
        name: "majority_held",
        kind: Expectation::Sometimes,
        meaning: "some client holds the lock",
        expect: Expect::Holds,
        condition: |_: &RedlockModel, s: &RedlockState| s.holders >= 1,
    },
    Declared {
        name: "lock_changes_hands",
        kind: Expectation::Sometimes,
        meaning: "a second client holds the lock",
        expect: Expect::Holds,
        condition: |_: &RedlockModel, s: &RedlockState| s.holders >= 2,
    },
];

impl Declares for RedlockModel {
    fn declarations(&self) -> &'static [Declared<Self>] {
        DECLARED
    }
}

catalog_entry! {
    RedlockModel, clients: 2..=2, defaults: Params::sized(2, 1, 0);
    /// Redlock without faults.
    Redlock "redlock": "majority of 3 independent lock nodes, no faults; largest per-node counter as token",
        |p| RedlockModel { clients: p.clients, fault: Fault::None };
    /// Redlock with a node restart.
    RedlockRestart "redlock-restart": "redlock where one node restarts without persistence",
        |p| RedlockModel { clients: p.clients, fault: Fault::Restart };
    /// Redlock with a clock jump.
    RedlockClockJump "redlock-clock-jump": "redlock where one node's clock jumps forward",
        |p| RedlockModel { clients: p.clients, fault: Fault::ClockJump };
}
