//! One trial: start the workers, strike once with the trial's nemesis when a holder reaches the
//! strike line, collect every line they print until they are done, and turn them into the
//! trial's record.

use super::history::{self, Line, Struck};
use super::links::Links;
use super::nemesis::{Nemesis, SKEW};
use super::worker::{local_worker, Job, LocalPause};
use super::{CampaignError, ServerControl, Settings};
use crate::backend::{monotonic_us, LocalLock, LockService, LockSpec};
use crate::check::campaign::TrialRecord;
use fencecheck_testkit::netns::Node;
use fencecheck_testkit::signal;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a trial's workers may take before the trial is abandoned.
const TRIAL_LIMIT_US: u64 = 180_000_000;

/// How often a trial looks whether the campaign is to stop.
const CHECK_STOP: Duration = Duration::from_millis(200);

/// How many lengths a pause, a stall or a partition (or a holder stopped through a server's
/// restart) lasts at most when no successor's write ends it sooner.
const HANDOVER_AT_MOST: u64 = 8;

/// What a trial runs against.
pub(super) struct Setup<'a> {
    pub(super) settings: &'a Settings,
    /// The lock service; `None` for the in-process lock.
    pub(super) spec: Option<&'a LockSpec>,
    pub(super) pg_url: &'a str,
    pub(super) table: &'a str,
    /// The lock's name and the counter's key.
    pub(super) name: String,
    pub(super) nemesis: Nemesis,
    /// The worker line the nemesis strikes at: `granted` (before the holder writes) or `read`
    /// (inside its write).
    pub(super) strike_at: &'static str,
    /// libfaketime, for the clock-skew nemesis.
    pub(super) faketime: Option<&'a Path>,
    /// This program, whose `torture-worker` command is a worker.
    pub(super) exe: &'a Path,
    /// Each worker's network node, for the partition nemesis (empty otherwise).
    pub(super) nodes: &'a [Node],
    /// Set when the campaign is to stop.
    pub(super) stop: &'a AtomicBool,
}

/// A trial's running workers: processes, or threads on the in-process lock.
struct Workers {
    children: Vec<Child>,
    threads: Vec<JoinHandle<Result<(), CampaignError>>>,
    /// The stall nemesis's proxies, one set per worker.
    links: Vec<Links>,
    /// Every worker's lines; `None` when one has finished.
    rx: mpsc::Receiver<Option<Line>>,
    /// The worker running with a skewed clock.
    skewed: Option<usize>,
}

