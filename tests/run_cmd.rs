//! `fencecheck run` and `fencecheck demo --lock redis` against a real redis-server (and
//! PostgreSQL) started by the test.
#![cfg(feature = "backends")]

use fencecheck_testkit::{started_or_skip, PgServer, RedisServer, TempDir};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `fencecheck` with a state directory of its own (token floors of earlier runs never apply).
fn fencecheck_cmd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fencecheck"));
    cmd.env(
        "XDG_STATE_HOME",
        fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "state"),
    );
    cmd
}

fn fencecheck(args: &[&str]) -> Output {
    fencecheck_cmd()
        .args(args)
        .output()
        .expect("run fencecheck")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_command_gets_the_token_and_its_exit_status_passes_through() {
    let Some(redis) = started_or_skip("run: token", RedisServer::start(false)) else {
        return;
    };
    let url = redis.url();
    let out = fencecheck(&[
        "run",
        "--lock",
        &url,
        "--name",
        "job",
        "--ttl",
        "2s",
        "--",
        "sh",
        "-c",
        "echo token=$FENCECHECK_TOKEN lock=$FENCECHECK_LOCK",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "token=1 lock=job");
    let out = fencecheck(&[
        "run", "--lock", &url, "--name", "job", "--", "sh", "-c", "exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7));
    // Released at the end: the next run gets the lock at once, with the next token.
    let out = fencecheck(&[
        "run",
        "--lock",
        &url,
        "--name",
        "job",
        "--",
        "sh",
        "-c",
        "echo $FENCECHECK_TOKEN",
    ]);
    assert_eq!(text(&out.stdout).trim(), "3");
}

#[test]
fn a_busy_lock_exits_75_and_wait_gives_up_on_time() {
    let Some(redis) = started_or_skip("run: busy", RedisServer::start(false)) else {
        return;
    };
    let url = redis.url();
    let mut holder = fencecheck_cmd()
        .args(["run", "--lock", &url, "--name", "job", "--", "sleep", "3"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = fencecheck(&["run", "--lock", &url, "--name", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("is held by"),
        "{}",
        text(&out.stderr)
    );
    let t0 = Instant::now();
    let out = fencecheck(&[
        "run", "--lock", &url, "--name", "job", "--wait", "400ms", "--", "true",
    ]);
    assert_eq!(out.status.code(), Some(75));
    assert!(t0.elapsed() >= Duration::from_millis(400));
    // --wait without a limit queues until the holder is done.
    let out = fencecheck(&[
        "run", "--lock", &url, "--name", "job", "--wait", "--", "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(holder.wait().unwrap().code(), Some(0));
}

fn delete_lock_key(url: &str, name: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("fencecheck:{{{name}}}:lock"))
        .query(&mut conn)
        .unwrap();
}

#[test]
fn a_lost_lease_terminates_the_command() {
    let Some(redis) = started_or_skip("run: lost lease", RedisServer::start(false)) else {
        return;
    };
    let url = redis.url();
    // The command ends on SIGTERM.
    let child = fencecheck_cmd()
        .args([
            "run", "--lock", &url, "--name", "a", "--ttl", "600ms", "--", "sleep", "30",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let t0 = Instant::now();
    delete_lock_key(&url, "a"); // as if the lease expired and was taken
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(76), "{}", text(&out.stderr));
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t0.elapsed()
    );
    assert!(text(&out.stderr).contains("lost: the server no longer has this lease"));

    // A command that ignores SIGTERM is killed after the grace period.
    let child = fencecheck_cmd()
        .args([
            "run", "--lock", &url, "--name", "b", "--ttl", "1s", "--grace", "300ms",
        ])
        .args([
            "--",
            "sh",
            "-c",
            "trap '' TERM; while true; do sleep 0.05; done",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    delete_lock_key(&url, "b");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(76));
    assert!(
        text(&out.stderr).contains("did not stop within"),
        "{}",
        text(&out.stderr)
    );
}

/// Reads `start TOKEN NANOS` / `end TOKEN NANOS` records and returns the overlapping pairs of
/// runs (by token), sorted by start.
fn overlaps(records: &str) -> Vec<(u64, u64)> {
    let mut spans: std::collections::BTreeMap<u64, (u128, u128)> = Default::default();
    for line in records.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (kind, token, at) = (
            parts[0],
            parts[1].parse().unwrap(),
            parts[2].parse().unwrap(),
        );
        let span = spans.entry(token).or_insert((0, 0));
        if kind == "start" {
            span.0 = at;
        } else {
            span.1 = at;
        }
    }
    let mut list: Vec<(u64, (u128, u128))> = spans.into_iter().collect();
    list.sort_by_key(|(_, (start, _))| *start);
    list.windows(2)
        .filter(|w| w[1].1 .0 < w[0].1 .1)
        .map(|w| (w[0].0, w[1].0))
        .collect()
}

const JOB: &str = "echo start ${FENCECHECK_TOKEN:-$$} $(date +%s%N) >> \"$0\"; sleep 0.15; \
                   echo end ${FENCECHECK_TOKEN:-$$} $(date +%s%N) >> \"$0\"";

#[test]
fn concurrent_runs_of_one_name_never_overlap() {
    let Some(redis) = started_or_skip("run: exclusion", RedisServer::start(false)) else {
        return;
    };
    let dir = TempDir::new("run-records").unwrap();
    let url = redis.url();
    let locked = dir.path().join("locked.txt");
    let children: Vec<_> = (0..6)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_fencecheck"))
                .env(
                    "XDG_STATE_HOME",
                    fencecheck_testkit::fresh_dir(env!("CARGO_TARGET_TMPDIR"), "state"),
                )
                .args([
                    "run", "--lock", &url, "--name", "excl", "--ttl", "5s", "--wait", "20s",
                ])
                .args(["--", "sh", "-c", JOB])
                .arg(&locked)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert_eq!(c.wait().unwrap().code(), Some(0));
    }
    let records = std::fs::read_to_string(&locked).unwrap();
    assert_eq!(records.lines().count(), 12, "{records}");
    assert_eq!(overlaps(&records), vec![], "{records}");

    // Negative control: the same jobs without the lock overlap, and the same check sees it.
    let unlocked = dir.path().join("unlocked.txt");
    let children: Vec<_> = (0..6)
        .map(|_| {
            Command::new("sh")
                .args(["-c", JOB])
                .arg(&unlocked)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        c.wait().unwrap();
    }
    let records = std::fs::read_to_string(&unlocked).unwrap();
    assert!(
        !overlaps(&records).is_empty(),
        "unlocked jobs did not overlap: {records}"
    );
}

#[test]
fn bad_input_is_rejected_with_a_reason() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["run", "--name", "", "--", "true"],
            "invalid lock name: it is empty",
        ),
        (
            &["run", "--name", "x", "--ttl", "0s", "--", "true"],
            "invalid ttl",
        ),
        (
            &["run", "--name", "x", "--ttl", "48h", "--", "true"],
            "24 h maximum",
        ),
        (
            &["run", "--name", "x", "--ttl", "5", "--", "true"],
            "has no unit",
        ),
        (
            &[
                "run",
                "--name",
                "x",
                "--lock",
                "localhost:6379",
                "--",
                "true",
            ],
            "\"localhost:6379\": no scheme; expected redis://HOST:PORT",
        ),
        (&["run", "--name", "x"], "required"),
    ];
    for (args, expect) in cases {
        let out = fencecheck(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(expect),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // Nothing listens: a clear error, within the timeout, exit 69.
    let port = fencecheck_testkit::free_port().unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let t0 = Instant::now();
    let out = fencecheck(&[
        "run",
        "--lock",
        &url,
        "--name",
        "x",
        "--timeout",
        "1s",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(t0.elapsed() < Duration::from_secs(4));
    assert!(text(&out.stderr).contains(&format!("cannot connect to redis at 127.0.0.1:{port}")));
}

/// Addresses and names the lock services would refuse, or servers that are not what the flag
/// says: one line each; exit 2 for what the input alone shows wrong, 69 for a server that
/// answers in another protocol (here an HTTP server, for Redis and for etcd).
#[test]
fn every_backend_reports_bad_input_and_wrong_servers_in_one_line() {
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = http.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in http.incoming().flatten() {
            use std::io::{Read, Write};
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let redis_url = format!("redis://127.0.0.1:{port}");
    let etcd_url = format!("etcd://127.0.0.1:{port}");
    let cases: [(&[&str], i32, &str); 4] = [
        (
            &["--lock", "zk://zk://127.0.0.1:2181", "--name", "x"],
            2,
            "has a scheme",
        ),
        (
            &["--lock", "zk://127.0.0.1:2181", "--name", "🔒"],
            2,
            "ZooKeeper refuses",
        ),
        (
            &["--lock", &redis_url, "--name", "x"],
            69,
            "not the Redis protocol",
        ),
        (&["--lock", &etcd_url, "--name", "x"], 69, "no gRPC answer"),
    ];
    for (flags, code, says) in cases {
        let out = fencecheck(&[&["run"][..], flags, &["--timeout", "2s", "--", "true"]].concat());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{flags:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{flags:?}: {err}");
        assert!(err.contains(says), "{flags:?}: {err}");
    }
}

#[test]
fn demo_tells_the_story_on_redis_and_postgres() {
    let Some(redis) = started_or_skip("demo on redis", RedisServer::start(false)) else {
        return;
    };
    let Some(pg) = started_or_skip("demo on postgres", PgServer::start()) else {
        return;
    };
    let base = ["demo", "--ttl-ms", "100"];
    let urls = ["--lock", &redis.url(), "--pg-url", &pg.url()];
    let out = fencecheck(&[&base[..], &urls[..], &["--store", "postgres"]].concat());
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.contains("REJECT worker-A token=1 (already saw 2)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("final value : written-by-B (token 2)"),
        "{stdout}"
    );

    // Without fencing, on the same servers (tokens continue from the first run).
    let out = fencecheck(&[&base[..], &urls[..], &["--store", "redis", "--no-fence"]].concat());
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("ACCEPT worker-A token=3 value=written-by-A"),
        "{stdout}"
    );
    assert!(stdout.contains("WRONG"), "{stdout}");

    // With no URLs the demo starts (and stops) throwaway servers itself.
    let out = fencecheck(&[&base[..], &["--lock", "redis"]].concat());
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("started a throwaway redis-server"),
        "{stdout}"
    );
    assert!(
        stdout.contains("REJECT worker-A token=1 (already saw 2)"),
        "{stdout}"
    );
}

/// `--wait` rides out a lock service that is down for a while (backoff up to 1 s, until the wait
/// runs out); without `--wait` the same outage is exit 69 at once, and a wait shorter than the
/// outage gives up with 69 when it runs out.
#[test]
fn wait_rides_out_a_lock_service_outage() {
    let Some(mut redis) = started_or_skip("run: outage", RedisServer::start(false)) else {
        return;
    };
    let url = redis.url();
    redis.kill9();
    let t0 = Instant::now();
    let out = fencecheck(&["run", "--lock", &url, "--name", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    eprintln!("outage without --wait: exit 69 after {:?}", t0.elapsed());
    let t0 = Instant::now();
    let out = fencecheck(&[
        "run", "--lock", &url, "--name", "job", "--wait", "700ms", "--", "true",
    ]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t0.elapsed()
    );
    // The outage ends 1.5 s into a 20 s wait: the command runs, and the lock was taken.
    let waiting = fencecheck_cmd()
        .args([
            "run", "--lock", &url, "--name", "job", "--wait", "20s", "--",
        ])
        .args(["sh", "-c", "echo token=$FENCECHECK_TOKEN"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    redis.restart().unwrap();
    let out = waiting.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout).trim(), "token=1");
    assert_eq!(err.lines().count(), 1, "one line about the outage: {err}");
    assert!(err.contains("retrying until --wait runs out"), "{err}");
    eprintln!(
        "outage of 1.5 s ridden out by --wait 20s: ran after {:?}",
        t0.elapsed()
    );
}

/// An acquire whose reply is lost times out on the client after the server granted it. `run`
/// then frees the lease the server shows for its own owner name instead of leaving it to block
/// every run for a whole TTL (30 s here); with `--wait` it takes the lock on the next attempt.
/// The control: replies held back past the cleanup too, and the leftover lease is seen.
#[test]
fn a_timed_out_acquire_does_not_leave_the_lock_held() {
    let Some(redis) = started_or_skip("run: lost reply", RedisServer::start(false)) else {
        return;
    };
    let (proxy, via_proxy) = proxy_with_scripts_loaded(&redis);
    let held = |name: &str| lock_exists(&redis, name);
    let run = |name: &str, extra: &[&str], thaw_after: Duration| {
        with_acquire_reply_held(&proxy, thaw_after, || {
            let mut args = vec!["run", "--lock", &via_proxy, "--name", name];
            args.extend_from_slice(&["--timeout", "250ms"]);
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", "true"]);
            let t0 = Instant::now();
            let out = fencecheck(&args);
            (out, t0.elapsed())
        })
    };
    // No --wait: exit 69, and the lease granted behind the timeout is freed.
    let (out, _) = run("lost-reply", &[], Duration::from_millis(400));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("released that lease"), "{err}");
    assert!(!held("lost-reply"), "the granted lease was left behind");
    // --wait: the next attempt frees it and takes the lock, long before the 30 s TTL.
    let (out, took) = run(
        "lost-reply-wait",
        &["--wait", "10s"],
        Duration::from_millis(400),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(took < Duration::from_secs(10), "{took:?}");
    eprintln!("lost acquire reply, --wait 10s: ran after {took:?} (TTL 30 s)");
    // Replies held back for 1.2 s, past the cleanup's first try (one request timeout after the
    // acquire's): the cleanup asks again within its own budget and frees the lease.
    let (out, _) = run("slow-link", &[], Duration::from_millis(1200));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("released that lease"), "{err}");
    assert!(
        !held("slow-link"),
        "the granted lease was left behind: {err}"
    );
    // --wait running out right after the timed-out acquire: still cleaned up.
    let (out, _) = run(
        "slow-link-wait",
        &["--wait", "300ms"],
        Duration::from_millis(1200),
    );
    let err = text(&out.stderr);
    assert!(
        !held("slow-link-wait"),
        "left behind after --wait ran out: {err}"
    );
    // The control: replies held back for 5 s, past the cleanup's budget (2 s): the lease stays,
    // the same check sees it, and run says how long the lock may stay held.
    let (out, _) = run("lost-reply-control", &[], Duration::from_secs(5));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        held("lost-reply-control"),
        "the control's lease should be left"
    );
    assert!(err.contains("the lock stays held for up to"), "{err}");
}

/// A jittery link: the acquire's reply held back 0 to 475 ms (25 ms apart, 20 runs) behind a
/// 100 ms request timeout, so that some runs are granted in time and the rest time out after
/// the server granted them. After every run, whatever it did, no lease is left on the server.
/// (The control, replies held past the cleanup's budget, is in
/// `a_timed_out_acquire_does_not_leave_the_lock_held`.)
#[test]
fn jittered_acquire_replies_leave_no_lock_held_in_20_runs() {
    let Some(redis) = started_or_skip("run: jittery link", RedisServer::start(false)) else {
        return;
    };
    let (proxy, via_proxy) = proxy_with_scripts_loaded(&redis);
    let (mut ran, mut timed_out) = (0, 0);
    for k in 0..20u64 {
        let name = format!("jitter-{k}");
        let out = with_acquire_reply_held(&proxy, Duration::from_millis(25 * k), || {
            fencecheck(&[
                "run",
                "--lock",
                &via_proxy,
                "--name",
                &name,
                "--timeout",
                "100ms",
                "--",
                "true",
            ])
        });
        let err = text(&out.stderr);
        match out.status.code() {
            Some(0) => ran += 1,
            Some(69) => timed_out += 1,
            other => panic!("held back {} ms: exit {other:?}: {err}", 25 * k),
        }
        assert!(
            !lock_exists(&redis, &name),
            "held back {} ms: the lease was left behind: {err}",
            25 * k
        );
    }
    assert!(ran > 0 && timed_out > 0, "ran {ran}, timed out {timed_out}");
    eprintln!("jittery link: {ran} runs granted in time, {timed_out} timed out, 0 leases left");
}

/// A grant whose reply comes too late — less than the grace left before its safe deadline —
/// runs nothing: exit 76, the command not started, the lease handed back. With `--wait` the late
/// grant is handed back and the lock asked for again: the command runs on the next grant. The
/// control: the same reply held back briefly starts the command.
#[test]
fn a_grant_that_arrives_too_late_runs_nothing() {
    let Some(redis) = started_or_skip("run: late grant", RedisServer::start(false)) else {
        return;
    };
    let (proxy, via_proxy) = proxy_with_scripts_loaded(&redis);
    let dir = TempDir::new("run-late-grant").unwrap();
    for (held_back, wait, ran) in [
        (Duration::from_millis(1700), "0s", false),
        (Duration::from_millis(1700), "10s", true),
        (Duration::from_millis(200), "0s", true),
    ] {
        let marker = dir
            .path()
            .join(format!("ran-{}-{wait}", held_back.as_millis()));
        let t0 = Instant::now();
        let out = with_acquire_reply_held(&proxy, held_back, || {
            fencecheck(&[
                "run",
                "--lock",
                &via_proxy,
                "--name",
                "late",
                "--ttl",
                "2s",
                "--grace",
                "500ms",
                "--timeout",
                "5s",
                "--wait",
                wait,
                "--",
                "touch",
                marker.to_str().unwrap(),
            ])
        });
        let err = text(&out.stderr);
        assert_eq!(
            marker.exists(),
            ran,
            "reply held back {held_back:?}: {err} (exit {:?} after {:?})",
            out.status.code(),
            t0.elapsed()
        );
        if ran {
            assert_eq!(out.status.code(), Some(0), "{err}");
            if wait != "0s" {
                assert!(err.contains("asking again (--wait)"), "{err}");
            }
        } else {
            assert_eq!(out.status.code(), Some(76), "{err}");
            assert!(err.contains("not running the command"), "{err}");
            assert!(
                !lock_exists(&redis, "late"),
                "the late lease was handed back"
            );
        }
    }
}

/// A freezable proxy to `redis` and its URL, with the lock's scripts already loaded through it.
fn proxy_with_scripts_loaded(redis: &RedisServer) -> (fencecheck_testkit::FreezableProxy, String) {
    let proxy =
        fencecheck_testkit::FreezableProxy::start(([127, 0, 0, 1], redis.port()).into()).unwrap();
    let url = format!("redis://{}", proxy.addr());
    load_scripts(&url);
    (proxy, url)
}

/// Runs `f` (which starts `fencecheck run` through `proxy`) while the reply to its acquire — the
/// first script it runs — is held back for `held` after the request passed.
fn with_acquire_reply_held<T: Send>(
    proxy: &fencecheck_testkit::FreezableProxy,
    held: Duration,
    f: impl FnOnce() -> T + Send,
) -> T {
    proxy.freeze_replies_after(b"EVALSHA");
    std::thread::scope(|s| {
        s.spawn(|| assert!(proxy.hold_replies_for(held), "the acquire never passed"));
        f()
    })
}

/// Whether the lock `name` is held on `redis` (read directly, not through any proxy).
fn lock_exists(redis: &RedisServer, name: &str) -> bool {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("EXISTS")
        .arg(format!("fencecheck:{{{name}}}:lock"))
        .query::<i64>(&mut conn)
        .unwrap()
        == 1
}

/// One ordinary run through `url` loads the lock's scripts into the server, so that every later
/// acquire is one EVALSHA (which a test's proxy can then hold the reply of).
fn load_scripts(url: &str) {
    let out = fencecheck(&["run", "--lock", url, "--name", "warm", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A grace that leaves less than two thirds of the TTL before SIGTERM is due (3 s TTL, 2 s
/// grace: SIGTERM would come 0.97 s after the grant): renewals come sooner than every TTL/3, so
/// on a healthy server the job runs to its end. With the server frozen (SIGSTOP) the same job is
/// still stopped inside the lease (its own record of when SIGTERM reached it): the schedule
/// still bites.
#[test]
fn a_long_grace_runs_the_job_to_its_end_and_still_stops_it_inside_the_lease() {
    let Some(redis) = started_or_skip("run: long grace", RedisServer::start(false)) else {
        return;
    };
    let url = redis.url();
    let dir = TempDir::new("long-grace").unwrap();
    let record = dir.path().join("stopped");
    let job = format!(
        "trap 'date +%s%N > {}; exit 143' TERM; sleep 4 & wait",
        record.display()
    );
    let run = |name: &str| {
        let args = ["run", "--lock", &url, "--name", name, "--ttl", "3s"];
        fencecheck_cmd()
            .args(args)
            .args(["--grace", "2s", "--", "sh", "-c", &job])
            .stderr(Stdio::piped())
            .spawn()
            .expect("run fencecheck")
    };
    let started = Instant::now();
    let out = run("long-grace").wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(started.elapsed() >= Duration::from_secs(4));
    assert!(!record.exists(), "the healthy job was never sent SIGTERM");

    // The control: the server stops answering 0.5 s into the job.
    let job = run("long-grace-frozen");
    std::thread::sleep(Duration::from_millis(500));
    let pid = redis.pid().expect("redis runs");
    let frozen = std::time::SystemTime::now();
    fencecheck_testkit::signal(pid, libc::SIGSTOP).unwrap();
    let out = job.wait_with_output().unwrap();
    fencecheck_testkit::signal(pid, libc::SIGCONT).unwrap();
    assert_eq!(out.status.code(), Some(76), "{}", text(&out.stderr));
    let ns: u64 = std::fs::read_to_string(&record)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stopped = std::time::UNIX_EPOCH + Duration::from_nanos(ns);
    let after = stopped.duration_since(frozen).unwrap_or_default();
    // The lease the server holds ends 3 s after the last renewal it answered, before the freeze.
    assert!(
        after < Duration::from_millis(2_500),
        "the job was stopped {after:?} after the server froze, past the lease"
    );
}
