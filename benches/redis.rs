//! Backends against their floors, on servers this benchmark starts:
//! - `redis/acquire_release`: `RedisLock` acquire + release round trips (on its own connection,
//!   one request at a time) against `redis-benchmark` running the same two scripts on the same
//!   server in the same run. The floor is written beside criterion's results as
//!   `redis_benchmark_floor` (median = 1 / pair rate), measured before the group, and again after
//!   it as `redis_benchmark_floor_after`: their ratio is how far the machine moved meanwhile.
//!   `redis_crate_same_scripts` runs the two
//!   scripts through the `redis` crate with no fencecheck code, once on the crate's multiplexed
//!   async connection (a driver task between caller and socket: what the lock used before) and
//!   once on a blocking connection (`redis_crate_sync_`): the least a client of the crate pays
//!   per round trip.
//! - `redis/acquire_release/paired`: the lock and the `redis-benchmark` floor again, in
//!   alternating rounds (`common::paired`).
//! - `postgres/write`: `PgFencedStore::write` against a plain upsert of the same row, and the two
//!   alternated in `postgres/write/paired`.

mod common;

use common::{acquire_release, paired, paired_ops, time_n, write_result, Side};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fencecheck::backend::redis_scripts::{ACQUIRE, RELEASE};
use fencecheck::backend::{FencedStorage, PgFencedStore, RedisLock};
use fencecheck::protocol::Token;
use fencecheck_testkit::{PgServer, RedisServer};
use std::process::Command;
use std::time::Duration;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Requests per second `redis-benchmark` reached for one command on one connection.
fn redis_benchmark_rps(port: u16, requests: u64, args: &[&str]) -> f64 {
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-c",
            "1",
            "-P",
            "1",
        ])
        .args(["-n", &requests.to_string(), "-r", "1000000", "--csv"])
        .args(args)
        .output()
        .expect("redis-benchmark runs (Debian: redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    let rps = last
        .split(',')
        .nth(1)
        .map(|f| f.trim_matches('"').parse::<f64>());
    match rps {
        Some(Ok(v)) => v,
        _ => panic!("cannot read redis-benchmark's rate from {text:?}"),
    }
}

/// The `redis-benchmark` floor: the acquire script then the release script, each run alone on
/// one connection; the time of one pair, in nanoseconds.
fn redis_benchmark_pair_ns(port: u16, requests: u64) -> f64 {
    let acquire = redis_benchmark_rps(
        port,
        requests,
        &[
            "EVAL",
            ACQUIRE,
            "2",
            "fencecheck:{b__rand_int__}:lock",
            "fencecheck:{b__rand_int__}:token",
            "owner",
            "30000",
            "0",
        ],
    );
    let release = redis_benchmark_rps(
        port,
        requests,
        &[
            "EVAL",
            RELEASE,
            "1",
            "fencecheck:{b__rand_int__}:lock",
            "1:owner",
        ],
    );
    1e9 / acquire + 1e9 / release
}

/// The floor as a criterion group measures it: 30000 of each script.
fn redis_benchmark_floor(port: u16, when: &str) -> f64 {
    let pair_ns = redis_benchmark_pair_ns(port, 30_000);
    eprintln!(
        "redis-benchmark floor {when}: a pair of scripts in {:.1} µs ({:.0} pairs/s)",
        pair_ns / 1e3,
        1e9 / pair_ns
    );
    pair_ns
}

const FLOOR_SOURCE: &str = "redis-benchmark -c 1 -P 1, EVAL of the acquire then the release script";

