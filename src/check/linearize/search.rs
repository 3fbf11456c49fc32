//! The search over one key's operations.
//!
//! Wing and Gong's, with Lowe's memoisation: linearize, one at a time, an operation that no
//! unlinearized operation precedes in real time, and backtrack when none fits; a (linearized set,
//! register state) pair already explored is never explored again. The linearized set is kept as a
//! frontier (every operation below it, in invocation order, is linearized or never answered) plus
//! the few linearized above it and the unanswered ones below it not linearized yet. An unanswered
//! write may take effect at any moment after its invocation, or never: it is tried after the
//! answered candidates (just in time), and it does not hold the frontier back, so a history whose
//! operations barely overlap is checked in linear time and memory even when some writes were
//! never answered.

use super::{apply, Call, Operation, Register};
use std::collections::HashSet;
use std::hash::Hash;

/// Which operations are linearized: those below `frontier` except `open` (unanswered, not
/// linearized yet), and `above`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Linearized {
    frontier: u32,
    above: Vec<u32>,
    open: Vec<u32>,
}

impl Linearized {
    fn contains(&self, i: u32) -> bool {
        (i < self.frontier && self.open.binary_search(&i).is_err())
            || self.above.binary_search(&i).is_ok()
    }

    /// Moves the frontier over what is linearized or unanswered (an unanswered write stays open;
    /// an unanswered read has no effect and is passed).
    fn settle(&mut self, pending: &[Pending]) {
        while (self.frontier as usize) < pending.len() {
            match pending[self.frontier as usize] {
                _ if self.above.first() == Some(&self.frontier) => {
                    self.above.remove(0);
                }
                Pending::Write => self.open.push(self.frontier),
                Pending::Read => {}
                Pending::No => return,
            }
            self.frontier += 1;
        }
    }

    fn with(&self, i: u32, pending: &[Pending]) -> Linearized {
        let mut next = self.clone();
        if let Ok(at) = next.open.binary_search(&i) {
            next.open.remove(at);
        } else if i == next.frontier {
            next.frontier += 1;
            next.settle(pending);
        } else if let Err(at) = next.above.binary_search(&i) {
            next.above.insert(at, i);
        }
        next
    }
}

/// Whether an operation was never answered, and what it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    No,
    Read,
    Write,
}

/// Whether the unanswered `op` could still change `state`: a write whose token is not below the
/// highest stored (the highest only grows, so a write below it stays refused).
fn may_take_effect<V>(op: &Operation<V>, state: &Register<V>) -> bool {
    match &op.call {
        Call::Write { token, .. } => state.as_ref().is_none_or(|(highest, _)| token >= highest),
        Call::Read => false,
    }
}

/// How a search over one key ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Searched {
    /// Linearizable, after exploring this many states.
    Linearizable(usize),
    /// No order fits. `furthest` is the largest frontier any explored order reached; `last` the
    /// largest index ever offered as a candidate: operations after it take no part in the
    /// failure, and the history cut after it fails the same way.
    Stuck { furthest: usize, last: usize },
    /// More than the bound of states: no verdict.
    TooLarge(usize),
}

/// One level of the depth-first search.
struct Frame<V> {
    linearized: Linearized,
    state: Register<V>,
    done: usize,
    candidates: Vec<u32>,
    next: usize,
}

/// The search over `ops` (one key's operations, in invocation order), exploring at most
/// `max_states` states.
pub(super) fn search<V: Clone + Eq + Hash>(ops: &[&Operation<V>], max_states: usize) -> Searched {
    let pending: Vec<Pending> = ops
        .iter()
        .map(|op| match (&op.completed, &op.call) {
            (Some(_), _) => Pending::No,
            (None, Call::Read) => Pending::Read,
            (None, Call::Write { .. }) => Pending::Write,
        })
        .collect();
    let returned: Vec<u64> = ops
        .iter()
        .map(|op| op.completed.as_ref().map_or(u64::MAX, |(t, _)| *t))
        .collect();
    let total = pending.iter().filter(|p| **p == Pending::No).count();
    if total == 0 {
        return Searched::Linearizable(0);
    }
    let (mut furthest, mut last) = (0usize, 0usize);
    // The operations that may come next: unlinearized, and invoked no later than every
    // unlinearized answered operation's completion. Scanned in invocation order from the
    // frontier: an operation invoked after the smallest completion seen so far cannot come next,
    // nor can any after it. The open unanswered ones below the frontier always may; answered
    // candidates are tried first.
    let mut candidates = |lin: &Linearized| -> Vec<u32> {
        let mut seen = Vec::new();
        let mut earliest = u64::MAX;
        for i in lin.frontier as usize..ops.len() {
            if lin.contains(i as u32) {
                continue;
            }
            if ops[i].invoked > earliest {
                break;
            }
            earliest = earliest.min(returned[i]);
            seen.push(i as u32);
        }
        seen.retain(|&i| ops[i as usize].invoked <= earliest);
        seen.sort_by_key(|&i| pending[i as usize] != Pending::No);
        seen.extend(&lin.open);
        furthest = furthest.max(lin.frontier as usize);
        last = last.max(seen.iter().max().map_or(0, |&i| i as usize));
        seen
    };
    let mut start = Linearized {
        frontier: 0,
        above: Vec::new(),
        open: Vec::new(),
    };
    start.settle(&pending);
    let mut memo: HashSet<(Linearized, Register<V>)> = HashSet::new();
    let mut stack = vec![Frame {
        candidates: candidates(&start),
        linearized: start,
        state: None,
        done: 0,
        next: 0,
    }];
    while let Some(top) = stack.last_mut() {
        let Some(&i) = top.candidates.get(top.next) else {
            stack.pop();
            continue;
        };
        top.next += 1;
        let op = ops[i as usize];
        let (answer, state) = apply(&top.state, &op.call);
        let done = match &op.completed {
            Some((_, seen)) if *seen != answer => continue,
            Some(_) => top.done + 1,
            None => top.done,
        };
        if done == total {
            return Searched::Linearizable(memo.len() + 1);
        }
        let mut linearized = top.linearized.with(i, &pending);
        // An open write that can no longer take effect need never be placed: forgetting it
        // keeps equal states equal.
        linearized
            .open
            .retain(|&j| may_take_effect(ops[j as usize], &state));
        if !memo.insert((linearized.clone(), state.clone())) {
            continue;
        }
        if memo.len() >= max_states {
            return Searched::TooLarge(memo.len());
        }
        stack.push(Frame {
            candidates: candidates(&linearized),
            linearized,
            state,
            done,
            next: 0,
        });
    }
    Searched::Stuck { furthest, last }
}
