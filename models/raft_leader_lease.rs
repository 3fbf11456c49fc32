//! Leader leases in a Raft group, the read path of "Raft inside the database": a leader answers
//! reads from its own state while its lease lasts, with no round trip, and a new leader is
//! elected only by voters that have waited out the election timeout. Checked on the library's
//! own rule ([`crate::protocol::LeaderLease`]).
//!
//! The world: node 0 leads and holds the value 0. At real time 0 it sends a heartbeat; each other
//! node receives it at some moment (or never) and acknowledges it. Once a quorum (node 0
//! included) has it, node 0 serves lease reads while its own clock is short of the lease. Then
//! node 0 is cut off: another node is elected by a quorum of the others, each voting only when
//! [`LeaderLease::may_vote`] says so on its own clock, and commits the value 1. Every clock runs
//! at its own constant rate, any rate within the model's bound: 10 local units per real tick,
//! give or take the model's skew. The election timeout is 100 units; the lease is computed for a
//! drift of 10 % (81 units). Time moves in real ticks up to a horizon of 11.
//!
//! | model | what differs | `linearizable_reads` | lesson |
//! |---|---|---|---|
//! | `raft-leader-lease` | clocks within 10 % of real time, as the lease assumes | **holds** | the old leader's last lease read comes before any quorum can elect another |
//! | `raft-leader-lease-drift` | clocks within 20 %, the lease still computed for 10 % | violated | a slow leader's lease outlasts a fast voter's wait: a stale read after the new leader's write |
//! | `raft-leader-lease-no-wait` | voters do not wait out the election timeout (a leadership transfer, pre-vote off) | violated | the new leader must wait out the old lease before it takes writes |

use super::Step;
use super::{declared_properties, Declared, Declares, Expect, Expected, Narrate, Params};
use crate::protocol::{Drift, LeaderLease};
use stateright::{Expectation, Model, Property};

/// The election timeout, in local clock units.
pub const ELECTION_TIMEOUT: u64 = 100;
/// A clock at the nominal rate moves this many units per real tick.
pub const NOMINAL_RATE: u8 = 10;
/// The drift the lease is computed for, per mille.
pub const ASSUMED_DRIFT_PER_MILLE: u64 = 100;

/// The model.
#[derive(Clone, Debug)]
pub struct RaftLeaseModel {
    /// Nodes in the group (node 0 is the first leader).
    pub nodes: usize,
    /// How far a clock's rate may be from [`NOMINAL_RATE`], in units per tick (1 is 10 %).
    pub skew: u8,
    /// Whether a voter waits out the election timeout after the heartbeat it heard.
    pub voters_wait: bool,
    /// The last real tick.
    pub horizon: u8,
}

impl RaftLeaseModel {
    /// The library's rule, for the catalog's timeout and assumed drift.
    pub fn rule() -> LeaderLease {
        let drift = Drift::per_mille(ASSUMED_DRIFT_PER_MILLE).expect("below 1000 per mille");
        LeaderLease::new(ELECTION_TIMEOUT, drift).expect("the catalog's timeout leaves a lease")
    }

    /// How many nodes make a quorum.
    pub fn quorum(&self) -> usize {
        self.nodes / 2 + 1
    }

    /// Whether every clock's rate is within the drift the lease is computed for.
    pub fn within_bound(&self) -> bool {
        u64::from(self.skew) * 1000 <= ASSUMED_DRIFT_PER_MILLE * u64::from(NOMINAL_RATE)
    }
}

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RaftLeaseState {
    /// Real time, in ticks.
    pub now: u8,
    /// Each node's clock rate, in local units per real tick.
    pub rates: Vec<u8>,
    /// When (real tick) each node received the heartbeat; node 0 sent it at 0.
    pub heard: Vec<Option<u8>>,
    /// The node elected after node 0, if any.
    pub new_leader: Option<u8>,
    /// The nodes that voted in that election: they are in the new term and acknowledge no
    /// heartbeat of node 0's after it.
    pub voted: Vec<bool>,
    /// Whether the new leader has committed its write (value 1).
    pub committed: bool,
    /// Ghost: node 0 served a lease read.
    pub served: bool,
    /// Ghost: node 0 served a lease read after the new leader's write was committed.
    pub stale_read: bool,
}

impl RaftLeaseState {
    /// Node `i`'s clock.
    pub fn clock(&self, i: usize) -> u64 {
        u64::from(self.rates[i]) * u64::from(self.now)
    }

    /// When node `i` heard the heartbeat, on its own clock.
    pub fn heard_at(&self, i: usize) -> Option<u64> {
        self.heard[i].map(|t| u64::from(self.rates[i]) * u64::from(t))
    }

