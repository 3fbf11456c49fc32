//! `fencecheck check`, `list` and `explore`: parsing their inputs and printing results.

use super::{model_names, CheckArgs, ExploreArgs, SizeArgs, UsageError};
use fencecheck::check::{catalog, find_model, ModelEntry, ModelRun, Options, Params, Progress};
use fencecheck::models::{Expected, Mutant};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

fn params(size: &SizeArgs) -> Result<Params, UsageError> {
    let mutant = match &size.mutant {
        None => None,
        Some(name) => Some(
            Mutant::ALL
                .into_iter()
                .find(|m| m.name() == name)
                .ok_or_else(|| {
                    let valid: Vec<_> = Mutant::ALL.iter().map(|m| m.name()).collect();
                    UsageError(format!(
                        "unknown mutant '{name}'; valid mutants: {}",
                        valid.join(", ")
                    ))
                })?,
        ),
    };
    use fencecheck::check::ParamsError;
    let writes = u8::try_from(size.writes)
        .map_err(|_| UsageError(ParamsError::Writes(size.writes).to_string()))?;
    let retries = u8::try_from(size.retries)
        .map_err(|_| UsageError(ParamsError::Retries(size.retries).to_string()))?;
    let params = Params {
        clients: size.clients,
        writes,
        retries,
        mutant,
    };
    params.validate().map_err(|e| UsageError(e.to_string()))?;
    Ok(params)
}

fn model(name: &str) -> Result<&'static ModelEntry, UsageError> {
    find_model(name).ok_or_else(|| {
        UsageError(format!(
            "unknown model '{name}'; valid models: {}",
            model_names()
        ))
    })
}

/// An `--expect MODEL.PROPERTY=holds|violated` override.
struct Override {
    model: String,
    property: String,
    expected: Expected,
}

fn parse_override(text: &str) -> Result<Override, UsageError> {
    let bad = || {
        UsageError(format!(
            "--expect '{text}': expected MODEL.PROPERTY=holds or MODEL.PROPERTY=violated"
        ))
    };
    let (target, value) = text.split_once('=').ok_or_else(bad)?;
    let (model_name, property) = target.split_once('.').ok_or_else(bad)?;
    let expected = match value {
        "holds" => Expected::Holds,
        "violated" => Expected::Violated,
        _ => return Err(bad()),
    };
    let entry = model(model_name)?;
    if !entry.properties.iter().any(|p| p.name == property) {
        let names: Vec<_> = entry.properties.iter().map(|p| p.name).collect();
        return Err(UsageError(format!(
            "--expect '{text}': model {model_name} has no property '{property}'; its properties: {}",
            names.join(", ")
        )));
    }
    Ok(Override {
        model: model_name.to_string(),
        property: property.to_string(),
        expected,
    })
}

pub(super) fn run(args: CheckArgs) -> Result<ExitCode, UsageError> {
    let params = params(&args.size)?;
    if args.threads == 0 || args.threads > 64 {
        return Err(UsageError(format!(
            "--threads {}: expected a number of checker threads from 1 to 64",
            args.threads
        )));
    }
    if args.max_states == Some(0) {
        return Err(UsageError(
            "--max-states 0: expected at least 1 state".into(),
        ));
    }
    let entries: Vec<&ModelEntry> = if args.models.is_empty() {
        catalog().iter().collect()
    } else {
        args.models
            .iter()
            .map(|n| model(n))
            .collect::<Result<_, _>>()?
    };
    let overrides = args
        .expect
        .iter()
        .map(|e| parse_override(e))
        .collect::<Result<Vec<_>, _>>()?;
    let options = Options {
        threads: args.threads,
        symmetry: !args.no_symmetry,
        max_states: args.max_states,
        ..Options::default()
    };

    let mut runs = run_models(&entries, &params, &options);
    for run in &mut runs {
        for o in overrides.iter().filter(|o| o.model == run.model) {
            if let Some(p) = run.properties.iter_mut().find(|p| p.property == o.property) {
                p.expected = o.expected;
            }
        }
    }

    if let Some(path) = &args.junit {
        super::report::write_file(path, &fencecheck::report::junit(&runs))?;
    }
    if args.json {
        println!("{}", json(&runs, &params));
    } else {
        print_table(&runs, &params, &options);
    }
    let mismatches = runs
        .iter()
        .flat_map(|r| &r.properties)
        .filter(|p| !p.matches() && p.verdict != fencecheck::check::Verdict::Incomplete)
        .count();
    let incomplete = runs.iter().any(|r| !r.complete);
    Ok(
        if mismatches > 0 || (incomplete && !args.allow_incomplete) {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        },
    )
}

/// Checks each model in turn with a progress line.
pub(super) fn run_models(
    entries: &[&ModelEntry],
    params: &Params,
    options: &Options,
) -> Vec<ModelRun> {
    entries
        .iter()
        .map(|entry| {
            let mut reporter = ProgressLine::new();
            let run = (entry.check)(params, options, &mut |p| reporter.show(p));
            reporter.finish();
            run
        })
        .collect()
}

