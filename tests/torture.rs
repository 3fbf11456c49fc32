//! `fencecheck torture` on real servers: a short campaign per backend (worker processes adding
//! to a PostgreSQL counter under the lease; per trial one fault by turns: a holder SIGSTOPped
//! past its lease, cut off from the lock service and the database by its proxies, the lock
//! server killed and restarted, a worker's clock at a quarter speed; on etcd, ZooKeeper and Raft
//! clusters in network namespaces, the holder and the leader cut off) keeps every increment, the
//! lease order, a trace the model explains and a linearizable register history; the unfenced
//! control loses increments and exits 1. Pause, stall and partition strike (a write refused, or work going
//! on after a later grant) in at least 80 % of their trials, fenced or not, and at least 80 % of
//! the unfenced control's trials break a rule, on every backend.
#![cfg(feature = "backends")]

use fencecheck_testkit::{find_on_path, postgres_installed, servers_required};
use std::process::Command;

/// Every nemesis.
const ALL: &str = "pause,stall,kill-server,clock-skew";

/// Debian's Python, where python3-redis and python3-psycopg2 install.
const PYTHON: &str = "/usr/bin/python3";

/// Whether what torture needs here is installed (server binaries on PATH, `postgresql`,
/// `libfaketime`); says so loudly when not (and fails under FENCECHECK_REQUIRE_SERVERS=1).
fn servers_present(test: &str, needs: &[&str]) -> bool {
    let installed = |what: &str| match what {
        "postgresql" => postgres_installed(),
        "zookeeper" => std::path::Path::new("/usr/share/java/zookeeper.jar").exists(),
        "libfaketime" => fencecheck::campaign::libfaketime().is_some(),
        // Debian's python3-redis and python3-psycopg2, for the example worker.
        "python3-redis" => Command::new(PYTHON)
            .args(["-c", "import redis, psycopg2"])
            .output()
            .is_ok_and(|o| o.status.success()),
        binary => find_on_path(binary).is_some(),
    };
    let missing: Vec<&str> = needs.iter().copied().filter(|w| !installed(w)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        !servers_required(),
        "{test}: {} not installed and FENCECHECK_REQUIRE_SERVERS is set",
        missing.join(", ")
    );
    eprintln!("SKIPPED {test}: {} not installed", missing.join(", "));
    false
}

/// Runs `fencecheck torture ARGS`; returns its exit code and its output.
fn torture(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fencecheck"))
        .arg("torture")
        .args(args)
        .output()
        .expect("run fencecheck torture");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    (out.status.code().unwrap_or(-1), stdout)
}

fn number(stdout: &str, label: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{stdout}"));
    line[label.len()..].trim().parse().unwrap()
}

/// How many trials `nemesis` was given, struck, and saw break a rule, from the totals.
fn strikes(stdout: &str, nemesis: &str) -> (u64, u64, u64) {
    let label = format!("nemesis {nemesis:<14} struck ");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(&label))
        .unwrap_or_else(|| panic!("no strike rate for {nemesis} in:\n{stdout}"));
    let words: Vec<&str> = line.split([' ', ',']).collect();
    let n = |k: usize| words[k].parse::<u64>().unwrap();
    (n(2), n(0), n(9))
}

/// The nemeses with teeth, where asked for, struck (a write refused, or work going on after a
/// later grant) in at least 80 % of their trials: a green campaign whose faults never bit would
/// say nothing.
fn nemeses_bit(stdout: &str, flags: &[&str]) {
    for nemesis in ["pause", "stall", "kill-server", "partition"] {
        if flags.iter().any(|f| f.contains(nemesis)) {
            let (given, struck, _) = strikes(stdout, nemesis);
            assert!(
                struck * 5 >= given * 4,
                "{nemesis} struck only {struck} of {given} trials:\n{stdout}"
            );
        }
    }
}

