//! `FencedStore`: a value guarded by the protocol core's [`Fence`].

use crate::protocol::{Fence, FencePolicy, StaleWrite, Token};
use crate::sync::Mutex;

/// A value that only the newest lease may overwrite.
///
/// Every write carries the writer's fencing token; the store accepts it iff the token is at least
/// the highest it has accepted, all in one step under its mutex, so concurrent writers cannot
/// slip a stale write between the check and the store.
///
/// # Examples
/// ```
/// use fencecheck::local::FencedStore;
/// use fencecheck::protocol::Token;
///
/// let store = FencedStore::new();
/// store.write(Token::new(42), "written-by-B").unwrap();
/// let stale = store.write(Token::new(41), "written-by-A").unwrap_err();
/// assert_eq!((stale.token.get(), stale.highest.get()), (41, 42));
/// assert_eq!(store.read(), Some(("written-by-B", Token::new(42))));
/// ```
#[derive(Debug)]
pub struct FencedStore<V> {
    slot: Mutex<Slot<V>>,
}

#[derive(Debug)]
struct Slot<V> {
    fence: Fence,
    value: Option<(V, Token)>,
}

impl<V> Default for FencedStore<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> FencedStore<V> {
    /// An empty store that applies the fencing rule.
    pub fn new() -> Self {
        Self::with_policy(FencePolicy::Fenced)
    }

    /// An empty store with the given policy; [`FencePolicy::AcceptAll`] is TTL-only storage.
    pub fn with_policy(policy: FencePolicy) -> Self {
        FencedStore {
            slot: Mutex::new(Slot {
                fence: Fence::new(policy),
                value: None,
            }),
        }
    }

    /// Writes `value` under `token` if the fence admits it.
    ///
    /// # Errors
    /// [`StaleWrite`] naming the token and the highest accepted when a newer lease already
    /// wrote; the stored value is unchanged.
    pub fn write(&self, token: Token, value: V) -> Result<(), StaleWrite> {
        let mut slot = self.slot.lock();
        slot.fence.admit(token)?;
        slot.value = Some((value, token));
        Ok(())
    }

    /// The highest token accepted so far.
    pub fn highest(&self) -> Option<Token> {
        self.slot.lock().fence.highest()
    }
}

impl<V: Clone> FencedStore<V> {
    /// The stored value and the token it was written with.
    pub fn read(&self) -> Option<(V, Token)> {
        self.slot.lock().value.clone()
    }
}
