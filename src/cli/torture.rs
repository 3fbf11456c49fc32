//! `fencecheck torture`: flags, the servers the campaign runs against, and what it prints. The
//! campaign itself (workers, nemeses, histories) is [`fencecheck::campaign`]; its trials are
//! judged by [`fencecheck::check::campaign`].

use super::servers::Started;
use super::target::{Kind, LockArg};
use super::{exit, write_file, UsageError};
use clap::Args;
use fencecheck::backend::LockSpec;
use fencecheck::campaign::worker::{run_worker, Job};
use fencecheck::campaign::{
    Campaign, CampaignError, Nemesis, Outcome, ServerControl, Settings, Target, TrialDone,
};
use fencecheck::check::campaign::worst;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

#[derive(Debug, Args)]
pub(super) struct TortureArgs {
    /// Where the lock lives: a kind alone (redis, etcd, zk, raft: throwaway servers, raft a
    /// 3-node cluster of this program's `raft-node`; local: the in-process lock, whose workers
    /// are threads of `torture` sharing it, a paused worker's thread stopping whole and a
    /// stalled one's database link freezing) or a lock service's address (redis://HOST:PORT,
    /// etcd://HOST:PORT,..., zk://HOST:PORT,..., raft://HOST:PORT,...).
    #[arg(long, value_name = "SPEC", default_value = "redis")]
    lock: LockArg,
    /// The PostgreSQL the workers write the counter to (default: a throwaway cluster).
    #[arg(long, value_name = "URL")]
    pg_url: Option<String>,
    /// Trials to run (each with its own lock and counter).
    #[arg(long, value_name = "N", default_value_t = 20)]
    trials: u32,
    /// Worker processes per trial (2 to 16).
    #[arg(long, value_name = "N", default_value_t = 3)]
    workers: u32,
    /// Increments each worker makes per trial (1 to 100).
    #[arg(long, value_name = "N", default_value_t = 3)]
    increments: u32,
    /// The lease's time to live in milliseconds (50 to 10000; etcd rounds up to whole seconds,
    /// ZooKeeper to its session-timeout bounds, and the trials run on the TTL granted).
    #[arg(long, value_name = "MS", default_value_t = 300)]
    ttl_ms: u64,
    /// Faults to inject, comma-separated; trial i gets the (i mod n)-th. pause: SIGSTOP a
    /// holder past its lease and its successor's write; stall: freeze a holder's links to the
    /// lock service and the database as long; kill-server: kill -9 the lock server (a
    /// cluster's leader) and restart it while the holder is stopped past its lease;
    /// partition: drop the holder's and the cluster leader's packets until a successor writes
    /// (etcd, ZooKeeper and raft clusters torture starts, in network namespaces of its own; root);
    /// clock-skew: one worker's clocks at a quarter speed (libfaketime). The totals say how
    /// often each struck.
    #[arg(
        long,
        value_name = "NEMESIS,...",
        value_delimiter = ',',
        default_value = "pause"
    )]
    nemesis: Vec<Nemesis>,
    /// The control: write the counter without the token (a plain upsert), and watch increments
    /// get lost.
    #[arg(long)]
    no_fence: bool,
    /// Put your own lock client under the campaign: each worker runs `sh -c 'exec CMD'` with
    /// its job in FENCECHECK_* variables and prints what it observes as trace lines on stdout
    /// (docs/campaign.md, "Your own client"). Default: fencecheck's own worker.
    #[arg(long, value_name = "CMD")]
    worker_cmd: Option<String>,
    /// Write torture.md, torture.html and worst-trial.svg (the timeline of the worst trial) to
    /// DIR, and each trial's history and verdict as it ends (DIR/trials/NNN/trace, a trace
    /// file `fencecheck validate` re-checks, and DIR/trials/NNN/verdict.txt).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

/// One worker of a trial (started by `torture`, not by hand): its job comes in FENCECHECK_*
/// variables, the protocol a `--worker-cmd` worker follows too (docs/campaign.md).
#[derive(Debug, Args)]
pub(super) struct WorkerArgs {}

impl ServerControl for Started {
    fn kill_and_restart(&mut self) -> Result<Option<String>, String> {
        Started::kill_and_restart(self).map_err(|e| e.0)
    }

    fn isolate_leader(&mut self) -> Result<Option<String>, String> {
        Started::isolate_leader(self).map_err(|e| e.0)
    }

    fn heal(&mut self) -> Result<(), String> {
        Started::heal(self).map_err(|e| e.0)
    }
}

