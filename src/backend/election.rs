//! Leader election on any lease lock.
//!
//! Campaigning is acquiring the lease, the **term** is the grant's fencing token, leadership lasts
//! while the lease is renewed, and resigning is releasing it. On etcd this is exactly etcd's own
//! election recipe (`etcdctl elect NAME`: the key under `NAME/` with the lowest create revision
//! leads), so the term is the leader key's create revision. Carry the term to every write the
//! leader makes, as a fencing token: a deposed leader's late writes are then refused.

use super::contract::{BackendError, Holder, LockService};
use super::keepalive::{hold, HeldLease, KeepaliveOptions, LostReason};
use crate::protocol::Token;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Leader election among candidates sharing one lock.
pub struct LeaderElection<L: LockService + 'static> {
    lock: Arc<L>,
    keepalive: KeepaliveOptions,
}

/// A won term: renewed in the background until resigned or lost.
pub struct Leadership<L: LockService + 'static> {
    lock: Arc<L>,
    held: HeldLease<L>,
}

impl<L: LockService + 'static> LeaderElection<L> {
    /// An election over `lock` (one lock per election).
    pub fn new(lock: Arc<L>) -> Self {
        Self::with_keepalive(lock, KeepaliveOptions::default())
    }

    /// An election whose leaders renew with `keepalive`.
    pub fn with_keepalive(lock: Arc<L>, keepalive: KeepaliveOptions) -> Self {
        LeaderElection { lock, keepalive }
    }

    /// Campaigns as `candidate` for up to `timeout`: `Some` once elected (a term larger than every
    /// earlier leader's), `None` when someone else still leads when the time is up.
    pub async fn campaign(
        &self,
        candidate: &str,
        timeout: Duration,
    ) -> Result<Option<Leadership<L>>, BackendError> {
        let Some(grant) = self.lock.acquire(candidate, timeout).await? else {
            return Ok(None);
        };
        let (owner, token) = (grant.owner.clone(), grant.token);
        match hold(Arc::clone(&self.lock), grant, self.keepalive) {
            Ok(held) => Ok(Some(Leadership {
                lock: Arc::clone(&self.lock),
                held,
            })),
            Err(e) => {
                let _ = self.lock.release(&owner, token).await;
                Err(BackendError::invalid("keepalive options", e.to_string()))
            }
        }
    }

    /// The current leader and its term, if any.
    pub async fn leader(&self) -> Result<Option<Holder>, BackendError> {
        self.lock.holder().await
    }

    /// Waits up to `timeout` for a leader whose term is not `seen` (a change of leadership, or
    /// the first leader when `seen` is `None`), polling every 20 ms.
    pub async fn observe(
        &self,
        seen: Option<Token>,
        timeout: Duration,
    ) -> Result<Option<Holder>, BackendError> {
        let deadline = Instant::now() + timeout;
        let mut watch = super::retry::WATCH;
        loop {
            if let Some(h) = self.leader().await? {
                if Some(h.token) != seen {
                    return Ok(Some(h));
                }
            }
            if !watch.pause(Some(deadline)).await {
                return Ok(None);
            }
        }
    }
}

impl<L: LockService + 'static> Leadership<L> {
    /// The term: this leadership's fencing token.
    pub fn term(&self) -> Token {
        self.held.token()
    }

    /// The leader's name.
    pub fn candidate(&self) -> &str {
        self.held.owner()
    }

    /// Whether leadership must be treated as lost (renewal refused or safe deadline passed).
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Waits until leadership is lost and says why.
    pub async fn lost(&mut self) -> LostReason {
        self.held.lost().await
    }

    /// Proclaims `value` (for example the leader's address) for observers to read with
    /// [`LeaderElection::leader`]. `Ok(false)` when the term has ended.
    pub async fn proclaim(&self, value: &str) -> Result<bool, BackendError> {
        self.lock
            .publish(self.held.owner(), self.held.token(), value)
            .await
    }

    /// Steps down. `Ok(false)` when the term had already ended.
    pub async fn resign(self) -> Result<bool, BackendError> {
        self.held.release().await
    }
}
