//! A lock service whose token counter is not durable.
//!
//! Each client runs its job once: it takes the lease (the core `LeaseTable`), writes to fenced
//! storage (the core `Fence`) with the lease's token, and releases. The lock service may restart
//! once; without persistence (a Redis `INCR` counter without AOF) the restart forgets the counter
//! and tokens start again at 1. Tokens then go backwards (`tokens_increase` violated from two
//! clients on) and the fenced storage refuses every new holder until the counter passes the old
//! high-water mark. With k writes stored before the restart, the next k − 1 grants are refused;
//! k can reach clients − 1, and one client can draw every refusal, so a client gives up (`progress`
//! violated) exactly when retries + 2 < clients. In this model taking the lease, writing and
//! releasing are one step, so no holder is paused across the restart. The fixed
//! variant keeps the counter across the restart (a durable counter, or one resumed above the
//! storage's highest token): both properties hold.

use super::{
    declared_properties, meaning, Declared, Declares, Expect, Expected, Narrate, Params, Step,
    Symmetric,
};
use crate::protocol::{Acquire, Fence, LeaseOrder, LeaseTable, Token, TokenOrder};
use stateright::{Expectation, Model, Property};

/// The model.
#[derive(Clone, Debug)]
pub struct TokenResetModel {
    /// Clients, each running the job once.
    pub clients: usize,
    /// Times a refused client runs again.
    pub retries: u8,
    /// Whether the counter survives the restart.
    pub durable: bool,
}

/// A client's progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Has not run yet, or was refused with retries left.
    Waiting {
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
    /// Client takes the lease, writes with its token, releases.
    RunJob(u8),
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
        for (i, c) in s.clients.iter().enumerate() {
            if matches!(c, Client::Waiting { .. }) {
                actions.push(ResetAction::RunJob(i as u8));
            }
        }
        if !s.restarted {
            actions.push(ResetAction::Restart);
        }
    }

    fn next_state(&self, s: &ResetState, action: ResetAction) -> Option<ResetState> {
        let mut next = s.clone();
        match action {
            ResetAction::RunJob(i) => {
                let Acquire::Granted(lease) = next.table.acquire(i, 0, 1).ok()? else {
                    return None;
                };
                next.tokens.grant(lease.token);
                next.grants += 1;
                let epoch = next.grants;
                let Client::Waiting { retries } = s.clients[i as usize] else {
                    return None;
                };
                next.clients[i as usize] = match next.fence.admit(lease.token) {
                    Ok(()) => {
                        next.lease_order.accept(epoch);
                        Client::Stored
                    }
                    Err(_) if retries > 0 => Client::Waiting {
                        retries: retries - 1,
                    },
                    Err(_) => Client::GaveUp,
                };
                next.table.release(&i, lease.token).ok()?;
            }
            ResetAction::Restart => {
                next.restarted = true;
                next.table = match (self.durable, s.table.last_token()) {
                    (true, Some(last)) => LeaseTable::resume_after(last),
                    _ => LeaseTable::new(),
                };
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
            ResetAction::RunJob(i) => {
                let who = format!("client-{i}");
                let token = after.tokens.last().map_or(0, |t| t.get());
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
                    text: format!(
                        "{who} takes the lease (token {token}), writes: {verdict}, releases"
                    ),
                }
            }
            ResetAction::Restart => Step {
                from: "lock-service".into(),
                to: "lock-service".into(),
                text: if self.durable {
                    "the lock service restarts and resumes its token counter".into()
                } else {
                    "the lock service restarts and its token counter starts again at 1".into()
                },
            },
        }
    }
}

impl Symmetric for TokenResetModel {
    const REDUCES: bool = false;

    fn representative(state: &ResetState) -> ResetState {
        state.clone()
    }
}

/// Every property of this model, declared once.
const DECLARED: &[Declared<TokenResetModel>] = &[
    Declared {
        name: "tokens_increase",
        kind: Expectation::Always,
        meaning: meaning::TOKENS_INCREASE,
        expect: Expect::When {
            rule: "violated without a durable counter once two clients run",
            when: |m| {
                if !m.durable && m.clients >= 2 {
                    Expected::Violated
                } else {
                    Expected::Holds
                }
            },
        },
        condition: |_: &TokenResetModel, s: &ResetState| s.tokens.holds(),
    },
    Declared {
        name: "storage_in_lease_order",
        kind: Expectation::Always,
        meaning: meaning::STORAGE_IN_LEASE_ORDER,
        expect: Expect::Holds,
        condition: |_: &TokenResetModel, s: &ResetState| s.lease_order.holds(),
    },
    Declared {
        name: "progress",
        kind: Expectation::Eventually,
        meaning: "every client's write is eventually stored",
        expect: Expect::When {
            rule: "violated without a durable counter when retries + 2 < clients",
            when: |m| {
                if !m.durable && usize::from(m.retries) + 2 < m.clients {
                    Expected::Violated
                } else {
                    Expected::Holds
                }
            },
        },
        condition: |_: &TokenResetModel, s: &ResetState| {
            s.clients.iter().all(|c| *c == Client::Stored)
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
        defaults: Params::sized(3, 1, 0),
        build: |p| TokenResetModel { clients: p.clients, retries: p.retries, durable: false },
    }
}

catalog_entry! {
    /// The catalog entry: the fix, a counter that survives the restart.
    DurableToken: TokenResetModel {
        name: "durable-token",
        summary: "the same restart with a durable token counter: the fix",
        clients: 1..=6,
        mutants: &[],
        defaults: Params::sized(3, 1, 0),
        build: |p| TokenResetModel { clients: p.clients, retries: p.retries, durable: true },
    }
}
