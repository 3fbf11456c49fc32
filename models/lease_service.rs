//! The lease-service protocol shared by the TTL-only and fenced models.
//!
//! Actors: one lock service (`Id` 0) holding the core [`LeaseTable`] and a logical clock, one
//! storage (`Id` 1) holding the core [`Fence`], and `clients` interchangeable clients.
//!
//! A client asks the lock service for the lease; a busy service leaves the request waiting until
//! the lease is free. Granted, the client believes it holds the lease and writes to the storage,
//! one write at a time, `writes_per_client` writes in all, then releases. A rejected write tells
//! the client it lost the lease: it stops believing and, if it has writes left, asks for the
//! lease again. Each write is attempted once, so the number of grants stays bounded.
//!
//! The network is unordered and does not duplicate: a message that stays in flight while others
//! are delivered is a client paused (a GC pause, a stopped VM). The lease's expiry is a timer of
//! the lock service that may fire at any moment while a lease is live, advancing the service's
//! clock to the lease's deadline; the client is not told.
//!
//! Ghost state, which no actor reads: every grant is numbered (its *epoch*), the number travels
//! with the grant, the writes and the storage's reply, and the model's history records what the
//! properties need.

use super::{Declared, Declares, Mutant, Narrate, Step, Symmetric};
use crate::protocol::{Acquire, Fence, FencePolicy, LeaseOrder, LeaseTable, Token, TokenOrder};
use stateright::actor::{model_timeout, Actor, ActorModel, ActorModelAction, Id, Network, Out};
use stateright::{Rewrite, RewritePlan};
use std::borrow::Cow;

/// The lock service's actor index.
pub const LOCK_SERVICE_INDEX: usize = 0;
/// The storage's actor index.
pub const STORAGE_INDEX: usize = 1;

/// The lock service's actor id.
pub fn lock_service() -> Id {
    Id::from(LOCK_SERVICE_INDEX)
}

/// The storage's actor id.
pub fn storage() -> Id {
    Id::from(STORAGE_INDEX)
}
/// The id of the first client; client `i` has id `FIRST_CLIENT + i`.
pub const FIRST_CLIENT: usize = 2;

/// A lease lasts one tick of the lock service's logical clock.
pub const TTL: u64 = 1;
/// The lock service's logical clock, rebased to 0 at every expiry.
const NOW: u64 = 0;

/// The ghost number of a grant: the n-th lease the service granted.
pub type Epoch = u8;

/// Parameters of a lease-service model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseServiceCfg {
    /// Number of clients.
    pub clients: usize,
    /// Writes each client makes (each attempted once) before releasing.
    pub writes_per_client: u8,
    /// Times a client asks for the lease again after a rejected write told it the lease was lost.
    pub retries: u8,
    /// What the storage does with a write's token.
    pub policy: FencePolicy,
    /// A deliberately broken variant, for negative controls.
    pub mutant: Option<Mutant>,
}

/// Messages between clients, the lock service and the storage.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// Client to lock service: grant me the lease (waits while the lease is live).
    Acquire,
    /// Lock service to client: the lease is yours with this token.
    Grant {
        /// The fencing token.
        token: Token,
        /// Ghost: which grant this is.
        epoch: Epoch,
    },
    /// Client to lock service: I am done with the lease of this token.
    Release {
        /// The token of the lease to release.
        token: Token,
    },
    /// Client to storage: write under this token.
    Write {
        /// The writer's token.
        token: Token,
        /// Ghost: the grant the writer holds.
        epoch: Epoch,
    },
    /// Storage to client: the write is stored.
    Accepted {
        /// The write's token.
        token: Token,
        /// Ghost: the grant the write came from.
        epoch: Epoch,
    },
    /// Storage to client: a newer lease has written; the write is refused.
    Rejected {
        /// The write's token.
        token: Token,
        /// The highest token the storage has accepted.
        highest: Token,
    },
}

/// The lock service's only timer: the live lease runs out.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timer {
    /// The live lease's ttl passes.
    LeaseExpiry,
}

/// A client's view of the lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientState {
    /// Its acquire request is in flight or waiting; `left` writes still to make.
    Acquiring {
        /// Writes still to make.
        left: u8,
        /// Times it may still ask again after losing its lease.
        retries: u8,
    },
    /// It believes it holds the lease with `token`; one write is in flight.
    Holding {
        /// The token it was granted.
        token: Token,
        /// Ghost: the grant.
        epoch: Epoch,
        /// Writes still to make, counting the one in flight.
        left: u8,
        /// Times it may still ask again after losing its lease.
        retries: u8,
    },
    /// It has made all its writes (and released the lease, unless a rejection told it the lease
    /// was already lost).
    Done,
}

