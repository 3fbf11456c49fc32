//! `fencecheck torture`: a fault campaign against a lock service. Each trial starts worker
//! processes (this binary, `torture-worker`) that do the counter workload on PostgreSQL — take the
//! lease, read the counter, write it plus one under the token — while the nemesis SIGSTOPs one of
//! them past its lease. Every worker reports what it observes; each trial is judged by increments
//! lost, `storage_in_lease_order` and trace validation against the model (`check::campaign`).

use super::servers::Started;
use super::target::{Kind, LockArg};
use super::{write_file, UsageError};
use clap::{Args, ValueEnum};
use fencecheck::backend::{
    connect, monotonic_us, AnyLock, FencedStorage, LocalLock, LockService, LockSpec, PgFencedStore,
};
use fencecheck::check::campaign::{judge, worst, Fault, Totals, TrialRecord, TrialVerdict};
use fencecheck::check::linearize::{Answer, Call, Operation};
use fencecheck::check::trace::Replay;
use fencecheck::protocol::{FencePolicy, Observed, Token, Trace};
use fencecheck_testkit::{signal, FreezableProxy};
use std::io::{BufRead, BufReader, Write};
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// The faults a campaign injects: one per trial, taking turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum Nemesis {
    /// SIGSTOP a worker holding the lease (just granted, or between its read and its write)
    /// for the lease's TTL plus 20-200 ms, then SIGCONT.
    Pause,
    /// Cut a worker holding the lease off from the lock service and the database for the TTL
    /// plus 20-200 ms: each worker talks to both through TCP proxies of its own, and the
    /// holder's stop forwarding (connections stay open; bytes wait).
    Stall,
    /// kill -9 the lock server (a cluster's leader) while a worker holds the lease, and start
    /// it again. Only servers torture started itself (a persistent Redis, a 3-member etcd, a
    /// 3-server ZooKeeper).
    KillServer,
    /// Run one worker under libfaketime with every clock at a quarter speed: its timers
    /// (renewals, session pings, think time) fire four times late.
    ClockSkew,
}

impl Nemesis {
    fn name(self) -> &'static str {
        match self {
            Nemesis::Pause => "pause",
            Nemesis::Stall => "stall",
            Nemesis::KillServer => "kill-server",
            Nemesis::ClockSkew => "clock-skew",
        }
    }
}

/// The clock rate of a clock-skewed worker.
const SKEW: &str = "+0 x0.25";

/// Where libfaketime's library is, if installed.
fn libfaketime() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
        "/usr/local/lib/faketime/libfaketimeMT.so.1",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

