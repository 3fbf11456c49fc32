//! The protocols people run: check-before-write, clock drift, Redlock, leader election, a
//! non-durable token counter, idempotent jobs. Pinned state counts at two sizes, the exact
//! shortest counterexample of each expected violation, and the negative controls (a sibling
//! variant or a mutant that flips the verdict).

use fencecheck::check::{catalog, find_model, Engine, ModelRun, Options, Params, Verdict};
use fencecheck::models::k8s_lease::{
    K8sLease, K8sLeaseFastClock, K8sLeaseLongRequest, K8sLeaseModel, K8sLeasePrompt,
    K8sLeaseUnfenced,
};
use fencecheck::models::keepalive::{Flaw, KeepaliveModel};
use fencecheck::models::redlock::{Fault, RedlockModel};
use fencecheck::models::CatalogModel;
use fencecheck::models::Mutant;
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::BTreeSet;

fn run(model: &str, clients: Option<usize>, mutant: Option<Mutant>) -> ModelRun {
    let entry = find_model(model).unwrap_or_else(|| panic!("{model} not in the catalog"));
    let mut p: Params = (entry.defaults)();
    if let Some(c) = clients {
        p.clients = c;
    }
    p.mutant = mutant;
    (entry.check)(&p, &Options::default(), &mut |_| {}).expect("the checker accepts the model")
}

fn verdict(run: &ModelRun, property: &str) -> Verdict {
    run.properties
        .iter()
        .find(|p| p.property == property)
        .unwrap_or_else(|| panic!("{} has no {property}", run.model))
        .verdict
}

/// The minimal counterexample of `property` in `run`, step by step.
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

/// The k8s-lease model `name` at the catalog's default size.
fn k8s_model(name: &str) -> K8sLeaseModel {
    let build = match name {
        "k8s-lease" => K8sLease::build,
        "k8s-lease-long-request" => K8sLeaseLongRequest::build,
        "k8s-lease-prompt" => K8sLeasePrompt::build,
        "k8s-lease-fast-clock" => K8sLeaseFastClock::build,
        "k8s-lease-unfenced" => K8sLeaseUnfenced::build,
        other => panic!("{other} is not a k8s-lease model"),
    };
    build(&Params::sized(2, 1, 0))
}

/// The states of `model`'s whole state space, searched without symmetry and without stopping at a
/// discovery.
fn unique_states<M>(model: M) -> usize
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + PartialEq + std::fmt::Debug + std::hash::Hash + Send + Sync,
    M::Action: Clone + PartialEq + std::fmt::Debug + Send + Sync,
{
    model
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::new()))
        .spawn_dfs()
        .join()
        .unique_state_count()
}