    /// How many nodes (node 0 included) have the heartbeat.
    pub fn acknowledged(&self) -> usize {
        self.heard.iter().filter(|h| h.is_some()).count()
    }
}

/// What happens next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RaftLeaseAction {
    /// The heartbeat reaches a node, which acknowledges it.
    Heartbeat(u8),
    /// Node 0 answers a read from its own state under its lease.
    LeaseRead,
    /// A node is elected by a quorum of the others.
    Elect(u8),
    /// The new leader commits its write.
    Commit,
    /// Real time moves one tick.
    Tick,
}

impl RaftLeaseModel {
    /// The nodes other than node 0 that may vote now: every one, or (when voters wait) those
    /// past their election timeout since the heartbeat they heard.
    fn voters(&self, s: &RaftLeaseState) -> Vec<usize> {
        let rule = Self::rule();
        (1..self.nodes)
            .filter(|&i| !self.voters_wait || rule.may_vote(s.heard_at(i), s.clock(i)))
            .collect()
    }

    /// Whether node 0 may serve a lease read now: a quorum has its heartbeat and its clock is
    /// short of the lease.
    fn may_serve(&self, s: &RaftLeaseState) -> bool {
        s.acknowledged() >= self.quorum() && Self::rule().may_serve(0, s.clock(0))
    }
}

impl Model for RaftLeaseModel {
    type State = RaftLeaseState;
    type Action = RaftLeaseAction;

    fn init_states(&self) -> Vec<RaftLeaseState> {
        // Every assignment of rates within the skew, one per node.
        let rates: Vec<u8> = (NOMINAL_RATE - self.skew..=NOMINAL_RATE + self.skew).collect();
        let mut all: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..self.nodes {
            all = all
                .into_iter()
                .flat_map(|prefix| {
                    rates.iter().map(move |&r| {
                        let mut v = prefix.clone();
                        v.push(r);
                        v
                    })
                })
                .collect();
        }
        all.into_iter()
            .map(|rates| {
                let mut heard = vec![None; self.nodes];
                heard[0] = Some(0);
                RaftLeaseState {
                    now: 0,
                    rates,
                    heard,
                    new_leader: None,
                    voted: vec![false; self.nodes],
                    committed: false,
                    served: false,
                    stale_read: false,
                }
            })
            .collect()
    }

    fn actions(&self, s: &RaftLeaseState, actions: &mut Vec<RaftLeaseAction>) {
        for i in 1..self.nodes {
            if s.heard[i].is_none() && !s.voted[i] {
                actions.push(RaftLeaseAction::Heartbeat(i as u8));
            }
        }
        if self.may_serve(s) && !(s.served && s.stale_read == s.committed) {
            actions.push(RaftLeaseAction::LeaseRead);
        }
        if s.new_leader.is_none() {
            let voters = self.voters(s);
            if voters.len() >= self.quorum() {
                actions.extend(voters.iter().map(|&c| RaftLeaseAction::Elect(c as u8)));
            }
        } else if !s.committed {
            actions.push(RaftLeaseAction::Commit);
        }
        if s.now < self.horizon {
            actions.push(RaftLeaseAction::Tick);
        }
    }

