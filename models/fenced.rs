//! Fenced lock: the TTL-only lease, and storage that applies the fencing-token rule.
//!
//! Every grant carries a strictly larger token and the storage rejects a write whose token is
//! older than one it has accepted. A paused holder still wakes believing it holds the lease
//! (`single_believer` is still violated: fencing protects the storage, not the beliefs), but its
//! late write is refused, so `storage_in_lease_order` holds.

use super::lease_service::{LeaseModel, LeaseServiceCfg};
use super::{Mutant, Params};
use crate::protocol::FencePolicy;

/// The catalog name.
pub const NAME: &str = "fenced";

/// Negative controls that apply.
pub const MUTANTS: &[Mutant] = &[Mutant::FenceAcceptsOlder, Mutant::TokenReused];

/// One line for `fencecheck list`.
pub const SUMMARY: &str = "lease with a TTL and a fencing token; storage rejects older tokens";

/// Parameters of the fenced model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencedModelCfg {
    /// Number of clients.
    pub clients: usize,
    /// Writes each client makes (each attempted once) before releasing.
    pub writes_per_client: u8,
    /// Times a client asks for the lease again after learning it lost it.
    pub retries: u8,
    /// A deliberately broken variant, for negative controls.
    pub mutant: Option<Mutant>,
}

impl Default for FencedModelCfg {
    fn default() -> Self {
        FencedModelCfg {
            clients: 3,
            writes_per_client: 2,
            retries: 0,
            mutant: None,
        }
    }
}

impl FencedModelCfg {
    /// Builds the Stateright model.
    pub fn into_model(self) -> LeaseModel {
        LeaseServiceCfg {
            clients: self.clients,
            writes_per_client: self.writes_per_client,
            retries: self.retries,
            policy: FencePolicy::Fenced,
            mutant: self.mutant,
        }
        .into_model()
    }
}

catalog_entry! {
    /// The catalog entry.
    Fenced: LeaseModel {
        name: NAME,
        summary: SUMMARY,
        clients: 2..=8,
        mutants: MUTANTS,
        defaults: Params::sized(3, 2, 0),
        build: |p| FencedModelCfg {
            clients: p.clients,
            writes_per_client: p.writes,
            retries: p.retries,
            mutant: p.mutant,
        }
        .into_model(),
    }
}
