//! Criterion's saved estimates (`target/criterion/**/new/estimates.json`) as a table of medians,
//! throughputs and ratios to each group's baseline.
//!
//! A ratio is only meaningful between results of one run: criterion keeps every benchmark's last
//! result, including those of benchmarks renamed or removed since, and a filtered run rewrites
//! some results of a group but not others. A result written more than [`SAME_RUN`] apart from its
//! group's baseline is therefore left out of the table, with the reason beneath it.

use super::Meta;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How far apart two results of one group may have been written and still count as one run. A
/// group of this project's benchmarks runs in under a minute here; two runs are rarely this close.
pub const SAME_RUN: Duration = Duration::from_secs(600);

/// One benchmark's result as criterion saved it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BenchResult {
    /// The criterion group (`acquire/uncontended`, ...).
    pub group: String,
    /// The benchmark within the group.
    pub function: String,
    /// Median time per iteration, in nanoseconds.
    pub median_ns: f64,
    /// Elements per iteration, when the benchmark declared a throughput.
    pub elements: Option<u64>,
    /// The group's baseline benchmark.
    pub baseline: Option<String>,
    /// This median divided by the baseline's (time ratio; below 1 is faster).
    pub ratio: Option<f64>,
    /// When criterion wrote the result (its estimates file's modification time).
    #[serde(skip)]
    pub written: Option<SystemTime>,
    /// Why the result is not compared with the baseline: it was written in another run.
    pub left_out: Option<String>,
    /// When the result was measured in rounds alternating with a floor: the ratio per block.
    pub paired: Option<Paired>,
}

/// A result measured in rounds alternating with its floor, so that a machine whose speed moves
/// during the run moves both alike: the median of the per-block time ratios and a 95 % interval
/// for it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Paired {
    /// The floor it alternated with.
    pub over: String,
    /// How many blocks: each is two rounds, floor then this, then this then floor.
    pub blocks: u64,
    /// The median of the block ratios (this ÷ floor, time; a block's ratio is the geometric
    /// mean of its two rounds').
    pub ratio: f64,
    /// The interval's lower end.
    pub low: f64,
    /// The interval's upper end.
    pub high: f64,
}

/// The median of `xs`; `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut xs = xs.to_vec();
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    match xs.len() {
        0 => None,
        n if n % 2 == 1 => Some(xs[mid]),
        _ => Some((xs[mid - 1] + xs[mid]) / 2.0),
    }
}

/// A distribution-free interval of at least 95 % for the median of `xs`: the `k`-th smallest and
/// the `k`-th largest value, for the largest `k` with P(Binomial(n, 1/2) < k) <= 2.5 %. `None`
/// for fewer than 6 values, which cannot give 95 %.
pub fn median_interval(xs: &[f64]) -> Option<(f64, f64)> {
    let mut xs = xs.to_vec();
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    let k = (1..=n)
        .take_while(|&k| binomial_half_below(n, k) <= 0.025)
        .last()?;
    Some((xs[k - 1], xs[n - k]))
}

/// P(Binomial(n, 1/2) < k), for `k <= n`.
fn binomial_half_below(n: usize, k: usize) -> f64 {
    let mut term = 0.5f64.powi(i32::try_from(n).unwrap_or(i32::MAX));
    let mut sum = 0.0;
    for j in 0..k {
        sum += term;
        term *= (n - j) as f64 / (j + 1) as f64;
    }
    sum
}

impl BenchResult {
    /// Elements per second, when a throughput was declared.
    pub fn per_second(&self) -> Option<f64> {
        self.elements.map(|e| e as f64 * 1e9 / self.median_ns)
    }
}

/// Why benchmark results could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// No criterion results under the directory.
    #[error("no criterion results under {0} (run `cargo bench` first)")]
    NoResults(PathBuf),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file was not the JSON criterion writes.
    #[error("{path}: not a criterion {what} file")]
    Format {
        /// The file.
        path: PathBuf,
        /// Which kind of file was expected.
        what: &'static str,
    },
}

/// Each group's baseline, by preference: the first of these present in the group (a paired
/// group's is the floor it alternated with).
const BASELINES: &[&str] = &[
    "parking_lot_lock_unlock_plus_clock",
    "parking_lot_lock_unlock",
    "unfenced_write",
    "full_threads1",
    "redis_benchmark_floor",
    "plain_upsert",
    "put_if_absent_delete_floor",
    "create_ephemeral_sequential_delete_floor",
    "create_list_delete_floor",
    "two_plain_writes_floor",
    "plain_write_floor",
    "baseline_replay",
];

fn read_json(path: &Path, what: &'static str) -> Result<Value, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|_| BenchError::Format {
        path: path.to_path_buf(),
        what,
    })
}

fn visit(dir: &Path, found: &mut Vec<BenchResult>) -> Result<(), BenchError> {
    let entries = std::fs::read_dir(dir).map_err(|source| BenchError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        let (bench, estimates) = (
            path.join("new/benchmark.json"),
            path.join("new/estimates.json"),
        );
        if bench.is_file() && estimates.is_file() {
            let b = read_json(&bench, "benchmark")?;
            let e = read_json(&estimates, "estimates")?;
            let bad = |what| BenchError::Format {
                path: path.clone(),
                what,
            };
            let group = b["group_id"].as_str().ok_or_else(|| bad("benchmark"))?;
            let function = match (b["function_id"].as_str(), b["value_str"].as_str()) {
                (Some(f), _) => f.to_string(),
                (None, Some(v)) => v.to_string(),
                (None, None) => return Err(bad("benchmark")),
            };
            let median_ns = e["median"]["point_estimate"]
                .as_f64()
                .ok_or_else(|| bad("estimates"))?;
            let written = std::fs::metadata(&estimates)
                .and_then(|m| m.modified())
                .ok();
            found.push(BenchResult {
                group: group.to_string(),
                function,
                median_ns,
                elements: b["throughput"]["Elements"].as_u64(),
                baseline: None,
                ratio: None,
                written,
                left_out: None,
                paired: match &e["paired"] {
                    Value::Null => None,
                    p => Some(serde_json::from_value(p.clone()).map_err(|_| bad("estimates"))?),
                },
            });
        } else if path.file_name().is_some_and(|n| n != "report") {
            visit(&path, found)?;
        }
    }
    Ok(())
}

