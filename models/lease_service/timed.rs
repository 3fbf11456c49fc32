//! The clocked world: the same lock service, storage and clients, driven by a clock.
//!
//! The untimed world lets a lease expire at any moment, so no client can rely on time. Here time
//! is a tick of the lock service's clock (leases last `ttl` ticks from the request's handling),
//! and each instance has its own clock, which may run slower or faster than the service's by up
//! to `drift` ticks. A client reads its clock through [`Commands::now`](super::Commands::now) and
//! sets its timer for a reading of it ([`Command::SetTimerAt`]). Messages are still delayed
//! without limit. With `pauses` a due timer may also fire late (a paused process); without, it
//! fires before time moves on.
//!
//! The lock service and storage answer through the same code as in the untimed world
//! (this module's parent); only the scheduling differs.

use super::properties::{declarations, Observe, Predicate};
use super::{
    asked, event_of, lifeline, message_of, record_effects, record_out, serve, store, told, Client,
    Command, Commands, Event, Ghost, LeaseEnd, Msg, Node, Service, FIRST_CLIENT,
};
use crate::models::{Declared, Declares, Fair, Narrate, Step, Symmetric};
use crate::protocol::{Fence, FencePolicy, LeaseTable};
use stateright::actor::{Envelope, Id, Out};
use stateright::{Model, Property};

/// The clock of a clocked world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Timing {
    /// How many ticks of the service's clock a lease lasts.
    pub ttl: u64,
    /// How far an instance's clock may be from the service's, in ticks, either way.
    pub drift: u64,
    /// The last tick: time stops there (choose it past the longest wait of your client).
    pub horizon: u64,
    /// Whether a due timer may fire late (a paused process) instead of before the next tick.
    pub pauses: bool,
}

/// A state of a clocked world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TimedState<S> {
    /// The lock service's clock.
    pub now: u64,
    /// Each instance's clock.
    pub clocks: Vec<u64>,
    /// Each instance's timer: the reading of its clock at which it fires.
    pub timers: Vec<Option<u64>>,
    /// The lock service's lease table (owners are actor ids, as in the untimed world).
    pub table: LeaseTable<Id>,
    /// Ghost: grants made.
    pub grants: u8,
    /// The storage's fence.
    pub fence: Fence,
    /// Whether the storage applied a write-once.
    pub done: bool,
    /// Each instance's state.
    pub clients: Vec<S>,
    /// Messages in flight, sorted: (from, to, message) by actor index.
    pub network: Vec<(usize, usize, Msg)>,
    /// Whether the lock service has restarted.
    pub restarted: bool,
    /// Ghost history.
    pub ghost: Ghost,
}

/// What happens next in a clocked world.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TimedAction {
    /// A message in flight arrives.
    Deliver(usize, usize, Msg),
    /// The service's clock ticks; the instances' clocks move to these readings.
    Tick(Vec<u64>),
    /// Instance `i`'s timer fires.
    Fire(usize),
    /// The lock service restarts without persistence.
    Restart,
}

/// A clocked world: the model [`crate::check::verify`] checks for an [`super::Environment::clocked`].
#[derive(Clone)]
pub struct TimedWorld<C: Client> {
    pub(crate) client: C,
    pub(crate) instances: usize,
    pub(crate) policy: FencePolicy,
    pub(crate) service: Service,
    pub(crate) clock: Timing,
    pub(crate) effects: bool,
    pub(crate) predicates: Vec<Predicate<C>>,
    pub(crate) declarations: &'static [Declared<TimedWorld<C>>],
    /// Negative control: a delivery that changes nothing still consumes its message, so a
    /// request the busy lock service leaves waiting is lost (the world before waiting requests
    /// were served).
    pub(crate) drops_unserved: bool,
}

impl<C: Client> TimedWorld<C> {
    /// Builds the world (the environment has been checked).
    pub(crate) fn new(
        client: C,
        instances: usize,
        policy: FencePolicy,
        service: Service,
        clock: Timing,
        effects: bool,
        predicates: Vec<Predicate<C>>,
    ) -> Self {
        let declarations = declarations::<TimedWorld<C>>(&predicates, effects);
        TimedWorld {
            client,
            instances,
            policy,
            service,
            clock,
            effects,
            predicates,
            declarations,
            drops_unserved: false,
        }
    }