#[test]
fn pinned_state_counts_at_two_sizes() {
    let pinned: &[(&str, usize, usize)] = &[
        ("check-before-write", 2, 693),
        ("check-before-write", 3, 11_310),
        ("clock-drift", 2, 972),
        ("clock-drift", 3, 16_369),
        ("redlock", 2, 78_996),
        ("redlock-restart", 2, 474_090),
        ("redlock-clock-jump", 2, 567_846),
        ("token-reset", 2, 31),
        ("token-reset", 3, 127),
        ("token-from-storage", 2, 31),
        ("token-from-storage", 3, 119),
        ("durable-token", 2, 29),
        ("durable-token", 3, 113),
        ("leader-election", 2, 68),
        ("leader-election", 3, 920),
        ("leader-election-unfenced", 2, 72),
        ("leader-election-unfenced", 3, 1_064),
        ("idempotent-job", 2, 9),
        ("idempotent-job", 3, 27),
        ("append-job", 2, 9),
        ("append-job", 3, 27),
        ("locked-append-job", 2, 24),
        ("locked-append-job", 3, 134),
        ("keepalive", 2, 38_988),
        ("keepalive-paused", 2, 252_127),
        ("keepalive-reply-deadline", 2, 85_774),
        ("keepalive-grace-outside", 2, 50_372),
        ("keepalive-late-start", 2, 122_336),
        ("keepalive-direct-child", 2, 63_952),
        ("keepalive-slow-clock", 2, 64_149),
        ("keepalive-stale-release", 2, 1_077_032),
        ("keepalive-silent-reacquire", 2, 40_433),
        ("keepalive-healthy", 2, 2_934),
        ("keepalive-third-cadence", 2, 1_360),
        ("k8s-lease", 2, 248_042),
        ("k8s-lease-long-request", 2, 298_522),
        ("k8s-lease-prompt", 2, 185_003),
        ("k8s-lease-fast-clock", 2, 1_455_243),
        ("k8s-lease-unfenced", 2, 251_786),
        ("consul-session", 2, 780),
        ("consul-session", 3, 1_814),
        ("consul-session-no-lock-delay", 2, 1_004),
        ("consul-session-no-lock-delay", 3, 5_846),
        ("consul-session-slow-monitor", 2, 1_292),
        ("consul-session-slow-monitor", 3, 3_230),
        ("consul-session-unfenced", 2, 1_508),
        ("consul-session-unfenced", 3, 3_878),
        ("raft-leader-lease", 3, 45_570),
        ("raft-leader-lease", 4, 1_259_604),
        ("raft-leader-lease-drift", 3, 211_824),
        ("raft-leader-lease-drift", 4, 9_699_590),
        ("raft-leader-lease-no-wait", 3, 233_118),
        ("raft-leader-lease-no-wait", 4, 9_313_596),
    ];
    for &(model, clients, states) in pinned {
        assert_eq!(
            run(model, Some(clients), None).states,
            states,
            "{model} at {clients}"
        );
    }
    // The keepalive models have one holder and one successor; their second size is a shorter
    // run (7 ticks), counted on the model itself.
    for (flaw, states) in [(Flaw::None, 20_667), (Flaw::PausedSupervisor, 108_397)] {
        let model = KeepaliveModel {
            horizon: 7,
            ..KeepaliveModel::with(flaw)
        };
        assert_eq!(unique_states(model), states, "{flaw:?}");
    }
    // The k8s-lease models are declared for two candidates (three take 9 million states and
    // more); their second size is a shorter run (5 ticks), counted on the model itself.
    for (name, states) in [
        ("k8s-lease", 97_782),
        ("k8s-lease-long-request", 117_238),
        ("k8s-lease-prompt", 74_464),
        ("k8s-lease-fast-clock", 575_139),
        ("k8s-lease-unfenced", 98_394),
    ] {
        let entry = find_model(name).unwrap();
        let mut model = k8s_model(name);
        model.horizon = 5;
        assert_eq!(unique_states(model), states, "{} at 5 ticks", entry.name);
    }
    // Redlock is declared for two clients only (three do not finish in minutes); its state space
    // at one client stays pinned, counted on the model itself.
    for (fault, states) in [
        (Fault::None, 159),
        (Fault::Restart, 645),
        (Fault::ClockJump, 963),
    ] {
        let model = RedlockModel { clients: 1, fault };
        assert_eq!(unique_states(model), states, "{fault:?}");
    }
}

