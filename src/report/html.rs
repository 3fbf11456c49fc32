//! One self-contained HTML page: verdicts, counterexample diagrams, benchmark ratios. No script,
//! no external asset: it renders offline and from a CI artifact.

use super::bench::BenchResult;
use super::diagram::sequence_svg;
use super::{escape, Meta};
use crate::check::ModelRun;

pub(super) const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:1200px}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}\
th{background:#f3f3f3}.ok{color:#1e7e34}.bad{color:#c0392b;font-weight:bold}\
.violated{color:#c0392b}.holds{color:#1e7e34}.incomplete{color:#b9770e}\
figure{margin:1em 0;overflow-x:auto}figcaption{font-weight:bold;margin-bottom:.5em}\
.meta{color:#666;font-size:90%}.banner{font-size:130%;font-weight:bold;padding:.4em .6em;border:2px solid}";

/// The label of the benchmark chart's SVG: `report` looks for it before replacing a page.
pub const BENCH_CHART_MARK: &str = "benchmark ratios";

fn bar_chart(results: &[BenchResult]) -> String {
    let rows: Vec<&BenchResult> = results
        .iter()
        .filter(|r| r.ratio.is_some() && r.baseline.as_deref() != Some(&r.function))
        .collect();
    if rows.is_empty() {
        return "<p>No benchmark ratios.</p>\n".to_string();
    }
    // Each row: its whole label on a line of its own, the bar beneath it.
    let max = rows.iter().filter_map(|r| r.ratio).fold(1.0f64, f64::max);
    let (left, bar_w, row_h) = (4.0, 900.0, 34.0);
    let height = row_h * rows.len() as f64 + 30.0;
    let width = left + bar_w + 80.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         role=\"img\" aria-label=\"{BENCH_CHART_MARK}\" font-family=\"sans-serif\" font-size=\"12\">\n"
    );
    let one = left + bar_w / max;
    svg.push_str(&format!(
        "<line x1=\"{one:.1}\" y1=\"0\" x2=\"{one:.1}\" y2=\"{:.1}\" stroke=\"#888\" stroke-dasharray=\"3 3\"/>\
         <text x=\"{one:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#666\">1.0 = baseline</text>\n",
        height - 18.0,
        height - 4.0
    ));
    for (i, r) in rows.iter().enumerate() {
        let ratio = r.ratio.unwrap_or(0.0);
        let y = i as f64 * row_h;
        let w = bar_w * ratio / max;
        let color = if ratio <= 1.0 { "#27ae60" } else { "#2980b9" };
        svg.push_str(&format!(
            "<text x=\"{left}\" y=\"{:.1}\">{} / {} vs {}</text>\
             <rect x=\"{left}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"12\" fill=\"{color}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{ratio:.2} x</text>\n",
            y + 12.0,
            escape(&r.group),
            escape(&r.function),
            escape(r.baseline.as_deref().unwrap_or("")),
            y + 16.0,
            left + w + 4.0,
            y + 27.0
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

/// The report page. `bench` is `None` when no benchmark results were available.
pub fn html(runs: &[ModelRun], bench: Option<&[BenchResult]>, meta: &Meta) -> String {
    let mut h = String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    h.push_str("<title>fencecheck report</title>\n");
    h.push_str(&format!("<style>{STYLE}</style></head><body>\n"));
    h.push_str("<h1>fencecheck report</h1>\n");
    h.push_str(&format!(
        "<p class=\"meta\">fencecheck {} at commit {}; {}; {} ({} logical CPUs). Each model checked at its default size.</p>\n",
        escape(meta.version),
        escape(&meta.commit),
        escape(&meta.rustc),
        escape(&meta.cpu),
        meta.cores
    ));
    h.push_str("<h2>Verdicts</h2>\n<table><tr><th>model</th><th>property</th><th>kind</th><th>expected</th><th>verdict</th><th>match</th><th>states</th><th>seconds</th></tr>\n");
    for r in runs {
        for p in &r.properties {
            h.push_str(&format!(
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td class=\"{}\">{}</td><td>{}</td><td>{:.3}</td></tr>\n",
                escape(r.model),
                escape(p.property),
                p.kind,
                p.expected,
                p.verdict,
                p.verdict,
                if p.matches() { "ok" } else { "bad" },
                if p.matches() { "ok" } else { "MISMATCH" },
                r.states,
                r.seconds
            ));
        }
    }
    h.push_str("</table>\n<h2>Counterexamples</h2>\n");
    for r in runs {
        for p in &r.properties {
            let Some(cx) = &p.counterexample else {
                continue;
            };
            h.push_str(&format!(
                "<figure><figcaption>{} / {}: violated ({}), {} counterexample in {} steps</figcaption>\n{}</figure>\n",
                escape(r.model),
                escape(p.property),
                if p.matches() { "as declared" } else { "NOT as declared" },
                if p.minimal { "minimal" } else { "a" },
                cx.steps.len(),
                sequence_svg(&cx.steps, p.property)
            ));
        }
    }
    h.push_str("<h2>Benchmarks</h2>\n");
    match bench {
        Some(results) => {
            h.push_str(&super::goals::goals_html(&super::goals::measure(results)));
            let shown = results.iter().filter(|r| r.ratio.is_some()).count();
            h.push_str(&format!(
                "<details><summary>Every ratio ({shown}): median time relative to each group's \
                 baseline, measured in the same run</summary>\n"
            ));
            h.push_str(&bar_chart(results));
            h.push_str("</details>\n");
        }
        None => h.push_str("<p>No benchmark results: run <code>cargo bench</code>, then <code>fencecheck report</code>.</p>\n"),
    }
    h.push_str("</body></html>\n");
    h
}
