//! Fenced lock: the TTL-only lease, and storage that applies the fencing-token rule.
//!
//! Every grant carries a strictly larger token and the storage rejects a write whose token is
//! older than one it has accepted. A paused holder still wakes believing it holds the lease
//! (`single_believer` is still violated: fencing protects the storage, not the beliefs), but its
//! late write is refused, so `storage_in_lease_order` holds.

use super::lease_service::{condition, prop, LeaseModel, LeaseServiceCfg};
use super::{meaning, Declared, Expect, Mutant, Params};
use crate::protocol::FencePolicy;
use stateright::Expectation;

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

/// Every property of the fenced model, declared once.
pub const DECLARED: &[Declared<LeaseModel>] = &[
    Declared {
        name: prop::STORAGE_IN_LEASE_ORDER,
        kind: Expectation::Always,
        meaning: meaning::STORAGE_IN_LEASE_ORDER,
        expect: Expect::Holds,
        condition: condition::in_lease_order,
    },
    Declared {
        name: prop::TOKENS_INCREASE,
        kind: Expectation::Always,
        meaning: meaning::TOKENS_INCREASE,
        expect: Expect::Holds,
        condition: condition::tokens_increase,
    },
    Declared {
        name: prop::SINGLE_BELIEVER,
        kind: Expectation::Always,
        meaning: "at most one client believes it holds the lease (fencing does not promise this)",
        expect: Expect::Violated,
        condition: condition::single_believer,
    },
    Declared {
        name: prop::PROGRESS,
        kind: Expectation::Eventually,
        meaning: "every complete run stores some write",
        expect: Expect::Holds,
        condition: condition::write_stored,
    },
    Declared {
        name: prop::WRITE_ACCEPTED,
        kind: Expectation::Sometimes,
        meaning: meaning::WRITE_ACCEPTED,
        expect: Expect::Holds,
        condition: condition::write_stored,
    },
    Declared {
        name: prop::LEASE_REGRANTED,
        kind: Expectation::Sometimes,
        meaning: meaning::LEASE_REGRANTED,
        expect: Expect::Holds,
        condition: condition::regranted,
    },
    Declared {
        name: prop::STALE_WRITE_REJECTED,
        kind: Expectation::Sometimes,
        meaning: "the storage refuses a stale write",
        expect: Expect::Holds,
        condition: condition::stale_write_rejected,
    },
];

catalog_entry! {
    /// The catalog entry.
    Fenced: LeaseModel {
        name: NAME,
        summary: SUMMARY,
        clients: 2..=6,
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
