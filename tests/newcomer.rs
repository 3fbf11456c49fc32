//! A newcomer's five lock clients, written from the README and rustdoc with `fencecheck::client`
//! imports only, and the verdicts each must get: check-then-write, a token writer, a deadline
//! counted from the reply, a retry that never gives up, and a release by name.

use fencecheck::client::{
    verify, Client, Commands, Environment, Event, FencePolicy, Lease, Service, Timing, Verdict,
    Verification,
};

/// Asks for the lease and writes once with it; `check_first` asks whether the lease is still
/// live and then writes without the token (the check-then-write mistake); `fenced` sends the
/// token. Releases after the write.
#[derive(Clone, Debug)]
struct OneJob {
    check_first: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Job {
    Asking,
    Checking(Lease),
    Writing(Lease),
    Done,
}

impl Client for OneJob {
    type State = Job;

    fn start(&self, out: &mut Commands) -> Job {
        out.acquire();
        Job::Asking
    }

    fn on_event(&self, state: &Job, event: &Event, out: &mut Commands) -> Option<Job> {
        match (state, event) {
            (Job::Asking, Event::Granted(lease)) if self.check_first => {
                out.check_lease(lease);
                Some(Job::Checking(*lease))
            }
            (Job::Asking, Event::Granted(lease)) => {
                out.write(lease);
                Some(Job::Writing(*lease))
            }
            (Job::Checking(lease), Event::LeaseStatus { live: true, .. }) => {
                out.write_unfenced(lease);
                Some(Job::Writing(*lease))
            }
            (Job::Checking(_), Event::LeaseStatus { live: false, .. }) => Some(Job::Done),
            (Job::Writing(lease), Event::WriteAccepted { .. }) => {
                out.release(lease);
                Some(Job::Done)
            }
            (Job::Writing(_), Event::WriteRejected { .. }) => Some(Job::Done),
            _ => None,
        }
    }

    fn holds(&self, state: &Job) -> bool {
        matches!(state, Job::Checking(_) | Job::Writing(_))
    }

    fn finished(&self, state: &Job) -> bool {
        *state == Job::Done
    }
}

/// 1. Check, then write: the lease can expire between the check and the write, and storage that
///    takes every write keeps the stale one. The token writer at fenced storage is the control.
#[test]
fn check_then_write_loses_the_lease_order() {
    let checked =
        verify(Environment::new(OneJob { check_first: true }).storage(FencePolicy::AcceptAll));
    let cx = checked
        .expect_violated("storage_in_lease_order")
        .expect("a path");
    assert!(
        cx.steps.iter().any(|s| s.text.contains("checks its lease")),
        "{cx:?}"
    );
    verify(Environment::new(OneJob { check_first: false }))
        .expect_holds("storage_in_lease_order")
        .expect_holds("clients_finish");
}

/// 2. A token writer on a clock, where a busy request waits in line (etcd, ZooKeeper, the
///    default): the fence keeps the lease order and every writer finishes, served on release or
///    on expiry; two writers may still believe at once.
#[test]
fn a_token_writer_finishes_on_a_clock() {
    for service in [Service::default(), Service::ETCD, Service::ZOOKEEPER] {
        for horizon in [5, 12] {
            let report = verify(
                Environment::new(OneJob { check_first: false })
                    .service(service)
                    .clocked(Timing {
                        ttl: 3,
                        drift: 0,
                        horizon,
                        pauses: false,
                    }),
            );
            report
                .expect_holds("storage_in_lease_order")
                .expect_holds("clients_finish");
            report.expect_violated("single_believer");
        }
    }
    // A failing expectation marks the step that breaks the property and says why.
    let report = verify(Environment::new(OneJob { check_first: false }));
    let failed = std::panic::catch_unwind(|| {
        report.expect_holds("single_believer");
    })
    .expect_err("single_believer is violated");
    let message = failed.downcast_ref::<String>().expect("a message");
    let marked = message
        .lines()
        .find(|l| l.contains("<- violates single_believer: "))
        .expect("the breaking step marked");
    assert!(marked.contains("at most one"), "{message}");
}

/// Believes its lease until `ttl - 1` ticks on its own clock after it asked (`from_reply`:
/// after the grant arrived, the mistake), writes with the token and gives the lease back: by
/// the lease (`release`, compare-and-delete) or by the lock's name (`release_by_name`, a plain
/// `DEL key`). Refused, it asks again.
#[derive(Clone, Debug)]
struct Deadline {
    ttl: u64,
    from_reply: bool,
    by_name: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Timed {
    Asking { sent: u64 },
    Working { lease: Lease, until: u64 },
    Over,
}

impl Client for Deadline {
    type State = Timed;

    fn start(&self, out: &mut Commands) -> Timed {
        out.acquire();
        Timed::Asking {
            sent: out.now().unwrap_or(0),
        }
    }

    fn on_event(&self, state: &Timed, event: &Event, out: &mut Commands) -> Option<Timed> {
        let now = out.now().unwrap_or(0);
        match (state, event) {
            (Timed::Asking { sent }, Event::Granted(lease)) => {
                let until = if self.from_reply { now } else { *sent } + self.ttl - 1;
                if now >= until {
                    return Some(Timed::Over);
                }
                out.write(lease);
                out.set_timer_at(until);
                Some(Timed::Working {
                    lease: *lease,
                    until,
                })
            }
            (Timed::Asking { .. }, Event::Refused) => {
                out.acquire();
                Some(Timed::Asking { sent: now })
            }
            (Timed::Working { lease, .. }, Event::WriteAccepted { .. }) => {
                if self.by_name {
                    out.release_by_name();
                } else {
                    out.release(lease);
                }
                Some(Timed::Over)
            }
            (Timed::Working { .. }, Event::Timer | Event::WriteRejected { .. }) => {
                Some(Timed::Over)
            }
            _ => None,
        }
    }

