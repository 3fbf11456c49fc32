//! Rendering results, all of it here: model verdicts as text (what `fencecheck check` prints),
//! JSON (one schema, for `check --json` and `models.json`), Markdown, JUnit XML and HTML with
//! sequence diagrams, and criterion's saved estimates as a benchmark table. A library: the CLI
//! only decides where the output goes.

mod bench;
mod campaign;
mod catalog;
mod diagram;
mod goals;
mod html;
mod junit;
mod models;
mod mutants;
mod text;
mod trial;

pub use bench::{
    collect_benchmarks, median, median_interval, BenchError, BenchResult, Paired, SAME_RUN,
};
pub use campaign::{campaign_html, campaign_markdown, trial_svg};
pub use catalog::{catalog_markdown, CATALOG_DOC};
pub use diagram::{mermaid, sequence_svg};
pub use goals::{goals_markdown, measure as measure_goals, Goal, Measure, Measured, GOALS};
pub use html::{html, BENCH_CHART_MARK};
pub use junit::junit;
pub use trial::{trial_dir, trial_trace, trial_verdict};

/// A model the check left out, and why (it is not declared for the size asked).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// The model.
    pub model: &'static str,
    /// Why it was not checked, e.g. `declared for 2-4 clients`.
    pub reason: String,
}
pub use models::{models_json, models_markdown, SCHEMA_VERSION};
pub use mutants::{mutants_markdown, MutantsError};
pub use text::{sizes, verdicts_text};

/// Where and with what a report was made.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Meta {
    /// The git commit of the checkout, or `unknown`.
    pub commit: String,
    /// `rustc --version`, or `unknown`.
    pub rustc: String,
    /// Logical CPUs available.
    pub cores: usize,
    /// The CPU model from `/proc/cpuinfo`, or `unknown`.
    pub cpu: String,
    /// The fencecheck version.
    pub version: &'static str,
}

impl Meta {
    /// Reads the machine, the toolchain and the checkout.
    pub fn collect() -> Meta {
        let run = |cmd: &str, args: &[&str]| {
            std::process::Command::new(cmd)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "unknown".to_string())
        };
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".to_string());
        Meta {
            commit: run("git", &["rev-parse", "--short=12", "HEAD"]),
            rustc: run("rustc", &["--version"]),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu,
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// Escapes text for HTML and XML.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `bench.md`: the machine, toolchain and commit; each performance goal held against its
/// benchmark ([`GOALS`]); then one table per group with the median, the throughput and the ratio
/// to the group's baseline.
pub fn bench_markdown(results: &[BenchResult], meta: &Meta) -> String {
    let goals = goals::goals_markdown(&goals::measure(results));
    bench::results_markdown(results, meta, &goals)
}
