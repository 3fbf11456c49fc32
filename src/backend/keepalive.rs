//! Keeping a lease alive in the background, and knowing the moment it may have been lost.

use super::{Grant, LockService};
use crate::protocol::Token;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// The clock-drift margin used when none is given: 1 % of the TTL plus 2 ms (covers a clock rate
/// error of about 1 % between this machine and the server, and timer slack).
pub fn default_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// How a held lease is renewed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeepaliveOptions {
    /// Renew this often; `None` means a third of the TTL.
    pub every: Option<Duration>,
    /// Subtracted from every deadline to cover the server's clock running faster than ours.
    /// `None` means 1 % of the TTL plus 2 ms.
    pub drift: Option<Duration>,
}

impl KeepaliveOptions {
    fn resolve(self, ttl: Duration) -> (Duration, Duration) {
        let every = self.every.unwrap_or(ttl / 3).max(Duration::from_millis(1));
        let drift = self.drift.unwrap_or(default_drift(ttl));
        (every, drift)
    }
}

/// Why a held lease is no longer safe to act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The server says the lease is no longer ours (it expired, and may have been taken).
    Revoked,
    /// The safe deadline passed without a successful renewal (the server was unreachable or
    /// slow, or this process was paused).
    DeadlinePassed {
        /// The last renewal error, if renewals failed.
        last_error: Option<String>,
    },
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LostReason::Revoked => f.write_str("the server no longer has this lease"),
            LostReason::DeadlinePassed { last_error: None } => {
                f.write_str("the safe deadline passed before a renewal succeeded")
            }
            LostReason::DeadlinePassed {
                last_error: Some(e),
            } => write!(f, "the safe deadline passed; last renewal error: {e}"),
        }
    }
}

/// A lease renewed in the background (see [`hold`]).
pub struct HeldLease<L: LockService + 'static> {
    lock: Arc<L>,
    owner: String,
    token: Token,
    lost: watch::Receiver<Option<LostReason>>,
    deadline: watch::Receiver<Instant>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// Keeps `grant` alive: renews it every `options.every` and signals loss when a renewal is
/// refused or when the safe deadline — the last successful request's **send** time plus the TTL
/// minus the drift margin — passes without a renewal. Must be called inside a tokio runtime.
pub fn hold<L: LockService + 'static>(
    lock: Arc<L>,
    grant: Grant,
    options: KeepaliveOptions,
) -> HeldLease<L> {
    let (every, drift) = options.resolve(grant.ttl);
    let first_deadline = grant.safe_deadline(drift).unwrap_or(grant.sent_at);
    let (lost_tx, lost_rx) = watch::channel(None);
    let (deadline_tx, deadline_rx) = watch::channel(first_deadline);
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let task_lock = Arc::clone(&lock);
    let owner = grant.owner.clone();
    let token = grant.token;
    let task = tokio::spawn(async move {
        let mut deadline = first_deadline;
        let mut next = grant.sent_at + every;
        let mut last_error: Option<String> = None;
        loop {
            let wake = tokio::time::Instant::from_std(next.min(deadline));
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = &mut stop_rx => return,
            }
            if Instant::now() >= deadline {
                let _ = lost_tx.send(Some(LostReason::DeadlinePassed { last_error }));
                return;
            }
            let renew = tokio::time::timeout_at(
                tokio::time::Instant::from_std(deadline),
                task_lock.extend(&owner, token),
            );
            let outcome = tokio::select! {
                r = renew => r,
                _ = &mut stop_rx => return,
            };
            match outcome {
                Ok(Ok(Some(renewed))) => {
                    if let Some(d) = renewed.safe_deadline(drift) {
                        deadline = deadline.max(d);
                        let _ = deadline_tx.send(deadline);
                    }
                    next = renewed.sent_at + every;
                    last_error = None;
                }
                Ok(Ok(None)) => {
                    let _ = lost_tx.send(Some(LostReason::Revoked));
                    return;
                }
                Ok(Err(e)) => {
                    last_error = Some(e.to_string());
                    next = Instant::now() + (every / 4).max(Duration::from_millis(5));
                }
                Err(_) => {
                    let last_error =
                        Some(last_error.unwrap_or_else(|| "renewal did not answer in time".into()));
                    let _ = lost_tx.send(Some(LostReason::DeadlinePassed { last_error }));
                    return;
                }
            }
        }
    });
    HeldLease {
        lock,
        owner: grant.owner,
        token,
        lost: lost_rx,
        deadline: deadline_rx,
        stop: Some(stop_tx),
        task,
    }
}

impl<L: LockService + 'static> HeldLease<L> {
    /// The fencing token to carry to every write.
    pub fn token(&self) -> Token {
        self.token
    }

    /// The owner name the lease was taken under.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The current safe deadline: act as holder only before it.
    pub fn deadline(&self) -> Instant {
        *self.deadline.borrow()
    }

    /// Whether the lease must be treated as lost: a renewal was refused, or the safe deadline has
    /// passed (checked against the clock now, so it is true at once after a long pause, before
    /// the background task has even run).
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some() || Instant::now() >= self.deadline()
    }

    /// Why the lease was lost, if it was.
    pub fn lost_reason(&self) -> Option<LostReason> {
        if let Some(r) = self.lost.borrow().clone() {
            return Some(r);
        }
        (Instant::now() >= self.deadline())
            .then_some(LostReason::DeadlinePassed { last_error: None })
    }

    /// Waits until the lease is lost and says why.
    pub async fn lost(&mut self) -> LostReason {
        loop {
            if let Some(r) = self.lost.borrow_and_update().clone() {
                return r;
            }
            let deadline = tokio::time::Instant::from_std(self.deadline());
            tokio::select! {
                changed = self.lost.changed() => {
                    if changed.is_err() {
                        // The task ended without a verdict: it was stopped, so only the deadline
                        // can end the lease now.
                        tokio::time::sleep_until(deadline).await;
                        if Instant::now() >= self.deadline() {
                            return LostReason::DeadlinePassed { last_error: None };
                        }
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    if Instant::now() >= self.deadline() && self.lost.borrow().is_none() {
                        return LostReason::DeadlinePassed { last_error: None };
                    }
                }
            }
        }
    }

    /// Stops renewing and releases the lease on the server. `Ok(false)` when it was no longer
    /// ours.
    pub async fn release(mut self) -> Result<bool, super::BackendError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.lock.release(&self.owner, self.token).await
    }
}

impl<L: LockService + 'static> Drop for HeldLease<L> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
