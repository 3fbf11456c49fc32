//! Linearizability of a fenced register: can the reads and token-guarded writes of a real
//! history, each with the time it was invoked and the time it completed, be put in one order
//! that respects real time and the register's sequential rule?
//!
//! The rule is the core's fence ([`crate::protocol::Fence`]): a write is stored if its token is at
//! least the highest stored, else it is answered stale with that highest token; a read returns
//! the stored value and its token. A write that never completed may or may not have taken effect.
//!
//! Keys are independent registers, so each key's operations are checked on their own: Wing and
//! Gong's search with Lowe's memoisation, linear in a history whose operations barely overlap,
//! unanswered writes included (an unanswered write may take effect at any moment after its
//! invocation, or never; it is placed just in time). A key that cannot be linearized is reported
//! with a minimal set of its operations that cannot be ordered ([`NotLinearizable`]); [`verdict`]
//! skips that. A search that would explore more than its bound of states stops with an error.

mod minimise;
mod search;
mod simulate;

pub use simulate::{plant_empty_read, simulated_history, simulated_lossy};

use crate::protocol::Token;
use search::Searched;
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
    /// With [`check`]: a minimal set of them that cannot be ordered. Minimal means that no single
    /// operation can be removed without making the rest orderable, except a write a remaining
    /// answer names (a read's value, a stale answer's highest token), which stays with every
    /// write that could be the one named: deleting it would make a new failure, not shrink the old
    /// one. Such a set of a history's operations always contains an operation whose answer no
    /// order explains (a planted fault is always named); it is not always the smallest such set.
    /// With [`verdict`]: empty.
    pub operations: Vec<Operation<V>>,
}

impl<V: std::fmt::Debug> std::fmt::Display for NotLinearizable<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.operations.is_empty() {
            return write!(
                f,
                "key {}: the operations cannot be put in one order",
                self.key
            );
        }
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

/// Why a history was not found linearizable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinearizeError<V: std::fmt::Debug> {
    /// A key's operations cannot be put in one order.
    #[error("{0}")]
    NotLinearizable(NotLinearizable<V>),
    /// A key's search passed its bound of states: no verdict.
    #[error(
        "key {key}: the search passed its bound of {bound} states without a verdict (raise \
         Bounds::max_states, or check fewer overlapping operations at once)"
    )]
    TooLarge {
        /// The key.
        key: u32,
        /// The bound.
        bound: usize,
    },
}

/// How far a check may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// The most search states one key may explore (each takes some tens of bytes).
    pub max_states: usize,
    /// Whether a key that cannot be linearized is reported with a minimal failing set of its
    /// operations (else with none, which is faster).
    pub minimise: bool,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_states: 4_000_000,
            minimise: true,
        }
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
/// (in key order) that cannot, with a minimal set of its operations that cannot be ordered.
///
/// # Errors
/// [`LinearizeError::NotLinearizable`], or [`LinearizeError::TooLarge`] past the default bound.
pub fn check<V: Clone + Eq + Hash + std::fmt::Debug>(
    history: &[Operation<V>],
) -> Result<Checked, LinearizeError<V>> {
    check_within(history, Bounds::default())
}

/// [`check`] without naming the operations of a key that fails: the verdict alone.
///
/// # Errors
/// As [`check`], with no operations named.
pub fn verdict<V: Clone + Eq + Hash + std::fmt::Debug>(
    history: &[Operation<V>],
) -> Result<Checked, LinearizeError<V>> {
    check_within(
        history,
        Bounds {
            minimise: false,
            ..Bounds::default()
        },
    )
}

/// [`check`] within `bounds`.
///
/// # Errors
/// As [`check`].
pub fn check_within<V: Clone + Eq + Hash + std::fmt::Debug>(
    history: &[Operation<V>],
    bounds: Bounds,
) -> Result<Checked, LinearizeError<V>> {
    let mut keys: Vec<u32> = history.iter().map(|op| op.key).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut checked = Checked {
        operations: history.len(),
        keys: keys.len(),
        explored: 0,
    };
    let bound = bounds.max_states;
    for key in keys {
        let mut ops: Vec<&Operation<V>> = history.iter().filter(|op| op.key == key).collect();
        ops.sort_by_key(|op| op.invoked);
        let (furthest, last) = match search::search(&ops, bound) {
            Searched::Linearizable(explored) => {
                checked.explored += explored;
                continue;
            }
            Searched::TooLarge(_) => return Err(LinearizeError::TooLarge { key, bound }),
            Searched::Stuck { furthest, last } => (furthest, last),
        };
        let operations = if bounds.minimise {
            let window = minimise::failing_window(&ops, furthest, last, bound);
            minimise::minimal(window, bound)
                .into_iter()
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        return Err(LinearizeError::NotLinearizable(NotLinearizable {
            key,
            operations,
        }));
    }
    Ok(checked)
}

#[cfg(test)]
mod tests;
