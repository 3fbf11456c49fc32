//! The lock's current lease, published for readers that do not take the mutex: a try that finds
//! the lease held and unexpired is refused by reading these words alone, so refusals never write
//! the lock's cache line.
//!
//! A sequence lock: the writer (always under the lock's mutex, so there is one at a time) makes
//! the sequence odd, stores the token and the expiry, and makes it even again; a reader that sees
//! the same even sequence before and after its two loads has read one published lease, never a
//! torn mix of two. Only a grant changes the token, so only a grant needs the sequence: an extend
//! moves the expiry of the same lease and a release zeroes it, each in one store, and a reader
//! that sees either has read a true pair (the lease before or after, or none).

use crate::protocol::{Lease, Token};
use crate::sync::atomic::{fence, AtomicU64, Ordering};

/// What a reader without the mutex may know of the lease: its token and its expiry. On a cache
/// line of its own, so that the tries reading it do not share a line with the mutex the holder
/// writes.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Published {
    /// Odd while a write is under way; each write adds two.
    seq: AtomicU64,
    /// The current lease's token (0 before the first grant).
    token: AtomicU64,
    /// The current lease's expiry on the lock's clock; 0 when no lease is held.
    expires_at: AtomicU64,
}

impl Published {
    /// Publishes a newly granted lease. Call only under the lock's mutex.
    pub(super) fn grant<O>(&self, lease: &Lease<O>) {
        let (token, expires_at) = (lease.token.get(), lease.expires_at);
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        // Orders the odd sequence before the data: a reader that sees new data sees it odd.
        fence(Ordering::Release);
        self.token.store(token, Ordering::Relaxed);
        self.expires_at.store(expires_at, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// Publishes the new expiry of the lease last granted. Call only under the lock's mutex.
    pub(super) fn extend(&self, expires_at: u64) {
        self.expires_at.store(expires_at, Ordering::Release);
    }

    /// Publishes that no lease is held. Call only under the lock's mutex.
    pub(super) fn release(&self) {
        self.expires_at.store(0, Ordering::Release);
    }

    /// The published lease, if one is held and no write was under way while it was read. `None`
    /// says nothing: the lease may be free, expired, or being changed; ask under the mutex.
    #[inline]
    pub(super) fn read(&self) -> Option<Lease<()>> {
        let before = self.seq.load(Ordering::Acquire);
        if before % 2 == 1 {
            return None;
        }
        let token = self.token.load(Ordering::Relaxed);
        let expires_at = self.expires_at.load(Ordering::Relaxed);
        if expires_at == 0 {
            return None;
        }
        // Orders the data loads before the second sequence load.
        fence(Ordering::Acquire);
        if self.seq.load(Ordering::Relaxed) != before {
            return None;
        }
        Some(Lease {
            owner: (),
            token: Token::new(token),
            expires_at,
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn lease(token: u64, expires_at: u64) -> Lease<&'static str> {
        Lease {
            owner: "a",
            token: Token::new(token),
            expires_at,
        }
    }

    #[test]
    fn a_reader_sees_the_last_published_lease_or_nothing_when_free() {
        let p = Published::default();
        assert_eq!(p.read(), None, "nothing published yet");
        p.grant(&lease(3, 40));
        let read = p.read().expect("a published lease");
        assert_eq!((read.token, read.expires_at), (Token::new(3), 40));
        p.extend(90);
        assert_eq!(
            p.read().map(|l| (l.token, l.expires_at)),
            Some((Token::new(3), 90))
        );
        p.release();
        assert_eq!(p.read(), None, "released");
        p.grant(&lease(4, 50));
        assert_eq!(p.read().map(|l| l.token), Some(Token::new(4)));
        assert_eq!(p.seq.load(Ordering::Relaxed), 4, "two per grant");
    }

    #[test]
    fn a_reader_during_a_write_is_told_nothing() {
        let p = Published::default();
        p.grant(&lease(1, 10));
        // A writer half-way: the sequence is odd. (A sequence that moves between the reader's
        // two loads is loom's to show: tests/loom_lease.rs.)
        p.seq.store(3, Ordering::Relaxed);
        assert_eq!(p.read(), None, "odd sequence");
        p.seq.store(4, Ordering::Relaxed);
        assert_eq!(p.read().map(|l| l.token), Some(Token::new(1)));
    }
}
