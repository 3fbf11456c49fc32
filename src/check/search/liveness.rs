//! Runs that never end: a fair cycle in which an `eventually` property stays unmet.
//!
//! Stateright decides an `eventually` property on the runs that end (a state with no successor):
//! a run that loops forever without meeting it, such as a client that retries without end, is
//! never reported. This search keeps the graph of the states where the property is still unmet,
//! splits it into strongly connected components (Tarjan's algorithm), and reports a component
//! that a fair scheduler could stay in forever: every step that is possible in all of its states
//! is taken somewhere inside it (weak fairness, per [`Fair::fair_key`](crate::models::Fair)). A loop that another
//! process could always break by a step it is never given is a scheduling artefact, not a
//! livelock, and is not reported. The counterexample is a lasso: the shortest path to the loop,
//! then the loop, which takes every such step once.

use super::seen::fingerprint;
use super::shortest::Counterexample;
use crate::models::{Fair, Narrate};
use stateright::Expectation;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

/// The graph of the states where a property is unmet.
struct Graph<M: Fair> {
    states: Vec<M::State>,
    /// How each state was first reached (breadth-first: a shortest path).
    parent: Vec<Option<(u32, M::Action)>>,
    /// Steps to states where the property is still unmet.
    edges: Vec<Vec<(u32, M::Action)>>,
    /// The fair keys of every step possible in each state (to any state).
    enabled: Vec<Vec<M::Key>>,
}

/// More states than the bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooMany;

/// A fair run of `model` that loops forever without meeting the `eventually` property named
/// `property`, as a lasso; `None` when there is none (or the property is not `eventually`).
///
/// # Errors
/// [`TooMany`] when more than `max_states` states leave the property unmet.
pub fn livelock<M>(
    model: &M,
    property: &str,
    max_states: usize,
) -> Result<Option<Counterexample>, TooMany>
where
    M: Fair + Narrate,
    M::State: Clone + Eq + Hash,
    M::Action: Clone,
{
    let props = model.properties();
    let Some(prop) = props.iter().find(|p| p.name == property) else {
        return Ok(None);
    };
    if prop.expectation != Expectation::Eventually {
        return Ok(None);
    }
    let graph = Graph::explore(model, prop.condition, max_states)?;
    for component in graph.components() {
        if let Some(required) = graph.fair(model, &component) {
            let members: HashSet<u32> = component.iter().copied().collect();
            let entry = *component.iter().min().expect("a component has a state");
            let cycle = graph.cycle(model, entry, &members, required);
            return Ok(Some(graph.lasso(model, entry, cycle)));
        }
    }
    Ok(None)
}

