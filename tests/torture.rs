//! `fencecheck torture` on real servers it starts itself: a short campaign per backend (worker
//! processes adding to a PostgreSQL counter under the lease, one SIGSTOPped past its lease per
//! trial) keeps every increment, the lease order and a trace the model explains; the unfenced
//! control loses increments and exits 1.
#![cfg(feature = "backends")]

use fencecheck_testkit::{started_or_skip, EtcdCluster, PgServer, RedisServer, ZkCluster};
use std::process::Command;

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

/// A fenced campaign of `trials` trials on the servers in `flags`: no increment lost, every
/// history in lease order, every trace explained, the report written.
fn campaign_keeps_every_increment(backend: &str, flags: &[&str], trials: u64) {
    let dir = fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "torture");
    let trials_text = trials.to_string();
    let mut args = vec!["--backend", backend, "--trials", &trials_text];
    args.extend_from_slice(flags);
    let report = dir.display().to_string();
    args.extend_from_slice(&["--report", &report]);
    let (code, out) = torture(&args);
    assert_eq!(code, 0, "{backend}: a fenced campaign broke a rule");
    assert_eq!(number(&out, "trials "), trials);
    assert_eq!(number(&out, "increments lost "), 0);
    assert!(number(&out, "writes accepted ") > 0);
    assert!(out.contains(&format!(
        "storage_in_lease_order held in {trials} of {trials} trials"
    )));
    assert!(out.contains(&format!(
        "{trials} of {trials} traces explained by the model"
    )));
    let md = std::fs::read_to_string(dir.join("torture.md")).unwrap();
    assert_eq!(md.matches("| explained (").count() as u64, trials, "{md}");
    let svg = std::fs::read_to_string(dir.join("worst-trial.svg")).unwrap();
    assert!(svg.contains("paused"), "the worst trial's pause is drawn");
}

#[test]
fn a_fenced_campaign_on_redis_keeps_every_increment_and_the_unfenced_control_loses_some() {
    let Some(redis) = started_or_skip("torture (redis)", RedisServer::start(false)) else {
        return;
    };
    let Some(pg) = started_or_skip("torture (redis, postgres)", PgServer::start()) else {
        return;
    };
    let (url, pg_url) = (redis.url(), pg.url());
    let flags = ["--redis-url", &url, "--pg-url", &pg_url, "--ttl-ms", "200"];
    campaign_keeps_every_increment("redis", &flags, 20);

    // The control: the same campaign writing without the token, on servers torture starts
    // itself.
    let (code, out) = torture(&[
        "--backend",
        "redis",
        "--ttl-ms",
        "200",
        "--trials",
        "6",
        "--no-fence",
    ]);
    assert_eq!(code, 1, "the unfenced control must fail");
    assert!(number(&out, "increments lost ") > 0, "{out}");
    assert!(number(&out, "trials violated ") > 0);
}

#[test]
fn a_fenced_campaign_on_etcd_keeps_every_increment() {
    let Some(etcd) = started_or_skip("torture (etcd)", EtcdCluster::start(3)) else {
        return;
    };
    let Some(pg) = started_or_skip("torture (etcd, postgres)", PgServer::start()) else {
        return;
    };
    let (endpoints, pg_url) = (etcd.endpoints().join(","), pg.url());
    // etcd leases count whole seconds.
    let flags = [
        "--endpoints",
        &endpoints,
        "--pg-url",
        &pg_url,
        "--ttl-ms",
        "1000",
        "--increments",
        "2",
    ];
    campaign_keeps_every_increment("etcd", &flags, 20);
}

#[test]
fn a_fenced_campaign_on_zookeeper_keeps_every_increment() {
    let Some(zk) = started_or_skip("torture (zookeeper)", ZkCluster::start(3)) else {
        return;
    };
    let Some(pg) = started_or_skip("torture (zookeeper, postgres)", PgServer::start()) else {
        return;
    };
    let (connect, pg_url) = (zk.connect_string(), pg.url());
    let flags = [
        "--zk",
        &connect,
        "--pg-url",
        &pg_url,
        "--ttl-ms",
        "400",
        "--increments",
        "2",
    ];
    campaign_keeps_every_increment("zookeeper", &flags, 20);
}

#[test]
fn bad_campaign_settings_are_one_line_errors() {
    for (args, says) in [
        (vec!["--trials", "0"], "--trials 0: expected 1 to 10000"),
        (vec!["--workers", "1"], "--workers 1: expected 2 to 16"),
        (vec!["--ttl-ms", "5"], "--ttl-ms 5: expected 50 to 10000"),
        (
            vec!["--increments", "101"],
            "--increments 101: expected 1 to 100",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_fencecheck"))
            .arg("torture")
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim(), format!("error: {says}"), "{args:?}");
    }
}
