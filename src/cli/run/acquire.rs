//! Taking the lease: at once or while `--wait` lasts, an outage ridden out, and a lease that a
//! request without an answer may have taken looked for and freed.

use super::UsageError;
use super::{backend_failure, RunArgs, EXIT_LOCK_BUSY};
use fencecheck::backend::{Acquired, BackendError, Grant, LockService};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// After an acquire that timed out on the client, the server may have granted it all the same:
/// frees a lease the server shows for `owner` (unique to this run: HOST:PID by default), so it
/// does not keep everyone out for a whole TTL. The link that lost the reply is often still slow,
/// so the cleanup has its own budget: it asks again (each request reconnects after a timeout)
/// for four request timeouts, at least 2 s, never past the TTL. Says what it did, and when it
/// could not find out, how long the lock may stay held.
async fn free_own_lease<L: LockService>(lock: &L, owner: &str, args: &RunArgs) {
    let budget = (args.timeout * 4).max(Duration::from_secs(2)).min(args.ttl);
    let until = Instant::now() + budget;
    let mut backoff = fencecheck::backend::retry::RIDE_OUT;
    loop {
        match lock.holder().await {
            Ok(Some(h)) if h.owner == owner => match lock.release(owner, h.token).await {
                Ok(true) => {
                    eprintln!(
                        "fencecheck run: the acquire got no answer after the server had \
                         granted it; released that lease (token {})",
                        h.token
                    );
                    return;
                }
                // Gone or someone else's by now: nothing of ours is held.
                Ok(false) => return,
                Err(_) => {}
            },
            // Nobody's, or someone else's: the timed-out acquire took nothing.
            Ok(_) => return,
            Err(_) => {}
        }
        let Some(pause) = backoff.next_pause(Instant::now(), Some(until)) else {
            eprintln!(
                "fencecheck run: the acquire of lock {:?} got no answer, and the server did \
                 not say whether it had granted it, for {budget:?}: if it did, the lock stays \
                 held for up to {:?} (its TTL)",
                args.name, args.ttl
            );
            return;
        };
        tokio::time::sleep(pause).await;
    }
}

/// Runs `attempt` until it succeeds or fails for a reason other than reachability; when `retry`,
/// an unreachable or slow service is tried again with a backoff (50 ms doubling to 1 s) until
/// `until` (`None`: for ever). One line says so the first time.
pub(super) async fn ride_out<T, F, Fut>(
    retry: bool,
    until: Option<Instant>,
    mut attempt: F,
) -> Result<T, BackendError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BackendError>>,
{
    let mut backoff = fencecheck::backend::retry::RIDE_OUT;
    let mut said = false;
    loop {
        match attempt().await {
            Err(e) if retry && e.is_transient() => {
                let Some(pause) = backoff.next_pause(Instant::now(), until) else {
                    return Err(e);
                };
                if !said {
                    eprintln!("fencecheck run: {e}; retrying until --wait runs out");
                    said = true;
                }
                tokio::time::sleep(pause).await;
            }
            other => return other,
        }
    }
}

/// The lease: taken at once (no `--wait`), or waited for while `--wait` lasts with an outage
/// ridden out. `Err` is what `run` returns without running anything: busy, or the service failed.
pub(super) async fn acquire_lease<L: LockService>(
    lock: &Arc<L>,
    owner: &str,
    (wait, until): (Option<Duration>, Option<Instant>),
    args: &RunArgs,
) -> Result<Grant, Result<ExitCode, UsageError>> {
    let acquired = match wait {
        Some(d) if d.is_zero() => match lock.try_acquire(owner).await {
            Ok(Acquired::Granted(g)) => Ok(Some(g)),
            Ok(Acquired::Busy { holder, .. }) => {
                eprintln!(
                    "fencecheck run: lock {:?} is held by {}; not running (use --wait to queue)",
                    args.name,
                    holder.as_deref().unwrap_or("someone else")
                );
                return Err(Ok(ExitCode::from(EXIT_LOCK_BUSY)));
            }
            Err(e) if e.fate_unknown() => {
                free_own_lease(lock.as_ref(), owner, args).await;
                Err(e)
            }
            Err(e) => Err(e),
        },
        // The time left of --wait at each attempt ("forever": a century), the outage ridden out.
        Some(_) | None => {
            let century = Duration::from_secs(100 * 365 * 86_400);
            let timed_out = std::cell::Cell::new(false);
            let acquired = ride_out(true, until, || {
                let left = until.map_or(century, |u| u.saturating_duration_since(Instant::now()));
                let timed_out = &timed_out;
                async move {
                    if timed_out.get() {
                        free_own_lease(lock.as_ref(), owner, args).await;
                    }
                    let r = lock.acquire(owner, left).await;
                    timed_out.set(r.as_ref().is_err_and(BackendError::fate_unknown));
                    r
                }
            })
            .await;
            // --wait ran out right after an acquire that timed out: free what it may have taken.
            if timed_out.get() {
                free_own_lease(lock.as_ref(), owner, args).await;
            }
            acquired
        }
    };
    match acquired {
        Ok(Some(g)) => Ok(g),
        Ok(None) => {
            eprintln!(
                "fencecheck run: lock {:?} still held after waiting {}; not running",
                args.name,
                args.wait.as_deref().unwrap_or("")
            );
            Err(Ok(ExitCode::from(EXIT_LOCK_BUSY)))
        }
        Err(e) => Err(backend_failure(e)),
    }
}
