//! The public client API (`fencecheck::client`): clients written with it meet the catalog's world.
//!
//! The catalog's `ttl-only` and `fenced` models, re-expressed as a client of the public API, give
//! the same state counts, verdicts and counterexample lengths as the built-in models; the
//! `check-before-write` mistake written as a client is caught as the catalog catches it; each
//! built-in property is shown violated by a client that breaks it; bad use gets a clear error.

use fencecheck::check::{find_model, ModelRun, Options, Params, Verdict};
use fencecheck::client::{
    try_verify, verify, Busy, Client, Commands, Environment, EnvironmentError, Event, Lease,
    LeaseEnd, Service, Timing,
};
use fencecheck::protocol::FencePolicy;

/// The catalog's writer, written with the public API only: asks for the lease, makes `writes`
/// writes with its token one at a time, releases; a rejected write means the lease is lost.
#[derive(Clone, Debug)]
struct Writer {
    writes: u8,
    retries: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum WriterState {
    Acquiring { left: u8, retries: u8 },
    Holding { grant: Lease, left: u8, retries: u8 },
    Done,
}

impl Client for Writer {
    type State = WriterState;

    fn start(&self, out: &mut Commands) -> WriterState {
        out.acquire();
        WriterState::Acquiring {
            left: self.writes,
            retries: self.retries,
        }
    }

    fn on_event(
        &self,
        state: &WriterState,
        event: &Event,
        out: &mut Commands,
    ) -> Option<WriterState> {
        use WriterState::*;
        match (state, event) {
            (Acquiring { left, retries }, Event::Granted(grant)) => {
                out.write(grant);
                Some(Holding {
                    grant: *grant,
                    left: *left,
                    retries: *retries,
                })
            }
            (
                Holding {
                    grant,
                    left,
                    retries,
                },
                Event::WriteAccepted { .. },
            ) if *left > 1 => {
                out.write(grant);
                Some(Holding {
                    grant: *grant,
                    left: left - 1,
                    retries: *retries,
                })
            }
            (Holding { grant, .. }, Event::WriteAccepted { .. }) => {
                out.release(grant);
                Some(Done)
            }
            (Holding { left, retries, .. }, Event::WriteRejected { .. })
                if *left > 1 && *retries > 0 =>
            {
                out.acquire();
                Some(Acquiring {
                    left: left - 1,
                    retries: retries - 1,
                })
            }
            (Holding { .. }, Event::WriteRejected { .. }) => Some(Done),
            _ => None,
        }
    }

    fn holds(&self, state: &WriterState) -> bool {
        matches!(state, WriterState::Holding { .. })
    }

    fn finished(&self, state: &WriterState) -> bool {
        *state == WriterState::Done
    }
}

fn catalog_run(model: &str, p: Params) -> ModelRun {
    let entry = find_model(model).expect("in the catalog");
    (entry.check)(&p, &Options::default(), &mut |_| {}).expect("checks")
}

fn steps(run: &ModelRun, property: &str) -> Option<usize> {
    let p = run.properties.iter().find(|p| p.property == property)?;
    p.counterexample.as_ref().map(|cx| cx.steps.len())
}

/// The same states, verdicts and counterexample lengths as the built-in models, at several sizes.
#[test]
fn ttl_only_and_fenced_re_expressed_match_the_catalog() {
    let shared = [
        "storage_in_lease_order",
        "single_believer",
        "tokens_increase",
        "write_accepted",
        "lease_regranted",
        "stale_write_rejected",
    ];
    for (model, policy) in [
        ("ttl-only", FencePolicy::AcceptAll),
        ("fenced", FencePolicy::Fenced),
    ] {
        for (clients, writes, retries) in [(2, 1, 0), (3, 2, 0), (3, 2, 1), (4, 1, 0)] {
            let built_in = catalog_run(model, Params::sized(clients, writes, retries));
            let env = Environment::new(Writer { writes, retries })
                .instances(clients)
                .storage(policy);
            let ours = verify(env);
            let at = format!("{model} at {clients}x{writes} retries {retries}");
            assert_eq!(ours.states(), built_in.states, "{at}: states");
            let mut compared = 0;
            for name in shared {
                // Not every built-in model declares every shared property (ttl-only has no
                // tokens_increase).
                let Some(theirs) = built_in.properties.iter().find(|p| p.property == name) else {
                    continue;
                };
                compared += 1;
                assert_eq!(ours.verdict(name).unwrap(), theirs.verdict, "{at}: {name}");
                assert_eq!(
                    ours.counterexample(name).map(|cx| cx.steps.len()),
                    steps(&built_in, name),
                    "{at}: {name} counterexample length"
                );
            }
            assert!(compared >= 5, "{at}: only {compared} properties compared");
        }
    }
}

/// One job under the lease, done the way a habit says: the check-before-write mistake, the
/// forgotten token, a refusal taken as the end.
#[derive(Clone, Debug)]
enum OneJob {
    /// Checks that the lease is live, then writes with the token.
    CheckThenWrite,
    /// Writes without the token: the fence cannot help.
    ForgetsToken,
    /// Writes with the token, but a refusal leaves it stuck: it neither retries nor finishes.
    StuckWhenRefused,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum JobState {
    Waiting,
    Checking(Lease),
    Writing(Lease),
    Done,
    Stuck,
}

impl Client for OneJob {
    type State = JobState;

