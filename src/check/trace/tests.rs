//! Trace validation's tests: traces the model explains, and traces it must refuse.

use super::*;
use crate::protocol::{Observed, Token};

const MS: u64 = 1_000;

fn t(n: u64) -> Token {
    Token::new(n)
}

fn replay() -> Replay {
    Replay::new(Duration::from_millis(100), FencePolicy::Fenced)
}

/// The seed's story, fenced: A is granted 10, writes, pauses past its lease; B is granted 11
/// and writes; A's late write is rejected naming 11.
fn pause_story() -> Trace {
    let mut tr = Trace::new();
    tr.record(0, "A", Observed::AcquireSent);
    tr.record(MS, "A", Observed::Granted { token: t(10) });
    tr.record(2 * MS, "A", Observed::WriteSent { token: t(10) });
    tr.record(3 * MS, "A", Observed::WriteAccepted { token: t(10) });
    tr.record(150 * MS, "B", Observed::AcquireSent);
    tr.record(151 * MS, "B", Observed::Granted { token: t(11) });
    tr.record(152 * MS, "B", Observed::WriteSent { token: t(11) });
    tr.record(153 * MS, "B", Observed::WriteAccepted { token: t(11) });
    tr.record(160 * MS, "A", Observed::LeaseLost { token: t(10) });
    tr.record(161 * MS, "A", Observed::WriteSent { token: t(10) });
    tr
}

fn unexplained(tr: &Trace, r: &Replay) -> (usize, String) {
    match validate(tr, r) {
        Err(TraceError::Unexplained { index, reason, .. }) => (index, reason),
        other => panic!("expected an unexplained event, got {other:?}\n{tr}"),
    }
}

#[test]
fn the_fenced_pause_story_is_explained() {
    let mut tr = pause_story();
    let rejected = Observed::WriteRejected {
        token: t(10),
        highest: t(11),
    };
    tr.record(162 * MS, "A", rejected);
    let v = validate(&tr, &replay()).unwrap();
    assert_eq!((v.events, v.grants), (11, 2));
    assert!(v.states >= 11, "{v}");
    assert!(v.to_string().starts_with("11 events (2 grants) explained"));
}

#[test]
fn fenced_storage_that_accepts_the_late_write_is_caught_and_unfenced_storage_explains_it() {
    let mut tr = pause_story();
    tr.record(162 * MS, "A", Observed::WriteAccepted { token: t(10) });
    let (index, reason) = unexplained(&tr, &replay());
    assert_eq!(index, 10);
    assert!(
        reason.ends_with("it answers rejected (highest 11)"),
        "{reason}"
    );
    let unfenced = Replay::new(Duration::from_millis(100), FencePolicy::AcceptAll);
    assert!(validate(&tr, &unfenced).is_ok());
}

#[test]
fn a_grant_while_the_lease_is_live_is_caught() {
    let mut tr = Trace::new();
    tr.record(0, "A", Observed::AcquireSent);
    tr.record(MS, "A", Observed::Granted { token: t(1) });
    tr.record(50 * MS, "B", Observed::AcquireSent);
    tr.record(51 * MS, "B", Observed::Granted { token: t(2) });
    let err = validate(&tr, &replay()).unwrap_err();
    let TraceError::Unexplained {
        index,
        ref reason,
        ref state,
        ref timeline,
        ..
    } = err
    else {
        panic!("{err:?}")
    };
    assert_eq!(index, 3);
    assert!(reason.ends_with("it answers busy"), "{reason}");
    assert!(state.starts_with("lease of A (token 1) until "), "{state}");
    assert!(
        timeline.lines().last().unwrap().starts_with(">>  4."),
        "{timeline}"
    );
    assert!(err.to_string().contains("B is granted the lease, token 2"));
    // Past the lease (and the slack) the same grant is explained.
    let mut late = Trace::new();
    for e in &tr.events()[..2] {
        late.record(e.at_us, &e.who, e.what);
    }
    late.record(104 * MS, "B", Observed::AcquireSent);
    late.record(104 * MS, "B", Observed::Granted { token: t(2) });
    assert!(validate(&late, &replay()).is_ok());
    // A grant just inside the slack is explained; just outside it is not.
    let slack = replay().slack_us;
    for (at, ok) in [(101 * MS - slack, true), (99 * MS - slack, false)] {
        let mut edge = Trace::new();
        for e in &tr.events()[..2] {
            edge.record(e.at_us, &e.who, e.what);
        }
        edge.record(at, "B", Observed::AcquireSent);
        edge.record(at, "B", Observed::Granted { token: t(2) });
        assert_eq!(validate(&edge, &replay()).is_ok(), ok, "grant at {at} µs");
    }
}

