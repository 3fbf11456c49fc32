//! The catalog of models `fencecheck` knows, with their default sizes and limits.

use super::params::ParamsError;
use super::run::{check_model, CheckError, ModelRun, Options, Progress};
use crate::models::{
    check_before_write, consul_session, fenced, idempotent_job, k8s_lease, keepalive,
    leader_election, raft_leader_lease, redlock, token_reset, ttl_only, CatalogModel, Declares,
    Mutant, Narrate, Params, PropertySpec, Symmetric,
};

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
        entry!(keepalive::KeepaliveHealthy),
        entry!(keepalive::KeepaliveThirdCadence),
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
