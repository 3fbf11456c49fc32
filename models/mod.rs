//! Stateright models of lock protocols, each built on the protocol core.
//!
//! A model declares, for every property it checks, whether the property must hold or is known to
//! break ([`Expected`]); `fencecheck check` fails when a verdict differs from the declaration.
//! Every `always` property is paired with a `sometimes` property so that no model passes by never
//! reaching the states that matter.

use serde::Serialize;
use stateright::Expectation;

/// Declares a catalog entry: a unit struct implementing [`CatalogModel`].
macro_rules! catalog_entry {
    // A family of entries of one model that share their sizes and have no mutants: each is its
    // doc, type, name, summary and build.
    (
        $model:ty, clients: $clients:expr, defaults: $defaults:expr;
        $( $(#[$doc:meta])* $ty:ident $name:literal: $summary:literal, |$p:ident| $build:expr; )+
    ) => {
        $(
            catalog_entry! {
                $(#[$doc])*
                $ty: $model {
                    name: $name,
                    summary: $summary,
                    clients: $clients,
                    mutants: &[],
                    defaults: $defaults,
                    build: |$p| $build,
                }
            }
        )+
    };
    (
        $(#[$doc:meta])*
        $ty:ident: $model:ty {
            name: $name:expr,
            summary: $summary:expr,
            clients: $clients:expr,
            mutants: $mutants:expr,
            defaults: $defaults:expr,
            build: |$p:ident| $build:expr $(,)?
        }
    ) => {
        $(#[$doc])*
        pub struct $ty;

        impl $crate::models::CatalogModel for $ty {
            type Model = $model;
            const NAME: &'static str = $name;
            const SUMMARY: &'static str = $summary;
            const CLIENTS: std::ops::RangeInclusive<usize> = $clients;
            const MUTANTS: &'static [$crate::models::Mutant] = $mutants;

            fn defaults() -> $crate::models::Params {
                $defaults
            }

            fn build($p: &$crate::models::Params) -> $model {
                $build
            }
        }
    };
}

/// Implements [`Symmetric`] for a model whose actors are not interchangeable: each state is its
/// own representative.
macro_rules! not_symmetric {
    ($model:ty, $state:ty) => {
        impl $crate::models::Symmetric for $model {
            const REDUCES: bool = false;

            fn representative(state: &$state) -> $state {
                state.clone()
            }
        }
    };
}

/// `a and b`, or `nobody` when no one is named (the actors a timeline step lists).
pub(crate) fn nobody_or(names: &[String]) -> String {
    if names.is_empty() {
        "nobody".to_string()
    } else {
        names.join(" and ")
    }
}

/// Property names (DESIGN.md), one constant each, used by every model, test and report.
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
    /// No work runs under a lease once a later lease has been granted.
    pub const WORK_STOPPED_BEFORE_SUCCESSOR: &str = "work_stopped_before_successor";
    /// At most one leader per term.
    pub const ONE_LEADER_PER_TERM: &str = "one_leader_per_term";
    /// The job's effect is stored exactly once.
    pub const EFFECT_EXACTLY_ONCE: &str = "effect_exactly_once";
    /// Some leader is elected (reachability).
    pub const LEADER_ELECTED: &str = "leader_elected";
    /// Leadership passes to another node (reachability).
    pub const LEADERSHIP_CHANGES: &str = "leadership_changes";
}

pub mod check_before_write;
pub mod consul_session;
pub mod fenced;
pub mod idempotent_job;
pub mod k8s_lease;
pub mod keepalive;
pub mod leader_election;
pub mod lease_service;
pub mod raft_leader_lease;
pub mod redlock;
pub mod token_reset;
pub mod ttl_only;

/// Sizes and variants a model is checked with. Each model reads the fields that apply to it
/// (see `fencecheck list` for each model's defaults).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Params {
    /// Number of clients.
    pub clients: usize,
    /// Writes each client makes (each attempted once).
    pub writes: u8,
    /// Times a client asks for the lease again after learning it lost it.
    pub retries: u8,
    /// A deliberately broken variant (negative control).
    pub mutant: Option<Mutant>,
}

impl Params {
    /// `clients` clients making `writes` writes with `retries` retries, no mutant.
    pub const fn sized(clients: usize, writes: u8, retries: u8) -> Params {
        Params {
            clients,
            writes,
            retries,
            mutant: None,
        }
    }
}

impl Default for Params {
    fn default() -> Self {
        Params {
            clients: 3,
            writes: 2,
            retries: 0,
            mutant: None,
        }
    }
}

/// A model in the catalog: its name, declarations and how to build it.
pub trait CatalogModel {
    /// The Stateright model type.
    type Model: stateright::Model;
    /// The command-line name.
    const NAME: &'static str;
    /// One line for `fencecheck list`.
    const SUMMARY: &'static str;
    /// The numbers of clients the model is declared for: from the fewest at which the scenario it
    /// stands for can arise to the most an exhaustive check finishes with in about a minute here.
    /// The checker refuses other sizes rather than report verdicts the model does not declare.
    const CLIENTS: std::ops::RangeInclusive<usize>;
    /// The mutants this model can be built with.
    const MUTANTS: &'static [Mutant];
    /// The default sizes.
    fn defaults() -> Params;
    /// Builds the model.
    fn build(params: &Params) -> Self::Model;
}

/// What a model expects of a property: fixed, or a declared rule over the model's own sizes and
/// variant.
pub enum Expect<M> {
    /// Holds at every accepted size.
    Holds,
    /// Violated at every accepted size.
    Violated,
    /// Decided by `when` from the built model, with `rule` saying it in words (for `list`).
    When {
        /// The rule in words, e.g. "violated when retries + 2 < clients".
        rule: &'static str,
        /// The expectation for this model.
        when: fn(&M) -> Expected,
    },
}

/// One property, declared once: its name, kind, meaning, expectation and condition together.
/// A model's `properties()` is built from its declarations ([`declared_properties`]), and the
/// checker refuses a model whose properties and declarations disagree.
pub struct Declared<M: stateright::Model + 'static> {
    /// The property's name, shared by models, tests and reports ([`meaning`] has the shared ones).
    pub name: &'static str,
    /// `Always`, `Sometimes` or `Eventually`.
    pub kind: Expectation,
    /// What the property says, in one line.
    pub meaning: &'static str,
    /// What the model expects of it.
    pub expect: Expect<M>,
    /// The condition Stateright evaluates on each state.
    pub condition: fn(&M, &M::State) -> bool,
}

impl<M: stateright::Model + 'static> Declared<M> {
    /// The Stateright property.
    pub fn property(&self) -> stateright::Property<M> {
        stateright::Property {
            expectation: self.kind.clone(),
            name: self.name,
            condition: self.condition,
        }
    }

    /// The declaration resolved for `model`.
    pub fn spec(&self, model: &M) -> PropertySpec {
        let (expected, rule) = match &self.expect {
            Expect::Holds => (Expected::Holds, None),
            Expect::Violated => (Expected::Violated, None),
            Expect::When { rule, when } => (when(model), Some(*rule)),
        };
        PropertySpec {
            name: self.name,
            kind: self.kind.clone(),
            meaning: self.meaning,
            expected,
            rule,
        }
    }
}

/// A model whose properties are declared with [`Declared`].
pub trait Declares: stateright::Model + Sized + 'static {
    /// Every property of this model, declared once.
    fn declarations(&self) -> &'static [Declared<Self>];
}

