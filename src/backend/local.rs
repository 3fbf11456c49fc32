//! The in-process lock and storage behind the backend-neutral traits, so code (and the contract
//! tests) written against [`LockService`] and [`FencedStorage`] run the same without a server.

use super::contract::{
    Acquired, BackendError, FencedStorage, Grant, Holder, LockService, Stored, WriteOutcome,
    WriteResult,
};
use crate::local::{Clock, LeaseLock, SystemClock};
use crate::protocol::Ttl;
use crate::protocol::{Acquire, Fence, FencePolicy, LeaseError, Token};
use crate::sync::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const BACKEND: &str = "in-process";

/// The in-process [`LeaseLock`] as a [`LockService`]: owners are strings; calls never block.
pub struct LocalLock<C: Clock = SystemClock> {
    lock: LeaseLock<String, C>,
    ttl: Ttl,
    /// The current lease's published value, with the token it was published under.
    published: Mutex<Option<(Token, String)>>,
}

impl LocalLock<SystemClock> {
    /// An in-process lock granting leases of `ttl` on the system clock.
    pub fn new(ttl: Duration) -> Result<Self, BackendError> {
        Self::with_clock(ttl, SystemClock::new())
    }
}

impl<C: Clock> LocalLock<C> {
    /// An in-process lock on the given clock.
    pub fn with_clock(ttl: Duration, clock: C) -> Result<Self, BackendError> {
        let ttl = Ttl::new(ttl)?;
        let lock = LeaseLock::with_clock(ttl.granted(), clock).map_err(|e| lease_err("new", e))?;
        Ok(LocalLock {
            lock,
            ttl,
            published: Mutex::new(None),
        })
    }

    /// The wrapped lock.
    pub fn inner(&self) -> &LeaseLock<String, C> {
        &self.lock
    }
}

fn lease_err(operation: &'static str, e: LeaseError) -> BackendError {
    BackendError::failed(BACKEND, operation, e)
}

impl<C: Clock> LockService for LocalLock<C> {
    fn ttl(&self) -> Ttl {
        self.ttl
    }

    async fn try_acquire(&self, owner: &str) -> Result<Acquired, BackendError> {
        let sent_at = Instant::now();
        match self.lock.try_acquire_raw(owner.to_string()) {
            Ok(Acquire::Granted(lease)) => Ok(Acquired::Granted(Grant {
                token: lease.token,
                owner: lease.owner,
                ttl: self.lock.ttl(),
                sent_at,
            })),
            Ok(Acquire::Busy {
                holder, expires_at, ..
            }) => Ok(Acquired::Busy {
                holder: Some(holder),
                remaining: Some(Duration::from_nanos(
                    expires_at.saturating_sub(self.lock.clock().now()),
                )),
            }),
            Err(e) => Err(lease_err("acquire", e)),
        }
    }

    async fn extend(&self, owner: &str, token: Token) -> Result<Option<Grant>, BackendError> {
        let sent_at = Instant::now();
        match self.lock.extend_raw(&owner.to_string(), token) {
            Ok(lease) => Ok(Some(Grant {
                token: lease.token,
                owner: lease.owner,
                ttl: self.lock.ttl(),
                sent_at,
            })),
            Err(LeaseError::NotHolder { .. } | LeaseError::Expired { .. }) => Ok(None),
            Err(e) => Err(lease_err("extend", e)),
        }
    }

    async fn holder(&self) -> Result<Option<Holder>, BackendError> {
        let published = self.published.lock().clone();
        Ok(self.lock.holder().map(|l| Holder {
            value: published.filter(|(t, _)| *t == l.token).map(|(_, v)| v),
            owner: l.owner,
            token: l.token,
        }))
    }

    async fn publish(&self, owner: &str, token: Token, value: &str) -> Result<bool, BackendError> {
        let mut published = self.published.lock();
        let holds = self
            .lock
            .holder()
            .is_some_and(|l| l.owner == owner && l.token == token);
        if holds {
            *published = Some((token, value.to_string()));
        }
        Ok(holds)
    }

    async fn release(&self, owner: &str, token: Token) -> Result<bool, BackendError> {
        match self.lock.release_raw(&owner.to_string(), token) {
            // Releasing a lease that already expired frees nothing: report it as not held, as
            // a server that dropped the expired key does.
            Ok(lease) => Ok(lease.is_live(self.lock.clock().now())),
            Err(LeaseError::NotHolder { .. } | LeaseError::Expired { .. }) => Ok(false),
            Err(e) => Err(lease_err("release", e)),
        }
    }
}

/// An in-process map of fenced keys: each key has its own core [`Fence`]. With
/// [`FencePolicy::AcceptAll`] it is a plain map that keeps the last writer's token.
pub struct LocalFencedMap {
    policy: FencePolicy,
    keys: Mutex<HashMap<String, (Fence, Stored)>>,
}

impl LocalFencedMap {
    /// An empty map applying `policy` to every key.
    pub fn new(policy: FencePolicy) -> Self {
        LocalFencedMap {
            policy,
            keys: Mutex::new(HashMap::new()),
        }
    }
}

impl FencedStorage for LocalFencedMap {
    async fn write(&self, key: &str, token: Token, value: &[u8]) -> WriteResult {
        let mut keys = self.keys.lock();
        let (fence, stored) = keys.entry(key.to_string()).or_insert_with(|| {
            let empty = Stored {
                token,
                value: Vec::new(),
            };
            (Fence::new(self.policy), empty)
        });
        match fence.admit(token) {
            Ok(()) => {
                // Fenced: `token` is the highest; accept-all: the last writer's token, as a
                // plain overwrite would keep.
                *stored = Stored {
                    token,
                    value: value.to_vec(),
                };
                Ok(WriteOutcome::Accepted)
            }
            Err(stale) => Ok(WriteOutcome::Stale(stale)),
        }
    }

    async fn read(&self, key: &str) -> Result<Option<Stored>, BackendError> {
        let keys = self.keys.lock();
        Ok(keys.get(key).map(|(_, stored)| stored.clone()))
    }
}