/// One actor's state. The variants are ordered lock service < storage < client so that symmetry
/// reduction, which sorts actor states, never moves the two fixed roles.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeState {
    /// The lock service: the core lease table. Its logical clock always reads 0: an expiry
    /// advances time to the lease's deadline and rebases the table there, which keeps equal
    /// situations equal states however many expiries led to them.
    LockService {
        /// The protocol core's lease table; owners are client ids.
        table: LeaseTable<Id>,
        /// Ghost: grants made so far.
        grants: Epoch,
    },
    /// The storage: the core fence.
    Storage {
        /// The protocol core's fence.
        fence: Fence,
    },
    /// A client.
    Client(ClientState),
}

/// What the model remembers beyond the actors' states (ghost history, read only by properties).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ghost {
    /// `tokens_increase` over the grants (the library's checker).
    pub tokens: TokenOrder<Token>,
    /// `storage_in_lease_order` over the accepted writes (the library's history checker).
    pub lease_order: LeaseOrder<Epoch>,
}

/// The actors of the model.
#[derive(Clone, Debug)]
pub enum Node {
    /// The lock service (correct unless the mutant says otherwise).
    LockService {
        /// A deliberate bug, for negative controls.
        mutant: Option<Mutant>,
    },
    /// The storage.
    Storage {
        /// What the storage does with a write's token.
        policy: FencePolicy,
        /// A deliberate bug, for negative controls.
        mutant: Option<Mutant>,
    },
    /// A client making this many writes.
    Client {
        /// Writes to make.
        writes: u8,
        /// Times it asks for the lease again after learning it lost it.
        retries: u8,
    },
}

/// The Stateright model type of every lease-service model.
pub type LeaseModel = ActorModel<Node, LeaseServiceCfg, Ghost>;
/// A state of [`LeaseModel`].
pub type LeaseState = stateright::actor::ActorModelState<Node, Ghost>;
/// An action of [`LeaseModel`].
pub type LeaseAction = ActorModelAction<Msg, Timer, ()>;

/// Property names (DESIGN.md).
pub mod prop {
    /// Storage never accepts a write from an older lease after one from a newer lease.
    pub const STORAGE_IN_LEASE_ORDER: &str = "storage_in_lease_order";
    /// At most one client believes it holds the lease.
    pub const SINGLE_BELIEVER: &str = "single_believer";
    /// Every grant carries a token larger than every earlier grant's.
    pub const TOKENS_INCREASE: &str = "tokens_increase";
    /// Some write is eventually accepted on every path.
    pub const PROGRESS: &str = "progress";
    /// Some write is accepted (reachability).
    pub const WRITE_ACCEPTED: &str = "write_accepted";
    /// The lease is granted a second time (reachability).
    pub const LEASE_REGRANTED: &str = "lease_regranted";
    /// The storage rejects a stale write (reachability).
    pub const STALE_WRITE_REJECTED: &str = "stale_write_rejected";
}

/// The client id of client number `i`.
pub fn client_id(i: usize) -> Id {
    Id::from(FIRST_CLIENT + i)
}

/// A lifeline name for an actor id.
pub fn lifeline(id: Id) -> String {
    match usize::from(id) {
        0 => "lock-service".to_string(),
        1 => "storage".to_string(),
        n => format!("client-{}", n - FIRST_CLIENT),
    }
}

impl Actor for Node {
    type Msg = Msg;
    type Timer = Timer;
    type State = NodeState;
    type Storage = ();
    type Random = ();

    fn name(&self) -> String {
        match self {
            Node::LockService { .. } => "lock-service".into(),
            Node::Storage { .. } => "storage".into(),
            Node::Client { .. } => "client".into(),
        }
    }

    fn on_start(&self, _id: Id, _storage: &Option<()>, o: &mut Out<Self>) -> NodeState {
        match self {
            Node::LockService { .. } => NodeState::LockService {
                table: LeaseTable::new(),
                grants: 0,
            },
            Node::Storage { policy, .. } => NodeState::Storage {
                fence: Fence::new(*policy),
            },
            Node::Client { writes, retries } => {
                o.send(lock_service(), Msg::Acquire);
                NodeState::Client(ClientState::Acquiring {
                    left: *writes,
                    retries: *retries,
                })
            }
        }
    }

