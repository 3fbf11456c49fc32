//! Consul locks: a KV key acquired with a session, as `api.Lock` does it, checked on the library's
//! own [`crate::protocol::SessionLock`].
//!
//! The world: a Consul server that invalidates a session a TTL after its last renewal, releasing
//! the key it holds and refusing every acquire for the lock-delay; clients that create a session,
//! `PUT ?acquire=` the key, write to storage with the LockIndex as their token, renew the session
//! while they hold the key (or stop renewing: a pause, a partition), and learn that the lock is
//! gone only when their monitor (a blocking query on the key) returns. Time moves in ticks
//! (session TTL 2).
//!
//! | model | what differs | `single_holder` | lesson |
//! |---|---|---|---|
//! | `consul-session` | lock-delay 2; the monitor tells a holder within 2 ticks of the invalidation | holds | lock-delay is what keeps the next holder out while the old one finds out |
//! | `consul-session-no-lock-delay` | lock-delay 0 | violated | with no lock-delay the key changes hands before the old holder can know |
//! | `consul-session-slow-monitor` | the monitor may answer any time later (consul#18271: minutes) | violated | lock-delay is a guess about notice time; only the LockIndex as a fencing token keeps the storage in order |
//! | `consul-session-unfenced` | slow monitor, the storage ignores the LockIndex | violated (and `storage_in_lease_order`) | the split-brain writes of Vault on Consul (vault#23013) |
//!
//! No Consul binary runs here, so these models are not tested against a real server.

use super::Step;
use super::{
    declared_properties, meaning, prop, Declared, Declares, Expect, Expected, Narrate, Params,
};
use crate::protocol::{Fence, FencePolicy, LeaseOrder, SessionLock, Token, TokenOrder};
use stateright::{Expectation, Model, Property};

/// The session TTL in ticks.
const SESSION_TTL: u8 = 2;

/// The model.
#[derive(Clone, Debug)]
pub struct ConsulModel {
    /// Clients.
    pub clients: usize,
    /// The sessions' lock-delay in ticks.
    pub lock_delay: u8,
    /// How soon after its session is invalidated a holder must have noticed (strictly before
    /// that many ticks pass); `None`: any time later.
    pub notice: Option<u8>,
    /// The storage's policy.
    pub policy: FencePolicy,
    /// The last tick.
    pub horizon: u8,
}

impl ConsulModel {
    /// Whether a holder always notices before the lock-delay ends.
    fn notices_within_lock_delay(&self) -> bool {
        self.notice.is_some_and(|n| n <= self.lock_delay)
    }
}

/// A client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// Has no lock; will try to acquire.
    Idle,
    /// Believes it holds the key under `token`.
    Holding {
        /// The LockIndex it acquired.
        token: Token,
    },
    /// Held the key once and has stopped.
    Done,
}

/// A client's session on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Session {
    /// No session yet.
    None,
    /// Valid until `expires_at` unless renewed.
    Valid {
        /// When the server invalidates it.
        expires_at: u8,
    },
    /// Invalidated at `at`.
    Invalidated {
        /// When.
        at: u8,
    },
}

/// A write on its way to the storage: (token, client).
pub type Write = (Token, u8);

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConsulState {
    /// Real time.
    pub now: u8,
    /// Each client.
    pub clients: Vec<Client>,
    /// Each client's session.
    pub sessions: Vec<Session>,
    /// The key's lock in the server.
    pub lock: SessionLock<u8>,
    /// Ghost: an acquire was refused by the lock-delay.
    pub delayed: bool,
    /// Writes in flight, sorted.
    pub writes: Vec<Write>,
    /// The storage's fence.
    pub fence: Fence,
    /// Ghost: LockIndexes in the order acquired (the library's checker).
    pub tokens: TokenOrder<Token>,
    /// Ghost: the stored writes' tokens in the order stored (the library's checker).
    pub lease_order: LeaseOrder<Token>,
}

impl ConsulState {
    fn holders(&self) -> usize {
        self.clients
            .iter()
            .filter(|c| matches!(c, Client::Holding { .. }))
            .count()
    }
}

/// What happens next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ConsulAction {
    /// A client creates a session and `PUT ?acquire=` the key.
    Acquire(u8),
    /// A holder renews its session.
    Renew(u8),
    /// The server invalidates a session whose TTL ran out.
    Invalidate(u8),
    /// A holder's monitor returns: the key is no longer its session's.
    Notice(u8),
    /// A write reaches the storage.
    Deliver(Write),
    /// Time moves one tick.
    Tick,
}

impl Model for ConsulModel {
    type State = ConsulState;
    type Action = ConsulAction;

    fn init_states(&self) -> Vec<ConsulState> {
        vec![ConsulState {
            now: 0,
            clients: vec![Client::Idle; self.clients],
            sessions: vec![Session::None; self.clients],
            lock: SessionLock::new(),
            delayed: false,
            writes: Vec::new(),
            fence: Fence::new(self.policy),
            tokens: TokenOrder::default(),
            lease_order: LeaseOrder::new(),
        }]
    }