#[test]
fn shortest_counterexamples_at_the_defaults() {
    // (model, property, steps, last step)
    let expected: &[(&str, &str, usize, &str)] = &[
        ("check-before-write", "storage_in_lease_order", 8,
         "client-0's write with token 1 arrives: accepted by the plain storage, rejected by the fenced storage"),
        ("clock-drift", "single_believer", 4,
         "client-1 acquires the lease (token 2) at t=2; by its own clock it is valid until t=5"),
        ("redlock", "storage_in_lease_order", 11, "client-0's write (holder #1) reaches the storage: accepted"),
        ("redlock", "tokens_increase", 10,
         "client-1 has a majority: holds the lock until t=3 with token 2 (largest counter); sends a write"),
        ("redlock-restart", "single_majority_holder", 9,
         "client-1 has a majority: holds the lock until t=1 with token 1 (largest counter); sends a write"),
        ("redlock-clock-jump", "single_majority_holder", 9,
         "client-1 has a majority: holds the lock until t=1 with token 2 (largest counter); sends a write"),
        ("token-reset", "tokens_increase", 3, "client-1 takes the lease (token 1)"),
        // The holder paused across the restart writes with the token handed out again.
        ("token-reset", "storage_in_lease_order", 5, "client-0 writes with token 1: stored; releases"),
        ("token-reset", "progress", 11, "client-3 writes with token 2: refused (already saw 3); releases"),
        ("token-from-storage", "storage_in_lease_order", 5, "client-0 writes with token 1: stored; releases"),
        ("leader-election", "single_believer", 5, "candidate-1 campaigns and wins term 2; sends a write with token 2"),
        ("leader-election-unfenced", "storage_in_lease_order", 7,
         "candidate-0's write with token 1 reaches the storage: accepted"),
        ("append-job", "effect_exactly_once", 4, "instance-1 finishes and applies its effect: 2 row(s) for the run"),
        ("locked-append-job", "effect_exactly_once", 4,
         "instance-1 finishes and applies its effect: 2 row(s) for the run"),
        // The client side: each sibling's mistake, fed to the library's holder.
        ("keepalive-paused", "work_stopped_before_successor", 9,
         "t=4: successor takes the lease (token 2) until t=8"),
        ("keepalive-reply-deadline", "work_stopped_before_successor", 8,
         "t=4: supervisor reads the grant sent at its clock 0: deadline 6, SIGTERM at 5, SIGKILL at 6; starts the work and its child"),
        ("keepalive-grace-outside", "work_stopped_before_successor", 9,
         "t=4: successor takes the lease (token 2) until t=8"),
        ("keepalive-late-start", "work_stopped_before_successor", 8,
         "t=4: supervisor reads the grant sent at its clock 0: deadline 2, SIGTERM at 1, SIGKILL at 2; starts the work and its child"),
        ("keepalive-direct-child", "work_stopped_before_successor", 7,
         "t=0: successor takes the lease (token 2) until t=4"),
        ("keepalive-stale-release", "work_stopped_before_successor", 12,
         "t=0: supervisor reads the grant sent at its clock 0: deadline 2, SIGTERM at 1, SIGKILL at 2; starts the work and its child"),
        ("keepalive-slow-clock", "work_stopped_before_successor", 9,
         "t=4: successor takes the lease (token 2) until t=8"),
        // A healthy job stopped before its first renewal was due.
        ("keepalive-third-cadence", "healthy_work_not_stopped", 6,
         "t=2: supervisor's clock reads 2: SIGTERM to the work's process group"),
        // Kubernetes: a slow reply, a fast clock, a late write.
        ("k8s-lease", "single_leader", 11,
         "the reply reaches candidate-1 (clock 4): it leads with token 3 until clock 7 (retryPeriod + renewDeadline after this reply); sends a write with token 3"),
        ("k8s-lease-long-request", "single_leader", 11,
         "the reply reaches candidate-1 (clock 4): it leads with token 3 until clock 7 (retryPeriod + renewDeadline after this reply); sends a write with token 3"),
        ("k8s-lease-fast-clock", "single_leader", 10,
         "the reply reaches candidate-1 (clock 4): it leads with token 3 until clock 7 (retryPeriod + renewDeadline after this reply); sends a write with token 3"),
        ("k8s-lease-unfenced", "storage_in_lease_order", 13,
         "candidate-0's write with token 2 reaches the storage: accepted"),
        // Consul: no lock-delay, a slow monitor, a late write.
        ("consul-session-no-lock-delay", "single_holder", 5,
         "client-1 creates a session (TTL 2) and PUT ?acquire= wins the key: LockIndex 2; sends a write with token 2"),
        ("consul-session-slow-monitor", "single_holder", 7,
         "client-1 creates a session (TTL 2) and PUT ?acquire= wins the key: LockIndex 2; sends a write with token 2"),
        ("consul-session-unfenced", "storage_in_lease_order", 9,
         "client-0's write with token 1 reaches the storage: accepted"),
        // Raft leader leases: a slow leader past a fast quorum's election; voters that do not wait.
        ("raft-leader-lease-drift", "linearizable_reads", 13,
         "node-0 (clock 72, rate 8) answers a read from its own state under its lease (to clock 81): value 0, though node-1 committed 1: a stale read"),
        ("raft-leader-lease-no-wait", "linearizable_reads", 4,
         "node-0 (clock 0, rate 9) answers a read from its own state under its lease (to clock 81): value 0, though node-1 committed 1: a stale read"),
    ];
    for &(model, property, steps, last) in expected {
        let r = run(model, None, None);
        let p = r
            .properties
            .iter()
            .find(|p| p.property == property)
            .unwrap();
        assert_eq!(p.verdict, Verdict::Violated, "{model} / {property}");
        assert!(p.minimal, "{model} / {property}");
        let cx = &p.counterexample.as_ref().unwrap().steps;
        assert_eq!(cx.len(), steps, "{model} / {property}");
        assert_eq!(cx.last().unwrap().text, last, "{model} / {property}");
    }
}