#[test]
fn a_repeated_or_smaller_token_is_caught() {
    for second in [7, 6] {
        let mut tr = Trace::new();
        tr.record(0, "A", Observed::AcquireSent);
        tr.record(MS, "A", Observed::Granted { token: t(7) });
        tr.record(200 * MS, "B", Observed::AcquireSent);
        tr.record(201 * MS, "B", Observed::Granted { token: t(second) });
        let (index, reason) = unexplained(&tr, &replay());
        assert_eq!(index, 3);
        assert!(reason.contains(&format!("{second} is not larger than the last grant's 7")));
    }
}

#[test]
fn busy_renewals_and_releases_must_match_the_lease() {
    let base = |tr: &mut Trace| {
        tr.record(0, "A", Observed::AcquireSent);
        tr.record(MS, "A", Observed::Granted { token: t(1) });
    };
    // Busy while A's lease is live; renewed while live; released.
    let mut ok = Trace::new();
    base(&mut ok);
    ok.record(10 * MS, "B", Observed::AcquireSent);
    ok.record(11 * MS, "B", Observed::Busy);
    ok.record(80 * MS, "A", Observed::RenewSent { token: t(1) });
    ok.record(
        81 * MS,
        "A",
        Observed::Renewed {
            token: t(1),
            ok: true,
        },
    );
    ok.record(150 * MS, "B", Observed::AcquireSent);
    ok.record(151 * MS, "B", Observed::Busy);
    ok.record(160 * MS, "A", Observed::ReleaseSent { token: t(1) });
    ok.record(
        161 * MS,
        "A",
        Observed::Released {
            token: t(1),
            ok: true,
        },
    );
    ok.record(170 * MS, "B", Observed::AcquireSent);
    ok.record(171 * MS, "B", Observed::Granted { token: t(2) });
    assert_eq!(validate(&ok, &replay()).unwrap().grants, 2);

    // Busy long after the lease ran out.
    let mut busy = Trace::new();
    base(&mut busy);
    busy.record(300 * MS, "B", Observed::AcquireSent);
    busy.record(301 * MS, "B", Observed::Busy);
    assert!(unexplained(&busy, &replay())
        .1
        .ends_with("it answers with a grant"));

    // A renewal refused while the lease is live, and one granted after it ran out.
    for (at, answer, says) in [(50, false, "renewed: true"), (300, true, "renewed: false")] {
        let mut tr = Trace::new();
        base(&mut tr);
        tr.record(at * MS, "A", Observed::RenewSent { token: t(1) });
        tr.record(
            at * MS + 1,
            "A",
            Observed::Renewed {
                token: t(1),
                ok: answer,
            },
        );
        assert!(unexplained(&tr, &replay()).1.ends_with(says));
    }

    // After the lease ran out either release answer fits; while live, only "released".
    for (at, answer, fits) in [(300, false, true), (300, true, true), (50, false, false)] {
        let mut tr = Trace::new();
        base(&mut tr);
        tr.record(at * MS, "A", Observed::ReleaseSent { token: t(1) });
        tr.record(
            at * MS + 1,
            "A",
            Observed::Released {
                token: t(1),
                ok: answer,
            },
        );
        assert_eq!(
            validate(&tr, &replay()).is_ok(),
            fits,
            "release at {at} ms: {answer}"
        );
    }
}

#[test]
fn overlapping_requests_are_handled_in_whichever_order_explains_them() {
    // B's write is handled before A's although A's answer is observed first: A's is rejected
    // naming B's token, which only that order explains.
    let mut tr = Trace::new();
    tr.record(0, "A", Observed::AcquireSent);
    tr.record(MS, "A", Observed::Granted { token: t(1) });
    tr.record(200 * MS, "B", Observed::AcquireSent);
    tr.record(201 * MS, "B", Observed::Granted { token: t(2) });
    tr.record(202 * MS, "A", Observed::WriteSent { token: t(1) });
    tr.record(203 * MS, "B", Observed::WriteSent { token: t(2) });
    let rejected = Observed::WriteRejected {
        token: t(1),
        highest: t(2),
    };
    tr.record(204 * MS, "A", rejected);
    tr.record(205 * MS, "B", Observed::WriteAccepted { token: t(2) });
    assert!(validate(&tr, &replay()).is_ok());
}

#[test]
fn unknown_tokens_stray_answers_and_bounds_are_errors() {
    let mut tr = Trace::new();
    tr.record(0, "A", Observed::WriteSent { token: t(3) });
    assert!(unexplained(&tr, &replay())
        .1
        .contains("token 3 was never granted"));

    let mut stray = Trace::new();
    stray.record(0, "A", Observed::Busy);
    assert!(unexplained(&stray, &replay()).1.contains("did not send"));

    let mut tiny = replay();
    tiny.max_states = 2;
    assert_eq!(
        validate(&pause_story(), &tiny),
        Err(TraceError::TooLarge { states: 3 })
    );
    let zero = Replay::new(Duration::ZERO, FencePolicy::Fenced);
    assert_eq!(validate(&Trace::new(), &zero), Err(TraceError::ZeroTtl));
    assert_eq!(replay().slack(Duration::from_millis(7)).slack_us, 7_000);
    assert_eq!(replay().slack_us, 3_000);
}
