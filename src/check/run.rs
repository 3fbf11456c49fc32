//! One exhaustive check of one model, and its verdicts against the model's declarations.

use super::params::ParamsError;
use super::search::shortest::{shortest_counterexamples, Counterexample};
use super::search::{self, Engine, Plan, Trail};
use crate::models::{Declares, Expected, Narrate, PropertySpec, Symmetric};
use serde::Serialize;
use stateright::Expectation;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Why a model could not be checked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The sizes are outside what the model accepts.
    #[error(transparent)]
    Params(#[from] ParamsError),
    /// The model's Stateright properties and its declarations disagree: a property without a
    /// declaration, or a declaration without a property (a misspelt name, a different kind). Its
    /// verdicts could pass vacuously, so the model is refused.
    #[error("model {model}: {problem}")]
    Undeclared {
        /// The model.
        model: &'static str,
        /// What disagrees.
        problem: String,
    },
}

/// Checks that `model`'s properties are exactly its declarations (same names, same kinds, once
/// each).
pub fn check_declarations<M: Declares>(name: &'static str, model: &M) -> Result<(), CheckError> {
    let refuse = |problem: String| {
        Err(CheckError::Undeclared {
            model: name,
            problem,
        })
    };
    let properties = model.properties();
    let declared = model.declarations();
    for p in &properties {
        match declared.iter().find(|d| d.name == p.name) {
            None => return refuse(format!("property {:?} has no declaration", p.name)),
            Some(d) if d.kind != p.expectation => {
                return refuse(format!(
                    "property {:?} is {:?} but declared {:?}",
                    p.name, p.expectation, d.kind
                ))
            }
            Some(_) => {}
        }
    }
    for (i, d) in declared.iter().enumerate() {
        if !properties.iter().any(|p| p.name == d.name) {
            return refuse(format!("declared property {:?} has no condition", d.name));
        }
        if declared[..i].iter().any(|e| e.name == d.name) {
            return refuse(format!("property {:?} is declared twice", d.name));
        }
    }
    Ok(())
}

/// How to search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Checker threads.
    pub threads: usize,
    /// Use symmetry reduction over the interchangeable clients (depth-first search).
    pub symmetry: bool,
    /// The most distinct states (after symmetry reduction) a search may find, as
    /// [`ModelRun::states`] counts them: a search that needs more stops, and the verdicts of
    /// properties not yet decided are then `incomplete`. A bound is kept exactly by the lean
    /// search, which runs whenever one is set, whatever `engine` says.
    pub max_states: Option<usize>,
    /// States the minimal-counterexample search may explore before giving up.
    pub max_counterexample_states: usize,
    /// Which search decides the verdicts.
    pub engine: Engine,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 1,
            symmetry: true,
            max_states: None,
            max_counterexample_states: 5_000_000,
            engine: Engine::Stateright,
        }
    }
}

/// A snapshot of a running check, for progress lines.
#[derive(Clone, Debug)]
pub struct Progress {
    /// The model's name.
    pub model: &'static str,
    /// Distinct states found so far.
    pub unique_states: usize,
    /// States generated so far (with repeats).
    pub states: usize,
    /// The deepest path explored.
    pub max_depth: usize,
    /// Time since the check started.
    pub elapsed: Duration,
}

/// The outcome for one property.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Holds in every reachable state (`always`), on every path (`eventually`), or is reached
    /// (`sometimes`).
    Holds,
    /// The checker found a counterexample (or, for `sometimes`, searched everything and never
    /// reached it).
    Violated,
    /// The search was cut short before the property was decided.
    Incomplete,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "violated",
            Verdict::Incomplete => "incomplete",
        })
    }
}

/// One property's result.
#[derive(Clone, Debug, Serialize)]
pub struct PropertyResult {
    /// The property's name.
    pub property: &'static str,
    /// `always`, `sometimes` or `eventually`.
    pub kind: &'static str,
    /// What it means.
    pub meaning: &'static str,
    /// What the model declares.
    pub expected: Expected,
    /// When the expectation depends on the size or variant: the rule, in words.
    pub rule: Option<&'static str>,
    /// What the checker found.
    pub verdict: Verdict,
    /// For a violated `always`/`eventually` property: a minimal counterexample.
    pub counterexample: Option<Counterexample>,
    /// Whether `counterexample` is known to be minimal (false when the minimal search ran out of
    /// budget and the checker's own path is shown instead).
    pub minimal: bool,
}

impl PropertyResult {
    /// Whether the verdict equals the declared expectation.
    pub fn matches(&self) -> bool {
        matches!(
            (self.expected, self.verdict),
            (Expected::Holds, Verdict::Holds) | (Expected::Violated, Verdict::Violated)
        )
    }
}

