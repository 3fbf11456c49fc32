//! The lease-service properties, each condition written once: the catalog's `ttl-only` and
//! `fenced` models and the worlds of users' clients (untimed and clocked) read the same functions.

use super::{grants, Client, ClientState, Ghost, LeaseModel, LeaseState, Msg, Node, NodeState};
use super::{World, WorldState, Writer, BUILT_IN_NAMES, EFFECT_EXACTLY_ONCE};
use crate::models::prop::{self, STORAGE_IN_LEASE_ORDER as LEASE_ORDER};
use crate::models::{meaning, Declared, Expect};
use stateright::Expectation::{self, Always, Eventually, Sometimes};
use Expect::{Holds, Violated};

/// A predicate of the user's over the instances' states.
#[derive(Clone)]
pub struct Predicate<C: Client> {
    pub(crate) name: &'static str,
    pub(crate) kind: Expectation,
    pub(crate) test: fn(&[&C::State]) -> bool,
}

impl<C: Client> std::fmt::Debug for Predicate<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?})", self.name, self.kind)
    }
}

/// What the properties read, in the catalog's world, a user's untimed world and the clocked one
/// alike.
pub trait Observe: stateright::Model + Sized + 'static {
    /// The instances' client.
    type C: Client;
    /// The client every instance runs.
    fn client(&self) -> &Self::C;
    /// The user's predicates (none in the catalog's models).
    fn predicates(&self) -> &[Predicate<Self::C>];
    /// The ghost history.
    fn ghost(state: &Self::State) -> &Ghost;
    /// Grants made so far.
    fn grants(state: &Self::State) -> u8;
    /// Each instance's state, in instance order.
    fn states(state: &Self::State) -> impl Iterator<Item = &<Self::C as Client>::State>;
    /// Whether a rejection is on its way to a client. Every rejection puts a Rejected reply in
    /// flight, so reaching such a state is the same as a rejection happening; reading the
    /// network keeps the history lean.
    fn rejection_in_flight(state: &Self::State) -> bool;
}

/// The catalog's writer when a world has no client to ask (no state of it is then read).
static NO_WRITER: Writer = Writer {
    writes: 0,
    retries: 0,
};

/// Every instance of a world of `Node<C>` actors, with its state.
fn instance_states<C: Client>(state: &WorldState<C>) -> impl Iterator<Item = &C::State> {
    state.actor_states.iter().filter_map(|s| match &**s {
        NodeState::Client(c) => Some(c),
        _ => None,
    })
}

/// Whether a Rejected reply is in flight in a world of `Node<C>` actors.
fn rejected_in_flight<C: Client>(state: &WorldState<C>) -> bool {
    state
        .network
        .iter_deliverable()
        .any(|e| matches!(e.msg, Msg::Rejected { .. }))
}

impl Observe for LeaseModel {
    type C = Writer;

    fn client(&self) -> &Writer {
        self.actors
            .iter()
            .find_map(|a| match a {
                Node::Client(w) => Some(w),
                _ => None,
            })
            .unwrap_or(&NO_WRITER)
    }

    fn predicates(&self) -> &[Predicate<Writer>] {
        &[]
    }

    fn ghost(state: &LeaseState) -> &Ghost {
        &state.history
    }

    fn grants(state: &LeaseState) -> u8 {
        grants(state)
    }

    fn states(state: &LeaseState) -> impl Iterator<Item = &ClientState> {
        instance_states(state)
    }

    fn rejection_in_flight(state: &LeaseState) -> bool {
        rejected_in_flight(state)
    }
}

impl<C: Client> Observe for World<C> {
    type C = C;

    fn client(&self) -> &C {
        &self.cfg.client
    }

    fn predicates(&self) -> &[Predicate<C>] {
        &self.cfg.predicates
    }

    fn ghost(state: &WorldState<C>) -> &Ghost {
        &state.history
    }

    fn grants(state: &WorldState<C>) -> u8 {
        grants(state)
    }

    fn states(state: &WorldState<C>) -> impl Iterator<Item = &C::State> {
        instance_states(state)
    }

    fn rejection_in_flight(state: &WorldState<C>) -> bool {
        rejected_in_flight(state)
    }
}

/// The condition of a property, as Stateright wants it.
pub type Condition<M> = fn(&M, &<M as stateright::Model>::State) -> bool;