    fn holds(&self, state: &Timed) -> bool {
        matches!(state, Timed::Working { .. })
    }

    fn finished(&self, state: &Timed) -> bool {
        *state == Timed::Over
    }

    fn working_under(&self, state: &Timed) -> Option<Lease> {
        match state {
            Timed::Working { lease, .. } => Some(*lease),
            _ => None,
        }
    }
}

fn on_redis(client: Deadline, instances: usize, horizon: u64) -> Verification {
    let ttl = client.ttl;
    verify(
        Environment::new(client)
            .instances(instances)
            .service(Service::REDIS)
            .clocked(Timing {
                ttl,
                drift: 0,
                horizon,
                pauses: false,
            }),
    )
}

/// 3. A deadline counted from the grant's arrival outlives the lease (the grant can arrive
///    late): the work runs on under a successor. Counted from the request, it stops in time.
#[test]
fn a_deadline_dated_by_the_reply_outlives_the_lease() {
    let careful = Deadline {
        ttl: 3,
        from_reply: false,
        by_name: false,
    };
    let reply = on_redis(
        Deadline {
            from_reply: true,
            ..careful.clone()
        },
        2,
        9,
    );
    reply
        .expect_violated("work_stopped_before_successor")
        .expect("a path");
    on_redis(careful, 2, 9)
        .expect_holds("work_stopped_before_successor")
        .expect_holds("single_believer");
}

/// 5. A release by name (`DEL key`) that arrives after its lease expired deletes the
///    successor's lease, and a third client takes the lock while the second still works. The
///    compare-and-delete release frees nothing that is not its own.
#[test]
fn a_release_by_name_frees_the_successors_lease() {
    let by_lease = Deadline {
        ttl: 2,
        from_reply: false,
        by_name: false,
    };
    let by_name = Deadline {
        by_name: true,
        ..by_lease.clone()
    };
    let stale = on_redis(by_name, 3, 4);
    let cx = stale.expect_violated("single_believer").expect("a path");
    assert!(
        cx.steps
            .iter()
            .any(|s| s.text.contains("who still holds it")),
        "{}",
        fencecheck::client::explain(cx)
    );
    let checked = on_redis(by_lease, 3, 4);
    checked.expect_holds("single_believer");
}

/// Asks for the lease (refused, asks again, without end) and writes with its token; a rejected
/// write is sent again, `tries` more times at most, or forever.
#[derive(Clone, Debug)]
struct Retrying {
    tries: Option<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Retry {
    Asking,
    Writing { lease: Lease, left: u8 },
    Done,
}

impl Client for Retrying {
    type State = Retry;

    fn start(&self, out: &mut Commands) -> Retry {
        out.acquire();
        Retry::Asking
    }

    fn on_event(&self, state: &Retry, event: &Event, out: &mut Commands) -> Option<Retry> {
        match (state, event) {
            (Retry::Asking, Event::Refused) => {
                out.acquire();
                Some(Retry::Asking)
            }
            (Retry::Asking, Event::Granted(lease)) => {
                out.write(lease);
                let left = self.tries.unwrap_or(0);
                Some(Retry::Writing {
                    lease: *lease,
                    left,
                })
            }
            (Retry::Writing { lease, .. }, Event::WriteAccepted { .. }) => {
                out.release(lease);
                Some(Retry::Done)
            }
            (Retry::Writing { lease, left }, Event::WriteRejected { .. }) => {
                match (self.tries, left) {
                    (Some(_), 0) => Some(Retry::Done),
                    _ => {
                        out.write(lease);
                        let left = left.saturating_sub(1);
                        Some(Retry::Writing {
                            lease: *lease,
                            left,
                        })
                    }
                }
            }
            _ => None,
        }
    }

    fn holds(&self, state: &Retry) -> bool {
        matches!(state, Retry::Writing { .. })
    }

    fn finished(&self, state: &Retry) -> bool {
        *state == Retry::Done
    }
}

/// 4. A rejected write sent again and again never gets through (the fence only grows): the run
///    loops forever, and the counterexample is the loop. A bounded retry ends. Asking again and
///    again after a refusal ends too: the holder lets go (it releases, or its lease expires),
///    and a fair scheduler lets it.
#[test]
fn a_retry_that_never_gives_up_loops_forever() {
    for service in [Service::REDIS, Service::default()] {
        let forever = verify(Environment::new(Retrying { tries: None }).service(service));
        let cx = forever.expect_violated("clients_finish").expect("a path");
        let from = cx.loop_from.expect("a loop");
        let text = fencecheck::client::explain(cx);
        assert!(text.contains(&format!("from step {} the run repeats", from + 1)));
        assert!(
            cx.steps[from..].iter().any(|s| s.text.contains("rejected")),
            "{text}"
        );
        // The control: the same client with a bounded write retry finishes, although it still
        // asks again after every refusal without end (that loop is broken by the holder).
        let bounded = verify(Environment::new(Retrying { tries: Some(2) }).service(service));
        bounded.expect_holds("clients_finish");
    }
    let clocked = verify(
        Environment::new(Retrying { tries: None })
            .service(Service::REDIS)
            .clocked(Timing {
                ttl: 2,
                drift: 0,
                horizon: 4,
                pauses: false,
            }),
    );
    assert_eq!(
        clocked.verdict("clients_finish").unwrap(),
        Verdict::Violated
    );
}
