//! `fencecheck run` under faults, the same checks on every backend: a lost lease stops the
//! command's whole process tree, the work dies with its supervisor, and a network stall between
//! the supervisor and its server stops a slow-stopping job before the server expires the lease
//! (the margin measured against the server itself). Each check runs a control beside it: a job
//! that leaves the command's process group (`setsid`) is seen by the same check to outlive the
//! lease. Each stall trial's `run --trace` file is replayed through the model.

use fencecheck::backend::{connect, LockService, LockSpec};
use fencecheck_testkit::{signal, FreezableProxy, TempDir};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Starts `fencecheck run FLAGS --name NAME --ttl TTL EXTRA -- sh -c SCRIPT`, with a state
/// directory of its own.
pub fn run_cmd(flags: &[String], name: &str, ttl: &str, extra: &[&str], script: &str) -> Child {
    run_cmd_under(&[], flags, name, ttl, extra, script)
}

/// [`run_cmd`] started under `wrapper` (a command and its arguments, such as `faketime`).
pub fn run_cmd_under(
    wrapper: &[&str],
    flags: &[String],
    name: &str,
    ttl: &str,
    extra: &[&str],
    script: &str,
) -> Child {
    let fencecheck = env!("CARGO_BIN_EXE_fencecheck");
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(fencecheck);
            c
        }
        None => Command::new(fencecheck),
    };
    cmd.env(
        "XDG_STATE_HOME",
        fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "state"),
    )
    .arg("run")
    .args(flags)
    .args(["--name", name, "--ttl", ttl])
    .args(extra)
    .args(["--", "sh", "-c", script])
    .stderr(Stdio::piped())
    .spawn()
    .expect("start fencecheck run")
}