    fn start(&self, out: &mut Commands) -> JobState {
        out.acquire();
        JobState::Waiting
    }

    fn on_event(&self, state: &JobState, event: &Event, out: &mut Commands) -> Option<JobState> {
        match (state, event) {
            (JobState::Waiting, Event::Granted(grant)) => match self {
                OneJob::CheckThenWrite => {
                    out.check_lease(grant);
                    Some(JobState::Checking(*grant))
                }
                OneJob::ForgetsToken => {
                    out.write_unfenced(grant);
                    Some(JobState::Writing(*grant))
                }
                OneJob::StuckWhenRefused => {
                    out.write(grant);
                    Some(JobState::Writing(*grant))
                }
            },
            (JobState::Waiting, Event::Refused) => Some(JobState::Stuck),
            (JobState::Checking(grant), Event::LeaseStatus { live: true, .. }) => {
                out.write(grant);
                Some(JobState::Writing(*grant))
            }
            (JobState::Checking(_), Event::LeaseStatus { live: false, .. }) => Some(JobState::Done),
            (JobState::Writing(grant), Event::WriteAccepted { .. }) => {
                out.release(grant);
                Some(JobState::Done)
            }
            (JobState::Writing(_), Event::WriteRejected { .. }) => Some(JobState::Done),
            _ => None,
        }
    }

    fn holds(&self, state: &JobState) -> bool {
        matches!(state, JobState::Checking(_) | JobState::Writing(_))
    }

    fn finished(&self, state: &JobState) -> bool {
        *state == JobState::Done
    }

    fn working_under(&self, state: &JobState) -> Option<Lease> {
        match state {
            JobState::Writing(grant) => Some(*grant),
            _ => None,
        }
    }

