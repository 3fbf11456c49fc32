//! Leader election on a consensus store: candidates campaign on a linearizable compare-and-set
//! register (the core `TermRegister`) holding (term, leader, lease deadline).
//!
//! A candidate reads the register, then campaigns with the term it read; a campaign wins only if
//! no one campaigned in between and no leader's lease is live, and takes a strictly larger term.
//! The leader writes to storage with its term as the fencing token. Leases expire; a deposed
//! leader may still believe it leads, so `single_believer` is violated, but `one_leader_per_term`
//! holds, and with fencing the storage stays in term order. Without fencing a deposed leader's
//! late write lands after its successor's.

use super::{
    declared_properties, prop, Declared, Declares, Expect, Expected, Mutant, Narrate, Params, Step,
};
use crate::protocol::{
    one_leader_per_term, Campaign, Fence, FencePolicy, LeaseOrder, TermRegister, Token,
};
use stateright::{Expectation, Model, Property};

const TTL: u64 = 1;

/// The model.
#[derive(Clone, Debug)]
pub struct ElectionModel {
    /// Candidates.
    pub candidates: usize,
    /// Campaigns each candidate makes at most.
    pub campaigns: u8,
    /// The storage's policy.
    pub policy: FencePolicy,
    /// Negative control: the candidate computes its term from what it read instead of letting
    /// the register's compare-and-set decide.
    pub blind_write: bool,
}

/// A candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Candidate {
    /// Will read the register; `left` campaigns remain.
    Follower {
        /// Campaigns left.
        left: u8,
    },
    /// Has read `observed` and will campaign.
    Observed {
        /// The term it read.
        observed: Option<Token>,
        /// Campaigns left, counting this one.
        left: u8,
    },
    /// Believes it leads `term`; its write is in flight.
    Leader {
        /// Its term.
        term: Token,
    },
    /// Out of campaigns, or its leadership is over.
    Done,
}

/// A write in flight: (term, ghost epoch, candidate).
pub type Write = (Token, u8, u8);

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ElectionState {
    /// The register (time rebased to 0 at every expiry).
    pub register: TermRegister<u8>,
    /// Each candidate.
    pub candidates: Vec<Candidate>,
    /// Writes in flight, sorted.
    pub in_flight: Vec<Write>,
    /// The storage's fence.
    pub fence: Fence,
    /// Ghost: terms won so far, in order, with the winner.
    pub wins: Vec<(Token, u8)>,
    /// Ghost: `storage_in_lease_order` over the stored writes' epochs (the library's checker).
    pub lease_order: LeaseOrder<u8>,
}

/// What happens next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ElectionAction {
    /// A candidate reads the register.
    Read(u8),
    /// A candidate campaigns with the term it read.
    Campaign(u8),
    /// The leader's lease expires.
    Expire,
    /// A leader's write reaches the storage.
    Deliver(Write),
}

impl Model for ElectionModel {
    type State = ElectionState;
    type Action = ElectionAction;

    fn init_states(&self) -> Vec<ElectionState> {
        vec![ElectionState {
            register: TermRegister::new(),
            candidates: vec![
                Candidate::Follower {
                    left: self.campaigns
                };
                self.candidates
            ],
            in_flight: Vec::new(),
            fence: Fence::new(self.policy),
            wins: Vec::new(),
            lease_order: LeaseOrder::new(),
        }]
    }

    fn actions(&self, s: &ElectionState, actions: &mut Vec<ElectionAction>) {
        for (i, c) in s.candidates.iter().enumerate() {
            match c {
                Candidate::Follower { .. } => actions.push(ElectionAction::Read(i as u8)),
                Candidate::Observed { .. } => actions.push(ElectionAction::Campaign(i as u8)),
                _ => {}
            }
        }
        if s.register.leader(0).is_some() {
            actions.push(ElectionAction::Expire);
        }
        actions.extend(super::distinct(&s.in_flight).map(ElectionAction::Deliver));
    }

