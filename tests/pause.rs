//! The seed's story with real processes and a real pause: worker processes (`examples/pause_worker.rs`)
//! take a lease (Redis, etcd, ZooKeeper) and write to PostgreSQL; the test SIGSTOPs the holder past its TTL, a second
//! worker takes the lease and writes, the first is SIGCONTed and writes. Each trial's history is
//! checked with the library's `storage_in_lease_order`.
#![cfg(feature = "backends")]

mod common;

use fencecheck::backend::{LockSpec, PgFencedStore};
use fencecheck::check::trace::{validate, Replay};
use fencecheck::protocol::{storage_in_lease_order, FencePolicy, History, Observed, Token, Trace};
use fencecheck_testkit::{
    signal, started_or_skip, EtcdCluster, PgServer, RaftCluster, RedisServer, ZkCluster,
};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn spawn(
        backend: &[String],
        pg: Option<&PgServer>,
        lock: &str,
        ttl_ms: u64,
        owner: &str,
        key: &str,
        unfenced: bool,
    ) -> Worker {
        let mut cmd = Command::new(common::example_bin("pause_worker"));
        cmd.args(backend);
        // Without PostgreSQL the raft worker writes to the keys of its own Raft group.
        if let Some(pg) = pg {
            cmd.args(["--pg-url", &pg.url()]);
        }
        cmd.args([
            "--name",
            lock,
            "--ttl-ms",
            &ttl_ms.to_string(),
            "--owner",
            owner,
        ])
        .args(["--key", key])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
        if unfenced {
            cmd.args(["--unfenced", "--table", "unfenced"]);
        }
        let mut child = cmd.spawn().expect("start the pause worker");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Worker {
            child,
            stdin,
            stdout,
        }
    }

    fn ask(&mut self, line: &str) -> String {
        let sent = writeln!(self.stdin, "{line}").and_then(|()| self.stdin.flush());
        let mut reply = String::new();
        let read = sent.and_then(|()| self.stdout.read_line(&mut reply).map(|_| ()));
        if read.is_err() || reply.is_empty() {
            // Its own error is on stderr above; say how it ended.
            let status = self.child.wait();
            panic!("worker exited ({status:?}) instead of answering {line:?}");
        }
        reply.trim().to_string()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = signal(self.child.id(), libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn token_of(reply: &str) -> u64 {
    reply
        .strip_prefix("GRANTED ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("expected GRANTED <token>, got {reply:?}"))
}

/// What one trial saw.
struct Trial {
    history: History,
    /// What the test saw of both workers, for trace validation.
    trace: Trace,
    /// The lease's TTL.
    ttl: Duration,
    /// Writes of the paused worker accepted after the new holder's writes.
    stale_accepted: usize,
}

/// One trial with varied timing: one of `ttls` (ms), a pause past it by 50-300 ms, 1-3 writes by
/// the new holder, and (every other trial) a careful write that consults the lost-lease signal
/// first. `backend` names the lock service on the worker's command line.
fn trial(backend: &[String], ttls: &[u64], pg: Option<&PgServer>, i: u64, unfenced: bool) -> Trial {
    let ttl_ms = ttls[i as usize % ttls.len()];
    let overshoot_ms = 50 + (i * 53) % 250;
    let b_writes = 1 + i % 3;
    let careful = i % 2 == 1;
    let lock = format!("pause-{}-{i}", if unfenced { "u" } else { "f" });
    let key = format!("{}-k{i}", backend[1]);
    let mut history = History::new();
    let mut trace = Trace::new();
    let start = Instant::now();
    let mut seen = |who: &str, what: Observed| {
        trace.record(start.elapsed().as_micros() as u64, who, what);
    };

    let mut a = Worker::spawn(backend, pg, &lock, ttl_ms, "A", &key, unfenced);
    let mut b = Worker::spawn(backend, pg, &lock, ttl_ms, "B", &key, unfenced);
    seen("A", Observed::AcquireSent);
    let ta = token_of(&a.ask("acquire"));
    seen(
        "A",
        Observed::Granted {
            token: Token::new(ta),
        },
    );
    history.granted("A", Token::new(ta));
    seen(
        "A",
        Observed::WriteSent {
            token: Token::new(ta),
        },
    );
    assert_eq!(a.ask("write a-before-pause"), "ACCEPTED");
    seen(
        "A",
        Observed::WriteAccepted {
            token: Token::new(ta),
        },
    );
    history.accepted("A");

    // A real pause: the process stops, its keepalive with it.
    signal(a.pid(), libc::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(ttl_ms + overshoot_ms));
    seen("B", Observed::AcquireSent);
    let tb = token_of(&b.ask("acquire"));
    seen(
        "B",
        Observed::Granted {
            token: Token::new(tb),
        },
    );
    assert!(tb > ta, "trial {i}: token {tb} after {ta}");
    history.granted("B", Token::new(tb));
    for n in 0..b_writes {
        seen(
            "B",
            Observed::WriteSent {
                token: Token::new(tb),
            },
        );
        assert_eq!(b.ask(&format!("write b{n}")), "ACCEPTED", "trial {i}");
        seen(
            "B",
            Observed::WriteAccepted {
                token: Token::new(tb),
            },
        );
        history.accepted("B");
    }
    signal(a.pid(), libc::SIGCONT).unwrap();

    if careful {
        // A careful worker consults the signal: the deadline (from the acquire's send time)
        // passed during the pause, so it does not write.
        let reply = a.ask("write-if-held a-careful");
        assert!(reply.starts_with("LOST "), "trial {i}: {reply}");
        seen(
            "A",
            Observed::LeaseLost {
                token: Token::new(ta),
            },
        );
    }
    // The classic bug: the check happened before the pause; the write goes out after it.
    let mut stale_accepted = 0;
    seen(
        "A",
        Observed::WriteSent {
            token: Token::new(ta),
        },
    );
    match a.ask("write a-after-pause").as_str() {
        "ACCEPTED" => {
            seen(
                "A",
                Observed::WriteAccepted {
                    token: Token::new(ta),
                },
            );
            history.accepted("A");
            stale_accepted += 1;
        }
        r if r.starts_with("REJECTED ") => {
            assert_eq!(r, format!("REJECTED {tb}"), "trial {i}");
            let (token, highest) = (Token::new(ta), Token::new(tb));
            seen("A", Observed::WriteRejected { token, highest });
            history.rejected("A");
        }
        r => panic!("trial {i}: unexpected reply {r:?}"),
    }
    Trial {
        history,
        trace,
        ttl: Duration::from_millis(ttl_ms),
        stale_accepted,
    }
}

/// Runs `trials` fenced trials and `controls` unfenced ones; checks every history.
fn trials(backend: &[String], ttls: &[u64], pg: Option<&PgServer>, trials: u64, controls: u64) {
    // Create both tables before any worker starts, so two workers never race to create one.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Some(pg) = pg {
        rt.block_on(async {
            PgFencedStore::connect(&pg.url(), "fenced").await.unwrap();
            let policy = FencePolicy::AcceptAll;
            PgFencedStore::connect_with(&pg.url(), "unfenced", policy, Duration::from_secs(5))
                .await
                .unwrap();
        });
    }
    let mut stale = 0;
    for i in 0..trials {
        let t = trial(backend, ttls, pg, i, false);
        if let Err(e) = storage_in_lease_order(&t.history) {
            panic!("fenced trial {i}: {e}\nhistory: {}", t.history);
        }
        // The model's lock service and fenced storage explain what the workers saw.
        if let Err(e) = validate(&t.trace, &Replay::new(t.ttl, FencePolicy::Fenced)) {
            panic!("fenced trial {i}: {e}");
        }
        stale += t.stale_accepted;
    }
    assert_eq!(stale, 0, "stale writes accepted with fencing");
    eprintln!(
        "{} lock, {trials} fenced pause trials: 0 stale writes accepted, \
         storage_in_lease_order held, every trace explained by the model",
        backend[1]
    );

    // Negative control: the same trials through a plain upsert let every late write land, and
    // the same history checker catches it each time.
    let mut caught = 0;
    for i in 0..controls {
        let t = trial(backend, ttls, pg, i, true);
        assert_eq!(t.stale_accepted, 1, "control trial {i}: {}", t.history);
        if storage_in_lease_order(&t.history).is_err() {
            caught += 1;
        }
        // The late write is a step of the model with unfenced storage, not with fenced storage.
        let unfenced = Replay::new(t.ttl, FencePolicy::AcceptAll);
        if let Err(e) = validate(&t.trace, &unfenced) {
            panic!("control trial {i}: {e}");
        }
        let fenced = Replay::new(t.ttl, FencePolicy::Fenced);
        assert!(validate(&t.trace, &fenced).is_err(), "control trial {i}");
    }
    assert_eq!(
        caught, controls,
        "the checker missed an unfenced stale write"
    );
    eprintln!(
        "{} lock, {controls} unfenced control trials: {caught} stale writes landed and were caught",
        backend[1]
    );
}

#[test]
fn paused_redis_lock_holder_cannot_write_through_fencing() {
    let Some(redis) = started_or_skip("pause trials (redis)", RedisServer::start(false)) else {
        return;
    };
    let Some(pg) = started_or_skip("pause trials (postgres)", PgServer::start()) else {
        return;
    };
    let backend = ["--lock".to_string(), redis.url()];
    trials(&backend, &[200, 300, 400], Some(&pg), 24, 6);
}

#[test]
fn paused_etcd_lock_holder_cannot_write_through_fencing() {
    let Some(etcd) = started_or_skip("pause trials (etcd)", EtcdCluster::start(3)) else {
        return;
    };
    let Some(pg) = started_or_skip("pause trials (etcd, postgres)", PgServer::start()) else {
        return;
    };
    let spec = LockSpec::Etcd {
        endpoints: etcd.endpoints(),
    };
    let backend = ["--lock".to_string(), spec.to_string()];
    // etcd leases count whole seconds.
    trials(&backend, &[1000], Some(&pg), 20, 3);
}

#[test]
fn paused_zookeeper_lock_holder_cannot_write_through_fencing() {
    let Some(zk) = started_or_skip("pause trials (zookeeper)", ZkCluster::start(3)) else {
        return;
    };
    let Some(pg) = started_or_skip("pause trials (zookeeper, postgres)", PgServer::start()) else {
        return;
    };
    let backend = [
        "--lock".to_string(),
        format!("zk://{}", zk.connect_string()),
    ];
    // The TTL is the session timeout: the stopped holder stops pinging and the ensemble expires
    // its session, deleting its lock node.
    trials(&backend, &[400, 600, 800], Some(&pg), 20, 3);
}

#[test]
fn paused_raft_lock_holder_cannot_write_through_fencing() {
    let cluster = RaftCluster::start(env!("CARGO_BIN_EXE_fencecheck"), 3);
    let Some(raft) = started_or_skip("pause trials (raft)", cluster) else {
        return;
    };
    // The lock and the fenced keys live in the same Raft group: no PostgreSQL.
    let backend = [
        "--lock".to_string(),
        format!("raft://{}", raft.nodes().join(",")),
    ];
    trials(&backend, &[300, 500], None, 20, 3);
}
