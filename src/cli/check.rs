//! `fencecheck check`, `list` and `explore`: parsing their inputs and printing results.

use super::{model_names, CheckArgs, EngineArg, ExploreArgs, SizeArgs, UsageError};
use fencecheck::check::{
    catalog, find_model, CheckError, Engine, ModelEntry, ModelRun, Options, Params, ParamsError,
    Progress, MAX_CLIENTS,
};
use fencecheck::models::{Expected, Mutant};
use fencecheck::report::{sizes, Skipped};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

/// The sizes for `entry`: its defaults, overridden by what the command line gives.
/// A size the checker refused, worded with the command-line flag.
fn flag_error(e: ParamsError) -> UsageError {
    UsageError(format!(
        "--{} {}: {}",
        e.parameter(),
        e.value(),
        e.expected()
    ))
}

fn params(size: &SizeArgs, entry: &ModelEntry) -> Result<Params, UsageError> {
    let mut params = (entry.defaults)();
    if let Some(clients) = size.clients {
        params.clients = clients;
    }
    if let Some(writes) = size.writes {
        params.writes =
            u8::try_from(writes).map_err(|_| flag_error(ParamsError::Writes(writes)))?;
    }
    if let Some(retries) = size.retries {
        params.retries =
            u8::try_from(retries).map_err(|_| flag_error(ParamsError::Retries(retries)))?;
    }
    params.mutant = mutant(size)?;
    if let Some(m) = params.mutant {
        if !entry.mutants.contains(&m) {
            return Err(UsageError(format!(
                "mutant '{}' does not apply to model {}; it applies to: {}",
                m.name(),
                entry.name,
                applies_to(m).join(", ")
            )));
        }
    }
    params.validate().map_err(flag_error)?;
    if !entry.clients.contains(&params.clients) {
        return Err(flag_error(ParamsError::ClientsForModel {
            model: entry.name,
            clients: params.clients,
            range: entry.clients.clone(),
        }));
    }
    Ok(params)
}

fn applies_to(m: Mutant) -> Vec<&'static str> {
    catalog()
        .iter()
        .filter(|e| e.mutants.contains(&m))
        .map(|e| e.name)
        .collect()
}

fn mutant(size: &SizeArgs) -> Result<Option<Mutant>, UsageError> {
    let Some(name) = &size.mutant else {
        return Ok(None);
    };
    Mutant::ALL
        .into_iter()
        .find(|m| m.name() == name)
        .map(Some)
        .ok_or_else(|| {
            let valid: Vec<_> = Mutant::ALL.iter().map(|m| m.name()).collect();
            UsageError(format!(
                "unknown mutant '{name}'; valid mutants: {}",
                valid.join(", ")
            ))
        })
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
    let declared = (entry.properties)(&(entry.defaults)());
    if !declared.iter().any(|p| p.name == property) {
        let names: Vec<_> = declared.iter().map(|p| p.name).collect();
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
    let threads = match args.threads {
        Some(n) if n == 0 || n > 64 => {
            return Err(UsageError(format!(
                "--threads {n}: expected a number of checker threads from 1 to 64"
            )))
        }
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get().min(64)),
    };
    if args.max_states == Some(0) {
        return Err(UsageError(
            "--max-states 0: expected at least 1 state".into(),
        ));
    }
    if args.max_states.is_some() && args.engine == Some(EngineArg::Stateright) {
        return Err(UsageError(
            "--engine stateright with --max-states: only the lean search stops at an exact \
             count of distinct states (Stateright's checker counts generated states, repeats \
             included); drop one of them"
                .into(),
        ));
    }
    let entries: Vec<&ModelEntry> = match (args.models.is_empty(), mutant(&args.size)?) {
        // A mutant without named models checks the models it applies to.
        (true, Some(m)) => catalog()
            .iter()
            .filter(|e| e.mutants.contains(&m))
            .collect(),
        (true, None) => catalog().iter().collect(),
        (false, _) => args
            .models
            .iter()
            .map(|n| model(n))
            .collect::<Result<_, _>>()?,
    };
    let (entries, skipped) = at_the_size_asked(entries, args.models.is_empty(), args.size.clients)?;
    let sized = entries
        .iter()
        .map(|e| Ok((*e, params(&args.size, e)?)))
        .collect::<Result<Vec<_>, UsageError>>()?;
    let overrides = args
        .expect
        .iter()
        .map(|e| parse_override(e))
        .collect::<Result<Vec<_>, _>>()?;
    let options = Options {
        threads,
        symmetry: !args.no_symmetry,
        max_states: args.max_states,
        engine: match args.engine {
            Some(EngineArg::Lean) | None => Engine::Lean,
            Some(EngineArg::Stateright) => Engine::Stateright,
        },
        ..Options::default()
    };

    let mut runs = match run_models(&sized, &options) {
        Ok(runs) => runs,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(super::exit::code(super::exit::CHECK_FAILED));
        }
    };
    for run in &mut runs {
        for o in overrides.iter().filter(|o| o.model == run.model) {
            if let Some(p) = run.properties.iter_mut().find(|p| p.property == o.property) {
                p.expected = o.expected;
            }
        }
    }

    if let Some(path) = &args.junit {
        super::write_file(path, &fencecheck::report::junit(&runs, &skipped))?;
    }
    if args.json {
        let meta = fencecheck::report::Meta::collect();
        let json = fencecheck::report::models_json(&runs, &skipped, &meta);
        println!(
            "{}",
            serde_json::to_string_pretty(&json).expect("JSON of plain values")
        );
    } else {
        print!(
            "{}",
            fencecheck::report::verdicts_text(&runs, options.symmetry)
        );
    }
    Ok(
        if fencecheck::check::Gate::of(&runs).passes(args.allow_incomplete) {
            ExitCode::SUCCESS
        } else {
            super::exit::code(super::exit::CHECK_FAILED)
        },
    )
}

