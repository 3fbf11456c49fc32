//! A fault campaign's report: Markdown with every trial's verdict, and an SVG timeline of one
//! trial (one lane per worker: its work under each lease, each write's answer, the pauses).

use super::escape;
use crate::check::campaign::{Totals, TrialRecord, TrialVerdict};
use crate::protocol::Observed;

/// The campaign's Markdown report: `title`, the totals, a row per trial, and the timeline of
/// trial `shown` (saved beside it as `svg_name`).
pub fn campaign_markdown(
    title: &str,
    totals: &Totals,
    verdicts: &[TrialVerdict],
    shown: Option<(usize, &str)>,
) -> String {
    let mut md = format!("# {title}\n\n```\n{totals}\n```\n\n");
    md.push_str(
        "| trial | grants | accepted | rejected | lost | overlap (ms) | lease order | trace |\n\
         |---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    for (i, v) in verdicts.iter().enumerate() {
        let order = match &v.lease_order {
            Ok(()) => "held".to_string(),
            Err(e) => format!("**violated**: {e}"),
        };
        let trace = match &v.validation {
            Ok(ok) => format!("explained ({} events)", ok.events),
            Err(e) => format!(
                "**unexplained**: {}",
                e.to_string().lines().next().unwrap_or_default()
            ),
        };
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            i + 1,
            v.acquisitions,
            v.accepted,
            v.rejected,
            v.lost,
            v.overlap_us / 1000,
            order.replace('|', "\\|"),
            trace.replace('|', "\\|"),
        ));
    }
    if let Some((i, svg)) = shown {
        md.push_str(&format!(
            "\n## Trial {}\n\n![timeline of trial {}]({svg})\n",
            i + 1,
            i + 1
        ));
        if let Err(e) = &verdicts[i].validation {
            md.push_str(&format!("\n```\n{e}\n```\n"));
        }
    }
    md
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
        .chain(record.pauses.iter().map(|p| p.2))
        .max()
        .unwrap_or(0)
        .max(1);
    let (left, width, lane) = (90.0, 900.0, 34.0);
    let x = |us: u64| left + width * us as f64 / end as f64;
    let height = 40.0 + lane * workers.len() as f64;
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
    for (who, from, to) in &record.pauses {
        svg.push_str(&format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{lane}\" fill=\"#ccc\">\
             <title>{} paused {} ms</title></rect>\n",
            x(*from),
            y(who) - 4.0,
            (x(*to) - x(*from)).max(1.0),
            escape(who),
            (to - from) / 1000
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
    svg.push_str(&format!(
        "<text x=\"{left}\" y=\"{:.1}\">0 ms</text><text x=\"{:.1}\" y=\"{:.1}\" \
         text-anchor=\"end\">{} ms</text>\n</svg>\n",
        height - 4.0,
        left + width,
        height - 4.0,
        end / 1000
    ));
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::campaign::judge;
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
            pauses: vec![("w<1>".into(), 2_500, 89_000)],
        };
        let v = judge(
            &record,
            &Replay::new(Duration::from_millis(50), FencePolicy::Fenced),
        );
        let mut totals = Totals::default();
        totals.add(&v);
        let md = campaign_markdown("t", &totals, &[v], Some((0, "worst.svg")));
        assert!(
            md.starts_with("# t\n\n```\ntrials                 1\n"),
            "{md}"
        );
        assert!(
            md.contains("| 1 | 2 | 1 | 1 | 0 | 2 | held | explained (8 events) |"),
            "{md}"
        );
        assert!(md.contains("![timeline of trial 1](worst.svg)"));

        let svg = trial_svg(&record);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains(">w&lt;1&gt;</text>"), "names are escaped");
        assert!(svg.contains("w&lt;1&gt; paused 86 ms"));
        assert_eq!(
            svg.matches("fill=\"#4a4\"").count(),
            1,
            "one accepted write"
        );
        assert_eq!(
            svg.matches("fill=\"#e80\"").count(),
            1,
            "one rejected write"
        );
        assert!(svg.trim_end().ends_with("90 ms</text>\n</svg>"));
    }
}