impl Workers {
    fn kill_all(&mut self) {
        for c in &mut self.children {
            let _ = signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A pause, stall or partition in force: whom, since when, until when at the latest and at the
/// earliest (µs, CLOCK_MONOTONIC), and the lock server a partition cut off with the holder.
struct Holding {
    worker: usize,
    from: u64,
    until: u64,
    at_least: u64,
    leader: Option<String>,
}

/// Runs trial `i`; returns what it recorded (the final value and read still to come) and the
/// TTL the server granted.
pub(super) fn run(
    setup: &Setup,
    i: u32,
    servers: &mut dyn ServerControl,
) -> Result<(TrialRecord, Duration), CampaignError> {
    let trial_start = monotonic_us();
    let overshoot = Duration::from_millis(20 + u64::from(i) * 37 % 180);
    let mut workers = start(setup, i, overshoot)?;
    let watched = watch(setup, i, &mut workers, overshoot, servers);
    let (lines, mut faults, ttl) = match watched {
        Ok(w) => w,
        Err(e) => {
            workers.kill_all();
            return Err(e);
        }
    };
    finish(&mut workers, i)?;
    if let Some(w) = workers.skewed {
        faults.push(Struck {
            who: format!("w{}", w + 1),
            what: format!("clock at a quarter speed (libfaketime {SKEW:?})"),
            from: trial_start,
            to: monotonic_us(),
        });
    }
    let workers = setup.settings.workers as usize;
    Ok((history::record(lines, faults, workers), ttl))
}

/// Starts the trial's workers.
fn start(setup: &Setup, i: u32, overshoot: Duration) -> Result<Workers, CampaignError> {
    let s = setup.settings;
    let (tx, rx) = mpsc::channel::<Option<Line>>();
    let mut workers = Workers {
        children: Vec::new(),
        threads: Vec::new(),
        links: Vec::new(),
        rx,
        skewed: (setup.nemesis == Nemesis::ClockSkew).then_some(i as usize % s.workers as usize),
    };
    // The in-process lock, shared by this trial's worker threads; the first of them to reach
    // the strike line pauses itself (its thread stops).
    let local = match setup.spec {
        None => Some(Arc::new(
            LocalLock::new(s.ttl).map_err(|e| CampaignError::Settings(e.to_string()))?,
        )),
        Some(_) => None,
    };
    let struck_local = Arc::new(AtomicBool::new(false));
    for w in 0..s.workers as usize {
        let (spec, pg_url) = if setup.nemesis == Nemesis::Stall {
            workers.links.push(Links::new(setup.spec, setup.pg_url)?);
            (
                workers.links[w].spec.clone(),
                workers.links[w].pg_url.clone(),
            )
        } else {
            (setup.spec.cloned(), setup.pg_url.to_string())
        };
        let job = Job {
            pg_url,
            table: setup.table.to_string(),
            name: setup.name.clone(),
            owner: format!("w{}", w + 1),
            ttl_ms: s.ttl.as_millis() as u64,
            increments: s.increments,
            think_ms: s.think().as_millis() as u64,
            no_fence: !s.fenced,
        };
        let tx = tx.clone();
        let Some(spec) = spec else {
            let lock = Arc::clone(local.as_ref().expect("in-process"));
            let pause = (setup.nemesis == Nemesis::Pause).then(|| LocalPause {
                at: setup.strike_at,
                struck: Arc::clone(&struck_local),
                lasting: s.strike_length(lock.ttl().granted(), overshoot),
            });
            let thread = std::thread::spawn(move || local_worker(job, lock, w, pause, tx));
            workers.threads.push(thread);
            continue;
        };
        // One worker protocol: the job in the environment, for fencecheck's worker and a user's.
        let mut cmd = match &s.worker_cmd {
            // The command replaces the shell, so that pause and kill reach it.
            Some(user) => {
                let mut c = Command::new("sh");
                c.arg("-c").arg(format!("exec {user}"));
                c
            }
            None => {
                let mut c = Command::new(setup.exe);
                c.arg("torture-worker");
                c
            }
        };
        cmd.envs(job.env(&spec)).stdout(Stdio::piped());
        if setup.nemesis == Nemesis::Partition {
            setup.nodes[w].enter(&mut cmd);
        }
        if workers.skewed == Some(w) {
            let lib = setup.faketime.expect("checked before the campaign");
            cmd.env("LD_PRELOAD", lib).env("FAKETIME", SKEW);
        }
        let mut child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                workers.kill_all();
                let what = match &s.worker_cmd {
                    Some(user) => format!("sh -c 'exec {user}'"),
                    None => setup.exe.display().to_string(),
                };
                return Err(CampaignError::Unavailable(format!(
                    "cannot start a worker ({what}): {e}"
                )));
            }
        };
        forward(child.stdout.take().expect("piped"), w, tx);
        workers.children.push(child);
    }
    Ok(workers)
}

/// Forwards worker `w`'s stdout, line by line (`MICROSECONDS TEXT`), then says it finished.
fn forward(out: std::process::ChildStdout, w: usize, tx: mpsc::Sender<Option<Line>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let Some((at, text)) = line.split_once(' ') else {
                continue;
            };
            let Ok(at) = at.parse() else { continue };
            let line = Line {
                worker: w,
                at,
                text: text.to_string(),
            };
            if tx.send(Some(line)).is_err() {
                return;
            }
        }
        let _ = tx.send(None);
    });
}