fn redis(c: &mut Criterion) {
    let server = RedisServer::start(false).expect("redis-server starts");
    let port = server.port();
    let before = redis_benchmark_floor(port, "before");
    write_result(
        "redis/acquire_release",
        "redis_benchmark_floor",
        before,
        FLOOR_SOURCE,
    );

    let rt = runtime();
    let lock = RedisLock::connect(&server.url(), "bench", Duration::from_secs(30)).unwrap();
    let mut g = c.benchmark_group("redis/acquire_release");
    g.throughput(Throughput::Elements(1));
    g.bench_function("fenced_acquire_release", |b| {
        b.iter(|| acquire_release(&rt, &lock))
    });
    // The same two scripts through the redis crate directly, without fencecheck's wrapper: what
    // the client library itself costs over redis-benchmark.
    let (sa, sr) = (redis::Script::new(ACQUIRE), redis::Script::new(RELEASE));
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = rt
        .block_on(client.get_multiplexed_async_connection())
        .unwrap();
    g.bench_function("redis_crate_same_scripts", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut acquire = sa.key("{raw}:lock");
                acquire.key("{raw}:token").arg("o").arg(30000).arg(0);
                let (_, t, _): (i64, String, i64) = acquire.invoke_async(&mut conn).await.unwrap();
                let mut release = sr.key("{raw}:lock");
                release.arg(format!("{t}:o"));
                let done: i64 = release.invoke_async(&mut conn).await.unwrap();
                assert_eq!(done, 1);
            })
        })
    });
    // The same again on a blocking connection: no runtime, no channel to a driver task.
    let mut sync_conn = client.get_connection().unwrap();
    g.bench_function("redis_crate_sync_same_scripts", |b| {
        b.iter(|| {
            let mut acquire = sa.key("{raw2}:lock");
            acquire.key("{raw2}:token").arg("o").arg(30000).arg(0);
            let (_, t, _): (i64, String, i64) = acquire.invoke(&mut sync_conn).unwrap();
            let mut release = sr.key("{raw2}:lock");
            release.arg(format!("{t}:o"));
            let done: i64 = release.invoke(&mut sync_conn).unwrap();
            assert_eq!(done, 1);
        })
    });
    g.finish();
    // The floor again once the group is done: its ratio to the first shows how far the machine
    // itself moved while the group ran, the noise on every other ratio of the group.
    let after = redis_benchmark_floor(port, "after");
    write_result(
        "redis/acquire_release",
        "redis_benchmark_floor_after",
        after,
        FLOOR_SOURCE,
    );

    // The lock and the floor again, in alternating rounds: the comparison that does not move
    // with the machine.
    let mut floor =
        |n: u64| Duration::from_nanos((redis_benchmark_pair_ns(port, n) * n as f64) as u64);
    let mut ours = |n: u64| time_n(n, || acquire_release(&rt, &lock));
    paired(
        "redis/acquire_release/paired",
        Side {
            name: "redis_benchmark_floor",
            run: &mut floor,
        },
        Side {
            name: "fenced_acquire_release",
            run: &mut ours,
        },
        FLOOR_SOURCE,
    );
}

fn postgres(c: &mut Criterion) {
    let server = PgServer::start().expect("PostgreSQL starts");
    let rt = runtime();
    let (store, client) = rt.block_on(async {
        let store = PgFencedStore::connect(&server.url(), "bench_fenced")
            .await
            .unwrap();
        let (client, conn) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .batch_execute(
                "CREATE TABLE bench_plain (key text PRIMARY KEY, token bigint NOT NULL, \
                 value bytea NOT NULL)",
            )
            .await
            .unwrap();
        (store, client)
    });
    let plain = rt.block_on(async {
        client
            .prepare(
                "INSERT INTO bench_plain AS s (key, token, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value",
            )
            .await
            .unwrap()
    });
    let mut g = c.benchmark_group("postgres/write");
    g.throughput(Throughput::Elements(1));
    let (token, n) = (std::cell::Cell::new(0u64), std::cell::Cell::new(0i64));
    let fenced_write = || {
        token.set(token.get() + 1);
        let t = Token::new(token.get());
        rt.block_on(async { assert!(store.write("k", t, b"value").await.unwrap().is_accepted()) })
    };
    let plain_upsert = || {
        n.set(n.get() + 1);
        rt.block_on(async {
            client
                .execute(&plain, &[&"k", &n.get(), &&b"value"[..]])
                .await
                .unwrap()
        });
    };
    g.bench_function("fenced_write", |b| b.iter(fenced_write));
    g.bench_function("plain_upsert", |b| b.iter(plain_upsert));
    g.finish();
    paired_ops(
        "postgres/write/paired",
        ("plain_upsert", plain_upsert),
        ("fenced_write", fenced_write),
        "a plain upsert of the same row",
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = redis, postgres
}
criterion_main!(benches);