    fn narrate(
        &self,
        me: &str,
        event: &Event,
        _before: &JobState,
        _after: &JobState,
        _sent: &[fencecheck::client::Command],
    ) -> Option<String> {
        match (self, event) {
            (OneJob::ForgetsToken, Event::Granted(g)) => {
                Some(format!("{me} starts the job under lease {}", g.token()))
            }
            _ => None,
        }
    }
}
/// The catalog's check-before-write model stores a late write at the accept-all storage and not at
/// the fenced one; the same mistake written as a client gets the same two verdicts.
#[test]
fn check_before_write_re_expressed_gets_the_catalogs_verdicts() {
    let built_in = catalog_run("check-before-write", Params::sized(2, 1, 0));
    let verdict = |name: &str| {
        built_in
            .properties
            .iter()
            .find(|p| p.property == name)
            .expect("declared")
            .verdict
    };
    let plain = verify(
        Environment::new(OneJob::CheckThenWrite)
            .storage(FencePolicy::AcceptAll)
            .named("check-then-write"),
    );
    assert_eq!(
        plain.verdict("storage_in_lease_order").unwrap(),
        verdict("storage_in_lease_order")
    );
    let cx = plain
        .counterexample("storage_in_lease_order")
        .expect("violated");
    let text: Vec<&str> = cx.steps.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(
        text,
        [
            "client-0 acquires the lease (token 1)",
            "client-0 is granted the lease (token 1), asks whether its lease (token 1) is live",
            "client-0 checks its lease (token 1): live",
            "client-0 is told its lease (token 1) is live, sends a write with token 1",
            "the lease of client-0 (token 1) expires",
            "client-1 acquires the lease (token 2)",
            "client-1 is granted the lease (token 2), asks whether its lease (token 2) is live",
            "client-1 checks its lease (token 2): live",
            "client-1 is told its lease (token 2) is live, sends a write with token 2",
            "client-1 writes with token 2: accepted",
            "client-0 writes with token 1: accepted",
        ],
        "the shortest counterexample: the check passes, the write waits, the lease moves on"
    );
    let fenced = verify(Environment::new(OneJob::CheckThenWrite).named("check-then-write"));
    assert_eq!(
        fenced.verdict("storage_in_lease_order").unwrap(),
        verdict("fenced_storage_in_lease_order")
    );
    fenced.expect_holds("storage_in_lease_order");
    fenced.expect_holds("stale_write_rejected");
}

/// Negative controls: each built-in property is violated by a client that breaks it, under a
/// fenced storage.
#[test]
fn a_forgotten_token_and_work_past_the_lease_are_caught() {
    let report = verify(Environment::new(OneJob::ForgetsToken));
    let cx = report
        .expect_violated("storage_in_lease_order")
        .expect("an always property has a counterexample");
    assert!(
        cx.steps
            .iter()
            .any(|s| s.text == "client-0 starts the job under lease 1"),
        "the client's own narration is used: {cx:?}"
    );
    assert!(cx
        .steps
        .iter()
        .any(|s| s.text.contains("writes without a token")));
    report.expect_violated("work_stopped_before_successor");
    report.expect_violated("single_believer");
    report.expect_holds("tokens_increase");
    report.expect_holds("clients_finish");
    // The companions say the properties were not vacuous.
    report.expect_holds("work_ran").expect_holds("lease_held");
    // The fenced writer keeps the storage in order where the token is sent.
    verify(Environment::new(Writer {
        writes: 1,
        retries: 0,
    }))
    .expect_holds("storage_in_lease_order");
}

/// The panic a test shows: the property, the sizes and the counterexample, step by step.
#[test]
fn expect_holds_panics_with_the_counterexample() {
    let report = verify(Environment::new(OneJob::ForgetsToken).named("forgets-token"));
    let message = std::panic::catch_unwind(|| {
        report.expect_holds("storage_in_lease_order");
    })
    .expect_err("violated");
    let message = message.downcast_ref::<String>().expect("a formatted panic");
    assert!(
        message.starts_with("forgets-token: property storage_in_lease_order is violated"),
        "{message}"
    );
    assert!(message.contains("shortest counterexample, "), "{message}");
    assert!(
        message.contains("1. client-0 -> lock-service: client-0 acquires the lease (token 1)"),
        "{message}"
    );
}

#[test]
fn a_client_stuck_after_a_refusal_violates_clients_finish() {
    let waits = verify(Environment::new(OneJob::StuckWhenRefused));
    waits.expect_holds("clients_finish");
    let refused = verify(Environment::new(OneJob::StuckWhenRefused).busy(Busy::Refuse));
    let cx = refused.expect_violated("clients_finish").expect("a path");
    assert!(
        cx.steps
            .iter()
            .any(|s| s.text.contains("is told the lease is held")),
        "{cx:?}"
    );
}

/// Counts its timer's firings: the state never repeats, so the space never closes.
#[derive(Clone, Debug)]
struct CountsForever;

impl Client for CountsForever {
    type State = u64;

    fn start(&self, out: &mut Commands) -> u64 {
        out.set_timer();
        0
    }

    fn on_event(&self, n: &u64, event: &Event, out: &mut Commands) -> Option<u64> {
        match event {
            Event::Timer => {
                out.set_timer();
                Some(n + 1)
            }
            _ => None,
        }
    }

    fn holds(&self, _: &u64) -> bool {
        false
    }