/// `fencecheck validate FILES EXTRA`: its exit status and what it printed.
pub fn validate(files: &[&Path], extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fencecheck"))
        .arg("validate")
        .args(files)
        .args(extra)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// Waits for `path` to hold a line, and returns it.
pub fn read_when_written(path: &Path) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(t) = std::fs::read_to_string(path) {
            if t.ends_with('\n') {
                return t.trim().to_string();
            }
        }
        assert!(Instant::now() < until, "{} never written", path.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether process `pid` is still running (a zombie counts as ended).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Whether `pid` has ended within `within`.
pub fn ends_within(pid: u32, within: Duration) -> bool {
    let until = Instant::now() + within;
    while alive(pid) {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Milliseconds since the Unix epoch (the clock the jobs' own `date +%s%3N` records use).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A command that starts a background job (`job & wait`, the common shape); the job records its
/// own PID once it runs (so with `escape` — the control, leaving the process group with `setsid` —
/// it has left the group by the time the PID is there to read).
pub fn job_and_wait(pidfile: &Path, escape: bool) -> String {
    let setsid = if escape { "setsid " } else { "" };
    format!(
        "{setsid}sh -c 'echo $$ > {}; exec sleep 30' >/dev/null 2>&1 & wait",
        pidfile.display()
    )
}

/// The lease is taken away behind `run`'s back (`revoke(name)`): exit 76 and the background job
/// ends with it; the escaped control survives.
pub fn lost_lease_stops_the_whole_tree(flags: &[String], revoke: &dyn Fn(&str), label: &str) {
    let dir = TempDir::new("run-tree").unwrap();
    for escape in [false, true] {
        let name = format!("tree-{escape}");
        let pidfile = dir.path().join(format!("{name}.pid"));
        let run = run_cmd(flags, &name, "3s", &[], &job_and_wait(&pidfile, escape));
        let job: u32 = read_when_written(&pidfile).parse().unwrap();
        revoke(&name);
        let out = run.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(76), "{label}: {stderr}");
        let what = format!("{label}: the background job {job} outlived the lease: {stderr}");
        judge(job, escape, Duration::from_millis(1500), &what);
    }
}

/// The job must end within `within`; with `escape` (the control) it must not, and is killed.
fn judge(job: u32, escape: bool, within: Duration, what: &str) {
    let ended = ends_within(job, within);
    if escape {
        assert!(!ended, "the escaped job {job} should still run");
        signal(job, libc::SIGKILL).unwrap();
    } else {
        assert!(ended, "{what}");
    }
}

/// `run` killed with SIGKILL: its job goes with it; the escaped control survives. A successor
/// `run --wait` then takes the lock, once the killed run's lease has run out on the server: the
/// two runs' `--trace` files are explained by the model at the TTL they recorded, and rejected
/// when replayed as 30 s leases (the successor's grant would have come inside the first lease).
pub fn work_dies_with_its_supervisor(flags: &[String], label: &str) {
    let dir = TempDir::new("run-supervisor").unwrap();
    for escape in [false, true] {
        let name = format!("sup-{escape}");
        let pidfile = dir.path().join(format!("{name}.pid"));
        let killed = dir.path().join(format!("{name}.trace"));
        let trace = ["--trace", killed.to_str().unwrap()];
        let mut run = run_cmd(flags, &name, "3s", &trace, &job_and_wait(&pidfile, escape));
        let job: u32 = read_when_written(&pidfile).parse().unwrap();
        run.kill().unwrap(); // SIGKILL: no handler, no cleanup of its own
        run.wait().unwrap();
        let what = format!("{label}: the job {job} outlived its killed supervisor");
        judge(job, escape, Duration::from_millis(500), &what);
        if escape {
            continue;
        }
        let next = dir.path().join("successor.trace");
        let flags_next = ["--wait", "10s", "--trace", next.to_str().unwrap()];
        let out = run_cmd(flags, &name, "3s", &flags_next, "true")
            .wait_with_output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{label}: the successor: {out:?}"
        );
        let (code, said) = validate(&[&killed, &next], &[]);
        assert_eq!(code, Some(0), "{label}: {said}");
        assert!(
            said.contains("from 2 clients in 2 files: explained"),
            "{said}"
        );
        eprintln!(
            "{label} supervisor killed, then a successor: {}",
            said.trim()
        );
        let (code, said) = validate(&[&killed, &next], &["--ttl", "30s"]);
        assert_eq!(code, Some(1), "{label}: as 30 s leases: {said}");
        assert!(said.contains("cannot be explained"), "{said}");
    }
}

/// A command whose background job needs 400 ms to stop after SIGTERM and then records when it
/// really ended (ms since the epoch, in `ended`); the job writes its own PID to `started` once it
/// runs (after `setsid`, for the control). With `escape` the
/// job runs outside the command's process group, where no signal reaches it (the control). The
/// job runs on the real clock even when `run` runs under libfaketime.
pub fn slow_stopping_job(started: &Path, ended: &Path, escape: bool) -> String {
    let setsid = if escape { "setsid " } else { "" };
    format!(
        "{setsid}env -u LD_PRELOAD -u FAKETIME sh -c 'echo $$ > {s}; \
         trap \"sleep 0.4; date +%s%3N > {e}; exit 0\" TERM; \
         while true; do sleep 0.02; done' >/dev/null 2>&1 & wait",
        e = ended.display(),
        s = started.display()
    )
}

/// What a stall trial measured, in ms.
#[derive(Debug)]
pub struct StallMargins {
    /// The server's expiry minus the job's own end record (positive: stopped in time).
    pub margin_ms: i64,
    /// How long the escaped control still ran after the server's expiry.
    pub control_overlap_ms: i64,
}

/// The network between `run` and its server freezes (`proxy`, which `proxied` flags point
/// through): renewals get no answer. The job needs 400 ms to stop after SIGTERM; the server
/// (reached directly at `direct`) is watched for the moment the lease is gone. The job must end
/// before it; the escaped control is seen still running after it.
pub fn stall_stops_the_work_before_the_server_expires_the_lease(
    proxied: &[String],
    proxy: &FreezableProxy,
    direct: &LockSpec,
    label: &str,
) -> StallMargins {
    let trial = StallTrial {
        wrapper: &[],
        proxied,
        extra: &[],
        proxy,
        direct,
    };
    let (margin_ms, stderr) = trial.run("stall", false);
    assert!(
        margin_ms > 0,
        "{label}: the job outlived the lease by {} ms: {stderr}",
        -margin_ms
    );
    let (control, _) = trial.run("stall-control", true);
    let margins = StallMargins {
        margin_ms,
        control_overlap_ms: -control,
    };
    eprintln!(
        "{label} stall: the job ended {} ms before the server expired the lease; the escaped \
         control still ran {} ms after",
        margins.margin_ms, margins.control_overlap_ms
    );
    margins
}

/// One stall trial's setting.
pub struct StallTrial<'a> {
    /// A command `run` is started under (e.g. `faketime -f "+0 x0.9"`), or none.
    pub wrapper: &'a [&'a str],
    /// `run`'s flags to reach the server through the proxy.
    pub proxied: &'a [String],
    /// More flags for `run` (e.g. `--drift 300ms`).
    pub extra: &'a [&'a str],
    /// The proxy that freezes.
    pub proxy: &'a FreezableProxy,
    /// The server, reached directly.
    pub direct: &'a LockSpec,
}

