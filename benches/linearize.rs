//! The linearizability checker, each case against a baseline in the same run: one pass over the
//! history applying the fencing rule per key (the cost of merely reading the history once).
//!
//! - `check_100k`: 100,000 operations on 100 keys, four clients per key overlapping, one write in
//!   a hundred never answered;
//! - `one_key_10k_lossy` / `one_key_100k_lossy`: one key, two clients, one write in a hundred
//!   never answered (every unanswered write used to stay in every later search state);
//! - `reject_10k` / `verdict_10k`: one key, two clients, 10,000 operations with a read in the
//!   middle answered with nothing after a stored write: rejected with the failing operations named
//!   (minimised), and the verdict alone.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fencecheck::check::linearize::{
    check, plant_empty_read, simulated_history, verdict, Call, Operation,
};
use fencecheck::protocol::Token;
use std::time::Duration;

/// One pass over `history`'s writes in invocation order, applying the fencing rule per key.
fn replay(history: &[Operation<u64>], keys: usize) -> usize {
    let mut highest = vec![Token::new(0); keys];
    let mut accepted = 0usize;
    for op in history {
        if let Call::Write { token, .. } = op.call {
            let h = &mut highest[op.key as usize];
            if token >= *h {
                *h = token;
                accepted += 1;
            }
        }
    }
    accepted
}

/// A group `linearize/NAME` with `check` (what `run` does) and its `baseline_replay`.
fn case(
    c: &mut Criterion,
    name: &str,
    history: &[Operation<u64>],
    keys: usize,
    run: &dyn Fn(&[Operation<u64>]),
) {
    let mut g = c.benchmark_group(format!("linearize/{name}"));
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(history.len() as u64));
    g.bench_function("check", |b| b.iter(|| run(history)));
    g.bench_function("baseline_replay", |b| b.iter(|| replay(history, keys)));
    g.finish();
}

fn linearize(c: &mut Criterion) {
    let legal = |h: &[Operation<u64>]| {
        check(h).expect("linearizable by construction");
    };
    let wide = simulated_history(1, 100, 4, 100_000);
    case(c, "check_100k", &wide, 100, &legal);
    let lossy = simulated_history(2, 1, 2, 10_000);
    case(c, "one_key_10k_lossy", &lossy, 1, &legal);
    let lossy = simulated_history(3, 1, 2, 100_000);
    case(c, "one_key_100k_lossy", &lossy, 1, &legal);
    let mut illegal = simulated_history(21, 1, 2, 10_000);
    plant_empty_read(&mut illegal);
    case(c, "reject_10k", &illegal, 1, &|h| {
        check(h).expect_err("a planted fault");
    });
    case(c, "verdict_10k", &illegal, 1, &|h| {
        verdict(h).expect_err("a planted fault");
    });
}

criterion_group!(benches, linearize);
criterion_main!(benches);