    fn finished(&self, _: &u64) -> bool {
        false
    }
}

/// `max_states` bounds what `states()` counts: an environment with exactly that many distinct
/// states is checked, one bound lower is refused naming the bound.
#[test]
fn max_states_is_exact_at_the_boundary() {
    let env = || {
        Environment::new(Writer {
            writes: 2,
            retries: 1,
        })
        .instances(3)
    };
    let all = verify(env()).states();
    assert!(all > 1_000, "{all} states");
    let exact = try_verify(env().max_states(all)).expect("exactly at the bound");
    assert_eq!(exact.states(), all);
    match try_verify(env().max_states(all - 1)) {
        Err(EnvironmentError::Unbounded { bound, .. }) => assert_eq!(bound, all - 1),
        other => panic!("one below the bound of {all}: {other:?}"),
    }
}

#[test]
fn bad_use_gets_a_clear_error_not_a_hang() {
    let none = try_verify(
        Environment::new(Writer {
            writes: 1,
            retries: 0,
        })
        .instances(0),
    );
    assert_eq!(none.unwrap_err(), EnvironmentError::NoInstances);
    assert_eq!(
        EnvironmentError::NoInstances.to_string(),
        "an environment needs at least 1 instance of the client; got 0"
    );

    let forever = try_verify(
        Environment::new(CountsForever)
            .max_states(20_000)
            .named("counter"),
    );
    let err = forever.unwrap_err();
    assert!(
        matches!(
            err,
            EnvironmentError::Unbounded {
                name: "counter",
                bound: 20_000,
                depth,
            } if depth > 1
        ),
        "{err:?}"
    );
    assert!(err
        .to_string()
        .contains("more than its bound of 20000 distinct states"));

    let taken = try_verify(
        Environment::new(Writer {
            writes: 1,
            retries: 0,
        })
        .always("single_believer", |_| true),
    );
    assert_eq!(
        taken.unwrap_err(),
        EnvironmentError::DuplicateProperty("single_believer")
    );

    let report = verify(Environment::new(Writer {
        writes: 1,
        retries: 0,
    }));
    let unknown = report.verdict("storage_in_order").unwrap_err();
    assert!(
        unknown
            .to_string()
            .starts_with("unknown property \"storage_in_order\"; this environment checks: storage_in_lease_order, "),
        "{unknown}"
    );
    let not_counted = report.verdict("effect_exactly_once").unwrap_err();
    assert!(
        not_counted.to_string().starts_with(
            "unknown property \"effect_exactly_once\" (Environment::count_effects adds it)"
        ),
        "{not_counted}"
    );
    let panic = std::panic::catch_unwind(|| {
        report.expect_holds("storage_in_order");
    })
    .expect_err("an unknown name panics");
    assert!(panic
        .downcast_ref::<String>()
        .is_some_and(|m| m.contains("unknown property")));
}

/// Properties of the user's own, `always` and `sometimes`, over every instance's state.
#[test]
fn predicates_of_your_own_are_checked() {
    let report = verify(
        Environment::new(Writer {
            writes: 1,
            retries: 0,
        })
        .instances(3)
        .always("never_all_done_while_one_holds", |states| {
            !(states
                .iter()
                .any(|s| matches!(s, WriterState::Holding { .. }))
                && states.iter().all(|s| **s == WriterState::Done))
        })
        .always("at_most_one_done", |states| {
            states.iter().filter(|s| ***s == WriterState::Done).count() <= 1
        })
        .sometimes("all_done", |states| {
            states.iter().all(|s| **s == WriterState::Done)
        })
        .sometimes("four_done", |states| states.len() == 4),
    );
    report.expect_holds("never_all_done_while_one_holds");
    let cx = report.expect_violated("at_most_one_done").expect("a path");
    assert!(
        cx.steps.len() >= 4,
        "two clients must each be granted and write"
    );
    report.expect_holds("all_done");
    report.expect_violated("four_done");
    // The writer says nothing of its work: work_stopped_before_successor holds vacuously, and
    // its companion says so.
    report.expect_holds("work_stopped_before_successor");
    report.expect_violated("work_ran");
    assert_eq!(report.verdict("all_done").unwrap(), Verdict::Holds);
    assert!(report.summary().contains("at_most_one_done"));
}

/// Writes once with its token; a lease-ended notice makes it stop believing.
#[derive(Clone, Debug)]
struct Listens;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Heard {
    Waiting,
    Writing(Lease),
    Lost,
    Done,
}

impl Client for Listens {
    type State = Heard;

