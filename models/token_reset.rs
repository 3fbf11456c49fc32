//! A lock service whose token counter is not durable.
//!
//! Each client runs its job once: it takes the lease (the core `LeaseTable`), then — as a separate
//! step, so it can be paused in between for as long as anything else takes — writes to fenced
//! storage (the core `Fence`) with the lease's token and releases. The lock service may restart
//! once, and a restart forgets the live lease. Without persistence (a Redis `INCR` counter without
//! AOF) it also forgets the counter and tokens start again at 1. Then:
//!
//! - tokens go backwards (`tokens_increase` violated from two clients on);
//! - a holder paused across the restart carries a token that is handed out again: the new holder
//!   writes, then the paused one writes with the *same* token, which the fence accepts because one
//!   lease may write many times (`storage_in_lease_order` violated from two clients on);
//! - the storage refuses new holders until the counter passes its high-water mark, so a client
//!   can run out of retries (`progress`).
//!
//! Three ways to restart the counter: it is lost (`token-reset`), it is durable (`durable-token`:
//! every property holds), or it resumes above the highest token the storage has accepted
//! (`token-from-storage`): progress is restored, but a paused holder that has not written yet is
//! invisible to the storage, so its token is handed out again and the storage is still out of
//! lease order. Only a counter that survives the restart keeps fencing sound.

use super::{
    declared_properties, meaning, prop, Declared, Declares, Expect, Expected, Narrate, Params, Step,
};
use crate::protocol::{Acquire, Fence, LeaseOrder, LeaseTable, Token, TokenOrder};
use stateright::{Expectation, Model, Property};

/// What the lock service's token counter does across its restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Lost: tokens start again at 1.
    Lost,
    /// Durable: tokens continue after the last one issued.
    Durable,
    /// Resumed above the highest token the storage has accepted (at 1 if it has accepted none).
    FromStorage,
}

/// The model.
#[derive(Clone, Debug)]
pub struct TokenResetModel {
    /// Clients, each running the job once.
    pub clients: usize,
    /// Times a refused client runs again.
    pub retries: u8,
    /// What the counter does across the restart.
    pub counter: Counter,
}

/// A client's progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Has not run yet, or was refused with retries left.
    Waiting {
        /// Runs it may still make after a refusal.
        retries: u8,
    },
    /// Holds a lease and has not written yet (it may be paused here for any time).
    Holding {
        /// The lease's token.
        token: Token,
        /// Ghost: the grant's position among all grants.
        epoch: u8,
        /// Runs it may still make after a refusal.
        retries: u8,
    },
    /// Its write was stored.
    Stored,
    /// Its write was refused and it has no retries left.
    GaveUp,
}

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResetState {
    /// The lock service's table.
    pub table: LeaseTable<u8>,
    /// Whether the lock service has restarted.
    pub restarted: bool,
    /// The storage's fence.
    pub fence: Fence,
    /// Each client.
    pub clients: Vec<Client>,
    /// Ghost: `tokens_increase` over the grants (the library's checker).
    pub tokens: TokenOrder<Token>,
    /// Ghost: grants so far (each grant's epoch is its position in this count).
    pub grants: u8,
    /// Ghost: `storage_in_lease_order` over the stored writes' epochs (the library's checker).
    pub lease_order: LeaseOrder<u8>,
}

/// What happens next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResetAction {
    /// A waiting client takes the free lease.
    Take(u8),
    /// A holding client writes with its token and releases.
    Write(u8),
    /// The lock service restarts.
    Restart,
}

impl Model for TokenResetModel {
    type State = ResetState;
    type Action = ResetAction;

    fn init_states(&self) -> Vec<ResetState> {
        vec![ResetState {
            table: LeaseTable::new(),
            restarted: false,
            fence: Fence::fenced(),
            clients: vec![
                Client::Waiting {
                    retries: self.retries
                };
                self.clients
            ],
            tokens: TokenOrder::new(),
            grants: 0,
            lease_order: LeaseOrder::new(),
        }]
    }

