//! The environment a client is checked in: the catalog's lock service and storage, with
//! instances of the user's client beside them.

use super::timed::{Clock, TimedWorld};
use super::Client;
use crate::models::lease_service::{grants, record_out, Ghost, Msg, Node, NodeState, WorldState};
use crate::models::{meaning, Declared, Declares, Expect};
use crate::protocol::FencePolicy;
use stateright::actor::{ActorModel, Envelope, Network};
use stateright::Expectation;

/// What the lock service does with a request for the lease while someone holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Busy {
    /// The request waits until the lease is free (a blocking acquire; the catalog's models).
    #[default]
    Wait,
    /// The request is answered at once with [`super::Event::Refused`] (`SET NX` returning nil).
    Refuse,
}

/// What the holder learns when its lease ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LeaseEnd {
    /// Nothing: the lease runs out on the server's clock and the holder is not told (a Redis key
    /// with a TTL; the catalog's models).
    #[default]
    Silent,
    /// The holder is sent [`super::Event::LeaseLost`], which may arrive late (an etcd lease whose
    /// keepalive stream reports it gone, a ZooKeeper session-expired event).
    Notified,
}

/// The lock service's semantics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Service {
    /// What it does with a request while the lease is held.
    pub busy: Busy,
    /// Whether the holder is told when its lease ends.
    pub end: LeaseEnd,
    /// Whether it may restart (once, at any moment) without persistence, losing the lease and
    /// its token counter (Redis without an append-only file).
    pub restarts: bool,
}

impl Service {
    /// A Redis key with a TTL (`SET NX PX`): silent expiry; a busy request is refused at once.
    pub const REDIS: Service = Service {
        busy: Busy::Refuse,
        end: LeaseEnd::Silent,
        restarts: false,
    };
    /// An etcd lock on a lease (`etcdctl lock`): a busy request waits in line; the holder learns
    /// from its keepalive that the lease ended.
    pub const ETCD: Service = Service {
        busy: Busy::Wait,
        end: LeaseEnd::Notified,
        restarts: false,
    };
    /// A ZooKeeper lock of ephemeral sequential nodes: a busy request waits on its predecessor;
    /// the holder is told when its session expired.
    pub const ZOOKEEPER: Service = Service {
        busy: Busy::Wait,
        end: LeaseEnd::Notified,
        restarts: false,
    };
}

/// The most predicates of your own an environment takes (each is a separate checked property).
pub const MAX_PREDICATES: usize = 8;

/// A predicate of the user's over the instances' states.
#[derive(Clone)]
pub(crate) struct Predicate<C: Client> {
    pub(crate) name: &'static str,
    pub(crate) kind: Expectation,
    pub(crate) test: fn(&[&C::State]) -> bool,
}

impl<C: Client> std::fmt::Debug for Predicate<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?})", self.name, self.kind)
    }
}

/// The configuration a [`World`] carries: the user's predicates and every property's declaration.
#[derive(Clone)]
pub struct WorldCfg<C: Client> {
    pub(crate) client: C,
    pub(crate) name: &'static str,
    pub(crate) predicates: Vec<Predicate<C>>,
    pub(crate) declarations: &'static [Declared<World<C>>],
}

impl<C: Client> std::fmt::Debug for WorldCfg<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorldCfg")
            .field("name", &self.name)
            .field("predicates", &self.predicates)
            .finish_non_exhaustive()
    }
}

/// The Stateright model of an environment: the catalog's lease-service actors with instances of
/// `C` as clients.
pub type World<C> = ActorModel<Node<C>, WorldCfg<C>, Ghost>;

impl<C: Client> Declares for World<C> {
    fn declarations(&self) -> &'static [Declared<Self>] {
        self.cfg.declarations
    }
}