/// The Stateright properties of `model`, from its declarations: what `Model::properties` returns.
pub fn declared_properties<M: Declares>(model: &M) -> Vec<stateright::Property<M>> {
    model
        .declarations()
        .iter()
        .map(Declared::property)
        .collect()
}

/// The meanings of the properties several models share, written once.
pub mod meaning {
    /// `storage_in_lease_order`.
    pub const STORAGE_IN_LEASE_ORDER: &str =
        "storage never accepts a write from an older lease after one from a newer lease";
    /// `tokens_increase`.
    pub const TOKENS_INCREASE: &str =
        "every grant carries a token larger than every earlier grant's";
    /// `single_believer`.
    pub const SINGLE_BELIEVER: &str = "at most one client believes it holds the lease";
    /// `write_accepted`.
    pub const WRITE_ACCEPTED: &str = "some write is stored";
    /// `work_stopped_before_successor`.
    pub const WORK_STOPPED_BEFORE_SUCCESSOR: &str =
        "no instant at which a holder's work or its descendants run while a later lease is granted";
    /// `lease_regranted`.
    pub const LEASE_REGRANTED: &str = "the lease is granted a second time";
}

/// What a model declares about one of its properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expected {
    /// An `always`/`eventually` property holds in every reachable state / on every path; a
    /// `sometimes` property is reached in some state.
    Holds,
    /// The checker finds a counterexample (or, for `sometimes`, no state reaches it).
    Violated,
}

