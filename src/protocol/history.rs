//! The `storage_in_lease_order` rule, checked over a history of grants and accepted writes.
//!
//! The models keep a [`LeaseOrder`] in their ghost state and feed it every write the storage
//! accepts; the backend tests record a [`History`] of real processes (which lease was granted when,
//! which writes the real storage accepted) and check it with [`storage_in_lease_order`]. Both call
//! the same [`LeaseOrder::accept`].
//!
//! Leases are ordered by when they were granted (their *epoch*), not by their token: a lock whose
//! tokens went backwards still grants its leases one after another, and that order is the one the
//! storage must respect.

use super::token::Token;
use std::fmt;

/// Incremental check of `storage_in_lease_order`: the storage never accepts a write from an older
/// lease after it accepted one from a newer lease.
///
/// ```
/// use fencecheck::protocol::LeaseOrder;
///
/// let mut order = LeaseOrder::new();
/// order.accept(1u8);
/// order.accept(2);
/// order.accept(2);
/// assert!(order.holds());
/// order.accept(1); // the paused holder of lease 1 writes after lease 2 did
/// assert!(!order.holds());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseOrder<E> {
    newest: Option<E>,
    violated: bool,
}

impl<E: Ord + Copy> LeaseOrder<E> {
    /// Nothing accepted yet.
    pub const fn new() -> Self {
        LeaseOrder {
            newest: None,
            violated: false,
        }
    }

    /// The storage accepted a write made under the lease granted at `epoch`. Returns `false` when
    /// this write breaks the rule (a newer lease's write was accepted before it).
    pub fn accept(&mut self, epoch: E) -> bool {
        if self.newest.is_some_and(|newest| epoch < newest) {
            self.violated = true;
            return false;
        }
        self.newest = Some(epoch);
        true
    }

    /// The newest lease whose write was accepted.
    pub fn newest(&self) -> Option<E> {
        self.newest
    }

    /// No accepted write so far broke the rule.
    pub fn holds(&self) -> bool {
        !self.violated
    }
}

/// Incremental check of `tokens_increase`: every grant carries a token larger than every earlier
/// grant's. The models keep one in their ghost state; recorded runs and the backend tests feed it
/// the tokens their clients were granted, in grant order.
///
/// ```
/// use fencecheck::protocol::TokenOrder;
///
/// let mut tokens = TokenOrder::new();
/// assert!(tokens.grant(1u64));
/// assert!(tokens.grant(5));
/// assert!(!tokens.grant(1)); // the counter was lost: a token went backwards
/// assert!(!tokens.holds());
/// assert_eq!(tokens.last(), Some(1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenOrder<T> {
    last: Option<T>,
    violated: bool,
}

impl<T> Default for TokenOrder<T> {
    fn default() -> Self {
        TokenOrder {
            last: None,
            violated: false,
        }
    }
}

impl<T: Ord + Copy> TokenOrder<T> {
    /// No grant yet.
    pub const fn new() -> Self {
        TokenOrder {
            last: None,
            violated: false,
        }
    }

    /// A lease was granted with `token`. Returns `false` when the token is not larger than the
    /// previous grant's.
    pub fn grant(&mut self, token: T) -> bool {
        let increasing = self.last.is_none_or(|last| token > last);
        self.violated |= !increasing;
        self.last = Some(token);
        increasing
    }

    /// The latest grant's token.
    pub fn last(&self) -> Option<T> {
        self.last
    }

    /// Every grant so far carried a larger token than the one before.
    pub fn holds(&self) -> bool {
        !self.violated
    }
}

/// One event of a recorded run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistoryEvent {
    /// `who` was granted a lease carrying `token`.
    Granted {
        /// The process or client that acquired.
        who: String,
        /// The fencing token of the grant.
        token: Token,
    },
    /// The storage accepted a write `who` made under its latest grant.
    Accepted {
        /// The writer.
        who: String,
    },
    /// The storage rejected a write `who` made under its latest grant.
    Rejected {
        /// The writer.
        who: String,
    },
}

