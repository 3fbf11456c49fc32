//! `fencecheck torture`: a fault campaign against a lock service. Each trial starts worker
//! processes (this binary, `torture-worker`) that do the counter workload on PostgreSQL — take the
//! lease, read the counter, write it plus one under the token — while the nemesis SIGSTOPs one of
//! them past its lease. Every worker reports what it observes; each trial is judged by increments
//! lost, `storage_in_lease_order` and trace validation against the model (`check::campaign`).

use super::run::{Backend, ServerArgs};
use super::servers::Started;
use super::{write_file, UsageError};
use clap::{Args, ValueEnum};
use fencecheck::backend::{connect, FencedStorage, LockService, LockSpec, PgFencedStore};
use fencecheck::check::campaign::{judge, worst, Totals, TrialRecord, TrialVerdict};
use fencecheck::check::trace::Replay;
use fencecheck::protocol::{FencePolicy, Observed, Token, Trace};
use fencecheck_testkit::signal;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The faults a campaign injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum Nemesis {
    /// SIGSTOP a worker holding the lease (just granted, or between its read and its write)
    /// for the lease's TTL plus 20-200 ms, then SIGCONT.
    Pause,
}

#[derive(Debug, Args)]
pub(super) struct TortureArgs {
    /// Where the lock lives.
    #[arg(long, value_enum, default_value_t = Backend::Redis)]
    backend: Backend,
    #[command(flatten)]
    servers: ServerArgs,
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
    /// ZooKeeper to its session-timeout bounds).
    #[arg(long, value_name = "MS", default_value_t = 300)]
    ttl_ms: u64,
    /// Faults to inject, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pause")]
    nemesis: Vec<Nemesis>,
    /// The control: write the counter without the token (a plain upsert), and watch increments
    /// get lost.
    #[arg(long)]
    no_fence: bool,
    /// Write torture.md and worst-trial.svg (the timeline of the worst trial) to DIR.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

/// One worker of a trial (started by `torture`, not by hand).
#[derive(Debug, Args)]
pub(super) struct WorkerArgs {
    #[arg(long, value_enum)]
    backend: Backend,
    #[command(flatten)]
    servers: ServerArgs,
    #[arg(long)]
    pg_url: String,
    #[arg(long)]
    table: String,
    #[arg(long)]
    name: String,
    #[arg(long)]
    owner: String,
    #[arg(long)]
    ttl_ms: u64,
    #[arg(long)]
    increments: u32,
    #[arg(long)]
    think_ms: u64,
    #[arg(long)]
    no_fence: bool,
}

const FENCED_TABLE: &str = "fencecheck_torture";
const UNFENCED_TABLE: &str = "fencecheck_torture_unfenced";

/// Microseconds on CLOCK_MONOTONIC: one clock for every process on this machine.
fn mono_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

fn check_range(
    flag: &str,
    value: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<(), UsageError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(UsageError(format!(
        "{flag} {value}: expected {} to {}",
        range.start(),
        range.end()
    )))
}

pub(super) fn run(args: TortureArgs) -> Result<ExitCode, UsageError> {
    check_range("--trials", args.trials.into(), 1..=10_000)?;
    check_range("--workers", args.workers.into(), 2..=16)?;
    check_range("--increments", args.increments.into(), 1..=100)?;
    check_range("--ttl-ms", args.ttl_ms, 50..=10_000)?;
    let mut started = Started::default();
    let spec = match args.servers.given(args.backend) {
        Some(spec) => spec,
        None => match args.backend {
            Backend::Redis => LockSpec::Redis {
                url: started.redis()?,
            },
            Backend::Etcd => LockSpec::Etcd {
                endpoints: started.etcd()?,
            },
            Backend::Zookeeper => LockSpec::Zookeeper {
                connect: started.zk()?,
            },
        },
    };
    let pg_url = match &args.pg_url {
        Some(url) => url.clone(),
        None => started.pg()?,
    };
    let policy = if args.no_fence {
        FencePolicy::AcceptAll
    } else {
        FencePolicy::Fenced
    };
    let table = if args.no_fence {
        UNFENCED_TABLE
    } else {
        FENCED_TABLE
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    let bad = |e: fencecheck::backend::BackendError| UsageError(e.to_string());
    // Create the table (and check the database) before any worker starts.
    let store = rt
        .block_on(PgFencedStore::connect_with(
            &pg_url,
            table,
            policy,
            Duration::from_secs(10),
        ))
        .map_err(bad)?;
    let backend = format!("{:?}", args.backend).to_lowercase();
    let title = format!(
        "torture: {backend} lock, PostgreSQL counter {}, {} trials x {} workers x {} increments, \
         nemesis {}",
        if args.no_fence {
            "WITHOUT fencing"
        } else {
            "with fencing"
        },
        args.trials,
        args.workers,
        args.increments,
        args.nemesis
            .iter()
            .map(|n| format!("{n:?}").to_lowercase())
            .collect::<Vec<_>>()
            .join(",")
    );
    println!("{title}");
    let run_id = format!("{}-{}", std::process::id(), mono_us() / 1000);
    let mut records = Vec::new();
    let mut verdicts: Vec<TrialVerdict> = Vec::new();
    let mut totals = Totals::default();
    for i in 0..args.trials {
        let name = format!("torture-{run_id}-{i}");
        let (record, ttl) = trial(&args, &spec, &pg_url, table, &name, i)?;
        let value = rt.block_on(store.read(&name)).map_err(bad)?;
        let final_value = value.map_or(0, |v| counter(&v.value));
        let record = TrialRecord {
            final_value,
            ..record
        };
        let verdict = judge(&record, &Replay::new(ttl, policy));
        totals.add(&verdict);
        eprintln!(
            "trial {}/{}: {} grants, {} accepted, {} rejected, {} lost{}{}",
            i + 1,
            args.trials,
            verdict.acquisitions,
            verdict.accepted,
            verdict.rejected,
            verdict.lost,
            if verdict.lease_order.is_err() {
                ", storage_in_lease_order VIOLATED"
            } else {
                ""
            },
            if verdict.validation.is_err() {
                ", trace UNEXPLAINED"
            } else {
                ""
            },
        );
        records.push(record);
        verdicts.push(verdict);
    }
    println!("{totals}");
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir)
            .map_err(|e| UsageError(format!("cannot create {}: {e}", dir.display())))?;
        let shown = worst(&verdicts);
        if let Some(i) = shown {
            let svg = fencecheck::report::trial_svg(&records[i]);
            write_file(&dir.join("worst-trial.svg"), &svg)?;
        }
        let md = fencecheck::report::campaign_markdown(
            &title,
            &totals,
            &verdicts,
            shown.map(|i| (i, "worst-trial.svg")),
        );
        write_file(&dir.join("torture.md"), &md)?;
        println!("report: {}", dir.join("torture.md").display());
    }
    drop(started);
    Ok(if totals.violated > 0 {
        println!(
            "{} of {} trials broke a rule (see above)",
            totals.violated, totals.trials
        );
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The counter's value as stored (decimal text; empty is 0).
fn counter(value: &[u8]) -> u64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// A line a worker printed: who, when (µs, CLOCK_MONOTONIC), what.
struct Line {
    worker: usize,
    at: u64,
    text: String,
}

/// Runs one trial; returns what it recorded (the final value still to be read) and the TTL the
/// server granted.
fn trial(
    args: &TortureArgs,
    spec: &LockSpec,
    pg_url: &str,
    table: &str,
    name: &str,
    i: u32,
) -> Result<(TrialRecord, Duration), UsageError> {
    let exe = std::env::current_exe()
        .map_err(|e| UsageError(format!("cannot find this program to start workers: {e}")))?;
    let think_ms = (args.ttl_ms / 5).max(5);
    let (tx, rx) = mpsc::channel::<Option<Line>>();
    let mut children: Vec<Child> = Vec::new();
    for w in 0..args.workers as usize {
        let mut cmd = Command::new(&exe);
        cmd.arg("torture-worker")
            .args(spec_flags(spec))
            .args(["--pg-url", pg_url, "--table", table, "--name", name])
            .args(["--owner", &format!("w{}", w + 1)])
            .args(["--ttl-ms", &args.ttl_ms.to_string()])
            .args(["--increments", &args.increments.to_string()])
            .args(["--think-ms", &think_ms.to_string()])
            .stdout(Stdio::piped());
        if args.no_fence {
            cmd.arg("--no-fence");
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| UsageError(format!("cannot start a worker: {e}")))?;
        let out = BufReader::new(child.stdout.take().expect("piped"));
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let Some((at, text)) = line.split_once(' ') else {
                    continue;
                };
                let Ok(at) = at.parse() else { continue };
                let text = text.to_string();
                if tx
                    .send(Some(Line {
                        worker: w,
                        at,
                        text,
                    }))
                    .is_err()
                {
                    return;
                }
            }
            let _ = tx.send(None);
        });
        children.push(child);
    }
    drop(tx);
    let kill_all = |children: &mut Vec<Child>| {
        for c in children.iter_mut() {
            let _ = signal(c.id(), libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    // The nemesis: one pause per trial, at a grant (even trials) or between a read and its
    // write (odd trials), for the granted TTL plus 20-200 ms.
    let pause_at = if i % 2 == 0 { "granted" } else { "read" };
    let overshoot = Duration::from_millis(20 + u64::from(i) * 37 % 180);
    let mut pause: Option<(usize, u64, u64)> = None; // (worker, stopped at, resume at) in µs
    let mut paused_once = !args.nemesis.contains(&Nemesis::Pause);
    let mut pauses = Vec::new();
    let mut lines: Vec<Line> = Vec::new();
    let mut ttl = Duration::from_millis(args.ttl_ms);
    let mut open = args.workers as usize;
    let give_up = mono_us() + 120_000_000;
    while open > 0 {
        let now = mono_us();
        if now > give_up {
            kill_all(&mut children);
            return Err(UsageError(format!(
                "trial {}: the workers did not finish within 120 s",
                i + 1
            )));
        }
        if let Some((w, from, until)) = pause {
            if now >= until {
                let _ = signal(children[w].id(), libc::SIGCONT);
                pauses.push((format!("w{}", w + 1), from, now));
                pause = None;
            }
        }
        let wait = match pause {
            Some((_, _, until)) => Duration::from_micros(until.saturating_sub(now)),
            None => Duration::from_millis(200),
        };
        let line = match rx.recv_timeout(wait) {
            Ok(Some(line)) => line,
            Ok(None) => {
                open -= 1;
                continue;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if let Some(rest) = line.text.strip_prefix("granted ") {
            if let Some(us) = rest.split(' ').nth(1).and_then(|t| t.parse().ok()) {
                ttl = Duration::from_micros(us);
            }
        }
        if !paused_once && line.text.split(' ').next() == Some(pause_at) {
            paused_once = true;
            let w = line.worker;
            if signal(children[w].id(), libc::SIGSTOP).is_ok() {
                let from = mono_us();
                pause = Some((w, from, from + (ttl + overshoot).as_micros() as u64));
            }
        }
        lines.push(line);
    }
    if let Some((w, from, _)) = pause {
        let _ = signal(children[w].id(), libc::SIGCONT);
        pauses.push((format!("w{}", w + 1), from, mono_us()));
    }
    for (w, c) in children.iter_mut().enumerate() {
        let status = c
            .wait()
            .map_err(|e| UsageError(format!("worker w{}: {e}", w + 1)))?;
        if !status.success() {
            kill_all(&mut children);
            return Err(UsageError(format!(
                "trial {}: worker w{} failed ({status}); its error is above",
                i + 1,
                w + 1
            )));
        }
    }
    lines.sort_by_key(|l| l.at);
    let origin = lines.first().map_or(0, |l| l.at);
    let mut trace = Trace::new();
    for l in &lines {
        if let Some(what) = observed(&l.text) {
            trace.record(l.at - origin, &format!("w{}", l.worker + 1), what);
        }
    }
    let pauses = pauses
        .into_iter()
        .map(|(w, from, to)| (w, from.saturating_sub(origin), to.saturating_sub(origin)))
        .collect();
    let record = TrialRecord {
        trace,
        final_value: 0,
        pauses,
    };
    Ok((record, ttl))
}

/// The worker's flags for `spec`.
fn spec_flags(spec: &LockSpec) -> Vec<String> {
    match spec {
        LockSpec::Redis { url } => vec![
            "--backend".into(),
            "redis".into(),
            "--redis-url".into(),
            url.clone(),
        ],
        LockSpec::Etcd { endpoints } => vec![
            "--backend".into(),
            "etcd".into(),
            "--endpoints".into(),
            endpoints.join(","),
        ],
        LockSpec::Zookeeper { connect } => vec![
            "--backend".into(),
            "zookeeper".into(),
            "--zk".into(),
            connect.clone(),
        ],
    }
}

/// What a worker's line says it observed (`read` and `done` are not observations of the lock or
/// the storage).
fn observed(text: &str) -> Option<Observed> {
    let mut words = text.split(' ');
    let kind = words.next()?;
    let mut token = || words.next().and_then(|t| t.parse().ok()).map(Token::new);
    Some(match kind {
        "acquire-sent" => Observed::AcquireSent,
        "granted" => Observed::Granted { token: token()? },
        "busy" => Observed::Busy,
        "write-sent" => Observed::WriteSent { token: token()? },
        "accepted" => Observed::WriteAccepted { token: token()? },
        "rejected" => {
            let t = token()?;
            Observed::WriteRejected {
                token: t,
                highest: token()?,
            }
        }
        "release-sent" => Observed::ReleaseSent { token: token()? },
        "released" => {
            let t = token()?;
            let ok = words.next()? == "true";
            Observed::Released { token: t, ok }
        }
        _ => return None,
    })
}

/// Prints one observation, stamped with the shared clock.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{} {text}", mono_us());
    let _ = out.flush();
}

/// The worker: `increments` times, take the lease and add one to the counter under it.
pub(super) fn worker(args: WorkerArgs) -> Result<ExitCode, UsageError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    rt.block_on(work(args))?;
    Ok(ExitCode::SUCCESS)
}

async fn work(args: WorkerArgs) -> Result<(), UsageError> {
    let bad = |e: fencecheck::backend::BackendError| UsageError(e.to_string());
    let spec = args
        .servers
        .given(args.backend)
        .ok_or_else(|| UsageError("the worker needs its server's address".into()))?;
    let ttl = Duration::from_millis(args.ttl_ms);
    let lock = connect(&spec, &args.name, ttl, Duration::from_secs(5))
        .await
        .map_err(bad)?;
    let policy = if args.no_fence {
        FencePolicy::AcceptAll
    } else {
        FencePolicy::Fenced
    };
    let store =
        PgFencedStore::connect_with(&args.pg_url, &args.table, policy, Duration::from_secs(10))
            .await
            .map_err(bad)?;
    let (mut client, connection) = tokio_postgres::connect(&args.pg_url, tokio_postgres::NoTls)
        .await
        .map_err(|e| UsageError(format!("postgres: {e}")))?;
    tokio::spawn(connection);
    let pg = |e: tokio_postgres::Error| UsageError(format!("postgres: {e}"));
    let key = args.name.as_str();
    let think = Duration::from_millis(args.think_ms);
    let owner = args.owner.as_str();
    for _ in 0..args.increments {
        emit("acquire-sent");
        let Some(grant) = lock
            .acquire(owner, Duration::from_secs(60))
            .await
            .map_err(bad)?
        else {
            emit("busy");
            continue;
        };
        let t = grant.token;
        emit(&format!("granted {t} {}", grant.ttl.as_micros()));
        if args.no_fence {
            let v = store
                .read(key)
                .await
                .map_err(bad)?
                .map_or(0, |s| counter(&s.value));
            emit(&format!("read {v}"));
            tokio::time::sleep(think).await;
            emit(&format!("write-sent {t}"));
            let outcome = store
                .write(key, t, (v + 1).to_string().as_bytes())
                .await
                .map_err(bad)?;
            answered(t, &outcome);
        } else {
            // One transaction: the fence first (it holds the row until commit), then read, add
            // one, write.
            emit(&format!("write-sent {t}"));
            let tx = client.transaction().await.map_err(pg)?;
            let outcome = store.fence(&tx, key, t).await.map_err(bad)?;
            if outcome.is_accepted() {
                let sql = format!("SELECT value FROM {} WHERE key = $1", args.table);
                let row = tx.query_one(&sql, &[&key]).await.map_err(pg)?;
                let v = counter(&row.get::<_, Vec<u8>>(0));
                emit(&format!("read {v}"));
                tokio::time::sleep(think).await;
                let sql = format!("UPDATE {} SET value = $2 WHERE key = $1", args.table);
                let next = (v + 1).to_string().into_bytes();
                tx.execute(&sql, &[&key, &next]).await.map_err(pg)?;
                tx.commit().await.map_err(pg)?;
            }
            answered(t, &outcome);
        }
        emit(&format!("release-sent {t}"));
        // A lease that ran out while this worker was paused may be gone with its session: an
        // error here is a release that was never answered.
        if let Ok(ok) = lock.release(owner, t).await {
            emit(&format!("released {t} {ok}"));
        }
    }
    emit("done");
    Ok(())
}

fn answered(t: Token, outcome: &fencecheck::backend::WriteOutcome) {
    match outcome {
        fencecheck::backend::WriteOutcome::Accepted => emit(&format!("accepted {t}")),
        fencecheck::backend::WriteOutcome::Stale(s) => emit(&format!("rejected {t} {}", s.highest)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_lines_become_observations() {
        let t = Token::new(7);
        assert_eq!(observed("acquire-sent"), Some(Observed::AcquireSent));
        assert_eq!(
            observed("granted 7 300000"),
            Some(Observed::Granted { token: t })
        );
        assert_eq!(observed("busy"), Some(Observed::Busy));
        assert_eq!(
            observed("write-sent 7"),
            Some(Observed::WriteSent { token: t })
        );
        assert_eq!(
            observed("accepted 7"),
            Some(Observed::WriteAccepted { token: t })
        );
        assert_eq!(
            observed("rejected 7 9"),
            Some(Observed::WriteRejected {
                token: t,
                highest: Token::new(9)
            })
        );
        assert_eq!(
            observed("release-sent 7"),
            Some(Observed::ReleaseSent { token: t })
        );
        assert_eq!(
            observed("released 7 false"),
            Some(Observed::Released {
                token: t,
                ok: false
            })
        );
        assert_eq!(observed("read 12"), None);
        assert_eq!(observed("granted x"), None);
        assert_eq!((counter(b"41"), counter(b""), counter(b"junk")), (41, 0, 0));
    }
}
