//! `fencecheck check`'s report as plain text: the verdict table, each counterexample as a
//! numbered timeline, and the search figures.

use crate::check::{Gate, ModelRun, Params};
use crate::models::Expected;
use std::fmt::Write;

/// Appends a line to the report (writing to a `String` cannot fail).
macro_rules! w {
    ($out:expr) => {
        $out.push('\n')
    };
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

/// `3 clients x 2 writes, 0 retries` and the mutant, if any.
pub fn sizes(p: &Params) -> String {
    format!(
        "{} clients x {} writes, {} retries{}",
        p.clients,
        p.writes,
        p.retries,
        p.mutant
            .map(|m| format!(", mutant {} ({})", m.name(), m.summary()))
            .unwrap_or_default()
    )
}

/// `fencecheck check`'s report: the sizes, the verdict table, each counterexample as a
/// numbered timeline, the search figures and a summary line.
pub fn verdicts_text(runs: &[ModelRun], symmetry: bool) -> String {
    let mut out = String::new();
    w!(
        out,
        "fencecheck check: symmetry reduction {}",
        if symmetry { "on" } else { "off" }
    );
    for run in runs {
        w!(out, "  {}: {}", run.model, sizes(&run.params));
    }
    w!(out);
    let rows: Vec<[String; 8]> = runs
        .iter()
        .flat_map(|r| {
            r.properties.iter().map(move |p| {
                [
                    r.model.to_string(),
                    p.property.to_string(),
                    p.kind.to_string(),
                    p.expected.to_string(),
                    p.verdict.to_string().to_uppercase(),
                    if p.matches() { "ok" } else { "MISMATCH" }.to_string(),
                    r.states.to_string(),
                    format!("{:.2}s", r.seconds),
                ]
            })
        })
        .collect();
    let header = [
        "MODEL", "PROPERTY", "KIND", "EXPECTED", "VERDICT", "MATCH", "STATES", "TIME",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[&str]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<w$}  "));
            }
        }
        text.trim_end().to_string()
    };
    w!(out, "{}", line(&header));
    for row in &rows {
        w!(out, "{}", line(&row.each_ref().map(String::as_str)));
    }

    for run in runs {
        for p in &run.properties {
            let Some(cx) = &p.counterexample else {
                continue;
            };
            w!(out);
            w!(
                out,
                "{} / {}: VIOLATED ({}), {} counterexample in {} steps:",
                run.model,
                p.property,
                if p.expected == Expected::Violated {
                    "expected"
                } else {
                    "NOT EXPECTED"
                },
                if p.minimal {
                    "minimal"
                } else {
                    "a (not necessarily minimal)"
                },
                cx.steps.len()
            );
            for (i, step) in cx.steps.iter().enumerate() {
                let mark = if i + 1 == cx.steps.len() {
                    format!("  <- violates {}", p.property)
                } else {
                    String::new()
                };
                w!(out, "  {:>2}. {}{mark}", i + 1, step.text);
            }
        }
    }

    w!(out);
    let all: Vec<_> = runs.iter().flat_map(|r| &r.properties).collect();
    let matching = Gate::of(runs).matching;
    for run in runs {
        w!(
            out,
            "{}: {} distinct states{}, depth {}, {:.2} s search + {:.2} s minimal counterexamples{}",
            run.model,
            run.states,
            if run.symmetry { " (symmetry-reduced)" } else { "" },
            run.max_depth,
            run.seconds,
            run.counterexample_seconds,
            if run.complete { "" } else { " -- INCOMPLETE: --max-states reached" }
        );
    }
    for p in all.iter().filter(|p| !p.matches()) {
        let model = runs
            .iter()
            .find(|r| r.properties.iter().any(|q| std::ptr::eq(q, *p)))
            .map_or("", |r| r.model);
        w!(
            out,
            "MISMATCH {model} / {}: declared {}, found {}",
            p.property,
            p.expected,
            p.verdict
        );
    }
    w!(
        out,
        "{matching} of {} verdicts match their declared expectations.",
        all.len()
    );
    out
}
