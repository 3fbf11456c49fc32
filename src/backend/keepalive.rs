//! Keeping a lease alive in the background, and knowing when the work it guards must stop.
//!
//! The stop schedule is the protocol core's [`StopTimer`]: `hold` feeds it the renewals and the
//! losses, and [`HeldLease::next_stop`] says when to ask the work to stop and when to kill it —
//! the same machine `fencecheck run` drives and the `keepalive` models check.

use super::contract::{Grant, LockService};
use crate::protocol::{
    Phase, Renewals, Schedule, ScheduleError, StopPolicy, StopStep, StopTimer, Token,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// How a held lease is renewed, and how the work it guards is stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeepaliveOptions {
    /// Renew this often; `None` means a third of the TTL, or less where a long grace needs it
    /// ([`Schedule::new`]).
    pub every: Option<Duration>,
    /// Subtracted from every deadline to cover the server's clock running faster than ours.
    /// `None` means [`crate::protocol::default_drift`] (1 % of the TTL plus 2 ms).
    pub drift: Option<Duration>,
    /// Between asking the work to stop and killing it; both come before the safe deadline.
    /// `None` means [`crate::protocol::default_grace`].
    pub grace: Option<Duration>,
}

impl KeepaliveOptions {
    /// The schedule of a lease of `ttl` with these options ([`Schedule::new`]).
    pub fn schedule(self, ttl: Duration) -> Result<Schedule, ScheduleError> {
        Schedule::new(ttl, self.every, self.drift, self.grace)
    }
}

/// What the work must do now (see [`HeldLease::next_stop`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Ask the work to stop (SIGTERM): the safe deadline is a grace period away, or the lease is
    /// gone (`lost` says why).
    Gently {
        /// Why, when the lease was lost rather than simply not renewed in time.
        lost: Option<LostReason>,
    },
    /// Kill the work (SIGKILL): the safe deadline has come, or the grace after a loss has run out.
    Force,
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
    /// The time origin of `holder` (the grant's send time).
    origin: Instant,
    policy: StopPolicy,
    holder: StopTimer,
    lost: watch::Receiver<Option<LostReason>>,
    deadline: watch::Receiver<Instant>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// Keeps `grant` alive: renews it every `options.every` and signals loss when a renewal is
/// refused or when the safe deadline — the last successful request's **send** time plus the TTL
/// minus the drift margin — passes without a renewal; [`HeldLease::next_stop`] gives the stop
/// schedule. Refused when the drift margin and the grace do not fit in the granted TTL. Must be
/// called inside a tokio runtime.
pub fn hold<L: LockService + 'static>(
    lock: Arc<L>,
    grant: Grant,
    options: KeepaliveOptions,
) -> Result<HeldLease<L>, ScheduleError> {
    let schedule = options.schedule(grant.ttl)?;
    Ok(hold_on(lock, grant, schedule))
}

/// [`hold`] with the schedule already built from the grant's TTL (by
/// [`KeepaliveOptions::schedule`]), for a caller that judged the grant with it first.
pub fn hold_on<L: LockService + 'static>(
    lock: Arc<L>,
    grant: Grant,
    schedule: Schedule,
) -> HeldLease<L> {
    let Schedule {
        every,
        drift,
        policy,
    } = schedule;
    // Every time below is measured from the grant's send time.
    let origin = grant.sent_at;
    let since = move |t: Instant| t.saturating_duration_since(origin);
    let mut renewals = Renewals::new(grant.ttl, drift, every, Duration::ZERO);
    let first_deadline = origin + renewals.deadline();
    let (lost_tx, lost_rx) = watch::channel(None);
    let (deadline_tx, deadline_rx) = watch::channel(first_deadline);
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let task_lock = Arc::clone(&lock);
    let owner = grant.owner.clone();
    let token = grant.token;
    let task = tokio::spawn(async move {
        let mut last_error: Option<String> = None;
        loop {
            let wake = tokio::time::Instant::from_std(origin + renewals.next_at());
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = &mut stop_rx => return,
            }
            if renewals.expired(since(Instant::now())) {
                let _ = lost_tx.send(Some(LostReason::DeadlinePassed { last_error }));
                return;
            }
            let renew = tokio::time::timeout_at(
                tokio::time::Instant::from_std(origin + renewals.deadline()),
                task_lock.extend(&owner, token),
            );
            let outcome = tokio::select! {
                r = renew => r,
                _ = &mut stop_rx => return,
            };
            match outcome {
                Ok(Ok(Some(renewed))) => {
                    let deadline = renewals.answered(since(renewed.sent_at));
                    let _ = deadline_tx.send(origin + deadline);
                    last_error = None;
                }
                Ok(Ok(None)) => {
                    let _ = lost_tx.send(Some(LostReason::Revoked));
                    return;
                }
                Ok(Err(e)) => {
                    last_error = Some(e.to_string());
                    renewals.failed(since(Instant::now()));
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
        origin,
        policy,
        holder: policy.timer(first_deadline - origin),
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

    /// Whether work may start now: more than the grace period is left before the safe deadline
    /// (a grant that arrived late, or after a pause, runs nothing).
    pub fn may_start(&self) -> bool {
        self.policy
            .may_start(self.since(Instant::now()), self.since(self.deadline()))
    }

    /// Where the work is in its stop schedule.
    pub fn phase(&self) -> Phase {
        self.holder.phase()
    }

    /// When the work is to be asked to stop, as the schedule stands now (a time already past
    /// once the lease is lost: at once).
    pub fn stop_at(&self) -> Instant {
        self.origin + self.synced().stop_at()
    }

    /// The grace between asking the work to stop and killing it.
    pub fn grace(&self) -> Duration {
        self.policy.grace()
    }

    /// The time by which the work must have been killed, as the schedule stands now: the safe
    /// deadline, or earlier after a loss.
    pub fn force_stop_at(&self) -> Instant {
        self.origin + self.synced().force_stop_at()
    }

    /// Waits for the next step of the stop schedule: [`Stop::Gently`] once (at the safe deadline
    /// minus the grace, or at once when the lease is lost), then [`Stop::Force`] (at the safe
    /// deadline, or a grace after the loss, whichever is first), then never returns. Renewals
    /// move the schedule until the gentle stop; after it nothing calls the stop off.
    /// Cancel-safe: dropping the future loses no step.
    pub async fn next_stop(&mut self) -> Stop {
        loop {
            self.holder = self.synced();
            let lost = self.lost.borrow_and_update().clone();
            match self.holder.tick(self.since(Instant::now())) {
                StopStep::StopGently => return Stop::Gently { lost },
                StopStep::ForceStop => return Stop::Force,
                StopStep::Done => std::future::pending::<()>().await,
                StopStep::WaitUntil(t) => {
                    let wake = tokio::time::Instant::from_std(self.origin + t);
                    tokio::select! {
                        _ = tokio::time::sleep_until(wake) => {}
                        changed = self.lost.changed() => {
                            if changed.is_err() {
                                // The renewing task has ended: only the schedule is left.
                                tokio::time::sleep_until(wake).await;
                            }
                        }
                        _ = self.deadline.changed() => {}
                    }
                }
            }
        }
    }

    /// The holder with the latest deadline and loss applied.
    fn synced(&self) -> StopTimer {
        let mut holder = self.holder;
        holder.renewed(self.since(self.deadline()));
        if self.lost.borrow().is_some() {
            holder.revoked(self.since(Instant::now()));
        }
        holder
    }

    fn since(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.origin)
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