/// Why an environment cannot be checked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvironmentError {
    /// No instances: there is nothing to check.
    #[error("an environment needs at least 1 instance of the client; got 0")]
    NoInstances,
    /// A predicate's name is taken by a built-in property or another predicate.
    #[error("property name {0:?} is already taken (built-in properties: {BUILT_IN:?})", BUILT_IN = BUILT_IN_NAMES)]
    DuplicateProperty(&'static str),
    /// More predicates than [`MAX_PREDICATES`].
    #[error("at most {MAX_PREDICATES} predicates of your own can be checked; got {0}")]
    TooManyPredicates(usize),
    /// A property asked about is not one this environment checks.
    #[error("unknown property {name:?}{hint}; this environment checks: {known}")]
    UnknownProperty {
        /// The name asked for.
        name: String,
        /// How to add it, when it can be added.
        hint: &'static str,
        /// The properties it checks, comma-separated.
        known: String,
    },
    /// The clock makes no sense.
    #[error("bad clock: {0}")]
    BadClock(String),
    /// The search reached its state bound before it covered every reachable state.
    #[error(
        "the check of {name} stopped at its bound of {bound} states without covering every \
         reachable state, so no verdict is given: a client state that grows without end (a \
         counter, a list, a retry loop that remembers each try) keeps the space open; bound it, \
         or raise Environment::max_states"
    )]
    Unbounded {
        /// The environment's name.
        name: &'static str,
        /// The bound.
        bound: usize,
    },
}

/// The built-in properties, in the order they are checked and reported.
pub const BUILT_IN_NAMES: [&str; 10] = [
    "storage_in_lease_order",
    "single_believer",
    "tokens_increase",
    "work_stopped_before_successor",
    "clients_finish",
    "write_accepted",
    "lease_regranted",
    "stale_write_rejected",
    "lease_held",
    "work_ran",
];

/// The property [`Environment::count_effects`] adds.
pub const EFFECT_EXACTLY_ONCE: &str = "effect_exactly_once";

/// Places instances of a client in the checked world.
///
/// By default: 2 instances, storage fenced by the core's fencing rule, a lock service whose busy
/// requests wait, and a bound of 2,000,000 states.
#[derive(Clone, Debug)]
pub struct Environment<C: Client> {
    pub(crate) client: C,
    pub(crate) name: &'static str,
    pub(crate) instances: usize,
    pub(crate) storage: FencePolicy,
    pub(crate) service: Service,
    pub(crate) effects: bool,
    pub(crate) clock: Option<Clock>,
    pub(crate) max_states: usize,
    pub(crate) predicates: Vec<Predicate<C>>,
}

impl<C: Client> Environment<C> {
    /// An environment running `client`.
    pub fn new(client: C) -> Self {
        Environment {
            client,
            name: "client",
            instances: 2,
            storage: FencePolicy::Fenced,
            service: Service::default(),
            effects: false,
            clock: None,
            max_states: 2_000_000,
            predicates: Vec::new(),
        }
    }

