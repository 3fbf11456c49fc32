//! The operations named when a key's history cannot be linearized.
//!
//! What is named is *minimal*: a set of the key's operations that cannot be ordered, from which no
//! single operation can be removed without making the rest orderable, except a write that a
//! remaining answer names (a read's value, a stale answer's highest token). Those writes stay:
//! deleting one would make a new failure (a read of a value nobody wrote), not shrink the old one.
//! Every write that could be the one named stays, so the set is closed under sources, and a
//! source-closed subset of a linearizable history is linearizable: the named set always contains
//! an operation whose answer no order explains (a planted fault is always named). It is not always
//! the smallest such set.
//!
//! The search is cut to what the failure touches first: operations after the last one the search
//! ever offered take no part, and a window of operations around where it got furthest (with the
//! writes their answers name) is tried before the whole, widening until it fails. Deletions then
//! run inside it: halves, quarters, down to single operations.

use super::search::{search, Searched};
use super::{Answer, Call, Operation};
use crate::protocol::Token;
use std::hash::Hash;

/// Whether `write` could be the write an answer naming `token` (and `value`) saw: a write with
/// that token (and value) that was not itself refused.
fn could_be_source<V: PartialEq>(write: &Operation<V>, token: Token, value: Option<&V>) -> bool {
    let refused = matches!(write.completed, Some((_, Answer::Stale { .. })));
    match &write.call {
        Call::Write { token: t, value: v } => {
            !refused && *t == token && value.is_none_or(|x| x == v)
        }
        Call::Read => false,
    }
}

/// What `op`'s answer names: the token (and value) of the write it saw.
fn named<V>(op: &Operation<V>) -> Option<(Token, Option<&V>)> {
    match &op.completed {
        Some((_, Answer::Read(Some((t, v))))) => Some((*t, Some(v))),
        Some((_, Answer::Stale { highest })) => Some((*highest, None)),
        _ => None,
    }
}

/// Whether an operation of `ops` outside `chunk` names a write inside it (which must stay).
fn names_into<V: PartialEq>(ops: &[&Operation<V>], chunk: std::ops::Range<usize>) -> bool {
    ops.iter().enumerate().any(|(j, o)| {
        !chunk.contains(&j)
            && named(o).is_some_and(|(token, value)| {
                ops[chunk.clone()]
                    .iter()
                    .any(|w| could_be_source(w, token, value))
            })
    })
}

/// `window` with every write of `all` that an answer in it could have seen.
fn with_sources<'a, V: PartialEq>(
    all: &[&'a Operation<V>],
    window: &[&'a Operation<V>],
) -> Vec<&'a Operation<V>> {
    let mut set: Vec<&Operation<V>> = window.to_vec();
    for op in window {
        if let Some((token, value)) = named(op) {
            for w in all {
                if could_be_source(w, token, value) && !set.iter().any(|o| std::ptr::eq(*o, *w)) {
                    set.push(w);
                }
            }
        }
    }
    set.sort_by_key(|o| o.invoked);
    set
}

fn fails<V: Clone + Eq + Hash>(ops: &[&Operation<V>], max_states: usize) -> bool {
    matches!(search(ops, max_states), Searched::Stuck { .. })
}

/// The failing part of `ops` (one key's operations in invocation order, which cannot be
/// linearized: the search got `furthest` and offered nothing past `last`): the smallest window
/// around `furthest` that fails with its sources, doubling from 8 operations either side.
pub(super) fn failing_window<'a, V: Clone + Eq + Hash>(
    ops: &[&'a Operation<V>],
    furthest: usize,
    last: usize,
    max_states: usize,
) -> Vec<&'a Operation<V>> {
    let cut = &ops[..=last.min(ops.len() - 1)];
    let mut reach = 8;
    loop {
        let lo = furthest.saturating_sub(reach);
        let hi = (furthest + reach).min(cut.len() - 1);
        let window = with_sources(ops, &cut[lo..=hi]);
        if (lo == 0 && hi == cut.len() - 1) || fails(&window, max_states) {
            return window;
        }
        reach *= 2;
    }
}

/// Deletes operations from a failing `ops` while it keeps failing, never a write a remaining
/// answer names: what remains fails, and fails no more without any one of its deletable
/// operations.
pub(super) fn minimal<V: Clone + Eq + Hash>(
    mut ops: Vec<&Operation<V>>,
    max_states: usize,
) -> Vec<&Operation<V>> {
    let mut chunk = ops.len().div_ceil(2).max(1);
    loop {
        let before = ops.len();
        let mut at = 0;
        while at < ops.len() {
            let end = (at + chunk).min(ops.len());
            let keeps_sources = !names_into(&ops, at..end);
            let without: Vec<&Operation<V>> =
                ops[..at].iter().chain(&ops[end..]).copied().collect();
            if !without.is_empty() && keeps_sources && fails(&without, max_states) {
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
