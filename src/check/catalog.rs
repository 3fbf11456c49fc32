//! The catalog of models `fencecheck` knows, with their default sizes and limits.

use super::run::{check_model, ModelRun, Options, Progress};
use crate::models::{fenced, ttl_only, Mutant, PropertySpec};

/// Sizes and variants a model is checked with.
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// The largest sizes `check` accepts: beyond them an exhaustive search does not finish on a
/// workstation.
pub const MAX_CLIENTS: usize = 6;
/// See [`MAX_CLIENTS`].
pub const MAX_WRITES: u8 = 4;
/// See [`MAX_CLIENTS`].
pub const MAX_RETRIES: u8 = 3;

/// A size outside what the models accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// `--clients` out of range.
    #[error("--clients {0}: expected a number of clients from 1 to {MAX_CLIENTS}")]
    Clients(usize),
    /// `--writes` out of range.
    #[error("--writes {0}: expected a number of writes per client from 1 to {MAX_WRITES}")]
    Writes(u64),
    /// `--retries` out of range.
    #[error("--retries {0}: expected a number of retries per client from 0 to {MAX_RETRIES}")]
    Retries(u64),
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
pub type CheckFn = fn(&Params, &Options, &mut dyn FnMut(&Progress)) -> ModelRun;

/// A model in the catalog.
pub struct ModelEntry {
    /// The command-line name.
    pub name: &'static str,
    /// One line for `fencecheck list`.
    pub summary: &'static str,
    /// Each property with its declared expectation.
    pub properties: &'static [PropertySpec],
    /// Checks the model at the given sizes.
    pub check: CheckFn,
    /// Serves Stateright's Explorer for the model at `addr` (blocks).
    pub explore: fn(&Params, std::net::SocketAddr),
}

fn check_ttl_only(p: &Params, o: &Options, progress: &mut dyn FnMut(&Progress)) -> ModelRun {
    let model = ttl_only::TtlOnlyModelCfg {
        clients: p.clients,
        writes_per_client: p.writes,
        retries: p.retries,
        mutant: p.mutant,
    }
    .into_model();
    check_model(ttl_only::NAME, model, ttl_only::PROPERTIES, o, progress)
}

fn check_fenced(p: &Params, o: &Options, progress: &mut dyn FnMut(&Progress)) -> ModelRun {
    let model = fenced::FencedModelCfg {
        clients: p.clients,
        writes_per_client: p.writes,
        retries: p.retries,
        mutant: p.mutant,
    }
    .into_model();
    check_model(fenced::NAME, model, fenced::PROPERTIES, o, progress)
}

fn explore_ttl_only(p: &Params, addr: std::net::SocketAddr) {
    use stateright::Model;
    let model = ttl_only::TtlOnlyModelCfg {
        clients: p.clients,
        writes_per_client: p.writes,
        retries: p.retries,
        mutant: p.mutant,
    }
    .into_model();
    model.checker().serve(addr);
}

fn explore_fenced(p: &Params, addr: std::net::SocketAddr) {
    use stateright::Model;
    let model = fenced::FencedModelCfg {
        clients: p.clients,
        writes_per_client: p.writes,
        retries: p.retries,
        mutant: p.mutant,
    }
    .into_model();
    model.checker().serve(addr);
}

/// Every model, in the order `check` runs them.
pub fn catalog() -> &'static [ModelEntry] {
    const CATALOG: &[ModelEntry] = &[
        ModelEntry {
            name: ttl_only::NAME,
            summary: ttl_only::SUMMARY,
            properties: ttl_only::PROPERTIES,
            check: check_ttl_only,
            explore: explore_ttl_only,
        },
        ModelEntry {
            name: fenced::NAME,
            summary: fenced::SUMMARY,
            properties: fenced::PROPERTIES,
            check: check_fenced,
            explore: explore_fenced,
        },
    ];
    CATALOG
}

/// The catalog entry named `name`.
pub fn find_model(name: &str) -> Option<&'static ModelEntry> {
    catalog().iter().find(|m| m.name == name)
}