/// The control: the same backend, writing without the token, under `nemeses`: the campaign
/// exits 1, increments are lost, every nemesis broke a rule in some of its trials, and at least
/// 80 % of the pause and stall trials broke one.
fn unfenced_control_fails(backend: &str, ttl_ms: &str, trials: u64, nemeses: &str) {
    let trials_text = trials.to_string();
    let (code, out) = torture(&[
        "--lock",
        backend,
        "--ttl-ms",
        ttl_ms,
        "--increments",
        "2",
        "--trials",
        &trials_text,
        "--nemesis",
        nemeses,
        "--no-fence",
    ]);
    assert_eq!(code, 1, "{backend}: the unfenced control must fail");
    assert!(number(&out, "increments lost ") > 0, "{out}");
    let (mut paused, mut broke) = (0, 0);
    for nemesis in nemeses.split(',') {
        let (given, _, violated) = strikes(&out, nemesis);
        assert!(
            violated > 0,
            "{backend}: {nemesis} broke no rule in {given} unfenced trials:\n{out}"
        );
        if nemesis != "kill-server" {
            (paused, broke) = (paused + given, broke + violated);
        }
    }
    assert!(
        broke * 5 >= paused * 4,
        "{backend}: only {broke} of {paused} unfenced pause and stall trials broke a rule"
    );
    // Pause and stall bite the same fenced or not; kill-server's teeth were counted in the
    // fenced campaign.
    nemeses_bit(&out, &[&nemeses.replace("kill-server", "")]);
    let violated = number(&out, "trials violated ");
    eprintln!("{backend} unfenced control: {violated} of {trials} trials broke a rule");
}

/// A fenced campaign of `trials` trials on the servers in `flags`: no increment lost, every
/// history in lease order, every trace explained, pause and stall struck, the report written.
fn campaign_keeps_every_increment(backend: &str, flags: &[&str], trials: u64) -> String {
    let dir = fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "torture");
    let trials_text = trials.to_string();
    let mut args = vec!["--lock", backend, "--trials", &trials_text];
    args.extend_from_slice(flags);
    let report = dir.display().to_string();
    args.extend_from_slice(&["--report", &report]);
    let (code, out) = torture(&args);
    assert_eq!(code, 0, "{backend}: a fenced campaign broke a rule");
    assert_eq!(number(&out, "trials "), trials);
    assert_eq!(number(&out, "increments lost "), 0);
    assert!(number(&out, "writes accepted ") > 0);
    nemeses_bit(&out, flags);
    assert!(out.contains(&format!(
        "storage_in_lease_order held in {trials} of {trials} trials"
    )));
    assert!(out.contains(&format!(
        "{trials} of {trials} traces explained by the model"
    )));
    assert!(out.contains(&format!(
        "{trials} of {trials} register histories linearizable"
    )));
    let md = std::fs::read_to_string(dir.join("torture.md")).unwrap();
    assert_eq!(md.matches("| explained (").count() as u64, trials, "{md}");
    assert_eq!(md.matches("| linearizable (").count() as u64, trials);
    // Every nemesis asked for struck at least once.
    for (nemesis, drawn) in [
        ("pause", "paused ("),
        ("stall", "stalled (cut off"),
        ("kill-server", "killed (kill -9) and restarted"),
        ("clock-skew", "clock at a quarter speed"),
        (
            "partition",
            "cut off (partition: every packet to and from it dropped)",
        ),
    ] {
        if flags.iter().any(|f| f.contains(nemesis)) {
            assert!(
                md.contains(drawn),
                "no {nemesis} trial in the report:\n{md}"
            );
        }
    }
    let svg = std::fs::read_to_string(dir.join("worst-trial.svg")).unwrap();
    assert!(
        svg.contains("fill=\"#ccc\""),
        "the worst trial's fault is drawn"
    );
    let html = std::fs::read_to_string(dir.join("torture.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<svg"));
    assert!(md.contains(&format!("**PASS: all {trials} trials kept every rule**")));
    assert!(html.contains("<p class=\"banner ok\">PASS"));
    stored_trials_recheck(&dir, trials);
    out
}

/// Runs `fencecheck validate ARGS`; its exit code and stdout.
fn validate(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fencecheck"))
        .arg("validate")
        .args(args)
        .output()
        .expect("run fencecheck validate");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), stdout)
}

