//! What the benchmark suites share: a short criterion configuration and a contended runner.

use criterion::Criterion;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Short warm-up and measurement so that every suite together stays within a few minutes.
pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
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
