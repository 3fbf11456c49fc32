//! Linearizability of a fenced register: can the reads and token-guarded writes of a real
//! history, each with the time it was invoked and the time it completed, be put in one order
//! that respects real time and the register's sequential rule?
//!
//! The rule is the core's fence ([`crate::protocol::Fence`]): a write is stored if its token is at
//! least the highest stored, else it is answered stale with that highest token; a read returns
//! the stored value and its token. A write that never completed may or may not have taken effect.
//!
//! The search is Wing and Gong's, with Lowe's memoisation: linearize, one at a time, an operation
//! that no unlinearized operation precedes in real time, and backtrack when none fits; a
//! (linearized set, register state) pair already explored is never explored again. Keys are
//! independent registers, so each key's operations are checked on their own. The linearized set
//! is kept as a frontier (every operation before it, in invocation order, is linearized) plus the
//! few above it, so a history whose operations barely overlap is checked in linear time and
//! memory: with no overlap there is one candidate at each step and nothing to backtrack.

use crate::protocol::Token;
use std::collections::HashSet;
use std::hash::Hash;

/// What an operation asked.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Call<V> {
    /// Read the stored value and its token.
    Read,
    /// Write `value` under `token`.
    Write {
        /// The writer's fencing token.
        token: Token,
        /// What it writes.
        value: V,
    },
}

/// What an operation was answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Answer<V> {
    /// A read's result: the stored value with its token, or nothing stored.
    Read(Option<(Token, V)>),
    /// The write was stored.
    Accepted,
    /// The write was refused: a write with this larger token was stored.
    Stale {
        /// The highest stored token.
        highest: Token,
    },
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<V> {
    /// The register (key) it touched.
    pub key: u32,
    /// What it asked.
    pub call: Call<V>,
    /// When it was invoked.
    pub invoked: u64,
    /// When it completed and what it was answered; `None` when the answer never came (it may or
    /// may not have taken effect).
    pub completed: Option<(u64, Answer<V>)>,
}

/// The register: the stored value and its token.
type Register<V> = Option<(Token, V)>;

/// The register's sequential rule: the answer to `call` in `state`, and the next state.
fn apply<V: Clone>(state: &Register<V>, call: &Call<V>) -> (Answer<V>, Register<V>) {
    match call {
        Call::Read => (Answer::Read(state.clone()), state.clone()),
        Call::Write { token, value } => match state {
            Some((highest, _)) if token < highest => {
                (Answer::Stale { highest: *highest }, state.clone())
            }
            _ => (Answer::Accepted, Some((*token, value.clone()))),
        },
    }
}

/// A history that cannot be linearized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotLinearizable<V> {
    /// The key whose operations cannot be ordered.
    pub key: u32,
    /// A smallest set of them that still cannot be ordered: removing any one makes the rest
    /// linearizable, or removes the write whose value a remaining answer names (found by
    /// deleting operations while the failure stays, never such a write).
    pub operations: Vec<Operation<V>>,
}

impl<V: std::fmt::Debug> std::fmt::Display for NotLinearizable<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "key {}: these {} operations cannot be put in one order:",
            self.key,
            self.operations.len()
        )?;
        for op in &self.operations {
            let done = match &op.completed {
                Some((t, answer)) => format!("completed at {t}: {answer:?}"),
                None => "never completed".to_string(),
            };
            writeln!(f, "  {:?} invoked at {}, {done}", op.call, op.invoked)?;
        }
        Ok(())
    }
}

/// What a successful check did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checked {
    /// Operations checked.
    pub operations: usize,
    /// Keys (independent registers).
    pub keys: usize,
    /// Search states explored (at least one per completed operation).
    pub explored: usize,
}

/// Checks `history`: `Ok` when every key's operations can be linearized, else the first key
/// (in key order) that cannot, with a smallest set of its operations that cannot be ordered.
pub fn check<V: Clone + Eq + Hash>(
    history: &[Operation<V>],
) -> Result<Checked, NotLinearizable<V>> {
    let mut keys: Vec<u32> = history.iter().map(|op| op.key).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut checked = Checked {
        operations: history.len(),
        keys: keys.len(),
        explored: 0,
    };
    for key in keys {
        let ops: Vec<Operation<V>> = history.iter().filter(|op| op.key == key).cloned().collect();
        match search(&ops) {
            Some(explored) => checked.explored += explored,
            None => {
                return Err(NotLinearizable {
                    key,
                    operations: smallest_failing(ops),
                })
            }
        }
    }
    Ok(checked)
}