/// A recorded run: grants and storage decisions, in the order they happened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    events: Vec<HistoryEvent>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an event.
    pub fn push(&mut self, event: HistoryEvent) {
        self.events.push(event);
    }

    /// `who` was granted a lease with `token`.
    pub fn granted(&mut self, who: &str, token: Token) {
        self.push(HistoryEvent::Granted {
            who: who.into(),
            token,
        });
    }

    /// The storage accepted `who`'s write.
    pub fn accepted(&mut self, who: &str) {
        self.push(HistoryEvent::Accepted { who: who.into() });
    }

    /// The storage rejected `who`'s write.
    pub fn rejected(&mut self, who: &str) {
        self.push(HistoryEvent::Rejected { who: who.into() });
    }

    /// The events in order.
    pub fn events(&self) -> &[HistoryEvent] {
        &self.events
    }

    /// How many writes the storage accepted.
    pub fn accepted_writes(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, HistoryEvent::Accepted { .. }))
            .count()
    }
}

/// A history broke `storage_in_lease_order`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// A write from an older lease was accepted after one from a newer lease.
    #[error(
        "storage_in_lease_order violated at event {index}: {who}'s write under grant #{epoch} \
         (token {token}) was accepted after a write under grant #{newest}"
    )]
    OutOfOrder {
        /// Index of the offending event in the history.
        index: usize,
        /// The writer.
        who: String,
        /// Which grant (1-based, in grant order) the write was made under.
        epoch: usize,
        /// The token of that grant.
        token: Token,
        /// The newest grant whose write had already been accepted.
        newest: usize,
    },
    /// A write was recorded for someone who was never granted a lease.
    #[error("event {index}: {who} wrote without ever being granted a lease")]
    WriteWithoutGrant {
        /// Index of the event.
        index: usize,
        /// The writer.
        who: String,
    },
}

/// Checks `storage_in_lease_order` over a recorded history: each write counts under its writer's
/// latest grant, and grants are ordered by when they happened.
///
/// ```
/// use fencecheck::protocol::{storage_in_lease_order, History, Token};
///
/// let mut h = History::new();
/// h.granted("A", Token::new(1));
/// h.granted("B", Token::new(2)); // A's lease expired while A was paused
/// h.accepted("B");
/// h.accepted("A"); // unfenced storage takes A's late write
/// let err = storage_in_lease_order(&h).unwrap_err();
/// assert!(err.to_string().contains("A's write under grant #1"));
/// ```
pub fn storage_in_lease_order(history: &History) -> Result<(), HistoryError> {
    let mut latest: Vec<(&str, usize, Token)> = Vec::new();
    let mut grants = 0usize;
    let mut order = LeaseOrder::new();
    for (index, event) in history.events.iter().enumerate() {
        match event {
            HistoryEvent::Granted { who, token } => {
                grants += 1;
                latest.retain(|(w, _, _)| *w != who.as_str());
                latest.push((who, grants, *token));
            }
            HistoryEvent::Accepted { who } => {
                let Some(&(_, epoch, token)) = latest.iter().find(|(w, _, _)| *w == who.as_str())
                else {
                    return Err(HistoryError::WriteWithoutGrant {
                        index,
                        who: who.clone(),
                    });
                };
                let newest = order.newest();
                if !order.accept(epoch) {
                    return Err(HistoryError::OutOfOrder {
                        index,
                        who: who.clone(),
                        epoch,
                        token,
                        newest: newest.unwrap_or(epoch),
                    });
                }
            }
            HistoryEvent::Rejected { .. } => {}
        }
    }
    Ok(())
}

/// Two elections were won with the same term.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("one_leader_per_term violated: term {term} was won by {first} and again by {second}")]
pub struct TermReused<W: fmt::Display + fmt::Debug> {
    /// The term won twice.
    pub term: Token,
    /// The first winner.
    pub first: W,
    /// The second winner.
    pub second: W,
}

