//! Lease acquire + release against the floors it is built from, measured in the same run:
//! `parking_lot::Mutex` and `std::sync::Mutex` lock+unlock, a bare `Instant::now()`, and a
//! parking_lot lock+unlock with one clock read (the budget the lease lock is held to). The lock
//! runs on each of its clocks: `SystemClock` (`Instant`) and `CoarseClock` (the kernel's tick),
//! and each clock read is measured alone and under a parking_lot lock. Under contention a
//! parking_lot `try_lock` + unlock, which does not wait, is the floor for the lock's `try_acquire`
//! beside the lock + unlock, which does.

mod common;

use common::{measuring, paired_elements, run_contended, Side};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use fencecheck::local::{Clock, CoarseClock, LeaseLock, TickClock};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(30);

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("acquire/uncontended");
    g.throughput(Throughput::Elements(1));
    let lock = LeaseLock::new(TTL).unwrap();
    g.bench_function("lease_lock_acquire_release", |b| {
        b.iter(|| {
            let guard = lock.try_acquire(black_box(1u64)).unwrap();
            black_box(guard.token());
        })
    });
    let coarse_lock = LeaseLock::with_clock(TTL, CoarseClock::new()).unwrap();
    g.bench_function("lease_lock_coarse_acquire_release", |b| {
        b.iter(|| {
            let guard = coarse_lock.try_acquire(black_box(1u64)).unwrap();
            black_box(guard.token());
        })
    });
    // A try that finds the lease held: a read of the published lease and of the clock, no
    // mutex; on each clock, since the clock read is most of it.
    try_busy(&mut g, "lease_lock_coarse_try_busy", CoarseClock::new());
    try_busy(&mut g, "lease_lock_tick_try_busy", TickClock::new());
    let pl = parking_lot::Mutex::new(0u64);
    g.bench_function("parking_lot_lock_unlock", |b| b.iter(|| *pl.lock() += 1));
    let std_mutex = std::sync::Mutex::new(0u64);
    g.bench_function("std_mutex_lock_unlock", |b| {
        b.iter(|| *std_mutex.lock().unwrap() += 1)
    });
    g.bench_function("instant_now", |b| b.iter(|| black_box(Instant::now())));
    let origin = Instant::now();
    g.bench_function("parking_lot_lock_unlock_plus_clock", |b| {
        b.iter(|| {
            let mut v = pl.lock();
            *v = v.wrapping_add(origin.elapsed().as_nanos() as u64);
        })
    });
    let coarse = CoarseClock::new();
    g.bench_function("coarse_clock_now", |b| b.iter(|| black_box(coarse.now())));
    let tick = TickClock::new();
    g.bench_function("tick_clock_now", |b| b.iter(|| black_box(tick.now())));
    g.bench_function("parking_lot_lock_unlock_plus_coarse_clock", |b| {
        b.iter(|| lock_unlock_plus_clock(&pl, &coarse))
    });
    g.finish();
}

/// Tries on a lock whose lease another owner holds for an hour, on `clock`.
fn try_busy(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, clock: impl Clock) {
    let held_lock = LeaseLock::with_clock(Duration::from_secs(3600), clock).unwrap();
    let _held = held_lock.try_acquire(0u64).unwrap();
    g.bench_function(name, |b| {
        b.iter(|| black_box(held_lock.try_acquire(black_box(1u64)).is_err()))
    });
    // Had the lease run out during the group, the tries would have been grants: say so.
    assert_eq!(
        held_lock.holder().map(|lease| lease.owner),
        Some(0),
        "{name}: the held lease ran out, so its tries were not refusals"
    );
}

fn contended(c: &mut Criterion) {
    for threads in [2usize, 4] {
        let mut g = c.benchmark_group(format!("acquire/contended/{threads}"));
        g.throughput(Throughput::Elements(threads as u64));
        let lock = Arc::new(LeaseLock::new(TTL).unwrap());
        g.bench_function("lease_lock_try_acquire_release", |b| {
            b.iter_custom(|iters| {
                run_contended(threads, iters, |_| {
                    if let Ok(guard) = lock.try_acquire(1u64) {
                        black_box(guard.token());
                    }
                })
            })
        });
        let coarse_lock = Arc::new(LeaseLock::with_clock(TTL, CoarseClock::new()).unwrap());
        g.bench_function("lease_lock_coarse_try_acquire_release", |b| {
            b.iter_custom(|iters| {
                run_contended(threads, iters, |_| {
                    if let Ok(guard) = coarse_lock.try_acquire(1u64) {
                        black_box(guard.token());
                    }
                })
            })
        });
        let pl = parking_lot::Mutex::new(0u64);
        g.bench_function("parking_lot_lock_unlock", |b| {
            b.iter_custom(|iters| run_contended(threads, iters, |_| *pl.lock() += 1))
        });
        let pl_clock = parking_lot::Mutex::new(0u64);
        let coarse = CoarseClock::new();
        g.bench_function("parking_lot_lock_unlock_plus_coarse_clock", |b| {
            b.iter_custom(|iters| {
                run_contended(threads, iters, |_| {
                    lock_unlock_plus_clock(&pl_clock, &coarse)
                })
            })
        });
        let pl_try = parking_lot::Mutex::new(0u64);
        g.bench_function("parking_lot_try_lock_unlock", |b| {
            b.iter_custom(|iters| {
                run_contended(threads, iters, |_| {
                    black_box(try_lock_unlock(&pl_try));
                })
            })
        });
        let std_mutex = std::sync::Mutex::new(0u64);
        g.bench_function("std_mutex_lock_unlock", |b| {
            b.iter_custom(|iters| {
                run_contended(threads, iters, |_| *std_mutex.lock().unwrap() += 1)
            })
        });
        g.finish();
        paired_contended(threads);
    }
}