    fn actions(&self, s: &ConsulState, actions: &mut Vec<ConsulAction>) {
        let mut time_may_pass = s.now < self.horizon;
        for (i, c) in s.clients.iter().enumerate() {
            let id = i as u8;
            match (c, s.sessions[i]) {
                (Client::Idle, _) => actions.push(ConsulAction::Acquire(id)),
                (Client::Holding { .. }, Session::Valid { .. }) => {
                    actions.push(ConsulAction::Renew(id));
                }
                (Client::Holding { .. }, Session::Invalidated { at }) => {
                    actions.push(ConsulAction::Notice(id));
                    // A bounded monitor answers before `notice` ticks pass.
                    if self.notice.is_some_and(|n| s.now + 1 >= at + n) {
                        time_may_pass = false;
                    }
                }
                _ => {}
            }
            if let Session::Valid { expires_at } = s.sessions[i] {
                if s.now >= expires_at {
                    actions.push(ConsulAction::Invalidate(id));
                    // The server invalidates an expired session before time moves on.
                    time_may_pass = false;
                }
            }
        }
        actions.extend(super::distinct(&s.writes).map(ConsulAction::Deliver));
        if time_may_pass {
            actions.push(ConsulAction::Tick);
        }
    }

    fn next_state(&self, s: &ConsulState, action: ConsulAction) -> Option<ConsulState> {
        let mut next = s.clone();
        match action {
            ConsulAction::Acquire(i) => {
                let at = usize::from(i);
                match next.lock.acquire(i, u64::from(s.now)) {
                    Ok(token) => {
                        next.clients[at] = Client::Holding { token };
                        next.sessions[at] = Session::Valid {
                            expires_at: s.now + SESSION_TTL,
                        };
                        next.tokens.grant(token);
                        next.writes.push((token, i));
                        next.writes.sort();
                    }
                    Err(crate::protocol::Refused::LockDelay { .. }) => next.delayed = true,
                    Err(crate::protocol::Refused::Held) => return None,
                }
            }
            ConsulAction::Renew(i) => {
                next.sessions[usize::from(i)] = Session::Valid {
                    expires_at: s.now + SESSION_TTL,
                };
            }
            ConsulAction::Invalidate(i) => {
                next.sessions[usize::from(i)] = Session::Invalidated { at: s.now };
                next.lock
                    .invalidate(&i, u64::from(s.now), u64::from(self.lock_delay));
            }
            ConsulAction::Notice(i) => next.clients[usize::from(i)] = Client::Done,
            ConsulAction::Deliver(w) => {
                let at = next.writes.iter().position(|x| *x == w)?;
                next.writes.remove(at);
                if next.fence.admit(w.0).is_ok() {
                    next.lease_order.accept(w.0);
                }
            }
            ConsulAction::Tick => next.now += 1,
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        declared_properties(self)
    }
}

impl Narrate for ConsulModel {
    fn narrate(&self, before: &ConsulState, action: &ConsulAction, after: &ConsulState) -> Step {
        let who = |i: &u8| format!("client-{i}");
        let server = "consul".to_string();
        match action {
            ConsulAction::Acquire(i) => {
                let text = match after.clients[usize::from(*i)] {
                    Client::Holding { token } => format!(
                        "{} creates a session (TTL {SESSION_TTL}) and PUT ?acquire= wins the key: \
                         LockIndex {token}; sends a write with token {token}",
                        who(i)
                    ),
                    _ => format!(
                        "{}'s PUT ?acquire= is refused: the key is in its lock-delay until {}",
                        who(i),
                        before.now + self.lock_delay
                    ),
                };
                Step {
                    from: who(i),
                    to: server,
                    text,
                }
            }
            ConsulAction::Renew(i) => Step {
                from: who(i),
                to: server,
                text: format!(
                    "{} renews its session: valid until {}",
                    who(i),
                    after.now + SESSION_TTL
                ),
            },
            ConsulAction::Invalidate(i) => Step {
                from: server.clone(),
                to: server,
                text: format!(
                    "time {}: {}'s session TTL ran out; Consul invalidates it and releases the \
                     key, lock-delay {} (until {})",
                    after.now,
                    who(i),
                    self.lock_delay,
                    after.now + self.lock_delay
                ),
            },
            ConsulAction::Notice(i) => Step {
                from: server,
                to: who(i),
                text: format!(
                    "{}'s monitor returns: the key is no longer held by its session; it stops",
                    who(i)
                ),
            },
            ConsulAction::Deliver((t, i)) => {
                let stored = after.fence.policy() == FencePolicy::AcceptAll
                    || after.fence.highest() == Some(*t);
                Step {
                    from: who(i),
                    to: "storage".into(),
                    text: format!(
                        "{}'s write with token {t} reaches the storage: {}",
                        who(i),
                        if stored { "accepted" } else { "rejected" }
                    ),
                }
            }
            ConsulAction::Tick => {
                let holders: Vec<String> = (0..after.clients.len())
                    .filter(|&i| matches!(after.clients[i], Client::Holding { .. }))
                    .map(|i| who(&(i as u8)))
                    .collect();
                Step {
                    from: "clock".into(),
                    to: "clock".into(),
                    text: format!(
                        "time {}; holding the lock as far as they know: {}",
                        after.now,
                        super::nobody_or(&holders)
                    ),
                }
            }
        }
    }
}

not_symmetric!(ConsulModel, ConsulState);

/// Every property of this model, declared once.
const DECLARED: &[Declared<ConsulModel>] = &[
    Declared {
        name: "single_holder",
        kind: Expectation::Always,
        meaning: "at no instant do two clients act as the lock's holder",
        expect: Expect::When {
            rule: "holds when every holder notices its invalidated session within the lock-delay",
            when: |m| Expected::holds_if(m.notices_within_lock_delay()),
        },
        condition: |_: &ConsulModel, s: &ConsulState| s.holders() <= 1,
    },
    Declared {
        name: prop::STORAGE_IN_LEASE_ORDER,
        kind: Expectation::Always,
        meaning: meaning::STORAGE_IN_LEASE_ORDER,
        expect: Expect::When {
            rule: "holds when the storage checks the LockIndex as a fencing token",
            when: |m| match m.policy {
                FencePolicy::Fenced => Expected::Holds,
                FencePolicy::AcceptAll => Expected::Violated,
            },
        },
        condition: |_: &ConsulModel, s: &ConsulState| s.lease_order.holds(),
    },
    Declared {
        name: prop::TOKENS_INCREASE,
        kind: Expectation::Always,
        meaning: meaning::TOKENS_INCREASE,
        expect: Expect::Holds,
        condition: |_: &ConsulModel, s: &ConsulState| s.tokens.holds(),
    },
    Declared {
        name: "lock_changes_hands",
        kind: Expectation::Sometimes,
        meaning: "a second client acquires the key",
        expect: Expect::Holds,
        condition: |_: &ConsulModel, s: &ConsulState| s.lock.lock_index() >= 2,
    },
    Declared {
        name: "lock_delay_refuses",
        kind: Expectation::Sometimes,
        meaning: "an acquire is refused by the lock-delay",
        expect: Expect::When {
            rule: "reached only with a lock-delay",
            when: |m| Expected::holds_if(m.lock_delay > 0),
        },
        condition: |_: &ConsulModel, s: &ConsulState| s.delayed,
    },
    Declared {
        name: prop::WRITE_ACCEPTED,
        kind: Expectation::Sometimes,
        meaning: meaning::WRITE_ACCEPTED,
        expect: Expect::Holds,
        condition: |_: &ConsulModel, s: &ConsulState| s.lease_order.newest().is_some(),
    },
];

impl Declares for ConsulModel {
    fn declarations(&self) -> &'static [Declared<Self>] {
        DECLARED
    }
}