/// Checks `one_leader_per_term` over the wins of an election (term, winner), in any order: no two
/// wins share a term. The leader-election models and the backend election tests both call it.
///
/// ```
/// use fencecheck::protocol::{one_leader_per_term, Token};
///
/// assert!(one_leader_per_term(&[(Token::new(3), "a"), (Token::new(7), "b")]).is_ok());
/// let twice = one_leader_per_term(&[(Token::new(3), "a"), (Token::new(3), "b")]).unwrap_err();
/// assert_eq!(twice.to_string(), "one_leader_per_term violated: term 3 was won by a and again by b");
/// ```
pub fn one_leader_per_term<W: Clone + fmt::Display + fmt::Debug>(
    wins: &[(Token, W)],
) -> Result<(), TermReused<W>> {
    let mut seen: Vec<(Token, &W)> = Vec::with_capacity(wins.len());
    for (term, winner) in wins {
        if let Some((_, first)) = seen.iter().find(|(t, _)| t == term) {
            return Err(TermReused {
                term: *term,
                first: (*first).clone(),
                second: winner.clone(),
            });
        }
        seen.push((*term, winner));
    }
    Ok(())
}

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.events.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            match e {
                HistoryEvent::Granted { who, token } => write!(f, "{who} granted token {token}")?,
                HistoryEvent::Accepted { who } => write!(f, "{who} write accepted")?,
                HistoryEvent::Rejected { who } => write!(f, "{who} write rejected")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_order_refuses_equal_and_smaller_tokens_and_stays_broken() {
        let mut tokens = TokenOrder::<u64>::default();
        assert!(tokens.holds() && tokens.last().is_none());
        assert!(tokens.grant(3));
        assert!(!tokens.grant(3), "a repeated token is not an increase");
        assert!(!tokens.holds());
        assert!(!tokens.grant(2), "a second regression");
        assert!(tokens.grant(4));
        assert!(!tokens.holds(), "a violation is never forgotten");
        assert_eq!(tokens.last(), Some(4));
    }

    #[test]
    fn in_order_history_holds_and_rejections_do_not_count() {
        let mut h = History::new();
        h.granted("A", Token::new(1));
        h.accepted("A");
        h.granted("B", Token::new(2));
        h.accepted("B");
        h.rejected("A");
        h.accepted("B");
        assert_eq!(storage_in_lease_order(&h), Ok(()));
        assert_eq!(h.accepted_writes(), 3);
        assert_eq!(h.events().len(), 6);
        assert_eq!(
            h.events()[4],
            HistoryEvent::Rejected {
                who: "A".to_string()
            }
        );
        assert_eq!(
            h.to_string(),
            "A granted token 1; A write accepted; B granted token 2; B write accepted; \
             A write rejected; B write accepted"
        );
    }

    #[test]
    fn late_write_of_an_older_lease_is_caught_by_grant_order_not_token() {
        // Tokens went backwards (a reset counter) but grant order still decides.
        let mut h = History::new();
        h.granted("A", Token::new(7));
        h.granted("B", Token::new(1));
        h.accepted("B");
        h.accepted("A");
        assert_eq!(
            storage_in_lease_order(&h),
            Err(HistoryError::OutOfOrder {
                index: 3,
                who: "A".into(),
                epoch: 1,
                token: Token::new(7),
                newest: 2
            })
        );
    }

    #[test]
    fn a_regrant_moves_the_writer_to_its_new_lease() {
        let mut h = History::new();
        h.granted("A", Token::new(1));
        h.granted("B", Token::new(2));
        h.accepted("B");
        h.granted("A", Token::new(3));
        h.accepted("A");
        assert_eq!(storage_in_lease_order(&h), Ok(()));
    }

    #[test]
    fn write_without_grant_is_reported() {
        let mut h = History::new();
        h.accepted("ghost");
        assert_eq!(
            storage_in_lease_order(&h),
            Err(HistoryError::WriteWithoutGrant {
                index: 0,
                who: "ghost".into()
            })
        );
    }

    #[test]
    fn a_term_won_twice_is_named() {
        let t = Token::new;
        assert_eq!(one_leader_per_term::<&str>(&[]), Ok(()));
        assert_eq!(
            one_leader_per_term(&[(t(1), "a"), (t(2), "b"), (t(1), "c")]),
            Err(TermReused {
                term: t(1),
                first: "a",
                second: "c"
            })
        );
        assert_eq!(one_leader_per_term(&[(t(2), "a"), (t(1), "a")]), Ok(()));
    }

    #[test]
    fn lease_order_tracks_newest() {
        let mut o = LeaseOrder::new();
        assert_eq!(o.newest(), None);
        assert!(o.accept(3u32));
        assert!(o.accept(5));
        assert_eq!(o.newest(), Some(5));
        assert!(!o.accept(4));
        assert_eq!(o.newest(), Some(5));
        assert!(!o.holds());
    }
}
