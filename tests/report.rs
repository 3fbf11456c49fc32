//! The report builders on real check results: JSON schema, JUnit structure, diagrams drawn from
//! real counterexamples, a self-contained HTML page that a real browser renders.

use fencecheck::check::{catalog, find_model, ModelRun, Options, Params};
use fencecheck::models::Mutant;
use fencecheck::report::{self, Meta};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A cross-section of the catalog (every kind of property and step) at its defaults, with
/// `mutant` built into the models it applies to.
fn runs(mutant: Option<Mutant>) -> Vec<ModelRun> {
    catalog()
        .iter()
        .filter(|e| {
            [
                "ttl-only",
                "fenced",
                "token-reset",
                "leader-election",
                "append-job",
            ]
            .contains(&e.name)
        })
        .map(|e| {
            let mut p = (e.defaults)();
            p.mutant = mutant.filter(|m| e.mutants.contains(m));
            (e.check)(&p, &Options::default(), &mut |_| {}).expect("accepted")
        })
        .collect()
}

fn meta() -> Meta {
    Meta {
        commit: "0123456789ab".into(),
        rustc: "rustc test".into(),
        cores: 2,
        cpu: "test cpu".into(),
        version: env!("CARGO_PKG_VERSION"),
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fencecheck-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn models_json_follows_the_documented_schema() {
    let runs = runs(None);
    let text = serde_json::to_string(&report::models_json(&runs, &[], &meta())).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["schema_version"], report::SCHEMA_VERSION);
    assert_eq!(doc["all_match"], true);
    let models = doc["models"].as_array().unwrap();
    assert_eq!(models.len(), 5);
    for m in models {
        for key in [
            "model",
            "states",
            "generated",
            "max_depth",
            "seconds",
            "complete",
            "symmetry",
        ] {
            assert!(!m[key].is_null(), "{key}");
        }
        for p in m["properties"].as_array().unwrap() {
            assert!(["always", "sometimes", "eventually"].contains(&p["kind"].as_str().unwrap()));
            assert!(["holds", "violated"].contains(&p["expected"].as_str().unwrap()));
            assert!(["holds", "violated", "incomplete"].contains(&p["verdict"].as_str().unwrap()));
            assert!(p["matches"].is_boolean() && p["minimal"].is_boolean());
            let cx = &p["counterexample"];
            if p["verdict"] == "violated" && p["kind"] != "sometimes" {
                for step in cx.as_array().unwrap() {
                    for key in ["from", "to", "text"] {
                        assert!(step[key].is_string());
                    }
                }
            } else {
                assert!(cx.is_null());
            }
        }
    }
}

/// A minimal well-formedness check: tags balance and nest.
fn assert_balanced(xml: &str) {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        let end = rest[start..].find('>').expect("unclosed tag") + start;
        let tag = &rest[start + 1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('?') || tag.ends_with('/') {
            continue;
        }
        let name = tag
            .trim_start_matches('/')
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        if tag.starts_with('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.as_str()),
                "misnested </{name}>"
            );
        } else {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed {stack:?}");
}

#[test]
fn junit_has_one_testcase_per_property_and_failures_carry_the_timeline() {
    let runs = runs(Some(Mutant::FenceAcceptsOlder));
    let xml = report::junit(&runs, &[]);
    assert_balanced(&xml);
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites "));
    let total: usize = runs.iter().map(|r| r.properties.len()).sum();
    assert_eq!(xml.matches("<testcase ").count(), total);
    assert_eq!(xml.matches("<testsuite ").count(), runs.len());
    for attr in [
        "classname=\"fencecheck.fenced\"",
        "name=\"storage_in_lease_order\"",
    ] {
        assert!(xml.contains(attr), "{attr}");
    }
    // The mutant breaks fenced storage: exactly the mismatching properties fail, with the timeline.
    let mismatches: usize = runs
        .iter()
        .flat_map(|r| &r.properties)
        .filter(|p| !p.matches())
        .count();
    assert!(mismatches > 0);
    assert_eq!(xml.matches("<failure ").count(), mismatches);
    assert!(xml.contains("7. client-0 writes with token 1: accepted"));
    assert!(xml.contains(&format!("failures=\"{mismatches}\"")));
}

#[test]
fn diagrams_are_drawn_from_the_real_counterexample() {
    let run = (find_model("ttl-only").unwrap().check)(
        &Params::default(),
        &Options::default(),
        &mut |_| {},
    )
    .expect("accepted");
    let p = run
        .properties
        .iter()
        .find(|p| p.property == "storage_in_lease_order")
        .unwrap();
    let steps = &p.counterexample.as_ref().unwrap().steps;

    let mermaid = report::mermaid(steps, p.property);
    assert!(mermaid.starts_with("sequenceDiagram\n"));
    let arrows = mermaid.matches("->>").count();
    let notes = mermaid.matches("Note over").count();
    let events = steps.iter().filter(|s| s.from == s.to).count();
    assert_eq!(arrows, steps.len() - events);
    assert_eq!(
        notes,
        events + 1,
        "one note per local event plus the violation"
    );
    for (i, s) in steps.iter().enumerate() {
        assert!(
            mermaid.contains(&format!("{}. {}", i + 1, s.text)),
            "{}",
            s.text
        );
    }
    assert!(mermaid.contains("violates storage_in_lease_order"));

    let svg = report::sequence_svg(steps, p.property);
    assert_balanced(&svg);
    assert_eq!(
        svg.matches("marker-end=\"url(#arrow)\"").count(),
        steps.len() - events
    );
    assert_eq!(svg.matches("<circle ").count(), events);
    assert_eq!(svg.matches("class=\"violation\"").count(), 1);
    assert!(svg
        .contains("7. client-0 writes with token 1: accepted  (violates storage_in_lease_order)"));

    let md = report::models_markdown(std::slice::from_ref(&run), &meta());
    assert!(md.contains("```mermaid\nsequenceDiagram\n"));
    assert!(md.contains(
        "7. client-0 writes with token 1: accepted **<- violates `storage_in_lease_order`**"
    ));
}

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

fn page() -> (String, usize) {
    let runs = runs(None);
    let counterexamples = runs
        .iter()
        .flat_map(|r| &r.properties)
        .filter(|p| p.counterexample.is_some())
        .count();
    let write = report::BenchResult {
        group: "write/uncontended".into(),
        function: "fenced_write".into(),
        median_ns: 13.0,
        elements: Some(1),
        baseline: Some("unfenced_write".into()),
        ratio: Some(13.0 / 12.0),
        written: None,
        left_out: None,
        paired: None,
    };
    // Two goals measured: the contended lock (alternating rounds, not met) and a history check.
    let contended = report::BenchResult {
        group: "acquire/contended/2/paired".into(),
        function: "lease_lock_coarse_try_acquire_release".into(),
        paired: Some(report::Paired {
            over: "parking_lot_lock_unlock".into(),
            blocks: 12,
            ratio: 2.28,
            low: 2.24,
            high: 2.37,
        }),
        ..write.clone()
    };
    let history = report::BenchResult {
        group: "linearize/reject_10k".into(),
        function: "check".into(),
        median_ns: 6.6e6,
        ..write.clone()
    };
    let bench = vec![write, contended, history];
    (report::html(&runs, Some(&bench), &meta()), counterexamples)
}

#[test]
fn html_is_self_contained() {
    let (html, counterexamples) = page();
    assert!(counterexamples >= 5);
    for banned in [
        "<script", "<link", "src=", "@import", "url(http", "https://", "cdn",
    ] {
        assert!(!html.contains(banned), "external reference: {banned}");
    }
    // The only URL is the SVG namespace, which no browser fetches.
    assert_eq!(
        html.matches("http://").count(),
        html.matches("http://www.w3.org/2000/svg").count()
    );
    assert_eq!(
        html.matches("<svg ").count(),
        counterexamples + 3,
        "one diagram per counterexample, a chart per measured goal and the bar chart"
    );
    assert!(html.contains("fenced_write vs unfenced_write"));
    assert!(html.contains("2.28 x (95 % interval 2.24-2.37 x) &mdash; <span class=\"bad\">goal at most 1.50 x: NOT met"));
    assert!(html.contains("6.60 ms &mdash; <span class=\"ok\">goal at most 200.00 ms: met"));
}

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH")?
                .to_str()?
                .split(':')
                .map(|d| Path::new(d).join(name))
                .find(|p| p.is_file())
        })
}