/// The result of checking one model.
#[derive(Clone, Debug, Serialize)]
pub struct ModelRun {
    /// The model's name.
    pub model: &'static str,
    /// The sizes it was checked at.
    pub params: crate::models::Params,
    /// Distinct states explored (after symmetry reduction, when on).
    pub states: usize,
    /// States generated, repeats included.
    pub generated: usize,
    /// The deepest path explored.
    pub max_depth: usize,
    /// Wall time of the exhaustive search, in seconds.
    pub seconds: f64,
    /// Wall time spent finding minimal counterexamples, in seconds.
    pub counterexample_seconds: f64,
    /// Whether the search covered every reachable state.
    pub complete: bool,
    /// Whether symmetry reduction was used.
    pub symmetry: bool,
    /// One result per property, in the model's order.
    pub properties: Vec<PropertyResult>,
}

/// A property kind as the reports name it: `always`, `sometimes` or `eventually`.
pub fn kind_name(kind: &Expectation) -> &'static str {
    match kind {
        Expectation::Always => "always",
        Expectation::Sometimes => "sometimes",
        Expectation::Eventually => "eventually",
    }
}

/// Checks `model` exhaustively and compares every property with its declaration. A model whose
/// properties and declarations disagree is refused ([`CheckError::Undeclared`]).
///
/// The verdicts come from the depth-first search `options.engine` names (with symmetry
/// reduction when `options.symmetry`); each violation's counterexample comes from a separate
/// breadth-first search that finds a shortest one, or, where that search runs out of its
/// budget, is the depth-first search's own path (not minimal).
pub fn check_model<M>(
    name: &'static str,
    params: &crate::models::Params,
    model: M,
    options: &Options,
    progress: &mut dyn FnMut(&Progress),
) -> Result<ModelRun, CheckError>
where
    M: Declares + Narrate + Symmetric + Clone + Send + Sync + 'static,
    M::State: Clone + Eq + Hash + std::fmt::Debug + Send + Sync,
    M::Action: Clone + PartialEq + std::fmt::Debug + Send + Sync,
{
    check_declarations(name, &model)?;
    let specs: Vec<PropertySpec> = model
        .declarations()
        .iter()
        .map(|d| d.spec(&model))
        .collect();
    let started = Instant::now();
    let symmetry = options.symmetry && M::REDUCES;
    let plan = Plan {
        engine: options.engine,
        threads: options.threads,
        symmetry,
        max_unique: options.max_states,
    };
    let searched = search::search(&model, plan, &mut |c| {
        progress(&Progress {
            model: name,
            unique_states: c.unique,
            states: c.generated,
            max_depth: c.max_depth,
            elapsed: started.elapsed(),
        })
    });
    let seconds = started.elapsed().as_secs_f64();
    let generated = searched.generated;
    // A search that finds exactly `max` distinct states and then runs out of states is
    // complete; only one that finds more is cut short.
    let complete = !searched.cut;

    let cx_started = Instant::now();
    let violated: Vec<&'static str> = specs
        .iter()
        .filter(|spec| spec.kind != Expectation::Sometimes)
        .filter(|spec| searched.discoveries.contains_key(spec.name))
        .map(|spec| spec.name)
        .collect();
    let mut shortest =
        shortest_counterexamples(&model, &violated, options.max_counterexample_states);
    let mut discoveries = searched.discoveries;
    let properties = specs
        .iter()
        .map(|spec| {
            let discovery = discoveries.remove(spec.name);
            let verdict = match (&spec.kind, discovery.is_some(), complete) {
                (Expectation::Sometimes, true, _) => Verdict::Holds,
                (_, true, _) => Verdict::Violated,
                (_, false, false) => Verdict::Incomplete,
                (Expectation::Sometimes, false, true) => Verdict::Violated,
                (_, false, true) => Verdict::Holds,
            };
            let (counterexample, minimal) = match (&spec.kind, discovery) {
                (Expectation::Always | Expectation::Eventually, Some(path)) => {
                    match shortest.remove(spec.name) {
                        Some(cx) => (Some(cx), true),
                        None => (Some(narrate_trail(&model, path)), false),
                    }
                }
                _ => (None, false),
            };
            PropertyResult {
                rule: spec.rule,
                property: spec.name,
                kind: kind_name(&spec.kind),
                meaning: spec.meaning,
                expected: spec.expected,
                verdict,
                counterexample,
                minimal,
            }
        })
        .collect();
    Ok(ModelRun {
        model: name,
        params: params.clone(),
        states: searched.unique,
        generated,
        max_depth: searched.max_depth,
        seconds,
        counterexample_seconds: cx_started.elapsed().as_secs_f64(),
        complete,
        symmetry,
        properties,
    })
}

/// A path told in the protocol's words.
fn narrate_trail<M: Narrate>(model: &M, pairs: Trail<M::State, M::Action>) -> Counterexample {
    let steps = pairs
        .windows(2)
        .filter_map(|w| {
            let (before, action) = (&w[0].0, w[0].1.as_ref()?);
            Some(model.narrate(before, action, &w[1].0))
        })
        .collect();
    Counterexample {
        steps,
        loop_from: None,
    }
}
