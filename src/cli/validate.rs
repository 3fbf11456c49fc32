//! `fencecheck validate`: recorded traces replayed through the model.

use super::{parse_duration, UsageError};
use clap::Args;
use fencecheck::check::trace::{validate, Replay, TraceError};
use fencecheck::protocol::{FencePolicy, Trace, TraceEvent, TTL_NOTE};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Args)]
pub(super) struct ValidateArgs {
    /// Trace files, one event per line (`fencecheck run --trace FILE` writes them): microseconds
    /// on one clock, who, what, separated by tabs. The events of every file are merged by time.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// The lease's TTL as the lock service granted it (etcd rounds up to whole seconds;
    /// ZooKeeper clamps the session timeout to its bounds). Default: the `# ttl-us N` line
    /// `run --trace` writes, which must agree across the files.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    ttl: Option<Duration>,
    /// How far the service's clock may be from the trace's where a lease ends (default: 2 ms
    /// plus 1 % of the TTL).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    slack: Option<Duration>,
    /// The storage accepts every write whatever its token (default: it rejects a token below
    /// the highest it has seen).
    #[arg(long)]
    unfenced: bool,
    /// Give up (no verdict, exit 1) after this many search states.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    max_states: usize,
    /// A holder may work on after a later lease was granted, because every write of its work
    /// carries the token to fenced storage (as `torture`'s workers do). By default the
    /// `work-started` / `work-stopped` records must show each work stopped before a later
    /// lease was granted (`work_stopped_before_successor`).
    #[arg(long)]
    work_may_overlap: bool,
}

/// The trace files read: their events merged by time (stable: events at the same microsecond
/// keep their file's order; times start at the first event), and the TTLs their `# ttl-us N`
/// lines name, with where each was found.
struct Traces {
    trace: Trace,
    ttls: Vec<(u64, String)>,
}

/// The most a trace file may hold: a trace is one short line per lock event.
const MAX_TRACE_BYTES: u64 = 256 << 20;

