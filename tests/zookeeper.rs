//! The ZooKeeper lock on real ZooKeeper servers this test starts (one server, and a three-server
//! ensemble for the faults): the backend contract, interoperation with Apache Curator's mutex,
//! bounded errors, and the lock working through the loss of the ensemble's leader.
#![cfg(feature = "backends")]

mod common;

use common::contract::{
    blind_campaign_is_caught, election_contract, every_round_served_in_order, lock_contract,
    lost_signal_contract,
};
use common::faults;
use fencecheck::backend::LockSpec;
use fencecheck::backend::{
    Acquired, FencedStorage, LocalFencedMap, LockService, Recorder, ZkElection, ZkLock, ZkOptions,
};
use fencecheck::check::trace::{validate, Replay};
use fencecheck::protocol::{one_leader_per_term, FencePolicy, History, Token};
use fencecheck_testkit::{
    signal, started_or_skip, FreezableProxy, ServerError, TempDir, ZkCluster,
};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(1);

#[tokio::test]
async fn zookeeper_lock_meets_the_contract() {
    let Some(zk) = started_or_skip("ZooKeeper contract", ZkCluster::start(1)) else {
        return;
    };
    let lock = ZkLock::connect(&zk.connect_string(), "contract", TTL)
        .await
        .unwrap();
    assert_eq!(
        lock.ttl().granted(),
        TTL,
        "the server granted the session timeout asked for"
    );
    lock_contract(&lock).await;
    lost_signal_contract(Arc::new(lock)).await;
    let lock = ZkLock::connect(&zk.connect_string(), "election", TTL)
        .await
        .unwrap();
    let wins = election_contract(Arc::new(lock)).await;
    one_leader_per_term(&wins).unwrap();

    // Negative control: a blind campaign on ZooKeeper wins a held election with the leader's
    // term, and the same checker says so.
    let lock = ZkLock::connect(&zk.connect_string(), "blind", TTL)
        .await
        .unwrap();
    blind_campaign_is_caught(lock).await;
}

#[tokio::test]
async fn bad_input_and_unreachable_ensembles_are_clear_errors() {
    for (connect, name, expected) in [
        ("", "x", "invalid ZooKeeper connect string: it is empty"),
        (
            "127.0.0.1",
            "x",
            "invalid ZooKeeper connect string: \"127.0.0.1\"",
        ),
        ("127.0.0.1:2181/chroot", "x", "expected HOST:PORT"),
        ("127.0.0.1:1", "", "invalid lock name: it is empty"),
        ("127.0.0.1:1", "/a//b", "invalid lock name"),
        ("127.0.0.1:1", "/zookeeper/quota", "reserved by ZooKeeper"),
    ] {
        let e = ZkLock::connect(connect, name, TTL)
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(expected), "{connect:?} {name:?}: {e}");
    }
    let e = ZkLock::connect("127.0.0.1:1", "x", Duration::ZERO)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("invalid ttl"), "{e}");

    // Every server down: an error naming the ensemble within the bound, not a hang.
    let connect = (0..3)
        .map(|_| format!("127.0.0.1:{}", fencecheck_testkit::free_port().unwrap()))
        .collect::<Vec<_>>()
        .join(",");
    let options = ZkOptions {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
    };
    let t0 = Instant::now();
    let e = ZkLock::connect_with(&connect, "x", TTL, options)
        .await
        .err()
        .unwrap()
        .to_string();
    let took = t0.elapsed();
    assert!(e.contains("zookeeper") && e.contains(&connect), "{e}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[tokio::test]
async fn tokens_are_creation_zxids_and_the_session_timeout_is_the_servers() {
    let Some(zk) = started_or_skip("ZooKeeper tokens", ZkCluster::start(1)) else {
        return;
    };
    let lock = ZkLock::connect(&zk.connect_string(), "/locks/tokens", TTL)
        .await
        .unwrap();
    assert_eq!(lock.path(), "/locks/tokens");
    let mut last = None;
    for i in 0..5 {
        let owner = format!("w{i}");
        let Acquired::Granted(g) = lock.try_acquire(&owner).await.unwrap() else {
            panic!("free lock refused");
        };
        let h = lock.holder().await.unwrap().unwrap();
        assert_eq!((h.owner.as_str(), h.token), (owner.as_str(), g.token));
        if let Some(prev) = last {
            assert!(g.token > prev, "{:?} after {prev:?}", g.token);
        }
        last = Some(g.token);
        assert!(lock.release(&owner, g.token).await.unwrap());
    }
    // Why the token is the czxid and not the node's sequence number: the sequence belongs to the
    // lock's parent node and restarts at 0 when the parent is deleted and made again (Curator
    // makes it a container node, which ZooKeeper deletes once empty). The zxid never restarts.
    let raw = zookeeper_client::Client::connect(&zk.connect_string())
        .await
        .unwrap();
    raw.delete("/locks/tokens", None).await.unwrap();
    let Acquired::Granted(g) = lock.try_acquire("after").await.unwrap() else {
        panic!("free lock refused");
    };
    assert!(g.token > last.unwrap());
    let nodes = raw.list_children("/locks/tokens").await.unwrap();
    assert!(
        nodes.len() == 1 && nodes[0].ends_with("-lock-0000000000"),
        "{nodes:?}"
    );
    assert!(lock.release("after", g.token).await.unwrap());
    // The server clamps the session timeout to its maximum (60 s here); the lock reports it
    // beside what was asked, and its grants carry the clamped TTL.
    let long = ZkLock::connect(&zk.connect_string(), "x", Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(long.ttl().granted(), Duration::from_secs(60));
    assert_eq!(long.ttl().asked(), Duration::from_secs(600));
    let g = long
        .acquire("clamped", Duration::from_secs(2))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g.ttl, Duration::from_secs(60));
    assert!(long.release("clamped", g.token).await.unwrap());
}

/// Compiles tests/interop/CuratorMutex.java against Debian's Curator jars (libcurator-recipes-java).
fn curator_program() -> Result<TempDir, ServerError> {
    if !std::path::Path::new("/usr/share/java/curator-recipes.jar").is_file() {
        return Err(ServerError::Missing {
            binary: "Apache Curator (/usr/share/java/curator-recipes.jar)".into(),
            hint: "Debian: apt-get install libcurator-recipes-java",
        });
    }
    let dir = TempDir::new("curator").unwrap();
    let status = Command::new("javac")
        .args(["-cp", "/usr/share/java/*", "-d"])
        .arg(dir.path())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/CuratorMutex.java"
        ))
        .status()
        .expect("javac runs");
    assert!(status.success(), "javac failed");
    Ok(dir)
}

