//! Sequence diagrams of counterexamples: Mermaid text and a self-contained SVG.

use super::escape;
use crate::models::Step;

/// The lifelines a path touches, in display order: clients, then the lock service, then the
/// storage.
fn lifelines(steps: &[Step]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for s in steps {
        for n in [&s.from, &s.to] {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let rank = |n: &str| match n {
        "lock-service" => (0, String::new()),
        "storage" => (2, String::new()),
        other => (1, other.to_string()),
    };
    names.sort_by_key(|n| rank(n));
    names
}

/// A Mermaid `sequenceDiagram` of `steps`; the last step, which violates `property`, is boxed in
/// red.
pub fn mermaid(steps: &[Step], property: &str) -> String {
    let names = lifelines(steps);
    let alias = |n: &str| format!("p{}", names.iter().position(|x| x == n).unwrap_or(0));
    let mut out = String::from("sequenceDiagram\n");
    for n in &names {
        out.push_str(&format!("    participant {} as {n}\n", alias(n)));
    }
    for (i, s) in steps.iter().enumerate() {
        let last = i + 1 == steps.len();
        if last {
            out.push_str("    rect rgb(255, 215, 215)\n");
        }
        // Mermaid treats ';' and '#' specially in messages; the steps use neither, but be safe.
        let text = format!("{}. {}", i + 1, s.text).replace([';', '#'], ",");
        if s.from == s.to {
            out.push_str(&format!("    Note over {}: {text}\n", alias(&s.from)));
        } else {
            out.push_str(&format!(
                "    {}->>{}: {text}\n",
                alias(&s.from),
                alias(&s.to)
            ));
        }
        if last {
            out.push_str(&format!(
                "    Note over {}: violates {property}\n    end\n",
                alias(&s.to)
            ));
        }
    }
    out
}

const ROW: usize = 34;
const TEXT_WIDTH: usize = 610;
const LANE: usize = 120;
const TOP: usize = 46;

/// An SVG sequence diagram of `steps`: the numbered steps on the left, lifelines on the right
/// with one arrow (or event mark) per step; the violating last step in red.
pub fn sequence_svg(steps: &[Step], property: &str) -> String {
    let names = lifelines(steps);
    let x_of =
        |n: &str| TEXT_WIDTH + LANE / 2 + LANE * names.iter().position(|x| x == n).unwrap_or(0);
    let width = TEXT_WIDTH + LANE * names.len().max(1) + 10;
    let height = TOP + ROW * (steps.len() + 1);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"counterexample to {}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n",
        escape(property)
    );
    svg.push_str(
        "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" \
         markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" \
         fill=\"context-stroke\"/></marker></defs>\n",
    );
    for n in &names {
        let x = x_of(n);
        svg.push_str(&format!(
            "<text x=\"{x}\" y=\"18\" text-anchor=\"middle\" font-weight=\"bold\">{}</text>\n\
             <line x1=\"{x}\" y1=\"26\" x2=\"{x}\" y2=\"{}\" stroke=\"#999\" stroke-dasharray=\"4 3\"/>\n",
            escape(n),
            height - 6
        ));
    }
    for (i, s) in steps.iter().enumerate() {
        let y = TOP + ROW * i + ROW / 2;
        let violating = i + 1 == steps.len();
        let color = if violating { "#c0392b" } else { "#2c3e50" };
        if violating {
            svg.push_str(&format!(
                "<rect class=\"violation\" x=\"2\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fde2e2\" stroke=\"#c0392b\"/>\n",
                y - ROW / 2 + 2,
                width - 4,
                ROW - 4
            ));
        }
        let label = if violating {
            format!("{}. {}  (violates {property})", i + 1, s.text)
        } else {
            format!("{}. {}", i + 1, s.text)
        };
        svg.push_str(&format!(
            "<text x=\"8\" y=\"{}\" fill=\"{color}\">{}</text>\n",
            y + 4,
            escape(&label)
        ));
        let (x1, x2) = (x_of(&s.from), x_of(&s.to));
        if x1 == x2 {
            svg.push_str(&format!(
                "<circle cx=\"{x1}\" cy=\"{y}\" r=\"6\" fill=\"{color}\"/>\n"
            ));
        } else {
            let end = if x2 > x1 { x2 - 4 } else { x2 + 4 };
            svg.push_str(&format!(
                "<line x1=\"{x1}\" y1=\"{y}\" x2=\"{end}\" y2=\"{y}\" stroke=\"{color}\" stroke-width=\"2\" marker-end=\"url(#arrow)\"/>\n"
            ));
        }
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\" fill=\"{color}\">{}</text>\n",
            (x1 + x2) / 2,
            y - 6,
            i + 1
        ));
    }
    svg.push_str("</svg>\n");
    svg
}