/// Every trial stored under the report directory: its verdict names the command that re-checks
/// its trace, and that command explains it as the campaign did. The control: the first trial's
/// trace doctored (its second grant given the first grant's token) is rejected.
fn stored_trials_recheck(dir: &std::path::Path, trials: u64) {
    for i in 1..=trials {
        let at = dir.join(format!("trials/{i:03}"));
        let verdict = std::fs::read_to_string(at.join("verdict.txt")).unwrap();
        assert!(
            verdict.starts_with(&format!("trial {i}: kept every rule")),
            "{verdict}"
        );
        let command = verdict
            .lines()
            .find_map(|l| l.strip_prefix("re-check the trace: fencecheck validate "))
            .unwrap_or_else(|| panic!("no re-check command in {verdict}"));
        let mut args: Vec<&str> = command.split(' ').collect();
        assert_eq!(args.pop(), Some("trace"));
        let trace = at.join("trace").display().to_string();
        args.push(&trace);
        let (code, out) = validate(&args);
        assert_eq!(code, 0, "trial {i}: {out}");
        assert!(out.contains("explained by the model"), "{out}");
    }
    let original = std::fs::read_to_string(dir.join("trials/001/trace")).unwrap();
    let grants: Vec<&str> = original
        .lines()
        .filter(|l| l.contains("\tgranted "))
        .collect();
    assert!(grants.len() >= 2, "{original}");
    let first_token = grants[0].rsplit('\t').next().unwrap();
    let second = grants[1].rsplit_once('\t').unwrap().0;
    let doctored = original.replacen(grants[1], &format!("{second}\t{first_token}"), 1);
    let path = dir.join("doctored.trace");
    std::fs::write(&path, doctored).unwrap();
    let (code, out) = validate(&["--work-may-overlap", path.to_str().unwrap()]);
    assert_eq!(code, 1, "the doctored trace must be rejected: {out}");
    assert!(out.contains("cannot be explained"), "{out}");
}

#[test]
fn a_fenced_campaign_on_redis_keeps_every_increment_and_the_unfenced_control_loses_some() {
    // Servers torture starts itself (a persistent Redis, so it may be killed).
    if !servers_present(
        "torture (redis)",
        &["redis-server", "postgresql", "libfaketime"],
    ) {
        return;
    }
    let flags = ["--ttl-ms", "200", "--nemesis", ALL];
    campaign_keeps_every_increment("redis", &flags, 20);

    unfenced_control_fails("redis", "200", 9, "pause,stall,kill-server");
}

#[test]
fn a_fenced_campaign_on_etcd_keeps_every_increment_and_the_unfenced_control_loses_some() {
    // A 3-member cluster torture starts itself (so it may kill the leader).
    if !servers_present("torture (etcd)", &["etcd", "postgresql", "libfaketime"]) {
        return;
    }
    // etcd leases count whole seconds: the trials run on the second etcd grants, so that the
    // skewed worker's think times outlast it (on 300 ms, clock-skew never struck).
    let flags = ["--ttl-ms", "300", "--increments", "2", "--nemesis", ALL];
    let out = campaign_keeps_every_increment("etcd", &flags, 20);
    assert!(out.contains(", lease 1s (asked 300ms), "), "{out}");
    let (given, struck, _) = strikes(&out, "clock-skew");
    assert!(struck > 0, "clock-skew struck none of {given} etcd trials");
    unfenced_control_fails("etcd", "1000", 9, "pause,stall,kill-server");
}

#[test]
fn a_fenced_campaign_on_zookeeper_keeps_every_increment_and_the_unfenced_control_loses_some() {
    // A 3-server ensemble torture starts itself (so it may kill the leader).
    if !servers_present(
        "torture (zookeeper)",
        &["zookeeper", "postgresql", "libfaketime"],
    ) {
        return;
    }
    // clock-skew is refused on ZooKeeper (no teeth: the server's clock expires sessions).
    let all = "pause,stall,kill-server";
    let flags = ["--ttl-ms", "400", "--increments", "2", "--nemesis", all];
    campaign_keeps_every_increment("zookeeper", &flags, 20);
    unfenced_control_fails("zookeeper", "400", 9, "pause,stall,kill-server");
}

