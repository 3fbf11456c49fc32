//! Recording what a lock's clients observe, for any backend: [`TracedLock`] wraps a
//! [`LockService`] and [`TracedStore`] a [`FencedStorage`]; both write to one [`Recorder`], whose
//! [`Trace`] `check::trace::validate` replays through the model.
//!
//! One recorder per lock and storage key: the model replays one lease and one fenced register.
//! A request that fails (a timeout, a lost connection) is recorded as sent and never answered,
//! which the model reads as a request the server may or may not have handled.

use super::contract::{
    Acquired, BackendError, FencedStorage, Grant, Holder, LockService, WriteOutcome, WriteResult,
};
use crate::protocol::Ttl;
use crate::protocol::{Observed, Token, Trace};
use crate::sync::Mutex;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One clock and one trace, shared by the traced locks and stores of a run.
///
/// ```
/// use fencecheck::backend::{LocalLock, LockService, Recorder};
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let recorder = Recorder::new();
/// let lock = recorder.lock(LocalLock::new(Duration::from_secs(1)).unwrap());
/// let grant = lock.acquire("A", Duration::from_secs(1)).await.unwrap().unwrap();
/// lock.release("A", grant.token).await.unwrap();
/// let trace = recorder.trace();
/// assert_eq!(trace.len(), 4); // asked, granted, release sent, released
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct Recorder {
    shared: Arc<Shared>,
}

struct Shared {
    clock: Clock,
    trace: Mutex<Trace>,
    /// Where each event is also written as a line, and the first error writing there.
    sink: Mutex<Option<Sink>>,
}

struct Sink {
    out: Box<dyn Write + Send>,
    error: Option<String>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("clock", &self.clock)
            .field("events", &self.trace.lock().len())
            .finish()
    }
}

/// What a recorder stamps its events with.
#[derive(Clone, Copy, Debug)]
enum Clock {
    /// Microseconds since the recorder was made.
    Since(Instant),
    /// The machine's monotonic clock ([`monotonic_us`]), the same in every process.
    Monotonic,
}

/// The machine's monotonic clock (CLOCK_MONOTONIC on Linux) in microseconds: one clock for every
/// process on the machine, so the traces several processes record can be merged. Read with the
/// system call itself, which libfaketime does not intercept.
pub fn monotonic_us() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: the clock_gettime system call writes the timespec it is given;
        // CLOCK_MONOTONIC always exists.
        unsafe {
            libc::syscall(
                libc::SYS_clock_gettime,
                libc::CLOCK_MONOTONIC,
                &mut ts as *mut libc::timespec,
            )
        };
        u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000
            + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000
    }
    #[cfg(not(target_os = "linux"))]
    {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let start = *START.get_or_init(Instant::now);
        u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub fn new() -> Self {
        Self::with(Clock::Since(Instant::now()), None)
    }

    /// A recorder that also writes every event to `out` as it happens, one
    /// [`TraceEvent::line`](crate::protocol::TraceEvent::line) each, stamped with the machine's
    /// [monotonic clock](monotonic_us): the files of several processes on one machine merge
    /// into one trace, and a process killed mid-run leaves every event it observed.
    pub fn writing_to(out: impl Write + Send + 'static) -> Self {
        let sink = Sink {
            out: Box::new(out),
            error: None,
        };
        Self::with(Clock::Monotonic, Some(sink))
    }

    fn with(clock: Clock, sink: Option<Sink>) -> Self {
        Recorder {
            shared: Arc::new(Shared {
                clock,
                trace: Mutex::new(Trace::new()),
                sink: Mutex::new(sink),
            }),
        }
    }

    /// `who` observed `what` now.
    pub fn record(&self, who: &str, what: Observed) {
        let at = match self.shared.clock {
            Clock::Since(start) => u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
            Clock::Monotonic => monotonic_us(),
        };
        let line = {
            let mut trace = self.shared.trace.lock();
            trace.record(at, who, what);
            trace.events().last().map(|e| e.line())
        };
        let mut sink = self.shared.sink.lock();
        if let (Some(sink), Some(line)) = (sink.as_mut(), line) {
            if sink.error.is_none() {
                let written = writeln!(sink.out, "{line}").and_then(|()| sink.out.flush());
                if let Err(e) = written {
                    sink.error = Some(e.to_string());
                }
            }
        }
    }

    /// Writes `text` to the file as a comment line (`# text`), which trace readers skip or read
    /// for settings (`fencecheck validate` reads `# ttl-us N`). Nothing for a recorder without a
    /// file.
    pub fn note(&self, text: &str) {
        let mut sink = self.shared.sink.lock();
        if let Some(sink) = sink.as_mut() {
            if sink.error.is_none() {
                let line = text.replace('\n', " ");
                let written = writeln!(sink.out, "# {line}").and_then(|()| sink.out.flush());
                if let Err(e) = written {
                    sink.error = Some(e.to_string());
                }
            }
        }
    }

    /// What was recorded so far.
    pub fn trace(&self) -> Trace {
        self.shared.trace.lock().clone()
    }

    /// The first error writing events out ([`Recorder::writing_to`]); events after it were kept
    /// in memory only.
    pub fn write_error(&self) -> Option<String> {
        self.shared
            .sink
            .lock()
            .as_ref()
            .and_then(|s| s.error.clone())
    }

    /// `lock`, recording its clients' requests and answers here.
    pub fn lock<L: LockService>(&self, lock: L) -> TracedLock<L> {
        TracedLock {
            lock,
            recorder: self.clone(),
        }
    }

    /// `store` as seen by the client `who`, recording its writes and answers here.
    pub fn store<S: FencedStorage>(&self, store: Arc<S>, who: &str) -> TracedStore<S> {
        TracedStore {
            store,
            who: who.to_string(),
            recorder: self.clone(),
        }
    }
}

