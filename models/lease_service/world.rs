//! The environment a client is checked in: the catalog's lock service and storage, with
//! instances of the user's client beside them.

use super::properties::{declarations, Predicate};
use super::timed::{TimedWorld, Timing};
use super::{record_effects, record_out, Busy, Client, Ghost, LeaseEnd, Msg, Node, Service, Timer};
use crate::models::{prop, Declared, Declares, Fair};
use crate::protocol::FencePolicy;
use stateright::actor::{ActorModel, ActorModelAction, Network};
use stateright::Expectation;

/// The most predicates of your own an environment takes (each is a separate checked property).
pub const MAX_PREDICATES: usize = 8;

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

impl<C: Client> Fair for World<C> {
    type Key = ActorModelAction<Msg, Timer, ()>;

    /// Each message in flight is delivered and each timer fires (a lease's TTL passes); a
    /// restart, a lost message and a crash are faults that may never come.
    fn fair_key(&self, action: &Self::Action) -> Option<Self::Key> {
        match action {
            ActorModelAction::Timeout(_, Timer::Restart)
            | ActorModelAction::Drop(_)
            | ActorModelAction::Crash(_)
            | ActorModelAction::Recover(_) => None,
            other => Some(other.clone()),
        }
    }
}

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
        "the check of {name} found more than its bound of {bound} distinct states \
         (Environment::max_states) after paths {depth} steps deep and stopped, so no verdict is \
         given: either the space is finite but wider than the bound (raise max_states), or a \
         client state grows without end (a counter, a list, a retry loop that remembers each \
         try) and no bound will do (bound that state)"
    )]
    Unbounded {
        /// The environment's name.
        name: &'static str,
        /// The bound: the most distinct states the check could find.
        bound: usize,
        /// The deepest path the search had explored when it stopped.
        depth: usize,
    },
}

/// The built-in properties, in the order they are checked and reported.
pub const BUILT_IN_NAMES: [&str; 10] = [
    prop::STORAGE_IN_LEASE_ORDER,
    prop::SINGLE_BELIEVER,
    prop::TOKENS_INCREASE,
    prop::WORK_STOPPED_BEFORE_SUCCESSOR,
    "clients_finish",
    prop::WRITE_ACCEPTED,
    prop::LEASE_REGRANTED,
    prop::STALE_WRITE_REJECTED,
    "lease_held",
    "work_ran",
];

/// The property [`Environment::count_effects`] adds.
pub const EFFECT_EXACTLY_ONCE: &str = prop::EFFECT_EXACTLY_ONCE;

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
    pub(crate) clock: Option<Timing>,
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

    /// Runs the world on a clock ([`Timing`]): leases last `ttl` ticks of the lock service's
    /// clock, each instance reads its own clock ([`super::Commands::now`]), within `drift` ticks
    /// of the service's, and can set its timer for a reading of it. Without this call no clock
    /// can be trusted: leases expire at any moment.
    pub fn clocked(mut self, clock: Timing) -> Self {
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

    /// The most distinct states the check may find (2,000,000 by default), as
    /// [`Verification::states`](crate::check::verify::Verification::states) counts them: an
    /// environment with exactly that many is checked; one with more ends with
    /// [`EnvironmentError::Unbounded`] instead of verdicts.
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