#[test]
fn a_fenced_campaign_on_raft_keeps_every_increment_and_the_unfenced_control_loses_some() {
    // A 3-node cluster of `fencecheck raft-node` that torture starts itself (so it may kill the
    // leader).
    if !servers_present("torture (raft)", &["postgresql", "libfaketime"]) {
        return;
    }
    let flags = ["--ttl-ms", "400", "--increments", "2", "--nemesis", ALL];
    campaign_keeps_every_increment("raft", &flags, 20);
    unfenced_control_fails("raft", "400", 9, "pause,stall,kill-server");
}

/// The partition nemesis on a cluster of three in network namespaces: the holder cut off from
/// the lock service and the database, the leader from its peers and clients, until a
/// successor sends its write. Fenced, it strikes in at least 80 % of the trials and every rule
/// holds; unfenced, at least 80 % of the trials break one.
fn partitions_strike(backend: &str, ttl_ms: &str) {
    let flags = [
        "--ttl-ms",
        ttl_ms,
        "--increments",
        "2",
        "--nemesis",
        "partition",
    ];
    campaign_keeps_every_increment(backend, &flags, 5);
    unfenced_control_fails(backend, ttl_ms, 5, "partition");
}

#[test]
fn partitions_of_an_etcd_cluster_strike_and_the_unfenced_control_breaks_rules() {
    if !servers_present("torture partition (etcd)", &["etcd", "postgresql", "ip"]) {
        return;
    }
    partitions_strike("etcd", "1000");
}

#[test]
fn partitions_of_a_zookeeper_ensemble_strike_and_the_unfenced_control_breaks_rules() {
    let needs = ["zookeeper", "postgresql", "ip"];
    if !servers_present("torture partition (zookeeper)", &needs) {
        return;
    }
    partitions_strike("zookeeper", "400");
}

#[test]
fn partitions_of_a_raft_cluster_strike_and_the_unfenced_control_breaks_rules() {
    if !servers_present("torture partition (raft)", &["postgresql", "ip"]) {
        return;
    }
    partitions_strike("raft", "400");
}

#[test]
fn a_fenced_campaign_on_the_in_process_lock_keeps_every_increment_and_the_control_loses_some() {
    if !servers_present("torture (in-process)", &["postgresql"]) {
        return;
    }
    let flags = ["--ttl-ms", "200", "--nemesis", "pause,stall"];
    campaign_keeps_every_increment("local", &flags, 20);
    let dir = fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "torture-control");
    let (code, out) = torture(&[
        "--report",
        dir.to_str().unwrap(),
        "--lock",
        "local",
        "--ttl-ms",
        "200",
        "--trials",
        "6",
        "--nemesis",
        "pause,stall",
        "--no-fence",
    ]);
    assert_eq!(code, 1, "the unfenced control must fail");
    assert!(number(&out, "increments lost ") > 0, "{out}");
    let md = std::fs::read_to_string(dir.join("torture.md")).unwrap();
    assert!(
        md.contains("trials broke a rule**") && md.contains("**FAIL: "),
        "{md}"
    );
    let broke = (1..=6)
        .map(|i| std::fs::read_to_string(dir.join(format!("trials/{i:03}/verdict.txt"))).unwrap())
        .filter(|v| v.contains(": BROKE A RULE\n") && v.contains("--unfenced"))
        .count();
    assert!(
        broke >= 5,
        "the stored verdicts of at least 5 of 6 unfenced trials say they broke a rule: {broke}"
    );
}

