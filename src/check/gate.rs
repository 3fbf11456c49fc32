//! The gate's one pass/fail rule, read by `fencecheck check`, the text table, `models.json` and
//! JUnit alike.
//!
//! A property whose verdict equals its declaration *matches*; one decided the other way is a
//! *mismatch*; one the search was cut short before deciding is *undecided*. The gate fails on any
//! mismatch, and on anything undecided unless the caller allowed an incomplete search.

use super::{ModelRun, PropertyResult, Verdict};

/// What one property's result means for the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The verdict equals the declaration.
    Matches,
    /// The search decided the property the other way.
    Mismatch,
    /// The search was cut short before the property was decided.
    Undecided,
}

/// The gate's reading of one property.
pub fn outcome(p: &PropertyResult) -> Outcome {
    if p.verdict == Verdict::Incomplete {
        Outcome::Undecided
    } else if p.matches() {
        Outcome::Matches
    } else {
        Outcome::Mismatch
    }
}

/// The gate over a set of runs: how many properties match, mismatch, or were left undecided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gate {
    /// Properties checked.
    pub total: usize,
    /// Verdicts equal to their declarations.
    pub matching: usize,
    /// Verdicts decided against their declarations.
    pub mismatched: usize,
    /// Properties the search was cut short before deciding.
    pub undecided: usize,
    /// Whether some run's search was cut short (`--max-states`).
    pub incomplete: bool,
}

impl Gate {
    /// Counts every property of `runs`.
    pub fn of(runs: &[ModelRun]) -> Gate {
        let mut gate = Gate {
            incomplete: runs.iter().any(|r| !r.complete),
            ..Gate::default()
        };
        for p in runs.iter().flat_map(|r| &r.properties) {
            gate.total += 1;
            match outcome(p) {
                Outcome::Matches => gate.matching += 1,
                Outcome::Mismatch => gate.mismatched += 1,
                Outcome::Undecided => gate.undecided += 1,
            }
        }
        gate
    }

    /// Every verdict was decided and equals its declaration.
    pub fn all_match(&self) -> bool {
        self.matching == self.total
    }

    /// Whether the gate passes: no mismatch, and nothing left undecided or cut short unless
    /// `allow_incomplete`.
    pub fn passes(&self, allow_incomplete: bool) -> bool {
        self.mismatched == 0 && (allow_incomplete || (self.undecided == 0 && !self.incomplete))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{find_model, Options};

    fn runs(max_states: Option<usize>) -> Vec<ModelRun> {
        let entry = find_model("fenced").expect("in the catalog");
        let options = Options {
            max_states,
            ..Options::default()
        };
        vec![(entry.check)(&(entry.defaults)(), &options, &mut |_| {}).expect("checks")]
    }

    #[test]
    fn a_complete_matching_check_passes() {
        let gate = Gate::of(&runs(None));
        assert!(gate.total > 0 && gate.all_match());
        assert!(gate.passes(false));
    }

    #[test]
    fn a_mismatch_fails_whatever_is_allowed() {
        let mut runs = runs(None);
        let p = runs[0]
            .properties
            .iter_mut()
            .find(|p| p.verdict == Verdict::Holds)
            .expect("a property that holds");
        p.verdict = Verdict::Violated;
        let gate = Gate::of(&runs);
        assert_eq!(gate.mismatched, 1);
        assert!(!gate.all_match());
        assert!(!gate.passes(false) && !gate.passes(true));
    }

    #[test]
    fn a_search_cut_short_fails_unless_allowed() {
        let gate = Gate::of(&runs(Some(10)));
        assert!(gate.incomplete && gate.undecided > 0, "{gate:?}");
        assert_eq!(gate.mismatched, 0);
        assert!(!gate.all_match());
        assert!(!gate.passes(false));
        assert!(gate.passes(true));
    }
}
