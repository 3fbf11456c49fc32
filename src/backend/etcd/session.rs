//! An owner's session lease: reused while it lives, renewed by one keepalive when it is older than
//! a tenth of the TTL, granted afresh when it lapsed.

use super::{EtcdLock, Retry};
use crate::backend::contract::BackendError;
use std::time::Instant;

impl EtcdLock {
    /// The owner's session lease and the send time of its last grant or renewal. A session
    /// renewed less than a tenth of the TTL ago is used as it is (no round trip); an older one is
    /// renewed (one keepalive, no Raft write); a lapsed one is replaced by a fresh grant. A lock
    /// taken under the session lives until that send time plus the TTL, which is what the grant
    /// reports.
    pub(super) async fn session(&self, owner: &str) -> Result<(i64, Instant), BackendError> {
        let known = self.sessions.lock().get(owner).copied();
        if let Some((lease, renewed)) = known {
            if renewed.elapsed() < self.ttl.granted() / 10 {
                return Ok((lease, renewed));
            }
            if let Some(sent) = self.keep_alive_once(lease).await? {
                self.remember_session(owner, lease, sent);
                return Ok((lease, sent));
            }
        }
        let ttl = self.ttl_secs;
        let (granted, sent) = self
            .call_sent(Retry::Always, |c| async move { c.lease_grant(ttl).await })
            .await
            .map_err(|f| f.into_error("lease grant"))?;
        let lease = granted.id;
        self.remember_session(owner, lease, sent);
        Ok((lease, sent))
    }

    pub(super) fn remember_session(&self, owner: &str, lease: i64, renewed: Instant) {
        self.sessions
            .lock()
            .insert(owner.to_string(), (lease, renewed));
    }

    /// Renews the lease of a contender waiting in line: when the renewal was sent, or `None`
    /// when the lease is gone.
    pub(super) async fn renew_in_line(
        &self,
        owner: &str,
        lease: i64,
    ) -> Result<Option<Instant>, BackendError> {
        let sent = self.keep_alive_once(lease).await?;
        if let Some(sent) = sent {
            self.remember_session(owner, lease, sent);
        }
        Ok(sent)
    }

    /// One keepalive of `lease`: when the answered attempt was sent (the lease's TTL runs from
    /// then), or `None` when the lease is gone.
    pub(super) async fn keep_alive_once(
        &self,
        lease: i64,
    ) -> Result<Option<Instant>, BackendError> {
        let result = self
            .call_sent(
                Retry::Always,
                |c| async move { c.keep_alive_once(lease).await },
            )
            .await;
        match result {
            Ok((ttl, sent)) => Ok((ttl > 0).then_some(sent)),
            Err(f) if f.lease_not_found() => Ok(None),
            Err(f) => Err(f.into_error("keepalive")),
        }
    }
}
