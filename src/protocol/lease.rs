//! The lease table: one lock's state and the rules for acquiring, extending and releasing it.

use super::token::{Token, TokenExhausted, TokenIssuer};

/// A granted lease: who holds it, the fencing token it carries, and when it stops being valid.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Lease<O> {
    /// The holder named in the acquire call.
    pub owner: O,
    /// The fencing token of this grant, larger than every earlier grant's.
    pub token: Token,
    /// The lease is free once `now >= expires_at`.
    pub expires_at: u64,
}

impl<O> Lease<O> {
    /// Whether the lease is still valid at `now`.
    pub fn is_live(&self, now: u64) -> bool {
        now < self.expires_at
    }
}

/// The answer to [`LeaseTable::acquire`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Acquire<O> {
    /// The lease is the caller's.
    Granted(Lease<O>),
    /// Someone holds a live lease; it frees at `expires_at` unless extended or released first.
    Busy {
        /// The current holder.
        holder: O,
        /// The current lease's fencing token.
        token: Token,
        /// When the current lease expires.
        expires_at: u64,
    },
}

/// Why a lease operation was refused. A refused operation changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// A lease must last at least one unit of time.
    #[error("ttl must be greater than zero")]
    ZeroTtl,
    /// `now + ttl` does not fit in a u64.
    #[error("lease deadline overflows: now {now} + ttl {ttl} exceeds u64::MAX")]
    DeadlineOverflow {
        /// The time given.
        now: u64,
        /// The ttl given.
        ttl: u64,
    },
    /// No more tokens can be issued.
    #[error(transparent)]
    TokenExhausted(#[from] TokenExhausted),
    /// The caller does not hold the current lease: its token is stale, or the owner differs.
    #[error("token {token} does not hold the lease (current lease: {})", fmt_current(*.current))]
    NotHolder {
        /// The token the caller presented.
        token: Token,
        /// The token of the lease the table holds now, if any.
        current: Option<Token>,
    },
    /// The caller's lease has already expired, so it can no longer be extended.
    #[error("lease with token {token} expired at {expired_at}")]
    Expired {
        /// The token the caller presented.
        token: Token,
        /// When it expired.
        expired_at: u64,
    },
}

fn fmt_current(current: Option<Token>) -> String {
    current.map_or_else(|| "none".to_string(), |t| format!("token {t}"))
}

/// One lock's state: the lease it last granted (if not released) and its token issuer.
///
/// ```
/// use fencecheck::protocol::{Acquire, LeaseTable};
///
/// let mut table = LeaseTable::new();
/// let Ok(Acquire::Granted(a)) = table.acquire("worker-A", 0, 30) else { panic!() };
/// assert!(matches!(table.acquire("worker-B", 10, 30), Ok(Acquire::Busy { .. })));
/// // worker-A is paused past its ttl: the lease is free again, with a larger token.
/// let Ok(Acquire::Granted(b)) = table.acquire("worker-B", 30, 30) else { panic!() };
/// assert!(b.token > a.token);
/// // worker-A wakes up: its stale token can neither extend nor release worker-B's lease.
/// assert!(table.extend(&"worker-A", a.token, 31, 30).is_err());
/// assert!(table.release(&"worker-A", a.token).is_err());
/// ```
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct LeaseTable<O> {
    issuer: TokenIssuer,
    lease: Option<Lease<O>>,
}

impl<O> Default for LeaseTable<O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<O> LeaseTable<O> {
    /// A free lock whose first grant carries token 1.
    pub const fn new() -> Self {
        LeaseTable {
            issuer: TokenIssuer::new(),
            lease: None,
        }
    }

    /// A free lock whose tokens continue after `last` (a persisted counter).
    pub const fn resume_after(last: Token) -> Self {
        LeaseTable {
            issuer: TokenIssuer::resume_after(last),
            lease: None,
        }
    }

    /// The live lease at `now`, if any.
    pub fn holder(&self, now: u64) -> Option<&Lease<O>> {
        self.lease.as_ref().filter(|l| l.is_live(now))
    }