    fn start(&self, out: &mut Commands) -> Heard {
        out.acquire();
        Heard::Waiting
    }

    fn on_event(&self, state: &Heard, event: &Event, out: &mut Commands) -> Option<Heard> {
        match (state, event) {
            (Heard::Waiting, Event::Granted(grant)) => {
                out.write(grant);
                Some(Heard::Writing(*grant))
            }
            (Heard::Writing(grant), Event::WriteAccepted { .. }) => {
                out.release(grant);
                Some(Heard::Done)
            }
            (Heard::Writing(_), Event::WriteRejected { .. }) => Some(Heard::Done),
            (Heard::Writing(_), Event::LeaseLost(_)) => Some(Heard::Lost),
            (Heard::Lost, Event::WriteAccepted { .. } | Event::WriteRejected { .. }) => {
                Some(Heard::Done)
            }
            _ => None,
        }
    }

    fn holds(&self, state: &Heard) -> bool {
        matches!(state, Heard::Writing(_))
    }

    fn finished(&self, state: &Heard) -> bool {
        *state == Heard::Done
    }
}

/// On etcd's and ZooKeeper's semantics the holder is told its lease ended, late: the notice is
/// reached (on Redis's, never), but it does not keep two clients from believing at once.
#[test]
fn a_lease_end_notice_arrives_late() {
    let told = |states: &[&Heard]| states.contains(&&Heard::Lost);
    let session = verify(
        Environment::new(Listens)
            .service(Service::ETCD)
            .sometimes("told_lease_lost", told),
    );
    session.expect_holds("told_lease_lost");
    session.expect_holds("storage_in_lease_order");
    let cx = session.expect_violated("single_believer").expect("a path");
    assert!(
        cx.steps.iter().all(|s| !s.text.contains("has ended")),
        "the second holder is granted before the notice is delivered: {cx:?}"
    );
    // The control: the same client on Redis's semantics is never told.
    let silent = verify(
        Environment::new(Listens)
            .service(Service::REDIS)
            .sometimes("told_lease_lost", told),
    );
    silent.expect_violated("told_lease_lost");
    assert_eq!(Service::ZOOKEEPER.end, LeaseEnd::Notified);
}

/// A lock service restarted without persistence hands out token 1 again: the fence accepts the
/// equal token from both holders and the older lease's write lands last.
#[test]
fn a_restart_without_persistence_breaks_the_tokens() {
    let writer = Writer {
        writes: 1,
        retries: 0,
    };
    let restarts = verify(Environment::new(writer.clone()).service_restarts(true));
    restarts.expect_violated("tokens_increase");
    let cx = restarts
        .expect_violated("storage_in_lease_order")
        .expect("a path");
    assert!(
        cx.steps.iter().any(
            |s| s.text == "the lock service restarts and loses its lease and its token counter"
        ),
        "{cx:?}"
    );
    // The control: without the restart both hold.
    verify(Environment::new(writer))
        .expect_holds("tokens_increase")
        .expect_holds("storage_in_lease_order");
}

/// Checks its lease on its own clock: the lease is its own until `ttl` ticks after it asked
/// (`from_reply`: after the grant arrived, the bug), minus one tick; its timer then ends the
/// belief. It writes as soon as it is granted; refused, it asks again.
#[derive(Clone, Debug)]
struct OwnClock {
    ttl: u64,
    from_reply: bool,
    fenced: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Timed {
    Asking { sent: u64 },
    Holding { grant: Lease, until: u64 },
    Over,
}

impl Client for OwnClock {
    type State = Timed;

    fn start(&self, out: &mut Commands) -> Timed {
        out.acquire();
        Timed::Asking {
            sent: out.now().expect("a clocked world"),
        }
    }

    fn on_event(&self, state: &Timed, event: &Event, out: &mut Commands) -> Option<Timed> {
        let now = out.now().expect("a clocked world");
        match (state, event) {
            (Timed::Asking { sent }, Event::Granted(grant)) => {
                let from = if self.from_reply { now } else { *sent };
                let until = from + self.ttl - 1;
                if now >= until {
                    return Some(Timed::Over);
                }
                if self.fenced {
                    out.write(grant);
                } else {
                    out.write_unfenced(grant);
                }
                out.set_timer_at(until);
                Some(Timed::Holding {
                    grant: *grant,
                    until,
                })
            }
            (Timed::Holding { .. }, Event::Timer) => Some(Timed::Over),
            // Held elsewhere: ask again, counting from this request.
            (Timed::Asking { .. }, Event::Refused) => {
                out.acquire();
                Some(Timed::Asking { sent: now })
            }
            _ => None,
        }
    }