/// Which operations are linearized: all before `frontier` (in invocation order) and `above`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Linearized {
    frontier: u32,
    above: Vec<u32>,
}

impl Linearized {
    fn contains(&self, i: u32) -> bool {
        i < self.frontier || self.above.binary_search(&i).is_ok()
    }

    fn with(&self, i: u32) -> Linearized {
        let mut next = self.clone();
        if i == next.frontier {
            next.frontier += 1;
            while next.above.first() == Some(&next.frontier) {
                next.above.remove(0);
                next.frontier += 1;
            }
        } else if let Err(at) = next.above.binary_search(&i) {
            next.above.insert(at, i);
        }
        next
    }
}

/// One level of the depth-first search.
struct Frame<V> {
    linearized: Linearized,
    state: Register<V>,
    done: usize,
    candidates: Vec<u32>,
    next: usize,
}

/// The search over one key's operations: `Some(states explored)` when they can be linearized.
fn search<V: Clone + Eq + Hash>(ops: &[Operation<V>]) -> Option<usize> {
    let mut ops: Vec<&Operation<V>> = ops.iter().collect();
    ops.sort_by_key(|op| op.invoked);
    let returned: Vec<u64> = ops
        .iter()
        .map(|op| op.completed.as_ref().map_or(u64::MAX, |(t, _)| *t))
        .collect();
    let total = ops.iter().filter(|op| op.completed.is_some()).count();
    if total == 0 {
        return Some(0);
    }
    // The operations that may come next: unlinearized, and invoked no later than every
    // unlinearized operation's completion (an operation that completed before another was
    // invoked precedes it). Scanned in invocation order from the frontier: an operation invoked
    // after the smallest completion seen so far cannot come next, nor can any after it.
    let candidates = |lin: &Linearized| -> Vec<u32> {
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
        seen
    };
    let start = Linearized {
        frontier: 0,
        above: Vec::new(),
    };
    let mut memo: HashSet<(Linearized, Register<V>)> = HashSet::new();
    let mut stack = vec![Frame {
        candidates: candidates(&start),
        linearized: start,
        state: None,
        done: 0,
        next: 0,
    }];
    let mut explored = 1;
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
            return Some(explored);
        }
        let linearized = top.linearized.with(i);
        if !memo.insert((linearized.clone(), state.clone())) {
            continue;
        }
        explored += 1;
        stack.push(Frame {
            candidates: candidates(&linearized),
            linearized,
            state,
            done,
            next: 0,
        });
    }
    None
}

/// Whether every answer in `ops` that names a write (a read's value, a stale write's highest
/// token) still has that write among `ops`, when `all` has it. Deleting the write a read saw
/// would make a new failure (a read of a value nobody wrote), not shrink the old one.
fn sources_kept<V: Clone + Eq + Hash>(all: &[Operation<V>], ops: &[Operation<V>]) -> bool {
    let writes = |set: &[Operation<V>], token: Token, value: Option<&V>| {
        set.iter()
            .filter(|o| match &o.call {
                Call::Write { token: t, value: v } => *t == token && value.is_none_or(|x| x == v),
                Call::Read => false,
            })
            .count()
    };
    ops.iter().all(|o| {
        let (token, value) = match &o.completed {
            Some((_, Answer::Read(Some((t, v))))) => (*t, Some(v)),
            Some((_, Answer::Stale { highest })) => (*highest, None),
            _ => return true,
        };
        writes(ops, token, value) > 0 || writes(all, token, value) == 0
    })
}

