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
use crate::client::{Busy, Client, Command, Commands, Event, Grant, LeaseEnd, Service};
use crate::protocol::{Acquire, Fence, FencePolicy, LeaseOrder, LeaseTable, Token, TokenOrder};
use stateright::actor::{
    model_timeout, Actor, ActorModel, ActorModelAction, ActorModelState, Id, Network, Out,
};
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
    /// Lock service to client: the lease is held ([`Busy::Refuse`] only).
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
    /// Lock service to the holder: your lease has ended ([`LeaseEnd::Notified`] only).
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

/// The catalog's client's view of the lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClientState {
    /// Its acquire request is in flight or waiting; `left` writes still to make.
    Acquiring {
        /// Writes still to make.
        left: u8,
        /// Times it may still ask again after losing its lease.
        retries: u8,
    },
    /// It believes it holds the lease `grant`; one write is in flight.
    Holding {
        /// The lease it was granted.
        grant: Grant,
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

/// The Stateright model type of every lease-service model of the catalog.
pub type LeaseModel = ActorModel<Node, LeaseServiceCfg, Ghost>;
/// A state of a lease-service world with clients of type `C`.
pub type WorldState<C = Writer> = ActorModelState<Node<C>, Ghost>;
/// A state of [`LeaseModel`].
pub type LeaseState = WorldState<Writer>;
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

impl<C: Client> Actor for Node<C> {
    type Msg = Msg;
    type Timer = Timer;
    type State = NodeState<C::State>;
    type Storage = ();
    type Random = ();

    fn name(&self) -> String {
        match self {
            Node::LockService { .. } => "lock-service".into(),
            Node::Storage { .. } => "storage".into(),
            Node::Client(_) => "client".into(),
        }
    }

    fn on_start(&self, _id: Id, _storage: &Option<()>, o: &mut Out<Self>) -> Self::State {
        match self {
            Node::LockService { service, .. } => {
                if service.restarts {
                    o.set_timer(Timer::Restart, model_timeout());
                }
                NodeState::LockService {
                    table: LeaseTable::new(),
                    grants: 0,
                }
            }
            Node::Storage { policy, .. } => NodeState::Storage {
                fence: Fence::new(*policy),
                done: false,
            },
            Node::Client(client) => {
                let mut out = Commands::new();
                let state = client.start(&mut out);
                issue(out, o);
                NodeState::Client(state)
            }
        }
    }

    fn on_msg(&self, _id: Id, state: &mut Cow<Self::State>, src: Id, msg: Msg, o: &mut Out<Self>) {
        match (self, &**state) {
            (Node::LockService { mutant, service }, NodeState::LockService { table, grants }) => {
                let busy = service.busy;
                let clock = (NOW, TTL);
                if let Some((table, grants)) =
                    serve(*mutant, busy, clock, table, *grants, src, msg, o)
                {
                    *state.to_mut() = NodeState::LockService { table, grants };
                }
            }
            (Node::Storage { mutant, .. }, NodeState::Storage { fence, done }) => {
                if let Some((fence, done)) = store(*mutant, fence, *done, src, msg, o) {
                    *state.to_mut() = NodeState::Storage { fence, done };
                }
            }
            (Node::Client(client), NodeState::Client(current)) => {
                let Some(event) = event_of(msg) else { return };
                let mut out = Commands::new();
                if let Some(next) = client.on_event(current, &event, &mut out) {
                    issue(out, o);
                    *state.to_mut() = NodeState::Client(next);
                }
            }
            _ => {}
        }
    }

    fn on_timeout(&self, _id: Id, state: &mut Cow<Self::State>, timer: &Timer, o: &mut Out<Self>) {
        match (self, &**state, timer) {
            (
                Node::LockService { service, .. },
                NodeState::LockService { table, grants },
                Timer::LeaseExpiry,
            ) => {
                // The live lease runs out: time passes to its deadline, which becomes the new
                // origin.
                if let Some(lease) = table.holder(NOW) {
                    if service.end == LeaseEnd::Notified {
                        // The live lease is always the latest grant.
                        let (token, epoch) = (lease.token, *grants);
                        o.send(lease.owner, Msg::Expired { token, epoch });
                    }
                    let (mut table, grants) = (table.clone(), *grants);
                    table.rebase(lease.expires_at);
                    *state.to_mut() = NodeState::LockService { table, grants };
                }
            }
            (_, NodeState::LockService { grants, .. }, Timer::Restart) => {
                // Restarted without persistence: the lease and the token counter are gone.
                o.cancel_timer(Timer::LeaseExpiry);
                *state.to_mut() = NodeState::LockService {
                    table: LeaseTable::new(),
                    grants: *grants,
                };
            }
            (Node::Client(client), NodeState::Client(current), Timer::Client) => {
                let mut out = Commands::new();
                if let Some(next) = client.on_event(current, &Event::Timer, &mut out) {
                    issue(out, o);
                    *state.to_mut() = NodeState::Client(next);
                }
            }
            _ => {}
        }
    }
}

/// The lock service's answer to `msg` from `src` at `now` on its clock, leases lasting `ttl`: its
/// next table and grant count, or `None` when nothing changes. (The untimed world's clock always
/// reads [`NOW`] and its leases last [`TTL`].)
#[allow(clippy::too_many_arguments)]
pub(crate) fn serve<C: Client>(
    mutant: Option<Mutant>,
    busy: Busy,
    (now, ttl): (u64, u64),
    table: &LeaseTable<Id>,
    grants: Epoch,
    src: Id,
    msg: Msg,
    o: &mut Out<Node<C>>,
) -> Option<(LeaseTable<Id>, Epoch)> {
    let mut table = table.clone();
    match msg {
        Msg::Acquire => {
            let previous = table.last_token();
            match table.acquire(src, now, ttl) {
                Ok(Acquire::Granted(lease)) => {
                    let epoch = grants + 1;
                    let token = match (mutant, previous) {
                        (Some(Mutant::TokenReused), Some(p)) => p,
                        _ => lease.token,
                    };
                    o.send(src, Msg::Grant { token, epoch });
                    o.set_timer(Timer::LeaseExpiry, model_timeout());
                    Some((table, epoch))
                }
                // A busy answer changes nothing: the request stays in flight, i.e. it waits,
                // unless the service answers busy requests with a refusal.
                _ if busy == Busy::Refuse => {
                    o.send(src, Msg::Refused);
                    None
                }
                _ => None,
            }
        }
        Msg::Release { token } => {
            // A stale release is refused by the core and changes nothing.
            table.release(&src, token).ok()?;
            o.cancel_timer(Timer::LeaseExpiry);
            Some((table, grants))
        }
        Msg::Renew { token, epoch } => {
            // A live lease runs `ttl` from `now` again. (In the untimed world that is where it
            // already ended: time does not pass between expiries, and the expiry may still come
            // at any moment.)
            let ok = table.extend(&src, token, now, ttl).is_ok();
            o.send(src, Msg::Renewed { token, epoch, ok });
            ok.then_some((table, grants))
        }
        Msg::Check { token, epoch } => {
            let live = table
                .holder(now)
                .is_some_and(|l| l.owner == src && l.token == token);
            o.send(src, Msg::Status { token, epoch, live });
            None
        }
        _ => None,
    }
}

/// The storage's answer to `msg` from `src`: its next fence and write-once flag, or `None` when
/// nothing changes.
pub(crate) fn store<C: Client>(
    mutant: Option<Mutant>,
    fence: &Fence,
    done: bool,
    src: Id,
    msg: Msg,
    o: &mut Out<Node<C>>,
) -> Option<(Fence, bool)> {
    let mut fence = fence.clone();
    match msg {
        Msg::Write { token, epoch } => {
            match fence.admit(token) {
                Ok(()) => o.send(src, Msg::Accepted { token, epoch }),
                // The mutant stores the write although the fence refused it.
                Err(_) if mutant == Some(Mutant::FenceAcceptsOlder) => {
                    o.send(src, Msg::Accepted { token, epoch })
                }
                Err(stale) => o.send(
                    src,
                    Msg::Rejected {
                        token,
                        highest: stale.highest,
                        epoch,
                    },
                ),
            }
            Some((fence, done))
        }
        // Applied once: every later write-once is answered "already done", whatever its token.
        Msg::WriteOnce { token, epoch } if done => {
            o.send(src, Msg::AlreadyDone { token, epoch });
            None
        }
        Msg::WriteOnce { token, epoch } => {
            o.send(src, Msg::Accepted { token, epoch });
            Some((fence, true))
        }
        // A write without a token passes any fence: there is nothing to compare.
        Msg::WriteUnfenced { token, epoch } => {
            o.send(src, Msg::Accepted { token, epoch });
            None
        }
        Msg::Read => {
            o.send(
                src,
                Msg::ReadAnswer {
                    highest: fence.highest(),
                },
            );
            None
        }
        _ => None,
    }
}

/// What a message tells a client, if it is one a client receives.
pub(crate) fn event_of(msg: Msg) -> Option<Event> {
    Some(match msg {
        Msg::Grant { token, epoch } => Event::Granted(Grant::new(token, epoch)),
        Msg::Accepted { token, epoch } => Event::WriteAccepted {
            grant: Grant::new(token, epoch),
        },
        Msg::Rejected {
            token,
            highest,
            epoch,
        } => Event::WriteRejected {
            grant: Grant::new(token, epoch),
            highest,
        },
        Msg::Refused => Event::Refused,
        Msg::Renewed { token, epoch, ok } => Event::Renewed {
            grant: Grant::new(token, epoch),
            ok,
        },
        Msg::Status { token, epoch, live } => Event::LeaseStatus {
            grant: Grant::new(token, epoch),
            live,
        },
        Msg::ReadAnswer { highest } => Event::ReadAnswer { highest },
        Msg::Expired { token, epoch } => Event::LeaseLost(Grant::new(token, epoch)),
        Msg::AlreadyDone { token, epoch } => Event::AlreadyDone {
            grant: Grant::new(token, epoch),
        },
        _ => return None,
    })
}

/// Sends what a client's commands ask for.
fn issue<C: Client>(mut out: Commands, o: &mut Out<Node<C>>) {
    for command in out.take() {
        match message_of(&command) {
            Some((dst, msg)) => o.send(dst, msg),
            // A timer fires at any moment in the untimed world, whatever its time.
            None => o.set_timer(Timer::Client, model_timeout()),
        }
    }
}

/// The message a command sends and to whom; `None` for a timer.
pub(crate) fn message_of(command: &Command) -> Option<(Id, Msg)> {
    Some(match *command {
        Command::Acquire => (lock_service(), Msg::Acquire),
        Command::Renew(g) => (
            lock_service(),
            Msg::Renew {
                token: g.token(),
                epoch: g.epoch(),
            },
        ),
        Command::CheckLease(g) => (
            lock_service(),
            Msg::Check {
                token: g.token(),
                epoch: g.epoch(),
            },
        ),
        Command::Write(g) => (
            storage(),
            Msg::Write {
                token: g.token(),
                epoch: g.epoch(),
            },
        ),
        Command::WriteUnfenced(g) => (
            storage(),
            Msg::WriteUnfenced {
                token: g.token(),
                epoch: g.epoch(),
            },
        ),
        Command::WriteOnce(g) => (
            storage(),
            Msg::WriteOnce {
                token: g.token(),
                epoch: g.epoch(),
            },
        ),
        Command::Read => (storage(), Msg::Read),
        Command::Release(g) => (lock_service(), Msg::Release { token: g.token() }),
        Command::SetTimer | Command::SetTimerAt(_) => return None,
    })
}

/// The catalog's client: asks for the lease, makes `writes` writes one at a time with its token,
/// then releases. A rejected write tells it the lease was lost: it stops believing and, with
/// retries left and writes to make, asks again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Writer {
    /// Writes to make.
    pub writes: u8,
    /// Times it asks for the lease again after learning it lost it.
    pub retries: u8,
}