impl Expected {
    /// [`Expected::Holds`] when `holds`, else [`Expected::Violated`].
    pub const fn holds_if(holds: bool) -> Expected {
        if holds {
            Expected::Holds
        } else {
            Expected::Violated
        }
    }
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Expected::Holds => "holds",
            Expected::Violated => "violated",
        })
    }
}

/// One property of a model: its name (as in DESIGN.md), its kind, what it means, and the
/// model's declared expectation.
#[derive(Clone, Debug)]
pub struct PropertySpec {
    /// The property's name, shared by models, tests and reports.
    pub name: &'static str,
    /// `Always`, `Sometimes` or `Eventually`.
    pub kind: Expectation,
    /// What the property says, in one line.
    pub meaning: &'static str,
    /// What the model declares about it, at the size it was built with.
    pub expected: Expected,
    /// When the expectation depends on the size or variant: the rule, in words.
    pub rule: Option<&'static str>,
}

/// A deliberately broken use of the protocol core, built into a model to show that the checker
/// catches it (a negative control).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutant {
    /// The storage overwrites even when the fence rejects the write's token.
    FenceAcceptsOlder,
    /// The lock service hands out the previous grant's token again instead of the new one.
    TokenReused,
    /// A candidate takes the term after the one it read without the register's compare-and-set.
    BlindCampaign,
}

impl Mutant {
    /// Every mutant, in the order the CLI lists them.
    pub const ALL: [Mutant; 3] = [
        Mutant::FenceAcceptsOlder,
        Mutant::TokenReused,
        Mutant::BlindCampaign,
    ];

    /// The mutant's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::FenceAcceptsOlder => "fence-accepts-older",
            Mutant::TokenReused => "token-reused",
            Mutant::BlindCampaign => "blind-campaign",
        }
    }

    /// What the mutant breaks.
    pub fn summary(self) -> &'static str {
        match self {
            Mutant::FenceAcceptsOlder => "storage writes even when the fence rejects the token",
            Mutant::TokenReused => "the lock service hands out the previous token again",
            Mutant::BlindCampaign => {
                "a candidate takes the term after the one it read, no compare-and-set"
            }
        }
    }
}

/// One step of a path through a model, in the protocol's words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The lifeline the step starts from (`client-0`, `lock-service`, `storage`).
    pub from: String,
    /// The lifeline that acts on it (the same as `from` for a local event such as an expiry).
    pub to: String,
    /// What happened.
    pub text: String,
}

/// A model that can tell its steps in the protocol's words.
pub trait Narrate: stateright::Model {
    /// Describes `action`, taken in `before` and leading to `after`.
    fn narrate(&self, before: &Self::State, action: &Self::Action, after: &Self::State) -> Step;
}

/// A model whose steps fairness speaks about, for the search for runs that never end
/// (`check::search::liveness`): a step that stays possible is eventually taken, unless it is a
/// fault.
pub trait Fair: stateright::Model {
    /// What fairness promises to take: a step of this key that stays possible is taken.
    type Key: Clone + Eq + std::hash::Hash;

    /// The fairness key of `action`, or `None` for a fault the world may never take (a restart,
    /// a lost message).
    fn fair_key(&self, action: &Self::Action) -> Option<Self::Key>;
}

/// A model whose interchangeable actors can be put in a canonical order (symmetry reduction).
pub trait Symmetric: stateright::Model {
    /// Whether `representative` actually merges states (false for models whose actors are not
    /// interchangeable, which return the state itself).
    const REDUCES: bool = true;

    /// A canonical member of `state`'s equivalence class under permutations of the
    /// interchangeable actors.
    fn representative(state: &Self::State) -> Self::State;
}

/// Each distinct element of a sorted multiset once: the messages in flight that can be delivered
/// next (delivering either of two equal messages leads to the same state).
pub(crate) fn distinct<T: PartialEq + Copy>(sorted: &[T]) -> impl Iterator<Item = T> + '_ {
    sorted
        .iter()
        .enumerate()
        .filter(move |(i, w)| *i == 0 || sorted[i - 1] != **w)
        .map(|(_, w)| *w)
}