/// Collects the workers' lines until every worker is done, striking once at the first
/// `strike_at` line: a pause or a stall lasts the granted TTL plus `overshoot`. Returns the
/// lines, the faults and the TTL the service granted.
fn watch(
    setup: &Setup,
    i: u32,
    workers: &mut Workers,
    overshoot: Duration,
    servers: &mut dyn ServerControl,
) -> Result<(Vec<Line>, Vec<Struck>, Duration), CampaignError> {
    let nemesis = setup.nemesis;
    let local = setup.spec.is_none();
    let fault_name = match (nemesis, local) {
        (Nemesis::Stall, true) => "stalled (cut off from the database)",
        (Nemesis::Stall, false) => "stalled (cut off from lock service and database)",
        (Nemesis::KillServer, _) => "paused (SIGSTOP) while the server restarted",
        (Nemesis::Partition, _) => "cut off (partition: every packet to and from it dropped)",
        _ => "paused (SIGSTOP)",
    };
    let mut faults = Vec::new();
    let mut holding: Option<Holding> = None;
    // Clock skew strikes at the start; an in-process pause, in the worker itself.
    let mut struck = nemesis == Nemesis::ClockSkew || (local && nemesis == Nemesis::Pause);
    let mut lines: Vec<Line> = Vec::new();
    let mut ttl = setup.settings.ttl;
    let mut open = setup.settings.workers as usize;
    let give_up = monotonic_us() + TRIAL_LIMIT_US;
    while open > 0 {
        let now = monotonic_us();
        if setup.stop.load(Ordering::SeqCst) {
            if let Some(h) = holding.take() {
                let _ = end_fault(&h, setup, workers, servers, fault_name, now);
            }
            return Err(CampaignError::Interrupted { trial: i + 1 });
        }
        if now > give_up {
            return Err(CampaignError::Unavailable(format!(
                "trial {}: the workers did not finish within {} s",
                i + 1,
                TRIAL_LIMIT_US / 1_000_000
            )));
        }
        if holding.as_ref().is_some_and(|h| now >= h.until) {
            let h = holding.take().expect("just seen");
            let ended = end_fault(&h, setup, workers, servers, fault_name, now);
            faults.extend(ended.map_err(CampaignError::Unavailable)?);
        }
        let wait = match &holding {
            Some(h) => Duration::from_micros(h.until.saturating_sub(now)),
            None => CHECK_STOP,
        }
        .min(CHECK_STOP);
        let line = match workers.rx.recv_timeout(wait) {
            Ok(Some(line)) => line,
            Ok(None) => {
                open -= 1;
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if let Some(to) = line.text.strip_prefix("nemesis-paused ") {
            faults.push(Struck {
                who: format!("w{}", line.worker + 1),
                what: "paused (its thread stopped)".into(),
                from: line.at,
                to: to.parse().unwrap_or(line.at),
            });
            continue;
        }
        if let Some(rest) = line.text.strip_prefix("granted ") {
            if let Some(us) = rest.split(' ').nth(1).and_then(|t| t.parse().ok()) {
                ttl = Duration::from_micros(us);
            }
        }
        if !struck && line.text.split(' ').next() == Some(setup.strike_at) {
            struck = true;
            let lasting = setup.settings.strike_length(ttl, overshoot);
            holding = strike(setup, line.worker, lasting, workers, servers, &mut faults)?;
        }
        if let Some(h) = &mut holding {
            // A fault ends once a successor has sent its write (plus the overshoot), and not
            // before its own length: the handover it forced is what the trial is for, however
            // long the service took to get there (etcd revokes an expired lease up to a second
            // late, a new leader renews every lease). Not once the write is answered: a holder
            // stopped inside its transaction keeps the row locked.
            if line.worker != h.worker && line.text.starts_with("write-sent ") {
                let after = line.at.max(now) + overshoot.as_micros() as u64;
                h.until = h.until.min(after.max(h.at_least));
            }
        }
        lines.push(line);
    }
    if let Some(h) = &holding {
        let ended = end_fault(h, setup, workers, servers, fault_name, monotonic_us());
        faults.extend(ended.map_err(CampaignError::Unavailable)?);
    }
    Ok((lines, faults, ttl))
}

/// The nemesis strikes worker `w` for `lasting` (a pause or a stall) or the lock server.
fn strike(
    setup: &Setup,
    w: usize,
    lasting: Duration,
    workers: &Workers,
    servers: &mut dyn ServerControl,
    faults: &mut Vec<Struck>,
) -> Result<Option<Holding>, CampaignError> {
    let from = monotonic_us();
    // A pause or a stall lasts its length, and on until a successor's write (see `watch`), at
    // most eight lengths.
    let holding = Holding {
        worker: w,
        from,
        until: from + HANDOVER_AT_MOST * lasting.as_micros() as u64,
        at_least: from + lasting.as_micros() as u64,
        leader: None,
    };
    match setup.nemesis {
        Nemesis::Pause => {
            let stopped = signal(workers.children[w].id(), libc::SIGSTOP).is_ok();
            Ok(stopped.then_some(holding))
        }
        Nemesis::Stall => {
            workers.links[w].freeze();
            Ok(Some(holding))
        }
        Nemesis::KillServer => {
            // The holder stopped past its lease while the server restarts under it: the
            // restarted service must still know the lease and hand the successor a larger token.
            let stopped = signal(workers.children[w].id(), libc::SIGSTOP).is_ok();
            let which = servers
                .kill_and_restart()
                .map_err(CampaignError::Unavailable)?;
            if let Some(which) = which {
                faults.push(Struck {
                    who: "server".into(),
                    what: format!("{which} killed (kill -9) and restarted"),
                    from,
                    to: monotonic_us(),
                });
            }
            // Until a successor sends its write (see `watch`), at most eight pauses from the
            // restart: a cluster renews every lease when a new leader takes over (etcd,
            // ZooKeeper), which may come after the killed member serves again, so the holder's
            // lease runs out only a TTL after that.
            let restarted = monotonic_us();
            Ok(stopped.then_some(Holding {
                until: restarted + HANDOVER_AT_MOST * lasting.as_micros() as u64,
                at_least: from,
                ..holding
            }))
        }
        Nemesis::Partition => {
            // Until a successor sends its write (see `watch`), at most eight pauses: a new
            // leader renews every lease, and waiters whose requests went to the cut-off leader
            // hear nothing until their request times out.
            let cut = |e: std::io::Error| CampaignError::Unavailable(format!("partition: {e}"));
            setup.nodes[w].isolate().map_err(cut)?;
            let leader = servers.isolate_leader();
            let leader =
                leader.map_err(|e| CampaignError::Unavailable(format!("partition: {e}")))?;
            Ok(Some(Holding {
                at_least: from,
                leader,
                ..holding
            }))
        }
        Nemesis::ClockSkew => Ok(None),
    }
}

/// Ends a pause, a stall or a partition; the faults as they were.
fn end_fault(
    h: &Holding,
    setup: &Setup,
    workers: &Workers,
    servers: &mut dyn ServerControl,
    what: &str,
    now: u64,
) -> Result<Vec<Struck>, String> {
    let mut faults = Vec::new();
    match setup.nemesis {
        Nemesis::Stall => workers.links[h.worker].thaw(),
        Nemesis::Partition => {
            setup.nodes[h.worker]
                .heal()
                .map_err(|e| format!("healing a partition: {e}"))?;
            servers.heal()?;
            if let Some(leader) = &h.leader {
                faults.push(Struck {
                    who: "server".into(),
                    what: format!("{leader} cut off from its peers and clients"),
                    from: h.from,
                    to: now,
                });
            }
        }
        _ => {
            if let Some(c) = workers.children.get(h.worker) {
                let _ = signal(c.id(), libc::SIGCONT);
            }
        }
    }
    faults.push(Struck {
        who: format!("w{}", h.worker + 1),
        what: what.into(),
        from: h.from,
        to: now,
    });
    Ok(faults)
}

/// Waits for every worker; the first one that failed is the trial's error.
fn finish(workers: &mut Workers, i: u32) -> Result<(), CampaignError> {
    let failed = |w: usize, e: String| {
        CampaignError::Unavailable(format!("trial {}: worker w{}: {e}", i + 1, w + 1))
    };
    for (w, t) in std::mem::take(&mut workers.threads).into_iter().enumerate() {
        t.join()
            .map_err(|_| failed(w, "panicked".into()))?
            .map_err(|e| failed(w, e.to_string()))?;
    }
    for w in 0..workers.children.len() {
        let status = workers.children[w]
            .wait()
            .map_err(|e| failed(w, e.to_string()))?;
        if !status.success() {
            workers.kill_all();
            return Err(failed(w, format!("failed ({status}); its error is above")));
        }
    }
    Ok(())
}