    fn next_state(&self, s: &RaftLeaseState, action: RaftLeaseAction) -> Option<RaftLeaseState> {
        let mut next = s.clone();
        match action {
            RaftLeaseAction::Heartbeat(i) => next.heard[usize::from(i)] = Some(s.now),
            RaftLeaseAction::LeaseRead => {
                next.served = true;
                next.stale_read |= s.committed;
            }
            RaftLeaseAction::Elect(c) => {
                next.new_leader = Some(c);
                for i in self.voters(s) {
                    next.voted[i] = true;
                }
            }
            RaftLeaseAction::Commit => next.committed = true,
            RaftLeaseAction::Tick => next.now += 1,
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        declared_properties(self)
    }
}

impl Narrate for RaftLeaseModel {
    fn narrate(
        &self,
        before: &RaftLeaseState,
        action: &RaftLeaseAction,
        after: &RaftLeaseState,
    ) -> Step {
        let node = |i: usize| format!("node-{i}");
        let rule = Self::rule();
        match action {
            RaftLeaseAction::Heartbeat(i) => {
                let i = usize::from(*i);
                let waits = if self.voters_wait {
                    format!(
                        "; it votes for no other leader before its clock shows {}",
                        after.clock(i) + rule.election_timeout()
                    )
                } else {
                    String::new()
                };
                Step {
                    from: node(0),
                    to: node(i),
                    text: format!(
                        "{} (clock {}, rate {}) receives node-0's heartbeat and acknowledges it: \
                         {} of {} nodes have it{waits}",
                        node(i),
                        after.clock(i),
                        after.rates[i],
                        after.acknowledged(),
                        self.nodes,
                    ),
                }
            }
            RaftLeaseAction::LeaseRead => {
                let value = if before.committed {
                    format!(
                        "value 0, though node-{} committed 1: a stale read",
                        before.new_leader.unwrap_or(0)
                    )
                } else {
                    "value 0".to_string()
                };
                Step {
                    from: "client".into(),
                    to: node(0),
                    text: format!(
                        "node-0 (clock {}, rate {}) answers a read from its own state under its \
                         lease (to clock {}): {value}",
                        before.clock(0),
                        before.rates[0],
                        rule.lease()
                    ),
                }
            }
            RaftLeaseAction::Elect(c) => {
                let voters: Vec<String> = self
                    .voters(before)
                    .into_iter()
                    .map(|i| format!("{} (clock {})", node(i), before.clock(i)))
                    .collect();
                Step {
                    from: node(usize::from(*c)),
                    to: node(usize::from(*c)),
                    text: format!(
                        "{} is elected; may vote: {}",
                        node(usize::from(*c)),
                        super::nobody_or(&voters)
                    ),
                }
            }
            RaftLeaseAction::Commit => {
                let c = before.new_leader.map_or(0, usize::from);
                Step {
                    from: node(c),
                    to: node(c),
                    text: format!("{} commits the value 1 with a quorum", node(c)),
                }
            }
            RaftLeaseAction::Tick => {
                let clocks: Vec<String> = (0..self.nodes)
                    .map(|i| format!("{} {}", node(i), after.clock(i)))
                    .collect();
                Step {
                    from: "clock".into(),
                    to: "clock".into(),
                    text: format!("time {}; clocks: {}", after.now, clocks.join(", ")),
                }
            }
        }
    }
}

not_symmetric!(RaftLeaseModel, RaftLeaseState);

/// Every property of this model, declared once.
const DECLARED: &[Declared<RaftLeaseModel>] = &[
    Declared {
        name: "linearizable_reads",
        kind: Expectation::Always,
        meaning: "no lease read answers an older value than a write committed before it",
        expect: Expect::When {
            rule: "holds when every clock runs within the drift the lease is computed for and voters wait out the election timeout",
            when: |m| Expected::holds_if(m.within_bound() && m.voters_wait),
        },
        condition: |_: &RaftLeaseModel, s: &RaftLeaseState| !s.stale_read,
    },
    Declared {
        name: "lease_read_served",
        kind: Expectation::Sometimes,
        meaning: "the leader answers a read under its lease",
        expect: Expect::Holds,
        condition: |_: &RaftLeaseModel, s: &RaftLeaseState| s.served,
    },
    Declared {
        name: "new_leader_commits",
        kind: Expectation::Sometimes,
        meaning: "a second leader is elected and commits a write",
        expect: Expect::Holds,
        condition: |_: &RaftLeaseModel, s: &RaftLeaseState| s.committed,
    },
];

impl Declares for RaftLeaseModel {
    fn declarations(&self) -> &'static [Declared<Self>] {
        DECLARED
    }
}

fn build(p: &Params, skew: u8, voters_wait: bool) -> RaftLeaseModel {
    RaftLeaseModel {
        nodes: p.clients,
        skew,
        voters_wait,
        horizon: 11,
    }
}

catalog_entry! {
    /// The catalog entry: clocks within the drift the lease assumes.
    RaftLeaderLease: RaftLeaseModel {
        name: "raft-leader-lease",
        summary: "leader leases in a Raft group, clocks within the assumed 10 % drift: lease reads stay linearizable",
        clients: 3..=4,
        mutants: &[],
        defaults: Params::sized(3, 1, 0),
        build: |p| build(p, 1, true),
    }
}

catalog_entry! {
    /// The catalog entry: clocks drift 20 % against a lease computed for 10 %.
    RaftLeaderLeaseDrift: RaftLeaseModel {
        name: "raft-leader-lease-drift",
        summary: "the same group with clocks drifting 20 %, the lease computed for 10 %: a stale lease read",
        clients: 3..=4,
        mutants: &[],
        defaults: Params::sized(3, 1, 0),
        build: |p| build(p, 2, true),
    }
}

catalog_entry! {
    /// The catalog entry: voters that do not wait out the election timeout.
    RaftLeaderLeaseNoWait: RaftLeaseModel {
        name: "raft-leader-lease-no-wait",
        summary: "the same group whose voters elect a new leader without waiting out the old lease: a stale lease read",
        clients: 3..=4,
        mutants: &[],
        defaults: Params::sized(3, 1, 0),
        build: |p| build(p, 1, false),
    }
}
