//! The fencing rule the storage applies to every write.

use super::token::Token;

/// What a [`Fence`] does with a write's token.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum FencePolicy {
    /// Accept a write iff its token is at least the highest seen (the fencing-token rule).
    Fenced,
    /// Accept every write: what storage behind a TTL-only lock does.
    AcceptAll,
}

/// A write was refused because a newer lease has already written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("stale write: token {token} is older than token {highest} already seen")]
pub struct StaleWrite {
    /// The token the write carried.
    pub token: Token,
    /// The highest token the storage had accepted.
    pub highest: Token,
}

/// The storage side of fencing: remembers the highest token it accepted and rejects older ones.
///
/// Equal tokens are accepted, so one holder may write many times under one lease.
///
/// ```
/// use fencecheck::protocol::{Fence, Token};
///
/// let mut fence = Fence::fenced();
/// assert!(fence.admit(Token::new(42)).is_ok());
/// assert!(fence.admit(Token::new(42)).is_ok());
/// let stale = fence.admit(Token::new(41)).unwrap_err();
/// assert_eq!(stale.to_string(), "stale write: token 41 is older than token 42 already seen");
/// ```
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Fence {
    policy: FencePolicy,
    highest: Option<Token>,
}

impl Fence {
    /// A fence with the given policy that has seen no write yet.
    pub const fn new(policy: FencePolicy) -> Self {
        Fence {
            policy,
            highest: None,
        }
    }

    /// A fence that rejects writes older than the highest token seen.
    pub const fn fenced() -> Self {
        Self::new(FencePolicy::Fenced)
    }

    /// A fence that accepts everything (TTL-only storage).
    pub const fn accept_all() -> Self {
        Self::new(FencePolicy::AcceptAll)
    }

    /// The policy this fence applies.
    pub fn policy(&self) -> FencePolicy {
        self.policy
    }

    /// The highest token accepted so far.
    pub fn highest(&self) -> Option<Token> {
        self.highest
    }

    /// Decides a write carrying `token`: on acceptance remembers it if it is the highest; on
    /// rejection changes nothing and names the token and the highest seen.
    #[inline]
    pub fn admit(&mut self, token: Token) -> Result<(), StaleWrite> {
        match self.highest {
            Some(highest) if token < highest && self.policy == FencePolicy::Fenced => {
                Err(StaleWrite { token, highest })
            }
            Some(highest) if token <= highest => Ok(()),
            _ => {
                self.highest = Some(token);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_accepts_equal_and_newer_rejects_older() {
        let mut f = Fence::fenced();
        assert_eq!(f.highest(), None);
        assert_eq!(f.admit(Token::new(2)), Ok(()));
        assert_eq!(f.admit(Token::new(2)), Ok(()));
        assert_eq!(f.admit(Token::new(3)), Ok(()));
        let before = f.clone();
        assert_eq!(
            f.admit(Token::new(1)),
            Err(StaleWrite {
                token: Token::new(1),
                highest: Token::new(3)
            })
        );
        assert_eq!(f, before);
        assert_eq!(f.highest(), Some(Token::new(3)));
    }

    #[test]
    fn accept_all_accepts_older_but_still_tracks_highest() {
        let mut f = Fence::accept_all();
        assert_eq!(f.admit(Token::new(5)), Ok(()));
        assert_eq!(f.admit(Token::new(1)), Ok(()));
        assert_eq!(f.highest(), Some(Token::new(5)));
        assert_eq!(f.policy(), FencePolicy::AcceptAll);
    }
}
