//! The report builders on real check results: JSON schema, JUnit structure, diagrams drawn from
//! real counterexamples, a self-contained HTML page that a real browser renders.

use fencecheck::check::{catalog, find_model, ModelRun, Options, Params};
use fencecheck::models::Mutant;
use fencecheck::report;
use report_common::{meta, temp_dir};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

mod report_common;

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
