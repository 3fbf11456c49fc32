//! The messages, timers and states of a lease-service world, and its actors.

use super::{ClientState, Epoch, Service, Writer};
use crate::models::Mutant;
use crate::protocol::{Fence, FencePolicy, LeaseOrder, LeaseTable, Token, TokenOrder};
use stateright::actor::Id;

/// Messages between clients, the lock service and the storage. Fields named `epoch` are ghost:
/// which grant a lease was, carried so the properties can order writes by lease; no actor reads
/// them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// Client to lock service: grant me the lease (waits while the lease is live, unless the
    /// service refuses busy requests).
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
    /// Client to lock service: delete the lock, whoever holds it (`DEL key`).
    ReleaseByName,
    /// Lock service to client: whether [`Msg::ReleaseByName`] deleted a live lease.
    Released {
        /// Whether a live lease was deleted.
        deleted: bool,
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
        /// Ghost: the grant the write came from.
        epoch: Epoch,
    },
    /// Lock service to client: the lease is held ([`Busy::Refuse`](super::Busy::Refuse) only).
    Refused,
    /// Client to lock service: extend my lease.
    Renew {
        /// The lease's token.
        token: Token,
        /// Ghost: its grant.
        epoch: Epoch,
    },
    /// Lock service to client: whether the renewal succeeded.
    Renewed {
        /// The lease's token.
        token: Token,
        /// Ghost: its grant.
        epoch: Epoch,
        /// Whether the lease was live and is extended.
        ok: bool,
    },
    /// Client to lock service: is my lease still live?
    Check {
        /// The lease's token.
        token: Token,
        /// Ghost: its grant.
        epoch: Epoch,
    },
    /// Lock service to client: whether the lease was live and the client's when it looked.
    Status {
        /// The lease's token.
        token: Token,
        /// Ghost: its grant.
        epoch: Epoch,
        /// Whether it was live.
        live: bool,
    },
    /// Client to storage: write without a token (the storage cannot fence it).
    WriteUnfenced {
        /// The lease the writer holds (not sent: for telling the step only).
        token: Token,
        /// Ghost: its grant.
        epoch: Epoch,
    },
    /// Lock service to the holder: your lease has ended ([`LeaseEnd::Notified`](super::LeaseEnd::Notified) only).
    Expired {
        /// The lease's token.
        token: Token,
        /// Ghost: its grant.
        epoch: Epoch,
    },
    /// Client to storage: apply the job's effect unless it has been applied (an idempotent
    /// write keyed by the job, such as `INSERT ... ON CONFLICT DO NOTHING`).
    WriteOnce {
        /// The lease the writer holds (not compared: for telling the step only).
        token: Token,
        /// Ghost: its grant.
        epoch: Epoch,
    },
    /// Storage to client: the write-once found the effect already applied.
    AlreadyDone {
        /// The write's lease token.
        token: Token,
        /// Ghost: its grant.
        epoch: Epoch,
    },
    /// Client to storage: what is the largest token you have accepted?
    Read,
    /// Storage to client: the largest token it has accepted.
    ReadAnswer {
        /// The largest accepted token, if any.
        highest: Option<Token>,
    },
}

/// The timers: the lock service's lease expiry and a client's own timer.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timer {
    /// The live lease's ttl passes.
    LeaseExpiry,
    /// A client's timer fires (clients of the public API only).
    Client,
    /// The lock service restarts without persistence (once; public API only).
    Restart,
}

/// One actor's state. The variants are ordered lock service < storage < client so that symmetry
/// reduction, which sorts actor states, never moves the two fixed roles.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeState<S = ClientState> {
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
        /// Whether a write-once (an idempotent write keyed by the job) has been applied; only
        /// clients of the public API send one.
        done: bool,
    },
    /// A client, in its own state type.
    Client(S),
}

/// What the model remembers beyond the actors' states (ghost history, read only by properties).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ghost {
    /// `tokens_increase` over the grants (the library's checker).
    pub tokens: TokenOrder<Token>,
    /// `storage_in_lease_order` over the accepted writes (the library's history checker).
    pub lease_order: LeaseOrder<Epoch>,
    /// The job's effects stored: every accepted write (`effect_exactly_once`; counted in the
    /// worlds of the public client API only, 0 in the catalog's models).
    pub effects: u8,
}

/// The actors of the model, with clients of type `C` (the catalog's [`Writer`], or a client of
/// the public API, [`crate::client`]).
#[derive(Clone, Debug)]
pub enum Node<C = Writer> {
    /// The lock service (correct unless the mutant says otherwise).
    LockService {
        /// A deliberate bug, for negative controls.
        mutant: Option<Mutant>,
        /// How it answers busy requests, whether it tells a holder its lease ended, whether it
        /// restarts.
        service: Service,
    },
    /// The storage.
    Storage {
        /// What the storage does with a write's token.
        policy: FencePolicy,
        /// A deliberate bug, for negative controls.
        mutant: Option<Mutant>,
    },
    /// A client.
    Client(C),
}
