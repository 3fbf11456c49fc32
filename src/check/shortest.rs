//! Minimal counterexamples by breadth-first search with parent links.
//!
//! Stateright's stored discovery path is whichever violating state it met last, so it is not the
//! shortest even under BFS. This search explores level by level and stops at the first state that
//! violates the property, so no shorter path exists.

use crate::models::{Narrate, Step};
use stateright::{Expectation, Model};
use std::collections::HashSet;
use std::hash::Hash;

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

    let mut nodes: Vec<Node<M>> = Vec::new();
    let mut seen: HashSet<M::State> = HashSet::new();
    let mut frontier: Vec<usize> = Vec::new();
    for s in model.init_states() {
        if seen.insert(s.clone()) {
            nodes.push((s, None));
            frontier.push(nodes.len() - 1);
        }
    }
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
                if seen.contains(&next) {
                    continue;
                }
                if nodes.len() >= max_states {
                    return None;
                }
                seen.insert(next.clone());
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

fn path_to<M: Narrate>(model: &M, nodes: &[Node<M>], mut i: usize) -> Counterexample {
    let mut steps = Vec::new();
    while let Some((parent, action)) = &nodes[i].1 {
        steps.push(model.narrate(&nodes[*parent].0, action, &nodes[i].0));
        i = *parent;
    }
    steps.reverse();
    Counterexample { steps }
}
