//! The performance goals, each held against the benchmark that measures it: the ratio (with its
//! interval, where the result was measured in rounds alternating with its floor) or the time,
//! the goal's bound, and whether it is met. `bench.md` and the report page lead with them.

use super::bench::{fmt_time, BenchResult};
use super::escape;

/// What a goal bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Measure {
    /// The benchmark's ratio to its group's baseline (the paired block median and its 95 %
    /// interval when it alternated with its floor).
    Ratio,
    /// The benchmark's median over another benchmark's of the same group.
    Over(&'static str),
    /// The benchmark's median time, in nanoseconds.
    Time,
}

/// A goal: a subject, what it asks, the benchmark measuring it, and the bound (`None`: measured
/// and shown, no bound set).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Goal {
    /// `lock`, `checker`, `history checker`, `backends`.
    pub subject: &'static str,
    /// The goal in words.
    pub what: &'static str,
    /// The criterion group.
    pub group: &'static str,
    /// The benchmark within it.
    pub function: &'static str,
    /// What is bounded.
    pub measure: Measure,
    /// The largest value that meets the goal.
    pub at_most: Option<f64>,
}

const fn goal(
    subject: &'static str,
    what: &'static str,
    group: &'static str,
    function: &'static str,
    measure: Measure,
    at_most: Option<f64>,
) -> Goal {
    Goal {
        subject,
        what,
        group,
        function,
        measure,
        at_most,
    }
}

const LOCK: &str = "lease_lock_coarse_try_acquire_release";
const MS: f64 = 1e6;

/// Every goal the benchmarks measure, grouped by subject in the order the report shows them.
pub const GOALS: &[Goal] = &[
    goal(
        "checker",
        "check's default search (lean, one thread per core) against Stateright's checker on one \
         thread, fenced at its default size with symmetry: at most as long",
        "check/fenced",
        "lean_symmetry_threads2",
        Measure::Over("symmetry_threads1"),
        Some(1.0),
    ),
    goal(
        "lock",
        "the contended lease lock, 2 threads: at most 1.5 x parking_lot's lock + unlock",
        "acquire/contended/2/paired",
        LOCK,
        Measure::Ratio,
        Some(1.5),
    ),
    goal(
        "lock",
        "the contended lease lock, 4 threads: at most 1.5 x parking_lot's lock + unlock",
        "acquire/contended/4/paired",
        LOCK,
        Measure::Ratio,
        Some(1.5),
    ),
    goal(
        "lock",
        "the uncontended lease lock: at most parking_lot's lock + unlock plus a read of the clock",
        "acquire/uncontended",
        "lease_lock_coarse_acquire_release",
        Measure::Over("parking_lot_lock_unlock_plus_coarse_clock"),
        Some(1.0),
    ),
    goal(
        "lock",
        "a refused try (the lease held): at most half of parking_lot's lock + unlock",
        "acquire/uncontended",
        "lease_lock_coarse_try_busy",
        Measure::Over("parking_lot_lock_unlock"),
        Some(0.5),
    ),
    goal(
        "history checker",
        "one key, 10,000 operations, one write in a hundred unanswered: checked within 50 ms",
        "linearize/one_key_10k_lossy",
        "check",
        Measure::Time,
        Some(50.0 * MS),
    ),
    goal(
        "history checker",
        "one key, 100,000 operations, one write in a hundred unanswered: checked within 1 s",
        "linearize/one_key_100k_lossy",
        "check",
        Measure::Time,
        Some(1000.0 * MS),
    ),
    goal(
        "history checker",
        "an illegal 10,000-operation history rejected, its smallest failing set named: within \
         200 ms",
        "linearize/reject_10k",
        "check",
        Measure::Time,
        Some(200.0 * MS),
    ),
    goal(
        "backends",
        "Redis acquire + release against redis-benchmark's floor",
        "redis/acquire_release/paired",
        "fenced_acquire_release",
        Measure::Ratio,
        None,
    ),
    goal(
        "backends",
        "etcd (3 members) acquire + release against its floor",
        "etcd/3_members/acquire_release/paired",
        "fenced_acquire_release",
        Measure::Ratio,
        None,
    ),
    goal(
        "backends",
        "ZooKeeper (3 servers) acquire + release against its floor",
        "zookeeper/3_servers/acquire_release/paired",
        "fenced_acquire_release",
        Measure::Ratio,
        None,
    ),
    goal(
        "backends",
        "Raft (3 nodes) acquire + release against its floor",
        "raft/3_nodes/acquire_release/paired",
        "fenced_acquire_release",
        Measure::Ratio,
        None,
    ),
    goal(
        "backends",
        "a fenced PostgreSQL write against its floor",
        "postgres/write/paired",
        "fenced_write",
        Measure::Ratio,
        None,
    ),
];