impl StallTrial<'_> {
    /// Runs a slow-stopping job (400 ms from SIGTERM, its own end record on the real clock) under
    /// `run` with TTL 2 s and grace 600 ms, freezes the network, and watches the server until
    /// the lease is gone. Returns the job's margin before that moment in ms (negative: the job
    /// outlived the lease; for `escape`, the control, how long it was still seen running) and
    /// `run`'s stderr.
    pub fn run(&self, name: &str, escape: bool) -> (i64, String) {
        let dir = TempDir::new("run-stall").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let started = dir.path().join("started");
        let ended = dir.path().join("ended");
        let script = slow_stopping_job(&started, &ended, escape);
        let trace = dir.path().join("run.trace");
        let mut extra = vec!["--grace", "600ms", "--trace", trace.to_str().unwrap()];
        extra.extend_from_slice(self.extra);
        let run = run_cmd_under(self.wrapper, self.proxied, name, "2s", &extra, &script);
        let job: u32 = read_when_written(&started).parse().unwrap();
        let watcher = rt
            .block_on(connect(
                self.direct,
                name,
                Duration::from_secs(2),
                Duration::from_secs(2),
            ))
            .expect("a direct connection to the server");
        let token = rt
            .block_on(watcher.holder())
            .unwrap()
            .expect("run holds the lease")
            .token;
        self.proxy.freeze();
        let until = Instant::now() + Duration::from_secs(20);
        let expired_ms = loop {
            let holder = rt.block_on(watcher.holder()).unwrap();
            if holder.map(|h| h.token) != Some(token) {
                break now_ms();
            }
            assert!(Instant::now() < until, "{name}: the lease never expired");
            std::thread::sleep(Duration::from_millis(5));
        };
        let margin = if escape {
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                alive(job) && !ended.exists(),
                "{name}: the escaped job stopped inside the lease"
            );
            let overlap = now_ms() - expired_ms;
            signal(job, libc::SIGKILL).unwrap();
            -overlap
        } else {
            expired_ms - read_when_written(&ended).parse::<i64>().unwrap()
        };
        self.proxy.thaw();
        let out = run.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(76), "{name}: {stderr}");
        // What `run` observed of the lock (the grant, renewals unanswered in the freeze and
        // answered after it, the lease concluded lost, the release) is a behaviour the model
        // allows, at the TTL the server grants.
        let ttl = format!("{}ms", watcher.ttl().granted().as_millis());
        let (code, said) = validate(&[&trace], &["--ttl", &ttl]);
        assert_eq!(
            code,
            Some(0),
            "{name}: {said}\n{}",
            std::fs::read_to_string(&trace).unwrap_or_default()
        );
        eprintln!("{name}: run's trace: {}", said.trim());
        (margin, stderr)
    }
}

