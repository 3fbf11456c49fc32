//! A fault campaign's report: Markdown or one HTML page with every trial's verdict, and an SVG
//! timeline of one trial (one lane per worker: its work under each lease, each write's answer,
//! the faults).

use super::escape;
use super::html::STYLE;
use super::trial::trial_dir;
use crate::check::campaign::{Totals, TrialRecord, TrialVerdict};
use crate::protocol::Observed;

/// What one trial's row says: trial, fault, grants, accepted, rejected, lost, overlap (ms),
/// lease order, trace, linearizability.
fn row(i: usize, record: &TrialRecord, v: &TrialVerdict) -> [String; 10] {
    let fault = record
        .faults
        .iter()
        .map(|f| {
            format!(
                "{} {} {} ms",
                f.who,
                f.what,
                f.to_us.saturating_sub(f.from_us) / 1000
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let order = match &v.lease_order {
        Ok(()) => "held".to_string(),
        Err(e) => format!("VIOLATED: {e}"),
    };
    let trace = match &v.validation {
        Ok(ok) => format!("explained ({} events)", ok.events),
        Err(e) => format!(
            "UNEXPLAINED: {}",
            e.to_string().lines().next().unwrap_or_default()
        ),
    };
    let linear = match &v.linearizable {
        Ok(c) => format!("linearizable ({} operations)", c.operations),
        Err(e) => format!(
            "NOT LINEARIZABLE: {}",
            e.to_string().lines().next().unwrap_or_default()
        ),
    };
    [
        (i + 1).to_string(),
        if fault.is_empty() { "-".into() } else { fault },
        v.acquisitions.to_string(),
        v.accepted.to_string(),
        v.rejected.to_string(),
        v.lost.to_string(),
        (v.overlap_us / 1000).to_string(),
        order,
        trace,
        linear,
    ]
}

const HEADINGS: [&str; 10] = [
    "trial",
    "fault",
    "grants",
    "accepted",
    "rejected",
    "lost",
    "overlap (ms)",
    "lease order",
    "trace",
    "register",
];

/// The campaign's Markdown report: `title`, the totals, a row per trial (`records[i]` judged as
/// `verdicts[i]`), and the timeline of trial `shown` (saved beside it as `svg_name`).
pub fn campaign_markdown(
    title: &str,
    totals: &Totals,
    records: &[TrialRecord],
    verdicts: &[TrialVerdict],
    shown: Option<(usize, &str)>,
) -> String {
    let mut md = format!(
        "# {title}\n\n**{}**\n\n```\n{totals}\n```\n\n",
        banner(totals)
    );
    md.push_str(&format!("| {} |\n", HEADINGS.join(" | ")));
    md.push_str("|---:|---|---:|---:|---:|---:|---:|---|---|---|\n");
    for (i, (r, v)) in records.iter().zip(verdicts).enumerate() {
        let mut cells = row(i, r, v).map(|c| c.replace('|', "\\|"));
        cells[0] = format!("[{}]({}/verdict.txt)", i + 1, trial_dir(i));
        md.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    md.push_str(&format!(
        "\nEach trial's history (`{}/trace`, the trace format `fencecheck validate` reads) and \
         verdict are stored beside this report.\n",
        trial_dir(0).replace("001", "NNN")
    ));
    if let Some((i, svg)) = shown {
        md.push_str(&format!(
            "\n## Trial {}\n\n![timeline of trial {}]({svg})\n",
            i + 1,
            i + 1
        ));
        md.push_str(&explain(&verdicts[i]));
    }
    md
}

/// The campaign's verdict in one line: PASS or FAIL and how many trials broke a rule.
fn banner(totals: &Totals) -> String {
    if totals.violated == 0 {
        format!("PASS: all {} trials kept every rule", totals.trials)
    } else {
        format!(
            "FAIL: {} of {} trials broke a rule",
            totals.violated, totals.trials
        )
    }
}

/// Why trial `v` failed, as preformatted text (empty when nothing failed to check).
fn explain(v: &TrialVerdict) -> String {
    let mut out = String::new();
    if let Err(e) = &v.validation {
        out.push_str(&format!("\n```\n{e}\n```\n"));
    }
    if let Err(e) = &v.linearizable {
        out.push_str(&format!("\n```\n{e}```\n"));
    }
    out
}

/// The same report as one self-contained HTML page, the timeline of trial `shown` drawn inline.
pub fn campaign_html(
    title: &str,
    totals: &Totals,
    records: &[TrialRecord],
    verdicts: &[TrialVerdict],
    shown: Option<usize>,
) -> String {
    let mut html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>{STYLE}</style></head><body>\n<h1>{t}</h1>\n<p class=\"banner {}\">{}</p>\n\
         <pre>{}</pre>\n<table>\n<tr>",
        if totals.violated == 0 { "ok" } else { "bad" },
        escape(&banner(totals)),
        escape(&totals.to_string()),
        t = escape(title),
    );
    for h in HEADINGS {
        html.push_str(&format!("<th>{h}</th>"));
    }
    html.push_str("</tr>\n");
    for (i, (r, v)) in records.iter().zip(verdicts).enumerate() {
        let class = if v.violated() { "bad" } else { "ok" };
        html.push_str(&format!("<tr class=\"{class}\">"));
        let stored = format!("{}/verdict.txt", trial_dir(i));
        for (k, cell) in row(i, r, v).iter().enumerate() {
            if k == 0 {
                html.push_str(&format!(
                    "<td><a href=\"{stored}\">{}</a></td>",
                    escape(cell)
                ));
            } else {
                html.push_str(&format!("<td>{}</td>", escape(cell)));
            }
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    if let Some(i) = shown {
        html.push_str(&format!(
            "<figure><figcaption>Trial {}</figcaption>\n{}</figure>\n",
            i + 1,
            trial_svg(&records[i])
        ));
        let why = explain(&verdicts[i]).replace("```", "");
        if !why.trim().is_empty() {
            html.push_str(&format!("<pre>{}</pre>\n", escape(why.trim())));
        }
    }
    html.push_str("</body></html>\n");
    html
}

/// An SVG timeline of one trial: a lane per worker; a bar from each grant to its write's answer
/// (green: accepted, orange: rejected); grey where the nemesis paused the worker.
pub fn trial_svg(record: &TrialRecord) -> String {
    let events = record.trace.events();
    let mut workers: Vec<&str> = Vec::new();
    for e in events {
        if !workers.contains(&e.who.as_str()) {
            workers.push(&e.who);
        }
    }
    let end = events
        .iter()
        .map(|e| e.at_us)
        .chain(record.faults.iter().map(|f| f.to_us))
        .max()
        .unwrap_or(0)
        .max(1);
    let (left, width, lane) = (90.0, 900.0, 34.0);
    let x = |us: u64| left + width * us as f64 / end as f64;
    let lanes_end = 20.0 + lane * workers.len() as f64;
    let height = lanes_end + 44.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" \
         font-family=\"monospace\" font-size=\"12\">\n",
        left + width + 20.0
    );
    let lane_of = |who: &str| workers.iter().position(|w| *w == who).unwrap_or(0);
    let y = |who: &str| 20.0 + lane * lane_of(who) as f64;
    for w in &workers {
        svg.push_str(&format!(
            "<text x=\"4\" y=\"{}\">{}</text>\n",
            y(w) + 16.0,
            escape(w)
        ));
    }
    for f in &record.faults {
        // A fault on one worker shades its lane; one on the server, every lane.
        let (top, tall) = if workers.contains(&f.who.as_str()) {
            (y(&f.who) - 4.0, lane)
        } else {
            (16.0, lane * workers.len() as f64)
        };
        svg.push_str(&format!(
            "<rect x=\"{:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{tall}\" fill=\"#ccc\">\
             <title>{} {} {} ms</title></rect>\n",
            x(f.from_us),
            (x(f.to_us) - x(f.from_us)).max(1.0),
            escape(&f.who),
            escape(&f.what),
            f.to_us.saturating_sub(f.from_us) / 1000
        ));
    }
    let mut open: Vec<(&str, u64, String)> = Vec::new();
    for e in events {
        match e.what {
            Observed::Granted { token } => {
                open.retain(|(w, _, _)| *w != e.who);
                open.push((&e.who, e.at_us, token.to_string()));
            }
            Observed::WriteAccepted { .. } | Observed::WriteRejected { .. } => {
                let Some(k) = open.iter().position(|(w, _, _)| *w == e.who) else {
                    continue;
                };
                let (who, from, token) = open.remove(k);
                let (colour, said) = match e.what {
                    Observed::WriteAccepted { .. } => ("#4a4", "accepted".to_string()),
                    _ => ("#e80", format!("rejected: {}", e.what)),
                };
                svg.push_str(&format!(
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"22\" fill=\"{colour}\">\
                     <title>{} token {token}: {} ms to {} ms, {}</title></rect>\n\
                     <text x=\"{:.1}\" y=\"{:.1}\">{token}</text>\n",
                    x(from),
                    y(who),
                    (x(e.at_us) - x(from)).max(2.0),
                    escape(who),
                    from / 1000,
                    e.at_us / 1000,
                    escape(&said),
                    x(from) + 2.0,
                    y(who) + 15.0,
                ));
            }
            _ => {}
        }
    }
    svg.push_str(&time_axis(end, left, width, lanes_end));
    svg.push_str(&legend(left, height - 6.0));
    svg.push_str("</svg>\n");
    svg
}

/// Ticks every 1, 2 or 5 × 10^k ms (about eight across), from 0 to `end` µs, under the lanes.
fn time_axis(end: u64, left: f64, width: f64, top: f64) -> String {
    let end_ms = (end / 1000).max(1);
    let step = [1u64, 2, 5]
        .iter()
        .flat_map(|m| (0..9).map(move |k| m * 10u64.pow(k)))
        .filter(|s| end_ms / s <= 8)
        .min()
        .unwrap_or(end_ms);
    let mut out = format!(
        "<line x1=\"{left}\" y1=\"{top:.1}\" x2=\"{:.1}\" y2=\"{top:.1}\" stroke=\"#999\"/>\n",
        left + width
    );
    for ms in (0..=end_ms).step_by(step as usize) {
        let at = left + width * (ms * 1000) as f64 / end as f64;
        out.push_str(&format!(
            "<line x1=\"{at:.1}\" y1=\"{top:.1}\" x2=\"{at:.1}\" y2=\"{:.1}\" stroke=\"#999\"/>\
             <text x=\"{at:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{ms} ms</text>\n",
            top + 5.0,
            top + 17.0
        ));
    }
    out
}

/// What the colours mean.
fn legend(left: f64, baseline: f64) -> String {
    let mut out = String::new();
    for (k, (colour, what)) in [
        ("#4a4", "work under a lease, its write accepted"),
        ("#e80", "its write rejected (stale token)"),
        ("#ccc", "fault (pause, stall, kill, skew)"),
    ]
    .iter()
    .enumerate()
    {
        let at = left + 300.0 * k as f64;
        out.push_str(&format!(
            "<rect x=\"{at:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{colour}\"/>\
             <text x=\"{:.1}\" y=\"{baseline:.1}\">{what}</text>\n",
            baseline - 10.0,
            at + 16.0
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::campaign::{judge, Fault};
    use crate::check::trace::Replay;
    use crate::protocol::{FencePolicy, Token, Trace};
    use std::time::Duration;

    #[test]
    fn the_report_has_a_row_per_trial_and_the_timeline_draws_work_and_pauses() {
        let (t1, t2) = (Token::new(1), Token::new(2));
        let mut trace = Trace::new();
        trace.record(0, "w<1>", Observed::AcquireSent);
        trace.record(1_000, "w<1>", Observed::Granted { token: t1 });
        trace.record(2_000, "w<1>", Observed::WriteSent { token: t1 });
        trace.record(60_000, "w2", Observed::AcquireSent);
        trace.record(61_000, "w2", Observed::Granted { token: t2 });
        trace.record(62_000, "w2", Observed::WriteSent { token: t2 });
        trace.record(63_000, "w2", Observed::WriteAccepted { token: t2 });
        let late = Observed::WriteRejected {
            token: t1,
            highest: t2,
        };
        trace.record(90_000, "w<1>", late);
        let record = TrialRecord {
            trace,
            final_value: 1,
            faults: vec![Fault {
                who: "w<1>".into(),
                what: "paused".into(),
                from_us: 2_500,
                to_us: 89_000,
            }],
            register: vec![],
        };
        let v = judge(
            &record,
            &Replay::new(Duration::from_millis(50), FencePolicy::Fenced),
        );
        let mut totals = Totals::default();
        totals.add(&v);
        let records = [record.clone()];
        let md = campaign_markdown(
            "t",
            &totals,
            &records,
            std::slice::from_ref(&v),
            Some((0, "worst.svg")),
        );
        assert!(
            md.starts_with(
                "# t\n\n**PASS: all 1 trials kept every rule**\n\n```\ntrials                 1\n"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| [1](trials/001/verdict.txt) | w<1> paused 86 ms | 2 | 1 | 1 | 0 | 2 | held | explained (8 events) \
                 | linearizable (0 operations) |"
            ),
            "{md}"
        );
        assert!(md.contains("![timeline of trial 1](worst.svg)"));

        let svg = trial_svg(&record);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains(">w&lt;1&gt;</text>"), "names are escaped");
        assert!(svg.contains("w&lt;1&gt; paused 86 ms"));
        assert_eq!(
            svg.matches("fill=\"#4a4\"").count(),
            2,
            "one accepted write, and the legend's"
        );
        assert_eq!(
            svg.matches("fill=\"#e80\"").count(),
            2,
            "one rejected write, and the legend's"
        );
        assert!(
            svg.contains(">0 ms</text>")
                && svg.contains(">20 ms</text>")
                && svg.contains(">80 ms</text>"),
            "ticks"
        );
        assert!(!svg.contains(">100 ms</text>"), "no tick past the end");
        assert!(
            svg.contains(">its write rejected (stale token)</text>"),
            "a legend"
        );
        assert!(svg.trim_end().ends_with("</svg>"));

        let html = campaign_html("a <t>", &totals, &records, &[v], Some(0));
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<h1>a &lt;t&gt;</h1>"), "titles are escaped");
        assert!(html.contains(
            "<tr class=\"ok\"><td><a href=\"trials/001/verdict.txt\">1</a></td>\
             <td>w&lt;1&gt; paused 86 ms</td>"
        ));
        assert!(html.contains("<p class=\"banner ok\">PASS: all 1 trials kept every rule</p>"));
        assert!(html.contains("<figcaption>Trial 1</figcaption>\n<svg"));
        assert!(html.trim_end().ends_with("</body></html>"));
    }
}
