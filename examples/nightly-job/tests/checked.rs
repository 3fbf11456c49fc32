//! The runner checked in fencecheck's world: two instances, leases that expire at any moment,
//! messages that wait (a paused process).

use fencecheck::client::{explain, Environment};
use nightly_job::{Guard, Runner};

/// The naive runner stores a stale report after the next holder's: the check-before-write
/// counterexample, shortest first.
#[test]
fn naive_runner_stores_a_stale_report() {
    let report =
        fencecheck::verify(Environment::new(Runner(Guard::CheckLease)).named("nightly-job"));
    let failure = std::panic::catch_unwind(|| {
        report.expect_holds("storage_in_lease_order");
    })
    .expect_err("the naive runner must fail");
    let message = failure.downcast_ref::<String>().expect("a message");
    assert_eq!(
        message,
        "nightly-job: property storage_in_lease_order is violated (storage never accepts a write \
         from an older lease after one from a newer lease; 2 instances, 156 states)
shortest counterexample, 11 steps:
   1. client-0 -> lock-service: client-0 acquires the lease (token 1)
   2. lock-service -> client-0: client-0 gets the lease (token 1) and makes sure it still holds it
   3. client-0 -> lock-service: client-0 checks its lease (token 1): live
   4. lock-service -> client-0: client-0 hears the lease is still its own, runs the job, sends the report
   5. lock-service: the lease of client-0 (token 1) expires
   6. client-1 -> lock-service: client-1 acquires the lease (token 2)
   7. lock-service -> client-1: client-1 gets the lease (token 2) and makes sure it still holds it
   8. client-1 -> lock-service: client-1 checks its lease (token 2): live
   9. lock-service -> client-1: client-1 hears the lease is still its own, runs the job, sends the report
  10. client-1 -> storage: client-1 writes without a token (under its lease 2): accepted
  11. client-0 -> storage: client-0 writes without a token (under its lease 1): accepted
      <- violates storage_in_lease_order: storage never accepts a write from an older lease after one from a newer lease
"
    );
    let cx = report
        .counterexample("storage_in_lease_order")
        .expect("violated");
    assert_eq!(cx.steps.len(), 11);
    assert!(explain(cx).ends_with("accepted\n"));
}

/// The fenced runner keeps the reports in lease order, and its checks are not vacuous: a stale
/// report is refused in some run, and every run ends with both instances done.
#[test]
fn fenced_runner_keeps_the_reports_in_order() {
    let report = fencecheck::verify(Environment::new(Runner(Guard::Token)).named("nightly-job"));
    report
        .expect_holds("storage_in_lease_order")
        .expect_holds("stale_write_rejected")
        .expect_holds("write_accepted")
        .expect_holds("clients_finish");
    assert_eq!(report.states(), 60, "{}", report.summary());
    // Two instances still believe at once: fencing protects the storage, not the beliefs.
    report.expect_violated("single_believer");
}

/// Fencing keeps the order, not the count: two instances can each run the job and store a report.
/// The runner that keys its report by the night stores it once.
#[test]
fn only_the_write_once_runner_stores_the_report_once() {
    let fenced = fencecheck::verify(
        Environment::new(Runner(Guard::Token))
            .named("nightly-job")
            .count_effects(),
    );
    assert_eq!(fenced.states(), 65);
    let cx = fenced
        .expect_violated("effect_exactly_once")
        .expect("a path");
    assert_eq!(cx.steps.len(), 7, "{}", explain(cx));
    assert_eq!(
        cx.steps.last().map(|s| s.text.as_str()),
        Some("client-1 writes with token 2: accepted"),
        "{}",
        explain(cx)
    );
    let once = fencecheck::verify(
        Environment::new(Runner(Guard::Once))
            .named("nightly-job")
            .count_effects(),
    );
    assert_eq!(once.states(), 65);
    once.expect_holds("effect_exactly_once")
        .expect_holds("storage_in_lease_order")
        .expect_holds("write_accepted")
        .expect_holds("clients_finish");
    // The naive runner stores the report twice as well.
    let naive = fencecheck::verify(
        Environment::new(Runner(Guard::CheckLease))
            .named("nightly-job")
            .count_effects(),
    );
    assert_eq!(naive.states(), 161);
    let cx = naive
        .expect_violated("effect_exactly_once")
        .expect("a path");
    assert_eq!(cx.steps.len(), 11, "{}", explain(cx));
}
