//! Exhaustive model checks: verdicts at the defaults, pinned state counts, the exact minimal
//! counterexamples, symmetry soundness, and negative controls (mutants the checker must catch).

use fencecheck::check::{find_model, ModelRun, Options, Params, Verdict};
use fencecheck::models::fenced::FencedModelCfg;
use fencecheck::models::lease_service::{prop, LeaseModel};
use fencecheck::models::ttl_only::TtlOnlyModelCfg;
use fencecheck::models::{Mutant, Symmetric};
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;

fn run(model: &str, params: Params, symmetry: bool) -> ModelRun {
    let entry = find_model(model).expect("model in catalog");
    let options = Options {
        symmetry,
        ..Options::default()
    };
    (entry.check)(&params, &options, &mut |_| {}).expect("the checker accepts the model")
}

fn verdict(run: &ModelRun, property: &str) -> Verdict {
    run.properties
        .iter()
        .find(|p| p.property == property)
        .unwrap_or_else(|| panic!("{} has no property {property}", run.model))
        .verdict
}

fn params(clients: usize, writes: u8) -> Params {
    Params {
        clients,
        writes,
        ..Params::default()
    }
}

fn ttl_only(clients: usize, writes: u8) -> LeaseModel {
    TtlOnlyModelCfg {
        clients,
        writes_per_client: writes,
        ..TtlOnlyModelCfg::default()
    }
    .into_model()
}

fn fenced(clients: usize, writes: u8) -> LeaseModel {
    FencedModelCfg {
        clients,
        writes_per_client: writes,
        ..FencedModelCfg::default()
    }
    .into_model()
}

/// Unique states of a full exploration: (BFS, DFS, DFS with symmetry).
fn counts(model: LeaseModel) -> (usize, usize, usize) {
    let never = || HasDiscoveries::AnyOf(BTreeSet::new());
    let bfs = model
        .clone()
        .checker()
        .finish_when(never())
        .spawn_bfs()
        .join();
    let dfs = model
        .clone()
        .checker()
        .finish_when(never())
        .spawn_dfs()
        .join();
    let sym = model
        .checker()
        .finish_when(never())
        .symmetry_fn(LeaseModel::representative)
        .spawn_dfs()
        .join();
    (
        bfs.unique_state_count(),
        dfs.unique_state_count(),
        sym.unique_state_count(),
    )
}

#[test]
fn the_seed_story_in_verdicts() {
    let ttl = run("ttl-only", Params::default(), true);
    let fen = run("fenced", Params::default(), true);
    assert_eq!(
        verdict(&ttl, prop::STORAGE_IN_LEASE_ORDER),
        Verdict::Violated
    );
    assert_eq!(verdict(&ttl, prop::SINGLE_BELIEVER), Verdict::Violated);
    assert_eq!(verdict(&ttl, prop::STALE_WRITE_REJECTED), Verdict::Violated);
    assert_eq!(verdict(&fen, prop::STORAGE_IN_LEASE_ORDER), Verdict::Holds);
    assert_eq!(verdict(&fen, prop::TOKENS_INCREASE), Verdict::Holds);
    assert_eq!(verdict(&fen, prop::SINGLE_BELIEVER), Verdict::Violated);
    assert_eq!(verdict(&fen, prop::STALE_WRITE_REJECTED), Verdict::Holds);
    for run in [&ttl, &fen] {
        assert_eq!(verdict(run, prop::PROGRESS), Verdict::Holds);
        assert_eq!(verdict(run, prop::WRITE_ACCEPTED), Verdict::Holds);
        assert_eq!(verdict(run, prop::LEASE_REGRANTED), Verdict::Holds);
    }
}

#[test]
fn pinned_state_counts() {
    // (clients, writes) -> (BFS, DFS, DFS with symmetry) unique states of the full space.
    // BFS and DFS must agree; symmetry must shrink the space by close to clients!.
    let ttl = [((2, 2), (280, 280, 141)), ((3, 2), (7_160, 7_160, 1_218))];
    let fen = [((2, 2), (244, 244, 123)), ((3, 2), (7_034, 7_034, 1_196))];
    for ((c, w), want) in ttl {
        assert_eq!(counts(ttl_only(c, w)), want, "ttl-only {c}x{w}");
    }
    for ((c, w), want) in fen {
        assert_eq!(counts(fenced(c, w)), want, "fenced {c}x{w}");
    }
}

