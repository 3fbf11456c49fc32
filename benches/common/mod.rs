//! What the benchmark suites share: a short criterion configuration, a contended runner, results
//! written in criterion's layout, and the paired measurement of an operation against its floor.

use criterion::Criterion;
use fencecheck::report::{median, median_interval};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Short warm-up and measurement so that every suite together stays within a few minutes.
#[allow(dead_code)] // the server suites set their own
pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
}

/// The server suites' configuration: fewer, longer samples, each a round trip or more.
#[allow(dead_code)] // the in-process suites use `config`
pub fn server_config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
}

/// Benches `ours` and its `floor` (each `(name, operation)`, one element a run) in criterion
/// group `group`, then measures them paired ([`paired_ops`]) under `GROUP/paired`.
#[allow(dead_code)]
pub fn bench_against_floor(
    c: &mut Criterion,
    group: &str,
    floor: (&str, impl Fn()),
    ours: (&str, impl Fn()),
    source: &str,
) {
    let mut g = c.benchmark_group(group);
    g.throughput(criterion::Throughput::Elements(1));
    g.bench_function(ours.0, |b| b.iter(&ours.1));
    g.bench_function(floor.0, |b| b.iter(&floor.1));
    g.finish();
    paired_ops(&format!("{group}/paired"), floor, ours, source);
}

/// `threads` threads start together and each runs `op(thread)` `iters` times; returns the
/// slowest thread's time, so one iteration is one operation per thread.
#[allow(dead_code)] // the check suite has no contended runs
pub fn run_contended(threads: usize, iters: u64, op: impl Fn(usize) + Sync) -> Duration {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, op) = (&barrier, &op);
                s.spawn(move || {
                    barrier.wait();
                    let started = Instant::now();
                    for _ in 0..iters {
                        op(t);
                    }
                    started.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread"))
            .max()
            .unwrap_or_default()
    })
}

/// Whether criterion is measuring (`cargo bench`), not just running each benchmark once
/// (`-- --test`, `cargo test --benches`). Criterion saves results only when it measures; results
/// written here are saved the same way, so that they always belong to the run they are compared
/// with.
#[allow(dead_code)] // not every suite writes results of its own
pub fn measuring() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test")
}

/// Writes a median in criterion's layout, so that `fencecheck report` shows it beside
/// criterion's own results; only when criterion measures.
#[allow(dead_code)]
pub fn write_result(group: &str, function: &str, median_ns: f64, source: &str) {
    write_estimates(
        group,
        function,
        1,
        serde_json::json!({"median": {"point_estimate": median_ns}}),
        source,
    );
}

/// Writes `estimates` in criterion's layout; an iteration counts as `elements` operations (the
/// throughput `report` shows), as criterion's `Throughput::Elements`.
fn write_estimates(
    group: &str,
    function: &str,
    elements: u64,
    estimates: serde_json::Value,
    source: &str,
) {
    if !measuring() {
        return;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("target"));
    let dir = target
        .join("criterion")
        .join(group.replace('/', "_"))
        .join(function)
        .join("new");
    std::fs::create_dir_all(&dir).unwrap();
    let bench = serde_json::json!({
        "group_id": group, "function_id": function, "value_str": null,
        "throughput": {"Elements": elements}, "full_id": format!("{group}/{function}"),
        "directory_name": format!("{}/{function}", group.replace('/', "_")),
        "title": format!("{group}/{function}"), "source": source,
    });
    std::fs::write(dir.join("benchmark.json"), bench.to_string()).unwrap();
    std::fs::write(dir.join("estimates.json"), estimates.to_string()).unwrap();
}

/// Runs `op` `n` times; returns how long that took.
#[allow(dead_code)]
pub fn time_n(n: u64, mut op: impl FnMut()) -> Duration {
    let started = Instant::now();
    for _ in 0..n {
        op();
    }
    started.elapsed()
}

/// Blocks in a paired comparison: each is two rounds, floor then ours, then ours then floor.
const PAIRED_BLOCKS: usize = 12;
/// About how long one side of one round runs.
const PAIRED_SIDE: Duration = Duration::from_millis(250);

/// One side of a paired comparison: its name in the report and a closure that runs the
/// operation `n` times and returns how long that took.
#[allow(dead_code)]
pub struct Side<'a> {
    /// The function name written to the report.
    pub name: &'a str,
    /// Runs the operation `n` times; returns the elapsed time.
    pub run: &'a mut dyn FnMut(u64) -> Duration,
}

