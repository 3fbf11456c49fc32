//! The linearizability checker on a 100,000-operation history of fenced registers (100 keys, four
//! clients per key overlapping, one write in a hundred never answered), against a baseline in the
//! same run: one pass over the writes in invocation order applying the fencing rule per key (the
//! cost of merely reading the history once).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fencecheck::check::linearize::{check, simulated_history, Call};
use fencecheck::protocol::Token;
use std::time::Duration;

fn linearize(c: &mut Criterion) {
    let history = simulated_history(1, 100, 4, 100_000);
    let mut g = c.benchmark_group("linearize");
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(history.len() as u64));
    g.bench_function("check_100k", |b| {
        b.iter(|| check(&history).expect("linearizable by construction"))
    });
    g.bench_function("baseline_replay_100k", |b| {
        b.iter(|| {
            let mut highest = vec![Token::new(0); 100];
            let mut accepted = 0usize;
            for op in &history {
                if let Call::Write { token, .. } = op.call {
                    let h = &mut highest[op.key as usize];
                    if token >= *h {
                        *h = token;
                        accepted += 1;
                    }
                }
            }
            accepted
        })
    });
    g.finish();
}

criterion_group!(benches, linearize);
criterion_main!(benches);
