//! TTL-only lock: a lease with a time-to-live and storage that accepts every write.
//!
//! This is `SET key owner NX PX 30000` and nothing else. The TTL keeps a dead holder from blocking
//! forever, but a paused holder outlives its lease while still believing it holds it: two clients
//! believe at once (`single_believer` violated) and the storage accepts the paused holder's late
//! write after the new holder's (`storage_in_lease_order` violated).

use super::lease_service::{LeaseModel, LeaseServiceCfg};
use super::{Mutant, Params};
use crate::protocol::FencePolicy;

/// The catalog name.
pub const NAME: &str = "ttl-only";

/// Negative controls that apply: none (TTL-only storage has no fence to break).
pub const MUTANTS: &[Mutant] = &[];

/// One line for `fencecheck list`.
pub const SUMMARY: &str = "lease with a TTL, storage accepts every write (SET NX PX alone)";

/// Parameters of the TTL-only model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TtlOnlyModelCfg {
    /// Number of clients.
    pub clients: usize,
    /// Writes each client makes (each attempted once) before releasing.
    pub writes_per_client: u8,
    /// Times a client asks for the lease again after learning it lost it.
    pub retries: u8,
    /// A deliberately broken variant, for negative controls.
    pub mutant: Option<Mutant>,
}

impl Default for TtlOnlyModelCfg {
    fn default() -> Self {
        TtlOnlyModelCfg {
            clients: 3,
            writes_per_client: 2,
            retries: 0,
            mutant: None,
        }
    }
}

impl TtlOnlyModelCfg {
    /// Builds the Stateright model.
    pub fn into_model(self) -> LeaseModel {
        LeaseServiceCfg {
            clients: self.clients,
            writes_per_client: self.writes_per_client,
            retries: self.retries,
            policy: FencePolicy::AcceptAll,
            mutant: self.mutant,
        }
        .into_model()
    }
}

catalog_entry! {
    /// The catalog entry.
    TtlOnly: LeaseModel {
        name: NAME,
        summary: SUMMARY,
        clients: 2..=8,
        mutants: MUTANTS,
        defaults: Params::sized(3, 2, 0),
        build: |p| TtlOnlyModelCfg {
            clients: p.clients,
            writes_per_client: p.writes,
            retries: p.retries,
            mutant: p.mutant,
        }
        .into_model(),
    }
}
