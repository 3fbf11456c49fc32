//! The etcd lock on real etcd clusters this test starts (one member, and three for the faults):
//! the backend contract, interoperation with `etcdctl lock` both ways, bounded errors, and the
//! lock working through a leader kill.
#![cfg(feature = "backends")]

mod common;

use common::contract::{
    election_contract, every_round_served_in_order, lock_contract, lost_signal_contract,
};
use common::faults;
use fencecheck::backend::LockSpec;
use fencecheck::backend::{
    Acquired, BackendError, EtcdLock, EtcdOptions, FencedStorage, LocalFencedMap, LockService,
    Recorder, TracedStore,
};
use fencecheck::check::trace::{validate, Replay};
use fencecheck::protocol::{one_leader_per_term, FencePolicy, History, Token};
use fencecheck_testkit::{signal, started_or_skip, EtcdCluster, FreezableProxy};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(1);

#[tokio::test]
async fn etcd_lock_meets_the_contract() {
    let Some(etcd) = started_or_skip("etcd contract", EtcdCluster::start(1)) else {
        return;
    };
    let lock = EtcdLock::connect(&etcd.endpoints(), "contract", TTL)
        .await
        .unwrap();
    lock_contract(&lock).await;
    lost_signal_contract(std::sync::Arc::new(lock)).await;
    let lock = EtcdLock::connect(&etcd.endpoints(), "election", TTL)
        .await
        .unwrap();
    let wins = election_contract(std::sync::Arc::new(lock)).await;
    one_leader_per_term(&wins).unwrap();
    // etcd leases count whole seconds: 1.5 s is granted as 2 s, and grants carry the 2 s.
    let lock = EtcdLock::connect(&etcd.endpoints(), "rounded", Duration::from_millis(1500))
        .await
        .unwrap();
    assert_eq!(lock.ttl().asked(), Duration::from_millis(1500));
    assert_eq!(lock.ttl().granted(), Duration::from_secs(2));
    let g = lock.acquire("r", TTL).await.unwrap().unwrap();
    assert_eq!(g.ttl, Duration::from_secs(2));
    assert!(lock.release("r", g.token).await.unwrap());
}

/// Starts `etcdctl lock NAME` and returns it with a channel that receives the line it prints
/// once it holds the lock.
fn etcdctl_lock(endpoints: &[String], name: &str) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            &endpoints.join(","),
            "lock",
            name,
            "--ttl",
            "2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcdctl runs (Debian: etcd-client)");
    let out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

#[tokio::test]
async fn etcdctl_lock_and_ours_exclude_each_other() {
    let Some(etcd) = started_or_skip("etcdctl interop", EtcdCluster::start(1)) else {
        return;
    };
    let endpoints = etcd.endpoints();
    let lock = EtcdLock::connect(&endpoints, "shared", TTL).await.unwrap();

    // etcdctl holds it: ours is refused, and gets it after etcdctl lets go.
    let (mut ctl, held) = etcdctl_lock(&endpoints, "shared");
    let key = held
        .recv_timeout(Duration::from_secs(10))
        .expect("etcdctl took the lock");
    assert!(key.starts_with("shared/"), "{key}");
    match lock.try_acquire("ours").await.unwrap() {
        Acquired::Busy { holder, .. } => assert_eq!(holder.as_deref(), Some(key.as_str())),
        other => panic!("acquired while etcdctl held the lock: {other:?}"),
    }
    signal(ctl.id(), libc::SIGINT).unwrap(); // etcdctl closes its session and unlocks
    ctl.wait().unwrap();
    let g = lock
        .acquire("ours", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("free after etcdctl");

    // Ours holds it: etcdctl waits, and gets it when we release.
    let (mut ctl, held) = etcdctl_lock(&endpoints, "shared");
    assert!(
        held.recv_timeout(Duration::from_millis(700)).is_err(),
        "etcdctl took a lock we hold"
    );
    assert!(lock.release("ours", g.token).await.unwrap());
    let key = held
        .recv_timeout(Duration::from_secs(5))
        .expect("etcdctl gets it after release");
    assert!(key.starts_with("shared/"));
    let _ = ctl.kill();
    let _ = ctl.wait();
}

#[tokio::test]
async fn bad_input_and_unreachable_clusters_are_clear_errors() {
    let e = EtcdLock::connect(&[], "x", TTL)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("invalid etcd endpoints: none given"), "{e}");
    let e = EtcdLock::connect(&["localhost".into()], "x", TTL)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("invalid etcd endpoint"), "{e}");
    let e = EtcdLock::connect(&["http://127.0.0.1:1".into()], "", TTL)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("invalid lock name"), "{e}");

    // Every endpoint down: an error within the bound, not a hang.
    let ports: Vec<String> = (0..3)
        .map(|_| {
            format!(
                "http://127.0.0.1:{}",
                fencecheck_testkit::free_port().unwrap()
            )
        })
        .collect();
    let options = EtcdOptions {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
    };
    let t0 = Instant::now();
    let result = match EtcdLock::connect_with(&ports, "x", TTL, options).await {
        Ok(lock) => lock.try_acquire("a").await.map(|_| ()),
        Err(e) => Err(e),
    };
    let took = t0.elapsed();
    let e = result.expect_err("no etcd is listening");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(
        matches!(
            e,
            BackendError::Connect { .. }
                | BackendError::Timeout { .. }
                | BackendError::Server { .. }
        ),
        "{e}"
    );
}

