use super::livelock;
use crate::models::{Fair, Narrate, Step};
use stateright::{Model, Property};

/// States 0 and 1 spin into each other; `Leave` goes to 2, where the property is met. It is
/// possible from 0, and from 1 too when `leave_from_both`; `leave_is_fault` makes it a step
/// fairness does not promise.
struct Toy {
    leave_from_both: bool,
    leave_is_fault: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Act {
    Spin,
    Leave,
}

impl Model for Toy {
    type State = u8;
    type Action = Act;

    fn init_states(&self) -> Vec<u8> {
        vec![0]
    }

    fn actions(&self, s: &u8, actions: &mut Vec<Act>) {
        if *s < 2 {
            actions.push(Act::Spin);
        }
        if *s == 0 || (*s == 1 && self.leave_from_both) {
            actions.push(Act::Leave);
        }
    }

    fn next_state(&self, s: &u8, a: Act) -> Option<u8> {
        Some(match a {
            Act::Spin => 1 - s,
            Act::Leave => 2,
        })
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::eventually("leaves", |_, s| *s == 2)]
    }
}

impl Fair for Toy {
    type Key = Act;

    fn fair_key(&self, action: &Act) -> Option<Act> {
        (!(self.leave_is_fault && *action == Act::Leave)).then(|| action.clone())
    }
}

impl Narrate for Toy {
    fn narrate(&self, before: &u8, action: &Act, after: &u8) -> Step {
        Step {
            from: "toy".into(),
            to: "toy".into(),
            text: format!("{before} --{action:?}--> {after}"),
        }
    }
}

fn found(leave_from_both: bool, leave_is_fault: bool) -> Option<Vec<String>> {
    let toy = Toy {
        leave_from_both,
        leave_is_fault,
    };
    let cx = livelock(&toy, "leaves", 100).expect("small")?;
    assert_eq!(cx.loop_from, Some(0));
    Some(cx.steps.into_iter().map(|s| s.text).collect())
}

#[test]
fn a_loop_a_fair_scheduler_may_stay_in_is_a_livelock() {
    // Leaving is possible only from 0: weak fairness does not force it, so the spin is fair.
    let spin = found(false, false).expect("a livelock");
    assert_eq!(spin, ["0 --Spin--> 1", "1 --Spin--> 0"]);
}

#[test]
fn a_loop_that_always_could_be_left_is_not() {
    // Negative control: leaving is possible in every state of the loop and never taken in it.
    assert_eq!(found(true, false), None);
    // ... unless leaving is a fault the world may never take.
    assert!(found(true, true).is_some());
}

#[test]
fn too_many_states_is_an_error() {
    let toy = Toy {
        leave_from_both: false,
        leave_is_fault: false,
    };
    assert!(livelock(&toy, "leaves", 1).is_err());
}