#[test]
fn negative_controls_flip_the_verdicts() {
    // The check that passes on the safe variant fails on its broken sibling.
    let flips: &[(&str, &str, &str)] = &[
        ("check-before-write", "clock-drift", "single_believer"),
        ("redlock", "redlock-restart", "single_majority_holder"),
        ("redlock", "redlock-clock-jump", "single_majority_holder"),
        ("durable-token", "token-reset", "tokens_increase"),
        ("durable-token", "token-reset", "progress"),
        ("durable-token", "token-reset", "storage_in_lease_order"),
        (
            "durable-token",
            "token-from-storage",
            "storage_in_lease_order",
        ),
        (
            "leader-election",
            "leader-election-unfenced",
            "storage_in_lease_order",
        ),
        ("idempotent-job", "append-job", "effect_exactly_once"),
        ("idempotent-job", "locked-append-job", "effect_exactly_once"),
        (
            "keepalive",
            "keepalive-paused",
            "work_stopped_before_successor",
        ),
        (
            "keepalive",
            "keepalive-reply-deadline",
            "work_stopped_before_successor",
        ),
        (
            "keepalive",
            "keepalive-grace-outside",
            "work_stopped_before_successor",
        ),
        (
            "keepalive",
            "keepalive-late-start",
            "work_stopped_before_successor",
        ),
        (
            "keepalive",
            "keepalive-direct-child",
            "work_stopped_before_successor",
        ),
        (
            "keepalive",
            "keepalive-slow-clock",
            "work_stopped_before_successor",
        ),
        (
            "raft-leader-lease",
            "raft-leader-lease-drift",
            "linearizable_reads",
        ),
        (
            "raft-leader-lease",
            "raft-leader-lease-no-wait",
            "linearizable_reads",
        ),
    ];
    for &(safe, broken, property) in flips {
        assert_eq!(
            verdict(&run(safe, None, None), property),
            Verdict::Holds,
            "{safe} / {property}"
        );
        assert_eq!(
            verdict(&run(broken, None, None), property),
            Verdict::Violated,
            "{broken} / {property}"
        );
    }
    // The fence never has to refuse the holder's work while the supervisor runs; it does once the
    // supervisor is paused, and keeps the storage in order.
    assert_eq!(
        verdict(&run("keepalive", None, None), "fence_refuses_late_write"),
        Verdict::Violated
    );
    let paused = run("keepalive-paused", None, None);
    assert_eq!(verdict(&paused, "fence_refuses_late_write"), Verdict::Holds);
    assert_eq!(verdict(&paused, "storage_in_lease_order"), Verdict::Holds);
    // A re-acquiring extend is exercised (a late renewal succeeds) and still cannot keep the work
    // past its lease: the holder's send-time deadline has stopped it before the reply arrives.
    let reacquire = run("keepalive-silent-reacquire", None, None);
    assert_eq!(verdict(&reacquire, "late_renewal_succeeds"), Verdict::Holds);
    assert_eq!(
        verdict(&reacquire, "work_stopped_before_successor"),
        Verdict::Holds
    );
    // On a healthy service the library's renewal schedule keeps a job with a long grace
    // running; renewals every third of the TTL let its stop come first.
    let healthy = run("keepalive-healthy", None, None);
    assert_eq!(
        verdict(&healthy, "healthy_work_not_stopped"),
        Verdict::Holds
    );
    assert_eq!(verdict(&healthy, "renewal_extends"), Verdict::Holds);
    let third = run("keepalive-third-cadence", None, None);
    assert_eq!(
        verdict(&third, "healthy_work_not_stopped"),
        Verdict::Violated
    );
    // Within one model: the fenced storage holds where the plain one fails.
    let cbw = run("check-before-write", None, None);
    assert_eq!(
        verdict(&cbw, "fenced_storage_in_lease_order"),
        Verdict::Holds
    );
    assert_eq!(verdict(&cbw, "storage_in_lease_order"), Verdict::Violated);
    // A register without compare-and-set lets two candidates win one term.
    let blind = run("leader-election", None, Some(Mutant::BlindCampaign));
    assert_eq!(verdict(&blind, "one_leader_per_term"), Verdict::Violated);
}

