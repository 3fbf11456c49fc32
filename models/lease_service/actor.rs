//! What each actor of a lease-service world does: the lock service over the core's lease table,
//! the storage over the core's fence, and clients through the sans-IO [`Client`] trait.

use super::{
    lock_service, storage, Busy, Client, Command, Commands, Epoch, Event, Lease, LeaseEnd, Msg,
    Node, NodeState, Timer, NOW, TTL,
};
use crate::models::Mutant;
use crate::protocol::{Acquire, Fence, LeaseTable};
use stateright::actor::{model_timeout, Actor, Id, Out};
use std::borrow::Cow;

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
        Msg::ReleaseByName => {
            let deleted = table.delete(now).is_some();
            o.send(src, Msg::Released { deleted });
            if !deleted {
                return None;
            }
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
        Msg::Grant { token, epoch } => Event::Granted(Lease::new(token, epoch)),
        Msg::Accepted { token, epoch } => Event::WriteAccepted {
            grant: Lease::new(token, epoch),
        },
        Msg::Rejected {
            token,
            highest,
            epoch,
        } => Event::WriteRejected {
            grant: Lease::new(token, epoch),
            highest,
        },
        Msg::Refused => Event::Refused,
        Msg::Renewed { token, epoch, ok } => Event::Renewed {
            grant: Lease::new(token, epoch),
            ok,
        },
        Msg::Status { token, epoch, live } => Event::LeaseStatus {
            grant: Lease::new(token, epoch),
            live,
        },
        Msg::ReadAnswer { highest } => Event::ReadAnswer { highest },
        Msg::Expired { token, epoch } => Event::LeaseLost(Lease::new(token, epoch)),
        Msg::Released { deleted } => Event::Released { deleted },
        Msg::AlreadyDone { token, epoch } => Event::AlreadyDone {
            grant: Lease::new(token, epoch),
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
        Command::ReleaseByName => (lock_service(), Msg::ReleaseByName),
        Command::SetTimer | Command::SetTimerAt(_) => return None,
    })
}