    fn next_state(&self, s: &ElectionState, action: ElectionAction) -> Option<ElectionState> {
        let mut next = s.clone();
        match action {
            ElectionAction::Read(i) => {
                let Candidate::Follower { left } = s.candidates[i as usize] else {
                    return None;
                };
                next.candidates[i as usize] = Candidate::Observed {
                    observed: s.register.term(),
                    left,
                };
            }
            ElectionAction::Campaign(i) => {
                let Candidate::Observed { observed, left } = s.candidates[i as usize] else {
                    return None;
                };
                // The mutant skips the compare: it campaigns as if its read were current.
                let seen = if self.blind_write {
                    s.register.term()
                } else {
                    observed
                };
                let outcome = next.register.campaign(i, seen, 0, TTL).ok()?;
                next.candidates[i as usize] = match outcome {
                    Campaign::Won { term, .. } => {
                        // The mutant's leader takes the term after the one it read.
                        let term = if self.blind_write {
                            Token::new(observed.map_or(0, Token::get) + 1)
                        } else {
                            term
                        };
                        next.wins.push((term, i));
                        let epoch = next.wins.len() as u8;
                        next.in_flight.push((term, epoch, i));
                        next.in_flight.sort();
                        Candidate::Leader { term }
                    }
                    Campaign::Stale { .. } | Campaign::Busy { .. } if left > 1 => {
                        Candidate::Follower { left: left - 1 }
                    }
                    _ => Candidate::Done,
                };
            }
            ElectionAction::Expire => {
                let (_, deadline) = s.register.leader(0)?;
                next.register.rebase(deadline);
            }
            ElectionAction::Deliver(w) => {
                let at = next.in_flight.iter().position(|x| *x == w)?;
                next.in_flight.remove(at);
                let (term, epoch, leader) = w;
                if next.fence.admit(term).is_ok() {
                    next.lease_order.accept(epoch);
                }
                // Its one write made, the leader steps down.
                next.candidates[leader as usize] = Candidate::Done;
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        declared_properties(self)
    }
}

impl Narrate for ElectionModel {
    fn narrate(
        &self,
        before: &ElectionState,
        action: &ElectionAction,
        after: &ElectionState,
    ) -> Step {
        let who = |i: &u8| format!("candidate-{i}");
        let term = |t: Option<Token>| t.map_or("none".to_string(), |t| t.to_string());
        match action {
            ElectionAction::Read(i) => Step {
                from: who(i),
                to: "register".into(),
                text: format!(
                    "{} reads the register: term {}",
                    who(i),
                    term(before.register.term())
                ),
            },
            ElectionAction::Campaign(i) => {
                let text = match after.candidates[*i as usize] {
                    Candidate::Leader { term } => format!(
                        "{} campaigns and wins term {term}; sends a write with token {term}",
                        who(i)
                    ),
                    _ => format!("{} campaigns and loses", who(i)),
                };
                Step {
                    from: who(i),
                    to: "register".into(),
                    text,
                }
            }
            ElectionAction::Expire => {
                let leader = before.register.leader(0).map_or(0, |(l, _)| *l);
                Step {
                    from: "register".into(),
                    to: "register".into(),
                    text: format!("the leadership lease of {} expires", who(&leader)),
                }
            }
            ElectionAction::Deliver((t, _, leader)) => {
                let stored = after.fence.highest() != before.fence.highest()
                    || before.fence.highest() == Some(*t)
                    || after.fence.policy() == FencePolicy::AcceptAll;
                Step {
                    from: who(leader),
                    to: "storage".into(),
                    text: format!(
                        "{}'s write with token {t} reaches the storage: {}",
                        who(leader),
                        if stored { "accepted" } else { "rejected" }
                    ),
                }
            }
        }
    }
}

not_symmetric!(ElectionModel, ElectionState);

/// Every property of this model, declared once.
const DECLARED: &[Declared<ElectionModel>] = &[
    Declared {
        name: prop::ONE_LEADER_PER_TERM,
        kind: Expectation::Always,
        meaning: "no two candidates win the same term",
        expect: Expect::Holds,
        condition: |_: &ElectionModel, s: &ElectionState| one_leader_per_term(&s.wins).is_ok(),
    },
    Declared {
        name: prop::STORAGE_IN_LEASE_ORDER,
        kind: Expectation::Always,
        meaning: "storage never accepts an older term's write after a newer term's",
        expect: Expect::When {
            rule: "holds when the storage is fenced by the term",
            when: |m| match m.policy {
                FencePolicy::Fenced => Expected::Holds,
                FencePolicy::AcceptAll => Expected::Violated,
            },
        },
        condition: |_: &ElectionModel, s: &ElectionState| s.lease_order.holds(),
    },
    Declared {
        name: prop::SINGLE_BELIEVER,
        kind: Expectation::Always,
        meaning: "at most one candidate believes it leads (a deposed leader may not know)",
        expect: Expect::Violated,
        condition: |_: &ElectionModel, s: &ElectionState| {
            s.candidates
                .iter()
                .filter(|c| matches!(c, Candidate::Leader { .. }))
                .count()
                <= 1
        },
    },
    Declared {
        name: prop::LEADER_ELECTED,
        kind: Expectation::Sometimes,
        meaning: "some candidate wins",
        expect: Expect::Holds,
        condition: |_: &ElectionModel, s: &ElectionState| !s.wins.is_empty(),
    },
    Declared {
        name: prop::LEADERSHIP_CHANGES,
        kind: Expectation::Sometimes,
        meaning: "a second term is won",
        expect: Expect::Holds,
        condition: |_: &ElectionModel, s: &ElectionState| s.wins.len() >= 2,
    },
    Declared {
        name: "a_leader_is_elected",
        kind: Expectation::Eventually,
        meaning: "every complete history elects a leader",
        expect: Expect::Holds,
        condition: |_: &ElectionModel, s: &ElectionState| !s.wins.is_empty(),
    },
];

impl Declares for ElectionModel {
    fn declarations(&self) -> &'static [Declared<Self>] {
        DECLARED
    }
}

catalog_entry! {
    /// The catalog entry: terms as fencing tokens.
    LeaderElection: ElectionModel {
        name: "leader-election",
        summary: "candidates campaign on a compare-and-set register; the term is the fencing token",
        clients: 2..=6,
        mutants: &[Mutant::BlindCampaign],
        defaults: Params::sized(3, 1, 1),
        build: |p| ElectionModel {
            candidates: p.clients,
            campaigns: p.retries + 1,
            policy: FencePolicy::Fenced,
            blind_write: p.mutant == Some(Mutant::BlindCampaign),
        },
    }
}

catalog_entry! {
    /// The catalog entry: the same election, storage without fencing.
    LeaderElectionUnfenced: ElectionModel {
        name: "leader-election-unfenced",
        summary: "the same election; the storage ignores the term",
        clients: 2..=6,
        mutants: &[],
        defaults: Params::sized(3, 1, 1),
        build: |p| ElectionModel {
            candidates: p.clients,
            campaigns: p.retries + 1,
            policy: FencePolicy::AcceptAll,
            blind_write: false,
        },
    }
}