    /// The last lease granted and not released, live or expired.
    pub fn current(&self) -> Option<&Lease<O>> {
        self.lease.as_ref()
    }

    /// The token of the latest grant, if any.
    pub fn last_token(&self) -> Option<Token> {
        self.issuer.last_issued()
    }

    /// Moves the table's time origin forward by `elapsed`: a deadline `d` becomes
    /// `d - elapsed` (or 0), so later calls measure `now` from the new origin.
    ///
    /// A monotonic clock starts again with its process, so a table restored on a new clock is
    /// rebased; the models rebase at every expiry so that logical time stays bounded.
    pub fn rebase(&mut self, elapsed: u64) {
        if let Some(lease) = &mut self.lease {
            lease.expires_at = lease.expires_at.saturating_sub(elapsed);
        }
    }

    /// The same table with each owner renamed by `rename` (models use it to permute client ids
    /// for symmetry reduction).
    pub fn map_owner<P>(&self, rename: impl FnOnce(&O) -> P) -> LeaseTable<P> {
        LeaseTable {
            issuer: self.issuer.clone(),
            lease: self.lease.as_ref().map(|l| Lease {
                owner: rename(&l.owner),
                token: l.token,
                expires_at: l.expires_at,
            }),
        }
    }
}

impl<O: Clone + Eq> LeaseTable<O> {
    /// Grants the lease to `owner` for `ttl` from `now` if no live lease exists; otherwise
    /// reports the holder. A grant always carries a token larger than every earlier grant's.
    ///
    /// The holder of a live lease that asks again is told it is busy (the lock is not
    /// reentrant); it should [`extend`](Self::extend) instead.
    pub fn acquire(&mut self, owner: O, now: u64, ttl: u64) -> Result<Acquire<O>, LeaseError> {
        let expires_at = deadline(now, ttl)?;
        if let Some(live) = self.holder(now) {
            return Ok(Acquire::Busy {
                holder: live.owner.clone(),
                token: live.token,
                expires_at: live.expires_at,
            });
        }
        let token = self.issuer.issue()?;
        let lease = Lease {
            owner,
            token,
            expires_at,
        };
        self.lease = Some(lease.clone());
        Ok(Acquire::Granted(lease))
    }

    /// Moves the holder's deadline to `now + ttl`. Only the current, unexpired lease with this
    /// owner and token can be extended.
    pub fn extend(
        &mut self,
        owner: &O,
        token: Token,
        now: u64,
        ttl: u64,
    ) -> Result<Lease<O>, LeaseError> {
        let expires_at = deadline(now, ttl)?;
        let lease = self.held_by(owner, token)?;
        if !lease.is_live(now) {
            return Err(LeaseError::Expired {
                token,
                expired_at: lease.expires_at,
            });
        }
        lease.expires_at = expires_at;
        Ok(lease.clone())
    }

    /// Frees the lease. Only the current lease's owner and token can release it; releasing a
    /// lease that expired but was not granted again is allowed and frees nothing new.
    pub fn release(&mut self, owner: &O, token: Token) -> Result<Lease<O>, LeaseError> {
        self.held_by(owner, token)?;
        Ok(self.lease.take().expect("held_by found a lease"))
    }

    /// Frees whatever lease is live at `now`, whoever holds it: the release that names only the
    /// lock (Redis `DEL key`, deleting an etcd key or a ZooKeeper node by its path). It compares
    /// nothing, so a holder whose lease expired frees its successor's. Returns the lease freed.
    pub fn delete(&mut self, now: u64) -> Option<Lease<O>> {
        if !self.lease.as_ref()?.is_live(now) {
            return None;
        }
        self.lease.take()
    }

    fn held_by(&mut self, owner: &O, token: Token) -> Result<&mut Lease<O>, LeaseError> {
        let current = self.lease.as_ref().map(|l| l.token);
        match &mut self.lease {
            Some(lease) if lease.token == token && lease.owner == *owner => Ok(lease),
            _ => Err(LeaseError::NotHolder { token, current }),
        }
    }
}