/// With no model named and `--clients N` given, the models declared for N clients: the others
/// are skipped and named in one line on stderr with their declared sizes; none left is a usage
/// error. Named models are kept (a size one does not take is refused for it). Returns the kept
/// models and the skipped ones, for the JSON and JUnit reports.
fn at_the_size_asked(
    entries: Vec<&'static ModelEntry>,
    whole_catalog: bool,
    clients: Option<usize>,
) -> Result<(Vec<&'static ModelEntry>, Vec<Skipped>), UsageError> {
    // A size outside what any model may take is refused by `params`, naming the flag's range.
    let Some(n) = clients.filter(|n| whole_catalog && (1..=MAX_CLIENTS).contains(n)) else {
        return Ok((entries, Vec::new()));
    };
    let (kept, skipped): (Vec<_>, Vec<_>) =
        entries.into_iter().partition(|e| e.clients.contains(&n));
    let sizes = |list: &[&ModelEntry]| {
        list.iter()
            .map(|e| format!("{} ({}-{})", e.name, e.clients.start(), e.clients.end()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if kept.is_empty() {
        return Err(UsageError(format!(
            "--clients {n}: no model is declared for {n} clients; declared sizes: {}",
            sizes(&skipped)
        )));
    }
    if !skipped.is_empty() {
        eprintln!(
            "check: --clients {n}: {} of {} models checked; skipped, declared for other sizes: {}",
            kept.len(),
            kept.len() + skipped.len(),
            sizes(&skipped)
        );
    }
    let skipped = skipped
        .iter()
        .map(|e| Skipped {
            model: e.name,
            reason: format!(
                "declared for {}-{} clients, not {n}",
                e.clients.start(),
                e.clients.end()
            ),
        })
        .collect();
    Ok((kept, skipped))
}

/// Checks each model in turn with a progress line; stops at a model the checker refuses.
pub(super) fn run_models(
    entries: &[(&ModelEntry, Params)],
    options: &Options,
) -> Result<Vec<ModelRun>, CheckError> {
    entries
        .iter()
        .map(|(entry, params)| {
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

pub(super) fn list() {
    for entry in catalog() {
        println!("{}  --  {}", entry.name, entry.summary);
        let mutants: Vec<_> = entry.mutants.iter().map(|m| m.name()).collect();
        println!(
            "    default size: {} (declared for {} to {} clients); mutants: {}",
            sizes(&(entry.defaults)()),
            entry.clients.start(),
            entry.clients.end(),
            if mutants.is_empty() {
                "none".to_string()
            } else {
                mutants.join(", ")
            }
        );
        for p in (entry.properties)(&(entry.defaults)()) {
            let kind = format!("{:?}", p.kind).to_lowercase();
            println!(
                "    {:<24} {:<10} expected {:<8}  {}",
                p.name, kind, p.expected, p.meaning
            );
            if let Some(rule) = p.rule {
                println!("    {:<24} {:<10} ({rule})", "", "");
            }
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
    let params = params(&args.size, entry)?;
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