/// Acquires and releases, retrying a call that failed because it reached a dead or stopped
/// member (as a client must); returns the token and how many attempts failed.
async fn acquire_release<L: LockService>(lock: &L) -> (u64, usize) {
    let mut failures = 0;
    loop {
        match lock.acquire("w", Duration::from_secs(5)).await {
            Ok(Some(g)) => {
                // The release may also land on the bad member; a lease it cannot revoke expires.
                let mut released = false;
                for _ in 0..5 {
                    if let Ok(done) = lock.release("w", g.token).await {
                        released = done;
                        break;
                    }
                }
                if !released {
                    tokio::time::sleep(TTL * 2).await;
                }
                return (g.token.get(), failures);
            }
            Ok(None) => panic!("no grant within 5 s"),
            Err(e) => {
                eprintln!("attempt failed: {e}");
                failures += 1;
                assert!(failures < 8, "the lock kept failing: {e}");
            }
        }
    }
}

/// One round of a fault trial: acquire (retrying calls that hit a dead member), write to fenced
/// storage with the token, release; recorded in `history`.
async fn fenced_round<L: LockService>(
    lock: &L,
    store: &TracedStore<LocalFencedMap>,
    history: &mut History,
    who: &str,
) -> usize {
    let (token, failures) = acquire_release(lock).await;
    history.granted(who, Token::new(token));
    let outcome = store
        .write("k", Token::new(token), who.as_bytes())
        .await
        .unwrap();
    if outcome.is_accepted() {
        history.accepted(who);
    } else {
        history.rejected(who);
    }
    failures
}

const FAULT_TRIALS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_works_through_leader_kills_and_stopped_members() {
    let Some(mut etcd) = started_or_skip("etcd 3 nodes", EtcdCluster::start(3)) else {
        return;
    };
    let options = EtcdOptions {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
    };
    let recorder = Recorder::new();
    let lock = EtcdLock::connect_with(&etcd.endpoints(), "faults", TTL, options)
        .await
        .unwrap();
    let lock = recorder.lock(lock);
    // The rounds all act as one client, "w" (the lock's owner name).
    let store = recorder.store(Arc::new(LocalFencedMap::new(FencePolicy::Fenced)), "w");
    let mut history = History::new();
    let mut failed = 0;
    // kill -9 the leader; the other two elect a new one; the lock keeps working; restart it.
    for trial in 0..FAULT_TRIALS {
        let leader = etcd.leader().expect("a leader");
        etcd.kill9(leader);
        failed += fenced_round(&lock, &store, &mut history, &format!("kill-{trial}")).await;
        etcd.restart(leader).unwrap();
    }
    // SIGSTOP one member (a slow or partitioned node): the majority still serves the lock.
    for trial in 0..FAULT_TRIALS {
        let member = trial % etcd.size();
        let pid = etcd.pid(member).unwrap();
        signal(pid, libc::SIGSTOP).unwrap();
        failed += fenced_round(&lock, &store, &mut history, &format!("stop-{trial}")).await;
        signal(pid, libc::SIGCONT).unwrap();
    }
    // Every round's write landed, in lease order, with a token larger than the last.
    every_round_served_in_order(&history, 2 * FAULT_TRIALS);
    // What the client saw, failed calls included, is a behaviour of the model.
    let trace = recorder.trace();
    let replay = Replay::new(lock.ttl().granted(), FencePolicy::Fenced);
    let explained = validate(&trace, &replay).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{FAULT_TRIALS} leader kills and {FAULT_TRIALS} stopped members: every round served, \
         tokens increasing, storage in lease order, the trace ({} events, {} grants) explained by the model; \
         {failed} calls retried by the caller",
        explained.events,
        explained.grants
    );
}