#[inline]
fn deadline(now: u64, ttl: u64) -> Result<u64, LeaseError> {
    if ttl == 0 {
        return Err(LeaseError::ZeroTtl);
    }
    now.checked_add(ttl)
        .ok_or(LeaseError::DeadlineOverflow { now, ttl })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted<O: std::fmt::Debug>(a: Result<Acquire<O>, LeaseError>) -> Lease<O> {
        match a {
            Ok(Acquire::Granted(l)) => l,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[test]
    fn grant_then_busy_until_expiry() {
        let mut t = LeaseTable::new();
        let a = granted(t.acquire('a', 0, 10));
        assert_eq!(
            a,
            Lease {
                owner: 'a',
                token: Token::FIRST,
                expires_at: 10
            }
        );
        assert_eq!(
            t.acquire('b', 9, 10),
            Ok(Acquire::Busy {
                holder: 'a',
                token: Token::FIRST,
                expires_at: 10
            })
        );
        // expires_at <= now is free.
        let b = granted(t.acquire('b', 10, 10));
        assert_eq!(b.token, Token::new(2));
        assert_eq!(t.holder(19), Some(&b));
        assert_eq!(t.holder(20), None);
        assert_eq!(t.current(), Some(&b));
        assert_eq!(t.last_token(), Some(Token::new(2)));
    }

    #[test]
    fn holder_asking_again_is_busy() {
        let mut t = LeaseTable::new();
        granted(t.acquire('a', 0, 10));
        assert!(matches!(
            t.acquire('a', 1, 10),
            Ok(Acquire::Busy { holder: 'a', .. })
        ));
        assert_eq!(t.last_token(), Some(Token::FIRST));
    }

    #[test]
    fn zero_ttl_is_refused_and_changes_nothing() {
        let mut t = LeaseTable::<char>::new();
        let before = t.clone();
        assert_eq!(t.acquire('a', 0, 0), Err(LeaseError::ZeroTtl));
        assert_eq!(t, before);
        let a = granted(t.acquire('a', 0, 5));
        let before = t.clone();
        assert_eq!(t.extend(&'a', a.token, 1, 0), Err(LeaseError::ZeroTtl));
        assert_eq!(t, before);
    }

    #[test]
    fn deadline_overflow_is_refused() {
        let mut t = LeaseTable::<char>::new();
        assert_eq!(
            t.acquire('a', u64::MAX, 1),
            Err(LeaseError::DeadlineOverflow {
                now: u64::MAX,
                ttl: 1
            })
        );
        assert_eq!(t.last_token(), None);
    }

    #[test]
    fn token_exhaustion_is_a_typed_error() {
        let mut t = LeaseTable::resume_after(Token::new(u64::MAX));
        let err = t.acquire('a', 0, 1).unwrap_err();
        assert!(matches!(err, LeaseError::TokenExhausted(_)));
        assert_eq!(t.current(), None);
    }

    #[test]
    fn extend_by_holder_moves_deadline() {
        let mut t = LeaseTable::new();
        let a = granted(t.acquire('a', 0, 10));
        let e = t.extend(&'a', a.token, 5, 10).unwrap();
        assert_eq!(e.expires_at, 15);
        assert_eq!(e.token, a.token);
        assert!(matches!(t.acquire('b', 12, 10), Ok(Acquire::Busy { .. })));
    }

    #[test]
    fn extend_after_expiry_is_refused() {
        let mut t = LeaseTable::new();
        let a = granted(t.acquire('a', 0, 10));
        let before = t.clone();
        assert_eq!(
            t.extend(&'a', a.token, 10, 10),
            Err(LeaseError::Expired {
                token: a.token,
                expired_at: 10
            })
        );
        assert_eq!(t, before);
    }

    #[test]
    fn stale_token_cannot_extend_or_release() {
        let mut t = LeaseTable::new();
        let a = granted(t.acquire('a', 0, 10));
        let b = granted(t.acquire('b', 10, 10));
        let before = t.clone();
        let stale = LeaseError::NotHolder {
            token: a.token,
            current: Some(b.token),
        };
        assert_eq!(t.extend(&'a', a.token, 11, 10), Err(stale));
        assert_eq!(t.release(&'a', a.token), Err(stale));
        assert_eq!(t, before);
        assert_eq!(
            stale.to_string(),
            "token 1 does not hold the lease (current lease: token 2)"
        );
        let none = LeaseError::NotHolder {
            token: a.token,
            current: None,
        };
        assert_eq!(
            none.to_string(),
            "token 1 does not hold the lease (current lease: none)"
        );
    }

    #[test]
    fn non_holder_cannot_release_even_with_the_right_token() {
        let mut t = LeaseTable::new();
        let a = granted(t.acquire('a', 0, 10));
        let before = t.clone();
        assert!(matches!(
            t.release(&'z', a.token),
            Err(LeaseError::NotHolder { .. })
        ));
        assert!(matches!(
            t.extend(&'z', a.token, 1, 10),
            Err(LeaseError::NotHolder { .. })
        ));
        assert_eq!(t, before);
    }

    #[test]
    fn release_frees_and_next_grant_has_larger_token() {
        let mut t = LeaseTable::new();
        let a = granted(t.acquire('a', 0, 10));
        assert_eq!(t.release(&'a', a.token), Ok(a.clone()));
        assert_eq!(t.current(), None);
        assert_eq!(
            t.release(&'a', a.token),
            Err(LeaseError::NotHolder {
                token: a.token,
                current: None
            })
        );
        let b = granted(t.acquire('b', 1, 10));
        assert!(b.token > a.token);
    }

    #[test]
    fn rebase_moves_the_origin_and_keeps_liveness() {
        let mut t = LeaseTable::new();
        let a = granted(t.acquire('a', 100, 10));
        t.rebase(105);
        assert_eq!(t.holder(0).map(|l| l.expires_at), Some(5));
        assert_eq!(t.holder(5), None);
        t.rebase(1_000);
        assert_eq!(t.current().map(|l| l.expires_at), Some(0));
        assert_eq!(t.current().map(|l| l.token), Some(a.token));
        // Rebasing an empty table is a no-op.
        let mut empty = LeaseTable::<char>::new();
        empty.rebase(7);
        assert_eq!(empty, LeaseTable::new());
    }

    #[test]
    fn map_owner_renames_and_keeps_token_and_deadline() {
        let mut t = LeaseTable::new();
        granted(t.acquire('a', 3, 10));
        let renamed = t.map_owner(|o| (*o as u8) + 1);
        let lease = renamed.current().unwrap();
        assert_eq!(
            (lease.owner, lease.token, lease.expires_at),
            (b'a' + 1, Token::FIRST, 13)
        );
        assert_eq!(renamed.last_token(), Some(Token::FIRST));
        assert_eq!(
            LeaseTable::<char>::new().map_owner(|o| *o),
            LeaseTable::new()
        );
    }

    #[test]
    fn release_of_expired_but_not_regranted_lease_is_allowed() {
        let mut t = LeaseTable::new();
        let a = granted(t.acquire('a', 0, 10));
        assert!(t.release(&'a', a.token).is_ok());
    }

    #[test]
    fn delete_frees_whoever_holds_a_live_lease_and_nothing_else() {
        let mut t = LeaseTable::new();
        assert!(t.delete(0).is_none(), "nothing held");
        let a = granted(t.acquire('a', 0, 10));
        // An expired lease is gone already (Redis answers DEL with 0): nothing is deleted.
        assert!(t.delete(10).is_none());
        assert_eq!(t.current().map(|l| l.token), Some(a.token));
        let b = granted(t.acquire('b', 10, 10));
        // The stale holder's delete frees the successor's live lease: it compares nothing.
        assert_eq!(
            t.delete(12).map(|l| (l.owner, l.token)),
            Some(('b', b.token))
        );
        assert!(t.current().is_none());
        assert!(matches!(t.acquire('c', 12, 10), Ok(Acquire::Granted(_))));
    }
}
