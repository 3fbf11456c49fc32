//! Fencing tokens: one lock's tokens start at 1 and strictly increase.

use std::fmt;

/// A fencing token: the number a lease carries to the storage, which rejects any write whose
/// token is older than one it has already seen.
///
/// Tokens of one lock are handed out by a [`TokenIssuer`], starting at 1 and strictly
/// increasing. `Token` orders like the number it wraps.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Token(u64);

impl Token {
    /// The first token a lock hands out.
    pub const FIRST: Token = Token(1);

    /// Wraps a raw token value (for example one read back from a server).
    #[inline]
    pub const fn new(value: u64) -> Self {
        Token(value)
    }

    /// The raw value.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// A server reported a negative number where a token was expected (servers keep revisions,
/// zxids and BIGINT columns as signed integers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not a token: tokens are positive")]
pub struct NegativeToken(pub i64);

impl TryFrom<i64> for Token {
    type Error = NegativeToken;

    /// The token a server's signed counter stands for; negative values are refused, never cast.
    fn try_from(value: i64) -> Result<Self, NegativeToken> {
        u64::try_from(value)
            .map(Token)
            .map_err(|_| NegativeToken(value))
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Issuing another token would pass `u64::MAX`; the issuer never wraps around.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("token space exhausted: the last token issued was {last}, there is no larger u64")]
pub struct TokenExhausted {
    /// The last token that was issued (`u64::MAX`).
    pub last: Token,
}

/// Hands out one lock's tokens: 1, 2, 3, ... and never the same one twice.
#[derive(
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct TokenIssuer {
    /// The last token handed out; 0 before the first.
    last: u64,
}

impl TokenIssuer {
    /// An issuer whose first token will be [`Token::FIRST`].
    pub const fn new() -> Self {
        TokenIssuer { last: 0 }
    }

    /// An issuer that continues after `last` (for example after reading a persisted counter).
    pub const fn resume_after(last: Token) -> Self {
        TokenIssuer { last: last.0 }
    }

    /// The next token, strictly larger than every token issued before.
    #[inline]
    pub fn issue(&mut self) -> Result<Token, TokenExhausted> {
        match self.last.checked_add(1) {
            Some(next) => {
                self.last = next;
                Ok(Token(next))
            }
            None => Err(TokenExhausted {
                last: Token(self.last),
            }),
        }
    }

    /// The last token issued, if any.
    #[inline]
    pub fn last_issued(&self) -> Option<Token> {
        (self.last > 0).then_some(Token(self.last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_signed_counter_becomes_a_token_only_when_positive() {
        assert_eq!(Token::try_from(7_i64), Ok(Token::new(7)));
        assert_eq!(Token::try_from(-1_i64), Err(NegativeToken(-1)));
        assert_eq!(
            NegativeToken(-1).to_string(),
            "-1 is not a token: tokens are positive"
        );
    }

    #[test]
    fn tokens_start_at_one_and_increase() {
        let mut issuer = TokenIssuer::new();
        assert_eq!(issuer.last_issued(), None);
        assert_eq!(issuer.issue(), Ok(Token::FIRST));
        assert_eq!(issuer.issue(), Ok(Token::new(2)));
        assert_eq!(issuer.last_issued(), Some(Token::new(2)));
    }

    #[test]
    fn token_displays_as_its_number() {
        assert_eq!(Token::new(42).to_string(), "42");
        assert_eq!(Token::new(42).get(), 42);
    }

    #[test]
    fn issuing_past_u64_max_is_an_error_not_a_wrap() {
        let mut issuer = TokenIssuer::resume_after(Token::new(u64::MAX - 1));
        assert_eq!(issuer.issue(), Ok(Token::new(u64::MAX)));
        let err = issuer.issue().unwrap_err();
        assert_eq!(err.last, Token::new(u64::MAX));
        // The failed issue changed nothing.
        assert_eq!(issuer.issue().unwrap_err(), err);
        assert_eq!(issuer.last_issued(), Some(Token::new(u64::MAX)));
        assert!(err.to_string().contains("18446744073709551615"));
    }
}