/// Renders `html` headless and returns (screenshot bytes, browser log).
fn render(browser: &Path, html: &str, dir: &Path, name: &str) -> (Vec<u8>, String) {
    let page = dir.join(format!("{name}.html"));
    let shot = dir.join(format!("{name}.png"));
    std::fs::write(&page, html).unwrap();
    let profile = dir.join(format!("{name}-profile"));
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--hide-scrollbars",
            "--window-size=1280,1600",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let png =
        std::fs::read(&shot).unwrap_or_else(|_| panic!("no screenshot; browser said:\n{log}"));
    (png, log)
}

fn console_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Failed to load resource"))
        .collect()
}

#[test]
fn a_real_browser_renders_the_page_without_errors() {
    let Some(browser) = chromium() else {
        let required = std::env::var("FENCECHECK_REQUIRE_SERVERS").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "chromium is required (FENCECHECK_REQUIRE_SERVERS=1) but not installed"
        );
        eprintln!("SKIPPED a_real_browser_renders_the_page_without_errors: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let dir = temp_dir("browser");
    let (ours, log) = render(&browser, &page().0, &dir, "report");
    assert!(ours.starts_with(b"\x89PNG"), "not a PNG");
    assert!(console_errors(&log).is_empty(), "console errors:\n{log}");
    // Negative controls: a blank page compresses to almost nothing, and a page with a broken
    // resource shows up in the log.
    let (blank, _) = render(
        &browser,
        "<!DOCTYPE html><html><body></body></html>",
        &dir,
        "blank",
    );
    assert!(
        ours.len() > 4 * blank.len(),
        "screenshot looks blank: {} bytes vs {} for an empty page",
        ours.len(),
        blank.len()
    );
    let (_, broken_log) = render(
        &browser,
        "<!DOCTYPE html><html><body><script>console.error('boom')</script></body></html>",
        &dir,
        "broken",
    );
    assert!(
        !console_errors(&broken_log).is_empty(),
        "the log check misses console errors:\n{broken_log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