#[test]
fn symmetry_reduction_does_not_change_any_verdict() {
    for model in ["ttl-only", "fenced"] {
        for mutant in [
            None,
            Some(Mutant::FenceAcceptsOlder),
            Some(Mutant::TokenReused),
        ] {
            let p = Params {
                mutant,
                ..params(3, 2)
            };
            let with = run(model, p.clone(), true);
            let without = run(model, p, false);
            assert!(with.states < without.states);
            for (a, b) in with.properties.iter().zip(&without.properties) {
                assert_eq!(
                    a.verdict, b.verdict,
                    "{model} {mutant:?} / {}: symmetry changed the verdict",
                    a.property
                );
                // The minimal counterexample does not depend on how the verdict was found.
                assert_eq!(a.counterexample, b.counterexample);
            }
        }
    }
}

fn timeline(run: &ModelRun, property: &str) -> Vec<String> {
    let p = run
        .properties
        .iter()
        .find(|p| p.property == property)
        .expect("property");
    assert!(p.minimal, "{property}: the minimal search must succeed");
    p.counterexample
        .as_ref()
        .expect("a violated property has a counterexample")
        .steps
        .iter()
        .map(|s| s.text.clone())
        .collect()
}

#[test]
fn ttl_only_counterexample_is_the_seed_story() {
    let run = run("ttl-only", Params::default(), true);
    assert_eq!(
        timeline(&run, prop::STORAGE_IN_LEASE_ORDER),
        [
            "client-0 acquires the lease (token 1)",
            "client-0 receives its lease (token 1) and sends a write with token 1",
            "the lease of client-0 (token 1) expires",
            "client-1 acquires the lease (token 2)",
            "client-1 receives its lease (token 2) and sends a write with token 2",
            "client-1 writes with token 2: accepted",
            "client-0 writes with token 1: accepted",
        ]
    );
    assert_eq!(
        timeline(&run, prop::SINGLE_BELIEVER),
        [
            "client-0 acquires the lease (token 1)",
            "client-0 receives its lease (token 1) and sends a write with token 1",
            "the lease of client-0 (token 1) expires",
            "client-1 acquires the lease (token 2)",
            "client-1 receives its lease (token 2) and sends a write with token 2",
        ]
    );
    let fen = self::run("fenced", Params::default(), true);
    assert_eq!(timeline(&fen, prop::SINGLE_BELIEVER).len(), 5);
}

/// Stateright's own BFS, bounded to one step fewer than our counterexample, finds nothing; at
/// its length it finds a violation: no shorter counterexample exists.
#[test]
fn counterexamples_are_minimal_by_stateright_bfs() {
    for (model, property, len) in [
        (ttl_only(3, 2), prop::STORAGE_IN_LEASE_ORDER, 7),
        (ttl_only(3, 2), prop::SINGLE_BELIEVER, 5),
        (fenced(3, 2), prop::SINGLE_BELIEVER, 5),
    ] {
        // A state at path length k has depth k + 1; states at depth >= target are not checked.
        let shorter = model
            .clone()
            .checker()
            .target_max_depth(len + 1)
            .spawn_bfs()
            .join();
        assert!(
            shorter.discovery(property).is_none(),
            "{property} under {len} steps"
        );
        let exact = model.checker().target_max_depth(len + 2).spawn_bfs().join();
        let path = exact.discovery(property).expect("found at its length");
        assert_eq!(path.into_actions().len(), len);
    }
}

#[test]
fn negative_control_fence_accepting_older_tokens_is_caught() {
    let p = Params {
        mutant: Some(Mutant::FenceAcceptsOlder),
        ..Params::default()
    };
    let run = run("fenced", p, true);
    assert_eq!(
        verdict(&run, prop::STORAGE_IN_LEASE_ORDER),
        Verdict::Violated
    );
    assert_eq!(timeline(&run, prop::STORAGE_IN_LEASE_ORDER).len(), 7);
    assert!(run.properties.iter().any(|p| !p.matches()));
}

