//! `fencecheck run` under the faults that made it unsafe before, on a real redis-server (and a
//! wait through a stopped server on every backend): the
//! whole process tree of the command is stopped on a lost lease and dies with its supervisor; a
//! slow-stopping command is stopped before the server expires the lease when renewals stall; a
//! schedule that cannot fit in the lease runs nothing. Each check has a control: a job that
//! escapes the command's process group (`setsid`) is seen by the same check to outlive the lease.
#![cfg(feature = "backends")]

mod common;

use common::faults::{
    alive, lost_lease_stops_the_whole_tree, now_ms, read_when_written, run_cmd, slow_stopping_job,
    stall_stops_the_work_before_the_server_expires_the_lease, validate, waiters_ride_out_a_restart,
    work_dies_with_its_supervisor, StallTrial,
};
use fencecheck::backend::LockSpec;
use fencecheck_testkit::{signal, started_or_skip, FreezableProxy, RedisServer, TempDir};
use fencecheck_testkit::{EtcdCluster, RaftCluster, ZkCluster};
use std::process::Command;
use std::time::Duration;

fn lock_key(name: &str) -> String {
    format!("fencecheck:{{{name}}}:lock")
}

fn redis_conn(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

fn redis_flags(url: &str) -> Vec<String> {
    vec!["--lock".into(), url.into()]
}

#[test]
fn a_lost_lease_stops_the_commands_whole_process_tree() {
    let Some(redis) = started_or_skip("run faults: grandchild", RedisServer::start(false)) else {
        return;
    };
    let url = redis.url();
    // Revoke the lease, as if it had expired and been taken.
    let revoke = |name: &str| {
        let _: () = redis::cmd("DEL")
            .arg(lock_key(name))
            .query(&mut redis_conn(&url))
            .unwrap();
    };
    lost_lease_stops_the_whole_tree(&redis_flags(&url), &revoke, "redis");
}

/// A Redis restart while runs wait for a held lock: the connection a waiter asks on is closed by
/// the server, which is no reason to give up: the waiters ride it out and take the lock in turn
/// before `--wait` runs out, with the control of a lock per run seen overlapping. (With
/// persistence, so the token counter and the holder's lease survive the restart.)
#[test]
fn a_server_restart_while_waiting_is_ridden_out() {
    let Some(mut redis) = started_or_skip(
        "run faults: restart while waiting",
        RedisServer::start(true),
    ) else {
        return;
    };
    let flags = redis_flags(&redis.url());
    waiters_ride_out_a_restart(&flags, &mut || redis.restart().unwrap(), "redis");
}

#[test]
fn the_work_dies_with_its_supervisor() {
    let Some(redis) = started_or_skip("run faults: supervisor killed", RedisServer::start(false))
    else {
        return;
    };
    work_dies_with_its_supervisor(&redis_flags(&redis.url()), "redis");
}

#[test]
fn a_frozen_network_stops_the_work_before_the_server_expires_the_lease() {
    let Some(redis) = started_or_skip("run faults: frozen network", RedisServer::start(false))
    else {
        return;
    };
    let proxy = FreezableProxy::start(([127, 0, 0, 1], redis.port()).into()).unwrap();
    let proxied = redis_flags(&format!("redis://{}", proxy.addr()));
    let direct = LockSpec::Redis { url: redis.url() };
    stall_stops_the_work_before_the_server_expires_the_lease(&proxied, &proxy, &direct, "redis");
}

#[test]
fn stalled_renewals_stop_a_slow_command_before_the_server_expires_the_lease() {
    let Some(redis) = started_or_skip("run faults: stall", RedisServer::start(false)) else {
        return;
    };
    let url = redis.url();
    let dir = TempDir::new("run-stall").unwrap();
    // The command's job needs 400 ms to stop after SIGTERM and records when it really ended; in
    // the control it runs outside the command's process group, where no signal reaches it.
    for escape in [false, true] {
        let name = format!("stall-{escape}");
        let started = dir.path().join(format!("{name}.started"));
        let ended = dir.path().join(format!("{name}.ended"));
        let script = slow_stopping_job(&started, &ended, escape);
        let run = run_cmd(
            &redis_flags(&url),
            &name,
            "2s",
            &["--grace", "600ms"],
            &script,
        );
        let job: u32 = read_when_written(&started).parse().unwrap();
        // When the server will expire the lease: the key's remaining TTL, read now.
        let pttl: i64 = redis::cmd("PTTL")
            .arg(lock_key(&name))
            .query(&mut redis_conn(&url))
            .unwrap();
        let expires_ms = now_ms() + pttl;
        assert!(pttl > 1000, "pttl {pttl}");
        // Stall the server: renewals get no answer (the connection stays open).
        let pid = redis.pid().unwrap();
        signal(pid, libc::SIGSTOP).unwrap();
        if !escape {
            // The stall ends once the job has stopped: `run` then still frees the lease it holds
            // on the server (the renewals queued in the stall extended it) instead of leaving it
            // to expire; "released" is printed only when the server deleted our token's key.
            read_when_written(&ended);
            signal(pid, libc::SIGCONT).unwrap();
        }
        let out = run.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(76), "{stderr}");
        if !escape {
            let exists: i64 = redis::cmd("EXISTS")
                .arg(lock_key(&name))
                .query(&mut redis_conn(&url))
                .unwrap();
            assert!(
                stderr.contains("released the lease") && exists == 0,
                "{stderr}"
            );
        }
        if escape {
            // The control: the same records show a job that outlives the lease.
            while now_ms() < expires_ms + 100 {
                std::thread::sleep(Duration::from_millis(10));
            }
            let overlap = now_ms() - expires_ms;
            assert!(
                alive(job) && !ended.exists(),
                "the escaped job stopped inside the lease"
            );
            eprintln!("stall control: the escaped job still ran {overlap} ms after expiry");
            signal(job, libc::SIGKILL).unwrap();
        } else {
            let end: i64 = read_when_written(&ended).parse().unwrap();
            let margin = expires_ms - end;
            eprintln!(
                "stall: the command's job ended {margin} ms before the server expired the lease"
            );
            assert!(
                margin > 0,
                "the job outlived the lease by {} ms: {stderr}",
                -margin
            );
        }
        signal(pid, libc::SIGCONT).unwrap();
    }
}

