//! The Raft backend on real clusters this test starts (`fencecheck raft-node` processes): on three
//! nodes the backend contract, fenced storage in the same Raft group (with the unfenced control),
//! bounded errors, and leader kills and stopped nodes with a fenced write per round, the client's
//! trace replayed through the model; on one node `fencecheck run` under faults.
#![cfg(feature = "backends")]

mod common;

use common::contract::{
    election_contract, every_round_served_in_order, lock_contract, lost_signal_contract,
    storage_contract,
};
use common::faults;
use fencecheck::backend::raft::{status, RaftFencedStore, RaftLock, RaftOptions};
use fencecheck::backend::LockSpec;
use fencecheck::backend::{
    BackendError, FencedStorage, LockService, Recorder, TracedStore, WriteOutcome,
};
use fencecheck::check::trace::{validate, Replay};
use fencecheck::protocol::{one_leader_per_term, FencePolicy, History, Token};
use fencecheck_testkit::{signal, started_or_skip, FreezableProxy, RaftCluster};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(1);

fn cluster(test: &str) -> Option<RaftCluster> {
    started_or_skip(
        test,
        RaftCluster::start(env!("CARGO_BIN_EXE_fencecheck"), 3),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_lock_and_store_meet_the_contract() {
    let Some(raft) = cluster("raft contract") else {
        return;
    };
    let nodes = raft.nodes();
    let lock = RaftLock::connect(&nodes, "contract", TTL).unwrap();
    lock_contract(&lock).await;
    lost_signal_contract(Arc::new(lock)).await;
    let lock = RaftLock::connect(&nodes, "election", TTL).unwrap();
    let wins = election_contract(Arc::new(lock)).await;
    one_leader_per_term(&wins).unwrap();
    let options = RaftOptions::default();
    let fenced = RaftFencedStore::connect(&nodes, "fenced", FencePolicy::Fenced, options).unwrap();
    storage_contract(&fenced, true).await;
    // The control: keys made without a fence take the late write (the unfenced contract holds),
    // and the fenced contract, run on them, fails.
    let plain = RaftFencedStore::connect(&nodes, "plain", FencePolicy::AcceptAll, options).unwrap();
    storage_contract(&plain, false).await;
    let plain =
        RaftFencedStore::connect(&nodes, "plain-2", FencePolicy::AcceptAll, options).unwrap();
    let caught = tokio::spawn(async move { storage_contract(&plain, true).await }).await;
    assert!(
        caught.is_err(),
        "the fenced contract passed on an unfenced store"
    );
}

#[tokio::test]
async fn bad_input_and_unreachable_clusters_are_clear_errors() {
    let e = RaftLock::connect(&[], "x", TTL).unwrap_err().to_string();
    assert!(e.contains("invalid raft nodes: the list is empty"), "{e}");
    let e = RaftLock::connect(&["localhost".into()], "x", TTL)
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"localhost\" is not host:port"), "{e}");
    let e = RaftLock::connect(&["127.0.0.1:1".into()], "", TTL)
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid lock name"), "{e}");
    // No node listening: an error within the bound (and a probe), not a hang.
    let nodes: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", fencecheck_testkit::free_port().unwrap()))
        .collect();
    let options = RaftOptions {
        request_timeout: Duration::from_millis(500),
    };
    let lock = RaftLock::connect_with(&nodes, "x", TTL, options).unwrap();
    let t0 = Instant::now();
    let e = lock
        .try_acquire("a")
        .await
        .expect_err("no node is listening");
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // Nothing was sent (no node took a connection): unreachable, naming why, not a fate unknown.
    assert!(matches!(e, BackendError::Connect { .. }), "{e}");
    assert!(!e.fate_unknown() && e.is_transient(), "{e}");
    assert!(e.to_string().contains("connection refused"), "{e}");
}

/// A node that drops the handshake (a partitioned one) first in the list costs the client a
/// part of its bound, not all of it: the next node is tried and the acquire succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_is_passed_over_within_the_bound() {
    let Some(raft) = cluster("raft silent node") else {
        return;
    };
    let silent = fencecheck_testkit::SilentListener::start();
    let mut nodes = vec![silent.addr().to_string()];
    nodes.extend(raft.nodes());
    let options = RaftOptions {
        request_timeout: Duration::from_secs(1),
    };
    let lock = RaftLock::connect_with(&nodes, "silent", TTL, options).unwrap();
    let t0 = Instant::now();
    let lease = lock.try_acquire("a").await.unwrap();
    let took = t0.elapsed();
    assert!(
        matches!(lease, fencecheck::backend::Acquired::Granted(_)),
        "the free lock is granted: {lease:?}"
    );
    eprintln!("acquired past a silent node in {took:?} (bound 1 s)");
}

