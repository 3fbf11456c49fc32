//! JUnit XML: one test case per model and property, so any CI that reads JUnit shows the gate.

use super::escape;
use crate::check::{outcome, Gate, ModelRun, Outcome};

/// A `<testsuites>` document: a `<testsuite>` per model, a `<testcase>` per property; a verdict
/// that differs from its declaration is a `<failure>` whose text is the counterexample timeline,
/// an undecided one is `<skipped>`; each model left out is a suite with one skipped case.
pub fn junit(runs: &[ModelRun], left_out: &[super::Skipped]) -> String {
    let gate = Gate::of(runs);
    let (total, failures) = (gate.total, gate.mismatched);
    let seconds: f64 = runs.iter().map(|r| r.seconds).sum();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    xml.push_str(&format!(
        "<testsuites name=\"fencecheck\" tests=\"{total}\" failures=\"{failures}\" errors=\"0\" time=\"{seconds:.3}\">\n"
    ));
    for r in runs {
        let run = Gate::of(std::slice::from_ref(r));
        let (failed, skipped) = (run.mismatched, run.undecided);
        xml.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failed}\" errors=\"0\" skipped=\"{skipped}\" time=\"{:.3}\">\n",
            escape(r.model),
            r.properties.len(),
            r.seconds
        ));
        for p in &r.properties {
            xml.push_str(&format!(
                "    <testcase classname=\"fencecheck.{}\" name=\"{}\" time=\"{:.3}\">",
                escape(r.model),
                escape(p.property),
                r.seconds
            ));
            let result = outcome(p);
            if result == Outcome::Undecided {
                xml.push_str(
                    "<skipped message=\"search cut short before the property was decided\"/>",
                );
            } else if result == Outcome::Mismatch {
                let mut text = format!(
                    "{} / {}: declared {}, found {}\n",
                    r.model, p.property, p.expected, p.verdict
                );
                if let Some(cx) = &p.counterexample {
                    for (i, s) in cx.steps.iter().enumerate() {
                        text.push_str(&format!("{}. {}\n", i + 1, s.text));
                    }
                }
                xml.push_str(&format!(
                    "\n      <failure message=\"declared {}, found {}\" type=\"verdict-mismatch\">{}</failure>\n    ",
                    p.expected,
                    p.verdict,
                    escape(&text)
                ));
            }
            xml.push_str("</testcase>\n");
        }
        xml.push_str("  </testsuite>\n");
    }
    for s in left_out {
        xml.push_str(&format!(
            "  <testsuite name=\"{0}\" tests=\"1\" failures=\"0\" errors=\"0\" skipped=\"1\" time=\"0\">\n    <testcase classname=\"fencecheck.{0}\" name=\"not checked\" time=\"0\"><skipped message=\"{1}\"/></testcase>\n  </testsuite>\n",
            escape(s.model),
            escape(&s.reason)
        ));
    }
    xml.push_str("</testsuites>\n");
    xml
}
