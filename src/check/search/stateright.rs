//! Stateright's depth-first checker behind the seam.

use super::{next_nap, Counts, Plan, Searched, FIRST_NAP};
use crate::models::Symmetric;
use stateright::{Checker, HasDiscoveries};
use std::collections::BTreeSet;
use std::hash::Hash;

/// Stateright's depth-first checker over the whole space: no property finishes it early, so
/// every property is decided.
pub(super) fn search<M>(model: &M, plan: Plan, progress: &mut dyn FnMut(Counts)) -> Searched<M>
where
    M: Symmetric + Clone + Send + Sync + 'static,
    M::State: Clone + Eq + Hash + std::fmt::Debug + Send + Sync,
    M::Action: Clone + PartialEq + std::fmt::Debug + Send + Sync,
{
    let mut builder = model
        .clone()
        .checker()
        .threads(plan.threads.max(1))
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::new()));
    if plan.symmetry {
        builder = builder.symmetry_fn(M::representative);
    }
    let checker = builder.spawn_dfs();
    // Poll finely at first so that small models report their real time; back off.
    let mut nap = FIRST_NAP;
    while !checker.is_done() {
        std::thread::sleep(nap);
        nap = next_nap(nap);
        progress(Counts {
            unique: checker.unique_state_count(),
            generated: checker.state_count(),
            max_depth: checker.max_depth(),
        });
    }
    let checker = checker.join();
    Searched {
        unique: checker.unique_state_count(),
        generated: checker.state_count(),
        max_depth: checker.max_depth(),
        cut: false,
        discoveries: checker
            .discoveries()
            .into_iter()
            .map(|(name, path)| (name, path.into_vec()))
            .collect(),
    }
}