/// A goal as measured: the value, its interval when known, and whether the bound is met.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The goal.
    pub goal: Goal,
    /// The measured ratio or time (ns); `None` when the benchmarks did not measure it.
    pub value: Option<f64>,
    /// A 95 % interval for the value, when the result came in alternating rounds.
    pub interval: Option<(f64, f64)>,
}

impl Measured {
    /// Whether the goal is met: the value, and the interval's upper end where there is one, at
    /// most the bound. `None` without a bound or a value.
    pub fn met(&self) -> Option<bool> {
        let bound = self.goal.at_most?;
        let value = self.value?;
        let high = self.interval.map_or(value, |(_, high)| high);
        Some(value <= bound && high <= bound)
    }

    fn show(&self, x: f64) -> String {
        match self.goal.measure {
            Measure::Time => fmt_time(x),
            _ => format!("{x:.2} x"),
        }
    }

    /// The value in words: `1.62 x (95 % interval 1.55-1.70 x)`, `6.6 ms`, `not measured`.
    pub fn value_text(&self) -> String {
        let Some(v) = self.value else {
            return "not measured".into();
        };
        match (self.interval, self.goal.measure) {
            (Some((low, high)), Measure::Time) => format!(
                "{} (95 % interval {}-{})",
                self.show(v),
                self.show(low),
                self.show(high)
            ),
            (Some((low, high)), _) => {
                format!("{} (95 % interval {low:.2}-{high:.2} x)", self.show(v))
            }
            (None, _) => self.show(v),
        }
    }

    /// The bound and the verdict in words: `goal at most 1.50 x: met`.
    pub fn verdict_text(&self) -> String {
        match (self.goal.at_most, self.met()) {
            (Some(b), Some(true)) => format!("goal at most {}: met", self.show(b)),
            (Some(b), Some(false)) => format!("goal at most {}: NOT met", self.show(b)),
            (Some(b), None) => format!("goal at most {}: not measured", self.show(b)),
            (None, _) => "no goal set".into(),
        }
    }
}

/// Each goal held against `results`.
pub fn measure(results: &[BenchResult]) -> Vec<Measured> {
    GOALS.iter().map(|g| measure_one(g, results)).collect()
}

fn measure_one(goal: &Goal, results: &[BenchResult]) -> Measured {
    let find = |function: &str| {
        results
            .iter()
            .find(|r| r.group == goal.group && r.function == function && r.left_out.is_none())
    };
    let (mut value, mut interval) = (None, None);
    if let Some(r) = find(goal.function) {
        match goal.measure {
            Measure::Time => value = Some(r.median_ns),
            Measure::Ratio => match &r.paired {
                Some(p) => (value, interval) = (Some(p.ratio), Some((p.low, p.high))),
                None => value = r.ratio,
            },
            Measure::Over(other) => {
                value = find(other)
                    .filter(|o| o.median_ns > 0.0)
                    .map(|o| r.median_ns / o.median_ns);
            }
        }
    }
    Measured {
        goal: *goal,
        value,
        interval,
    }
}

/// The subjects in the order of [`GOALS`].
fn subjects() -> Vec<&'static str> {
    let mut subjects: Vec<&str> = GOALS.iter().map(|g| g.subject).collect();
    subjects.dedup();
    subjects
}

/// `bench.md`'s opening: a table per subject, each goal with its value and verdict.
pub fn goals_markdown(measured: &[Measured]) -> String {
    let met = measured.iter().filter(|m| m.met() == Some(true)).count();
    let bounded = measured.iter().filter(|m| m.goal.at_most.is_some()).count();
    let mut md = format!("\n## Goals\n\n{met} of {bounded} goals met in this run.\n");
    for subject in subjects() {
        md.push_str(&format!(
            "\n### {subject}\n\n| goal | benchmark | measured | verdict |\n|---|---|---|---|\n"
        ));
        for m in measured.iter().filter(|m| m.goal.subject == subject) {
            md.push_str(&format!(
                "| {} | {} / {} | {} | {} |\n",
                m.goal.what,
                m.goal.group,
                m.goal.function,
                m.value_text(),
                m.verdict_text()
            ));
        }
    }
    md
}

