//! Waiting in line for the lock: our key under the prefix, first by creation revision gets the
//! lock; our session lease kept alive while we wait, as etcd's own lock does.

use super::{EtcdLock, BACKEND};
use crate::backend::contract::{server_token, BackendError, Grant};
use crate::protocol::renew_every;
use std::time::Instant;

/// How a wait in line ended.
pub(super) enum InLine {
    Granted(Grant),
    TimedOut,
    /// Our session lease ended while we waited: our place in line is gone.
    LeaseLost,
}

impl EtcdLock {
    /// Joins the line (or finds our place in it) and waits until first, keeping our lease
    /// alive as etcd's own lock does, until `deadline`.
    pub(super) async fn wait_in_line(
        &self,
        owner: &str,
        deadline: Instant,
    ) -> Result<InLine, BackendError> {
        let (lease, key, revision, lowest, sent_at) = self.enqueue(owner).await?;
        let token = server_token(BACKEND, "acquire", revision)?;
        if self.holds_already(owner, token) {
            return Ok(InLine::TimedOut);
        }
        if lowest.is_some_and(|(k, _, _)| k == key) {
            return Ok(InLine::Granted(
                self.granted(owner, lease, key, token, sent_at),
            ));
        }
        let mut backoff = crate::backend::retry::WAIT_IN_LINE;
        let mut renew_at = sent_at + renew_every(self.ttl.granted());
        loop {
            if !backoff.pause(Some(deadline)).await {
                self.delete_key(&key, revision).await?;
                return Ok(InLine::TimedOut);
            }
            if Instant::now() >= renew_at {
                let Some(sent) = self.renew_in_line(owner, lease).await? else {
                    return Ok(InLine::LeaseLost);
                };
                renew_at = sent + renew_every(self.ttl.granted());
            }
            if self.still_first(&key, token).await? {
                // First in line, but the lease may have lapsed while this client waited (its
                // renewals late: a pause, a slow clock) and the server not yet deleted the key.
                // A keepalive now either fails (the lease is gone) or starts the grant's full
                // TTL from here, whatever this client's clock says.
                let Some(sent) = self.renew_in_line(owner, lease).await? else {
                    return Ok(InLine::LeaseLost);
                };
                return Ok(InLine::Granted(
                    self.granted(owner, lease, key, token, sent),
                ));
            }
        }
    }
}
