//! A term register: the linearizable compare-and-set cell a consensus store provides (etcd's
//! transactions, ZooKeeper's versioned writes), holding the current term, its leader and the
//! leader's lease deadline.

use super::lease::LeaseError;
use super::token::{Token, TokenIssuer};

/// What a campaign achieved.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Campaign<O> {
    /// The candidate leads `term` until `expires_at`.
    Won {
        /// The new term: larger than every earlier term; the leader's fencing token.
        term: Token,
        /// When the leadership lease expires.
        expires_at: u64,
    },
    /// Someone campaigned since the candidate read the register: its view is stale.
    Stale {
        /// The term the register holds now.
        current: Option<Token>,
    },
    /// A live leader holds the register.
    Busy {
        /// The leader.
        leader: O,
        /// When its lease expires.
        expires_at: u64,
    },
}

/// One election's register. A candidate reads it, then campaigns with the term it read; the
/// campaign wins only if no one campaigned in between (compare-and-set) and no leader's lease is
/// live, and then takes the next term.
///
/// ```
/// use fencecheck::protocol::{Campaign, TermRegister};
///
/// let mut reg = TermRegister::new();
/// let seen = reg.term();
/// let Ok(Campaign::Won { term, .. }) = reg.campaign("a", seen, 0, 10) else { panic!() };
/// // b read the register before a won: its campaign is stale.
/// assert!(matches!(reg.campaign("b", seen, 20, 10), Ok(Campaign::Stale { .. })));
/// let Ok(Campaign::Won { term: next, .. }) = reg.campaign("b", reg.term(), 20, 10) else { panic!() };
/// assert!(next > term);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TermRegister<O> {
    terms: TokenIssuer,
    leader: Option<(O, u64)>,
}

impl<O> Default for TermRegister<O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<O> TermRegister<O> {
    /// An empty register: no term yet.
    pub const fn new() -> Self {
        TermRegister {
            terms: TokenIssuer::new(),
            leader: None,
        }
    }

    /// The current term, if any leader was ever elected.
    pub fn term(&self) -> Option<Token> {
        self.terms.last_issued()
    }

    /// The current leader and its deadline, if its lease is live at `now`.
    pub fn leader(&self, now: u64) -> Option<(&O, u64)> {
        self.leader
            .as_ref()
            .filter(|(_, deadline)| now < *deadline)
            .map(|(o, d)| (o, *d))
    }

    /// Moves the register's time origin forward by `elapsed` (see `LeaseTable::rebase`).
    pub fn rebase(&mut self, elapsed: u64) {
        if let Some((_, deadline)) = &mut self.leader {
            *deadline = deadline.saturating_sub(elapsed);
        }
    }
}

impl<O: Clone> TermRegister<O> {
    /// Campaigns for leadership having read term `observed`.
    ///
    /// # Errors
    /// [`LeaseError::ZeroTtl`], [`LeaseError::DeadlineOverflow`], or
    /// [`LeaseError::TokenExhausted`] when no larger term exists; nothing changes then.
    pub fn campaign(
        &mut self,
        candidate: O,
        observed: Option<Token>,
        now: u64,
        ttl: u64,
    ) -> Result<Campaign<O>, LeaseError> {
        if ttl == 0 {
            return Err(LeaseError::ZeroTtl);
        }
        let expires_at = now
            .checked_add(ttl)
            .ok_or(LeaseError::DeadlineOverflow { now, ttl })?;
        if observed != self.term() {
            return Ok(Campaign::Stale {
                current: self.term(),
            });
        }
        if let Some((leader, deadline)) = self.leader(now) {
            return Ok(Campaign::Busy {
                leader: leader.clone(),
                expires_at: deadline,
            });
        }
        let term = self.terms.issue()?;
        self.leader = Some((candidate, expires_at));
        Ok(Campaign::Won { term, expires_at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn campaign_is_compare_and_set_and_terms_increase() {
        let mut r = TermRegister::new();
        assert_eq!(r.term(), None);
        assert_eq!(
            r.campaign('a', None, 0, 5),
            Ok(Campaign::Won {
                term: Token::FIRST,
                expires_at: 5
            })
        );
        assert_eq!(r.leader(4), Some((&'a', 5)));
        assert_eq!(r.leader(5), None);
        let before = r.clone();
        assert_eq!(
            r.campaign('b', Some(Token::FIRST), 3, 5),
            Ok(Campaign::Busy {
                leader: 'a',
                expires_at: 5
            })
        );
        assert_eq!(
            r.campaign('b', None, 9, 5),
            Ok(Campaign::Stale {
                current: Some(Token::FIRST)
            })
        );
        assert_eq!(r, before);
        assert_eq!(
            r.campaign('b', Some(Token::FIRST), 5, 5),
            Ok(Campaign::Won {
                term: Token::new(2),
                expires_at: 10
            })
        );
        r.rebase(8);
        assert_eq!(r.leader(0), Some((&'b', 2)));
    }

    #[test]
    fn bad_ttls_are_refused() {
        let mut r = TermRegister::<char>::new();
        assert_eq!(r.campaign('a', None, 0, 0), Err(LeaseError::ZeroTtl));
        assert_eq!(
            r.campaign('a', None, u64::MAX, 1),
            Err(LeaseError::DeadlineOverflow {
                now: u64::MAX,
                ttl: 1
            })
        );
        assert_eq!(r.term(), None);
    }
}