/// A trace file's text, refusing one read twice (its events would be counted twice), one larger
/// than [`MAX_TRACE_BYTES`] (`/dev/zero`) and one that is not UTF-8.
fn read_text(path: &PathBuf, seen: &mut Vec<(PathBuf, PathBuf)>) -> Result<String, UsageError> {
    use std::io::Read as _;
    let bad = |what: String| UsageError(format!("{}: {what}", path.display()));
    let real = std::fs::canonicalize(path).map_err(|e| bad(e.to_string()))?;
    if let Some((first, _)) = seen.iter().find(|(_, r)| *r == real) {
        return Err(bad(format!(
            "the same file as {} (each file once: its events would count twice)",
            first.display()
        )));
    }
    seen.push((path.clone(), real));
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_TRACE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(e.to_string()))?;
    if bytes.len() as u64 > MAX_TRACE_BYTES {
        return Err(bad(format!(
            "more than {} MiB: not a trace (one line per lock event)",
            MAX_TRACE_BYTES >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|e| bad(format!("not UTF-8 text ({e})")))
}

fn read_traces(files: &[PathBuf]) -> Result<Traces, UsageError> {
    let mut events: Vec<TraceEvent> = Vec::new();
    let mut ttls = Vec::new();
    let mut seen = Vec::new();
    for path in files {
        let text = read_text(path, &mut seen)?;
        let mut last: Option<(u64, usize)> = None;
        for (n, line) in text.lines().enumerate() {
            let at = || format!("{}:{}", path.display(), n + 1);
            let ttl_note = line
                .strip_prefix("# ")
                .and_then(|l| l.strip_prefix(TTL_NOTE))
                .and_then(|l| l.strip_prefix(' '));
            if let Some(rest) = ttl_note {
                let word = rest.split_whitespace().next().unwrap_or("");
                let us: u64 = word.parse().map_err(|_| {
                    UsageError(format!(
                        "{}: `# ttl-us` needs whole microseconds, not {word:?}",
                        at()
                    ))
                })?;
                ttls.push((us, at()));
                continue;
            }
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let event =
                TraceEvent::parse_line(line).map_err(|e| UsageError(format!("{}: {e}", at())))?;
            // One file is one process's record on one clock: its times never go back.
            if let Some((before, line_before)) = last.filter(|(t, _)| *t > event.at_us) {
                return Err(UsageError(format!(
                    "{}: time goes back from {before} µs (line {line_before}) to {} µs: a trace \
                     file is written in time order",
                    at(),
                    event.at_us
                )));
            }
            last = Some((event.at_us, n + 1));
            events.push(event);
        }
    }
    events.sort_by_key(|e| e.at_us);
    let origin = events.first().map_or(0, |e| e.at_us);
    let mut trace = Trace::new();
    for e in events {
        trace.record(e.at_us - origin, &e.who, e.what);
    }
    Ok(Traces { trace, ttls })
}

/// The TTL to replay with: `--ttl`, else the one every `# ttl-us` line names.
fn ttl_of(given: Option<Duration>, ttls: &[(u64, String)]) -> Result<Duration, UsageError> {
    if let Some(ttl) = given {
        return Ok(ttl);
    }
    let Some((first, at)) = ttls.first() else {
        return Err(UsageError(
            "no --ttl given and no `# ttl-us N` line in the files: pass the TTL the lock \
             service granted, e.g. --ttl 30s"
                .into(),
        ));
    };
    if let Some((other, there)) = ttls.iter().find(|(us, _)| us != first) {
        return Err(UsageError(format!(
            "the files disagree on the TTL ({first} µs at {at}, {other} µs at {there}): pass \
             --ttl"
        )));
    }
    Ok(Duration::from_micros(*first))
}

pub(super) fn run(args: ValidateArgs) -> Result<ExitCode, UsageError> {
    let Traces { trace, ttls } = read_traces(&args.files)?;
    let ttl = ttl_of(args.ttl, &ttls)?;
    if ttl.is_zero() {
        return Err(UsageError("the TTL must be more than 0".into()));
    }
    if trace.is_empty() {
        return Err(UsageError(format!(
            "no events in {}: nothing to validate",
            args.files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let policy = if args.unfenced {
        FencePolicy::AcceptAll
    } else {
        FencePolicy::Fenced
    };
    let mut replay = Replay::new(ttl, policy);
    if let Some(slack) = args.slack {
        replay = replay.slack(slack);
    }
    replay.max_states = args.max_states;
    if args.work_may_overlap {
        replay = replay.work_may_overlap();
    }
    let clients: BTreeSet<&str> = trace.events().iter().map(|e| e.who.as_str()).collect();
    let what = format!(
        "{} events from {} client{} in {} file{}",
        trace.len(),
        clients.len(),
        if clients.len() == 1 { "" } else { "s" },
        args.files.len(),
        if args.files.len() == 1 { "" } else { "s" },
    );
    match validate(&trace, &replay) {
        Ok(v) => {
            let mut works = String::new();
            if args.work_may_overlap {
                works.push_str("; work may overlap");
            }
            if v.works.stopped > 0 {
                let n = v.works.stopped;
                works.push_str(&format!("; {n} works stopped before any later grant"));
            }
            if v.works.unknown > 0 {
                let n = v.works.unknown;
                works.push_str(&format!(
                    "; {n} never recorded as stopped (no verdict on them: did their recorder die?)"
                ));
            }
            println!(
                "{what}: explained by the model ({} grants, {} search states; TTL {:?}, slack \
                 {} µs, {} storage{works})",
                v.grants,
                v.states,
                ttl,
                replay.slack_us,
                if args.unfenced { "unfenced" } else { "fenced" }
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ TraceError::ZeroTtl) => Err(UsageError(e.to_string())),
        Err(e) => {
            println!("{what}: NOT explained: {e}");
            Ok(super::exit::code(super::exit::CHECK_FAILED))
        }
    }
}
