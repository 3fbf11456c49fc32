//! The benchmark report on criterion's own files: ratios to each group's baseline, results of
//! other runs left out, the median's interval, and paired rounds against the floor they
//! alternated with.

mod report_common;

use fencecheck::report;
use report_common::{meta, temp_dir};
use std::path::Path;

fn fake_criterion(dir: &Path, group: &str, function: &str, median: f64, elements: u64) {
    let d = dir.join(group.replace('/', "_")).join(function).join("new");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("benchmark.json"),
        format!(
            "{{\"group_id\":\"{group}\",\"function_id\":\"{function}\",\"value_str\":null,\"throughput\":{{\"Elements\":{elements}}}}}"
        ),
    )
    .unwrap();
    std::fs::write(
        d.join("estimates.json"),
        format!("{{\"median\":{{\"point_estimate\":{median}}}}}"),
    )
    .unwrap();
}

#[test]
fn benchmark_ratios_come_from_criterion_estimates() {
    let dir = temp_dir("criterion");
    assert!(matches!(
        report::collect_benchmarks(&dir),
        Err(report::BenchError::NoResults(_))
    ));
    fake_criterion(
        &dir,
        "acquire/uncontended",
        "lease_lock_acquire_release",
        45.0,
        1,
    );
    fake_criterion(
        &dir,
        "acquire/uncontended",
        "parking_lot_lock_unlock_plus_clock",
        30.0,
        1,
    );
    fake_criterion(&dir, "write/uncontended", "fenced_write", 13.0, 1);
    fake_criterion(&dir, "write/uncontended", "unfenced_write", 12.0, 1);
    let results = report::collect_benchmarks(&dir).unwrap();
    assert_eq!(results.len(), 4);
    let lease = results
        .iter()
        .find(|r| r.function == "lease_lock_acquire_release")
        .unwrap();
    assert_eq!(
        lease.baseline.as_deref(),
        Some("parking_lot_lock_unlock_plus_clock")
    );
    assert!((lease.ratio.unwrap() - 1.5).abs() < 1e-9);
    assert!((lease.per_second().unwrap() - 1e9 / 45.0).abs() < 1e-3);
    let md = report::bench_markdown(&results, &meta());
    assert!(
        md.contains("| lease_lock_acquire_release | 45.0 ns | 22.22 M/s | 1.50 x |"),
        "{md}"
    );
    assert!(md.contains("test cpu (2 logical CPUs)"));
    std::fs::write(dir.join("broken.json"), "x").unwrap();
    let bad = dir.join("acquire_uncontended/lease_lock_acquire_release/new/estimates.json");
    std::fs::write(&bad, "{}").unwrap();
    assert!(matches!(
        report::collect_benchmarks(&dir),
        Err(report::BenchError::Format { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sets when criterion "wrote" a fake result, `ago` before now.
fn written_ago(dir: &Path, group: &str, function: &str, ago: std::time::Duration) {
    let file = dir
        .join(group.replace('/', "_"))
        .join(function)
        .join("new/estimates.json");
    let at = std::time::SystemTime::now() - ago;
    std::fs::File::options()
        .write(true)
        .open(&file)
        .and_then(|f| f.set_modified(at))
        .unwrap();
}

#[test]
fn a_result_of_another_run_gets_no_ratio_and_is_listed_as_left_out() {
    use std::time::Duration;
    let dir = temp_dir("criterion-runs");
    let group = "redis/acquire_release";
    fake_criterion(&dir, group, "redis_benchmark_floor", 100.0, 1);
    fake_criterion(&dir, group, "fenced_acquire_release", 110.0, 1);
    fake_criterion(&dir, group, "removed_since", 50.0, 1);
    // The control: a result written a minute before its baseline is the same run.
    written_ago(
        &dir,
        group,
        "fenced_acquire_release",
        Duration::from_secs(60),
    );
    written_ago(&dir, group, "removed_since", Duration::from_secs(3 * 3600));
    let results = report::collect_benchmarks(&dir).unwrap();
    let find = |f: &str| results.iter().find(|r| r.function == f).unwrap();
    assert!((find("fenced_acquire_release").ratio.unwrap() - 1.1).abs() < 1e-9);
    assert_eq!(find("fenced_acquire_release").left_out, None);
    let stale = find("removed_since");
    assert_eq!(stale.ratio, None);
    assert_eq!(
        stale.left_out.as_deref(),
        Some("written 3.0 h before redis_benchmark_floor: not the same run")
    );
    let md = report::bench_markdown(&results, &meta());
    assert!(md.contains("| fenced_acquire_release | 110.0 ns"), "{md}");
    assert!(!md.contains("| removed_since"), "{md}");
    assert!(
        md.contains("Left out (results of another run):\n- removed_since: written 3.0 h before"),
        "{md}"
    );
    // A baseline rewritten alone (a filtered run) leaves the older rows out, not compared.
    written_ago(
        &dir,
        group,
        "fenced_acquire_release",
        Duration::from_secs(20 * 60),
    );
    let results = report::collect_benchmarks(&dir).unwrap();
    let fenced = results
        .iter()
        .find(|r| r.function == "fenced_acquire_release")
        .unwrap();
    assert_eq!(fenced.ratio, None);
    assert_eq!(
        fenced.left_out.as_deref(),
        Some("written 20 min before redis_benchmark_floor: not the same run")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// P(Binomial(n, 1/2) < k), exactly, in integers.
fn below_exact(n: u32, k: u32) -> f64 {
    let mut choose = 1u128;
    let mut sum = 0u128;
    for j in 0..k.min(n + 1) {
        sum += choose;
        choose = choose * u128::from(n - j) / u128::from(j + 1);
    }
    sum as f64 / 2f64.powi(n as i32)
}

#[test]
fn the_median_interval_is_the_widest_order_statistic_pair_with_95_percent() {
    let xs: Vec<f64> = (1..=21).map(f64::from).collect();
    // n = 21: P(B < 6) = 1.33 %, P(B < 7) = 3.92 %: the 6th smallest and the 6th largest.
    assert_eq!(report::median_interval(&xs), Some((6.0, 16.0)));
    assert_eq!(report::median(&xs), Some(11.0));
    assert_eq!(report::median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(report::median(&[]), None);
    // Unsorted input gives the same interval.
    let mut shuffled = xs.clone();
    shuffled.reverse();
    shuffled.swap(0, 7);
    assert_eq!(report::median_interval(&shuffled), Some((6.0, 16.0)));
    // Five values cannot give 95 %: even (min, max) covers only 93.75 %.
    assert_eq!(report::median_interval(&[1.0, 2.0, 3.0, 4.0, 5.0]), None);
    let six: Vec<f64> = (1..=6).map(f64::from).collect();
    assert_eq!(report::median_interval(&six), Some((1.0, 6.0)));
    // Against the exact binomial for every size up to 100: k is the largest with P(B < k) <= 2.5 %.
    for n in 6..=100u32 {
        let xs: Vec<f64> = (1..=n).map(f64::from).collect();
        let (low, _) = report::median_interval(&xs).unwrap();
        let k = low as u32;
        assert!(below_exact(n, k) <= 0.025, "n {n}: k {k} covers too little");
        assert!(
            below_exact(n, k + 1) > 0.025,
            "n {n}: k {k} is not the largest"
        );
    }
}

#[test]
fn a_paired_result_shows_its_block_ratio_and_interval() {
    let dir = temp_dir("criterion-paired");
    let group = "redis/acquire_release/paired";
    fake_criterion(&dir, group, "redis_benchmark_floor", 100.0, 1);
    fake_criterion(&dir, group, "fenced_acquire_release", 104.0, 1);
    // The control: without a paired section a result shows no paired line.
    let results = report::collect_benchmarks(&dir).unwrap();
    assert!(results.iter().all(|r| r.paired.is_none()));
    let md = report::bench_markdown(&results, &meta());
    assert!(!md.contains("alternating"), "{md}");
    let estimates =
        dir.join("redis_acquire_release_paired/fenced_acquire_release/new/estimates.json");
    std::fs::write(
        &estimates,
        r#"{"median": {"point_estimate": 104.0}, "paired": {"over": "redis_benchmark_floor",
           "blocks": 12, "ratio": 1.031, "low": 0.987, "high": 1.072}}"#,
    )
    .unwrap();
    let results = report::collect_benchmarks(&dir).unwrap();
    let fenced = results
        .iter()
        .find(|r| r.function == "fenced_acquire_release")
        .unwrap();
    assert_eq!(fenced.paired.as_ref().map(|p| p.blocks), Some(12));
    assert_eq!(fenced.baseline.as_deref(), Some("redis_benchmark_floor"));
    let md = report::bench_markdown(&results, &meta());
    assert!(
        md.contains(
            "In 12 blocks of rounds alternating with redis_benchmark_floor (it first, then \
             fenced_acquire_release first), fenced_acquire_release took a median 1.03 x of it \
             per block (95 % interval 0.99-1.07 x)."
        ),
        "{md}"
    );
    // A paired section that is not the one written is an error, not silently dropped.
    std::fs::write(
        &estimates,
        r#"{"median": {"point_estimate": 104.0}, "paired": {"over": "redis_benchmark_floor"}}"#,
    )
    .unwrap();
    assert!(matches!(
        report::collect_benchmarks(&dir),
        Err(report::BenchError::Format { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A paired group's baseline is the floor named in its paired section, also one that no other
/// group uses (parking_lot's try-lock beside the contended lock); the control is the same group
/// without the section, which has no baseline.
#[test]
fn a_paired_group_is_compared_with_the_floor_it_alternated_with() {
    let dir = temp_dir("criterion-paired-floor");
    let group = "acquire/contended/2/paired_try";
    fake_criterion(&dir, group, "parking_lot_try_lock_unlock", 20.0, 2);
    fake_criterion(
        &dir,
        group,
        "lease_lock_coarse_try_acquire_release",
        50.0,
        2,
    );
    let lock = |results: &[report::BenchResult]| {
        results
            .iter()
            .find(|r| r.function == "lease_lock_coarse_try_acquire_release")
            .cloned()
            .unwrap()
    };
    let control = lock(&report::collect_benchmarks(&dir).unwrap());
    assert_eq!((control.baseline, control.ratio), (None, None));
    std::fs::write(
        dir.join(
            "acquire_contended_2_paired_try/lease_lock_coarse_try_acquire_release/new/estimates.json",
        ),
        r#"{"median": {"point_estimate": 50.0}, "paired": {"over": "parking_lot_try_lock_unlock",
           "blocks": 12, "ratio": 2.4, "low": 2.3, "high": 2.6}}"#,
    )
    .unwrap();
    let results = report::collect_benchmarks(&dir).unwrap();
    let paired = lock(&results);
    assert_eq!(
        paired.baseline.as_deref(),
        Some("parking_lot_try_lock_unlock")
    );
    assert!((paired.ratio.unwrap() - 2.5).abs() < 1e-9);
    let md = report::bench_markdown(&results, &meta());
    assert!(md.contains("ratio to parking_lot_try_lock_unlock"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}