/// The coarse lock's try-acquire + release with `threads` threads contending, in alternating
/// rounds (`common::paired`) against three floors: parking_lot's lock + unlock, which waits; the
/// same with one coarse clock read while holding it, as a lease reads the time; and its try-lock +
/// unlock, which does not wait. Then how many tries were granted: a try that finds the
/// lease busy takes the mutex once, a granted one twice (acquire, then release), so the share sets
/// what a try costs.
fn paired_contended(threads: usize) {
    let coarse_lock = LeaseLock::with_clock(TTL, CoarseClock::new()).unwrap();
    // The same operation as `lease_lock_coarse_try_acquire_release`; says whether it was granted.
    let try_once = || match coarse_lock.try_acquire(1u64) {
        Ok(guard) => {
            black_box(guard.token());
            true
        }
        Err(_) => false,
    };
    let pl = parking_lot::Mutex::new(0u64);
    let pl_try = || try_lock_unlock(&pl);
    let pl_lock = || {
        *pl.lock() += 1;
        true
    };
    let coarse = CoarseClock::new();
    let pl_clock = || {
        lock_unlock_plus_clock(&pl, &coarse);
        true
    };
    let ours = "lease_lock_coarse_try_acquire_release";
    // Both sides call through a reference to `dyn Fn`, so that each pays the same indirect call.
    let ours_once: &(dyn Fn() -> bool + Sync) = &try_once;
    let floors: [(&str, &str, &(dyn Fn() -> bool + Sync)); 3] = [
        ("paired", "parking_lot_lock_unlock", &pl_lock),
        (
            "paired_clock",
            "parking_lot_lock_unlock_plus_coarse_clock",
            &pl_clock,
        ),
        ("paired_try", "parking_lot_try_lock_unlock", &pl_try),
    ];
    for (group, floor, floor_once) in floors {
        paired_elements(
            &format!("acquire/contended/{threads}/{group}"),
            threads as u64,
            Side {
                name: floor,
                run: &mut |n| {
                    run_contended(threads, n, |_| {
                        black_box(floor_once());
                    })
                },
            },
            Side {
                name: ours,
                run: &mut |n| {
                    run_contended(threads, n, |_| {
                        black_box(ours_once());
                    })
                },
            },
            &format!("{threads} threads, each running the operation n times"),
        );
    }
    if measuring() {
        granted_share(threads, ours, ours_once);
        granted_share(threads, "parking_lot_try_lock_unlock", &pl_try);
    }
}

/// parking_lot's lock + unlock with one read of the coarse clock while holding it: a mutex that
/// does what a lease must do beside its table, which is to read the time, on the same kind of
/// clock as the coarse lease lock.
fn lock_unlock_plus_clock(m: &parking_lot::Mutex<u64>, clock: &CoarseClock) {
    let mut v = m.lock();
    *v = v.wrapping_add(clock.now());
}

/// parking_lot's `try_lock` + unlock, the floor for a try that does not wait: a mutex that is
/// held answers at once. Whether it was taken.
fn try_lock_unlock(m: &parking_lot::Mutex<u64>) -> bool {
    match m.try_lock() {
        Some(mut v) => {
            *v += 1;
            true
        }
        None => false,
    }
}

/// Counts how many of 2,000,000 tries per thread `try_once` is granted, apart from the timed
/// rounds and with one counter per thread on its own line, and prints the share.
fn granted_share(threads: usize, name: &str, try_once: &(dyn Fn() -> bool + Sync)) {
    let counters: Vec<Padded> = (0..threads).map(|_| Padded::default()).collect();
    let tries = 2_000_000u64;
    run_contended(threads, tries, |t| {
        if try_once() {
            counters[t].0.fetch_add(1, Ordering::Relaxed);
        }
    });
    let granted: u64 = counters.iter().map(|c| c.0.load(Ordering::Relaxed)).sum();
    let all = tries * threads as u64;
    eprintln!(
        "acquire/contended/{threads} {name}: {granted} of {all} tries granted ({:.1} %)",
        100.0 * granted as f64 / all as f64
    );
}

/// A counter alone on its cache line.
#[derive(Default)]
#[repr(align(128))]
struct Padded(AtomicU64);

criterion_group! {
    name = benches;
    config = common::config();
    targets = uncontended, contended
}
criterion_main!(benches);
