//! The lean search against Stateright's checker, on the catalog and on toy models.

use super::*;
use crate::check::{find_model, Engine, Options, Params};
use crate::models::fenced::FencedModelCfg;
use crate::models::lease_service::{LeaseAction, LeaseModel, LeaseState};
use crate::models::Symmetric;
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;

/// Stateright's depth-first checker on `model`: (distinct, generated, depth, discoveries).
fn stateright(model: &LeaseModel, symmetry: bool) -> (usize, usize, usize, Vec<&'static str>) {
    let mut builder = model
        .clone()
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::new()));
    if symmetry {
        builder = builder.symmetry_fn(LeaseModel::representative);
    }
    let checker = builder.spawn_dfs().join();
    let mut found: Vec<_> = checker.discoveries().into_keys().collect();
    found.sort_unstable();
    (
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        found,
    )
}

fn lean(model: &LeaseModel, symmetry: bool, threads: usize) -> Explored<LeaseState, LeaseAction> {
    let search = Search {
        threads,
        symmetry: symmetry.then_some(LeaseModel::representative as fn(&_) -> _),
        max_unique: None,
        paths: true,
    };
    let mut found = explore(model, &search, &mut |_| {});
    found.discovered.sort_unstable();
    found
}

#[test]
fn the_same_states_and_discoveries_as_stateright() {
    for (clients, writes) in [(2, 1), (2, 2), (3, 1)] {
        let model = FencedModelCfg {
            clients,
            writes_per_client: writes,
            ..FencedModelCfg::default()
        }
        .into_model();
        for symmetry in [false, true] {
            let want = stateright(&model, symmetry);
            for threads in [1, 2] {
                let got = lean(&model, symmetry, threads);
                let what = format!("{clients}x{writes} symmetry {symmetry} threads {threads}");
                assert_eq!(got.unique, want.0, "{what}: distinct");
                assert_eq!(got.discovered, want.3, "{what}: discoveries");
                if threads == 1 {
                    assert_eq!((got.generated, got.max_depth), (want.1, want.2), "{what}");
                }
            }
        }
    }
}

/// Verdicts through `check`: an `eventually` property broken only at terminal states
/// (token-reset's progress), `always` and `sometimes` properties either way.
#[test]
fn the_same_verdicts_through_check() {
    for name in ["token-reset", "fenced", "idempotent-job", "leader-election"] {
        let entry = find_model(name).expect("in the catalog");
        let params: Params = (entry.defaults)();
        let check = |engine, threads| {
            let options = Options {
                engine,
                threads,
                ..Options::default()
            };
            (entry.check)(&params, &options, &mut |_| {}).expect("accepted")
        };
        let want = check(Engine::Stateright, 1);
        for threads in [1, 2] {
            let got = check(Engine::Lean, threads);
            assert_eq!(got.states, want.states, "{name}");
            let verdicts = |r: &crate::check::ModelRun| {
                r.properties.iter().map(|p| p.verdict).collect::<Vec<_>>()
            };
            assert_eq!(verdicts(&got), verdicts(&want), "{name}");
        }
    }
}

#[test]
fn a_bound_on_distinct_states_is_exact() {
    let model = FencedModelCfg::default().into_model();
    let full = |max_unique, threads| {
        let search = Search {
            threads,
            symmetry: None,
            max_unique,
            paths: false,
        };
        explore(&model, &search, &mut |_| {})
    };
    let all = full(None, 1);
    assert!(!all.cut);
    for threads in [1, 2] {
        let exact = full(Some(all.unique), threads);
        assert!(!exact.cut, "{threads} threads: {exact:?}");
        assert_eq!(exact.unique, all.unique);
        let short = full(Some(all.unique - 1), threads);
        assert!(short.cut, "{threads} threads: {short:?}");
        let early = full(Some(100), threads);
        assert!(early.cut && early.unique <= 100 + threads, "{early:?}");
    }
}

#[test]
fn progress_is_reported_while_searching_and_at_the_end() {
    let model = FencedModelCfg {
        clients: 3,
        ..FencedModelCfg::default()
    }
    .into_model();
    let search = Search {
        threads: 1,
        symmetry: None,
        max_unique: None,
        paths: true,
    };
    let mut reports = Vec::new();
    let found = explore(&model, &search, &mut |c| reports.push(c));
    assert!(reports.len() >= 2, "{} reports", reports.len());
    let last = reports.last().expect("a final report");
    assert_eq!(
        (last.unique, last.generated, last.max_depth),
        (found.unique, found.generated, found.max_depth)
    );
    assert!(reports.windows(2).all(|w| w[0].generated <= w[1].generated));
}

#[test]
fn a_thread_gives_half_its_pending_states_to_an_idle_companion_with_an_empty_pool() {
    assert_eq!(to_give(2, 1, false, 10), 5);
    assert_eq!(to_give(4, 3, false, 3), 1);
    assert_eq!(to_give(2, 1, false, 1), 0);
    assert_eq!(to_give(2, 1, true, 10), 0, "the pool already has work");
    assert_eq!(to_give(2, 0, false, 10), 0);
    assert_eq!(to_give(1, 1, false, 10), 0);
}

