//! The queue recipe etcd and ZooKeeper share, written once.
//!
//! Both lock the same way: each contender adds an entry to a line kept by the server (an etcd key
//! under `NAME/`, a ZooKeeper sequential node under the lock path), ordered by a counter the
//! server assigns (create revision, sequence number); the **lowest entry holds the lock** and its
//! counter is the fencing token; a waiter watches the entry just below its own and checks again
//! when it goes. An entry's value is its owner's name, then (once published) a newline and the
//! published value. What this module holds is the part that does not depend on the server: where
//! an entry stands in the line, the value format, and the leases this process granted.

use super::Grant;
use crate::protocol::Token;
use crate::sync::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Where our entry stands in a line ordered lowest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Position<'a, K> {
    /// Ours is the lowest entry: we hold the lock.
    First,
    /// Someone is ahead: wait for `ahead` (the entry just below ours) to go.
    Behind {
        /// The entry just below ours.
        ahead: &'a K,
    },
    /// Our entry is not in the line any more (its session or lease ended).
    Gone,
}

/// Where `ours` stands in `line` (lowest first).
pub(crate) fn position<'a, K, Q>(line: &'a [K], ours: &Q) -> Position<'a, K>
where
    K: PartialEq<Q>,
    Q: ?Sized,
{
    match line.iter().position(|k| k == ours) {
        Some(0) => Position::First,
        Some(at) => Position::Behind {
            ahead: &line[at - 1],
        },
        None => Position::Gone,
    }
}

/// An entry's value: the owner's name, then a newline and what the holder published.
pub(crate) fn entry_value(owner: &str, published: Option<&str>) -> String {
    match published {
        Some(p) => format!("{owner}\n{p}"),
        None => owner.to_string(),
    }
}

/// An entry's value split into (owner, published value).
pub(crate) fn split_value(value: &str) -> (&str, Option<&str>) {
    match value.split_once('\n') {
        Some((owner, published)) => (owner, Some(published)),
        None => (value, None),
    }
}

/// Who holds an entry: the owner its value names, or the entry's own name when the value names
/// none (a lock taken by `etcdctl lock` or Curator's `InterProcessMutex`).
pub(crate) fn owner_of(entry: &str, value: &str) -> String {
    match split_value(value).0 {
        "" => entry.to_string(),
        owner => owner.to_string(),
    }
}

/// The leases this lock instance granted, by token: who holds each and the backend's handle on
/// it (the etcd lease and key, the ZooKeeper node and session). A lease granted by another
/// process is not here; the backend finds it on the server.
pub(crate) struct Ledger<H> {
    held: Mutex<HashMap<Token, (String, H)>>,
}

impl<H: Clone> Ledger<H> {
    pub(crate) fn new() -> Self {
        Ledger {
            held: Mutex::new(HashMap::new()),
        }
    }

    /// Records that `owner` holds the lock under `token` and returns the grant: a lease of `ttl`
    /// counted from `sent_at`, the send time of the request that made or renewed it.
    pub(crate) fn grant(
        &self,
        owner: &str,
        token: Token,
        handle: H,
        ttl: Duration,
        sent_at: Instant,
    ) -> Grant {
        self.held.lock().insert(token, (owner.to_string(), handle));
        Grant {
            token,
            owner: owner.to_string(),
            ttl,
            sent_at,
        }
    }

    /// What this instance knows of `token`: `None` when it did not grant it, `Some(None)` when it
    /// granted it to another owner, `Some(Some(handle))` when `owner` holds it.
    pub(crate) fn lookup(&self, owner: &str, token: Token) -> Option<Option<H>> {
        self.held
            .lock()
            .get(&token)
            .map(|(o, h)| (o == owner).then(|| h.clone()))
    }

    /// Whether this instance granted `token` to `owner` (asking again while holding is busy:
    /// these locks are not reentrant).
    pub(crate) fn holds(&self, owner: &str, token: Token) -> bool {
        matches!(self.lookup(owner, token), Some(Some(_)))
    }

    /// Forgets `token` (released, or found lost).
    pub(crate) fn forget(&self, token: Token) {
        self.held.lock().remove(&token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_entry_holds_and_a_waiter_watches_the_one_below() {
        let line = ["a", "b", "c"];
        assert_eq!(position(&line, &"a"), Position::First);
        assert_eq!(position(&line, &"b"), Position::Behind { ahead: &"a" });
        assert_eq!(position(&line, &"c"), Position::Behind { ahead: &"b" });
        assert_eq!(position(&line, &"x"), Position::Gone);
        assert_eq!(position(&[] as &[&str], &"a"), Position::Gone);
        let owned = vec!["n-1".to_string(), "n-2".to_string()];
        assert_eq!(position(&owned, "n-1"), Position::First);
    }

    #[test]
    fn values_name_the_owner_then_what_it_published() {
        assert_eq!(entry_value("w", None), "w");
        assert_eq!(entry_value("w", Some("10.0.0.1")), "w\n10.0.0.1");
        assert_eq!(split_value("w\n10.0.0.1"), ("w", Some("10.0.0.1")));
        assert_eq!(split_value("w"), ("w", None));
        assert_eq!(owner_of("node", "worker-1\nv"), "worker-1");
        assert_eq!(owner_of("node", ""), "node");
    }

    #[test]
    fn the_ledger_answers_only_for_the_owner_it_granted_to() {
        let ledger = Ledger::new();
        let t = Token::new(7);
        assert_eq!(ledger.lookup("a", t), None);
        let g = ledger.grant("a", t, "key-7", Duration::from_secs(1), Instant::now());
        assert_eq!((g.token, g.owner.as_str()), (t, "a"));
        assert_eq!(ledger.lookup("a", t), Some(Some("key-7")));
        assert_eq!(ledger.lookup("b", t), Some(None));
        assert!(ledger.holds("a", t) && !ledger.holds("b", t));
        ledger.forget(t);
        assert_eq!(ledger.lookup("a", t), None);
    }
}
