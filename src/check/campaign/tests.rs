use super::*;
use crate::check::linearize::{Answer, Call};
use crate::protocol::{FencePolicy, Token};
use std::time::Duration;

fn story(late_write_stored: bool) -> TrialRecord {
    let (t1, t2) = (Token::new(1), Token::new(2));
    let mut tr = Trace::new();
    tr.record(0, "w1", Observed::AcquireSent);
    tr.record(1_000, "w1", Observed::Granted { token: t1 });
    // w1 is paused before it writes; its lease (50 ms) runs out; w2 takes over.
    tr.record(60_000, "w2", Observed::AcquireSent);
    tr.record(61_000, "w2", Observed::Granted { token: t2 });
    tr.record(62_000, "w2", Observed::WriteSent { token: t2 });
    tr.record(63_000, "w2", Observed::WriteAccepted { token: t2 });
    tr.record(89_500, "w1", Observed::WriteSent { token: t1 });
    if late_write_stored {
        tr.record(90_000, "w1", Observed::WriteAccepted { token: t1 });
    } else {
        let rejected = Observed::WriteRejected {
            token: t1,
            highest: t2,
        };
        tr.record(90_000, "w1", rejected);
    }
    // The same story as register operations: w2's write, w1's late one, the final read.
    let w = |token: Token, invoked, completed| Operation {
        key: 0,
        call: Call::Write { token, value: 1 },
        invoked,
        completed: Some(completed),
    };
    let w1_answer = if late_write_stored {
        Answer::Accepted
    } else {
        Answer::Stale { highest: t2 }
    };
    let last = if late_write_stored { t1 } else { t2 };
    let register = vec![
        w(t2, 62_000, (63_000, Answer::Accepted)),
        w(t1, 89_500, (90_000, w1_answer)),
        Operation {
            key: 0,
            call: Call::Read,
            invoked: 91_000,
            completed: Some((91_001, Answer::Read(Some((last, 1))))),
        },
    ];
    TrialRecord {
        trace: tr,
        final_value: 1,
        faults: vec![Fault {
            who: "w1".into(),
            what: "paused".into(),
            from_us: 2_500,
            to_us: 89_000,
        }],
        register,
    }
}

/// w1's write reaches the storage at once but its answer is held up (a stalled link) past
/// w1's lease, w2's grant and w2's accepted write.
fn late_answer() -> TrialRecord {
    let (t1, t2) = (Token::new(1), Token::new(2));
    let mut tr = Trace::new();
    tr.record(0, "w1", Observed::AcquireSent);
    tr.record(1_000, "w1", Observed::Granted { token: t1 });
    tr.record(2_000, "w1", Observed::WriteSent { token: t1 });
    tr.record(60_000, "w2", Observed::AcquireSent);
    tr.record(61_000, "w2", Observed::Granted { token: t2 });
    tr.record(62_000, "w2", Observed::WriteSent { token: t2 });
    tr.record(63_000, "w2", Observed::WriteAccepted { token: t2 });
    tr.record(90_000, "w1", Observed::WriteAccepted { token: t1 });
    let w = |token: Token, value, invoked, completed| Operation {
        key: 0,
        call: Call::Write { token, value },
        invoked,
        completed: Some((completed, Answer::Accepted)),
    };
    let register = vec![
        w(t1, 1, 2_000, 90_000),
        w(t2, 2, 62_000, 63_000),
        Operation {
            key: 0,
            call: Call::Read,
            invoked: 91_000,
            completed: Some((91_001, Answer::Read(Some((t2, 2))))),
        },
    ];
    TrialRecord {
        trace: tr,
        final_value: 2,
        faults: vec![],
        register,
    }
}

#[test]
fn a_late_answer_to_an_early_write_breaks_no_rule() {
    let record = late_answer();
    let verdict = judge(
        &record,
        &Replay::new(Duration::from_millis(50), FencePolicy::Fenced),
    );
    assert_eq!((verdict.accepted, verdict.lost), (2, 0));
    assert!(!verdict.violated(), "{verdict:?}");
    // Taken in the order the answers arrived, the same trial looks out of lease order.
    let mut by_answer = History::new();
    by_answer.granted("w1", Token::new(1));
    by_answer.granted("w2", Token::new(2));
    by_answer.accepted("w2");
    by_answer.accepted("w1");
    assert!(storage_in_lease_order(&by_answer).is_err());
}

