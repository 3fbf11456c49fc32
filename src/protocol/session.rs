//! A lock held by a session, as Consul's KV store keeps it (`PUT key?acquire=SESSION`).
//!
//! The key is held by at most one session. When that session is invalidated (its TTL ran out, a
//! health check failed, it was destroyed) the server releases the key and refuses every acquire
//! for the session's **lock-delay** (Consul's default: 15 s), so that a holder that has not yet
//! noticed can stop before anyone else starts. Each acquisition by a new session increments the
//! key's **LockIndex**: the fencing token. A voluntary release (`?release=`) has no lock-delay.

use super::token::Token;

/// Why an acquire was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum Refused {
    /// Another session holds the key.
    #[error("held by another session")]
    Held,
    /// The last holder's session was invalidated: no one may acquire before `until`.
    #[error("lock-delay until {until}")]
    LockDelay {
        /// When the lock-delay ends.
        until: u64,
    },
}

/// One key's lock: its holding session, LockIndex and lock-delay.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionLock<S> {
    holder: Option<S>,
    lock_index: u64,
    delay_until: u64,
}

impl<S> Default for SessionLock<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> SessionLock<S> {
    /// A free key, never acquired (LockIndex 0).
    pub fn new() -> Self {
        SessionLock {
            holder: None,
            lock_index: 0,
            delay_until: 0,
        }
    }
}

impl<S: PartialEq> SessionLock<S> {
    /// `?acquire=session` at `now`: the LockIndex it holds the key under (the same again for the
    /// session that already holds it; one more for a new holder).
    pub fn acquire(&mut self, session: S, now: u64) -> Result<Token, Refused> {
        match &self.holder {
            Some(h) if *h == session => return Ok(Token::new(self.lock_index)),
            Some(_) => return Err(Refused::Held),
            None if now < self.delay_until => {
                return Err(Refused::LockDelay {
                    until: self.delay_until,
                })
            }
            None => {}
        }
        self.holder = Some(session);
        self.lock_index += 1;
        Ok(Token::new(self.lock_index))
    }

    /// `session` was invalidated at `now`: if it holds the key, the key is released and no one
    /// may acquire it for `lock_delay`. Whether it held the key.
    pub fn invalidate(&mut self, session: &S, now: u64, lock_delay: u64) -> bool {
        if self.holder.as_ref() != Some(session) {
            return false;
        }
        self.holder = None;
        self.delay_until = now + lock_delay;
        true
    }

    /// `?release=session`: frees the key with no lock-delay. Whether it held the key.
    pub fn release(&mut self, session: &S) -> bool {
        if self.holder.as_ref() != Some(session) {
            return false;
        }
        self.holder = None;
        true
    }

    /// The session holding the key.
    pub fn holder(&self) -> Option<&S> {
        self.holder.as_ref()
    }

    /// The key's LockIndex: how many times a new session acquired it.
    pub fn lock_index(&self) -> u64 {
        self.lock_index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_session_holds_and_each_new_holder_raises_the_lock_index() {
        let mut lock = SessionLock::default();
        assert_eq!((lock.holder(), lock.lock_index()), (None, 0));
        assert_eq!(lock.acquire('a', 0), Ok(Token::new(1)));
        assert_eq!(lock.acquire('a', 1), Ok(Token::new(1)), "the holder again");
        assert_eq!(lock.acquire('b', 1), Err(Refused::Held));
        assert_eq!(lock.holder(), Some(&'a'));
        assert!(!lock.release(&'b'));
        assert!(lock.release(&'a'));
        assert!(!lock.release(&'a'));
        // A release has no lock-delay.
        assert_eq!(lock.acquire('b', 1), Ok(Token::new(2)));
        assert_eq!(lock.lock_index(), 2);
    }

    #[test]
    fn an_invalidated_session_frees_the_key_after_its_lock_delay() {
        let mut lock = SessionLock::new();
        assert_eq!(lock.acquire('a', 0), Ok(Token::new(1)));
        assert!(!lock.invalidate(&'b', 5, 3), "b holds nothing");
        assert_eq!(lock.holder(), Some(&'a'));
        assert!(lock.invalidate(&'a', 5, 3));
        assert_eq!(lock.holder(), None);
        assert_eq!(lock.acquire('b', 5), Err(Refused::LockDelay { until: 8 }));
        assert_eq!(lock.acquire('b', 7), Err(Refused::LockDelay { until: 8 }));
        assert_eq!(lock.acquire('b', 8), Ok(Token::new(2)));
        assert_eq!(
            Refused::LockDelay { until: 8 }.to_string(),
            "lock-delay until 8"
        );
        assert_eq!(Refused::Held.to_string(), "held by another session");
        // Without a lock-delay the key is free at once.
        let mut lock = SessionLock::new();
        lock.acquire('a', 0).unwrap();
        assert!(lock.invalidate(&'a', 4, 0));
        assert_eq!(lock.acquire('b', 4), Ok(Token::new(2)));
    }
}