#[test]
fn negative_control_reused_token_is_caught() {
    let p = Params {
        mutant: Some(Mutant::TokenReused),
        ..Params::default()
    };
    let run = run("fenced", p, true);
    assert_eq!(verdict(&run, prop::TOKENS_INCREASE), Verdict::Violated);
    assert_eq!(
        verdict(&run, prop::STORAGE_IN_LEASE_ORDER),
        Verdict::Violated
    );
    assert_eq!(
        timeline(&run, prop::TOKENS_INCREASE)
            .last()
            .map(String::as_str),
        Some("client-1 acquires the lease (token 1)")
    );
}

#[test]
fn retrying_after_a_lost_lease_keeps_every_verdict() {
    for model in ["ttl-only", "fenced"] {
        let base = run(model, params(3, 2), true);
        let retry = run(
            model,
            Params {
                retries: 1,
                ..params(3, 2)
            },
            true,
        );
        for (a, b) in base.properties.iter().zip(&retry.properties) {
            assert_eq!(a.verdict, b.verdict, "{model} / {}", a.property);
        }
        if model == "fenced" {
            // Retries add behaviour only where a rejection tells a client it lost the lease.
            assert!(retry.states > base.states);
        } else {
            assert_eq!(retry.states, base.states);
        }
    }
}

#[test]
fn a_cut_short_search_is_incomplete_never_holds() {
    let entry = find_model("fenced").unwrap();
    let options = Options {
        max_states: Some(200),
        ..Options::default()
    };
    let run = (entry.check)(&Params::default(), &options, &mut |_| {}).expect("accepted");
    assert!(!run.complete);
    assert_eq!(
        verdict(&run, prop::STORAGE_IN_LEASE_ORDER),
        Verdict::Incomplete
    );
    for p in run.properties.iter().filter(|p| p.kind != "sometimes") {
        assert_ne!(p.verdict, Verdict::Holds, "{} claimed to hold", p.property);
    }
}

/// Two jobs in a row with releases that name their lease: no release frees the next lease (the
/// control for `keepalive-stale-release`, whose releases name the owner).
#[test]
fn keepalive_two_jobs_with_token_releases() {
    use fencecheck::models::keepalive::{Flaw, KeepaliveModel};
    for (flaw, violated) in [(Flaw::None, false), (Flaw::StaleRelease, true)] {
        let model = KeepaliveModel {
            jobs: 2,
            ..KeepaliveModel::with(flaw)
        };
        let checker = model.checker().spawn_dfs().join();
        assert!(checker.is_done());
        assert_eq!(
            checker.discovery("work_stopped_before_successor").is_some(),
            violated,
            "{flaw:?}"
        );
        if !violated {
            assert_eq!(checker.unique_state_count(), 356_342);
        }
    }
}

/// The client side: the library's holder keeps the work inside the lease in the `keepalive`
/// world, and every sibling's mistake, fed to the same holder, is caught. (These run in the
/// mutation tests' judging set, so a change to `protocol::holder` that lets work outlive its
/// lease fails here.)
#[test]
fn keepalive_holder_keeps_the_work_inside_the_lease() {
    let safe = run("keepalive", Params::sized(2, 1, 0), false);
    assert!(safe.complete);
    for property in [
        "work_stopped_before_successor",
        "storage_in_lease_order",
        "successor_takes_over",
        "renewal_extends",
    ] {
        assert_eq!(verdict(&safe, property), Verdict::Holds, "{property}");
    }
    for sibling in [
        "keepalive-paused",
        "keepalive-reply-deadline",
        "keepalive-grace-outside",
        "keepalive-late-start",
        "keepalive-direct-child",
        "keepalive-slow-clock",
        "keepalive-stale-release",
    ] {
        let r = run(sibling, Params::sized(2, 1, 0), false);
        assert_eq!(
            verdict(&r, "work_stopped_before_successor"),
            Verdict::Violated,
            "{sibling}"
        );
        assert_eq!(
            verdict(&r, "storage_in_lease_order"),
            Verdict::Holds,
            "{sibling}"
        );
    }
}
