//! A campaign trial as stored beside the report: its history in the trace format (the file
//! `fencecheck validate` reads, with the TTL it was judged with) and its verdict, with the
//! command that re-checks the trace.

use crate::check::campaign::{TrialRecord, TrialVerdict};
use crate::protocol::{FencePolicy, TTL_NOTE};

/// Where trial `i` (from 0) is stored under the report directory.
pub fn trial_dir(i: usize) -> String {
    format!("trials/{:03}", i + 1)
}

/// The trial's history as a trace file: a `# ttl-us N` line, then one line per event.
pub fn trial_trace(record: &TrialRecord, verdict: &TrialVerdict) -> String {
    let mut out = format!("# {TTL_NOTE} {}\n", verdict.replay.ttl_us);
    for f in &record.faults {
        out.push_str(&format!(
            "# fault: {} {} from {} us to {} us\n",
            f.who, f.what, f.from_us, f.to_us
        ));
    }
    for e in record.trace.events() {
        out.push_str(&e.line());
        out.push('\n');
    }
    out
}

/// The `fencecheck validate` flags that replay the stored trace as the trial was judged.
fn validate_flags(verdict: &TrialVerdict) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if verdict.replay.policy == FencePolicy::AcceptAll {
        flags.push("--unfenced");
    }
    if verdict.replay.work_may_overlap {
        flags.push("--work-may-overlap");
    }
    flags
}

/// The trial's verdict in words, ending with the command that re-checks its trace.
pub fn trial_verdict(i: usize, record: &TrialRecord, v: &TrialVerdict) -> String {
    let mut out = format!(
        "trial {}: {}\n",
        i + 1,
        if v.violated() {
            "BROKE A RULE"
        } else {
            "kept every rule"
        }
    );
    out.push_str(&format!(
        "grants {}, writes accepted {}, rejected {}, increments lost {} (final value {}), work \
         overlap {} ms\n",
        v.acquisitions,
        v.accepted,
        v.rejected,
        v.lost,
        record.final_value,
        v.overlap_us / 1000
    ));
    for f in &record.faults {
        let ms = f.to_us.saturating_sub(f.from_us) / 1000;
        out.push_str(&format!("fault: {} {} for {ms} ms\n", f.who, f.what));
    }
    out.push_str(&format!(
        "storage_in_lease_order: {}\n",
        match &v.lease_order {
            Ok(()) => "holds".to_string(),
            Err(e) => format!("VIOLATED: {e}"),
        }
    ));
    out.push_str(&format!(
        "trace: {}\n",
        match &v.validation {
            Ok(ok) => ok.to_string(),
            Err(e) => format!("NOT explained: {e}"),
        }
    ));
    out.push_str(&format!(
        "register: {}\n",
        match &v.linearizable {
            Ok(c) => format!("linearizable ({} operations)", c.operations),
            Err(e) => format!("NOT linearizable: {e}"),
        }
    ));
    let mut command = vec!["fencecheck", "validate"];
    command.extend(validate_flags(v));
    command.push("trace");
    out.push_str(&format!("re-check the trace: {}\n", command.join(" ")));
    out
}