/// `record` with each worker's work recorded: from 1 µs after each grant to its write's
/// answer.
fn with_work(record: &TrialRecord) -> TrialRecord {
    let mut events: Vec<(u64, String, Observed)> = Vec::new();
    let mut held: Vec<(String, crate::protocol::Token)> = Vec::new();
    for e in record.trace.events() {
        events.push((e.at_us, e.who.clone(), e.what));
        match e.what {
            Observed::Granted { token } => {
                events.push((e.at_us + 1, e.who.clone(), Observed::WorkStarted { token }));
                held.push((e.who.clone(), token));
            }
            Observed::WriteAccepted { token } | Observed::WriteRejected { token, .. } => {
                events.push((e.at_us, e.who.clone(), Observed::WorkStopped { token }));
            }
            _ => {}
        }
    }
    events.sort_by_key(|(at, _, _)| *at);
    let mut trace = Trace::new();
    for (at, who, what) in events {
        trace.record(at, &who, what);
    }
    TrialRecord {
        trace,
        ..record.clone()
    }
}

#[test]
fn a_trial_is_struck_by_a_refused_write_or_by_work_after_a_later_grant() {
    let replay = Replay::new(Duration::from_millis(50), FencePolicy::AcceptAll);
    let refused = judge(&story(false), &replay);
    assert!(refused.struck, "a write refused as stale");
    // The late write stored, and no work records: nothing shows the fault bit.
    let blind = judge(&story(true), &replay);
    assert!(!blind.struck);
    // The same trial with its work recorded: w1 worked on after w2's grant.
    let seen = judge(&with_work(&story(true)), &replay.work_may_overlap());
    assert!(seen.struck, "{:?}", seen.validation);
    let mut totals = Totals::default();
    totals.add_struck_by("pause", &blind);
    totals.add_struck_by("pause", &seen);
    totals.add_struck_by("stall", &refused);
    let tally = |nemesis: &str, trials, struck, violated| Strikes {
        nemesis: nemesis.into(),
        trials,
        struck,
        violated,
    };
    assert_eq!(
        totals.strikes,
        [tally("pause", 2, 1, 2), tally("stall", 1, 1, 1)]
    );
    assert_eq!(totals.trials, 3);
    assert!(totals.to_string().contains(
        "\nnemesis pause          struck 1 of 2 trials, broke a rule in 2 (struck: a write \
         refused"
    ));
}

#[test]
fn a_fenced_trial_holds_and_the_unfenced_one_is_caught_four_ways() {
    let ttl = Duration::from_millis(50);
    let fenced = judge(&story(false), &Replay::new(ttl, FencePolicy::Fenced));
    assert_eq!(
        (
            fenced.acquisitions,
            fenced.accepted,
            fenced.rejected,
            fenced.lost
        ),
        (2, 1, 1, 0)
    );
    assert_eq!(
        fenced.overlap_us, 2_000,
        "w2's work (61-63 ms) inside w1's (1-90 ms)"
    );
    assert!(!fenced.violated(), "{fenced:?}");

    assert_eq!(fenced.linearizable.as_ref().map(|c| c.operations), Ok(3));

    // The late write stored: an increment lost, the lease order broken; as a fenced store's
    // trace the model cannot explain it, and as a fenced register it cannot be linearized.
    let unfenced = judge(&story(true), &Replay::new(ttl, FencePolicy::Fenced));
    assert_eq!((unfenced.accepted, unfenced.lost), (2, 1));
    assert!(unfenced.lease_order.is_err());
    assert!(unfenced.validation.is_err());
    assert!(unfenced.linearizable.is_err());
    assert!(unfenced.violated());
    // Each of the four alone makes a trial violated.
    for broken in 0..4 {
        let mut v = fenced.clone();
        match broken {
            0 => v.lost = 1,
            1 => v.lease_order = unfenced.lease_order.clone(),
            2 => v.validation = unfenced.validation.clone(),
            _ => v.linearizable = unfenced.linearizable.clone(),
        }
        assert!(v.violated(), "{broken}");
    }

    let mut totals = Totals::default();
    totals.add(&fenced);
    totals.add(&unfenced);
    assert_eq!(
        (
            totals.trials,
            totals.acquisitions,
            totals.accepted,
            totals.rejected,
            totals.lost
        ),
        (2, 4, 3, 1, 1)
    );
    assert_eq!(
        (
            totals.out_of_order,
            totals.explained,
            totals.linearizable,
            totals.violated
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(totals.max_overlap_us, 2_000);
    let text = totals.to_string();
    assert!(text.contains("increments lost        1\n"), "{text}");
    assert!(text.contains("storage_in_lease_order held in 1 of 2 trials"));
    assert!(text.contains("1 of 2 traces explained"));
    assert!(text.contains("1 of 2 register histories linearizable"));
    assert!(text.ends_with("trials violated        1"));
    assert_eq!(worst(&[fenced.clone(), unfenced, fenced]), Some(1));
    assert_eq!(worst(&[]), None);
}