    /// The name reports and failures use (`client` by default).
    pub fn named(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// How many instances of the client run (2 by default). Symmetry reduction keeps the cost
    /// low, but each instance multiplies the interleavings: 2 or 3 is what a test wants.
    pub fn instances(mut self, n: usize) -> Self {
        self.instances = n;
        self
    }

    /// What the storage does with a write's token: [`FencePolicy::Fenced`] (the default) rejects
    /// a write older than one it accepted; [`FencePolicy::AcceptAll`] stores every write, as a
    /// storage that knows nothing of the lock does.
    pub fn storage(mut self, policy: FencePolicy) -> Self {
        self.storage = policy;
        self
    }

    /// The lock service's semantics: [`Service::REDIS`], [`Service::ETCD`],
    /// [`Service::ZOOKEEPER`], or your own combination. The default is the catalog's: busy
    /// requests wait, expiry is silent, no restarts.
    pub fn service(mut self, service: Service) -> Self {
        self.service = service;
        self
    }

    /// What the lock service does with a request while the lease is held.
    pub fn busy(mut self, busy: Busy) -> Self {
        self.service.busy = busy;
        self
    }

    /// What the holder learns when its lease ends.
    pub fn lease_end(mut self, end: LeaseEnd) -> Self {
        self.service.end = end;
        self
    }

    /// Lets the lock service restart once, at any moment, without persistence: the lease and the
    /// token counter are lost, so tokens start again at 1.
    pub fn service_restarts(mut self, restarts: bool) -> Self {
        self.service.restarts = restarts;
        self
    }

    /// Runs the world on a clock ([`Clock`]): leases last `ttl` ticks of the lock service's
    /// clock, each instance reads its own clock ([`super::Commands::now`]), within `drift` ticks
    /// of the service's, and can set its timer for a reading of it. Without this call no clock
    /// can be trusted: leases expire at any moment.
    pub fn clocked(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Counts every write the storage accepts as the job's effect and checks
    /// `effect_exactly_once`: at most one effect is stored (`write_accepted` shows one is). The
    /// count is part of the state, so the space grows; without this call the property is not
    /// checked. For a job whose effect is one write: the report of the night, the charge of the
    /// order.
    pub fn count_effects(mut self) -> Self {
        self.effects = true;
        self
    }

    /// The most states the check explores (2,000,000 by default). A search that reaches it ends
    /// with [`EnvironmentError::Unbounded`] instead of verdicts.
    pub fn max_states(mut self, n: usize) -> Self {
        self.max_states = n;
        self
    }

    /// A property of your own that must hold in every reachable state: `test` sees every
    /// instance's state.
    pub fn always(mut self, name: &'static str, test: fn(&[&C::State]) -> bool) -> Self {
        self.predicates.push(Predicate {
            name,
            kind: Expectation::Always,
            test,
        });
        self
    }

    /// A property of your own that some reachable state must meet (so that a check does not pass
    /// by never reaching the states that matter).
    pub fn sometimes(mut self, name: &'static str, test: fn(&[&C::State]) -> bool) -> Self {
        self.predicates.push(Predicate {
            name,
            kind: Expectation::Sometimes,
            test,
        });
        self
    }

    /// The names of the properties this environment checks: the built-in ones, then yours.
    pub fn property_names(&self) -> Vec<&'static str> {
        BUILT_IN_NAMES
            .iter()
            .copied()
            .chain(self.effects.then_some(EFFECT_EXACTLY_ONCE))
            .chain(self.predicates.iter().map(|p| p.name))
            .collect()
    }

    /// Checks that the environment makes sense.
    fn validate(&self) -> Result<(), EnvironmentError> {
        if let Some(clock) = self.clock {
            if clock.ttl == 0 || clock.horizon == 0 {
                return Err(EnvironmentError::BadClock(format!(
                    "ttl and horizon must be at least 1 tick; got ttl {} and horizon {}",
                    clock.ttl, clock.horizon
                )));
            }
        }
        self.check_sizes()
    }

    /// The clocked world, for an environment with [`Environment::clocked`].
    pub fn build_clocked(&self) -> Result<TimedWorld<C>, EnvironmentError> {
        self.validate()?;
        let clock = self.clock.ok_or_else(|| {
            EnvironmentError::BadClock("the environment has no clock: call clocked()".to_string())
        })?;
        Ok(TimedWorld::new(
            self.client.clone(),
            self.instances,
            self.storage,
            self.service,
            clock,
            self.effects,
            self.predicates.clone(),
        ))
    }

    /// Builds the untimed Stateright model, after checking the environment makes sense.
    pub fn build(&self) -> Result<World<C>, EnvironmentError> {
        self.validate()?;
        let declarations = declarations(&self.predicates, self.effects);
        let cfg = WorldCfg {
            client: self.client.clone(),
            name: self.name,
            predicates: self.predicates.clone(),
            declarations,
        };
        let mut world = ActorModel::new(cfg, Ghost::default())
            .actor(Node::LockService {
                mutant: None,
                service: self.service,
            })
            .actor(Node::Storage {
                policy: self.storage,
                mutant: None,
            })
            .actors((0..self.instances).map(|_| Node::Client(self.client.clone())))
            .init_network(Network::new_unordered_nonduplicating([]))
            .record_msg_out(if self.effects {
                record_effects
            } else {
                record_out
            });
        for d in declarations {
            world = world.property(d.kind.clone(), d.name, d.condition);
        }
        Ok(world)
    }

    /// Checks the sizes and names.
    fn check_sizes(&self) -> Result<(), EnvironmentError> {
        if self.instances == 0 {
            return Err(EnvironmentError::NoInstances);
        }
        if self.predicates.len() > MAX_PREDICATES {
            return Err(EnvironmentError::TooManyPredicates(self.predicates.len()));
        }
        for (i, p) in self.predicates.iter().enumerate() {
            let taken = BUILT_IN_NAMES.contains(&p.name)
                || p.name == EFFECT_EXACTLY_ONCE
                || self.predicates[..i].iter().any(|q| q.name == p.name);
            if taken {
                return Err(EnvironmentError::DuplicateProperty(p.name));
            }
        }
        Ok(())
    }
}

/// What the properties read, in the untimed world and the clocked one alike.
pub(crate) trait Observe: stateright::Model + Sized + 'static {
    /// The instances' client.
    type C: Client;
    /// The client every instance runs.
    fn client(&self) -> &Self::C;
    /// The user's predicates.
    fn predicates(&self) -> &[Predicate<Self::C>];
    /// The ghost history.
    fn ghost(state: &Self::State) -> &Ghost;
    /// Grants made so far.
    fn grants(state: &Self::State) -> u8;
    /// Each instance's state, in instance order.
    fn states(state: &Self::State) -> Vec<&<Self::C as Client>::State>;
    /// Whether a rejection is on its way to a client.
    fn rejection_in_flight(state: &Self::State) -> bool;
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

