//! Minimal counterexamples by breadth-first search with parent links.
//!
//! Stateright's stored discovery path is whichever violating state it met last, so it is not the
//! shortest even under BFS. This search explores level by level and stops at the first state that
//! violates the property, so no shorter path exists.

use crate::models::{Narrate, Step};
use stateright::{Expectation, Model};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

/// A state found by the search and how it was reached (parent index and action).
type Node<M> = (<M as Model>::State, Option<(usize, <M as Model>::Action)>);

/// A minimal path to a violation, told in the protocol's words.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Counterexample {
    /// The steps, first to last; the last one violates the property.
    pub steps: Vec<Step>,
}

/// The shortest path that violates `property` (an `always` property false in a state, or an
/// `eventually` property never true on a path that ends), or `None` if none exists within
/// `max_states` explored states.
pub fn shortest_counterexample<M>(
    model: &M,
    property: &str,
    max_states: usize,
) -> Option<Counterexample>
where
    M: Narrate,
    M::State: Clone + Eq + Hash,
    M::Action: Clone,
{
    let props = model.properties();
    let prop = props.iter().find(|p| p.name == property)?;
    let condition = prop.condition;
    let eventually = match prop.expectation {
        Expectation::Always => false,
        Expectation::Eventually => true,
        Expectation::Sometimes => return None,
    };

    let Search {
        hasher,
        mut seen,
        mut nodes,
        mut frontier,
    } = Search::start(model);
    let mut actions = Vec::new();
    while !frontier.is_empty() {
        let mut next_frontier = Vec::new();
        for &i in &frontier {
            let holds = condition(model, &nodes[i].0);
            if !eventually && !holds {
                return Some(path_to(model, &nodes, i));
            }
            if eventually && holds {
                // This path has met its obligation; nothing below it can violate.
                continue;
            }
            let mut terminal = true;
            model.actions(&nodes[i].0, &mut actions);
            for action in actions.drain(..) {
                let Some(next) = model.next_state(&nodes[i].0, action.clone()) else {
                    continue;
                };
                if !model.within_boundary(&next) {
                    continue;
                }
                terminal = false;
                if !seen.insert(hasher.hash_one(&next)) {
                    continue;
                }
                if nodes.len() >= max_states {
                    return None;
                }
                nodes.push((next, Some((i, action))));
                next_frontier.push(nodes.len() - 1);
            }
            if eventually && terminal {
                return Some(path_to(model, &nodes, i));
            }
        }
        frontier = next_frontier;
    }
    None
}

/// The shortest counterexample of each named `always` property, found in one breadth-first
/// search (and of each `eventually` property, each in its own search). Properties with no
/// violation within `max_states` states are absent from the result.
pub fn shortest_counterexamples<M>(
    model: &M,
    names: &[&'static str],
    max_states: usize,
) -> HashMap<&'static str, Counterexample>
where
    M: Narrate,
    M::State: Clone + Eq + Hash,
    M::Action: Clone,
{
    let props = model.properties();
    let mut found = HashMap::new();
    let mut always = Vec::new();
    for name in names {
        match props.iter().find(|p| p.name == *name) {
            Some(p) if p.expectation == Expectation::Always => always.push((*name, p.condition)),
            Some(_) => {
                if let Some(cx) = shortest_counterexample(model, name, max_states) {
                    found.insert(*name, cx);
                }
            }
            None => {}
        }
    }
    if always.is_empty() {
        return found;
    }
    let Search {
        hasher,
        mut seen,
        mut nodes,
        mut frontier,
    } = Search::start(model);
    let mut actions = Vec::new();
    while !frontier.is_empty() && !always.is_empty() {
        let mut next_frontier = Vec::new();
        for &i in &frontier {
            always.retain(|(name, condition)| {
                if condition(model, &nodes[i].0) {
                    return true;
                }
                found.insert(*name, path_to(model, &nodes, i));
                false
            });
            if always.is_empty() {
                return found;
            }
            model.actions(&nodes[i].0, &mut actions);
            for action in actions.drain(..) {
                let Some(next) = model.next_state(&nodes[i].0, action.clone()) else {
                    continue;
                };
                if !model.within_boundary(&next) || !seen.insert(hasher.hash_one(&next)) {
                    continue;
                }
                if nodes.len() >= max_states {
                    return found;
                }
                nodes.push((next, Some((i, action))));
                next_frontier.push(nodes.len() - 1);
            }
        }
        frontier = next_frontier;
    }
    found
}

/// A breadth-first search at its start: the initial states as the first frontier.
struct Search<M: Model> {
    /// Fingerprints rather than states: half the memory and no deep comparisons.
    hasher: std::collections::hash_map::RandomState,
    seen: HashSet<u64>,
    nodes: Vec<Node<M>>,
    frontier: Vec<usize>,
}

impl<M: Model> Search<M>
where
    M::State: Hash,
{
    fn start(model: &M) -> Self {
        let mut search = Search {
            hasher: std::collections::hash_map::RandomState::new(),
            seen: HashSet::new(),
            nodes: Vec::new(),
            frontier: Vec::new(),
        };
        for s in model.init_states() {
            if search.seen.insert(search.hasher.hash_one(&s)) {
                search.nodes.push((s, None));
                search.frontier.push(search.nodes.len() - 1);
            }
        }
        search
    }
}

fn path_to<M: Narrate>(model: &M, nodes: &[Node<M>], mut i: usize) -> Counterexample {
    let mut steps = Vec::new();
    while let Some((parent, action)) = &nodes[i].1 {
        steps.push(model.narrate(&nodes[*parent].0, action, &nodes[i].0));
        i = *parent;
    }
    steps.reverse();
    Counterexample { steps }
}
