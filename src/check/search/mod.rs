//! The searches behind one seam. One crate-internal entry point decides which properties a
//! model's reachable states violate or meet, with Stateright's depth-first checker or the lean
//! search ([`lean`]), and returns a path to each discovery either way; [`shortest`] then finds
//! the shortest path to each violation by breadth-first search.

pub mod lean;
pub mod liveness;
mod seen;
pub mod shortest;
mod stateright;

use crate::models::Symmetric;
use ::stateright::Model;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// A path through a model: each state with the action taken from it, the last with none.
pub type Trail<S, A> = Vec<(S, Option<A>)>;

/// A snapshot for progress lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Distinct states so far.
    pub unique: usize,
    /// Generated states so far.
    pub generated: usize,
    /// The deepest state so far.
    pub max_depth: usize,
}

/// The search that decides the verdicts. Both explore the same states by the same rules, reach
/// the same verdicts and give a path to each discovery; minimal counterexamples come from the
/// breadth-first search in [`shortest`] either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// Stateright's depth-first checker.
    #[default]
    Stateright,
    /// fencecheck's own depth-first search ([`lean`]): fingerprints and their parents in
    /// sharded sets, nothing else kept per state, threads that share work.
    Lean,
}

/// How one search runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub engine: Engine,
    pub threads: usize,
    /// Reduce by the model's symmetry.
    pub symmetry: bool,
    /// The most distinct states to find (kept exactly by the lean search, which runs whenever
    /// a bound is set: Stateright's checker can only stop at a count of generated states,
    /// repeats included, and only between blocks of them).
    pub max_unique: Option<usize>,
}

/// What a search found, whichever engine ran it.
pub(crate) struct Searched<M: Model> {
    pub unique: usize,
    pub generated: usize,
    pub max_depth: usize,
    /// Whether the search passed [`Plan::max_unique`] and stopped before covering the space.
    pub cut: bool,
    /// Each discovered property, with a path to the state that decided it.
    pub discoveries: HashMap<&'static str, Trail<M::State, M::Action>>,
}

/// Searches `model`'s reachable states as `plan` says, reporting [`Counts`] as it goes.
pub(crate) fn search<M>(model: &M, plan: Plan, progress: &mut dyn FnMut(Counts)) -> Searched<M>
where
    M: Symmetric + Clone + Send + Sync + 'static,
    M::State: Clone + Eq + Hash + std::fmt::Debug + Send + Sync,
    M::Action: Clone + PartialEq + std::fmt::Debug + Send + Sync,
{
    match (plan.engine, plan.max_unique) {
        (Engine::Stateright, None) => stateright::search(model, plan, progress),
        _ => {
            let search = lean::Search {
                threads: plan.threads.max(1),
                symmetry: plan
                    .symmetry
                    .then_some(M::representative as fn(&M::State) -> M::State),
                max_unique: plan.max_unique,
                paths: true,
            };
            let found = lean::explore(model, &search, progress);
            Searched {
                unique: found.unique,
                generated: found.generated,
                max_depth: found.max_depth,
                cut: found.cut,
                discoveries: found.discovered.into_iter().zip(found.paths).collect(),
            }
        }
    }
}

/// The first pause between progress reports.
pub(crate) const FIRST_NAP: Duration = Duration::from_micros(20);
/// The longest pause between progress reports.
const MAX_NAP: Duration = Duration::from_millis(100);

/// The pause after `nap`: twice as long, at most [`MAX_NAP`].
pub(crate) fn next_nap(nap: Duration) -> Duration {
    (nap * 2).min(MAX_NAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_come_often_at_first_and_at_most_every_tenth_of_a_second() {
        assert_eq!(next_nap(FIRST_NAP), Duration::from_micros(40));
        assert_eq!(next_nap(Duration::from_millis(80)), MAX_NAP);
        assert_eq!(next_nap(MAX_NAP), MAX_NAP);
    }
}