    fn states(state: &WorldState<C>) -> Vec<&C::State> {
        state
            .actor_states
            .iter()
            .filter_map(|s| match &**s {
                NodeState::Client(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    fn rejection_in_flight(state: &WorldState<C>) -> bool {
        state
            .network
            .iter_deliverable()
            .any(|e| matches!(e.msg, Msg::Rejected { .. }))
    }
}

/// The condition of a property, as Stateright wants it.
type Condition<M> = fn(&M, &<M as stateright::Model>::State) -> bool;

/// `storage_in_lease_order`: the library's checker over the accepted writes' grants.
fn in_lease_order<M: Observe>(_: &M, s: &M::State) -> bool {
    M::ghost(s).lease_order.holds()
}

/// `single_believer`.
fn single_believer<M: Observe>(m: &M, s: &M::State) -> bool {
    M::states(s)
        .into_iter()
        .filter(|c| m.client().holds(c))
        .count()
        <= 1
}

/// `tokens_increase`.
fn tokens_increase<M: Observe>(_: &M, s: &M::State) -> bool {
    M::ghost(s).tokens.holds()
}

/// `work_stopped_before_successor`: no instance works under a lease while a later one has been
/// granted.
fn work_stopped<M: Observe>(m: &M, s: &M::State) -> bool {
    let granted = M::grants(s);
    M::states(s).into_iter().all(|c| {
        m.client()
            .working_under(c)
            .is_none_or(|grant| grant.epoch() >= granted)
    })
}

/// `clients_finish`: every instance is done.
fn all_finished<M: Observe>(m: &M, s: &M::State) -> bool {
    M::states(s).into_iter().all(|c| m.client().finished(c))
}

/// `write_accepted`.
fn write_stored<M: Observe>(_: &M, s: &M::State) -> bool {
    M::ghost(s).lease_order.newest().is_some()
}

/// `lease_regranted`.
fn regranted<M: Observe>(_: &M, s: &M::State) -> bool {
    M::grants(s) >= 2
}

/// `stale_write_rejected`: a rejection is on its way (every rejection puts one in flight).
fn stale_write_rejected<M: Observe>(_: &M, s: &M::State) -> bool {
    M::rejection_in_flight(s)
}

/// `lease_held`: some instance believes it holds the lease.
fn someone_holds<M: Observe>(m: &M, s: &M::State) -> bool {
    M::states(s).into_iter().any(|c| m.client().holds(c))
}

/// `work_ran`: some instance works under a lease.
fn someone_works<M: Observe>(m: &M, s: &M::State) -> bool {
    M::states(s)
        .into_iter()
        .any(|c| m.client().working_under(c).is_some())
}

/// `effect_exactly_once`: at most one of the job's effects is stored (with `write_accepted`, at
/// least one is).
fn at_most_one_effect<M: Observe>(_: &M, s: &M::State) -> bool {
    M::ghost(s).effects <= 1
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

/// The `K`-th predicate of the user's, over the instances' states.
fn predicate<const K: usize, M: Observe>(m: &M, s: &M::State) -> bool {
    (m.predicates()[K].test)(&M::states(s))
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
            "every complete run ends with every instance finished",
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