    fn holds(&self, state: &Timed) -> bool {
        matches!(state, Timed::Holding { .. })
    }

    fn finished(&self, state: &Timed) -> bool {
        *state == Timed::Over
    }

    fn working_under(&self, state: &Timed) -> Option<Lease> {
        match state {
            Timed::Holding { grant, .. } => Some(*grant),
            _ => None,
        }
    }
}

fn clocked(client: OwnClock, drift: u64, pauses: bool) -> fencecheck::client::Verification {
    let ttl = client.ttl;
    verify(
        Environment::new(client)
            .named("own-clock")
            .service(Service::REDIS)
            .clocked(Timing {
                ttl,
                drift,
                horizon: 3 * ttl,
                pauses,
            }),
    )
}

/// The catalog's check-before-write and clock-drift models, written as a clocked client: the
/// stale write reaches the accept-all storage and not the fenced one, and two clients believe at
/// once only when clocks drift, as the catalog declares.
#[test]
fn check_before_write_on_a_clock_gets_the_catalogs_verdicts() {
    for (model, drift) in [("check-before-write", 0), ("clock-drift", 1)] {
        let built_in = catalog_run(model, Params::sized(2, 1, 0));
        let theirs = |name: &str| {
            built_in
                .properties
                .iter()
                .find(|p| p.property == name)
                .expect("declared")
                .verdict
        };
        let client = |fenced| OwnClock {
            ttl: 2,
            from_reply: false,
            fenced,
        };
        let plain = clocked(client(false), drift, false);
        let fenced = clocked(client(true), drift, false);
        for (ours, name, catalog) in [
            (&plain, "storage_in_lease_order", "storage_in_lease_order"),
            (
                &fenced,
                "storage_in_lease_order",
                "fenced_storage_in_lease_order",
            ),
            (&plain, "single_believer", "single_believer"),
            (&fenced, "single_believer", "single_believer"),
        ] {
            assert_eq!(
                ours.verdict(name).unwrap(),
                theirs(catalog),
                "{model} (drift {drift}): {name}\n{}",
                ours.summary()
            );
        }
    }
}

/// The clock's negative controls: a deadline counted from the grant's arrival outlives the lease
/// (the grant can arrive late), and a paused process misses its own deadline; counted from the
/// request, on time, the work stops before a successor's lease.
#[test]
fn a_deadline_from_the_reply_or_a_pause_is_caught() {
    let careful = OwnClock {
        ttl: 3,
        from_reply: false,
        fenced: true,
    };
    let on_time = clocked(careful.clone(), 0, false);
    on_time
        .expect_holds("work_stopped_before_successor")
        .expect_holds("single_believer")
        .expect_holds("work_ran")
        .expect_holds("lease_regranted");
    let reply = clocked(
        OwnClock {
            from_reply: true,
            ..careful.clone()
        },
        0,
        false,
    );
    let cx = reply
        .expect_violated("work_stopped_before_successor")
        .expect("a path");
    assert!(
        cx.steps.iter().any(|s| s.text.contains("time passes")),
        "{cx:?}"
    );
    let paused = clocked(careful.clone(), 0, true);
    paused.expect_violated("work_stopped_before_successor");
    let drifting = clocked(careful, 1, false);
    drifting.expect_violated("single_believer");
    drifting.expect_violated("work_stopped_before_successor");
}

#[test]
fn a_clock_that_makes_no_sense_is_refused() {
    let bad = try_verify(
        Environment::new(OwnClock {
            ttl: 2,
            from_reply: false,
            fenced: true,
        })
        .clocked(Timing {
            ttl: 0,
            drift: 0,
            horizon: 4,
            pauses: false,
        }),
    );
    assert_eq!(
        bad.unwrap_err().to_string(),
        "bad clock: ttl and horizon must be at least 1 tick; got ttl 0 and horizon 4"
    );
}