/// A user's own client under the campaign (`--worker-cmd`): the example worker on redis-py's
/// `Lock`, writing without a token, loses increments and its trace is not explained (a write
/// the fenced storage would have refused, accepted); the same worker carrying a fencing token
/// to PostgreSQL keeps every increment, and pause and stall struck it.
#[test]
fn a_python_worker_on_redis_py_lock_is_caught_unfenced_and_passes_fenced() {
    if !servers_present(
        "torture (python worker)",
        &["redis-server", "postgresql", "python3-redis"],
    ) {
        return;
    }
    let worker = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/workers/redis_py_lock.py"
    );
    let run = |extra: &str| {
        let cmd = format!("{PYTHON} {worker}{extra}");
        torture(&[
            "--lock",
            "redis",
            "--ttl-ms",
            "300",
            "--increments",
            "2",
            "--trials",
            "6",
            "--nemesis",
            "pause,stall",
            "--worker-cmd",
            &cmd,
        ])
    };
    let (code, out) = run("");
    assert_eq!(code, 1, "the unfenced redis-py worker must be caught");
    assert!(number(&out, "trials violated ") >= 5, "{out}");
    assert!(number(&out, "increments lost ") > 0, "{out}");
    assert!(!out.contains("6 of 6 traces explained"), "{out}");
    let (code, out) = run(" --fence");
    assert_eq!(code, 0, "the fenced redis-py worker keeps every rule");
    assert_eq!(number(&out, "increments lost "), 0);
    assert!(number(&out, "writes rejected ") > 0, "{out}");
    nemeses_bit(&out, &["pause,stall"]);
}

#[test]
fn bad_campaign_settings_are_one_line_errors() {
    for (args, starts) in [
        (
            vec!["--trials", "0"],
            "error: --trials 0: expected 1 to 10000",
        ),
        (
            vec!["--workers", "1"],
            "error: --workers 1: expected 2 to 16",
        ),
        (
            vec!["--ttl-ms", "5"],
            "error: --ttl-ms 5: expected 50 to 10000",
        ),
        (
            vec!["--increments", "101"],
            "error: --increments 101: expected 1 to 100",
        ),
        (
            vec!["--lock", "redis://127.0.0.1:1", "--nemesis", "kill-server"],
            "error: --nemesis kill-server kills only servers torture starts itself: give --lock a \
             kind alone (redis, etcd, zk, raft) rather than an address, or leave out kill-server",
        ),
        (
            vec!["--nemesis", "pause,split-brain"],
            "error: invalid value 'split-brain' for '--nemesis <NEMESIS,...>': unknown nemesis \
             \"split-brain\"; expected one of pause, stall, kill-server, partition, clock-skew",
        ),
        (
            vec!["--lock", "redis", "--nemesis", "partition"],
            "error: --nemesis partition cuts a cluster's leader off from its peers, inside \
             network namespaces torture makes for the servers it starts: expected --lock etcd, \
             zk or raft (a kind alone, not an address)",
        ),
        (
            vec![
                "--lock",
                "etcd",
                "--nemesis",
                "partition",
                "--pg-url",
                "host=127.0.0.1",
            ],
            "error: --pg-url host=127.0.0.1: the partition nemesis runs in network namespaces",
        ),
        (
            vec!["--lock", "local", "--nemesis", "clock-skew"],
            "error: --nemesis clock-skew: not for the in-process lock",
        ),
        (
            vec!["--lock", "zk", "--nemesis", "pause,clock-skew"],
            "error: --nemesis clock-skew has no teeth on ZooKeeper",
        ),
        (
            vec!["--lock", "local", "--worker-cmd", "./my-worker"],
            "error: --worker-cmd: an external worker needs a lock service it can reach",
        ),
        // A report directory that cannot be made is refused before any server starts.
        (
            vec!["--report", "/proc/no-such-dir/torture"],
            "error: --report /proc/no-such-dir/torture: cannot write there",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_fencecheck"))
            .arg("torture")
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: no server started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with(starts), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// A lock service given by address that does not answer is reported before the first trial, in
/// one line naming it, within seconds (exit 69: unavailable).
#[test]
fn an_unreachable_lock_service_is_reported_before_the_first_trial() {
    if !servers_present(
        "an_unreachable_lock_service_is_reported_before_the_first_trial",
        &["postgresql"],
    ) {
        return;
    }
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", free.local_addr().unwrap());
    drop(free);
    let began = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_fencecheck"))
        .args(["torture", "--lock", &url, "--trials", "1"])
        .output()
        .unwrap();
    let took = began.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.starts_with(&format!("error: the lock service {url}: ")),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("trial"));
    eprintln!("refused in {took:?}");
}