#[test]
fn run_and_demo_work_on_etcd() {
    let Some(etcd) = started_or_skip("run on etcd", EtcdCluster::start(1)) else {
        return;
    };
    let spec = LockSpec::Etcd {
        endpoints: etcd.endpoints(),
    }
    .to_string();
    let flags = ["--lock", &spec];
    let first = common::run_token(&flags);
    let second = common::run_token(&flags);
    assert!(second > first, "revision tokens {first} then {second}");
    // The same member named https://: refused in one line, never spoken to in plaintext.
    let tls = spec.replace("etcd://", "etcd://https://");
    let out = common::fencecheck(&["run", "--lock", &tls, "--name", "tls", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("TLS is not supported"), "{err}");
    common::demo_rejects_the_paused_worker(&flags);
}

fn etcd_flags(endpoints: &str) -> Vec<String> {
    ["--lock".to_string(), format!("etcd://{endpoints}")].to_vec()
}

/// `fencecheck run` on etcd under the faults of `tests/run_faults.rs`: the lock key deleted
/// behind its back (`etcdctl del`), the supervisor killed with SIGKILL, and the network to the
/// cluster frozen (the margin measured against etcd itself); each with the escaped control.
#[test]
fn run_faults_on_etcd() {
    let Some(etcd) = started_or_skip("run faults on etcd", EtcdCluster::start(1)) else {
        return;
    };
    let endpoints = etcd.endpoints().join(",");
    let revoke = |name: &str| {
        let out = Command::new("etcdctl")
            .args([
                "--endpoints",
                &endpoints,
                "del",
                "--prefix",
                &format!("{name}/"),
            ])
            .output()
            .expect("etcdctl runs (Debian: etcd-client)");
        assert!(out.status.success(), "{out:?}");
    };
    let flags = etcd_flags(&endpoints);
    faults::lost_lease_stops_the_whole_tree(&flags, &revoke, "etcd");
    faults::work_dies_with_its_supervisor(&flags, "etcd");
    let member: std::net::SocketAddr = etcd.endpoints()[0]
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let proxy = FreezableProxy::start(member).unwrap();
    let proxied = etcd_flags(&format!("http://{}", proxy.addr()));
    let direct = LockSpec::Etcd {
        endpoints: etcd.endpoints(),
    };
    faults::stall_stops_the_work_before_the_server_expires_the_lease(
        &proxied, &proxy, &direct, "etcd",
    );
    let mut etcd = etcd;
    faults::waiters_ride_out_a_restart(&flags, &mut || etcd.restart(0).unwrap(), "etcd");
}

/// Random calls answered like the protocol core's `LeaseTable` (tokens compared by grant order);
/// a lease taken away is the key deleted behind the holder's back. Negative control: a lock that
/// renews a lost lease is told apart.
#[test]
fn etcd_lock_answers_like_the_protocol_core() {
    let Some(etcd) = started_or_skip("etcd differential", EtcdCluster::start(1)) else {
        return;
    };
    let endpoints = etcd.endpoints();
    common::lock_diff::differential_with_control(
        "etcd",
        96,
        // Long enough that nothing runs out on its own during a case.
        async |name| {
            EtcdLock::connect(&endpoints, name, Duration::from_secs(600))
                .await
                .unwrap()
        },
        async |name| {
            let out = Command::new("etcdctl")
                .args(["--endpoints", &endpoints.join(","), "del", "--prefix"])
                .arg(format!("{name}/"))
                .output()
                .expect("etcdctl runs (Debian: etcd-client)");
            assert!(out.status.success(), "{out:?}");
        },
    );
}

/// `run --wait` through the kill of a 3-member cluster's leader: three waiters take the lock in
/// turn after the holder, none gives up, no two commands overlap.
#[test]
fn run_waiters_ride_out_a_leader_kill_on_etcd() {
    let Some(mut etcd) = started_or_skip("etcd leader kill while waiting", EtcdCluster::start(3))
    else {
        return;
    };
    let flags = etcd_flags(&etcd.endpoints().join(","));
    let mut kill_leader = || {
        let leader = etcd.leader().unwrap_or(0);
        etcd.restart(leader).unwrap();
    };
    faults::waiters_ride_out_a_restart(&flags, &mut kill_leader, "etcd leader kill");
}
