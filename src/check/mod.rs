//! Running the models: the catalog, checker runs, verdicts against expectations, and minimal
//! counterexamples. A library: the CLI only parses arguments and prints what this returns.

pub mod campaign;
mod catalog;
mod gate;
pub mod linearize;
mod params;
mod run;
pub mod search;
pub mod trace;
pub mod verify;

pub use crate::models::Params;
pub use catalog::{catalog, find_model, CheckFn, ModelEntry};
pub use gate::{outcome, Gate, Outcome};
pub use params::{span, ParamsError, MAX_CLIENTS, MAX_RETRIES, MAX_WRITES};
pub use run::{
    check_model, kind_name, CheckError, ModelRun, Options, Progress, PropertyResult, Verdict,
};
pub use search::shortest::{shortest_counterexample, shortest_counterexamples, Counterexample};
pub use search::Engine;