/// A [`LockService`] whose acquires, renewals and releases are recorded (reads and publishing
/// are passed through unrecorded: they change nothing the model replays).
#[derive(Debug)]
pub struct TracedLock<L> {
    lock: L,
    recorder: Recorder,
}

impl<L> TracedLock<L> {
    /// The lock inside.
    pub fn inner(&self) -> &L {
        &self.lock
    }
}

impl<L: LockService> LockService for TracedLock<L> {
    fn ttl(&self) -> Ttl {
        self.lock.ttl()
    }

    async fn try_acquire(&self, owner: &str) -> Result<Acquired, BackendError> {
        self.recorder.record(owner, Observed::AcquireSent);
        let answer = self.lock.try_acquire(owner).await?;
        let seen = match &answer {
            Acquired::Granted(g) => Observed::Granted { token: g.token },
            Acquired::Busy { .. } => Observed::Busy,
        };
        self.recorder.record(owner, seen);
        Ok(answer)
    }

    async fn extend(&self, owner: &str, token: Token) -> Result<Option<Grant>, BackendError> {
        self.recorder.record(owner, Observed::RenewSent { token });
        let answer = self.lock.extend(owner, token).await?;
        let ok = answer.is_some();
        self.recorder.record(owner, Observed::Renewed { token, ok });
        Ok(answer)
    }

    async fn publish(&self, owner: &str, token: Token, value: &str) -> Result<bool, BackendError> {
        self.lock.publish(owner, token, value).await
    }

    async fn holder(&self) -> Result<Option<Holder>, BackendError> {
        self.lock.holder().await
    }

    async fn release(&self, owner: &str, token: Token) -> Result<bool, BackendError> {
        self.recorder.record(owner, Observed::ReleaseSent { token });
        let ok = self.lock.release(owner, token).await?;
        self.recorder
            .record(owner, Observed::Released { token, ok });
        Ok(ok)
    }

    /// The backend's own acquire (a queue wait on etcd and ZooKeeper), recorded as one request:
    /// granted, or busy when the time ran out.
    async fn acquire(&self, owner: &str, timeout: Duration) -> Result<Option<Grant>, BackendError> {
        self.recorder.record(owner, Observed::AcquireSent);
        let answer = self.lock.acquire(owner, timeout).await?;
        let seen = match &answer {
            Some(g) => Observed::Granted { token: g.token },
            None => Observed::Busy,
        };
        self.recorder.record(owner, seen);
        Ok(answer)
    }
}

/// One client's handle on a [`FencedStorage`] whose writes are recorded in its name.
#[derive(Debug)]
pub struct TracedStore<S> {
    store: Arc<S>,
    who: String,
    recorder: Recorder,
}

impl<S: FencedStorage> FencedStorage for TracedStore<S> {
    async fn write(&self, key: &str, token: Token, value: &[u8]) -> WriteResult {
        self.recorder
            .record(&self.who, Observed::WriteSent { token });
        let outcome = self.store.write(key, token, value).await?;
        let seen = match &outcome {
            WriteOutcome::Accepted => Observed::WriteAccepted { token },
            WriteOutcome::Stale(s) => Observed::WriteRejected {
                token,
                highest: s.highest,
            },
        };
        self.recorder.record(&self.who, seen);
        Ok(outcome)
    }

    async fn read(&self, key: &str) -> Result<Option<super::Stored>, BackendError> {
        self.store.read(key).await
    }
}