/// A live progress line on stderr for searches that run longer than a second.
struct ProgressLine {
    tty: bool,
    shown: bool,
    last_print: Duration,
}

impl ProgressLine {
    fn new() -> Self {
        ProgressLine {
            tty: std::io::stderr().is_terminal(),
            shown: false,
            last_print: Duration::ZERO,
        }
    }

    fn show(&mut self, p: &Progress) {
        if p.elapsed < Duration::from_secs(1) {
            return;
        }
        // On a terminal the line is redrawn in place; in a log, one line every 5 s.
        let every = if self.tty {
            Duration::ZERO
        } else {
            Duration::from_secs(5)
        };
        if self.shown && p.elapsed - self.last_print < every {
            return;
        }
        let rate = p.states as f64 / p.elapsed.as_secs_f64();
        let line = format!(
            "checking {}: {} states ({} generated, {:.0} states/s), depth {}, {:.0} s",
            p.model,
            p.unique_states,
            p.states,
            rate,
            p.max_depth,
            p.elapsed.as_secs_f64()
        );
        let mut err = std::io::stderr().lock();
        let _ = if self.tty {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        self.shown = true;
        self.last_print = p.elapsed;
    }

    fn finish(&self) {
        if self.shown && self.tty {
            eprint!("\r\x1b[2K");
        }
    }
}

fn print_table(runs: &[ModelRun], params: &Params, options: &Options) {
    println!(
        "fencecheck check: {} clients x {} writes, {} retries, {}{}",
        params.clients,
        params.writes,
        params.retries,
        if options.symmetry {
            "symmetry reduction on"
        } else {
            "symmetry reduction off"
        },
        params
            .mutant
            .map(|m| format!(", mutant {} ({})", m.name(), m.summary()))
            .unwrap_or_default()
    );
    println!();
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
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(&header);
    for row in &rows {
        line(&row.each_ref().map(String::as_str));
    }

    for run in runs {
        for p in &run.properties {
            let Some(cx) = &p.counterexample else {
                continue;
            };
            println!();
            println!(
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
                println!("  {:>2}. {}{mark}", i + 1, step.text);
            }
        }
    }

    println!();
    let all: Vec<_> = runs.iter().flat_map(|r| &r.properties).collect();
    let matching = all.iter().filter(|p| p.matches()).count();
    for run in runs {
        println!(
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
        println!(
            "MISMATCH {model} / {}: declared {}, found {}",
            p.property, p.expected, p.verdict
        );
    }
    println!(
        "{matching} of {} verdicts match their declared expectations.",
        all.len()
    );
}

fn json(runs: &[ModelRun], params: &Params) -> String {
    let rows: Vec<serde_json::Value> = runs
        .iter()
        .flat_map(|r| {
            r.properties.iter().map(move |p| {
                serde_json::json!({
                    "model": r.model,
                    "property": p.property,
                    "kind": p.kind,
                    "expected": p.expected,
                    "verdict": p.verdict,
                    "matches": p.matches(),
                    "states": r.states,
                    "seconds": r.seconds,
                    "complete": r.complete,
                    "symmetry": r.symmetry,
                    "clients": params.clients,
                    "writes": params.writes,
                    "retries": params.retries,
                    "mutant": params.mutant.map(|m| m.name()),
                    "counterexample": p.counterexample.as_ref().map(|c| &c.steps),
                    "minimal": p.minimal,
                })
            })
        })
        .collect();
    serde_json::to_string_pretty(&rows).expect("JSON of plain values")
}

pub(super) fn list() {
    for entry in catalog() {
        println!("{}  --  {}", entry.name, entry.summary);
        for p in entry.properties {
            let kind = format!("{:?}", p.kind).to_lowercase();
            println!(
                "    {:<24} {:<10} expected {:<8}  {}",
                p.name, kind, p.expected, p.meaning
            );
        }
        println!();
    }
    let mutants: Vec<_> = Mutant::ALL
        .iter()
        .map(|m| format!("{} ({})", m.name(), m.summary()))
        .collect();
    println!("negative controls (--mutant): {}", mutants.join("; "));
}

pub(super) fn explore(args: ExploreArgs) -> Result<ExitCode, UsageError> {
    let entry = model(&args.model)?;
    let params = params(&args.size)?;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], args.port));
    // Stateright's server panics on a busy port; find out first and say so.
    if let Err(e) = std::net::TcpListener::bind(addr) {
        return Err(UsageError(format!(
            "--port {}: cannot listen on {addr}: {e}",
            args.port
        )));
    }
    println!(
        "Explorer for {} ({} clients x {} writes) on http://{addr}/ -- Ctrl-C to stop",
        entry.name, params.clients, params.writes
    );
    (entry.explore)(&params, addr);
    Ok(ExitCode::SUCCESS)
}