impl Client for Writer {
    type State = ClientState;

    fn start(&self, out: &mut Commands) -> ClientState {
        out.acquire();
        ClientState::Acquiring {
            left: self.writes,
            retries: self.retries,
        }
    }

    fn on_event(
        &self,
        state: &ClientState,
        event: &Event,
        out: &mut Commands,
    ) -> Option<ClientState> {
        match (state, event) {
            (ClientState::Acquiring { left, retries }, Event::Granted(grant)) => {
                out.write(grant);
                Some(ClientState::Holding {
                    grant: *grant,
                    left: *left,
                    retries: *retries,
                })
            }
            (
                ClientState::Holding {
                    grant,
                    left,
                    retries,
                },
                Event::WriteAccepted { .. },
            ) => {
                if *left > 1 {
                    out.write(grant);
                    Some(ClientState::Holding {
                        grant: *grant,
                        left: left - 1,
                        retries: *retries,
                    })
                } else {
                    out.release(grant);
                    Some(ClientState::Done)
                }
            }
            (ClientState::Holding { left, retries, .. }, Event::WriteRejected { .. }) => {
                // The lease was lost: stop believing; ask again for the writes still to make, if
                // the retry budget allows, else give them up.
                if *left > 1 && *retries > 0 {
                    out.acquire();
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

    fn holds(&self, state: &ClientState) -> bool {
        matches!(state, ClientState::Holding { .. })
    }

    fn finished(&self, state: &ClientState) -> bool {
        *state == ClientState::Done
    }

    fn narrate(
        &self,
        me: &str,
        event: &Event,
        _before: &ClientState,
        after: &ClientState,
        _sent: &[Command],
    ) -> Option<String> {
        Some(match event {
            Event::Granted(grant) => {
                let token = grant.token();
                format!(
                    "{me} receives its lease (token {token}) and sends a write with token {token}"
                )
            }
            Event::WriteAccepted { grant } => {
                let token = grant.token();
                let next = match after {
                    ClientState::Done => format!("and releases the lease (token {token})"),
                    _ => format!("and sends its next write with token {token}"),
                };
                format!("{me} learns its write is stored {next}")
            }
            Event::WriteRejected { grant, highest } => format!(
                "{me} learns its write was refused (token {} < {highest}), stops believing it \
                 holds the lease and asks again",
                grant.token()
            ),
            _ => return None,
        })
    }
}

impl<C: Clone> Rewrite<Id> for NodeState<C> {
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

/// Records the ghost history of a lease-service world: every grant's token and every accepted
/// write's grant.
pub(crate) fn record_out<Cfg>(
    _cfg: &Cfg,
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

/// The conditions of the lease-service properties, shared by the TTL-only and fenced models and
/// by the worlds of the public client API ([`crate::client`]).
pub mod condition {
    use super::{believers, grants, Client, Ghost, Msg, Node, WorldState};
    use stateright::actor::ActorModel;

    /// A lease-service world with clients of type `C` and configuration `Cfg`.
    type World<C, Cfg> = ActorModel<Node<C>, Cfg, Ghost>;

    /// `storage_in_lease_order`: the library's checker over the accepted writes' epochs.
    pub fn in_lease_order<C: Client, Cfg>(_: &World<C, Cfg>, s: &WorldState<C>) -> bool {
        s.history.lease_order.holds()
    }

    /// `single_believer`.
    pub fn single_believer<C: Client, Cfg>(m: &World<C, Cfg>, s: &WorldState<C>) -> bool {
        believers(m, s) <= 1
    }

    /// `progress` and `write_accepted`: some write was stored.
    pub fn write_stored<C: Client, Cfg>(_: &World<C, Cfg>, s: &WorldState<C>) -> bool {
        s.history.lease_order.newest().is_some()
    }

    /// `lease_regranted`.
    pub fn regranted<C: Client, Cfg>(_: &World<C, Cfg>, s: &WorldState<C>) -> bool {
        grants(s) >= 2
    }

    /// `stale_write_rejected`. Every rejection puts a Rejected reply in flight, so reaching such
    /// a state is the same as a rejection happening; reading the network keeps the history lean.
    pub fn stale_write_rejected<C: Client, Cfg>(_: &World<C, Cfg>, s: &WorldState<C>) -> bool {
        s.network
            .iter_deliverable()
            .any(|e| matches!(e.msg, Msg::Rejected { .. }))
    }

    /// `tokens_increase`.
    pub fn tokens_increase<C: Client, Cfg>(_: &World<C, Cfg>, s: &WorldState<C>) -> bool {
        s.history.tokens.holds()
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

/// The message from `src` to `dst` that `after` has in flight more often than `before`: what
/// the step sent.
fn sent<C: Client>(before: &WorldState<C>, after: &WorldState<C>, src: Id, dst: Id) -> Option<Msg> {
    let count = |state: &WorldState<C>, msg: &Msg| {
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

fn current_lease<C: Client>(state: &WorldState<C>) -> Option<&crate::protocol::Lease<Id>> {
    match &*state.actor_states[LOCK_SERVICE_INDEX] {
        NodeState::LockService { table, .. } => table.current(),
        _ => None,
    }
}

/// What a client was told, in the environment's words.
pub(crate) fn told(event: &Event) -> String {
    match event {
        Event::Granted(g) => format!("is granted the lease (token {})", g.token()),
        Event::Refused => "is told the lease is held".to_string(),
        Event::LeaseStatus { grant, live: true } => {
            format!("is told its lease (token {}) is live", grant.token())
        }
        Event::LeaseStatus { grant, live: false } => {
            format!("is told its lease (token {}) is gone", grant.token())
        }
        Event::Renewed { grant, ok: true } => {
            format!("is told its lease (token {}) is renewed", grant.token())
        }
        Event::Renewed { grant, ok: false } => format!(
            "is told its lease (token {}) could not be renewed",
            grant.token()
        ),
        Event::WriteAccepted { grant } => {
            format!("learns its write (token {}) is stored", grant.token())
        }
        Event::WriteRejected { grant, highest } => format!(
            "learns its write (token {}) was refused (already saw {highest})",
            grant.token()
        ),
        Event::ReadAnswer { highest: Some(h) } => format!("reads highest token {h}"),
        Event::ReadAnswer { highest: None } => "reads an empty storage".to_string(),
        Event::Timer => "sees its timer fire".to_string(),
        Event::LeaseLost(g) => format!("is told its lease (token {}) has ended", g.token()),
        Event::AlreadyDone { grant } => format!(
            "learns its write-once (lease {}) found the job already done",
            grant.token()
        ),
    }
}

/// What a client asked for, in the environment's words.
pub(crate) fn asked(command: &Command) -> String {
    match command {
        Command::Acquire => "asks for the lease".to_string(),
        Command::Renew(g) => format!("renews its lease (token {})", g.token()),
        Command::CheckLease(g) => format!("asks whether its lease (token {}) is live", g.token()),
        Command::Write(g) => format!("sends a write with token {}", g.token()),
        Command::WriteUnfenced(_) => "sends a write without a token".to_string(),
        Command::WriteOnce(g) => format!("sends a write-once (lease {})", g.token()),
        Command::Read => "reads the storage".to_string(),
        Command::Release(g) => format!("releases the lease (token {})", g.token()),
        Command::SetTimer => "sets its timer".to_string(),
        Command::SetTimerAt(t) => format!("sets its timer for {t} on its clock"),
    }
}

/// A client's step, told by the client or, failing that, by the environment.
fn client_step<C: Client, Cfg>(
    model: &ActorModel<Node<C>, Cfg, Ghost>,
    before: &WorldState<C>,
    id: Id,
    event: &Event,
) -> String {
    let me = lifeline(id);
    let (Node::Client(client), NodeState::Client(was)) = (
        &model.actors[usize::from(id)],
        &*before.actor_states[usize::from(id)],
    ) else {
        return format!("{me} {}", told(event));
    };
    // Replay the client's step: it is a pure function of its state and the event.
    let mut out = Commands::new();
    let Some(now) = client.on_event(was, event, &mut out) else {
        return format!("{me} {} and does nothing", told(event));
    };
    if let Some(text) = client.narrate(&me, event, was, &now, out.as_slice()) {
        return text;
    }
    let mut text = format!("{me} {}", told(event));
    for command in out.as_slice() {
        text.push_str(", ");
        text.push_str(&asked(command));
    }
    text
}

impl<C: Client, Cfg> Narrate for ActorModel<Node<C>, Cfg, Ghost> {
    fn narrate(&self, before: &WorldState<C>, action: &LeaseAction, after: &WorldState<C>) -> Step {
        let step = |from: Id, to: Id, text: String| Step {
            from: lifeline(from),
            to: lifeline(to),
            text,
        };
        match action {
            ActorModelAction::Deliver { src, dst, msg } => {
                let who = lifeline(*src);
                let reply = || sent(before, after, *dst, *src);
                match msg {
                    Msg::Acquire => {
                        let text = match reply() {
                            Some(Msg::Grant { token, .. }) => {
                                format!("{who} acquires the lease (token {token})")
                            }
                            Some(Msg::Refused) => format!("{who} asks for the lease: held"),
                            _ => format!("{who} asks for the lease"),
                        };
                        step(*src, *dst, text)
                    }
                    Msg::Release { token } => step(
                        *src,
                        *dst,
                        format!("{who} releases the lease (token {token})"),
                    ),
                    Msg::Write { token, .. } => {
                        let verdict = match reply() {
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
                    Msg::WriteUnfenced { token, .. } => step(
                        *src,
                        *dst,
                        format!("{who} writes without a token (under its lease {token}): accepted"),
                    ),
                    Msg::Renew { token, .. } => {
                        let verdict = match reply() {
                            Some(Msg::Renewed { ok: true, .. }) => "renewed",
                            _ => "refused, the lease is gone",
                        };
                        step(
                            *src,
                            *dst,
                            format!("{who} renews its lease (token {token}): {verdict}"),
                        )
                    }
                    Msg::Check { token, .. } => {
                        let verdict = match reply() {
                            Some(Msg::Status { live: true, .. }) => "live",
                            _ => "gone",
                        };
                        step(
                            *src,
                            *dst,
                            format!("{who} checks its lease (token {token}): {verdict}"),
                        )
                    }
                    Msg::Read => step(*src, *dst, format!("{who} reads the storage")),
                    Msg::WriteOnce { token, .. } => {
                        let verdict = match reply() {
                            Some(Msg::Accepted { .. }) => "applied",
                            _ => "already done",
                        };
                        step(
                            *src,
                            *dst,
                            format!("{who} writes once (under its lease {token}): {verdict}"),
                        )
                    }
                    reply => {
                        let text = match event_of(reply.clone()) {
                            Some(event) => client_step(self, before, *dst, &event),
                            None => format!("{} receives {reply:?}", lifeline(*dst)),
                        };
                        step(*src, *dst, text)
                    }
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
            ActorModelAction::Timeout(id, Timer::Restart) => step(
                *id,
                *id,
                "the lock service restarts and loses its lease and its token counter".to_string(),
            ),
            ActorModelAction::Timeout(id, Timer::Client) => {
                step(*id, *id, client_step(self, before, *id, &Event::Timer))
            }
            other => step(lock_service(), lock_service(), format!("{other:?}")),
        }
    }
}

impl<C: Client, Cfg> Symmetric for ActorModel<Node<C>, Cfg, Ghost> {
    /// Sorts the clients by what distinguishes them: their state, whether the lock service's
    /// table names them, and the messages they have in flight. The lock service and the storage
    /// sort first and stay in place; every id inside the state is rewritten by the same
    /// permutation, so the result is an equivalent state.
    fn representative(state: &WorldState<C>) -> WorldState<C> {
        let owner = current_lease(state).map(|l| l.owner);
        // Each actor's messages in flight (sent by it: true), gathered in one pass.
        let mut msgs: Vec<Vec<(bool, &Msg)>> = vec![Vec::new(); state.actor_states.len()];
        for e in state.network.iter_all() {
            let (src, dst) = (usize::from(e.src), usize::from(e.dst));
            if let Some(m) = msgs.get_mut(src) {
                m.push((true, e.msg));
            }
            if dst != src {
                if let Some(m) = msgs.get_mut(dst) {
                    m.push((false, e.msg));
                }
            }
        }
        let keys: Vec<_> = state
            .actor_states
            .iter()
            .zip(msgs)
            .enumerate()
            .map(|(i, (s, mut msgs))| {
                msgs.sort();
                (&**s, owner == Some(Id::from(i)), msgs)
            })
            .collect();
        // The sort is stable: keys already in order give the identity, so the state is its own
        // representative and needs no rewriting.
        if keys.windows(2).all(|w| w[0] <= w[1]) {
            return state.clone();
        }
        let plan = RewritePlan::<Id, _>::from_values_to_sort(&keys);
        WorldState::<C> {
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
