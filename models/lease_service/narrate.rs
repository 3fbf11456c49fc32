//! Counterexamples told step by step in the protocol's words.

use super::{
    event_of, lifeline, lock_service, Client, Command, Commands, Event, Ghost, LeaseAction, Msg,
    Node, NodeState, Timer, WorldState, LOCK_SERVICE_INDEX,
};
use crate::models::{Narrate, Step};
use stateright::actor::{ActorModel, ActorModelAction, Id};

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

/// The live lease in the lock service's table, if any.
pub(crate) fn current_lease<C: Client>(
    state: &WorldState<C>,
) -> Option<&crate::protocol::Lease<Id>> {
    match &*state.actor_states[LOCK_SERVICE_INDEX] {
        NodeState::LockService { table, .. } => table.current(),
        _ => None,
    }
}

/// A delete of the lock by name from `who`, with the lease the table held before it and the
/// service's answer.
pub(crate) fn deleted(
    who: &str,
    held: Option<&crate::protocol::Lease<Id>>,
    reply: Option<Msg>,
) -> String {
    match (reply, held) {
        (Some(Msg::Released { deleted: true }), Some(lease)) if lifeline(lease.owner) == who => {
            format!(
                "{who} deletes the lock by name: its own lease (token {})",
                lease.token
            )
        }
        (Some(Msg::Released { deleted: true }), Some(lease)) => format!(
            "{who} deletes the lock by name: the lease of {} (token {}), who still holds it",
            lifeline(lease.owner),
            lease.token
        ),
        _ => format!("{who} deletes the lock by name: no lease to delete"),
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
        Event::Released { deleted: true } => "learns the lock was deleted".to_string(),
        Event::Released { deleted: false } => "learns there was no lock to delete".to_string(),
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
        Command::ReleaseByName => "deletes the lock by name".to_string(),
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
                    Msg::ReleaseByName => {
                        step(*src, *dst, deleted(&who, current_lease(before), reply()))
                    }
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
