//! The gate cannot pass vacuously: every property is declared once (name, kind, meaning,
//! expectation, condition), the checker refuses a model whose properties and declarations
//! disagree, and every model's declared expectations are true at every size it accepts.

use fencecheck::check::{catalog, check_model, CheckError, Engine, Options, Params, Verdict};
use fencecheck::models::{
    declared_properties, Declared, Declares, Expect, Narrate, Step, Symmetric,
};
use stateright::{Expectation, Model, Property};

/// A counter that climbs to 2: small enough to read, with one always and one sometimes property.
#[derive(Clone, Debug)]
struct Counter {
    /// The negative control: `properties()` names a property no declaration has.
    misnamed: bool,
    /// The negative control: a declaration whose property the model never checks.
    forgotten: bool,
}

const DECLARED: &[Declared<Counter>] = &[
    Declared {
        name: "below_three",
        kind: Expectation::Always,
        meaning: "the counter stays below 3",
        expect: Expect::Holds,
        condition: |_, n| *n < 3,
    },
    Declared {
        name: "reaches_two",
        kind: Expectation::Sometimes,
        meaning: "the counter reaches 2",
        expect: Expect::Holds,
        condition: |_, n| *n == 2,
    },
];

impl Model for Counter {
    type State = u8;
    type Action = ();

    fn init_states(&self) -> Vec<u8> {
        vec![0]
    }

    fn actions(&self, n: &u8, actions: &mut Vec<()>) {
        if *n < 2 {
            actions.push(());
        }
    }

    fn next_state(&self, n: &u8, _: ()) -> Option<u8> {
        Some(n + 1)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = declared_properties(self);
        if self.misnamed {
            // A typo in an `always` property: before declarations were checked, its spec found
            // no discovery and was reported HOLDS.
            properties[0] = Property::always("below_thre", |_, n: &u8| *n < 3);
        }
        if self.forgotten {
            properties.remove(0);
        }
        properties
    }
}

impl Declares for Counter {
    fn declarations(&self) -> &'static [Declared<Self>] {
        DECLARED
    }
}

impl Narrate for Counter {
    fn narrate(&self, before: &u8, _: &(), after: &u8) -> Step {
        Step {
            from: "counter".into(),
            to: "counter".into(),
            text: format!("{before} -> {after}"),
        }
    }
}

impl Symmetric for Counter {
    const REDUCES: bool = false;
    fn representative(n: &u8) -> u8 {
        *n
    }
}

fn check(model: Counter) -> Result<fencecheck::check::ModelRun, CheckError> {
    check_model(
        "counter",
        &Params::sized(1, 1, 0),
        model,
        &Options::default(),
        &mut |_| {},
    )
}

#[test]
fn a_well_declared_model_is_checked() {
    let run = check(Counter {
        misnamed: false,
        forgotten: false,
    })
    .expect("accepted");
    assert_eq!(run.states, 3);
    assert!(run.properties.iter().all(|p| p.matches()));
    assert_eq!(run.properties[0].verdict, Verdict::Holds);
}

#[test]
fn a_misnamed_property_is_refused() {
    let err = check(Counter {
        misnamed: true,
        forgotten: false,
    })
    .expect_err("a property without a declaration must be refused");
    assert!(
        err.to_string()
            .contains("\"below_thre\" has no declaration"),
        "{err}"
    );
}

#[test]
fn a_declaration_without_a_condition_is_refused() {
    let err = check(Counter {
        misnamed: false,
        forgotten: true,
    })
    .expect_err("a declaration without a property must be refused");
    assert!(
        err.to_string()
            .contains("declared property \"below_three\" has no condition"),
        "{err}"
    );
}

/// The gate over a grid of sizes: clients 1 to 4, writes 1 and 2, retries 0 and 1, for every
/// model. A size the model declares is checked and every verdict must match; a size it does not
/// declare must be refused (never checked against declarations that were not written for it).
///
/// The grid runs on the lean search with two threads (about half the time of Stateright's with
/// one); `tests/catalog.rs` shows both searches give the same verdicts on every model and
/// every mutant at their default sizes and at the fewest clients each is declared for.
#[test]
fn every_declared_expectation_is_true_over_the_size_grid() {
    let options = Options {
        engine: Engine::Lean,
        threads: 2,
        ..Options::default()
    };
    let mut checked = 0;
    let mut refused = 0;
    for entry in catalog() {
        for clients in 1..=4 {
            for writes in 1..=2 {
                for retries in 0..=1 {
                    let p = Params::sized(clients, writes, retries);
                    match (entry.check)(&p, &options, &mut |_| {}) {
                        Ok(run) => {
                            assert!(entry.clients.contains(&clients), "{}", entry.name);
                            assert!(run.complete);
                            for r in &run.properties {
                                assert!(
                                    r.matches(),
                                    "{} at {clients} clients, {writes} writes, {retries} retries: \
                                     {} declared {}, found {}",
                                    entry.name,
                                    r.property,
                                    r.expected,
                                    r.verdict
                                );
                            }
                            checked += 1;
                        }
                        Err(CheckError::Params(e)) => {
                            assert!(!entry.clients.contains(&clients), "{}: {e}", entry.name);
                            refused += 1;
                        }
                        Err(e) => panic!("{}: {e}", entry.name),
                    }
                }
            }
        }
    }
    assert!(
        checked > 100 && refused > 0,
        "{checked} checked, {refused} refused"
    );
}

/// `max_states` is a bound on distinct states: a search that finds exactly that many and runs
/// out of states is complete; one bound lower cuts it short.
#[test]
fn max_states_is_exact_at_the_boundary() {
    let entry = fencecheck::check::find_model("token-reset").expect("in the catalog");
    let p = (entry.defaults)();
    let full = (entry.check)(&p, &Options::default(), &mut |_| {}).expect("accepted");
    assert!(full.complete);
    let bounded = |max: usize| {
        let options = Options {
            max_states: Some(max),
            ..Options::default()
        };
        (entry.check)(&p, &options, &mut |_| {}).expect("accepted")
    };
    let exact = bounded(full.states);
    assert!(exact.complete, "{} states", full.states);
    assert_eq!(exact.states, full.states);
    assert!(exact.properties.iter().all(|r| r.matches()));
    let short = bounded(full.states - 1);
    assert!(!short.complete);
}
