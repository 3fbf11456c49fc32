//! Checking an environment and reading the verdicts, fit for a plain `#[test]`.

use crate::check::{
    check_model, Counterexample, Engine, ModelRun, Options, PropertyResult, Verdict,
};
use crate::models::lease_service::{Client, Environment, EnvironmentError};
use crate::models::Params;
use std::fmt::Write as _;

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
    let checked = match env.clock {
        None => check_model(env.name, &params, env.build()?, &options, &mut |_| {}),
        Some(_) => check_model(
            env.name,
            &params,
            env.build_clocked()?,
            &options,
            &mut |_| {},
        ),
    };
    let run = match checked {
        Ok(run) => run,
        // The declarations and the properties come from one list: a disagreement is a bug of
        // this module, not the user's.
        Err(e) => panic!("fencecheck's client environment is inconsistent: {e}"),
    };
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
                    explain(cx)
                );
            }
            None => out.push_str("\nno reachable state meets it"),
        }
        out
    }
}

/// A counterexample as numbered lines: `3. client-0 -> storage: client-0 writes ...`.
pub fn explain(cx: &Counterexample) -> String {
    let mut out = String::new();
    for (i, step) in cx.steps.iter().enumerate() {
        let arrow = if step.from == step.to {
            step.from.clone()
        } else {
            format!("{} -> {}", step.from, step.to)
        };
        let _ = writeln!(out, "  {:>2}. {arrow}: {}", i + 1, step.text);
    }
    out
}