/// A campaign error as the command reports it: bad settings are usage (exit 2); a server, the
/// database or a worker that cannot be used is exit 69.
fn failed(e: CampaignError) -> ExitCode {
    match e {
        CampaignError::Settings(m) => {
            eprintln!("error: {m}");
            exit::code(exit::USAGE)
        }
        CampaignError::Unavailable(m) => {
            eprintln!("error: {m}");
            exit::code(exit::UNAVAILABLE)
        }
        CampaignError::Interrupted { trial } => {
            let sig = STOPPED_BY.load(Ordering::SeqCst);
            eprintln!(
                "interrupted by signal {sig} during trial {trial}: its workers were killed and \
                 the servers torture started are stopped; the trials before it are reported"
            );
            exit::code(exit::INTERRUPTED_BASE.saturating_add(sig.clamp(0, 127) as u8))
        }
    }
}

/// The signal that asked the campaign to stop (0: none yet).
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);
/// Set by the handler: the campaign abandons its trial and returns, so that the servers torture
/// started are stopped on the way out rather than left running.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(sig: libc::c_int) {
    // Only atomics: async-signal-safe.
    STOPPED_BY.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP stop the campaign in an orderly way (see [`STOP`]).
fn stop_on_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics; installing it changes nothing else.
        unsafe {
            libc::signal(
                sig,
                on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

pub(super) fn run(args: TortureArgs) -> Result<ExitCode, UsageError> {
    let mut nemeses: Vec<Nemesis> = Vec::new();
    for n in &args.nemesis {
        if !nemeses.contains(n) {
            nemeses.push(*n);
        }
    }
    let settings = Settings {
        trials: args.trials,
        workers: args.workers,
        increments: args.increments,
        ttl: Duration::from_millis(args.ttl_ms),
        nemeses,
        fenced: !args.no_fence,
        worker_cmd: args.worker_cmd.clone(),
    };
    let kind = args.lock.kind();
    let given = args.lock.given().cloned();
    // Everything that can be said about the flags is said before a server starts.
    let placeholder = given.clone().or_else(|| kind.default_spec());
    if let Err(e) = settings.check(placeholder.as_ref(), given.is_none()) {
        return Ok(failed(e));
    }
    if let Some(dir) = &args.report {
        writable(dir)?;
    }
    stop_on_signals();
    let mut started = if settings.nemeses.contains(&Nemesis::Partition) {
        match partition_switch(&args) {
            Ok(()) => Started::in_nodes(fencecheck::campaign::SERVER_NODES),
            Err(e) => return Ok(failed(e)),
        }
    } else {
        Started::default()
    };
    // To be killed, a server must keep its tokens (Redis: an fsynced append-only file) and a
    // cluster must outlive its leader.
    let kills = settings.nemeses.contains(&Nemesis::KillServer);
    let partitions = settings.nemeses.contains(&Nemesis::Partition);
    let lock = match given {
        Some(spec) => Some(spec),
        None => match kind {
            Kind::Redis => Some(LockSpec::Redis {
                url: started.redis_with(kills)?,
            }),
            Kind::Etcd => Some(LockSpec::Etcd {
                endpoints: started.etcd_with(if kills || partitions { 3 } else { 1 })?,
            }),
            Kind::Zookeeper => Some(LockSpec::Zookeeper {
                connect: started.zk_with(if kills || partitions { 3 } else { 1 })?,
            }),
            Kind::Raft => Some(LockSpec::Raft {
                nodes: started.raft()?,
            }),
            Kind::Local => None,
        },
    };
    let pg_url = match &args.pg_url {
        Some(url) => url.clone(),
        None => started.pg()?,
    };
    let restartable = args.lock.given().is_none();
    let target = Target {
        lock,
        restartable,
        pg_url,
    };
    let exe = std::env::current_exe()
        .map_err(|e| UsageError(format!("cannot find this program to start workers: {e}")))?;
    let campaign = match Campaign::prepare(settings, target, exe) {
        Ok(c) => c,
        Err(e) => return Ok(failed(e)),
    };
    let title = campaign.title();
    println!("{title}");
    let trials = args.trials;
    // Each trial's history and verdict are stored as it ends: a campaign stopped midway keeps
    // the trials it finished.
    let mut unstored: Option<UsageError> = None;
    let mut done = |t: TrialDone| {
        progress(&t, trials);
        if let (Some(dir), None) = (&args.report, &unstored) {
            unstored = store_trial(dir, &t).err();
        }
    };
    let outcome = match campaign.run(&mut started, &mut done, &STOP) {
        Ok(outcome) => outcome,
        Err(e) => return Ok(failed(e)),
    };
    if let Some(e) = unstored {
        return Err(e);
    }
    println!("{}", outcome.totals);
    if let Some(dir) = &args.report {
        write_report(dir, &title, &outcome)?;
    }
    drop(started);
    Ok(if outcome.totals.violated > 0 {
        println!(
            "{} of {} trials broke a rule (see above)",
            outcome.totals.violated, outcome.totals.trials
        );
        exit::code(exit::CHECK_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

/// The partition nemesis runs every server and worker in network namespaces of torture's own,
/// behind a switch that is this process's own namespace from here on: made before any thread
/// starts, so that every later one (and every child) is inside it.
fn partition_switch(args: &TortureArgs) -> Result<(), CampaignError> {
    if let Some(url) = &args.pg_url {
        return Err(CampaignError::Settings(format!(
            "--pg-url {url}: the partition nemesis runs in network namespaces of its own, out of \
             reach of a database outside them; leave out --pg-url (a throwaway PostgreSQL is \
             started inside)"
        )));
    }
    fencecheck_testkit::netns::make_private()
        .map_err(|e| CampaignError::Unavailable(format!("--nemesis partition: {e}")))
}

/// `dir` exists (made if need be) and takes files: checked before the first trial, so a bad
/// `--report` never turns a finished campaign's verdict into a usage error.
fn writable(dir: &Path) -> Result<(), UsageError> {
    let cannot = |e: std::io::Error| {
        UsageError(format!(
            "--report {}: cannot write there: {e}",
            dir.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(cannot)?;
    let probe = dir.join(format!(".fencecheck-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(cannot)?;
    std::fs::remove_file(&probe).map_err(cannot)
}

/// One line per trial, on stderr, as it ends.
fn progress(t: &TrialDone, trials: u32) {
    let v = t.verdict;
    let mut broke = String::new();
    if v.lease_order.is_err() {
        broke.push_str(", storage_in_lease_order VIOLATED");
    }
    if v.validation.is_err() {
        broke.push_str(", trace UNEXPLAINED");
    }
    if v.linearizable.is_err() {
        broke.push_str(", register NOT LINEARIZABLE");
    }
    eprintln!(
        "trial {}/{trials} ({}): {} grants, {} accepted, {} rejected, {} lost{broke}",
        t.index + 1,
        t.nemesis.name(),
        v.acquisitions,
        v.accepted,
        v.rejected,
        v.lost,
    );
}

/// Trial `t`'s history (a trace file `fencecheck validate` reads) and verdict, under
/// `dir/trials/NNN/`.
fn store_trial(dir: &Path, t: &TrialDone) -> Result<(), UsageError> {
    let i = t.index as usize;
    let at = dir.join(fencecheck::report::trial_dir(i));
    std::fs::create_dir_all(&at)
        .map_err(|e| UsageError(format!("cannot create {}: {e}", at.display())))?;
    let trace = fencecheck::report::trial_trace(t.record, t.verdict);
    write_file(&at.join("trace"), &trace)?;
    let verdict = fencecheck::report::trial_verdict(i, t.record, t.verdict);
    write_file(&at.join("verdict.txt"), &verdict)
}

/// torture.md, torture.html and the worst trial's timeline.
fn write_report(dir: &Path, title: &str, o: &Outcome) -> Result<(), UsageError> {
    let shown = worst(&o.verdicts);
    if let Some(i) = shown {
        let svg = fencecheck::report::trial_svg(&o.records[i]);
        write_file(&dir.join("worst-trial.svg"), &svg)?;
    }
    let md = fencecheck::report::campaign_markdown(
        title,
        &o.totals,
        &o.records,
        &o.verdicts,
        shown.map(|i| (i, "worst-trial.svg")),
    );
    write_file(&dir.join("torture.md"), &md)?;
    let html = fencecheck::report::campaign_html(title, &o.totals, &o.records, &o.verdicts, shown);
    write_file(&dir.join("torture.html"), &html)?;
    println!(
        "report: {} and {}",
        dir.join("torture.md").display(),
        dir.join("torture.html").display()
    );
    Ok(())
}

/// The worker: `increments` times, take the lease and add one to the counter under it; the job
/// from the environment.
pub(super) fn worker(_: WorkerArgs) -> Result<ExitCode, UsageError> {
    let (lock, job) = Job::from_env(|k| std::env::var(k).ok()).map_err(UsageError)?;
    match run_worker(lock, &job) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => Ok(failed(e)),
    }
}
