//! Checking an environment and reading the verdicts, fit for a plain `#[test]`.

use crate::check::search::liveness::livelock;
use crate::check::{
    check_model, Counterexample, Engine, ModelRun, Options, PropertyResult, Verdict,
};
use crate::models::lease_service::{Client, Environment, EnvironmentError};
use crate::models::Params;
use crate::models::{Declares, Fair, Narrate, Symmetric};
use std::fmt::Write as _;
use std::hash::Hash;

/// The verdicts of one exhaustive check of an environment.
#[derive(Clone, Debug)]
pub struct Verification {
    run: ModelRun,
    instances: usize,
}

/// Checks every reachable state of `env` (with symmetry reduction over the instances) and finds a
/// shortest counterexample for each violated property.
///
/// # Errors
/// [`EnvironmentError`] when the environment makes no sense (no instances, a property name taken
/// twice) or when the environment has more distinct states than [`Environment::max_states`]:
/// then no verdict is given.
pub fn try_verify<C: Client>(env: Environment<C>) -> Result<Verification, EnvironmentError> {
    let options = Options {
        threads: 1,
        symmetry: true,
        max_states: Some(env.max_states),
        max_counterexample_states: env.max_states,
        engine: Engine::Stateright,
    };
    let params = Params::sized(env.instances, 0, 0);
    let run = match env.clock {
        None => checked(env.name, &params, env.build()?, &options),
        Some(_) => checked(env.name, &params, env.build_clocked()?, &options),
    };
    let run = run.ok_or(EnvironmentError::Unbounded {
        name: env.name,
        bound: env.max_states,
        depth: 0,
    })?;
    if !run.complete {
        return Err(EnvironmentError::Unbounded {
            name: env.name,
            bound: env.max_states,
            depth: run.max_depth,
        });
    }
    Ok(Verification {
        run,
        instances: env.instances,
    })
}