/// The catalog's sizes.
fn build(p: &Params, lock_delay: u8, notice: Option<u8>, policy: FencePolicy) -> ConsulModel {
    ConsulModel {
        clients: p.clients,
        lock_delay,
        notice,
        policy,
        horizon: 7,
    }
}

catalog_entry! {
    /// The catalog entry: lock-delay longer than the time to notice.
    ConsulSession: ConsulModel {
        name: "consul-session",
        summary: "a Consul key held by a session: lock-delay keeps the next holder out while the old one notices",
        clients: 2..=3,
        mutants: &[],
        defaults: Params::sized(2, 1, 0),
        build: |p| build(p, 2, Some(2), FencePolicy::Fenced),
    }
}

catalog_entry! {
    /// The catalog entry: no lock-delay.
    ConsulSessionNoLockDelay: ConsulModel {
        name: "consul-session-no-lock-delay",
        summary: "the same lock with lock-delay 0: the key changes hands before the old holder knows",
        clients: 2..=3,
        mutants: &[],
        defaults: Params::sized(2, 1, 0),
        build: |p| build(p, 0, Some(2), FencePolicy::Fenced),
    }
}

catalog_entry! {
    /// The catalog entry: the monitor may answer any time later.
    ConsulSessionSlowMonitor: ConsulModel {
        name: "consul-session-slow-monitor",
        summary: "a holder that notices its lost lock late (consul#18271): two hold; the LockIndex fences the storage",
        clients: 2..=3,
        mutants: &[],
        defaults: Params::sized(2, 1, 0),
        build: |p| build(p, 2, None, FencePolicy::Fenced),
    }
}

catalog_entry! {
    /// The catalog entry: slow monitor, storage without the token.
    ConsulSessionUnfenced: ConsulModel {
        name: "consul-session-unfenced",
        summary: "the slow monitor with storage that ignores the LockIndex: split-brain writes",
        clients: 2..=3,
        mutants: &[],
        defaults: Params::sized(2, 1, 0),
        build: |p| build(p, 2, None, FencePolicy::AcceptAll),
    }
}