/// Acquires (retrying calls whose outcome is unknown, as a client must: a retried acquire that
/// finds its own lease waits it out), writes with the token to the Raft group's own fenced
/// store, and releases; recorded in `history`. Returns the failed attempts.
async fn fenced_round<L: LockService>(
    lock: &L,
    store: &TracedStore<RaftFencedStore>,
    history: &mut History,
    who: &str,
) -> usize {
    let mut failures = 0;
    let grant = loop {
        match lock.acquire("w", Duration::from_secs(10)).await {
            Ok(Some(g)) => break g,
            Ok(None) => panic!("{who}: no grant within 10 s"),
            Err(e) => {
                eprintln!("{who}: acquire failed: {e}");
                failures += 1;
                assert!(failures < 8, "{who}: the lock kept failing: {e}");
            }
        }
    };
    history.granted(who, grant.token);
    let outcome = loop {
        match store.write("k", grant.token, who.as_bytes()).await {
            Ok(o) => break o,
            Err(e) => {
                eprintln!("{who}: write failed: {e}");
                failures += 1;
                assert!(failures < 8, "{who}: the store kept failing: {e}");
            }
        }
    };
    if outcome.is_accepted() {
        history.accepted(who);
    } else {
        history.rejected(who);
    }
    for _ in 0..5 {
        match lock.release("w", grant.token).await {
            Ok(_) => return failures,
            Err(e) => {
                eprintln!("{who}: release failed: {e}");
                failures += 1;
            }
        }
    }
    // A lease that could not be released expires.
    tokio::time::sleep(TTL).await;
    failures
}

const LEADER_KILLS: usize = 20;
const STOPPED_NODES: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_works_through_leader_kills_and_stopped_nodes() {
    let Some(mut raft) = cluster("raft 3 nodes") else {
        return;
    };
    let nodes = raft.nodes();
    let options = RaftOptions {
        request_timeout: Duration::from_secs(1),
    };
    let recorder = Recorder::new();
    let lock = recorder.lock(RaftLock::connect_with(&nodes, "faults", TTL, options).unwrap());
    let store = RaftFencedStore::connect(&nodes, "faults", FencePolicy::Fenced, options).unwrap();
    let store = recorder.store(Arc::new(store), "w");
    let mut history = History::new();
    let mut failed = 0;
    let mut terms = Vec::new();
    // kill -9 the leader; the other two elect a new one; the lock keeps working; restart it.
    for trial in 0..LEADER_KILLS {
        let leader = raft.leader().expect("a leader");
        raft.kill9(leader);
        failed += fenced_round(&lock, &store, &mut history, &format!("kill-{trial}")).await;
        raft.restart(leader).unwrap();
        let now = raft.leader().expect("a leader after the restart");
        terms.push(status(&nodes[now], TTL).await.unwrap().term);
    }
    assert!(
        terms.windows(2).all(|w| w[0] <= w[1]) && terms[0] < *terms.last().unwrap(),
        "the leader kills changed no term: {terms:?}"
    );
    // SIGSTOP one node (a slow or partitioned member): the other two still serve.
    for trial in 0..STOPPED_NODES {
        let member = trial % raft.size();
        let pid = raft.pid(member).unwrap();
        signal(pid, libc::SIGSTOP).unwrap();
        failed += fenced_round(&lock, &store, &mut history, &format!("stop-{trial}")).await;
        signal(pid, libc::SIGCONT).unwrap();
    }
    every_round_served_in_order(&history, LEADER_KILLS + STOPPED_NODES);
    let trace = recorder.trace();
    let replay = Replay::new(lock.ttl().granted(), FencePolicy::Fenced);
    let explained = validate(&trace, &replay).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{LEADER_KILLS} leader kills (terms {} to {}) and {STOPPED_NODES} stopped nodes: every round \
         served, tokens increasing, the Raft group's own storage in lease order, the trace ({} \
         events, {} grants) explained by the model; {failed} calls retried by the caller",
        terms[0],
        terms.last().unwrap(),
        explained.events,
        explained.grants
    );
}