    /// Runs instance `i`'s step for `event` at its clock reading and applies its commands;
    /// whether the client took the step.
    fn client_step(&self, s: &mut TimedState<C::State>, i: usize, event: &Event) -> bool {
        let mut out = Commands::at(s.clocks[i]);
        match self.client.on_event(&s.clients[i], event, &mut out) {
            Some(next) => {
                s.clients[i] = next;
                self.apply(s, i, out);
                true
            }
            None => false,
        }
    }

    /// Sends instance `i`'s messages and sets its timer (a plain timer is due at once).
    fn apply(&self, s: &mut TimedState<C::State>, i: usize, mut out: Commands) {
        for command in out.take() {
            match (message_of(&command), command) {
                (Some((dst, msg)), _) => self.send(s, FIRST_CLIENT + i, usize::from(dst), msg),
                (None, Command::SetTimerAt(at)) => s.timers[i] = Some(at),
                (None, _) => s.timers[i] = Some(s.clocks[i]),
            }
        }
    }

    /// Puts a message in flight, recording the ghost history.
    fn send(&self, s: &mut TimedState<C::State>, src: usize, dst: usize, msg: Msg) {
        let envelope = Envelope {
            src: Id::from(src),
            dst: Id::from(dst),
            msg: &msg,
        };
        let recorded = if self.effects {
            record_effects(&(), &s.ghost, envelope)
        } else {
            record_out(&(), &s.ghost, envelope)
        };
        if let Some(ghost) = recorded {
            s.ghost = ghost;
        }
        s.network.push((src, dst, msg));
        s.network.sort();
    }

    /// Sends what the lock service or storage put in `o` (their timers mean nothing here: the
    /// clock decides expiry).
    fn flush(&self, s: &mut TimedState<C::State>, from: usize, o: Out<Node<C>>) {
        for command in o {
            if let stateright::actor::Command::Send(dst, msg) = command {
                self.send(s, from, usize::from(dst), msg);
            }
        }
    }

    fn due(&self, s: &TimedState<C::State>, i: usize) -> bool {
        s.timers[i].is_some_and(|at| s.clocks[i] >= at)
    }

    /// The instances' clock readings after a tick to `now`: each moves forward 0, 1 or 2 ticks
    /// and stays within the drift bound of the service's clock.
    fn readings(&self, clocks: &[u64], now: u64) -> Vec<Vec<u64>> {
        let mut all = vec![Vec::new()];
        for &c in clocks {
            let low = now.saturating_sub(self.clock.drift).max(c);
            let high = (now + self.clock.drift).min(c + 2);
            all = all
                .into_iter()
                .flat_map(|prefix: Vec<u64>| {
                    (low..=high).map(move |r| {
                        let mut next = prefix.clone();
                        next.push(r);
                        next
                    })
                })
                .collect();
        }
        all
    }
}

impl<C: Client> TimedWorld<C> {
    /// Hands `msg` from `src` to `dst` in `next` (`s` with the message taken out of flight);
    /// whether anything changed or was sent.
    fn deliver(
        &self,
        next: &mut TimedState<C::State>,
        s: &TimedState<C::State>,
        src: usize,
        dst: usize,
        msg: Msg,
    ) -> bool {
        let from = Id::from(src);
        let mut o = Out::new();
        let changed = match dst {
            0 => {
                let clock = (s.now, self.clock.ttl);
                let busy = self.service.busy;
                serve(None, busy, clock, &s.table, s.grants, from, msg, &mut o)
                    .map(|(table, grants)| {
                        next.table = table;
                        next.grants = grants;
                    })
                    .is_some()
            }
            1 => store(None, &s.fence, s.done, from, msg, &mut o)
                .map(|(fence, done)| {
                    next.fence = fence;
                    next.done = done;
                })
                .is_some(),
            client => {
                return event_of(msg)
                    .is_some_and(|event| self.client_step(next, client - FIRST_CLIENT, &event))
            }
        };
        let sent = !o.is_empty();
        self.flush(next, dst, o);
        changed || sent
    }
}

impl<C: Client> Model for TimedWorld<C> {
    type State = TimedState<C::State>;
    type Action = TimedAction;

    fn init_states(&self) -> Vec<Self::State> {
        let n = self.instances;
        let mut s = TimedState {
            now: 0,
            clocks: vec![0; n],
            timers: vec![None; n],
            table: LeaseTable::new(),
            grants: 0,
            fence: Fence::new(self.policy),
            done: false,
            clients: Vec::with_capacity(n),
            network: Vec::new(),
            restarted: false,
            ghost: Ghost::default(),
        };
        for i in 0..n {
            let mut out = Commands::at(0);
            s.clients.push(self.client.start(&mut out));
            self.apply(&mut s, i, out);
        }
        vec![s]
    }