/// `storage_in_lease_order`: the library's checker over the accepted writes' grants.
pub fn in_lease_order<M: Observe>(_: &M, s: &M::State) -> bool {
    M::ghost(s).lease_order.holds()
}

/// `single_believer`.
pub fn single_believer<M: Observe>(m: &M, s: &M::State) -> bool {
    M::states(s).filter(|c| m.client().holds(c)).count() <= 1
}

/// `tokens_increase`.
pub fn tokens_increase<M: Observe>(_: &M, s: &M::State) -> bool {
    M::ghost(s).tokens.holds()
}

/// `work_stopped_before_successor`: no instance works under a lease while a later one has been
/// granted.
pub fn work_stopped<M: Observe>(m: &M, s: &M::State) -> bool {
    let granted = M::grants(s);
    M::states(s).all(|c| {
        m.client()
            .working_under(c)
            .is_none_or(|grant| grant.epoch() >= granted)
    })
}

/// `clients_finish`: every instance is done.
pub fn all_finished<M: Observe>(m: &M, s: &M::State) -> bool {
    M::states(s).all(|c| m.client().finished(c))
}

/// `progress` and `write_accepted`: some write was stored.
pub fn write_stored<M: Observe>(_: &M, s: &M::State) -> bool {
    M::ghost(s).lease_order.newest().is_some()
}

/// `lease_regranted`.
pub fn regranted<M: Observe>(_: &M, s: &M::State) -> bool {
    M::grants(s) >= 2
}

/// `stale_write_rejected`: a rejection is on its way (every rejection puts one in flight).
pub fn stale_write_rejected<M: Observe>(_: &M, s: &M::State) -> bool {
    M::rejection_in_flight(s)
}

/// `lease_held`: some instance believes it holds the lease.
pub fn someone_holds<M: Observe>(m: &M, s: &M::State) -> bool {
    M::states(s).any(|c| m.client().holds(c))
}

/// `work_ran`: some instance works under a lease.
pub fn someone_works<M: Observe>(m: &M, s: &M::State) -> bool {
    M::states(s).any(|c| m.client().working_under(c).is_some())
}

/// `effect_exactly_once`: at most one of the job's effects is stored (with `write_accepted`, at
/// least one is).
pub fn at_most_one_effect<M: Observe>(_: &M, s: &M::State) -> bool {
    M::ghost(s).effects <= 1
}

/// One row of a catalog model's declaration table.
const fn row(
    name: &'static str,
    kind: Expectation,
    meaning: &'static str,
    expect: Expect<LeaseModel>,
    condition: Condition<LeaseModel>,
) -> Declared<LeaseModel> {
    Declared {
        name,
        kind,
        meaning,
        expect,
        condition,
    }
}

/// What `fenced` says of a storage refusing a stale write.
const REFUSES: &str = "the storage refuses a stale write";
/// What `fenced` says of `single_believer`.
const BELIEVERS_FENCED: &str =
    "at most one client believes it holds the lease (fencing does not promise this)";
/// What `ttl-only` says of a stale write.
const NEVER_REFUSES: &str = "the storage refuses a stale write (never, without fencing)";
/// What both catalog models say of `progress`.
const PROGRESS_MEANS: &str = "every complete run stores some write";

/// Every property of the `fenced` model, declared once.
#[rustfmt::skip]
pub const FENCED: &[Declared<LeaseModel>] = &[
    row(LEASE_ORDER, Always, meaning::STORAGE_IN_LEASE_ORDER, Holds, in_lease_order),
    row(prop::TOKENS_INCREASE, Always, meaning::TOKENS_INCREASE, Holds, tokens_increase),
    row(prop::SINGLE_BELIEVER, Always, BELIEVERS_FENCED, Violated, single_believer),
    row(prop::PROGRESS, Eventually, PROGRESS_MEANS, Holds, write_stored),
    row(prop::WRITE_ACCEPTED, Sometimes, meaning::WRITE_ACCEPTED, Holds, write_stored),
    row(prop::LEASE_REGRANTED, Sometimes, meaning::LEASE_REGRANTED, Holds, regranted),
    row(prop::STALE_WRITE_REJECTED, Sometimes, REFUSES, Holds, stale_write_rejected),
];

