//! Fenced writes against an unfenced write of the same value under the same kind of mutex
//! (`parking_lot`, which `FencedStore` uses), measured in the same run; and the cost of
//! rejecting a stale write.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fencecheck::local::FencedStore;
use fencecheck::protocol::Token;
use parking_lot::Mutex;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// The baseline: a value and its token behind a mutex, written without any check.
struct Unfenced(Mutex<Option<(u64, Token)>>);

impl Unfenced {
    fn write(&self, token: Token, value: u64) {
        *self.0.lock() = Some((value, token));
    }
}

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("uncontended");
    g.throughput(Throughput::Elements(1));
    let fenced = FencedStore::new();
    let token = Token::new(7);
    g.bench_function("fenced_write", |b| {
        b.iter(|| fenced.write(black_box(token), black_box(42u64)).unwrap())
    });
    let unfenced = Unfenced(Mutex::new(None));
    g.bench_function("unfenced_write", |b| {
        b.iter(|| unfenced.write(black_box(token), black_box(42u64)))
    });
    g.bench_function("stale_write_rejected", |b| {
        b.iter(|| {
            fenced
                .write(black_box(Token::new(3)), black_box(42u64))
                .unwrap_err()
        })
    });
    g.finish();
}

fn run_contended(iters: u64, op: impl Fn(u64) + Sync) -> Duration {
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2u64)
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
            .map(|h| h.join().unwrap())
            .max()
            .unwrap_or_default()
    })
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("contended/2");
    g.throughput(Throughput::Elements(2));
    let fenced = FencedStore::new();
    g.bench_function("fenced_write", |b| {
        b.iter_custom(|iters| {
            run_contended(iters, |t| {
                let _ = fenced.write(Token::new(1 + t), 42u64);
            })
        })
    });
    let unfenced = Unfenced(Mutex::new(None));
    g.bench_function("unfenced_write", |b| {
        b.iter_custom(|iters| run_contended(iters, |t| unfenced.write(Token::new(1 + t), 42u64)))
    });
    g.finish();
}

criterion_group!(benches, uncontended, contended);
criterion_main!(benches);