/// One chart for one goal: the value as a bar, its interval as a whisker, the bound as a dashed
/// line; axis from zero with ticks.
pub fn goal_svg(m: &Measured) -> String {
    let (width, left, right, height) = (720.0, 20.0, 650.0, 64.0);
    let bound = m.goal.at_most;
    let high = m.interval.map(|(_, h)| h);
    let top = [m.value, high, bound]
        .into_iter()
        .flatten()
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE)
        * 1.15;
    let x = |v: f64| left + (right - left) * v / top;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         role=\"img\" aria-label=\"goal: {}\" font-family=\"sans-serif\" font-size=\"12\">\n",
        escape(m.goal.what)
    );
    // The axis and five ticks.
    svg.push_str(&format!(
        "<line x1=\"{left}\" y1=\"34\" x2=\"{right}\" y2=\"34\" stroke=\"#888\"/>\n"
    ));
    for i in 0..=5 {
        let v = top * f64::from(i) / 5.0;
        svg.push_str(&format!(
            "<line x1=\"{0:.1}\" y1=\"34\" x2=\"{0:.1}\" y2=\"38\" stroke=\"#888\"/>\
             <text x=\"{0:.1}\" y=\"50\" text-anchor=\"middle\" fill=\"#666\">{1}</text>\n",
            x(v),
            escape(&m.show(v))
        ));
    }
    let color = match m.met() {
        Some(true) => "#27ae60",
        Some(false) => "#c0392b",
        None => "#2980b9",
    };
    if let Some(v) = m.value {
        svg.push_str(&format!(
            "<rect x=\"{left}\" y=\"8\" width=\"{:.1}\" height=\"22\" fill=\"{color}\"/>\n",
            x(v) - left
        ));
    }
    if let Some((low, high)) = m.interval {
        svg.push_str(&format!(
            "<line x1=\"{:.1}\" y1=\"19\" x2=\"{:.1}\" y2=\"19\" stroke=\"#222\" stroke-width=\"2\"/>\
             <line x1=\"{0:.1}\" y1=\"13\" x2=\"{0:.1}\" y2=\"25\" stroke=\"#222\"/>\
             <line x1=\"{1:.1}\" y1=\"13\" x2=\"{1:.1}\" y2=\"25\" stroke=\"#222\"/>\n",
            x(low),
            x(high)
        ));
    }
    if let Some(b) = bound {
        svg.push_str(&format!(
            "<line x1=\"{0:.1}\" y1=\"2\" x2=\"{0:.1}\" y2=\"36\" stroke=\"#111\" \
             stroke-width=\"2\" stroke-dasharray=\"4 2\"/>\
             <text x=\"{0:.1}\" y=\"62\" text-anchor=\"middle\" fill=\"#111\">goal</text>\n",
            x(b)
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

/// The report page's goal section: per subject, each goal's words, value, verdict and chart.
pub fn goals_html(measured: &[Measured]) -> String {
    let met = measured.iter().filter(|m| m.met() == Some(true)).count();
    let bounded = measured.iter().filter(|m| m.goal.at_most.is_some()).count();
    let mut h = format!(
        "<h3>Goals</h3>\n<p>{met} of {bounded} goals met in this run. A bar is the measured \
         ratio or time (green: goal met, red: not met, blue: no goal set), the black whisker \
         its 95 % interval where it was measured in rounds alternating with its floor, the \
         dashed line the goal.</p>\n"
    );
    for subject in subjects() {
        h.push_str(&format!("<h4>{}</h4>\n", escape(subject)));
        for m in measured.iter().filter(|m| m.goal.subject == subject) {
            let class = match m.met() {
                Some(true) => "ok",
                Some(false) => "bad",
                None => "meta",
            };
            h.push_str(&format!(
                "<figure><figcaption>{}</figcaption><p><code>{} / {}</code>: {} &mdash; \
                 <span class=\"{class}\">{}</span></p>\n",
                escape(m.goal.what),
                escape(m.goal.group),
                escape(m.goal.function),
                escape(&m.value_text()),
                escape(&m.verdict_text())
            ));
            if m.value.is_some() {
                h.push_str(&goal_svg(m));
            }
            h.push_str("</figure>\n");
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Paired;

    fn result(group: &str, function: &str, median_ns: f64) -> BenchResult {
        BenchResult {
            group: group.into(),
            function: function.into(),
            median_ns,
            elements: None,
            baseline: None,
            ratio: None,
            written: None,
            left_out: None,
            paired: None,
        }
    }

    fn paired(group: &str, ratio: f64, low: f64, high: f64) -> BenchResult {
        BenchResult {
            paired: Some(Paired {
                over: "parking_lot_lock_unlock".into(),
                blocks: 12,
                ratio,
                low,
                high,
            }),
            ..result(group, LOCK, 30.0)
        }
    }

    fn find<'a>(measured: &'a [Measured], group: &str, function: &str) -> &'a Measured {
        measured
            .iter()
            .find(|m| m.goal.group == group && m.goal.function == function)
            .unwrap()
    }

    #[test]
    fn a_goal_is_met_only_when_its_value_and_interval_are_within_the_bound() {
        let results = [
            paired("acquire/contended/2/paired", 1.4, 1.3, 1.45),
            // The median within the bound, the interval reaching past it: not met.
            paired("acquire/contended/4/paired", 1.45, 1.4, 1.6),
            result("linearize/reject_10k", "check", 6.6e6),
            result("linearize/one_key_10k_lossy", "check", 80e6),
            result("acquire/uncontended", "lease_lock_coarse_try_busy", 10.5),
            result("acquire/uncontended", "parking_lot_lock_unlock", 5.2),
        ];
        let measured = measure(&results);
        let two = find(&measured, "acquire/contended/2/paired", LOCK);
        assert_eq!((two.value, two.met()), (Some(1.4), Some(true)));
        assert_eq!(two.value_text(), "1.40 x (95 % interval 1.30-1.45 x)");
        let four = find(&measured, "acquire/contended/4/paired", LOCK);
        assert_eq!(four.met(), Some(false));
        assert_eq!(four.verdict_text(), "goal at most 1.50 x: NOT met");
        let reject = find(&measured, "linearize/reject_10k", "check");
        assert_eq!(
            (reject.met(), reject.value_text()),
            (Some(true), "6.60 ms".into())
        );
        let lossy = find(&measured, "linearize/one_key_10k_lossy", "check");
        assert_eq!(lossy.met(), Some(false));
        let busy = find(
            &measured,
            "acquire/uncontended",
            "lease_lock_coarse_try_busy",
        );
        assert!((busy.value.unwrap() - 10.5 / 5.2).abs() < 1e-9);
        assert_eq!(busy.met(), Some(false));
        // Not measured: no value, no verdict; a backend has no bound.
        let lossy100k = find(&measured, "linearize/one_key_100k_lossy", "check");
        assert_eq!((lossy100k.value, lossy100k.met()), (None, None));
        assert_eq!(lossy100k.value_text(), "not measured");
        let redis = find(
            &measured,
            "redis/acquire_release/paired",
            "fenced_acquire_release",
        );
        assert_eq!(redis.verdict_text(), "no goal set");
    }

    #[test]
    fn a_result_of_another_run_does_not_measure_a_goal() {
        let mut stale = result("linearize/reject_10k", "check", 6.6e6);
        stale.left_out = Some("written 3 h apart from its baseline".into());
        let measured = measure(&[stale]);
        assert_eq!(find(&measured, "linearize/reject_10k", "check").value, None);
    }

    #[test]
    fn the_tables_and_charts_say_met_or_not_per_subject() {
        let results = [
            paired("acquire/contended/2/paired", 1.4, 1.3, 1.45),
            paired("acquire/contended/4/paired", 1.7, 1.6, 1.8),
        ];
        let measured = measure(&results);
        let md = goals_markdown(&measured);
        assert!(md.contains("1 of 8 goals met in this run."), "{md}");
        for subject in [
            "### checker",
            "### lock",
            "### history checker",
            "### backends",
        ] {
            assert!(md.contains(subject), "{md}");
        }
        assert!(
            md.contains("| 1.70 x (95 % interval 1.60-1.80 x) | goal at most 1.50 x: NOT met |")
        );
        let html = goals_html(&measured);
        // A chart for each measured goal only, its bound drawn.
        assert_eq!(html.matches("<svg ").count(), 2, "{html}");
        assert_eq!(html.matches(">goal</text>").count(), 2);
        assert!(
            html.contains("fill=\"#c0392b\"/>"),
            "the unmet goal's bar is red"
        );
        assert!(
            html.contains("fill=\"#27ae60\"/>"),
            "the met goal's bar is green"
        );
    }
}