/// Reads every benchmark under `criterion_dir`, sorted by group and name, with ratios to each
/// group's baseline. A result written more than [`SAME_RUN`] apart from its baseline gets no
/// ratio and says why in [`BenchResult::left_out`].
pub fn collect_benchmarks(criterion_dir: &Path) -> Result<Vec<BenchResult>, BenchError> {
    let mut found = Vec::new();
    if criterion_dir.is_dir() {
        visit(criterion_dir, &mut found)?;
    }
    if found.is_empty() {
        return Err(BenchError::NoResults(criterion_dir.to_path_buf()));
    }
    found.sort_by(|a, b| (&a.group, &a.function).cmp(&(&b.group, &b.function)));
    let snapshot = found.clone();
    let in_group = |group: &str, name: &str| {
        snapshot
            .iter()
            .find(|b| b.group == group && b.function == name)
    };
    for r in &mut found {
        // A paired group's baseline is the floor its rounds alternated with; any other group's
        // the first of BASELINES it holds.
        let over = snapshot
            .iter()
            .filter(|b| b.group == r.group)
            .find_map(|b| b.paired.as_ref().map(|p| p.over.as_str()));
        let baseline = match over {
            Some(floor) => in_group(&r.group, floor),
            None => BASELINES.iter().find_map(|name| in_group(&r.group, name)),
        };
        if let Some(base) = baseline {
            r.baseline = Some(base.function.clone());
            match apart(r.written, base.written) {
                Some((gap, side)) if gap > SAME_RUN => {
                    r.left_out = Some(format!(
                        "written {} {side} {}: not the same run",
                        fmt_gap(gap),
                        base.function
                    ));
                }
                _ => r.ratio = Some(r.median_ns / base.median_ns),
            }
        }
    }
    Ok(found)
}

/// How far apart two write times are, and on which side of `base` the first lies.
fn apart(at: Option<SystemTime>, base: Option<SystemTime>) -> Option<(Duration, &'static str)> {
    let (at, base) = (at?, base?);
    Some(match base.duration_since(at) {
        Ok(gap) => (gap, "before"),
        Err(e) => (e.duration(), "after"),
    })
}

fn fmt_gap(gap: Duration) -> String {
    let minutes = (gap.as_secs() + 30) / 60;
    if minutes < 120 {
        format!("{minutes} min")
    } else {
        format!("{:.1} h", gap.as_secs_f64() / 3600.0)
    }
}

pub(super) fn fmt_time(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn fmt_rate(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.2} M/s", per_second / 1e6)
    } else if per_second >= 1e3 {
        format!("{:.1} k/s", per_second / 1e3)
    } else {
        format!("{per_second:.1} /s")
    }
}

/// `bench.md`: headed by the machine, toolchain and commit, then `goals` (a section of its own),
/// then one table per group with the median, the throughput and the ratio to the group's
/// baseline.
pub(super) fn results_markdown(results: &[BenchResult], meta: &Meta, goals: &str) -> String {
    let mut md = String::from("# Benchmarks\n\n");
    md.push_str(&format!(
        "Generated by `fencecheck report` from criterion's saved estimates. Machine: {} ({} logical \
         CPUs); {}; fencecheck {} at commit `{}`.\n\nRatios are medians divided by the group's \
         baseline, measured in the same run (below 1 is faster than the baseline).\n",
        meta.cpu, meta.cores, meta.rustc, meta.version, meta.commit
    ));
    md.push_str(goals);
    md.push_str("\n## Every result\n");
    let mut groups: Vec<&str> = results.iter().map(|r| r.group.as_str()).collect();
    groups.dedup();
    for group in groups {
        let rows = results.iter().filter(|r| r.group == group);
        let baseline = rows.clone().find_map(|r| r.baseline.as_deref());
        md.push_str(&format!(
            "\n### {group}\n\n| benchmark | median | throughput | ratio to {} |\n|---|---|---|---|\n",
            baseline.unwrap_or("baseline")
        ));
        for r in rows.clone().filter(|r| r.left_out.is_none()) {
            md.push_str(&row(r));
        }
        for r in rows.clone().filter(|r| r.left_out.is_none()) {
            if let Some(p) = &r.paired {
                md.push_str(&format!(
                    "\nIn {} blocks of rounds alternating with {} (it first, then {} first), {} \
                     took a median {:.2} x of it per block (95 % interval {:.2}-{:.2} x).\n",
                    p.blocks, p.over, r.function, r.function, p.ratio, p.low, p.high
                ));
            }
        }
        let left_out: Vec<_> = rows
            .filter_map(|r| Some((&r.function, r.left_out.as_ref()?)))
            .collect();
        if !left_out.is_empty() {
            md.push_str("\nLeft out (results of another run):\n");
            for (function, why) in left_out {
                md.push_str(&format!("- {function}: {why}\n"));
            }
        }
    }
    md
}

fn row(r: &BenchResult) -> String {
    format!(
        "| {} | {} | {} | {} |\n",
        r.function,
        fmt_time(r.median_ns),
        r.per_second().map(fmt_rate).unwrap_or_else(|| "-".into()),
        r.ratio
            .map(|x| format!("{x:.2} x"))
            .unwrap_or_else(|| "-".into())
    )
}
