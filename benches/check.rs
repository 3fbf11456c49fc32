//! Model-checking throughput (states per second) of each model at its default size, with 1 and 2
//! checker threads, with and without symmetry reduction where the model has it, on Stateright's
//! checker and on the lean search (`lean_*`). The baseline is Stateright's full search with one
//! thread (`full_threads1`).

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fencecheck::check::{catalog, Engine, Options};
use std::time::Duration;

fn check(c: &mut Criterion) {
    for entry in catalog() {
        let params = (entry.defaults)();
        let mut g = c.benchmark_group(format!("check/{}", entry.name));
        g.sample_size(10);
        g.warm_up_time(Duration::from_millis(200));
        g.measurement_time(Duration::from_secs(1));
        let reduces = (entry.check)(&params, &Options::default(), &mut |_| {})
            .expect("accepted")
            .symmetry;
        let symmetry: &[bool] = if reduces { &[true, false] } else { &[false] };
        let runs = [Engine::Stateright, Engine::Lean]
            .into_iter()
            .flat_map(|engine| symmetry.iter().map(move |&symmetry| (engine, symmetry)));
        for (engine, symmetry) in runs {
            for threads in [1usize, 2] {
                let options = Options {
                    threads,
                    symmetry,
                    engine,
                    ..Options::default()
                };
                // States per run, measured once, so that criterion reports states/s.
                let states = (entry.check)(&params, &options, &mut |_| {})
                    .expect("accepted")
                    .generated;
                g.throughput(Throughput::Elements(states as u64));
                let id = format!(
                    "{}{}_threads{threads}",
                    if engine == Engine::Lean { "lean_" } else { "" },
                    if symmetry { "symmetry" } else { "full" }
                );
                g.bench_with_input(BenchmarkId::from_parameter(id), &options, |b, o| {
                    b.iter(|| (entry.check)(&params, o, &mut |_| {}))
                });
            }
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = check
}
criterion_main!(benches);
