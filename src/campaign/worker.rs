//! The campaign's client: what one worker does. `increments` times it takes the lease, reads
//! the counter in PostgreSQL, and writes it plus one under its token (or, as the control, without
//! it), saying each thing it observes as a line: the lock's and the storage's answers in the
//! trace format's words, plus `read N` and `done`.
//!
//! A worker is a process of its own (`fencecheck torture-worker`, so that the nemesis can stop
//! it whole) or, on the in-process lock, a thread sharing the lock.

use super::history::Line;
use super::CampaignError;
use crate::backend::retry::{RECONNECT, RIDE_OUT};
use crate::backend::{
    connect, monotonic_us, AnyLock, BackendError, FencedStorage, Grant, LocalLock, LockService,
    LockSpec, PgFencedStore, WriteOutcome,
};
use crate::protocol::{FencePolicy, Token};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long a worker keeps trying while the lock service fails (a killed server may take that
/// long to serve again).
const OUTAGE: Duration = Duration::from_secs(60);

/// What one worker does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// The PostgreSQL holding the counter.
    pub pg_url: String,
    /// The counter's table.
    pub table: String,
    /// The lock's name, which is also the counter's key.
    pub name: String,
    /// The worker's name as the lock's owner and in the trace (`w1`, `w2`, ...).
    pub owner: String,
    /// The lease's time to live.
    pub ttl_ms: u64,
    /// Increments to make.
    pub increments: u32,
    /// The pause after a grant and between the read and the write.
    pub think_ms: u64,
    /// The control: write without the token.
    pub no_fence: bool,
}

/// The environment variables of the worker protocol, in the order [`Job::env`] gives them.
const VARS: [&str; 9] = [
    "FENCECHECK_LOCK",
    "FENCECHECK_PG",
    "FENCECHECK_TABLE",
    "FENCECHECK_NAME",
    "FENCECHECK_OWNER",
    "FENCECHECK_TTL_MS",
    "FENCECHECK_INCREMENTS",
    "FENCECHECK_THINK_MS",
    "FENCECHECK_FENCE",
];

impl Job {
    /// The job as a worker's environment: the worker protocol, the same for fencecheck's own
    /// worker (`torture-worker`) and a user's (`--worker-cmd`). The lock service as one string
    /// (`redis://HOST:PORT`, `etcd://...`, `zk://...`, `raft://...`), the PostgreSQL
    /// connection string, the counter's table and key, the owner name to print, the TTL, the
    /// increments, the think time, and whether to write with the token.
    pub fn env(&self, lock: &LockSpec) -> Vec<(&'static str, String)> {
        let values = [
            lock.to_string(),
            self.pg_url.clone(),
            self.table.clone(),
            self.name.clone(),
            self.owner.clone(),
            self.ttl_ms.to_string(),
            self.increments.to_string(),
            self.think_ms.to_string(),
            u8::from(!self.no_fence).to_string(),
        ];
        VARS.into_iter().zip(values).collect()
    }

    /// The lock service and the job from a worker's environment, as [`Job::env`] sets it
    /// (`var` reads one variable). An error names the variable and what was expected.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<(LockSpec, Job), String> {
        let get = |name: &str| {
            var(name).ok_or_else(|| {
                format!(
                    "{name} is not set: a torture worker takes its job from FENCECHECK_* variables"
                )
            })
        };
        let number = |name: &str| -> Result<u64, String> {
            let text = get(name)?;
            text.trim()
                .parse()
                .map_err(|_| format!("{name}={text:?}: expected a whole number"))
        };
        let lock = get(VARS[0])?;
        let lock: LockSpec = lock
            .parse()
            .map_err(|e| format!("{}={lock:?}: {e}", VARS[0]))?;
        let increments = u32::try_from(number(VARS[6])?)
            .map_err(|_| format!("{}: expected at most {}", VARS[6], u32::MAX))?;
        let fence = get(VARS[8])?;
        let no_fence = match fence.trim() {
            "1" => false,
            "0" => true,
            _ => return Err(format!("{}={fence:?}: expected 1 or 0", VARS[8])),
        };
        let job = Job {
            pg_url: get(VARS[1])?,
            table: get(VARS[2])?,
            name: get(VARS[3])?,
            owner: get(VARS[4])?,
            ttl_ms: number(VARS[5])?,
            increments,
            think_ms: number(VARS[7])?,
            no_fence,
        };
        Ok((lock, job))
    }
}