#[test]
fn the_whole_catalog_is_checked_and_every_verdict_matches() {
    assert_eq!(catalog().len(), 38);
    for entry in catalog() {
        let r = (entry.check)(&(entry.defaults)(), &Options::default(), &mut |_| {})
            .expect("the checker accepts the model");
        assert!(r.complete, "{}", entry.name);
        for p in &r.properties {
            assert!(
                p.matches(),
                "{} / {}: declared {}, found {}",
                r.model,
                p.property,
                p.expected,
                p.verdict
            );
        }
        // Every always property is paired with some sometimes property.
        assert!(
            r.properties.iter().any(|p| p.kind == "sometimes"),
            "{}",
            entry.name
        );
    }
}

/// Kubernetes leader election on the library's elector: client-go's timing lets two lead when a
/// reply is slower than the margin its three durations leave (kubernetes#44887) or a clock runs
/// fast, holds inside the margin, and leaseTransitions as a fencing token keeps the storage in
/// order either way.
#[test]
fn k8s_lease_single_leader_needs_the_margin_and_the_fence_keeps_order() {
    let expect = [
        ("k8s-lease", Verdict::Violated, Verdict::Holds),
        ("k8s-lease-long-request", Verdict::Violated, Verdict::Holds),
        ("k8s-lease-prompt", Verdict::Holds, Verdict::Holds),
        ("k8s-lease-fast-clock", Verdict::Violated, Verdict::Holds),
        ("k8s-lease-unfenced", Verdict::Violated, Verdict::Violated),
    ];
    for (model, single_leader, in_order) in expect {
        let r = run(model, None, None);
        assert!(r.complete, "{model}");
        assert_eq!(verdict(&r, "single_leader"), single_leader, "{model}");
        assert_eq!(verdict(&r, "storage_in_lease_order"), in_order, "{model}");
        assert_eq!(
            verdict(&r, "one_leader_per_term"),
            Verdict::Holds,
            "{model}"
        );
        for sometimes in ["leader_elected", "leadership_changes", "write_accepted"] {
            assert_eq!(
                verdict(&r, sometimes),
                Verdict::Holds,
                "{model} {sometimes}"
            );
        }
    }
    // The two leaders of the minimal counterexample: one still inside retryPeriod +
    // renewDeadline after its slow reply, the other past leaseDuration since it saw the change.
    let r = run("k8s-lease", None, None);
    let steps = timeline(&r, "single_leader");
    let text = steps.join("\n");
    assert!(text.contains("renewDeadline"), "{text}");
    assert!(text.contains("expired by its clock"), "{text}");
    assert!(text.contains("resourceVersion"), "{text}");
}

/// Consul locks on the library's session lock: lock-delay keeps two holders apart only while
/// holders notice within it; the LockIndex as a fencing token keeps the storage in order either
/// way.
#[test]
fn consul_lock_delay_needs_prompt_notice_and_the_lock_index_fences() {
    let expect = [
        (
            "consul-session",
            Verdict::Holds,
            Verdict::Holds,
            Verdict::Holds,
        ),
        (
            "consul-session-no-lock-delay",
            Verdict::Violated,
            Verdict::Holds,
            Verdict::Violated,
        ),
        (
            "consul-session-slow-monitor",
            Verdict::Violated,
            Verdict::Holds,
            Verdict::Holds,
        ),
        (
            "consul-session-unfenced",
            Verdict::Violated,
            Verdict::Violated,
            Verdict::Holds,
        ),
    ];
    for (model, single_holder, in_order, delay_refuses) in expect {
        let r = run(model, None, None);
        assert!(r.complete, "{model}");
        assert_eq!(verdict(&r, "single_holder"), single_holder, "{model}");
        assert_eq!(verdict(&r, "storage_in_lease_order"), in_order, "{model}");
        assert_eq!(verdict(&r, "tokens_increase"), Verdict::Holds, "{model}");
        assert_eq!(verdict(&r, "lock_delay_refuses"), delay_refuses, "{model}");
        for sometimes in ["lock_changes_hands", "write_accepted"] {
            assert_eq!(
                verdict(&r, sometimes),
                Verdict::Holds,
                "{model} {sometimes}"
            );
        }
    }
    let r = run("consul-session-slow-monitor", None, None);
    let text = timeline(&r, "single_holder").join("\n");
    assert!(text.contains("lock-delay"), "{text}");
    assert!(text.contains("LockIndex"), "{text}");
    assert!(text.contains("session TTL ran out"), "{text}");
}

