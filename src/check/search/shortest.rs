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
    /// The steps, first to last; the last one violates the property, unless the run loops.
    pub steps: Vec<Step>,
    /// For a run that never ends (a livelock): the index of the first step of the loop, which
    /// then repeats from there to the last step forever.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_from: Option<usize>,
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

    let mut bfs = Bfs::start(model, max_states);
    loop {
        for k in 0..bfs.frontier.len() {
            let i = bfs.frontier[k];
            let holds = condition(model, &bfs.nodes[i].0);
            if !eventually && !holds {
                return Some(path_to(model, &bfs.nodes, i));
            }
            if eventually && holds {
                // This path has met its obligation; nothing below it can violate.
                continue;
            }
            let terminal = !bfs.expand(model, i).ok()?;
            if eventually && terminal {
                return Some(path_to(model, &bfs.nodes, i));
            }
        }
        if !bfs.advance() {
            return None;
        }
    }
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
    let mut bfs = Bfs::start(model, max_states);
    loop {
        for k in 0..bfs.frontier.len() {
            let i = bfs.frontier[k];
            always.retain(|(name, condition)| {
                if condition(model, &bfs.nodes[i].0) {
                    return true;
                }
                found.insert(*name, path_to(model, &bfs.nodes, i));
                false
            });
            if always.is_empty() || bfs.expand(model, i).is_err() {
                return found;
            }
        }
        if !bfs.advance() {
            return found;
        }
    }
}

/// The node budget is spent.
struct Full;

/// A breadth-first search: the nodes found so far with their parent links, the level being
/// searched and the next one.
struct Bfs<M: Model> {
    /// Fingerprints rather than states: half the memory and no deep comparisons.
    hasher: std::collections::hash_map::RandomState,
    seen: HashSet<u64>,
    nodes: Vec<Node<M>>,
    frontier: Vec<usize>,
    next: Vec<usize>,
    actions: Vec<M::Action>,
    max_states: usize,
}

impl<M: Model> Bfs<M>
where
    M::State: Hash,
    M::Action: Clone,
{
    /// The initial states as the first level.
    fn start(model: &M, max_states: usize) -> Self {
        let mut bfs = Bfs {
            hasher: std::collections::hash_map::RandomState::new(),
            seen: HashSet::new(),
            nodes: Vec::new(),
            frontier: Vec::new(),
            next: Vec::new(),
            actions: Vec::new(),
            max_states,
        };
        for s in model.init_states() {
            if bfs.seen.insert(bfs.hasher.hash_one(&s)) {
                bfs.nodes.push((s, None));
                bfs.frontier.push(bfs.nodes.len() - 1);
            }
        }
        bfs
    }

    /// Queues node `i`'s unseen successors inside the boundary for the next level. Whether it
    /// has any successor inside the boundary (seen or not), or [`Full`] once `max_states`
    /// nodes are kept.
    fn expand(&mut self, model: &M, i: usize) -> Result<bool, Full> {
        let mut successors = false;
        let mut actions = std::mem::take(&mut self.actions);
        model.actions(&self.nodes[i].0, &mut actions);
        for action in actions.drain(..) {
            let Some(next) = model.next_state(&self.nodes[i].0, action.clone()) else {
                continue;
            };
            if !model.within_boundary(&next) {
                continue;
            }
            successors = true;
            if !self.seen.insert(self.hasher.hash_one(&next)) {
                continue;
            }
            if self.nodes.len() >= self.max_states {
                return Err(Full);
            }
            self.nodes.push((next, Some((i, action))));
            self.next.push(self.nodes.len() - 1);
        }
        self.actions = actions;
        Ok(successors)
    }

    /// Moves to the next level; `false` when it is empty.
    fn advance(&mut self) -> bool {
        self.frontier = std::mem::take(&mut self.next);
        !self.frontier.is_empty()
    }
}

fn path_to<M: Narrate>(model: &M, nodes: &[Node<M>], mut i: usize) -> Counterexample {
    let mut steps = Vec::new();
    while let Some((parent, action)) = &nodes[i].1 {
        steps.push(model.narrate(&nodes[*parent].0, action, &nodes[i].0));
        i = *parent;
    }
    steps.reverse();
    Counterexample {
        steps,
        loop_from: None,
    }
}