/// Deletes operations from a failing `ops` while it keeps failing: halves, then quarters, down to
/// single operations, never deleting a write whose value a remaining answer names. What remains
/// fails, and fails no more without any one of its deletable operations.
fn smallest_failing<V: Clone + Eq + Hash>(mut ops: Vec<Operation<V>>) -> Vec<Operation<V>> {
    let all = ops.clone();
    let mut chunk = ops.len().div_ceil(2).max(1);
    loop {
        let before = ops.len();
        let mut at = 0;
        while at < ops.len() {
            let end = (at + chunk).min(ops.len());
            let without: Vec<Operation<V>> = ops[..at].iter().chain(&ops[end..]).cloned().collect();
            if !without.is_empty() && sources_kept(&all, &without) && search(&without).is_none() {
                ops = without;
            } else {
                at = end;
            }
        }
        // A deletion can make an earlier operation deletable (the read that named a write is
        // gone): single operations are tried again until a pass deletes none.
        if chunk == 1 && ops.len() == before {
            return ops;
        }
        chunk = chunk.div_ceil(2);
    }
}

/// A linearizable history by construction, for tests and benchmarks: `clients` clients per key
/// over `keys` keys make `operations` operations in all, each taking effect at one instant
/// between its invocation and completion (which overlap with other clients'), answered by the
/// register's rule in that order; one in a hundred writes never completes. Deterministic in
/// `seed`.
pub fn simulated_history(
    seed: u64,
    keys: u32,
    clients: u32,
    operations: usize,
) -> Vec<Operation<u64>> {
    let mut rng = seed | 1;
    let mut next = move |bound: u64| {
        // xorshift64*
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound.max(1)
    };
    // (effect instant, index) per key; each client runs one operation at a time.
    let mut history = Vec::with_capacity(operations);
    let mut effects: Vec<(u64, usize)> = Vec::with_capacity(operations);
    let mut free_at = vec![0u64; (keys * clients) as usize];
    let mut tokens = vec![0u64; keys as usize];
    for n in 0..operations {
        let key = next(u64::from(keys)) as u32;
        let client = (key * clients + next(u64::from(clients)) as u32) as usize;
        let invoked = free_at[client] + next(5);
        let effect = invoked + 1 + next(10);
        let completed = effect + 1 + next(10);
        free_at[client] = completed;
        let call = if next(2) == 0 {
            Call::Read
        } else {
            // Mostly newer tokens, sometimes an older one (a paused holder's).
            let t = &mut tokens[key as usize];
            if next(8) == 0 && *t > 1 {
                Call::Write {
                    token: Token::new(*t - 1 - next(*t - 1)),
                    value: n as u64,
                }
            } else {
                *t += 1;
                Call::Write {
                    token: Token::new(*t),
                    value: n as u64,
                }
            }
        };
        effects.push((effect, n));
        history.push(Operation {
            key,
            call,
            invoked,
            completed: Some((completed, Answer::Accepted)),
        });
    }
    // Answer each operation by the rule, in the order of the instants they take effect.
    effects.sort_unstable();
    let mut registers: Vec<Register<u64>> = vec![None; keys as usize];
    for (_, n) in effects {
        let op = &mut history[n];
        let (answer, state) = apply(&registers[op.key as usize], &op.call);
        registers[op.key as usize] = state;
        let lost = matches!(op.call, Call::Write { .. }) && n % 100 == 99;
        op.completed = if lost {
            None
        } else {
            op.completed.take().map(|(t, _)| (t, answer))
        };
    }
    history
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: Call<u64>, invoked: u64, completed: u64, answer: Answer<u64>) -> Operation<u64> {
        Operation {
            key: 0,
            call,
            invoked,
            completed: Some((completed, answer)),
        }
    }

    fn write(token: u64, value: u64) -> Call<u64> {
        Call::Write {
            token: Token::new(token),
            value,
        }
    }

    fn read(token: u64, value: u64) -> Answer<u64> {
        Answer::Read(Some((Token::new(token), value)))
    }

    #[test]
    fn simulated_histories_are_linearizable() {
        for seed in 1..20 {
            let h = simulated_history(seed, 3, 3, 600);
            let checked = check(&h).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(checked.operations, 600);
            assert!(checked.explored >= 500, "{checked:?}");
        }
    }

    /// Negative control: in a 300-operation history, one read made to return a value that two
    /// later writes had already replaced. The check rejects it and names the three operations
    /// that cannot be ordered.
    #[test]
    fn a_stale_read_is_caught_with_the_operations_that_conflict() {
        let mut h = simulated_history(7, 1, 3, 300);
        let accepted = |i: usize| matches!(h[i].completed, Some((_, Answer::Accepted)));
        let done = |i: usize| h[i].completed.as_ref().map_or(u64::MAX, |(t, _)| *t);
        let token = |i: usize| match &h[i].call {
            Call::Write { token, .. } => *token,
            Call::Read => Token::new(0),
        };
        let n = h.len();
        let (w1, w2, r) = (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .filter(|&(a, b)| accepted(a) && accepted(b) && done(a) < h[b].invoked)
            .filter(|&(a, b)| token(a) < token(b))
            .find_map(|(a, b)| {
                (0..n)
                    .find(|&r| matches!(h[r].call, Call::Read) && done(b) < h[r].invoked)
                    .map(|r| (a, b, r))
            })
            .expect("two writes in order and a read after them");
        let Call::Write { token, value } = h[w1].call.clone() else {
            unreachable!()
        };
        let t = done(r);
        h[r].completed = Some((t, Answer::Read(Some((token, value)))));
        let e = check(&h).expect_err("not linearizable");
        let mut named: Vec<_> = e.operations.clone();
        let mut expected = vec![h[w1].clone(), h[w2].clone(), h[r].clone()];
        named.sort_by_key(|o| o.invoked);
        expected.sort_by_key(|o| o.invoked);
        assert_eq!(named, expected, "{e}");
        // Minimal: without the newer write or the read, the rest is linearizable; the older
        // write is the value the read names, so it stays.
        for skip in [&h[w2], &h[r]] {
            let rest: Vec<_> = e
                .operations
                .iter()
                .filter(|o| *o != skip)
                .cloned()
                .collect();
            assert_eq!(rest.len(), 2);
            assert!(check(&rest).is_ok(), "not minimal: {e}");
        }
        // The unmutated history passes.
        assert!(check(&simulated_history(7, 1, 3, 300)).is_ok());
    }

    #[test]
    fn overlapping_writes_may_take_effect_in_either_order() {
        let h = vec![
            op(write(1, 10), 0, 10, Answer::Accepted),
            op(write(2, 20), 1, 9, Answer::Accepted),
            op(Call::Read, 11, 12, read(2, 20)),
        ];
        assert!(check(&h).is_ok());
        // In real-time order, token 1 after token 2 is stale.
        let h = vec![
            op(write(2, 20), 0, 1, Answer::Accepted),
            op(write(1, 10), 2, 3, Answer::Accepted),
        ];
        let e = check(&h).expect_err("the fence refuses an older token");
        assert_eq!(e.operations.len(), 2);
    }

    #[test]
    fn an_unanswered_write_may_or_may_not_have_taken_effect() {
        let lost = Operation {
            key: 0,
            call: write(3, 30),
            invoked: 0,
            completed: None,
        };
        for seen in [read(3, 30), Answer::Read(None)] {
            let h = vec![lost.clone(), op(Call::Read, 5, 6, seen)];
            assert!(check(&h).is_ok());
        }
        // But once seen, it cannot be unseen.
        let h = vec![
            lost,
            op(Call::Read, 5, 6, read(3, 30)),
            op(Call::Read, 7, 8, Answer::Read(None)),
        ];
        assert!(check(&h).is_err());
    }

    /// One client per key: nothing overlaps, one candidate at each step, no backtracking.
    #[test]
    fn a_history_without_overlap_takes_one_step_per_operation() {
        let h = simulated_history(3, 1, 1, 20_000);
        let checked = check(&h).expect("linearizable by construction");
        let answered = h.iter().filter(|o| o.completed.is_some()).count();
        assert!(
            checked.explored <= answered + 1 + (h.len() - answered),
            "{checked:?}"
        );
    }

    #[test]
    fn keys_are_independent() {
        let mut other = op(write(1, 1), 0, 1, Answer::Accepted);
        other.key = 1;
        let h = vec![other, op(Call::Read, 2, 3, Answer::Read(None))];
        assert_eq!(check(&h).map(|c| c.keys), Ok(2));
    }
}