/// The lean search (`--engine lean`) against Stateright's checker on every model of the catalog
/// and every mutant, at two sizes (the default, and the fewest clients the model is declared for
/// with one write and no retry), with and without symmetry reduction: alone it explores exactly
/// the same states (distinct and generated) to the same depth; with two threads sharing work it
/// reaches the same verdicts. The minimal counterexamples come from the same breadth-first search,
/// so they are equal too.
#[test]
fn the_lean_search_agrees_with_stateright_on_the_whole_catalog() {
    let mut sizes_checked = 0;
    for entry in catalog() {
        let defaults = (entry.defaults)();
        let smallest = Params {
            clients: *entry.clients.start(),
            writes: 1,
            retries: 0,
            ..defaults.clone()
        };
        let mut sizes = vec![defaults];
        if !sizes.contains(&smallest) {
            sizes.push(smallest);
        }
        sizes_checked += sizes.len();
        let mutants = std::iter::once(None).chain(entry.mutants.iter().copied().map(Some));
        for (size, mutant) in sizes
            .iter()
            .flat_map(|size| mutants.clone().map(move |mutant| (size, mutant)))
        {
            let params = Params {
                mutant,
                ..size.clone()
            };
            for symmetry in [true, false] {
                let check = |engine, threads| {
                    let options = Options {
                        engine,
                        threads,
                        symmetry,
                        ..Options::default()
                    };
                    (entry.check)(&params, &options, &mut |_| {}).expect("accepted")
                };
                let what = format!(
                    "{} {}x{}x{} {mutant:?} symmetry {symmetry}",
                    entry.name, params.clients, params.writes, params.retries
                );
                let stateright = check(Engine::Stateright, 1);
                let lean = check(Engine::Lean, 1);
                assert_eq!(
                    (lean.states, lean.generated, lean.max_depth),
                    (
                        stateright.states,
                        stateright.generated,
                        stateright.max_depth
                    ),
                    "{what}: states, generated, depth"
                );
                for lean in [lean, check(Engine::Lean, 2)] {
                    assert!(lean.complete, "{what}");
                    for (a, b) in lean.properties.iter().zip(&stateright.properties) {
                        assert_eq!(a.property, b.property);
                        assert_eq!(a.verdict, b.verdict, "{what} / {}", a.property);
                        assert_eq!(
                            a.counterexample, b.counterexample,
                            "{what} / {}",
                            a.property
                        );
                    }
                }
                if !symmetry || !stateright.symmetry {
                    break;
                }
            }
        }
    }
    assert!(
        sizes_checked > catalog().len() + 10,
        "most models are compared at a second size: {sizes_checked} sizes"
    );
}

/// A minimal search with no budget finds no counterexample; each search then shows its own
/// depth-first path instead, marked not minimal and no shorter than the minimal one:
/// Stateright's (to the last violating state it met), and the lean search's (to the first),
/// rebuilt from its parent fingerprints (`check::search::lean`'s unit tests replay such paths
/// step by step).
#[test]
fn without_budget_for_the_minimal_search_both_searches_show_a_checker_path() {
    let entry = find_model("ttl-only").expect("in the catalog");
    let params = (entry.defaults)();
    let minimal = (entry.check)(&params, &Options::default(), &mut |_| {}).expect("accepted");
    let without_budget = |engine| {
        let options = Options {
            engine,
            max_counterexample_states: 1,
            ..Options::default()
        };
        (entry.check)(&params, &options, &mut |_| {}).expect("accepted")
    };
    for engine in [Engine::Stateright, Engine::Lean] {
        let run = without_budget(engine);
        let mut shown = 0;
        for (r, m) in run.properties.iter().zip(&minimal.properties) {
            assert_eq!(r.verdict, m.verdict, "{engine:?} {}", r.property);
            let Some(shortest) = &m.counterexample else {
                assert!(r.counterexample.is_none(), "{engine:?} {}", r.property);
                continue;
            };
            let path = r.counterexample.as_ref().unwrap_or_else(|| {
                panic!("{engine:?} {}: violated, with no path shown", r.property)
            });
            assert!(!r.minimal, "{engine:?} {}", r.property);
            assert!(path.steps.len() >= shortest.steps.len());
            shown += 1;
        }
        assert!(shown > 0, "ttl-only declares violations to show");
    }
}
