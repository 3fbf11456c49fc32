//! `fencecheck demo`: the story, run for real with a real TTL and a real pause, on the in-process
//! lock or on Redis, etcd or ZooKeeper, with PostgreSQL, Redis or in-memory storage.

use super::servers::Started;
use super::target::{Kind, LockArg};
use super::UsageError;
use clap::{Args, ValueEnum};
use fencecheck::backend::raft::{RaftFencedStore, RaftOptions};
use fencecheck::backend::{
    connect, Acquired, FencedStorage, LocalFencedMap, LocalLock, LockService, LockSpec,
    PgFencedStore, RedisFencedStore, RedisOptions, WriteOutcome,
};
use fencecheck::protocol::FencePolicy;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Where the demo's data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum DemoStore {
    /// In-process fenced map.
    Memory,
    /// PostgreSQL (`--pg-url`, or a throwaway cluster).
    Postgres,
    /// Redis (the lock's server).
    Redis,
    /// The lock's own Raft group (needs --lock raft): grant and fenced write in one log.
    Raft,
}

#[derive(Debug, Args)]
pub(super) struct DemoArgs {
    /// Run the same story against TTL-only storage (no fencing) and watch it go wrong.
    #[arg(long)]
    no_fence: bool,
    /// The lease's time-to-live in milliseconds (worker-A's pause lasts three times as long).
    #[arg(long, value_name = "MS", default_value_t = 200)]
    ttl_ms: u64,
    /// Where the lock lives: local (the in-process lease lock), a kind alone (redis, etcd, zk,
    /// raft: a throwaway server, or three Raft nodes) or a lock service's address
    /// (redis://HOST:PORT, etcd://HOST:PORT,..., zk://HOST:PORT,..., raft://HOST:PORT,...).
    /// etcd counts leases in whole seconds; ZooKeeper clamps the TTL to its session bounds.
    #[arg(long, value_name = "SPEC", default_value = "local")]
    lock: LockArg,
    /// Where the data lives (default: memory for the local lock, the lock's own group for raft,
    /// postgres otherwise).
    #[arg(long, value_enum)]
    store: Option<DemoStore>,
    /// Use this PostgreSQL instead of starting a throwaway cluster.
    #[arg(long, value_name = "URL")]
    pg_url: Option<String>,
}