    fn actions(&self, s: &Self::State, actions: &mut Vec<Self::Action>) {
        for (k, (src, dst, msg)) in s.network.iter().enumerate() {
            // Equal messages lead to equal states: offer each once.
            if k == 0 || s.network[k - 1] != (*src, *dst, msg.clone()) {
                actions.push(TimedAction::Deliver(*src, *dst, msg.clone()));
            }
        }
        let due: Vec<usize> = (0..self.instances).filter(|&i| self.due(s, i)).collect();
        actions.extend(due.iter().map(|&i| TimedAction::Fire(i)));
        if self.service.restarts && !s.restarted {
            actions.push(TimedAction::Restart);
        }
        let waiting = s.clients.iter().any(|c| !self.client.finished(c));
        if waiting && s.now < self.clock.horizon && (self.clock.pauses || due.is_empty()) {
            let now = s.now + 1;
            actions.extend(
                self.readings(&s.clocks, now)
                    .into_iter()
                    .map(TimedAction::Tick),
            );
        }
    }

    fn next_state(&self, s: &Self::State, action: Self::Action) -> Option<Self::State> {
        let mut next = s.clone();
        match action {
            TimedAction::Deliver(src, dst, msg) => {
                let at = next
                    .network
                    .iter()
                    .position(|(a, b, m)| *a == src && *b == dst && *m == msg)?;
                next.network.remove(at);
                // As in the untimed world, a delivery that changes nothing is no step: the
                // message stays in flight (a request the busy service leaves waiting is served
                // on a later delivery, once the lease is released or has expired).
                let took = self.deliver(&mut next, s, src, dst, msg);
                if !took && !self.drops_unserved {
                    return None;
                }
            }
            TimedAction::Fire(i) => {
                next.timers[i] = None;
                let _ = self.client_step(&mut next, i, &Event::Timer);
            }
            TimedAction::Restart => {
                next.table = LeaseTable::new();
                next.restarted = true;
            }
            TimedAction::Tick(clocks) => {
                next.now = s.now + 1;
                next.clocks = clocks;
                if self.service.end == LeaseEnd::Notified {
                    if let Some(lease) = s.table.holder(s.now) {
                        if !lease.is_live(next.now) {
                            let (owner, token, epoch) = (lease.owner, lease.token, s.grants);
                            self.send(
                                &mut next,
                                0,
                                usize::from(owner),
                                Msg::Expired { token, epoch },
                            );
                        }
                    }
                }
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        crate::models::declared_properties(self)
    }
}

impl<C: Client> Observe for TimedWorld<C> {
    type C = C;

    fn client(&self) -> &C {
        &self.client
    }

    fn predicates(&self) -> &[Predicate<C>] {
        &self.predicates
    }

    fn ghost(state: &Self::State) -> &Ghost {
        &state.ghost
    }

    fn grants(state: &Self::State) -> u8 {
        state.grants
    }

    fn states(state: &Self::State) -> impl Iterator<Item = &C::State> {
        state.clients.iter()
    }

    fn rejection_in_flight(state: &Self::State) -> bool {
        state
            .network
            .iter()
            .any(|(_, _, m)| matches!(m, Msg::Rejected { .. }))
    }
}

impl<C: Client> Declares for TimedWorld<C> {
    fn declarations(&self) -> &'static [Declared<Self>] {
        self.declarations
    }
}

impl<C: Client> Fair for TimedWorld<C> {
    type Key = TimedAction;

    /// Each message in flight is delivered, each due timer fires and time passes (up to the
    /// horizon); a restart is a fault that may never come.
    fn fair_key(&self, action: &TimedAction) -> Option<TimedAction> {
        match action {
            TimedAction::Restart => None,
            TimedAction::Tick(_) => Some(TimedAction::Tick(Vec::new())),
            other => Some(other.clone()),
        }
    }
}

impl<C: Client> Symmetric for TimedWorld<C> {
    // The instances' clocks and timers tell them apart in most states; the search runs without
    // symmetry reduction.
    const REDUCES: bool = false;