    fn on_msg(&self, _id: Id, state: &mut Cow<NodeState>, src: Id, msg: Msg, o: &mut Out<Self>) {
        match (&**state, msg) {
            (NodeState::LockService { table, grants }, Msg::Acquire) => {
                let (mut table, grants) = (table.clone(), *grants);
                // A busy answer changes nothing: the request stays in flight, i.e. it waits.
                let previous = table.last_token();
                if let Ok(Acquire::Granted(lease)) = table.acquire(src, NOW, TTL) {
                    let epoch = grants + 1;
                    let token = match (self, previous) {
                        (
                            Node::LockService {
                                mutant: Some(Mutant::TokenReused),
                            },
                            Some(p),
                        ) => p,
                        _ => lease.token,
                    };
                    o.send(src, Msg::Grant { token, epoch });
                    o.set_timer(Timer::LeaseExpiry, model_timeout());
                    *state.to_mut() = NodeState::LockService {
                        table,
                        grants: epoch,
                    };
                }
            }
            (NodeState::LockService { table, grants }, Msg::Release { token }) => {
                let (mut table, grants) = (table.clone(), *grants);
                // A stale release is refused by the core and changes nothing.
                if table.release(&src, token).is_ok() {
                    o.cancel_timer(Timer::LeaseExpiry);
                    *state.to_mut() = NodeState::LockService { table, grants };
                }
            }
            (NodeState::Storage { fence }, Msg::Write { token, epoch }) => {
                let mut fence = fence.clone();
                let accepts_older = matches!(
                    self,
                    Node::Storage {
                        mutant: Some(Mutant::FenceAcceptsOlder),
                        ..
                    }
                );
                match fence.admit(token) {
                    Ok(()) => o.send(src, Msg::Accepted { token, epoch }),
                    // The mutant stores the write although the fence refused it.
                    Err(_) if accepts_older => o.send(src, Msg::Accepted { token, epoch }),
                    Err(stale) => o.send(
                        src,
                        Msg::Rejected {
                            token,
                            highest: stale.highest,
                        },
                    ),
                }
                *state.to_mut() = NodeState::Storage { fence };
            }
            (NodeState::Client(client), msg) => {
                if let Some(next) = client_step(client, msg, o) {
                    *state.to_mut() = NodeState::Client(next);
                }
            }
            _ => {}
        }
    }

    fn on_timeout(&self, _id: Id, state: &mut Cow<NodeState>, _timer: &Timer, _o: &mut Out<Self>) {
        if let NodeState::LockService { table, grants } = &**state {
            // The live lease runs out: time passes to its deadline, which becomes the new origin.
            if let Some(expires_at) = table.holder(NOW).map(|l| l.expires_at) {
                let (mut table, grants) = (table.clone(), *grants);
                table.rebase(expires_at);
                *state.to_mut() = NodeState::LockService { table, grants };
            }
        }
    }
}