/// Takes three leases and writes under each, restarts every node at once (kill -9), then checks
/// that the next grant's token follows the last and the fence still refuses an older token.
async fn whole_cluster_restart(raft: &mut RaftCluster) -> Result<(), String> {
    let nodes = raft.nodes();
    let lock = RaftLock::connect(&nodes, "durable", TTL).unwrap();
    let options = RaftOptions::default();
    let store = RaftFencedStore::connect(&nodes, "durable", FencePolicy::Fenced, options).unwrap();
    let mut last = 0;
    for _ in 0..3 {
        let g = lock
            .acquire("a", Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert!(g.token.get() > last);
        last = g.token.get();
        assert!(store.write("d", g.token, b"v").await.unwrap().is_accepted());
        assert!(lock.release("a", g.token).await.unwrap());
    }
    raft.restart_all()
        .map_err(|e| format!("restarting the nodes: {e}"))?;
    let g = lock
        .acquire("b", Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no grant after the restart")?;
    if g.token.get() != last + 1 {
        return Err(format!(
            "the token counter was lost: {} granted after {last}",
            g.token
        ));
    }
    let stale = store.write("d", Token::new(last - 1), b"old").await;
    match stale.map_err(|e| e.to_string())? {
        WriteOutcome::Stale(_) => Ok(()),
        WriteOutcome::Accepted => Err(format!("the fence was lost: token {} accepted", last - 1)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_data_survive_the_whole_cluster_restarting() {
    let Some(mut raft) = cluster("raft restart") else {
        return;
    };
    whole_cluster_restart(&mut raft).await.unwrap();
    // The control: nodes that forget their log at a restart lose the counter, and it shows.
    let forgetful = RaftCluster::start_with(
        env!("CARGO_BIN_EXE_fencecheck"),
        3,
        &["--forget-on-restart"],
    );
    let mut forgetful = started_or_skip("raft restart control", forgetful).unwrap();
    let e = whole_cluster_restart(&mut forgetful)
        .await
        .expect_err("a cluster without durable storage kept its tokens");
    assert!(
        e.contains("the token counter was lost: 1 granted after 3"),
        "{e}"
    );
}

#[test]
fn run_and_demo_work_on_raft() {
    let Some(raft) = cluster("run on raft") else {
        return;
    };
    let nodes = raft.nodes().join(",");
    let spec = format!("raft://{nodes}");
    let flags = ["--lock", &spec];
    let first = common::run_token(&flags);
    let second = common::run_token(&flags);
    assert!(second > first, "tokens {first} then {second}");
    common::demo_rejects_the_paused_worker(&flags);
    // With --lock raft alone the demo starts its own three nodes and writes to their Raft group; the
    // unfenced control lets the paused worker's write land there.
    for (flags, expect) in [
        (
            &["demo", "--lock", "raft"][..],
            "final value : written-by-B",
        ),
        (
            &["demo", "--lock", "raft", "--no-fence"][..],
            "final value : written-by-A",
        ),
    ] {
        let out = common::fencecheck(flags);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("started a throwaway 3-node raft cluster"),
            "{text}"
        );
        assert!(text.contains(expect), "{text}");
    }
}

fn raft_flags(nodes: &str) -> Vec<String> {
    ["--lock".to_string(), format!("raft://{nodes}")].to_vec()
}

/// `fencecheck run` on a Raft group under the faults of `tests/run_faults.rs`: the lease released
/// behind its back by another client with its token, the supervisor killed with SIGKILL, and the
/// network to the node frozen (the margin measured against the group itself); each with the
/// escaped control. One node, so one proxy freezes all of `run`'s traffic.
#[test]
fn run_faults_on_raft() {
    let cluster = RaftCluster::start(env!("CARGO_BIN_EXE_fencecheck"), 1);
    let Some(raft) = started_or_skip("run faults on raft", cluster) else {
        return;
    };
    let nodes = raft.nodes();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let revoke = |name: &str| {
        rt.block_on(async {
            let lock = RaftLock::connect(&nodes, name, TTL).unwrap();
            let held = lock.holder().await.unwrap().expect("run holds the lease");
            assert!(lock.release(&held.owner, held.token).await.unwrap());
        })
    };
    let flags = raft_flags(&nodes.join(","));
    faults::lost_lease_stops_the_whole_tree(&flags, &revoke, "raft");
    faults::work_dies_with_its_supervisor(&flags, "raft");
    let node: std::net::SocketAddr = nodes[0].parse().unwrap();
    let proxy = FreezableProxy::start(node).unwrap();
    let proxied = raft_flags(&proxy.addr().to_string());
    let direct = LockSpec::Raft {
        nodes: nodes.clone(),
    };
    faults::stall_stops_the_work_before_the_server_expires_the_lease(
        &proxied, &proxy, &direct, "raft",
    );
    let mut raft = raft;
    faults::waiters_ride_out_a_restart(&flags, &mut || raft.restart(0).unwrap(), "raft");
}

/// A `raft-node` on `data` with the single member `1=127.0.0.1:port`.
fn raft_node(data: &std::path::Path, port: u16) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fencecheck"));
    command
        .args(["raft-node", "--id", "1", "--init"])
        .args(["--members", &format!("1=127.0.0.1:{port}")])
        .arg("--dir")
        .arg(data)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    command
}

/// Waits until the node on `port` answers a status request.
fn serving(port: u16) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if rt.block_on(status(&addr, TTL)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A node owns its directory: a second `raft-node` on it (with another address) is refused in
/// one line naming the first one's pid, while the first serves on; once the first is killed, the
/// directory serves again (the lock dies with its process). A log with a repeated entry (what
/// two nodes writing one directory leave behind) is refused; the same log without the repeat
/// starts (the control). Timing flags and members that cannot work are refused.
#[test]
fn a_node_owns_its_directory_and_refuses_a_log_that_repeats() {
    let dir = fencecheck_testkit::TempDir::new("raft-dir").unwrap();
    let data = dir.path().join("n1");
    let port = || fencecheck_testkit::free_port().unwrap();
    let (p1, p2, p3) = (port(), port(), port());
    let mut first = raft_node(&data, p1).spawn().unwrap();
    assert!(serving(p1), "the first node serves");
    let t0 = Instant::now();
    let second = raft_node(&data, p2).output().unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("in use by another raft-node") && err.contains(&first.id().to_string()),
        "{err}"
    );
    assert!(serving(p1), "the first node still serves");
    first.kill().unwrap();
    first.wait().unwrap();

    // The same directory, its holder gone: the node replays its log and serves.
    let mut again = raft_node(&data, p2).spawn().unwrap();
    assert!(
        serving(p2),
        "the directory serves again after its holder died"
    );
    again.kill().unwrap();
    again.wait().unwrap();

    // The log with its last entry written twice.
    let log_path = data.join("log.jsonl");
    let log = std::fs::read_to_string(&log_path).unwrap();
    let last_entry = log
        .lines()
        .rfind(|l| l.starts_with("{\"Entry\""))
        .expect("the node logged entries")
        .to_string();
    std::fs::write(&log_path, format!("{log}{last_entry}\n")).unwrap();
    let refused = raft_node(&data, p3).output().unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("log.jsonl line") && err.contains("repeats or goes back"),
        "{err}"
    );

    for (flags, says) in [
        (
            &["--heartbeat", "0s"][..],
            "--heartbeat 0ns: expected at least 1ms",
        ),
        (
            &["--election", "10000h"][..],
            "--election 36000000s: expected at most 600s",
        ),
    ] {
        let out = raft_node(&data, p3).args(flags).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fencecheck"))
        .args(["raft-node", "--id", "1", "--members"])
        .arg(format!("1=127.0.0.1:{p3},2=127.0.0.1:{p3}"))
        .arg("--dir")
        .arg(dir.path().join("n2"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ids 1 and 2 share"), "{err}");
}

/// `run --wait` through the kill of a 3-node Raft cluster's leader: three waiters take the lock
/// in turn after the holder, none gives up, no two commands overlap.
#[test]
fn run_waiters_ride_out_a_leader_kill_on_raft() {
    let cluster = RaftCluster::start(env!("CARGO_BIN_EXE_fencecheck"), 3);
    let Some(mut raft) = started_or_skip("raft leader kill while waiting", cluster) else {
        return;
    };
    let flags = raft_flags(&raft.nodes().join(","));
    let mut kill_leader = || {
        let leader = raft.leader().unwrap_or(0);
        raft.restart(leader).unwrap();
    };
    faults::waiters_ride_out_a_restart(&flags, &mut kill_leader, "raft leader kill");
}
