//! The catalog of models `fencecheck` knows, with their default sizes and limits.

use super::run::CheckError;
use super::run::{check_model, ModelRun, Options, Progress};
use crate::models::{
    check_before_write, consul_session, fenced, idempotent_job, k8s_lease, keepalive,
    leader_election, raft_leader_lease, redlock, token_reset, ttl_only, CatalogModel, Declares,
    Mutant, Narrate, Params, PropertySpec, Symmetric,
};

/// The largest sizes `check` accepts: beyond them an exhaustive search does not finish on a
/// workstation.
pub const MAX_CLIENTS: usize = 6;
/// See [`MAX_CLIENTS`].
pub const MAX_WRITES: u8 = 4;
/// See [`MAX_CLIENTS`].
pub const MAX_RETRIES: u8 = 3;

/// A size outside what the models accept. It names the parameter, not a command-line flag: the
/// command line words its own message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// Clients out of range.
    #[error("clients = {0}: expected a number of clients from 1 to {MAX_CLIENTS}")]
    Clients(usize),
    /// A number of clients the model is not declared for.
    #[error(
        "clients = {clients}: model {model} is declared for {} clients",
        span(range)
    )]
    ClientsForModel {
        /// The model.
        model: &'static str,
        /// Clients asked for.
        clients: usize,
        /// What the model accepts.
        range: std::ops::RangeInclusive<usize>,
    },
    /// Writes out of range.
    #[error("writes = {0}: expected a number of writes per client from 1 to {MAX_WRITES}")]
    Writes(u64),
    /// Retries out of range.
    #[error("retries = {0}: expected a number of retries per client from 0 to {MAX_RETRIES}")]
    Retries(u64),
}

/// `2` or `2 to 6`.
fn span(range: &std::ops::RangeInclusive<usize>) -> String {
    if range.start() == range.end() {
        range.start().to_string()
    } else {
        format!("{} to {}", range.start(), range.end())
    }
}

impl ParamsError {
    /// The value given.
    pub fn value(&self) -> u64 {
        match self {
            ParamsError::Clients(n) | ParamsError::ClientsForModel { clients: n, .. } => *n as u64,
            ParamsError::Writes(n) | ParamsError::Retries(n) => *n,
        }
    }

    /// What was expected (the message after the parameter and its value).
    pub fn expected(&self) -> String {
        let text = self.to_string();
        text.split_once(": ")
            .map_or(text.clone(), |(_, rest)| rest.to_string())
    }

    /// The parameter at fault: `clients`, `writes` or `retries`.
    pub fn parameter(&self) -> &'static str {
        match self {
            ParamsError::Clients(_) | ParamsError::ClientsForModel { .. } => "clients",
            ParamsError::Writes(_) => "writes",
            ParamsError::Retries(_) => "retries",
        }
    }
}

impl Params {
    /// Checks the sizes against the limits.
    pub fn validate(&self) -> Result<(), ParamsError> {
        if !(1..=MAX_CLIENTS).contains(&self.clients) {
            return Err(ParamsError::Clients(self.clients));
        }
        if !(1..=MAX_WRITES).contains(&self.writes) {
            return Err(ParamsError::Writes(self.writes.into()));
        }
        if self.retries > MAX_RETRIES {
            return Err(ParamsError::Retries(self.retries.into()));
        }
        Ok(())
    }
}

/// Checks one model at the given sizes, reporting progress as it goes.
pub type CheckFn = fn(&Params, &Options, &mut dyn FnMut(&Progress)) -> Result<ModelRun, CheckError>;

/// A model in the catalog.
pub struct ModelEntry {
    /// The command-line name.
    pub name: &'static str,
    /// One line for `fencecheck list`.
    pub summary: &'static str,
    /// Each property with its declared expectation at the given sizes.
    pub properties: fn(&Params) -> Vec<PropertySpec>,
    /// The numbers of clients the model is declared for.
    pub clients: std::ops::RangeInclusive<usize>,
    /// The mutants (negative controls) this model can be built with.
    pub mutants: &'static [Mutant],
    /// The model's default sizes.
    pub defaults: fn() -> Params,
    /// Checks the model at the given sizes.
    pub check: CheckFn,
    /// Serves Stateright's Explorer for the model at `addr` (blocks).
    pub explore: fn(&Params, std::net::SocketAddr),
}