pub(super) fn run(args: DemoArgs) -> Result<ExitCode, UsageError> {
    if !(10..=10_000).contains(&args.ttl_ms) {
        return Err(UsageError(format!(
            "--ttl-ms {}: expected a lease time-to-live from 10 to 10000 milliseconds",
            args.ttl_ms
        )));
    }
    let kind = args.lock.kind();
    let store = args.store.unwrap_or(match kind {
        Kind::Local => DemoStore::Memory,
        Kind::Raft => DemoStore::Raft,
        Kind::Redis | Kind::Etcd | Kind::Zookeeper => DemoStore::Postgres,
    });
    if kind != Kind::Raft && store == DemoStore::Raft {
        return Err(UsageError(
            "--store raft needs --lock raft (the store lives in the lock's Raft group)".into(),
        ));
    }
    if kind == Kind::Local && store == DemoStore::Redis {
        return Err(UsageError(
            "--store redis needs a lock on a server, such as --lock redis".into(),
        ));
    }
    let ttl = Duration::from_millis(args.ttl_ms);
    let policy = if args.no_fence {
        FencePolicy::AcceptAll
    } else {
        FencePolicy::Fenced
    };
    let mut started = Started::default();
    // The lock service: the one given, or a throwaway one of the kind asked for.
    let spec = match (&args.lock, kind) {
        (LockArg::At(spec), _) => Some(spec.clone()),
        (LockArg::Kind(_), Kind::Local) => None,
        (LockArg::Kind(_), Kind::Redis) => Some(LockSpec::Redis {
            url: started.redis()?,
        }),
        (LockArg::Kind(_), Kind::Etcd) => Some(LockSpec::Etcd {
            endpoints: started.etcd()?,
        }),
        (LockArg::Kind(_), Kind::Zookeeper) => Some(LockSpec::Zookeeper {
            connect: started.zk()?,
        }),
        (LockArg::Kind(_), Kind::Raft) => Some(LockSpec::Raft {
            nodes: started.raft()?,
        }),
    };
    let redis_url = match (&spec, store) {
        (_, store) if store != DemoStore::Redis => None,
        (Some(LockSpec::Redis { url }), _) => Some(url.clone()),
        _ => Some(started.redis()?),
    };
    let raft_nodes = match &spec {
        Some(LockSpec::Raft { nodes }) => nodes.clone(),
        _ => Vec::new(),
    };
    let pg_url = match (&args.pg_url, store == DemoStore::Postgres) {
        (Some(url), _) => Some(url.clone()),
        (None, true) => Some(started.pg()?),
        (None, false) => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    let result = rt.block_on(async {
        let bad = |e: fencecheck::backend::BackendError| UsageError(e.to_string());
        let Some(spec) = spec else {
            let lock = LocalLock::new(ttl).map_err(bad)?;
            return with_store(&lock, store, policy, redis_url, pg_url, &args).await;
        };
        let lock = connect(&spec, "fencecheck-demo", ttl, Duration::from_secs(3))
            .await
            .map_err(bad)?;
        if store == DemoStore::Raft {
            let options = RaftOptions::default();
            let table = if args.no_fence {
                "demo-unfenced"
            } else {
                "demo"
            };
            let s = RaftFencedStore::connect(&raft_nodes, table, policy, options).map_err(bad)?;
            return story(&lock, &s, &args).await;
        }
        with_store(&lock, store, policy, redis_url, pg_url, &args).await
    });
    drop(started);
    result
}

async fn with_store<L: LockService>(
    lock: &L,
    store: DemoStore,
    policy: FencePolicy,
    redis_url: Option<String>,
    pg_url: Option<String>,
    args: &DemoArgs,
) -> Result<ExitCode, UsageError> {
    let bad = |e: fencecheck::backend::BackendError| UsageError(e.to_string());
    match store {
        DemoStore::Memory => story(lock, &LocalFencedMap::new(policy), args).await,
        DemoStore::Postgres => {
            let url = pg_url.expect("set above");
            let s = PgFencedStore::connect_with(
                &url,
                "fencecheck_demo",
                policy,
                Duration::from_secs(5),
            )
            .await
            .map_err(bad)?;
            story(lock, &s, args).await
        }
        DemoStore::Raft => Err(UsageError(
            "--store raft needs --lock raft (the store lives in the lock's Raft group)".into(),
        )),
        DemoStore::Redis => {
            let url = redis_url.expect("set above");
            let s = RedisFencedStore::connect_with(
                &url,
                "fencecheck-demo-data",
                policy,
                RedisOptions::default(),
            )
            .map_err(bad)?;
            story(lock, &s, args).await
        }
    }
}

fn say_write(who: &str, token: fencecheck::protocol::Token, value: &str, outcome: &WriteOutcome) {
    match outcome {
        WriteOutcome::Accepted => println!("ACCEPT {who} token={token} value={value}"),
        WriteOutcome::Stale(stale) => println!(
            "REJECT {who} token={} (already saw {})",
            stale.token, stale.highest
        ),
    }
}

async fn story<L: LockService, S: FencedStorage>(
    lock: &L,
    store: &S,
    args: &DemoArgs,
) -> Result<ExitCode, UsageError> {
    let bad = |e: fencecheck::backend::BackendError| UsageError(e.to_string());
    let ttl = lock.ttl().granted();
    let pause = ttl * 3;
    println!(
        "two workers, one lease (ttl {} ms), storage {}",
        ttl.as_millis(),
        if args.no_fence {
            "WITHOUT fencing (accepts every write)"
        } else {
            "with fencing tokens (rejects older tokens)"
        }
    );
    let key = "fencecheck-demo";
    let a = match lock.try_acquire("worker-A").await.map_err(bad)? {
        Acquired::Granted(g) => g,
        Acquired::Busy { holder, .. } => {
            return Err(UsageError(format!(
                "the demo lock is held by {}; try again after its TTL",
                holder.as_deref().unwrap_or("someone")
            )))
        }
    };
    let woke_at = Instant::now() + pause;
    println!("worker-A leased, token {}", a.token);
    println!(
        "worker-A pauses for {} ms (a GC pause, a stopped VM)",
        pause.as_millis()
    );
    println!("worker-B waits for the lease...");
    let b = lock
        .acquire("worker-B", ttl * 10)
        .await
        .map_err(bad)?
        .ok_or_else(|| UsageError("worker-A's lease did not expire within 10 TTLs".into()))?;
    println!(
        "lease of worker-A expired; worker-B leased, token {}",
        b.token
    );
    let outcome = store
        .write(key, b.token, b"written-by-B")
        .await
        .map_err(bad)?;
    say_write("worker-B", b.token, "written-by-B", &outcome);
    tokio::time::sleep_until(tokio::time::Instant::from_std(woke_at)).await;
    let expired = Instant::now() >= a.sent_at + ttl;
    println!(
        "worker-A wakes up, still believing it holds the lease (token {}, expired: {expired})",
        a.token
    );
    let outcome = store
        .write(key, a.token, b"written-by-A")
        .await
        .map_err(bad)?;
    say_write("worker-A", a.token, "written-by-A", &outcome);
    let _ = lock.release("worker-B", b.token).await;

    let value = match store.read(key).await.map_err(bad)? {
        Some(stored) => {
            let value = String::from_utf8_lossy(&stored.value).into_owned();
            println!("final value : {value} (token {})", stored.token);
            value
        }
        None => {
            println!("final value : empty");
            "empty".into()
        }
    };
    if value == "written-by-B" {
        println!(
            "The fencing token stopped worker-A's stale write: the newest lease's value stands."
        );
    } else {
        println!(
            "WRONG: worker-A's stale write overwrote worker-B's newer one. A TTL alone let two \
             workers write; run without --no-fence to see the fencing token stop it."
        );
    }
    Ok(ExitCode::SUCCESS)
}