/// The lock server restarted (`restart`) while three runs wait for a lock a fourth holds: the
/// waiters ride the outage out instead of giving up: each takes the lock in turn before `--wait`
/// runs out (exit 0) with a token of its own, and no two commands ran at once (from the
/// commands' own records of when they started and ended). The control: the same four runs, each
/// on a lock of its own, through the same restart; the same check sees their commands work at
/// once.
pub fn waiters_ride_out_a_restart(flags: &[String], restart: &mut dyn FnMut(), label: &str) {
    let trial = ride_out(flags, restart, label, false);
    assert!(
        trial.gave_up.is_empty(),
        "{label}: a waiter gave up: {:?}",
        trial.gave_up
    );
    assert!(
        trial.overlaps.is_empty(),
        "{label}: {:?}\n{}",
        trial.overlaps,
        trial.log
    );
    let mut tokens: Vec<&str> = trial.runs.iter().map(|r| r.token.as_str()).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert!(
        trial.runs.len() >= 4 && tokens.len() == trial.runs.len(),
        "{label}: {}",
        trial.log
    );
    let last_start = trial
        .runs
        .iter()
        .map(|r| r.start)
        .max()
        .unwrap_or(trial.asked);
    eprintln!(
        "{label}: {} runs took the lock in turn across the restart, 0 overlaps; the last \
         waiter started {} ms after the waiters asked",
        trial.runs.len(),
        last_start.saturating_sub(trial.asked) / 1_000_000
    );
    let control = ride_out(flags, restart, label, true);
    assert!(
        !control.overlaps.is_empty(),
        "{label}: the control's runs, each on a lock of its own, were not seen working at once:\n{}",
        control.log
    );
    eprintln!(
        "{label}: control (a lock per run): {} pairs of runs seen working at once",
        control.overlaps.len()
    );
}

/// One run's record of its command: its token and when it started and ended (ns).
struct Span {
    token: String,
    start: u64,
    end: u64,
}

/// What a ride-out trial saw.
struct RideOut {
    /// The stderr of each waiter that did not exit 0.
    gave_up: Vec<String>,
    runs: Vec<Span>,
    /// Pairs of runs whose commands worked at once.
    overlaps: Vec<String>,
    log: String,
    /// When the waiters asked (ns since the epoch, as the work records' `date +%s%N`).
    asked: u64,
}

/// A holder and three waiters (each on a lock of its own when `apart`), `restart` 700 ms after
/// the waiters asked; what their commands recorded.
fn ride_out(flags: &[String], restart: &mut dyn FnMut(), label: &str, apart: bool) -> RideOut {
    let dir = TempDir::new("ride-out").unwrap();
    let log = dir.path().join("work.log");
    let name = |i: usize| match apart {
        true => format!("ride-out-{}-{i}", std::process::id()),
        false => format!("ride-out-{}", std::process::id()),
    };
    // Each record names the run by its shell's pid: tokens of different locks may be equal.
    let work = |secs: &str| {
        format!(
            "echo \"$$ $FENCECHECK_TOKEN $(date +%s%N) start\" >> {log}; sleep {secs}; \
             echo \"$$ $FENCECHECK_TOKEN $(date +%s%N) end\" >> {log}",
            log = log.display()
        )
    };
    let holder = run_cmd(flags, &name(0), "3s", &[], &work("2"));
    // The holder is granted before the waiters ask.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !log.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let asked = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let waiters: Vec<Child> = (1..4)
        .map(|i| run_cmd(flags, &name(i), "3s", &["--wait", "40s"], &work("0.2")))
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    restart();
    let holder = holder.wait_with_output().unwrap();
    eprintln!(
        "{label}: holder exit {:?}: {}",
        holder.status.code(),
        String::from_utf8_lossy(&holder.stderr).trim()
    );
    let gave_up = waiters
        .into_iter()
        .map(|w| w.wait_with_output().unwrap())
        .filter(|out| out.status.code() != Some(0))
        .map(|out| String::from_utf8_lossy(&out.stderr).into_owned())
        .collect();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let runs = spans(&text);
    let mut overlaps = Vec::new();
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            if a.end > b.start && b.end > a.start {
                overlaps.push(format!("tokens {} and {} worked at once", a.token, b.token));
            }
        }
    }
    RideOut {
        gave_up,
        runs,
        overlaps,
        log: text,
        asked,
    }
}

/// The runs in a work log of `ID TOKEN NS start|end` lines; a run with no end never ended.
fn spans(text: &str) -> Vec<Span> {
    let mut ids: Vec<&str> = Vec::new();
    let mut runs: Vec<Span> = Vec::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        let [id, token, at, what] = w[..] else {
            panic!("a work record: {line:?}")
        };
        let at: u64 = at.parse().unwrap();
        match ids.iter().position(|i| *i == id) {
            Some(k) if what == "end" => runs[k].end = at,
            _ => {
                ids.push(id);
                runs.push(Span {
                    token: token.to_string(),
                    start: at,
                    end: u64::MAX,
                });
            }
        }
    }
    runs
}