    fn actions(&self, s: &ResetState, actions: &mut Vec<ResetAction>) {
        let free = s.table.holder(0).is_none();
        for (i, c) in s.clients.iter().enumerate() {
            match c {
                Client::Waiting { .. } if free => actions.push(ResetAction::Take(i as u8)),
                Client::Holding { .. } => actions.push(ResetAction::Write(i as u8)),
                _ => {}
            }
        }
        if !s.restarted {
            actions.push(ResetAction::Restart);
        }
    }

    fn next_state(&self, s: &ResetState, action: ResetAction) -> Option<ResetState> {
        let mut next = s.clone();
        match action {
            ResetAction::Take(i) => {
                let Client::Waiting { retries } = s.clients[i as usize] else {
                    return None;
                };
                // Time stands still: a lease ends by release or by the restart, never by expiry.
                let Acquire::Granted(lease) = next.table.acquire(i, 0, 1).ok()? else {
                    return None;
                };
                next.tokens.grant(lease.token);
                next.grants += 1;
                next.clients[i as usize] = Client::Holding {
                    token: lease.token,
                    epoch: next.grants,
                    retries,
                };
            }
            ResetAction::Write(i) => {
                let Client::Holding {
                    token,
                    epoch,
                    retries,
                } = s.clients[i as usize]
                else {
                    return None;
                };
                next.clients[i as usize] = match next.fence.admit(token) {
                    Ok(()) => {
                        next.lease_order.accept(epoch);
                        Client::Stored
                    }
                    Err(_) if retries > 0 => Client::Waiting {
                        retries: retries - 1,
                    },
                    Err(_) => Client::GaveUp,
                };
                // A lease forgotten by the restart is not this client's to release any more.
                let _ = next.table.release(&i, token);
            }
            ResetAction::Restart => {
                next.restarted = true;
                let resume = match self.counter {
                    Counter::Lost => None,
                    Counter::Durable => s.table.last_token(),
                    Counter::FromStorage => s.fence.highest(),
                };
                next.table = resume.map_or_else(LeaseTable::new, LeaseTable::resume_after);
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        declared_properties(self)
    }
}

impl Narrate for TokenResetModel {
    fn narrate(&self, before: &ResetState, action: &ResetAction, after: &ResetState) -> Step {
        match action {
            ResetAction::Take(i) => {
                let token = after.tokens.last().map_or(0, |t| t.get());
                Step {
                    from: format!("client-{i}"),
                    to: "lock-service".into(),
                    text: format!("client-{i} takes the lease (token {token})"),
                }
            }
            ResetAction::Write(i) => {
                let who = format!("client-{i}");
                let Client::Holding { token, .. } = before.clients[*i as usize] else {
                    unreachable!("only a holder writes")
                };
                let verdict = match after.clients[*i as usize] {
                    Client::Stored => "stored".to_string(),
                    _ => format!(
                        "refused (already saw {})",
                        before.fence.highest().map_or(0, |t| t.get())
                    ),
                };
                Step {
                    from: who.clone(),
                    to: "storage".into(),
                    text: format!("{who} writes with token {token}: {verdict}; releases"),
                }
            }
            ResetAction::Restart => Step {
                from: "lock-service".into(),
                to: "lock-service".into(),
                text: match self.counter {
                    Counter::Lost => {
                        "the lock service restarts: the lease is forgotten and the token \
                         counter starts again at 1"
                    }
                    Counter::Durable => {
                        "the lock service restarts: the lease is forgotten, the token counter \
                         resumes"
                    }
                    Counter::FromStorage => {
                        "the lock service restarts: the lease is forgotten, the token counter \
                         resumes above the storage's highest token"
                    }
                }
                .into(),
            },
        }
    }
}

not_symmetric!(TokenResetModel, ResetState);

/// Whether order holds: the counter is durable, or one client runs alone.
fn durable_or_alone(m: &TokenResetModel) -> Expected {
    Expected::holds_if(m.counter == Counter::Durable || m.clients < 2)
}

/// Every property of this model, declared once.
const DECLARED: &[Declared<TokenResetModel>] = &[
    Declared {
        name: prop::TOKENS_INCREASE,
        kind: Expectation::Always,
        meaning: meaning::TOKENS_INCREASE,
        expect: Expect::When {
            rule: "violated unless the counter is durable, once two clients run",
            when: durable_or_alone,
        },
        condition: |_: &TokenResetModel, s: &ResetState| s.tokens.holds(),
    },
    Declared {
        name: prop::STORAGE_IN_LEASE_ORDER,
        kind: Expectation::Always,
        meaning: meaning::STORAGE_IN_LEASE_ORDER,
        expect: Expect::When {
            rule: "violated unless the counter is durable, once two clients run",
            when: durable_or_alone,
        },
        condition: |_: &TokenResetModel, s: &ResetState| s.lease_order.holds(),
    },
    Declared {
        name: prop::PROGRESS,
        kind: Expectation::Eventually,
        meaning: "every client's write is eventually stored",
        expect: Expect::When {
            rule: PROGRESS_RULE,
            when: progress_expected,
        },
        condition: |_: &TokenResetModel, s: &ResetState| {
            s.clients.iter().all(|c| *c == Client::Stored)
        },
    },
    Declared {
        name: "restart_while_held",
        kind: Expectation::Sometimes,
        meaning: "the lock service restarts while a holder has not written yet",
        expect: Expect::Holds,
        condition: |_: &TokenResetModel, s: &ResetState| {
            s.restarted
                && s.clients
                    .iter()
                    .any(|c| matches!(c, Client::Holding { .. }))
        },
    },
    Declared {
        name: "restart_after_writes",
        kind: Expectation::Sometimes,
        meaning: "the lock service restarts after some write was stored",
        expect: Expect::Holds,
        condition: |_: &TokenResetModel, s: &ResetState| {
            s.restarted && s.clients.contains(&Client::Stored)
        },
    },
];

const PROGRESS_RULE: &str = "violated when one client can be refused more often than it may \
    retry: lost counter, retries + 2 < clients; counter from the storage, no retries and 3 clients \
    or more; durable counter, no retries and 2 clients or more (the holder paused across the \
    restart is fenced off, as it should be)";

/// When `progress` breaks. A refusal needs a stored token above the writer's. With a durable
/// counter only the holder paused across the restart can meet one (a later holder writes first);
/// from the storage it needs a third client, because the first grant after the restart repeats the
/// paused holder's token; with a lost counter every stored write before the restart can refuse
/// one grant after it.
fn progress_expected(m: &TokenResetModel) -> Expected {
    let violated = match m.counter {
        Counter::Lost => usize::from(m.retries) + 2 < m.clients,
        Counter::FromStorage => m.retries == 0 && m.clients >= 3,
        Counter::Durable => m.retries == 0 && m.clients >= 2,
    };
    Expected::holds_if(!violated)
}

impl Declares for TokenResetModel {
    fn declarations(&self) -> &'static [Declared<Self>] {
        DECLARED
    }
}

catalog_entry! {
    /// The catalog entry: a counter lost on restart.
    TokenReset: TokenResetModel {
        name: "token-reset",
        summary: "the lock service restarts and its token counter starts again (no persistence)",
        clients: 1..=6,
        mutants: &[],
        defaults: Params::sized(4, 1, 1),
        build: |p| TokenResetModel { clients: p.clients, retries: p.retries, counter: Counter::Lost },
    }
}

catalog_entry! {
    /// The catalog entry: a counter resumed above the storage's highest token.
    TokenFromStorage: TokenResetModel {
        name: "token-from-storage",
        summary: "the same restart, the counter resumed above the storage's highest token",
        clients: 1..=6,
        mutants: &[],
        defaults: Params::sized(4, 1, 1),
        build: |p| TokenResetModel {
            clients: p.clients,
            retries: p.retries,
            counter: Counter::FromStorage,
        },
    }
}

catalog_entry! {
    /// The catalog entry: the fix, a counter that survives the restart.
    DurableToken: TokenResetModel {
        name: "durable-token",
        summary: "the same restart with a durable token counter: the fix",
        clients: 1..=6,
        mutants: &[],
        defaults: Params::sized(4, 1, 1),
        build: |p| TokenResetModel { clients: p.clients, retries: p.retries, counter: Counter::Durable },
    }
}