/// Checks `model`, then looks for runs that never end behind each `eventually` property that
/// every ending run meets ([`livelock`]): such a property is violated, with the loop as its
/// counterexample. `None` when the states without the property outnumber the bound (which
/// cannot happen once the check itself was complete: the bound covers every symmetric copy).
fn checked<M>(name: &'static str, params: &Params, model: M, options: &Options) -> Option<ModelRun>
where
    M: Declares + Narrate + Symmetric + Fair + Clone + Send + Sync + 'static,
    M::State: Clone + Eq + Hash + std::fmt::Debug + Send + Sync,
    M::Action: Clone + PartialEq + std::fmt::Debug + Send + Sync,
{
    let mut run = match check_model(name, params, model.clone(), options, &mut |_| {}) {
        Ok(run) => run,
        // The declarations and the properties come from one list: a disagreement is a bug of
        // this module, not the user's.
        Err(e) => panic!("fencecheck's client environment is inconsistent: {e}"),
    };
    if !run.complete {
        return Some(run);
    }
    // Without symmetry reduction: each state the check counted stands for at most n! states.
    let orbit: usize = if M::REDUCES {
        (1..=params.clients).product()
    } else {
        1
    };
    let bound = options
        .max_states
        .map_or(usize::MAX, |m| m.saturating_mul(orbit));
    for result in &mut run.properties {
        if result.kind != "eventually" || result.verdict != Verdict::Holds {
            continue;
        }
        if let Some(lasso) = livelock(&model, result.property, bound).ok()? {
            result.verdict = Verdict::Violated;
            result.counterexample = Some(lasso);
            result.minimal = false;
        }
    }
    Some(run)
}

/// [`try_verify`], panicking with the error's message: for tests.
///
/// # Panics
/// When [`try_verify`] returns an error.
pub fn verify<C: Client>(env: Environment<C>) -> Verification {
    match try_verify(env) {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

impl Verification {
    /// Distinct states explored (after symmetry reduction).
    pub fn states(&self) -> usize {
        self.run.states
    }

    /// The whole run: every property's verdict and counterexample, sizes and times.
    pub fn run(&self) -> &ModelRun {
        &self.run
    }

    /// The verdict on `property`: holds or violated (a verification is always complete).
    ///
    /// # Errors
    /// [`EnvironmentError::UnknownProperty`] when the environment does not check `property`.
    pub fn verdict(&self, property: &str) -> Result<Verdict, EnvironmentError> {
        Ok(self.find(property)?.verdict)
    }

    /// The shortest counterexample to a violated `always` or `eventually` property.
    pub fn counterexample(&self, property: &str) -> Option<&Counterexample> {
        self.find(property).ok()?.counterexample.as_ref()
    }

    /// Panics unless `property` holds, with the shortest counterexample told step by step.
    ///
    /// # Panics
    /// When the property is violated or unknown.
    pub fn expect_holds(&self, property: &str) -> &Self {
        let result = self.find(property).unwrap_or_else(|e| panic!("{e}"));
        if result.verdict != Verdict::Holds {
            panic!("{}", self.failure(property));
        }
        self
    }

    /// Panics unless `property` is violated; returns its shortest counterexample (`None` for a
    /// `sometimes` property, which is violated by never being reached).
    ///
    /// # Panics
    /// When the property holds or is unknown.
    pub fn expect_violated(&self, property: &str) -> Option<&Counterexample> {
        let result = self.find(property).unwrap_or_else(|e| panic!("{e}"));
        if result.verdict != Verdict::Violated {
            panic!(
                "{}: property {property} holds in all {} states, but was expected to be violated",
                self.run.model, self.run.states
            );
        }
        result.counterexample.as_ref()
    }

    /// Every property and its verdict, one per line.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{}: {} instances, {} states\n",
            self.run.model, self.instances, self.run.states
        );
        let width = self
            .run
            .properties
            .iter()
            .map(|p| p.property.len())
            .max()
            .unwrap_or(0);
        for p in &self.run.properties {
            let _ = writeln!(
                out,
                "  {:<width$}  {:<10}  {}",
                p.property, p.kind, p.verdict
            );
        }
        out
    }

    fn find(&self, property: &str) -> Result<&PropertyResult, EnvironmentError> {
        self.run
            .properties
            .iter()
            .find(|p| p.property == property)
            .ok_or_else(|| EnvironmentError::UnknownProperty {
                name: property.to_string(),
                hint: if property == crate::models::prop::EFFECT_EXACTLY_ONCE {
                    " (Environment::count_effects adds it)"
                } else {
                    ""
                },
                known: self
                    .run
                    .properties
                    .iter()
                    .map(|p| p.property)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Why `property` failed, with its counterexample.
    fn failure(&self, property: &str) -> String {
        let Ok(result) = self.find(property) else {
            return format!("unknown property {property}");
        };
        let mut out = format!(
            "{}: property {property} is violated ({}; {} instances, {} states)",
            self.run.model, result.meaning, self.instances, self.run.states
        );
        match &result.counterexample {
            Some(cx) => {
                let _ = write!(
                    out,
                    "\n{} counterexample, {} steps:\n{}",
                    if result.minimal { "shortest" } else { "a" },
                    cx.steps.len(),
                    lines(cx, Some((property, result.meaning)))
                );
            }
            None => out.push_str("\nno reachable state meets it"),
        }
        out
    }
}

/// A counterexample as numbered lines: `3. client-0 -> storage: client-0 writes ...`; a run that
/// loops forever ends with the line that says which steps repeat.
pub fn explain(cx: &Counterexample) -> String {
    lines(cx, None)
}

/// [`explain`], with the step that breaks the property marked and the reason given after it.
fn lines(cx: &Counterexample, broken: Option<(&str, &str)>) -> String {
    let mut out = String::new();
    for (i, step) in cx.steps.iter().enumerate() {
        let arrow = if step.from == step.to {
            step.from.clone()
        } else {
            format!("{} -> {}", step.from, step.to)
        };
        let _ = write!(out, "  {:>2}. {arrow}: {}", i + 1, step.text);
        match broken {
            Some((property, meaning)) if i + 1 == cx.steps.len() && cx.loop_from.is_none() => {
                let _ = write!(out, "\n      <- violates {property}: {meaning}");
            }
            _ => {}
        }
        out.push('\n');
    }
    if let Some(from) = cx.loop_from {
        let _ = writeln!(
            out,
            "  from step {} the run repeats steps {}-{} forever{}",
            from + 1,
            from + 1,
            cx.steps.len(),
            match broken {
                Some((property, meaning)) => format!(" <- violates {property}: {meaning}"),
                None => String::new(),
            }
        );
    }
    out
}