fn check_with<C>(
    p: &Params,
    o: &Options,
    progress: &mut dyn FnMut(&Progress),
) -> Result<ModelRun, CheckError>
where
    C: CatalogModel,
    C::Model: Declares + Narrate + Symmetric + Clone + Send + Sync + 'static,
    <C::Model as stateright::Model>::State:
        Clone + Eq + std::hash::Hash + std::fmt::Debug + Send + Sync,
    <C::Model as stateright::Model>::Action: Clone + PartialEq + std::fmt::Debug + Send + Sync,
{
    if !C::CLIENTS.contains(&p.clients) {
        return Err(CheckError::Params(ParamsError::ClientsForModel {
            model: C::NAME,
            clients: p.clients,
            range: C::CLIENTS,
        }));
    }
    check_model(C::NAME, p, C::build(p), o, progress)
}

fn properties_of<C>(p: &Params) -> Vec<PropertySpec>
where
    C: CatalogModel,
    C::Model: Declares,
{
    let model = C::build(p);
    model
        .declarations()
        .iter()
        .map(|d| d.spec(&model))
        .collect()
}

fn explore_with<C>(p: &Params, addr: std::net::SocketAddr)
where
    C: CatalogModel,
    C::Model: stateright::Model + Send + Sync + 'static,
    <C::Model as stateright::Model>::State:
        Clone + PartialEq + std::hash::Hash + std::fmt::Debug + Send + Sync,
    <C::Model as stateright::Model>::Action: Clone + PartialEq + std::fmt::Debug + Send + Sync,
{
    use stateright::Model;
    C::build(p).checker().serve(addr);
}

macro_rules! entry {
    ($c:ty) => {
        ModelEntry {
            name: <$c>::NAME,
            summary: <$c>::SUMMARY,
            properties: properties_of::<$c>,
            clients: <$c>::CLIENTS,
            mutants: <$c>::MUTANTS,
            defaults: <$c>::defaults,
            check: check_with::<$c>,
            explore: explore_with::<$c>,
        }
    };
}

/// Every model, in the order `check` runs them.
pub fn catalog() -> &'static [ModelEntry] {
    const CATALOG: &[ModelEntry] = &[
        entry!(ttl_only::TtlOnly),
        entry!(fenced::Fenced),
        entry!(check_before_write::CheckBeforeWrite),
        entry!(check_before_write::ClockDrift),
        entry!(redlock::Redlock),
        entry!(redlock::RedlockRestart),
        entry!(redlock::RedlockClockJump),
        entry!(token_reset::TokenReset),
        entry!(token_reset::TokenFromStorage),
        entry!(token_reset::DurableToken),
        entry!(leader_election::LeaderElection),
        entry!(leader_election::LeaderElectionUnfenced),
        entry!(idempotent_job::IdempotentJob),
        entry!(idempotent_job::AppendJob),
        entry!(idempotent_job::LockedAppendJob),
        entry!(keepalive::Keepalive),
        entry!(keepalive::KeepalivePaused),
        entry!(keepalive::KeepaliveReplyDeadline),
        entry!(keepalive::KeepaliveGraceOutside),
        entry!(keepalive::KeepaliveLateStart),
        entry!(keepalive::KeepaliveDirectChild),
        entry!(keepalive::KeepaliveSlowClock),
        entry!(keepalive::KeepaliveStaleRelease),
        entry!(keepalive::KeepaliveSilentReacquire),
        entry!(k8s_lease::K8sLease),
        entry!(k8s_lease::K8sLeaseLongRequest),
        entry!(k8s_lease::K8sLeasePrompt),
        entry!(k8s_lease::K8sLeaseFastClock),
        entry!(k8s_lease::K8sLeaseUnfenced),
        entry!(consul_session::ConsulSession),
        entry!(consul_session::ConsulSessionNoLockDelay),
        entry!(consul_session::ConsulSessionSlowMonitor),
        entry!(consul_session::ConsulSessionUnfenced),
        entry!(raft_leader_lease::RaftLeaderLease),
        entry!(raft_leader_lease::RaftLeaderLeaseDrift),
        entry!(raft_leader_lease::RaftLeaderLeaseNoWait),
    ];
    CATALOG
}

/// The catalog entry named `name`.
pub fn find_model(name: &str) -> Option<&'static ModelEntry> {
    catalog().iter().find(|m| m.name == name)
}
