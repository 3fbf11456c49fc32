//! TTL-only lock: a lease with a time-to-live and storage that accepts every write.
//!
//! This is `SET key owner NX PX 30000` and nothing else. The TTL keeps a dead holder from blocking
//! forever, but a paused holder outlives its lease while still believing it holds it: two clients
//! believe at once (`single_believer` violated) and the storage accepts the paused holder's late
//! write after the new holder's (`storage_in_lease_order` violated).

use super::lease_service::{prop, LeaseModel, LeaseServiceCfg};
use super::{Expected, Mutant, Params, PropertySpec};
use crate::protocol::FencePolicy;
use stateright::Expectation;

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

/// What the TTL-only model declares about each of its properties.
pub const PROPERTIES: &[PropertySpec] = &[
    PropertySpec {
        name: prop::STORAGE_IN_LEASE_ORDER,
        kind: Expectation::Always,
        meaning: "storage never accepts a write from an older lease after one from a newer lease",
        expected: Expected::Violated,
    },
    PropertySpec {
        name: prop::SINGLE_BELIEVER,
        kind: Expectation::Always,
        meaning: "at most one client believes it holds the lease",
        expected: Expected::Violated,
    },
    PropertySpec {
        name: prop::PROGRESS,
        kind: Expectation::Eventually,
        meaning: "every complete run stores some write",
        expected: Expected::Holds,
    },
    PropertySpec {
        name: prop::WRITE_ACCEPTED,
        kind: Expectation::Sometimes,
        meaning: "some write is stored",
        expected: Expected::Holds,
    },
    PropertySpec {
        name: prop::LEASE_REGRANTED,
        kind: Expectation::Sometimes,
        meaning: "the lease is granted a second time",
        expected: Expected::Holds,
    },
    PropertySpec {
        name: prop::STALE_WRITE_REJECTED,
        kind: Expectation::Sometimes,
        meaning: "the storage refuses a stale write (never, without fencing)",
        expected: Expected::Violated,
    },
];

catalog_entry! {
    /// The catalog entry.
    TtlOnly: LeaseModel {
        name: NAME,
        summary: SUMMARY,
        properties: PROPERTIES,
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