/// Every property of the `ttl-only` model, declared once.
#[rustfmt::skip]
pub const TTL_ONLY: &[Declared<LeaseModel>] = &[
    row(LEASE_ORDER, Always, meaning::STORAGE_IN_LEASE_ORDER, Violated, in_lease_order),
    row(prop::SINGLE_BELIEVER, Always, meaning::SINGLE_BELIEVER, Violated, single_believer),
    row(prop::PROGRESS, Eventually, PROGRESS_MEANS, Holds, write_stored),
    row(prop::WRITE_ACCEPTED, Sometimes, meaning::WRITE_ACCEPTED, Holds, write_stored),
    row(prop::LEASE_REGRANTED, Sometimes, meaning::LEASE_REGRANTED, Holds, regranted),
    row(prop::STALE_WRITE_REJECTED, Sometimes, NEVER_REFUSES, Violated, stale_write_rejected),
];

/// The `K`-th predicate of the user's, over the instances' states.
fn predicate<const K: usize, M: Observe>(m: &M, s: &M::State) -> bool {
    (m.predicates()[K].test)(&M::states(s).collect::<Vec<_>>())
}

/// The condition of the `k`-th predicate (a plain `fn`, as Stateright wants).
fn predicate_condition<M: Observe>(k: usize) -> Condition<M> {
    match k {
        0 => predicate::<0, M>,
        1 => predicate::<1, M>,
        2 => predicate::<2, M>,
        3 => predicate::<3, M>,
        4 => predicate::<4, M>,
        5 => predicate::<5, M>,
        6 => predicate::<6, M>,
        _ => predicate::<7, M>,
    }
}

/// Every property of a world, declared once. The declarations live as long as the program (a
/// world is built a few times per test, and Stateright wants `'static` names).
pub(crate) fn declarations<M: Observe>(
    predicates: &[Predicate<M::C>],
    effects: bool,
) -> &'static [Declared<M>] {
    let built_in = |name: &'static str,
                    kind: Expectation,
                    meaning: &'static str,
                    condition: Condition<M>| Declared {
        name,
        kind,
        meaning,
        expect: Expect::Holds,
        condition,
    };
    let mut all = vec![
        built_in(
            BUILT_IN_NAMES[0],
            Expectation::Always,
            meaning::STORAGE_IN_LEASE_ORDER,
            in_lease_order,
        ),
        built_in(
            BUILT_IN_NAMES[1],
            Expectation::Always,
            meaning::SINGLE_BELIEVER,
            single_believer,
        ),
        built_in(
            BUILT_IN_NAMES[2],
            Expectation::Always,
            meaning::TOKENS_INCREASE,
            tokens_increase,
        ),
        built_in(
            BUILT_IN_NAMES[3],
            Expectation::Always,
            meaning::WORK_STOPPED_BEFORE_SUCCESSOR,
            work_stopped,
        ),
        built_in(
            BUILT_IN_NAMES[4],
            Expectation::Eventually,
            "every run ends with every instance finished: none stops, or loops forever under fair \
             scheduling, with an instance unfinished",
            all_finished,
        ),
        built_in(
            BUILT_IN_NAMES[5],
            Expectation::Sometimes,
            meaning::WRITE_ACCEPTED,
            write_stored,
        ),
        built_in(
            BUILT_IN_NAMES[6],
            Expectation::Sometimes,
            meaning::LEASE_REGRANTED,
            regranted,
        ),
        built_in(
            BUILT_IN_NAMES[7],
            Expectation::Sometimes,
            "the storage refuses a stale write",
            stale_write_rejected,
        ),
        built_in(
            BUILT_IN_NAMES[8],
            Expectation::Sometimes,
            "an instance believes it holds the lease (single_believer is not vacuous)",
            someone_holds,
        ),
        built_in(
            BUILT_IN_NAMES[9],
            Expectation::Sometimes,
            "an instance works under a lease (work_stopped_before_successor is not vacuous)",
            someone_works,
        ),
    ];
    if effects {
        all.push(built_in(
            EFFECT_EXACTLY_ONCE,
            Expectation::Always,
            "the job's effect is stored at most once (every accepted write is an effect)",
            at_most_one_effect,
        ));
    }
    for (k, p) in predicates.iter().enumerate() {
        all.push(built_in(
            p.name,
            p.kind.clone(),
            "a predicate of the client's own",
            predicate_condition::<M>(k),
        ));
    }
    Box::leak(all.into_boxed_slice())
}
