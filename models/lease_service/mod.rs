//! The lease-service protocol shared by the TTL-only and fenced models.
//!
//! Actors: one lock service (`Id` 0) holding the core [`LeaseTable`](crate::protocol::LeaseTable) and a logical clock, one
//! storage (`Id` 1) holding the core [`Fence`](crate::protocol::Fence), and `clients` interchangeable clients.
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

//!
//! The same actors serve users' own clients: [`Client`] is the sans-IO interface a client
//! implements, [`Environment`] places instances of it in the untimed [`World`] or the clocked
//! [`TimedWorld`], and [`properties`] holds every property's condition once, for the catalog and
//! the users' worlds alike.

mod actor;
mod client;
mod msg;
mod narrate;
pub mod properties;
mod symmetry;
mod timed;
#[cfg(test)]
mod timed_tests;
mod world;
mod writer;

pub(crate) use actor::{event_of, message_of, serve, store};
pub use client::{Busy, Client, Command, Commands, Event, Lease, LeaseEnd, Service};
pub use msg::{Ghost, Msg, Node, NodeState, Timer};
pub(crate) use narrate::{asked, told};
pub use timed::{TimedAction, TimedState, TimedWorld, Timing};
pub use world::{
    Environment, EnvironmentError, World, WorldCfg, BUILT_IN_NAMES, EFFECT_EXACTLY_ONCE,
    MAX_PREDICATES,
};
pub use writer::{ClientState, Writer};

use super::{Declared, Declares, Mutant};
use crate::protocol::FencePolicy;
use stateright::actor::{ActorModel, ActorModelAction, ActorModelState, Envelope, Id, Network};

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
pub const NOW: u64 = 0;

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

/// The Stateright model type of every lease-service model of the catalog.
pub type LeaseModel = ActorModel<Node, LeaseServiceCfg, Ghost>;
/// A state of a lease-service world with clients of type `C`.
pub type WorldState<C = Writer> = ActorModelState<Node<C>, Ghost>;
/// A state of [`LeaseModel`].
pub type LeaseState = WorldState<Writer>;
/// An action of [`LeaseModel`].
pub type LeaseAction = ActorModelAction<Msg, Timer, ()>;

pub use super::prop;

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

/// Records the ghost history of a lease-service world: every grant's token and every accepted
/// write's grant.
pub(crate) fn record_out<Cfg>(_cfg: &Cfg, ghost: &Ghost, env: Envelope<&Msg>) -> Option<Ghost> {
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
        FencePolicy::AcceptAll => properties::TTL_ONLY,
        FencePolicy::Fenced => properties::FENCED,
    }
}

impl Declares for LeaseModel {
    fn declarations(&self) -> &'static [Declared<LeaseModel>] {
        declarations(self.cfg.policy)
    }
}

/// How many leases the lock service has granted.
pub fn grants<C: Client>(state: &WorldState<C>) -> Epoch {
    match &*state.actor_states[LOCK_SERVICE_INDEX] {
        NodeState::LockService { grants, .. } => *grants,
        _ => 0,
    }
}

/// Each client with its state, in actor order.
pub fn clients<'a, C: Client, Cfg>(
    model: &'a ActorModel<Node<C>, Cfg, Ghost>,
    state: &'a WorldState<C>,
) -> impl Iterator<Item = (&'a C, &'a C::State)> + 'a {
    model
        .actors
        .iter()
        .zip(&state.actor_states)
        .filter_map(|(actor, s)| match (actor, &**s) {
            (Node::Client(c), NodeState::Client(s)) => Some((c, s)),
            _ => None,
        })
}

/// The number of clients that believe they hold the lease.
pub fn believers<C: Client, Cfg>(
    model: &ActorModel<Node<C>, Cfg, Ghost>,
    state: &WorldState<C>,
) -> usize {
    clients(model, state).filter(|(c, s)| c.holds(s)).count()
}

impl LeaseServiceCfg {
    /// Builds the Stateright model.
    pub fn into_model(self) -> LeaseModel {
        let (writes, retries) = (self.writes_per_client, self.retries);
        let clients = self.clients;
        let (policy, mutant) = (self.policy, self.mutant);
        let mut model = ActorModel::new(self, Ghost::default())
            .actor(Node::LockService {
                mutant,
                service: Service::default(),
            })
            .actor(Node::Storage { policy, mutant })
            .actors((0..clients).map(|_| Node::Client(Writer { writes, retries })))
            .init_network(Network::new_unordered_nonduplicating([]))
            .record_msg_out(record_out);
        for p in declarations(policy) {
            model = model.property(p.kind.clone(), p.name, p.condition);
        }
        model
    }
}

/// Records the ghost history as the catalog does, and counts the effects stored: every write the
/// storage accepts.
pub(crate) fn record_effects<Cfg>(cfg: &Cfg, ghost: &Ghost, env: Envelope<&Msg>) -> Option<Ghost> {
    let effect = matches!(env.msg, Msg::Accepted { .. });
    let recorded = record_out(cfg, ghost, env);
    if !effect {
        return recorded;
    }
    let mut next = recorded.unwrap_or_else(|| ghost.clone());
    next.effects = next.effects.saturating_add(1);
    Some(next)
}
