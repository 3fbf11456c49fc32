//! The lean search's memory of where it has been: state fingerprints in sharded open-addressing
//! sets, each with the fingerprint of the state it was first reached from, so that a path to
//! any state can be rebuilt by replaying the model along the chain.

use parking_lot::Mutex;
use std::hash::Hash;

/// The parent recorded for an initial state.
pub(super) const ROOT: u64 = 0;

/// Fingerprints: 64-bit hashes of states under a fixed-key hasher, so that runs are repeatable.
/// Never zero (zero marks an empty slot and [`ROOT`]): the one hash zero is taken as one.
pub(super) fn fingerprint<T: Hash>(value: &T) -> u64 {
    ahash::RandomState::with_seeds(
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    )
    .hash_one(value)
    .max(1)
}

/// A set of fingerprints: open addressing with linear probing over a power-of-two array, zero
/// marking an empty slot. A lookup usually touches one cache line (a general hash table touches
/// its control bytes and then its slot); the set doubles when a value would fill it past five
/// eighths. With parents kept, a second array of the same size holds each fingerprint's parent
/// at the same index.
pub(super) struct FingerprintSet {
    slots: Vec<u64>,
    /// Empty when parents are not kept.
    parents: Vec<u64>,
    len: usize,
}

impl FingerprintSet {
    pub(super) const INITIAL: usize = 1 << 10;

    pub(super) fn new(keep_parents: bool) -> Self {
        FingerprintSet {
            slots: vec![0; Self::INITIAL],
            parents: if keep_parents {
                vec![0; Self::INITIAL]
            } else {
                Vec::new()
            },
            len: 0,
        }
    }

    /// The index of `fp`'s slot: where it is, or the empty slot where it would go.
    fn slot(&self, fp: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = fp as usize & mask;
        while self.slots[i] != fp && self.slots[i] != 0 {
            i = (i + 1) & mask;
        }
        i
    }

    /// Whether `fp` is new (and now recorded, reached from `parent`).
    pub(super) fn insert(&mut self, fp: u64, parent: u64) -> bool {
        let fp = fp.max(1);
        if (self.len + 1) * 8 > self.slots.len() * 5 {
            self.grow();
        }
        let i = self.slot(fp);
        if self.slots[i] == fp {
            return false;
        }
        self.slots[i] = fp;
        if !self.parents.is_empty() {
            self.parents[i] = parent;
        }
        self.len += 1;
        true
    }

    /// The fingerprint `fp` was first reached from ([`ROOT`] for an initial state), if `fp` is
    /// recorded and parents are kept.
    pub(super) fn parent(&self, fp: u64) -> Option<u64> {
        let i = self.slot(fp.max(1));
        (self.slots[i] != 0 && !self.parents.is_empty()).then(|| self.parents[i])
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn grow(&mut self) {
        let size = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![0; size]);
        let old_parents = if self.parents.is_empty() {
            Vec::new()
        } else {
            std::mem::replace(&mut self.parents, vec![0; size])
        };
        for (at, fp) in old.into_iter().enumerate().filter(|&(_, fp)| fp != 0) {
            let i = self.slot(fp);
            self.slots[i] = fp;
            if let Some(&parent) = old_parents.get(at) {
                self.parents[i] = parent;
            }
        }
    }
}

/// The seen fingerprints, in shards chosen by the fingerprint's top bits so that threads rarely
/// meet on one lock.
pub(super) struct Seen {
    shards: Vec<Mutex<FingerprintSet>>,
}

const SHARD_BITS: u32 = 6;

impl Seen {
    pub(super) fn new(keep_parents: bool) -> Self {
        Seen {
            shards: (0..1 << SHARD_BITS)
                .map(|_| Mutex::new(FingerprintSet::new(keep_parents)))
                .collect(),
        }
    }

    fn shard(&self, fp: u64) -> &Mutex<FingerprintSet> {
        &self.shards[(fp >> (64 - SHARD_BITS)) as usize]
    }

    /// Whether `fp` is new (and now recorded, reached from `parent`).
    pub(super) fn insert(&self, fp: u64, parent: u64) -> bool {
        self.shard(fp).lock().insert(fp, parent)
    }

    /// The chain of fingerprints from an initial state to `fp`, first to last; `None` when
    /// parents are not kept or the chain is broken.
    pub(super) fn chain(&self, fp: u64) -> Option<Vec<u64>> {
        let mut chain = vec![fp];
        loop {
            let last = *chain.last()?;
            let parent = self.shard(last).lock().parent(last)?;
            if parent == ROOT {
                chain.reverse();
                return Some(chain);
            }
            chain.push(parent);
        }
    }

    /// How many fingerprints are recorded.
    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_set_doubles_when_the_next_value_would_pass_five_eighths() {
        for keep_parents in [false, true] {
            let mut set = FingerprintSet::new(keep_parents);
            let initial = FingerprintSet::INITIAL;
            let fit = initial * 5 / 8;
            for v in 1..=fit as u64 {
                assert!(set.insert(v, ROOT));
            }
            assert_eq!(
                set.slots.len(),
                initial,
                "{fit} values fit in {initial} slots"
            );
            assert!(set.insert(fit as u64 + 1, ROOT));
            assert_eq!(set.slots.len(), 2 * initial, "one more doubles the table");
        }
    }

    #[test]
    fn the_fingerprint_set_keeps_every_distinct_value_and_its_parent_across_growth() {
        let mut set = FingerprintSet::new(true);
        // Values sharing their low bits collide in the table and must probe onwards.
        let values: Vec<u64> = (0..5_000u64).map(|i| i << 20 | 7).chain([0]).collect();
        for (&v, parent) in values.iter().zip(100..) {
            assert!(set.insert(v, parent), "{v} is new");
        }
        for (&v, parent) in values.iter().zip(100..) {
            assert!(!set.insert(v, 1), "{v} was seen");
            assert_eq!(set.parent(v), Some(parent), "{v} keeps its first parent");
        }
        assert!(!set.insert(1, ROOT), "zero is stored as one");
        assert_eq!(set.len, values.len());
        assert!(set.slots.len() * 5 >= set.len * 8);
        assert_eq!(set.parent(3), None, "never inserted");
    }

    #[test]
    fn without_parents_no_chain_is_known() {
        let set = Seen::new(false);
        assert!(set.insert(5, ROOT));
        assert_eq!(set.chain(5), None);
        let set = Seen::new(true);
        set.insert(5, ROOT);
        set.insert(6 << 60, 5);
        set.insert(7, 6 << 60);
        assert_eq!(set.chain(7), Some(vec![5, 6 << 60, 7]));
        assert_eq!(set.chain(8), None, "never inserted");
    }
}