    fn representative(state: &Self::State) -> Self::State {
        state.clone()
    }
}

impl<C: Client> Narrate for TimedWorld<C> {
    fn narrate(&self, before: &Self::State, action: &TimedAction, after: &Self::State) -> Step {
        let at = |text: String| format!("t={}: {text}", before.now);
        let step = |from: usize, to: usize, text: String| Step {
            from: lifeline(Id::from(from)),
            to: lifeline(Id::from(to)),
            text: at(text),
        };
        match action {
            TimedAction::Deliver(src, dst, msg) if *dst >= FIRST_CLIENT => {
                let i = dst - FIRST_CLIENT;
                let me = lifeline(Id::from(*dst));
                let text = match event_of(msg.clone()) {
                    Some(event) => self.told_client(before, after, i, &me, &event),
                    None => format!("{me} receives {msg:?}"),
                };
                step(*src, *dst, text)
            }
            TimedAction::Deliver(src, dst, msg) => {
                let who = lifeline(Id::from(*src));
                let reply = after
                    .network
                    .iter()
                    .find(|(a, b, m)| {
                        *a == *dst && *b == *src && !before.network.contains(&(*a, *b, m.clone()))
                    })
                    .map(|(_, _, m)| m.clone());
                let text = match (msg, reply) {
                    (Msg::Acquire, Some(Msg::Grant { token, .. })) => {
                        format!(
                            "{who} acquires the lease (token {token}, until t={})",
                            before.now + self.clock.ttl
                        )
                    }
                    (Msg::Acquire, Some(Msg::Refused)) => format!("{who} asks for the lease: held"),
                    (Msg::Acquire, _) => format!("{who} asks for the lease"),
                    (Msg::Write { token, .. }, Some(Msg::Accepted { .. })) => {
                        format!("{who} writes with token {token}: accepted")
                    }
                    (Msg::Write { token, .. }, Some(Msg::Rejected { highest, .. })) => {
                        format!("{who} writes with token {token}: rejected (already saw {highest})")
                    }
                    (Msg::WriteUnfenced { token, .. }, _) => {
                        format!("{who} writes without a token (under its lease {token}): accepted")
                    }
                    (Msg::Check { token, .. }, Some(Msg::Status { live, .. })) => format!(
                        "{who} checks its lease (token {token}): {}",
                        if live { "live" } else { "gone" }
                    ),
                    (Msg::Renew { token, .. }, Some(Msg::Renewed { ok, .. })) => format!(
                        "{who} renews its lease (token {token}): {}",
                        if ok {
                            "renewed"
                        } else {
                            "refused, the lease is gone"
                        }
                    ),
                    (Msg::ReleaseByName, reply) => {
                        super::narrate::deleted(&who, before.table.current(), reply)
                    }
                    (Msg::Release { token }, _) => {
                        format!("{who} releases the lease (token {token})")
                    }
                    (other, _) => format!("{who} sends {other:?}"),
                };
                step(*src, *dst, text)
            }
            TimedAction::Fire(i) => {
                let me = lifeline(Id::from(FIRST_CLIENT + i));
                let text = self.told_client(before, after, *i, &me, &Event::Timer);
                step(FIRST_CLIENT + i, FIRST_CLIENT + i, text)
            }
            TimedAction::Tick(clocks) => {
                let readings: Vec<String> = clocks
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("client-{i} reads {c}"))
                    .collect();
                let expired = match before.table.holder(before.now) {
                    Some(l) if !l.is_live(before.now + 1) => format!(
                        "; the lease of {} (token {}) expires",
                        lifeline(l.owner),
                        l.token
                    ),
                    _ => String::new(),
                };
                step(
                    0,
                    0,
                    format!(
                        "time passes to t={} ({}){expired}",
                        before.now + 1,
                        readings.join(", ")
                    ),
                )
            }
            TimedAction::Restart => step(
                0,
                0,
                "the lock service restarts and loses its lease and its token counter".to_string(),
            ),
        }
    }
}

impl<C: Client> TimedWorld<C> {
    /// A client's step, told by the client or by the environment.
    fn told_client(
        &self,
        before: &TimedState<C::State>,
        after: &TimedState<C::State>,
        i: usize,
        me: &str,
        event: &Event,
    ) -> String {
        let mut out = Commands::at(before.clocks[i]);
        if self
            .client
            .on_event(&before.clients[i], event, &mut out)
            .is_none()
        {
            return format!("{me} {} and does nothing", told(event));
        }
        if let Some(text) = self.client.narrate(
            me,
            event,
            &before.clients[i],
            &after.clients[i],
            out.as_slice(),
        ) {
            return text;
        }
        let mut text = format!("{me} (clock {}) {}", before.clocks[i], told(event));
        for command in out.as_slice() {
            text.push_str(", ");
            text.push_str(&asked(command));
        }
        text
    }
}