/// A toy model over small numbers: `edges` gives each state's successors, `props` the
/// properties.
#[derive(Clone)]
struct Toy {
    edges: fn(u8) -> Vec<u8>,
    props: fn() -> Vec<stateright::Property<Toy>>,
}

impl Model for Toy {
    type State = u8;
    type Action = u8;
    fn init_states(&self) -> Vec<u8> {
        vec![0]
    }
    fn actions(&self, n: &u8, actions: &mut Vec<u8>) {
        actions.extend((self.edges)(*n));
    }
    fn next_state(&self, _: &u8, to: u8) -> Option<u8> {
        Some(to)
    }
    fn properties(&self) -> Vec<stateright::Property<Self>> {
        (self.props)()
    }
}

/// Distinct states and discoveries of Stateright's checker and of the lean search (one and
/// two threads) on `toy`.
fn both(toy: Toy) -> [(usize, Vec<&'static str>); 3] {
    let checker = toy
        .clone()
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::new()))
        .spawn_dfs()
        .join();
    let mut found: Vec<_> = checker.discoveries().into_keys().collect();
    found.sort_unstable();
    let lean = |threads| {
        let search = Search {
            threads,
            symmetry: None,
            max_unique: None,
            paths: true,
        };
        let mut e = explore(&toy, &search, &mut |_| {});
        e.discovered.sort_unstable();
        (e.unique, e.discovered)
    };
    [(checker.unique_state_count(), found), lean(1), lean(2)]
}

/// A state where every `always` property is false and every `sometimes` property true is
/// not expanded: the chain 0-1-...-9 stops at 4.
#[test]
fn a_state_that_decides_everything_is_not_expanded() {
    use stateright::Property;
    let toy = Toy {
        edges: |n| if n < 9 { vec![n + 1] } else { vec![] },
        props: || {
            vec![
                Property::always("not four", |_, n| *n != 4),
                Property::sometimes("four", |_, n| *n == 4),
            ]
        },
    };
    let [stateright, one, two] = both(toy);
    assert_eq!(stateright, (5, vec!["four", "not four"]));
    assert_eq!(one, stateright);
    assert_eq!(two, stateright);
}

/// An `eventually` property broken at a terminal state (2, reached first) and met on the
/// path to 3 (at 1): state 3, where the `always` property is false and the `sometimes`
/// property true, then decides everything and is not expanded (4 and 5 stay unseen).
#[test]
fn eventually_is_broken_at_terminal_states_and_then_stops_mattering() {
    use stateright::Property;
    let toy = Toy {
        edges: |n| match n {
            0 => vec![1, 2],
            1 | 3 | 4 => vec![n + 1 + u8::from(n == 1)],
            _ => vec![],
        },
        props: || {
            vec![
                Property::always("not three", |_, n| *n != 3),
                Property::eventually("odd", |_, n| n % 2 == 1),
                Property::sometimes("three", |_, n| *n == 3),
            ]
        },
    };
    let [stateright, one, two] = both(toy);
    assert_eq!(stateright, (4, vec!["not three", "odd", "three"]));
    assert_eq!(one, stateright);
    assert_eq!(two.1, stateright.1);
}

/// Each discovery's path starts at an initial state, takes the model's own steps, and ends
/// where its property was decided: an `always` property false there, a `sometimes` property
/// true there, an `eventually` property never met on a run that ends there.
#[test]
fn each_discovery_comes_with_a_path_the_model_replays() {
    let model = crate::models::ttl_only::TtlOnlyModelCfg::default().into_model();
    let properties = model.properties();
    for symmetry in [false, true] {
        for threads in [1, 2] {
            let search = Search {
                threads,
                symmetry: symmetry.then_some(LeaseModel::representative as fn(&_) -> _),
                max_unique: None,
                paths: true,
            };
            let found = explore(&model, &search, &mut |_| {});
            assert!(found.discovered.len() >= 2, "{:?}", found.discovered);
            assert_eq!(found.paths.len(), found.discovered.len());
            for (name, path) in found.discovered.iter().zip(&found.paths) {
                let p = properties.iter().find(|p| p.name == *name).expect("named");
                assert!(model.init_states().contains(&path[0].0), "{name}");
                for step in path.windows(2) {
                    let action = step[0].1.clone().expect("an action between states");
                    assert_eq!(
                        model.next_state(&step[0].0, action),
                        Some(step[1].0.clone())
                    );
                }
                let (last, none) = path.last().expect("not empty");
                assert!(none.is_none(), "{name}: the last state takes no action");
                let holds = |s| (p.condition)(&model, s);
                match p.expectation {
                    Expectation::Always => assert!(!holds(last), "{name}"),
                    Expectation::Sometimes => assert!(holds(last), "{name}"),
                    Expectation::Eventually => assert!(path.iter().all(|(s, _)| !holds(s))),
                }
            }
        }
    }
}

/// Without parents kept, no path is given.
#[test]
fn without_paths_asked_none_are_kept() {
    let model = crate::models::ttl_only::TtlOnlyModelCfg::default().into_model();
    let search = Search {
        threads: 1,
        symmetry: None,
        max_unique: None,
        paths: false,
    };
    let found = explore(&model, &search, &mut |_| {});
    assert!(!found.discovered.is_empty());
    assert!(found.paths.is_empty());
}