/// Starts Curator's mutex on `path`; returns it with a channel of the lines it prints.
fn curator_mutex(classes: &TempDir, connect: &str, path: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new("java")
        .arg("-cp")
        .arg(format!("{}:/usr/share/java/*", classes.path().display()))
        .args(["CuratorMutex", connect, path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("java runs");
    let out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

fn curator_release(child: &mut Child, lines: &mpsc::Receiver<String>) {
    writeln!(child.stdin.as_mut().unwrap(), "release").unwrap();
    assert_eq!(
        lines.recv_timeout(Duration::from_secs(10)).as_deref(),
        Ok("RELEASED")
    );
    child.wait().unwrap();
}

// Two worker threads: the test blocks one while it waits for Curator's output, and the
// ZooKeeper sessions keep running on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curators_mutex_and_ours_exclude_each_other() {
    let Some(zk) = started_or_skip("Curator interop", ZkCluster::start(1)) else {
        return;
    };
    let Some(classes) = started_or_skip("Curator interop", curator_program()) else {
        return;
    };
    let path = "/locks/shared";
    // A lease long enough to outlast Curator's wait below without renewals.
    let lock = ZkLock::connect(&zk.connect_string(), path, Duration::from_secs(10))
        .await
        .unwrap();

    // Curator holds it: ours is refused and sees Curator's node as the holder; ours gets it,
    // with a larger token, once Curator lets go.
    let (mut curator, lines) = curator_mutex(&classes, &zk.connect_string(), path);
    assert_eq!(
        lines.recv_timeout(Duration::from_secs(20)).as_deref(),
        Ok("HELD")
    );
    assert!(
        matches!(
            lock.try_acquire("ours").await.unwrap(),
            Acquired::Busy { .. }
        ),
        "acquired while Curator held the lock"
    );
    let curators = lock.holder().await.unwrap().expect("Curator's node holds");
    curator_release(&mut curator, &lines);
    let g = lock
        .acquire("ours", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("free after Curator");
    assert!(g.token > curators.token);

    // Ours holds it: Curator waits, and gets it when we release.
    let (mut curator, lines) = curator_mutex(&classes, &zk.connect_string(), path);
    assert!(
        lines.recv_timeout(Duration::from_secs(2)).is_err(),
        "Curator took a lock we hold"
    );
    assert!(lock.release("ours", g.token).await.unwrap());
    assert_eq!(
        lines.recv_timeout(Duration::from_secs(10)).as_deref(),
        Ok("HELD")
    );
    let after = lock.holder().await.unwrap().expect("Curator holds");
    assert!(after.token > g.token);
    curator_release(&mut curator, &lines);
}

/// One round: acquire (retrying a call that failed while the ensemble lost its leader, as a
/// client must), write to fenced storage with the token, release. Returns the failed calls.
async fn fenced_round<L: LockService>(
    lock: &L,
    store: &Arc<LocalFencedMap>,
    recorder: &Recorder,
    history: &mut History,
    who: &str,
) -> usize {
    let store = recorder.store(store.clone(), who);
    let mut failures = 0;
    let grant = loop {
        match lock.acquire(who, Duration::from_secs(10)).await {
            Ok(Some(g)) => break g,
            Ok(None) => panic!("{who}: no grant within 10 s"),
            Err(e) => {
                eprintln!("{who}: attempt failed: {e}");
                failures += 1;
                assert!(failures < 10, "{who}: the lock kept failing: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    history.granted(who, grant.token);
    let outcome = store.write("k", grant.token, who.as_bytes()).await.unwrap();
    if outcome.is_accepted() {
        history.accepted(who);
    } else {
        history.rejected(who);
    }
    let mut released = false;
    for _ in 0..10 {
        match lock.release(who, grant.token).await {
            Ok(done) => {
                released = done;
                break;
            }
            Err(_) => failures += 1,
        }
    }
    assert!(released, "{who}: release refused");
    failures
}

const LEADER_KILLS: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_works_through_leader_kills_and_stopped_servers() {
    let Some(mut zk) = started_or_skip("ZooKeeper ensemble", ZkCluster::start(3)) else {
        return;
    };
    // Sessions must outlive a leader election (they are not expired while there is no leader).
    let recorder = Recorder::new();
    let lock = ZkLock::connect(&zk.connect_string(), "faults", Duration::from_secs(4))
        .await
        .unwrap();
    let lock = recorder.lock(lock);
    let store = Arc::new(LocalFencedMap::new(FencePolicy::Fenced));
    let mut history = History::new();
    let mut failed = 0;
    // kill -9 the leader: the other two elect a new one and the lock keeps working; restart it.
    for trial in 0..LEADER_KILLS {
        let leader = zk.leader().expect("a leader");
        zk.kill9(leader);
        let who = format!("kill-{trial}");
        failed += fenced_round(&lock, &store, &recorder, &mut history, &who).await;
        zk.restart(leader).unwrap();
    }
    // SIGSTOP one server (a slow or partitioned node): the majority still serves the lock.
    for trial in 0..LEADER_KILLS {
        let server = trial % zk.size();
        let pid = zk.pid(server).unwrap();
        signal(pid, libc::SIGSTOP).unwrap();
        let who = format!("stop-{trial}");
        failed += fenced_round(&lock, &store, &recorder, &mut history, &who).await;
        signal(pid, libc::SIGCONT).unwrap();
    }
    every_round_served_in_order(&history, 2 * LEADER_KILLS);
    // What the clients saw, failed calls included, is a behaviour of the model.
    let trace = recorder.trace();
    let replay = Replay::new(lock.ttl().granted(), FencePolicy::Fenced);
    let explained = validate(&trace, &replay).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{LEADER_KILLS} leader kills and {LEADER_KILLS} stopped servers: every round served, \
         tokens increasing, storage in lease order, the trace ({} events, {} grants) explained by the model; \
         {failed} calls retried by the caller",
        explained.events,
        explained.grants
    );
}

#[tokio::test]
async fn zk_election_observes_the_leader_and_its_term() {
    let Some(zk) = started_or_skip("ZooKeeper election", ZkCluster::start(1)) else {
        return;
    };
    let lock = ZkLock::connect(&zk.connect_string(), "/election/leader", TTL)
        .await
        .unwrap();
    let election: ZkElection = ZkElection::new(Arc::new(lock));
    let leader = election
        .campaign("node-1", Duration::from_secs(1))
        .await
        .unwrap()
        .expect("an empty election is won");
    assert!(leader.proclaim("10.0.0.1:8080").await.unwrap());
    let seen = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (seen.owner.as_str(), seen.token, seen.value.as_deref()),
        ("node-1", leader.term(), Some("10.0.0.1:8080"))
    );
    assert!(leader.term() > Token::new(0));
    let term = leader.term();
    assert!(leader.resign().await.unwrap());
    let next = election
        .campaign("node-2", Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    let observed = election
        .observe(Some(term), TTL)
        .await
        .unwrap()
        .expect("a new term");
    assert_eq!(
        (observed.owner.as_str(), observed.token),
        ("node-2", next.term())
    );
    assert!(next.term() > term);
}

#[test]
fn run_and_demo_work_on_zookeeper() {
    let Some(zk) = started_or_skip("run on ZooKeeper", ZkCluster::start(1)) else {
        return;
    };
    let connect = zk.connect_string();
    let fencecheck = common::fencecheck;
    let spec = format!("zk://{connect}");
    let flags = ["--lock", &spec];
    let first = common::run_token(&flags);
    let second = common::run_token(&flags);
    assert!(second > first, "zxid tokens {first} then {second}");
    // The child's exit status passes through.
    let run = [&["run", "--name", "job", "--ttl", "1s"][..], &flags].concat();
    let out = fencecheck(&[&run[..], &["--", "sh", "-c", "exit 7"]].concat());
    assert_eq!(out.status.code(), Some(7));
    // A malformed connect string is a usage error naming it.
    let out = fencecheck(&["run", "--lock", "zk://nohost", "--name", "j", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"nohost\"") && err.contains("HOST:PORT"),
        "{err}"
    );

    common::demo_rejects_the_paused_worker(&flags);
}

fn zk_flags(connect: &str) -> Vec<String> {
    ["--lock".to_string(), format!("zk://{connect}")].to_vec()
}

/// `fencecheck run` on ZooKeeper under the faults of `tests/run_faults.rs`: the lock node deleted
/// behind its back, the supervisor killed with SIGKILL, and the network to the ensemble frozen
/// (the margin measured against ZooKeeper itself: the session expires and its node goes); each
/// with the escaped control.
#[test]
fn run_faults_on_zookeeper() {
    let Some(zk) = started_or_skip("run faults on zookeeper", ZkCluster::start(1)) else {
        return;
    };
    let connect = zk.connect_string();
    let revoke = |name: &str| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let raw = zookeeper_client::Client::connect(&connect).await.unwrap();
            let path = format!("/fencecheck/{name}");
            for node in raw.list_children(&path).await.unwrap() {
                raw.delete(&format!("{path}/{node}"), None).await.unwrap();
            }
        });
    };
    let flags = zk_flags(&connect);
    faults::lost_lease_stops_the_whole_tree(&flags, &revoke, "zookeeper");
    faults::work_dies_with_its_supervisor(&flags, "zookeeper");
    let proxy = FreezableProxy::start(zk.address(0).parse().unwrap()).unwrap();
    let proxied = zk_flags(&proxy.addr().to_string());
    let direct = LockSpec::Zookeeper { connect };
    faults::stall_stops_the_work_before_the_server_expires_the_lease(
        &proxied,
        &proxy,
        &direct,
        "zookeeper",
    );
    let mut zk = zk;
    faults::waiters_ride_out_a_restart(&flags, &mut || zk.restart(0).unwrap(), "zookeeper");
}

/// Random calls answered like the protocol core's `LeaseTable` (tokens compared by grant order);
/// a lease taken away is the lock node deleted behind the holder's back. Negative control: a lock
/// that renews a lost lease is told apart.
#[test]
fn zookeeper_lock_answers_like_the_protocol_core() {
    let Some(zk) = started_or_skip("ZooKeeper differential", ZkCluster::start(1)) else {
        return;
    };
    let connect = zk.connect_string();
    let raw = std::sync::OnceLock::new();
    common::lock_diff::differential_with_control(
        "ZooKeeper",
        96,
        async |name| {
            ZkLock::connect(&connect, name, Duration::from_secs(10))
                .await
                .unwrap()
        },
        async |name| {
            if raw.get().is_none() {
                let client = zookeeper_client::Client::connect(&connect).await.unwrap();
                let _ = raw.set(client);
            }
            let raw = raw.get().expect("connected");
            let path = format!("/fencecheck/{name}");
            for node in raw.list_children(&path).await.unwrap() {
                raw.delete(&format!("{path}/{node}"), None).await.unwrap();
            }
        },
    );
}