impl<M> Graph<M>
where
    M: Fair + Narrate,
    M::State: Clone + Eq + Hash,
    M::Action: Clone,
{
    /// Every state reachable through states where `met` is false, breadth-first.
    fn explore(
        model: &M,
        met: fn(&M, &M::State) -> bool,
        max_states: usize,
    ) -> Result<Self, TooMany> {
        let mut graph = Graph {
            states: Vec::new(),
            parent: Vec::new(),
            edges: Vec::new(),
            enabled: Vec::new(),
        };
        let mut index: HashMap<u64, u32> = HashMap::new();
        for s in model.init_states() {
            if !met(model, &s) && !index.contains_key(&fingerprint(&s)) {
                graph.add(&mut index, s, None, max_states)?;
            }
        }
        let mut actions = Vec::new();
        let mut next_node = 0;
        while next_node < graph.states.len() {
            let i = next_node;
            next_node += 1;
            model.actions(&graph.states[i], &mut actions);
            for action in actions.drain(..) {
                let Some(next) = model.next_state(&graph.states[i], action.clone()) else {
                    continue;
                };
                if !model.within_boundary(&next) {
                    continue;
                }
                if let Some(key) = model.fair_key(&action) {
                    if !graph.enabled[i].contains(&key) {
                        graph.enabled[i].push(key);
                    }
                }
                if met(model, &next) {
                    continue;
                }
                let j = match index.get(&fingerprint(&next)) {
                    Some(&j) => j,
                    None => {
                        let parent = Some((i as u32, action.clone()));
                        graph.add(&mut index, next, parent, max_states)?
                    }
                };
                graph.edges[i].push((j, action));
            }
        }
        Ok(graph)
    }

    fn add(
        &mut self,
        index: &mut HashMap<u64, u32>,
        state: M::State,
        parent: Option<(u32, M::Action)>,
        max_states: usize,
    ) -> Result<u32, TooMany> {
        if self.states.len() >= max_states {
            return Err(TooMany);
        }
        let id = self.states.len() as u32;
        index.insert(fingerprint(&state), id);
        self.states.push(state);
        self.parent.push(parent);
        self.edges.push(Vec::new());
        self.enabled.push(Vec::new());
        Ok(id)
    }

    /// The strongly connected components with at least one step inside, by Tarjan's algorithm
    /// (iterative), each as its states.
    fn components(&self) -> Vec<Vec<u32>> {
        let n = self.states.len();
        let (mut order, mut low) = (vec![u32::MAX; n], vec![0u32; n]);
        let mut on_stack = vec![false; n];
        let (mut stack, mut found, mut counter) = (Vec::new(), Vec::new(), 0u32);
        for root in 0..n {
            if order[root] != u32::MAX {
                continue;
            }
            // (node, next edge to look at)
            let mut calls = vec![(root, 0usize)];
            while let Some(&mut (v, ref mut e)) = calls.last_mut() {
                if *e == 0 {
                    order[v] = counter;
                    low[v] = counter;
                    counter += 1;
                    stack.push(v);
                    on_stack[v] = true;
                }
                if let Some(&(w, _)) = self.edges[v].get(*e) {
                    *e += 1;
                    let w = w as usize;
                    if order[w] == u32::MAX {
                        calls.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(order[w]);
                    }
                    continue;
                }
                calls.pop();
                if let Some(&(parent, _)) = calls.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == order[v] {
                    let mut component = Vec::new();
                    loop {
                        let w = stack.pop().expect("v is on the stack");
                        on_stack[w] = false;
                        component.push(w as u32);
                        if w == v {
                            break;
                        }
                    }
                    let inside: HashSet<u32> = component.iter().copied().collect();
                    let looped = component.iter().any(|&u| {
                        self.edges[u as usize]
                            .iter()
                            .any(|(w, _)| inside.contains(w))
                    });
                    if looped {
                        found.push(component);
                    }
                }
            }
        }
        found
    }

    /// Whether a fair run can stay in `component` forever: every key possible in all of its
    /// states is taken by some step inside it. Returns those keys (the loop must take them).
    fn fair(&self, model: &M, component: &[u32]) -> Option<Vec<M::Key>> {
        let inside: HashSet<u32> = component.iter().copied().collect();
        let mut always = self.enabled[component[0] as usize].clone();
        for &u in &component[1..] {
            always.retain(|k| self.enabled[u as usize].contains(k));
        }
        let taken: Vec<M::Key> = component
            .iter()
            .flat_map(|&u| self.edges[u as usize].iter())
            .filter(|(w, _)| inside.contains(w))
            .filter_map(|(_, a)| model.fair_key(a))
            .collect();
        always.iter().all(|k| taken.contains(k)).then_some(always)
    }

    /// A loop from `entry` back to it inside the component, taking a step of every `required`
    /// key: each step as (state, index of its edge).
    fn cycle(
        &self,
        model: &M,
        entry: u32,
        inside: &HashSet<u32>,
        required: Vec<M::Key>,
    ) -> Vec<(u32, usize)> {
        let key_of = |&(u, k): &(u32, usize)| model.fair_key(&self.edges[u as usize][k].1);
        let mut cycle: Vec<(u32, usize)> = Vec::new();
        let mut at = entry;
        for key in required {
            if cycle.iter().any(|step| key_of(step).as_ref() == Some(&key)) {
                continue;
            }
            let leg = self
                .path_inside(at, inside, |_, a| model.fair_key(a).as_ref() == Some(&key))
                .expect("the component takes the key");
            at = self.target(leg.last().expect("a leg has a step"));
            cycle.extend(leg);
        }
        if at != entry || cycle.is_empty() {
            let home = self
                .path_inside(at, inside, |w, _| w == entry)
                .expect("a component is strongly connected");
            cycle.extend(home);
        }
        cycle
    }

    fn target(&self, &(u, k): &(u32, usize)) -> u32 {
        self.edges[u as usize][k].0
    }

    /// The shortest path inside the component from `from` whose last step satisfies `stop`
    /// (given the step's target and action); at least one step.
    fn path_inside(
        &self,
        from: u32,
        inside: &HashSet<u32>,
        stop: impl Fn(u32, &M::Action) -> bool,
    ) -> Option<Vec<(u32, usize)>> {
        let mut came: HashMap<u32, (u32, usize)> = HashMap::new();
        let mut queue = VecDeque::from([from]);
        let mut visited = HashSet::from([from]);
        while let Some(u) = queue.pop_front() {
            for (k, (w, action)) in self.edges[u as usize].iter().enumerate() {
                if !inside.contains(w) {
                    continue;
                }
                if stop(*w, action) {
                    let mut path = vec![(u, k)];
                    let mut v = u;
                    while v != from {
                        let step = came[&v];
                        path.push(step);
                        v = step.0;
                    }
                    path.reverse();
                    return Some(path);
                }
                if visited.insert(*w) {
                    came.insert(*w, (u, k));
                    queue.push_back(*w);
                }
            }
        }
        None
    }

    /// The shortest path to `entry`, then `cycle`, told step by step.
    fn lasso(&self, model: &M, entry: u32, cycle: Vec<(u32, usize)>) -> Counterexample {
        let mut prefix = Vec::new();
        let mut v = entry;
        while let Some((p, action)) = &self.parent[v as usize] {
            prefix.push((*p, action.clone()));
            v = *p;
        }
        prefix.reverse();
        let loop_from = prefix.len();
        let looped = cycle
            .into_iter()
            .map(|(u, k)| (u, self.edges[u as usize][k].1.clone()));
        let steps = prefix
            .into_iter()
            .chain(looped)
            .map(|(u, action)| {
                let before = &self.states[u as usize];
                let after = model
                    .next_state(before, action.clone())
                    .expect("a recorded step replays");
                model.narrate(before, &action, &after)
            })
            .collect();
        Counterexample {
            steps,
            loop_from: Some(loop_from),
        }
    }
}

#[cfg(test)]
mod tests;