/// One worker process: does `job` on the lock service at `spec`, printing each observation on
/// stdout stamped with the machine's monotonic clock.
pub fn run_worker(spec: LockSpec, job: &Job) -> Result<(), CampaignError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CampaignError::Unavailable(format!("a tokio runtime: {e}")))?;
    rt.block_on(async {
        let ttl = Duration::from_millis(job.ttl_ms);
        let lock = reconnect(&spec, &job.name, ttl).await?;
        let mut source = Remote { spec, ttl, lock };
        work(job, &mut source, &emit).await
    })
}

/// An in-process pause: the first worker to print a line starting with `at` stops (its thread
/// sleeps) for `lasting`.
pub(super) struct LocalPause {
    pub(super) at: &'static str,
    pub(super) struck: Arc<AtomicBool>,
    pub(super) lasting: Duration,
}

/// One worker of an in-process trial, on a thread of its own: its lines go to `tx`.
pub(super) fn local_worker(
    job: Job,
    lock: Arc<LocalLock>,
    w: usize,
    pause: Option<LocalPause>,
    tx: mpsc::Sender<Option<Line>>,
) -> Result<(), CampaignError> {
    let send = |text: String| {
        let _ = tx.send(Some(Line {
            worker: w,
            at: monotonic_us(),
            text,
        }));
    };
    let out = |text: &str| {
        send(text.to_string());
        let Some(p) = &pause else { return };
        if text.split(' ').next() == Some(p.at)
            && p.struck
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            // The whole worker stops, its database connection's task included (they share
            // this thread), as a stopped process would.
            let from = monotonic_us();
            std::thread::sleep(p.lasting);
            let _ = tx.send(Some(Line {
                worker: w,
                at: from,
                text: format!("nemesis-paused {}", monotonic_us()),
            }));
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    let result = rt.block_on(work(&job, &mut Shared(lock), &out));
    let _ = tx.send(None);
    result
}

/// A lock handle on `spec`, tried again under the one retry policy for up to [`OUTAGE`].
async fn reconnect(spec: &LockSpec, name: &str, ttl: Duration) -> Result<AnyLock, CampaignError> {
    let deadline = Instant::now() + OUTAGE;
    let mut backoff = RECONNECT;
    loop {
        match connect(spec, name, ttl, Duration::from_secs(5)).await {
            Ok(lock) => return Ok(lock),
            Err(e) => {
                if !backoff.pause(Some(deadline)).await {
                    return Err(CampaignError::Unavailable(format!("the lock service: {e}")));
                }
            }
        }
    }
}

/// Where a worker's lock comes from.
trait LockSource {
    type Lock: LockService;
    fn lock(&self) -> &Self::Lock;
    /// A fresh handle, after the lock service failed.
    async fn renew(&mut self, name: &str) -> Result<(), CampaignError>;
}

/// A lock service reached over the network.
struct Remote {
    spec: LockSpec,
    ttl: Duration,
    lock: AnyLock,
}

impl LockSource for Remote {
    type Lock = AnyLock;
    fn lock(&self) -> &AnyLock {
        &self.lock
    }
    async fn renew(&mut self, name: &str) -> Result<(), CampaignError> {
        self.lock = reconnect(&self.spec, name, self.ttl).await?;
        Ok(())
    }
}

/// The in-process lock, shared by the trial's worker threads.
struct Shared(Arc<LocalLock>);

impl LockSource for Shared {
    type Lock = LocalLock;
    fn lock(&self) -> &LocalLock {
        &self.0
    }
    async fn renew(&mut self, _: &str) -> Result<(), CampaignError> {
        Ok(())
    }
}

/// A worker's job on the lock from `source`, saying what it observes through `out`.
async fn work<S: LockSource>(
    job: &Job,
    source: &mut S,
    out: &dyn Fn(&str),
) -> Result<(), CampaignError> {
    let policy = if job.no_fence {
        FencePolicy::AcceptAll
    } else {
        FencePolicy::Fenced
    };
    // Long enough to outlast a stall of the database link (the TTL plus 200 ms at most).
    let patience = Duration::from_secs(30);
    let store = PgFencedStore::connect_with(&job.pg_url, &job.table, policy, patience)
        .await
        .map_err(unavailable)?;
    let (mut client, connection) = tokio_postgres::connect(&job.pg_url, tokio_postgres::NoTls)
        .await
        .map_err(postgres)?;
    tokio::spawn(connection);
    let mut attempts = 0;
    while attempts < job.increments {
        let Some(grant) = take_lease(job, source, out, &mut attempts).await? else {
            continue;
        };
        let t = grant.token;
        out(&format!("granted {t} {}", grant.ttl.as_micros()));
        // Getting ready to work (and a moment for the nemesis to strike the new holder).
        tokio::time::sleep(Duration::from_millis(job.think_ms)).await;
        out(&format!("work-started {t}"));
        let outcome = if job.no_fence {
            increment_unfenced(job, &store, t, out).await?
        } else {
            increment_fenced(job, &store, &mut client, t, out).await?
        };
        match outcome {
            WriteOutcome::Accepted => out(&format!("accepted {t}")),
            WriteOutcome::Stale(s) => out(&format!("rejected {t} {}", s.highest)),
        }
        out(&format!("work-stopped {t}"));
        out(&format!("release-sent {t}"));
        // A lease that ran out while this worker was paused may be gone with its session: an
        // error here is a release that was never answered.
        if let Ok(ok) = source.lock().release(&job.owner, t).await {
            out(&format!("released {t} {ok}"));
        }
    }
    out("done");
    Ok(())
}

/// One acquire. An answer counts as an attempt (`busy` included); a failed lock service leaves
/// the request unanswered, and the worker starts afresh under the one retry policy until the
/// service has failed for [`OUTAGE`] (killed, cut off, or its session expired under it).
async fn take_lease<S: LockSource>(
    job: &Job,
    source: &mut S,
    out: &dyn Fn(&str),
    attempts: &mut u32,
) -> Result<Option<Grant>, CampaignError> {
    let deadline = Instant::now() + OUTAGE;
    let mut backoff = RIDE_OUT;
    loop {
        out("acquire-sent");
        match source.lock().acquire(&job.owner, OUTAGE).await {
            Ok(grant) => {
                *attempts += 1;
                if grant.is_none() {
                    out("busy");
                }
                return Ok(grant);
            }
            Err(e) => {
                out(&format!("lock-error {e}"));
                if !backoff.pause(Some(deadline)).await {
                    return Err(CampaignError::Unavailable(format!(
                        "the lock service failed for {} s: {e}",
                        OUTAGE.as_secs()
                    )));
                }
                source.renew(&job.name).await?;
            }
        }
    }
}

/// The control's increment: read, then write without a fence (a plain upsert).
async fn increment_unfenced(
    job: &Job,
    store: &PgFencedStore,
    t: Token,
    out: &dyn Fn(&str),
) -> Result<WriteOutcome, CampaignError> {
    let v = store
        .read(&job.name)
        .await
        .map_err(unavailable)?
        .map_or(0, |s| counter(&s.value));
    out(&format!("read {v}"));
    tokio::time::sleep(Duration::from_millis(job.think_ms)).await;
    out(&format!("write-sent {t}"));
    store
        .write(&job.name, t, (v + 1).to_string().as_bytes())
        .await
        .map_err(unavailable)
}

/// The fenced increment, in one transaction: the fence first (it holds the row until commit),
/// then read, add one, write.
async fn increment_fenced(
    job: &Job,
    store: &PgFencedStore,
    client: &mut tokio_postgres::Client,
    t: Token,
    out: &dyn Fn(&str),
) -> Result<WriteOutcome, CampaignError> {
    let key = job.name.as_str();
    out(&format!("write-sent {t}"));
    let tx = client.transaction().await.map_err(postgres)?;
    let outcome = store.fence(&tx, key, t).await.map_err(unavailable)?;
    if outcome.is_accepted() {
        let sql = format!("SELECT value FROM {} WHERE key = $1", job.table);
        let row = tx.query_one(&sql, &[&key]).await.map_err(postgres)?;
        let v = counter(&row.get::<_, Vec<u8>>(0));
        out(&format!("read {v}"));
        tokio::time::sleep(Duration::from_millis(job.think_ms)).await;
        let sql = format!("UPDATE {} SET value = $2 WHERE key = $1", job.table);
        let next = (v + 1).to_string().into_bytes();
        tx.execute(&sql, &[&key, &next]).await.map_err(postgres)?;
        tx.commit().await.map_err(postgres)?;
    }
    Ok(outcome)
}

fn unavailable(e: BackendError) -> CampaignError {
    CampaignError::Unavailable(e.to_string())
}

fn postgres(e: tokio_postgres::Error) -> CampaignError {
    CampaignError::Unavailable(format!("postgres: {e}"))
}

/// The counter's value as stored (decimal text; empty is 0).
pub(super) fn counter(value: &[u8]) -> u64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Prints one observation, stamped with the shared clock.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{} {text}", monotonic_us());
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn job() -> Job {
        Job {
            pg_url: "host=10.200.0.1 port=5432 user=postgres dbname=postgres".into(),
            table: "fencecheck_torture".into(),
            name: "torture-1-0".into(),
            owner: "w2".into(),
            ttl_ms: 300,
            increments: 3,
            think_ms: 60,
            no_fence: true,
        }
    }

    #[test]
    fn a_job_reads_back_from_the_environment_it_sets() {
        let lock: LockSpec = "raft://127.0.0.1:7001,127.0.0.1:7002".parse().unwrap();
        let env: HashMap<&str, String> = job().env(&lock).into_iter().collect();
        let (read_lock, read_job) = Job::from_env(|k| env.get(k).cloned()).unwrap();
        assert_eq!((read_lock, read_job), (lock, job()));
    }

    #[test]
    fn a_bad_or_missing_variable_is_named() {
        let lock: LockSpec = "redis://127.0.0.1:6379".parse().unwrap();
        let env: HashMap<&str, String> = job().env(&lock).into_iter().collect();
        for (var, value, expected) in [
            (
                "FENCECHECK_FENCE",
                Some("yes"),
                "FENCECHECK_FENCE=\"yes\": expected 1 or 0",
            ),
            (
                "FENCECHECK_TTL_MS",
                Some("3s"),
                "FENCECHECK_TTL_MS=\"3s\": expected a whole number",
            ),
            (
                "FENCECHECK_LOCK",
                Some("ftp://x"),
                "FENCECHECK_LOCK=\"ftp://x\": ",
            ),
            ("FENCECHECK_OWNER", None, "FENCECHECK_OWNER is not set"),
        ] {
            let mut env = env.clone();
            match value {
                Some(v) => env.insert(var, v.to_string()),
                None => env.remove(var),
            };
            let err = Job::from_env(|k| env.get(k).cloned()).unwrap_err();
            assert!(err.starts_with(expected), "{var}: {err}");
        }
    }
}
