//! Fenced writes against an unfenced write of the same value under the same kind of mutex
//! (`parking_lot`, which `FencedStore` uses), measured in the same run; and the cost of
//! rejecting a stale write.

mod common;

use common::run_contended;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fencecheck::local::FencedStore;
use fencecheck::protocol::Token;
use parking_lot::Mutex;
use std::hint::black_box;

/// The baseline: a value and its token behind a mutex, written without any check.
struct Unfenced(Mutex<Option<(u64, Token)>>);

impl Unfenced {
    fn write(&self, token: Token, value: u64) {
        *self.0.lock() = Some((value, token));
    }
}

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("write/uncontended");
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

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("write/contended/2");
    g.throughput(Throughput::Elements(2));
    let fenced = FencedStore::new();
    g.bench_function("fenced_write", |b| {
        b.iter_custom(|iters| {
            run_contended(2, iters, |t| {
                let _ = fenced.write(Token::new(1 + t as u64), 42u64);
            })
        })
    });
    let unfenced = Unfenced(Mutex::new(None));
    g.bench_function("unfenced_write", |b| {
        b.iter_custom(|iters| {
            run_contended(2, iters, |t| {
                unfenced.write(Token::new(1 + t as u64), 42u64)
            })
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = uncontended, contended
}
criterion_main!(benches);