#[test]
fn a_schedule_that_cannot_fit_in_the_lease_runs_nothing() {
    let dir = TempDir::new("run-doa").unwrap();
    let marker = dir.path().join("ran");
    for (extra, says) in [
        (&["--ttl", "1ms"][..], "no safe window"),
        (&["--ttl", "3s", "--drift", "3s"][..], "no safe window"),
        (&["--ttl", "3s", "--grace", "3s"][..], "does not fit"),
        (&["--ttl", "3s", "--timeout", "0s"][..], "--timeout 0s"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_fencecheck"))
            .env(
                "XDG_STATE_HOME",
                fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "state"),
            )
            .args(["run", "--name", "doa"])
            .args(extra)
            .args(["--", "touch", marker.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(!marker.exists(), "{extra:?} ran the command");
    }
}

/// A Redis restart without persistence starts the token counter again. The next `run` on this
/// machine, naming the same server another way (`localhost`, database `/0`), sees a token not
/// above its floor and refuses, with its own exit status and one line;
/// the control without the floor runs the command with the repeated token, as `run` did before.
#[test]
fn a_lost_token_counter_is_refused_across_runs() {
    let Some(mut redis) = started_or_skip("run faults: token floor", RedisServer::start(false))
    else {
        return;
    };
    let url = redis.url();
    let state = TempDir::new("run-floor").unwrap();
    let marker = state.path().join("ran");
    let trace = state.path().join("runs.trace");
    let run_on = |url: &str, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_fencecheck"))
            .args(["run", "--lock", url, "--name", "floor", "--ttl", "5s"])
            .arg("--trace")
            .arg(&trace)
            .args(extra)
            .args(["--", "sh", "-c"])
            .arg(format!("echo $FENCECHECK_TOKEN >> {}", marker.display()))
            .output()
            .unwrap()
    };
    let run = |extra: &[&str]| run_on(&url, extra);
    let state_dir = ["--state-dir", state.path().to_str().unwrap()];
    for _ in 0..3 {
        let out = run(&state_dir);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "1\n2\n3\n");
    // The three runs' trace (acquire, grant, work started and stopped, release each) is one the
    // model explains, each command stopped before the next run was granted the lock.
    let (code, out) = validate(&[&trace], &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("18 events from 3 clients")
            && out.contains("3 works stopped before any later grant"),
        "{out}"
    );
    redis.restart().unwrap();
    // The same server under another name: the floor is the server's, not the spelling's.
    let alias = format!("redis://localhost:{}/0", redis.port());
    let out = run_on(&alias, &state_dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("token went backwards")
            && err.contains("granted 1 after a run here was granted 3"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "1\n2\n3\n",
        "the command did not run"
    );
    eprintln!("token floor: {}", err.trim());
    // The refused grant was released: the control takes the lock at once, and runs the command
    // with a token that fenced storage may already have seen.
    let out = run(&["--no-token-floor"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "1\n2\n3\n2\n",
        "the control runs with a repeated token"
    );
    // The same trace file now holds the grants after the restart: the model's lock service
    // never hands out a token that is not larger than the last, so it cannot explain them.
    let (code, out) = validate(&[&trace], &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("NOT explained") && out.contains("1 is not larger than the last grant's 3"),
        "{out}"
    );
}

/// A supervisor stopped (SIGSTOP) past its lease while a second `run` waits for the lock: the
/// second is granted once the lease has run out on the server, the first wakes to a refused
/// renewal, stops its command (exit 76) and is told its release freed nothing. Its command ran
/// on while the supervisor was stopped: the two runs' `--trace` files, merged, record the
/// first command's work going on after the second run's grant, and `validate` rejects them for
/// `work_stopped_before_successor`, naming both runs and the milliseconds. The lock service's
/// answers are a behaviour the model allows (`--work-may-overlap` explains the same files); the
/// control replays them as a lock granting 10 s leases: the second grant then came while the
/// first lease was live, which the model rejects.
#[test]
fn a_paused_supervisors_command_outliving_its_lease_is_caught_in_the_traces() {
    let Some(redis) = started_or_skip("run faults: traced pause", RedisServer::start(false)) else {
        return;
    };
    let flags = redis_flags(&redis.url());
    let dir = TempDir::new("run-trace").unwrap();
    let (first, second) = (dir.path().join("a.trace"), dir.path().join("b.trace"));
    let started = dir.path().join("started");
    let work = format!("echo $$ > {}; sleep 4", started.display());
    let trace_a = ["--trace", first.to_str().unwrap()];
    let a = run_cmd(&flags, "traced", "1s", &trace_a, &work);
    read_when_written(&started);
    signal(a.id(), libc::SIGSTOP).unwrap();
    let trace_b = ["--wait", "10s", "--trace", second.to_str().unwrap()];
    let b = run_cmd(&flags, "traced", "1s", &trace_b, "true");
    let b_out = b.wait_with_output().unwrap();
    signal(a.id(), libc::SIGCONT).unwrap();
    let a_out = a.wait_with_output().unwrap();
    let a_err = String::from_utf8_lossy(&a_out.stderr);
    assert_eq!(b_out.status.code(), Some(0), "{b_out:?}");
    assert_eq!(a_out.status.code(), Some(76), "{a_err}");
    let a_trace = std::fs::read_to_string(&first).unwrap();
    assert!(
        a_trace.contains("lease-lost 1") && a_trace.contains("released 1 false"),
        "{a_trace}"
    );
    assert!(
        a_trace.contains("work-started 1") && a_trace.contains("work-stopped 1"),
        "{a_trace}"
    );
    let (code, out) = validate(&[&first, &second], &[]);
    assert_eq!(code, Some(1), "{out}\n{a_trace}");
    assert!(
        out.contains("NOT explained: work_stopped_before_successor is violated: ")
            && out.contains("worked under lease 1 until ")
            && out.contains(" was granted lease 2 at "),
        "{out}"
    );
    eprintln!("traced pause: {}", out.trim());
    let (code, out) = validate(&[&first, &second], &["--work-may-overlap"]);
    assert_eq!(code, Some(0), "{out}\n{a_trace}");
    assert!(
        out.contains("from 2 clients in 2 files: explained"),
        "{out}"
    );
    let (code, out) = validate(&[&first, &second], &["--ttl", "10s"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("cannot be explained"), "{out}");
}

/// A supervisor whose clock runs slower than its drift margin covers is outside `run`'s
/// guarantee: under libfaketime at 70 % speed, with the default margin (1 % of the TTL + 2 ms),
/// the frozen-network trial sees the job outlive the lease; `--drift 700ms` (more than the
/// TTL's 30 %) covers the same clock and the job stops inside the lease.
#[test]
fn a_slow_supervisor_clock_needs_a_larger_drift() {
    if Command::new("faketime").arg("--version").output().is_err() {
        assert!(
            !fencecheck_testkit::servers_required(),
            "faketime is not installed (Debian: faketime) and FENCECHECK_REQUIRE_SERVERS is set"
        );
        eprintln!("SKIPPED run faults: slow clock: faketime is not installed (Debian: faketime)");
        return;
    }
    let Some(redis) = started_or_skip("run faults: slow clock", RedisServer::start(false)) else {
        return;
    };
    let proxy = FreezableProxy::start(([127, 0, 0, 1], redis.port()).into()).unwrap();
    let proxied = redis_flags(&format!("redis://{}", proxy.addr()));
    let direct = LockSpec::Redis { url: redis.url() };
    let slow = ["faketime", "-f", "+0 x0.7"];
    let default_drift = StallTrial {
        wrapper: &slow,
        proxied: &proxied,
        extra: &[],
        proxy: &proxy,
        direct: &direct,
    };
    let (outside, stderr) = default_drift.run("slow-clock", false);
    assert!(
        outside < 0,
        "a 30 % slow clock with a 22 ms margin should outlive the lease: {outside} ms, {stderr}"
    );
    let covered = StallTrial {
        extra: &["--drift", "700ms"],
        ..default_drift
    };
    let (margin, stderr) = covered.run("slow-clock-drift", false);
    assert!(margin > 0, "--drift 700ms: {margin} ms, {stderr}");
    eprintln!(
        "slow clock (x0.7): default drift, the job outlived the lease by {} ms; --drift 700ms, \
         it ended {margin} ms before",
        -outside
    );
}

/// A waiter whose server is stopped (SIGSTOP) for longer than the lease runs its command on a
/// grant it gets once the server is back, whether the server was stopped before the run started
/// or while it waited behind a holder: a grant counts from when the request that got it was sent,
/// after any reconnect, and one that still arrives too late (a request queued before the stop and
/// answered after it) is handed back and asked for again while `--wait` lasts. Before, a grant
/// dated from before the stall was judged too late: exit 76.
fn a_wait_runs_through_a_stopped_server(flags: &[String], pids: &[u32], label: &str) {
    let stop_for = |d: Duration| {
        for &pid in pids {
            signal(pid, libc::SIGSTOP).unwrap();
        }
        std::thread::sleep(d);
        for &pid in pids {
            signal(pid, libc::SIGCONT).unwrap();
        }
    };
    let ran = |waiter: std::process::Child, when: &str| {
        let out = waiter.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{label}, stopped {when}: {stderr}"
        );
        eprintln!("{label}, stopped {when}: ran; run said: {}", stderr.trim());
    };
    let waiter = |name: &str| run_cmd(flags, name, "2s", &["--wait", "30s"], "true");
    // Stopped before the run asks.
    for &pid in pids {
        signal(pid, libc::SIGSTOP).unwrap();
    }
    let first = waiter("stopped-before");
    std::thread::sleep(Duration::from_secs(4));
    for &pid in pids {
        signal(pid, libc::SIGCONT).unwrap();
    }
    ran(first, "before the run asked");
    // Stopped while the run waits behind a holder.
    let holder = run_cmd(flags, "stopped-while", "2s", &[], "sleep 3");
    std::thread::sleep(Duration::from_millis(500));
    let second = waiter("stopped-while");
    std::thread::sleep(Duration::from_millis(700));
    stop_for(Duration::from_secs(4));
    let holder = holder.wait_with_output().unwrap();
    eprintln!(
        "{label}: the holder exited {:?}: {}",
        holder.status.code(),
        String::from_utf8_lossy(&holder.stderr).trim()
    );
    ran(second, "while the run waited");
}

#[test]
fn a_wait_through_a_stopped_server_runs_on_the_grant_after_it() {
    let Some(redis) = started_or_skip(
        "run: wait through a stopped server",
        RedisServer::start(false),
    ) else {
        return;
    };
    let pid = redis.pid().expect("running");
    a_wait_runs_through_a_stopped_server(&redis_flags(&redis.url()), &[pid], "redis");
}

#[test]
fn a_wait_through_a_stopped_etcd_runs_on_the_grant_after_it() {
    let Some(etcd) = started_or_skip("run: wait through a stopped etcd", EtcdCluster::start(1))
    else {
        return;
    };
    let flags = vec!["--lock".into(), format!("etcd://{}", etcd.endpoints()[0])];
    a_wait_runs_through_a_stopped_server(&flags, &[etcd.pid(0).unwrap()], "etcd");
}

#[test]
fn a_wait_through_a_stopped_zookeeper_runs_on_the_grant_after_it() {
    let Some(zk) = started_or_skip("run: wait through a stopped ZooKeeper", ZkCluster::start(1))
    else {
        return;
    };
    let flags = vec!["--lock".into(), format!("zk://{}", zk.connect_string())];
    a_wait_runs_through_a_stopped_server(&flags, &[zk.pid(0).unwrap()], "zookeeper");
}

#[test]
fn a_wait_through_a_stopped_raft_cluster_runs_on_the_grant_after_it() {
    let cluster = RaftCluster::start(env!("CARGO_BIN_EXE_fencecheck"), 3);
    let Some(raft) = started_or_skip("run: wait through a stopped raft cluster", cluster) else {
        return;
    };
    let flags = vec![
        "--lock".into(),
        format!("raft://{}", raft.nodes().join(",")),
    ];
    let pids: Vec<u32> = (0..3).map(|i| raft.pid(i).unwrap()).collect();
    a_wait_runs_through_a_stopped_server(&flags, &pids, "raft");
}