/// [`paired`] for two operations run one at a time: `floor` and `ours` are `(name, operation)`.
#[allow(dead_code)]
pub fn paired_ops(group: &str, floor: (&str, impl Fn()), ours: (&str, impl Fn()), source: &str) {
    paired(
        group,
        Side {
            name: floor.0,
            run: &mut |n| time_n(n, &floor.1),
        },
        Side {
            name: ours.0,
            run: &mut |n| time_n(n, &ours.1),
        },
        source,
    );
}

/// A floor and our operation measured in alternating rounds, each side about [`PAIRED_SIDE`]
/// per round, in [`PAIRED_BLOCKS`] blocks of two rounds: floor then ours, then ours then floor.
///
/// A machine that speeds up or slows down while a group runs (here the same floor has moved 6 %
/// within one group) moves both sides of a block alike, where criterion measures one benchmark
/// after the other. What ran just before matters too: a batch run right after the other side's
/// was faster than one run right after its own (the Redis lock 112 against 139 µs; on PostgreSQL
/// both sides). In a block each side runs once after the other and once after itself, and the
/// block's value for a side is the geometric mean of its two rounds, so that such a factor
/// cancels in the block's ratio (ours ÷ floor, time).
///
/// Writes each side's median over the blocks (per operation) under `group`, and beside ours the
/// median of the block ratios with a 95 % interval for it, which `fencecheck report` prints under
/// the group. When criterion is not measuring, runs each side twice and writes nothing.
#[allow(dead_code)]
pub fn paired(group: &str, floor: Side<'_>, ours: Side<'_>, source: &str) {
    paired_elements(group, 1, floor, ours, source)
}

/// [`paired`] where one run of a side's operation counts as `elements` operations, as for
/// threads each running it (`run_contended`).
#[allow(dead_code)]
pub fn paired_elements(group: &str, elements: u64, floor: Side<'_>, ours: Side<'_>, source: &str) {
    if !measuring() {
        (floor.run)(2);
        (ours.run)(2);
        return;
    }
    // Calibrate on the floor: grow n until a run takes long enough to scale from.
    let mut n = 1u64;
    let n = loop {
        let took = (floor.run)(n);
        if took >= PAIRED_SIDE / 8 || n >= 1 << 30 {
            let scaled = n as f64 * PAIRED_SIDE.as_secs_f64() / took.as_secs_f64().max(1e-9);
            break (scaled as u64).max(1);
        }
        n *= 4;
    };
    let per_op = |took: Duration| took.as_nanos() as f64 / n as f64;
    let (mut floors, mut ourss, mut blocks) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..PAIRED_BLOCKS {
        let f1 = per_op((floor.run)(n));
        let o1 = per_op((ours.run)(n));
        let o2 = per_op((ours.run)(n));
        let f2 = per_op((floor.run)(n));
        // Each side once right after the other side and once right after itself.
        floors.push((f1 * f2).sqrt());
        ourss.push((o1 * o2).sqrt());
        blocks.push((o1 / f1 * (o2 / f2)).sqrt());
    }
    let listed: Vec<String> = blocks.iter().map(|r| format!("{r:.2}")).collect();
    let mid = |xs: &[f64]| median(xs).expect("rounds were run");
    let ratio = mid(&blocks);
    let (low, high) = median_interval(&blocks).expect("enough blocks for an interval");
    eprintln!(
        "{group}: {} ÷ {} per block ({PAIRED_BLOCKS} blocks, {n} per side and round): {}; \
         median {ratio:.3}, 95 % interval {low:.3}-{high:.3}",
        ours.name,
        floor.name,
        listed.join(" ")
    );
    let source = format!("{source}; {PAIRED_BLOCKS} blocks of alternating rounds of {n}");
    write_estimates(
        group,
        floor.name,
        elements,
        serde_json::json!({"median": {"point_estimate": mid(&floors)}}),
        &source,
    );
    let estimates = serde_json::json!({
        "median": {"point_estimate": mid(&ourss)},
        "paired": {"over": floor.name, "blocks": PAIRED_BLOCKS, "ratio": ratio,
                   "low": low, "high": high},
    });
    write_estimates(group, ours.name, elements, estimates, &source);
}

/// One acquire and one release of a free lock on a backend, as each backend suite measures it.
#[cfg(feature = "backends")]
#[allow(dead_code)]
pub fn acquire_release(rt: &tokio::runtime::Runtime, lock: &impl fencecheck::backend::LockService) {
    use fencecheck::backend::Acquired;
    rt.block_on(async {
        let Acquired::Granted(grant) = lock.try_acquire("owner").await.unwrap() else {
            panic!("the bench lock is free between iterations");
        };
        assert!(lock.release("owner", grant.token).await.unwrap());
    })
}