#[derive(Debug, Args)]
pub(super) struct TortureArgs {
    /// Where the lock lives: a kind alone (redis, etcd, zk: throwaway servers; local: the
    /// in-process lock, whose workers are threads of `torture` sharing it, a paused worker's
    /// thread stopping whole and a stalled one's database link freezing) or a lock service's
    /// address (redis://HOST:PORT, etcd://HOST:PORT,..., zk://HOST:PORT,...).
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
    /// ZooKeeper to its session-timeout bounds).
    #[arg(long, value_name = "MS", default_value_t = 300)]
    ttl_ms: u64,
    /// Faults to inject, comma-separated; trial i gets the (i mod n)-th.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pause")]
    nemesis: Vec<Nemesis>,
    /// The control: write the counter without the token (a plain upsert), and watch increments
    /// get lost.
    #[arg(long)]
    no_fence: bool,
    /// Write torture.md, torture.html and worst-trial.svg (the timeline of the worst trial) to
    /// DIR.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

/// One worker of a trial (started by `torture`, not by hand).
#[derive(Debug, Args)]
pub(super) struct WorkerArgs {
    /// The lock service, as one string (`redis://...`, `etcd://...`, `zk://...`, `raft://...`).
    #[arg(long, value_name = "SPEC")]
    lock: LockSpec,
    #[command(flatten)]
    job: Job,
}

/// What one worker does.
#[derive(Clone, Debug, Args)]
pub(super) struct Job {
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
    let mut nemeses: Vec<Nemesis> = Vec::new();
    for n in &args.nemesis {
        if !nemeses.contains(n) {
            nemeses.push(*n);
        }
    }
    if nemeses.is_empty() {
        return Err(UsageError(
            "--nemesis: expected one or more of pause, stall, kill-server, clock-skew".into(),
        ));
    }
    let kills = nemeses.contains(&Nemesis::KillServer);
    let kind = args.lock.kind();
    if kind == Kind::Raft {
        return Err(UsageError(
            "--lock raft: the campaign does not drive a Raft cluster yet; expected local, redis, \
             etcd or zk"
                .into(),
        ));
    }
    let given = args.lock.given().cloned();
    if kind == Kind::Local {
        for n in [Nemesis::KillServer, Nemesis::ClockSkew] {
            if nemeses.contains(&n) {
                return Err(UsageError(format!(
                    "--nemesis {}: not for the in-process lock (no server to kill; one clock \
                     for every worker); expected pause or stall",
                    n.name()
                )));
            }
        }
    }
    if kills && given.is_some() {
        return Err(UsageError(
            "--nemesis kill-server kills only servers torture starts itself: give --lock a \
             kind alone (redis, etcd, zk) rather than an address, or leave out kill-server"
                .into(),
        ));
    }
    let faketime = if nemeses.contains(&Nemesis::ClockSkew) {
        Some(libfaketime().ok_or_else(|| {
            UsageError(
                "--nemesis clock-skew runs a worker under libfaketime, which is not installed \
                 (Debian: apt-get install faketime)"
                    .into(),
            )
        })?)
    } else {
        None
    };
    let mut started = Started::default();
    // To be killed, a server must keep its tokens (Redis: an fsynced append-only file) and a
    // cluster must outlive its leader.
    let spec = match given {
        Some(spec) => Some(spec),
        None => match kind {
            Kind::Redis => Some(LockSpec::Redis {
                url: started.redis_with(kills)?,
            }),
            Kind::Etcd => Some(LockSpec::Etcd {
                endpoints: started.etcd_with(if kills { 3 } else { 1 })?,
            }),
            Kind::Zookeeper => Some(LockSpec::Zookeeper {
                connect: started.zk_with(if kills { 3 } else { 1 })?,
            }),
            Kind::Local | Kind::Raft => None,
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
    let backend = match kind {
        Kind::Local => "in-process",
        other => other.name(),
    };
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
        nemeses
            .iter()
            .map(|n| n.name())
            .collect::<Vec<_>>()
            .join(",")
    );
    println!("{title}");
    let run_id = format!("{}-{}", std::process::id(), monotonic_us() / 1000);
    let mut records = Vec::new();
    let mut verdicts: Vec<TrialVerdict> = Vec::new();
    let mut totals = Totals::default();
    for i in 0..args.trials {
        let name = format!("torture-{run_id}-{i}");
        let nemesis = nemeses[i as usize % nemeses.len()];
        let setup = Setup {
            spec: spec.as_ref(),
            pg_url: &pg_url,
            table,
            name: &name,
            nemesis,
            // Each nemesis strikes before the holder writes and inside its write by turns.
            strike_at: if (i as usize / nemeses.len()) % 2 == 0 {
                "granted"
            } else {
                "read"
            },
            faketime: faketime.as_deref(),
        };
        let (mut record, ttl) = trial(&args, &setup, i, &mut started)?;
        let value = rt.block_on(store.read(&name)).map_err(bad)?;
        record.final_value = value.as_ref().map_or(0, |v| counter(&v.value));
        // The final read, after every worker has exited.
        let at = record.trace.events().last().map_or(0, |e| e.at_us) + 1;
        record.register.push(Operation {
            key: 0,
            call: Call::Read,
            invoked: at,
            completed: Some((
                at + 1,
                Answer::Read(value.map(|v| (v.token, counter(&v.value)))),
            )),
        });
        let verdict = judge(&record, &Replay::new(ttl, policy));
        totals.add(&verdict);
        eprintln!(
            "trial {}/{} ({}): {} grants, {} accepted, {} rejected, {} lost{}{}{}",
            i + 1,
            args.trials,
            nemesis.name(),
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
            if verdict.linearizable.is_err() {
                ", register NOT LINEARIZABLE"
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
            &records,
            &verdicts,
            shown.map(|i| (i, "worst-trial.svg")),
        );
        write_file(&dir.join("torture.md"), &md)?;
        let html = fencecheck::report::campaign_html(&title, &totals, &records, &verdicts, shown);
        write_file(&dir.join("torture.html"), &html)?;
        println!(
            "report: {} and {}",
            dir.join("torture.md").display(),
            dir.join("torture.html").display()
        );
    }
    drop(started);
    Ok(if totals.violated > 0 {
        println!(
            "{} of {} trials broke a rule (see above)",
            totals.violated, totals.trials
        );
        super::exit::code(super::exit::CHECK_FAILED)
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

/// What a trial runs against.
struct Setup<'a> {
    /// The lock service; `None` for the in-process lock.
    spec: Option<&'a LockSpec>,
    pg_url: &'a str,
    table: &'a str,
    name: &'a str,
    nemesis: Nemesis,
    /// The worker line the nemesis strikes at: `granted` (before the holder writes) or `read`
    /// (inside its write).
    strike_at: &'static str,
    /// libfaketime, for the clock-skew nemesis.
    faketime: Option<&'a std::path::Path>,
}

/// A worker's own TCP proxies to the lock service and the database (the stall nemesis freezes
/// them), and the addresses it is given.
struct Links {
    proxies: Vec<FreezableProxy>,
    spec: Option<LockSpec>,
    pg_url: String,
}

impl Links {
    fn new(spec: Option<&LockSpec>, pg_url: &str) -> Result<Links, UsageError> {
        let mut proxies = Vec::new();
        let mut via = |host_port: &str| -> Result<String, UsageError> {
            let upstream = host_port
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| {
                    UsageError(format!(
                        "--nemesis stall: cannot resolve {host_port:?} to put a proxy before it"
                    ))
                })?;
            let proxy = FreezableProxy::start(upstream)
                .map_err(|e| UsageError(format!("--nemesis stall: starting a proxy: {e}")))?;
            let addr = proxy.addr().to_string();
            proxies.push(proxy);
            Ok(addr)
        };
        let spec = match spec {
            None => None,
            Some(LockSpec::Redis { url }) => Some(LockSpec::Redis {
                url: via_url(url, &mut via)?,
            }),
            Some(LockSpec::Etcd { endpoints }) => Some(LockSpec::Etcd {
                endpoints: endpoints
                    .iter()
                    .map(|e| via_url(e, &mut via))
                    .collect::<Result<_, _>>()?,
            }),
            Some(LockSpec::Zookeeper { connect }) => {
                let (hosts, chroot) = match connect.find('/') {
                    Some(k) => connect.split_at(k),
                    None => (connect.as_str(), ""),
                };
                let hosts: Vec<String> = hosts
                    .split(',')
                    .map(|h| via(h.trim()))
                    .collect::<Result<_, _>>()?;
                Some(LockSpec::Zookeeper {
                    connect: format!("{}{chroot}", hosts.join(",")),
                })
            }
            Some(LockSpec::Raft { nodes }) => Some(LockSpec::Raft {
                nodes: nodes.iter().map(|n| via(n)).collect::<Result<_, _>>()?,
            }),
        };
        let pg_url = if pg_url.contains("://") {
            via_url(pg_url, &mut via)?
        } else {
            via_keywords(pg_url, &mut via)?
        };
        Ok(Links {
            proxies,
            spec,
            pg_url,
        })
    }

    fn freeze(&self) {
        self.proxies.iter().for_each(FreezableProxy::freeze);
    }

    fn thaw(&self) {
        self.proxies.iter().for_each(FreezableProxy::thaw);
    }
}

/// `url` (`scheme://[user@]host:port[/rest]`) with its host and port replaced by `via`'s.
fn via_url(
    url: &str,
    via: &mut impl FnMut(&str) -> Result<String, UsageError>,
) -> Result<String, UsageError> {
    let bad = || {
        UsageError(format!(
            "--nemesis stall: expected scheme://host:port in {url:?}"
        ))
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, host_port) = match authority.rfind('@') {
        Some(k) => authority.split_at(k + 1),
        None => ("", authority),
    };
    if !host_port.contains(':') {
        return Err(bad());
    }
    Ok(format!("{scheme}://{user}{}{tail}", via(host_port)?))
}

/// A PostgreSQL keyword connection string (`host=H port=P ...`) with its host and port replaced
/// by `via`'s.
fn via_keywords(
    conn: &str,
    via: &mut impl FnMut(&str) -> Result<String, UsageError>,
) -> Result<String, UsageError> {
    let words: Vec<&str> = conn.split_whitespace().collect();
    let get = |key: &str| {
        words
            .iter()
            .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    };
    let host = get("host").unwrap_or("localhost");
    let port = get("port").unwrap_or("5432");
    let proxied = via(&format!("{host}:{port}"))?;
    let (h, p) = proxied.rsplit_once(':').expect("a socket address");
    let mut out: Vec<String> = words
        .iter()
        .filter(|w| !w.starts_with("host=") && !w.starts_with("port="))
        .map(|w| w.to_string())
        .collect();
    out.push(format!("host={h}"));
    out.push(format!("port={p}"));
    Ok(out.join(" "))
}

/// A fault in force: who, since when, until when (µs, CLOCK_MONOTONIC).
struct Holding {
    worker: usize,
    from: u64,
    until: u64,
}

/// Runs one trial; returns what it recorded (the final value and read still to come) and the
/// TTL the server granted.
fn trial(
    args: &TortureArgs,
    setup: &Setup,
    i: u32,
    started: &mut Started,
) -> Result<(TrialRecord, Duration), UsageError> {
    let exe = std::env::current_exe()
        .map_err(|e| UsageError(format!("cannot find this program to start workers: {e}")))?;
    let think_ms = (args.ttl_ms / 5).max(5);
    let nemesis = setup.nemesis;
    let (tx, rx) = mpsc::channel::<Option<Line>>();
    let mut children: Vec<Child> = Vec::new();
    let mut links: Vec<Links> = Vec::new();
    let mut faults: Vec<(String, String, u64, u64)> = Vec::new(); // who, what, from, to (mono µs)
    let skewed = (nemesis == Nemesis::ClockSkew).then_some(i as usize % args.workers as usize);
    let trial_start = monotonic_us();
    // The in-process lock, shared by this trial's worker threads.
    let local = match setup.spec {
        None => Some(Arc::new(
            LocalLock::new(Duration::from_millis(args.ttl_ms))
                .map_err(|e| UsageError(e.to_string()))?,
        )),
        Some(_) => None,
    };
    // In-process, the first worker to reach the strike line pauses itself (its thread stops).
    let struck_local = Arc::new(AtomicBool::new(false));
    let overshoot = Duration::from_millis(20 + u64::from(i) * 37 % 180);
    let mut threads = Vec::new();
    for w in 0..args.workers as usize {
        let (spec, pg_url) = if nemesis == Nemesis::Stall {
            links.push(Links::new(setup.spec, setup.pg_url)?);
            (links[w].spec.as_ref(), links[w].pg_url.as_str())
        } else {
            (setup.spec, setup.pg_url)
        };
        let job = Job {
            pg_url: pg_url.to_string(),
            table: setup.table.to_string(),
            name: setup.name.to_string(),
            owner: format!("w{}", w + 1),
            ttl_ms: args.ttl_ms,
            increments: args.increments,
            think_ms,
            no_fence: args.no_fence,
        };
        let tx = tx.clone();
        let Some(spec) = spec else {
            let lock = Arc::clone(local.as_ref().expect("in-process"));
            let pause = (nemesis == Nemesis::Pause).then(|| LocalPause {
                at: setup.strike_at,
                struck: Arc::clone(&struck_local),
                overshoot,
            });
            threads.push(std::thread::spawn(move || {
                local_worker(job, lock, w, pause, tx)
            }));
            continue;
        };
        let mut cmd = Command::new(&exe);
        cmd.arg("torture-worker")
            .args(["--lock".to_string(), spec.to_string()])
            .args(job.flags())
            .stdout(Stdio::piped());
        if skewed == Some(w) {
            let lib = setup.faketime.expect("checked before the campaign");
            cmd.env("LD_PRELOAD", lib).env("FAKETIME", SKEW);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| UsageError(format!("cannot start a worker: {e}")))?;
        let out = BufReader::new(child.stdout.take().expect("piped"));
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
    // The nemesis strikes once per trial, at the first `strike_at` line. A pause or a stall
    // lasts the granted TTL plus 20-200 ms.
    let strike_at = setup.strike_at;
    let mut holding: Option<Holding> = None;
    // Clock skew strikes at the start; an in-process pause, in the worker itself.
    let mut struck =
        nemesis == Nemesis::ClockSkew || (local.is_some() && nemesis == Nemesis::Pause);
    let mut lines: Vec<Line> = Vec::new();
    let mut ttl = Duration::from_millis(args.ttl_ms);
    let mut open = args.workers as usize;
    let give_up = monotonic_us() + 180_000_000;
    let end_fault = |h: &Holding, children: &[Child], links: &[Links]| {
        if nemesis == Nemesis::Stall {
            links[h.worker].thaw();
        } else {
            let _ = signal(children[h.worker].id(), libc::SIGCONT);
        }
    };
    let fault_name = if nemesis == Nemesis::Stall && local.is_some() {
        "stalled (cut off from the database)"
    } else if nemesis == Nemesis::Stall {
        "stalled (cut off from lock service and database)"
    } else {
        "paused (SIGSTOP)"
    };
    while open > 0 {
        let now = monotonic_us();
        if now > give_up {
            kill_all(&mut children);
            return Err(UsageError(format!(
                "trial {}: the workers did not finish within 180 s",
                i + 1
            )));
        }
        if let Some(h) = &holding {
            if now >= h.until {
                end_fault(h, &children, &links);
                faults.push((format!("w{}", h.worker + 1), fault_name.into(), h.from, now));
                holding = None;
            }
        }
        let wait = match &holding {
            Some(h) => Duration::from_micros(h.until.saturating_sub(now)),
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
        if let Some(to) = line.text.strip_prefix("nemesis-paused ") {
            let to = to.parse().unwrap_or(line.at);
            let what = "paused (its thread stopped)".to_string();
            faults.push((format!("w{}", line.worker + 1), what, line.at, to));
            continue;
        }
        if let Some(rest) = line.text.strip_prefix("granted ") {
            if let Some(us) = rest.split(' ').nth(1).and_then(|t| t.parse().ok()) {
                ttl = Duration::from_micros(us);
            }
        }
        if !struck && line.text.split(' ').next() == Some(strike_at) {
            struck = true;
            let w = line.worker;
            let from = monotonic_us();
            let until = from + (ttl + overshoot).as_micros() as u64;
            match nemesis {
                Nemesis::Pause => {
                    if signal(children[w].id(), libc::SIGSTOP).is_ok() {
                        holding = Some(Holding {
                            worker: w,
                            from,
                            until,
                        });
                    }
                }
                Nemesis::Stall => {
                    links[w].freeze();
                    holding = Some(Holding {
                        worker: w,
                        from,
                        until,
                    });
                }
                Nemesis::KillServer => {
                    if let Some(which) = started.kill_and_restart()? {
                        let what = format!("{which} killed (kill -9) and restarted");
                        faults.push(("server".into(), what, from, monotonic_us()));
                    }
                }
                Nemesis::ClockSkew => {}
            }
        }
        lines.push(line);
    }
    if let Some(h) = &holding {
        end_fault(h, &children, &links);
        faults.push((
            format!("w{}", h.worker + 1),
            fault_name.into(),
            h.from,
            monotonic_us(),
        ));
    }
    for (w, t) in threads.into_iter().enumerate() {
        let failed = |e: String| UsageError(format!("trial {}: worker w{}: {e}", i + 1, w + 1));
        t.join()
            .map_err(|_| failed("panicked".into()))?
            .map_err(|e| failed(e.0))?;
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
    if let Some(w) = skewed {
        let what = format!("clock at a quarter speed (libfaketime {SKEW:?})");
        faults.push((format!("w{}", w + 1), what, trial_start, monotonic_us()));
    }
    lines.sort_by_key(|l| l.at);
    let origin = lines.first().map_or(0, |l| l.at);
    let mut trace = Trace::new();
    for l in &lines {
        if let Some(what) = observed(&l.text) {
            trace.record(l.at - origin, &format!("w{}", l.worker + 1), what);
        }
    }
    let faults = faults
        .into_iter()
        .map(|(who, what, from, to)| Fault {
            who,
            what,
            from_us: from.saturating_sub(origin),
            to_us: to.saturating_sub(origin),
        })
        .collect();
    let record = TrialRecord {
        register: register_history(&lines, origin, args.workers as usize),
        trace,
        final_value: 0,
        faults,
    };
    Ok((record, ttl))
}

/// The workers' writes as operations on the counter's fenced register: each write with its
/// token and the value it wrote (the counter it read plus one), from when it was sent to its
/// answer.
fn register_history(lines: &[Line], origin: u64, workers: usize) -> Vec<Operation<u64>> {
    let mut ops = Vec::new();
    let mut read: Vec<Option<u64>> = vec![None; workers];
    let mut sent: Vec<Option<(Token, u64)>> = vec![None; workers];
    for l in lines {
        let w = l.worker;
        let mut words = l.text.split(' ');
        let kind = words.next().unwrap_or_default();
        let mut number = || words.next().and_then(|t| t.parse::<u64>().ok());
        let answer = match kind {
            "read" => {
                read[w] = number();
                continue;
            }
            "write-sent" => {
                sent[w] = number().map(|t| (Token::new(t), l.at - origin));
                continue;
            }
            "accepted" => Answer::Accepted,
            "rejected" => {
                let (_, highest) = (number(), number());
                let Some(highest) = highest else { continue };
                Answer::Stale {
                    highest: Token::new(highest),
                }
            }
            _ => continue,
        };
        let Some((token, invoked)) = sent[w].take() else {
            continue;
        };
        let value = read[w].take().map_or(0, |v| v + 1);
        ops.push(Operation {
            key: 0,
            call: Call::Write { token, value },
            invoked,
            completed: Some((l.at - origin, answer)),
        });
    }
    for (w, s) in sent.into_iter().enumerate() {
        if let Some((token, invoked)) = s {
            let value = read[w].map_or(0, |v| v + 1);
            ops.push(Operation {
                key: 0,
                call: Call::Write { token, value },
                invoked,
                completed: None,
            });
        }
    }
    ops
}

/// What a worker's line says it observed (`read` and `done` are not observations of the lock or
/// the storage).
fn observed(text: &str) -> Option<Observed> {
    Observed::from_words(text).ok()
}

/// Prints one observation, stamped with the shared clock.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{} {text}", monotonic_us());
    let _ = out.flush();
}

impl Job {
    /// The job as `torture-worker` flags.
    fn flags(&self) -> Vec<String> {
        let mut flags: Vec<String> = [
            ("--pg-url", self.pg_url.clone()),
            ("--table", self.table.clone()),
            ("--name", self.name.clone()),
            ("--owner", self.owner.clone()),
            ("--ttl-ms", self.ttl_ms.to_string()),
            ("--increments", self.increments.to_string()),
            ("--think-ms", self.think_ms.to_string()),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .collect();
        if self.no_fence {
            flags.push("--no-fence".into());
        }
        flags
    }
}

/// The worker: `increments` times, take the lease and add one to the counter under it.
pub(super) fn worker(args: WorkerArgs) -> Result<ExitCode, UsageError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    rt.block_on(async {
        let spec = args.lock;
        let ttl = Duration::from_millis(args.job.ttl_ms);
        let lock = reconnect(&spec, &args.job.name, ttl).await?;
        let mut source = Remote { spec, ttl, lock };
        work(&args.job, &mut source, &emit).await
    })?;
    Ok(ExitCode::SUCCESS)
}

/// An in-process pause: the first worker to print a line starting with `at` stops (its thread
/// sleeps) for the lease's TTL plus `overshoot`.
struct LocalPause {
    at: &'static str,
    struck: Arc<AtomicBool>,
    overshoot: Duration,
}

/// One worker of an in-process trial, on a thread of its own: its lines go to `tx`.
fn local_worker(
    job: Job,
    lock: Arc<LocalLock>,
    w: usize,
    pause: Option<LocalPause>,
    tx: mpsc::Sender<Option<Line>>,
) -> Result<(), UsageError> {
    let ttl = lock.ttl().granted();
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
            std::thread::sleep(ttl + p.overshoot);
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

/// A lock handle on `spec`, retried for up to a minute (a killed server may take that long to
/// serve again).
async fn reconnect(spec: &LockSpec, name: &str, ttl: Duration) -> Result<AnyLock, UsageError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match connect(spec, name, ttl, Duration::from_secs(5)).await {
            Ok(lock) => return Ok(lock),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(UsageError(format!("the lock service: {e}")))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Where a worker's lock comes from.
trait LockSource {
    type Lock: LockService;
    fn lock(&self) -> &Self::Lock;
    /// A fresh handle, after the lock service failed.
    async fn renew(&mut self, name: &str) -> Result<(), UsageError>;
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
    async fn renew(&mut self, name: &str) -> Result<(), UsageError> {
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
    async fn renew(&mut self, _: &str) -> Result<(), UsageError> {
        Ok(())
    }
}

/// A worker's job on the lock from `source`, saying what it observes through `out`.
async fn work<S: LockSource>(
    job: &Job,
    source: &mut S,
    out: &dyn Fn(&str),
) -> Result<(), UsageError> {
    let bad = |e: fencecheck::backend::BackendError| UsageError(e.to_string());
    let policy = if job.no_fence {
        FencePolicy::AcceptAll
    } else {
        FencePolicy::Fenced
    };
    // Long enough to outlast a stall of the database link (the TTL plus 200 ms at most).
    let patience = Duration::from_secs(30);
    let store = PgFencedStore::connect_with(&job.pg_url, &job.table, policy, patience)
        .await
        .map_err(bad)?;
    let (mut client, connection) = tokio_postgres::connect(&job.pg_url, tokio_postgres::NoTls)
        .await
        .map_err(|e| UsageError(format!("postgres: {e}")))?;
    tokio::spawn(connection);
    let pg = |e: tokio_postgres::Error| UsageError(format!("postgres: {e}"));
    let key = job.name.as_str();
    let think = Duration::from_millis(job.think_ms);
    let owner = job.owner.as_str();
    let answered = |t: Token, outcome: &fencecheck::backend::WriteOutcome| match outcome {
        fencecheck::backend::WriteOutcome::Accepted => out(&format!("accepted {t}")),
        fencecheck::backend::WriteOutcome::Stale(s) => out(&format!("rejected {t} {}", s.highest)),
    };
    let mut attempts = 0;
    // Since when the lock service has failed every request, if it has.
    let mut failing: Option<tokio::time::Instant> = None;
    while attempts < job.increments {
        out("acquire-sent");
        let grant = match source.lock().acquire(owner, Duration::from_secs(60)).await {
            Ok(grant) => {
                failing = None;
                attempts += 1;
                match grant {
                    Some(grant) => grant,
                    None => {
                        out("busy");
                        continue;
                    }
                }
            }
            Err(e) => {
                // The lock service failed (killed, cut off, or this worker's session expired
                // under it): the request stays unanswered; the worker starts afresh and tries
                // the same increment again, for up to a minute.
                out(&format!("lock-error {e}"));
                let since = *failing.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() > Duration::from_secs(60) {
                    return Err(UsageError(format!("the lock service failed for 60 s: {e}")));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                source.renew(&job.name).await?;
                continue;
            }
        };
        let t = grant.token;
        out(&format!("granted {t} {}", grant.ttl.as_micros()));
        // Getting ready to work (and a moment for the nemesis to strike the new holder).
        tokio::time::sleep(think).await;
        if job.no_fence {
            let v = store
                .read(key)
                .await
                .map_err(bad)?
                .map_or(0, |s| counter(&s.value));
            out(&format!("read {v}"));
            tokio::time::sleep(think).await;
            out(&format!("write-sent {t}"));
            let outcome = store
                .write(key, t, (v + 1).to_string().as_bytes())
                .await
                .map_err(bad)?;
            answered(t, &outcome);
        } else {
            // One transaction: the fence first (it holds the row until commit), then read, add
            // one, write.
            out(&format!("write-sent {t}"));
            let tx = client.transaction().await.map_err(pg)?;
            let outcome = store.fence(&tx, key, t).await.map_err(bad)?;
            if outcome.is_accepted() {
                let sql = format!("SELECT value FROM {} WHERE key = $1", job.table);
                let row = tx.query_one(&sql, &[&key]).await.map_err(pg)?;
                let v = counter(&row.get::<_, Vec<u8>>(0));
                out(&format!("read {v}"));
                tokio::time::sleep(think).await;
                let sql = format!("UPDATE {} SET value = $2 WHERE key = $1", job.table);
                let next = (v + 1).to_string().into_bytes();
                tx.execute(&sql, &[&key, &next]).await.map_err(pg)?;
                tx.commit().await.map_err(pg)?;
            }
            answered(t, &outcome);
        }
        out(&format!("release-sent {t}"));
        // A lease that ran out while this worker was paused may be gone with its session: an
        // error here is a release that was never answered.
        if let Ok(ok) = source.lock().release(owner, t).await {
            out(&format!("released {t} {ok}"));
        }
    }
    out("done");
    Ok(())
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

    #[test]
    fn addresses_are_routed_through_a_proxy() {
        let mut seen = Vec::new();
        let mut via = |hp: &str| {
            seen.push(hp.to_string());
            Ok::<_, UsageError>("127.0.0.1:9".to_string())
        };
        assert_eq!(
            via_url("redis://u:p@127.0.0.1:6379/2", &mut via).unwrap(),
            "redis://u:p@127.0.0.1:9/2"
        );
        assert_eq!(
            via_url("http://localhost:2379", &mut via).unwrap(),
            "http://127.0.0.1:9"
        );
        assert_eq!(
            via_keywords("host=127.0.0.1 port=5433 user=postgres", &mut via).unwrap(),
            "user=postgres host=127.0.0.1 port=9"
        );
        let err = via_url("redis-no-scheme", &mut via).unwrap_err();
        assert!(err.0.contains("expected scheme://host:port"), "{}", err.0);
        assert_eq!(seen, ["127.0.0.1:6379", "localhost:2379", "127.0.0.1:5433"]);
    }

    #[test]
    fn the_workers_writes_become_register_operations() {
        let line = |worker, at, text: &str| Line {
            worker,
            at,
            text: text.to_string(),
        };
        let lines = [
            line(0, 100, "write-sent 5"),
            line(0, 110, "read 3"),
            line(0, 120, "accepted 5"),
            line(1, 130, "write-sent 4"),
            line(1, 140, "rejected 4 5"),
            line(0, 150, "write-sent 6"),
        ];
        let ops = register_history(&lines, 100, 2);
        let write = |t, value| Call::Write {
            token: Token::new(t),
            value,
        };
        assert_eq!(ops.len(), 3);
        assert_eq!(
            (&ops[0].call, ops[0].invoked, &ops[0].completed),
            (&write(5, 4), 0, &Some((20, Answer::Accepted)))
        );
        assert_eq!(
            (&ops[1].call, &ops[1].completed),
            (
                &write(4, 0),
                &Some((
                    40,
                    Answer::Stale {
                        highest: Token::new(5)
                    }
                ))
            )
        );
        assert_eq!((&ops[2].call, &ops[2].completed), (&write(6, 0), &None));
    }
}