/// What a client does with a message; `None` when it changes nothing.
fn client_step(client: &ClientState, msg: Msg, o: &mut Out<Node>) -> Option<ClientState> {
    match (client, msg) {
        (ClientState::Acquiring { left, retries }, Msg::Grant { token, epoch }) => {
            o.send(storage(), Msg::Write { token, epoch });
            Some(ClientState::Holding {
                token,
                epoch,
                left: *left,
                retries: *retries,
            })
        }
        (
            ClientState::Holding {
                token,
                epoch,
                left,
                retries,
            },
            Msg::Accepted { .. },
        ) => {
            if *left > 1 {
                o.send(
                    storage(),
                    Msg::Write {
                        token: *token,
                        epoch: *epoch,
                    },
                );
                Some(ClientState::Holding {
                    token: *token,
                    epoch: *epoch,
                    left: left - 1,
                    retries: *retries,
                })
            } else {
                o.send(lock_service(), Msg::Release { token: *token });
                Some(ClientState::Done)
            }
        }
        (ClientState::Holding { left, retries, .. }, Msg::Rejected { .. }) => {
            // The lease was lost: stop believing; ask again for the writes still to make, if
            // the retry budget allows, else give them up.
            if *left > 1 && *retries > 0 {
                o.send(lock_service(), Msg::Acquire);
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

impl Rewrite<Id> for NodeState {
    fn rewrite<S>(&self, plan: &RewritePlan<Id, S>) -> Self {
        match self {
            NodeState::LockService { table, grants } => NodeState::LockService {
                table: table.map_owner(|owner| plan.rewrite(owner)),
                grants: *grants,
            },
            other => other.clone(),
        }
    }
}

impl Rewrite<Id> for Msg {
    fn rewrite<S>(&self, _plan: &RewritePlan<Id, S>) -> Self {
        self.clone()
    }
}

impl Rewrite<Id> for Ghost {
    fn rewrite<S>(&self, _plan: &RewritePlan<Id, S>) -> Self {
        self.clone()
    }
}

fn record_out(
    _cfg: &LeaseServiceCfg,
    ghost: &Ghost,
    env: stateright::actor::Envelope<&Msg>,
) -> Option<Ghost> {
    let mut next = ghost.clone();
    match env.msg {
        Msg::Grant { token, .. } => {
            next.tokens.grant(*token);
        }
        Msg::Accepted { epoch, .. } => {
            next.lease_order.accept(*epoch);
        }
        _ => return None,
    }
    (next != *ghost).then_some(next)
}

/// The declarations of a lease model with storage `policy`: the TTL-only model's or the fenced
/// model's.
fn declarations(policy: FencePolicy) -> &'static [Declared<LeaseModel>] {
    match policy {
        FencePolicy::AcceptAll => super::ttl_only::DECLARED,
        FencePolicy::Fenced => super::fenced::DECLARED,
    }
}

impl Declares for LeaseModel {
    fn declarations(&self) -> &'static [Declared<LeaseModel>] {
        declarations(self.cfg.policy)
    }
}

/// The conditions of the lease models' properties, shared by the TTL-only and fenced models.
pub mod condition {
    use super::{believers, grants, LeaseModel, LeaseState, Msg};

    /// `storage_in_lease_order`: the library's checker over the accepted writes' epochs.
    pub fn in_lease_order(_: &LeaseModel, s: &LeaseState) -> bool {
        s.history.lease_order.holds()
    }

    /// `single_believer`.
    pub fn single_believer(_: &LeaseModel, s: &LeaseState) -> bool {
        believers(s) <= 1
    }

    /// `progress` and `write_accepted`: some write was stored.
    pub fn write_stored(_: &LeaseModel, s: &LeaseState) -> bool {
        s.history.lease_order.newest().is_some()
    }

    /// `lease_regranted`.
    pub fn regranted(_: &LeaseModel, s: &LeaseState) -> bool {
        grants(s) >= 2
    }

    /// `stale_write_rejected`. Every rejection puts a Rejected reply in flight, so reaching such
    /// a state is the same as a rejection happening; reading the network keeps the history lean.
    pub fn stale_write_rejected(_: &LeaseModel, s: &LeaseState) -> bool {
        s.network
            .iter_deliverable()
            .any(|e| matches!(e.msg, Msg::Rejected { .. }))
    }

    /// `tokens_increase`.
    pub fn tokens_increase(_: &LeaseModel, s: &LeaseState) -> bool {
        s.history.tokens.holds()
    }
}

/// How many leases the lock service has granted.
pub fn grants(state: &LeaseState) -> Epoch {
    match &*state.actor_states[LOCK_SERVICE_INDEX] {
        NodeState::LockService { grants, .. } => *grants,
        _ => 0,
    }
}

/// The number of clients that believe they hold the lease.
pub fn believers(state: &LeaseState) -> usize {
    state
        .actor_states
        .iter()
        .filter(|s| matches!(***s, NodeState::Client(ClientState::Holding { .. })))
        .count()
}

impl LeaseServiceCfg {
    /// Builds the Stateright model.
    pub fn into_model(self) -> LeaseModel {
        let (writes, retries) = (self.writes_per_client, self.retries);
        let clients = self.clients;
        let (policy, mutant) = (self.policy, self.mutant);
        let mut model = ActorModel::new(self, Ghost::default())
            .actor(Node::LockService { mutant })
            .actor(Node::Storage { policy, mutant })
            .actors((0..clients).map(|_| Node::Client { writes, retries }))
            .init_network(Network::new_unordered_nonduplicating([]))
            .record_msg_out(record_out);
        for p in declarations(policy) {
            model = model.property(p.kind.clone(), p.name, p.condition);
        }
        model
    }
}

/// The message from `src` to `dst` that `after` has in flight more often than `before`: what
/// the step sent.
fn sent(before: &LeaseState, after: &LeaseState, src: Id, dst: Id) -> Option<Msg> {
    let count = |state: &LeaseState, msg: &Msg| {
        state
            .network
            .iter_all()
            .filter(|e| e.src == src && e.dst == dst && e.msg == msg)
            .count()
    };
    after
        .network
        .iter_all()
        .filter(|e| e.src == src && e.dst == dst)
        .map(|e| e.msg.clone())
        .find(|m| count(after, m) > count(before, m))
}

fn current_lease(state: &LeaseState) -> Option<&crate::protocol::Lease<Id>> {
    match &*state.actor_states[LOCK_SERVICE_INDEX] {
        NodeState::LockService { table, .. } => table.current(),
        _ => None,
    }
}

impl Narrate for LeaseModel {
    fn narrate(&self, before: &LeaseState, action: &LeaseAction, after: &LeaseState) -> Step {
        let step = |from: Id, to: Id, text: String| Step {
            from: lifeline(from),
            to: lifeline(to),
            text,
        };
        match action {
            ActorModelAction::Deliver { src, dst, msg } => {
                let who = lifeline(*src);
                match msg {
                    Msg::Acquire => {
                        let text = match sent(before, after, *dst, *src) {
                            Some(Msg::Grant { token, .. }) => {
                                format!("{who} acquires the lease (token {token})")
                            }
                            _ => format!("{who} asks for the lease"),
                        };
                        step(*src, *dst, text)
                    }
                    Msg::Grant { token, .. } => step(
                        *src,
                        *dst,
                        format!(
                            "{} receives its lease (token {token}) and sends a write with token {token}",
                            lifeline(*dst)
                        ),
                    ),
                    Msg::Release { token } => {
                        step(*src, *dst, format!("{who} releases the lease (token {token})"))
                    }
                    Msg::Write { token, .. } => {
                        let verdict = match sent(before, after, *dst, *src) {
                            Some(Msg::Accepted { .. }) => "accepted".to_string(),
                            Some(Msg::Rejected { highest, .. }) => {
                                format!("rejected (already saw {highest})")
                            }
                            _ => "no answer".to_string(),
                        };
                        step(
                            *src,
                            *dst,
                            format!("{who} writes with token {token}: {verdict}"),
                        )
                    }
                    Msg::Accepted { token, .. } => {
                        let next = match &*after.actor_states[usize::from(*dst)] {
                            NodeState::Client(ClientState::Done) => {
                                format!("and releases the lease (token {token})")
                            }
                            _ => format!("and sends its next write with token {token}"),
                        };
                        step(
                            *src,
                            *dst,
                            format!("{} learns its write is stored {next}", lifeline(*dst)),
                        )
                    }
                    Msg::Rejected { token, highest } => step(
                        *src,
                        *dst,
                        format!(
                            "{} learns its write was refused (token {token} < {highest}), stops \
                             believing it holds the lease and asks again",
                            lifeline(*dst)
                        ),
                    ),
                }
            }
            ActorModelAction::Timeout(id, Timer::LeaseExpiry) => {
                let text = match current_lease(before) {
                    Some(l) => format!(
                        "the lease of {} (token {}) expires",
                        lifeline(l.owner),
                        l.token
                    ),
                    None => "the lock service's clock moves".to_string(),
                };
                step(*id, *id, text)
            }
            other => step(lock_service(), lock_service(), format!("{other:?}")),
        }
    }
}

impl Symmetric for LeaseModel {
    /// Sorts the clients by what distinguishes them: their state, whether the lock service's
    /// table names them, and the messages they have in flight. The lock service and the storage
    /// sort first and stay in place; every id inside the state is rewritten by the same
    /// permutation, so the result is an equivalent state.
    fn representative(state: &LeaseState) -> LeaseState {
        let owner = current_lease(state).map(|l| l.owner);
        let keys: Vec<_> = state
            .actor_states
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let id = Id::from(i);
                let mut msgs: Vec<(bool, &Msg)> = state
                    .network
                    .iter_all()
                    .filter(|e| e.src == id || e.dst == id)
                    .map(|e| (e.src == id, e.msg))
                    .collect();
                msgs.sort();
                (&**s, owner == Some(id), msgs)
            })
            .collect();
        let plan = RewritePlan::<Id, _>::from_values_to_sort(&keys);
        LeaseState {
            actor_states: plan.reindex(&state.actor_states),
            network: state.network.rewrite(&plan),
            timers_set: plan.reindex(&state.timers_set),
            random_choices: plan.reindex(&state.random_choices),
            crashed: plan.reindex(&state.crashed),
            actor_storages: plan.reindex(&state.actor_storages),
            history: state.history.rewrite(&plan),
        }
    }
}
