//! Property tests: random interleavings of acquire / extend / release / advance-time / write from
//! several owners, run through the protocol core, through `LeaseLock` + `FencedStore`, and through
//! a small reference written here from the rules in plain words. All three must answer alike,
//! and invariants (a)-(d) must hold. Negative control: the same property against TTL-only
//! (accept-all) storage must fail.

use fencecheck::local::{AcquireError, FencedStore, LeaseLock, ManualClock};
use fencecheck::protocol::{
    Acquire, Fence, FencePolicy, LeaseError, LeaseTable, Token, TokenOrder,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const TTL: u64 = 10;
const OWNERS: u8 = 3;

#[derive(Clone, Debug)]
enum Op {
    Acquire(u8),
    Extend(u8),
    Release(u8),
    Advance(u64),
    Write(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..OWNERS).prop_map(Op::Acquire),
        1 => (0..OWNERS).prop_map(Op::Extend),
        1 => (0..OWNERS).prop_map(Op::Release),
        2 => (0..=2 * TTL).prop_map(Op::Advance),
        3 => (0..OWNERS).prop_map(Op::Write),
    ]
}

/// What an operation answered, in terms all three implementations share.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    Granted {
        token: u64,
        expires_at: u64,
    },
    Busy {
        holder: u8,
        token: u64,
        expires_at: u64,
    },
    Extended {
        expires_at: u64,
    },
    Released,
    NotHolder,
    Expired,
    Written,
    Stale {
        highest: u64,
    },
    NoToken,
    TimePassed,
}

fn from_error(e: LeaseError) -> Answer {
    match e {
        LeaseError::NotHolder { .. } => Answer::NotHolder,
        LeaseError::Expired { .. } => Answer::Expired,
        other => panic!("unexpected error in a small test: {other}"),
    }
}

/// The rules in plain words: one lease at a time; it is free once its deadline has come; every
/// grant gets the next number; only the current lease's owner and number may extend (while it
/// lives) or release it; storage keeps the highest number it accepted and refuses lower ones.
#[derive(Default)]
struct Reference {
    now: u64,
    last_number: u64,
    lease: Option<(u8, u64, u64)>,
    highest: u64,
    fenced: bool,
}

impl Reference {
    fn apply(&mut self, op: &Op, token_of: Option<u64>) -> Answer {
        match *op {
            Op::Acquire(who) => match self.lease {
                Some((holder, number, deadline)) if deadline > self.now => Answer::Busy {
                    holder,
                    token: number,
                    expires_at: deadline,
                },
                _ => {
                    self.last_number += 1;
                    self.lease = Some((who, self.last_number, self.now + TTL));
                    Answer::Granted {
                        token: self.last_number,
                        expires_at: self.now + TTL,
                    }
                }
            },
            Op::Extend(who) => match (self.lease, token_of) {
                (Some((holder, number, deadline)), Some(t)) if holder == who && number == t => {
                    if deadline > self.now {
                        self.lease = Some((holder, number, self.now + TTL));
                        Answer::Extended {
                            expires_at: self.now + TTL,
                        }
                    } else {
                        Answer::Expired
                    }
                }
                (_, None) => Answer::NoToken,
                _ => Answer::NotHolder,
            },
            Op::Release(who) => match (self.lease, token_of) {
                (Some((holder, number, _)), Some(t)) if holder == who && number == t => {
                    self.lease = None;
                    Answer::Released
                }
                (_, None) => Answer::NoToken,
                _ => Answer::NotHolder,
            },
            Op::Advance(dt) => {
                self.now += dt;
                Answer::TimePassed
            }
            Op::Write(_) => match token_of {
                None => Answer::NoToken,
                Some(t) if self.fenced && t < self.highest => Answer::Stale {
                    highest: self.highest,
                },
                Some(t) => {
                    self.highest = self.highest.max(t);
                    Answer::Written
                }
            },
        }
    }
}

/// The protocol core driven directly.
struct Core {
    now: u64,
    table: LeaseTable<u8>,
    fence: Fence,
}

impl Core {
    fn apply(&mut self, op: &Op, token_of: Option<Token>) -> Answer {
        match (op, token_of) {
            (Op::Acquire(who), _) => match self.table.acquire(*who, self.now, TTL).unwrap() {
                Acquire::Granted(l) => Answer::Granted {
                    token: l.token.get(),
                    expires_at: l.expires_at,
                },
                Acquire::Busy {
                    holder,
                    token,
                    expires_at,
                } => Answer::Busy {
                    holder,
                    token: token.get(),
                    expires_at,
                },
            },
            (Op::Advance(dt), _) => {
                self.now += dt;
                Answer::TimePassed
            }
            (_, None) => Answer::NoToken,
            (Op::Extend(who), Some(t)) => match self.table.extend(who, t, self.now, TTL) {
                Ok(l) => Answer::Extended {
                    expires_at: l.expires_at,
                },
                Err(e) => from_error(e),
            },
            (Op::Release(who), Some(t)) => match self.table.release(who, t) {
                Ok(_) => Answer::Released,
                Err(e) => from_error(e),
            },
            (Op::Write(_), Some(t)) => match self.fence.admit(t) {
                Ok(()) => Answer::Written,
                Err(s) => Answer::Stale {
                    highest: s.highest.get(),
                },
            },
        }
    }
}

/// The in-process lock and store, on a manual clock.
struct Local {
    clock: Arc<ManualClock>,
    lock: LeaseLock<u8, Arc<ManualClock>>,
    store: FencedStore<u8>,
}

impl Local {
    fn apply(&mut self, op: &Op, token_of: Option<Token>) -> Answer {
        match (op, token_of) {
            // The guard API: a refusal there is read without the mutex, and names no holder.
            (Op::Acquire(who), _) => match self.lock.try_acquire(*who) {
                Ok(guard) => {
                    let l = guard.into_lease();
                    Answer::Granted {
                        token: l.token.get(),
                        expires_at: l.expires_at,
                    }
                }
                Err(AcquireError::Busy { token, expires_at }) => Answer::Busy {
                    holder: self.lock.holder().expect("busy: a live lease").owner,
                    token: token.get(),
                    expires_at,
                },
                Err(e) => panic!("unexpected error in a small test: {e}"),
            },
            (Op::Advance(dt), _) => {
                self.clock.advance_nanos(*dt);
                Answer::TimePassed
            }
            (_, None) => Answer::NoToken,
            (Op::Extend(who), Some(t)) => match self.lock.extend_raw(who, t) {
                Ok(l) => Answer::Extended {
                    expires_at: l.expires_at,
                },
                Err(e) => from_error(e),
            },
            (Op::Release(who), Some(t)) => match self.lock.release_raw(who, t) {
                Ok(_) => Answer::Released,
                Err(e) => from_error(e),
            },
            (Op::Write(who), Some(t)) => match self.store.write(t, *who) {
                Ok(()) => Answer::Written,
                Err(s) => Answer::Stale {
                    highest: s.highest.get(),
                },
            },
        }
    }
}

/// Runs `ops` through all three and checks agreement and invariants (a)-(d).
fn run(ops: &[Op], policy: FencePolicy) -> Result<(), TestCaseError> {
    let clock = Arc::new(ManualClock::new(0));
    let mut local = Local {
        lock: LeaseLock::with_clock(Duration::from_nanos(TTL), clock.clone()).unwrap(),
        clock,
        store: FencedStore::with_policy(policy),
    };
    let mut core = Core {
        now: 0,
        table: LeaseTable::new(),
        fence: Fence::new(policy),
    };
    // The reference always fences: it is the specification the system must meet.
    let mut reference = Reference {
        fenced: true,
        ..Reference::default()
    };
    // Each owner's last granted token and that lease's deadline as the owner knows it.
    let mut held: HashMap<u8, (u64, u64)> = HashMap::new();
    let mut tokens = TokenOrder::new();
    let mut max_written = 0;
    let mut now = 0;

    for (i, op) in ops.iter().enumerate() {
        let owner = match op {
            Op::Acquire(w) | Op::Extend(w) | Op::Release(w) | Op::Write(w) => Some(*w),
            Op::Advance(_) => None,
        };
        let token = owner.and_then(|w| held.get(&w)).map(|&(t, _)| t);
        let holder_before = local.lock.holder().map(|l| (l.owner, l.token.get()));

        let got = local.apply(op, token.map(Token::new));
        let core_got = core.apply(op, token.map(Token::new));
        prop_assert_eq!(&got, &core_got, "step {}: {:?}: lock vs core", i, op);

        // (c) a stale writer never overwrites a newer token's value.
        if let (Answer::Written, Some(t)) = (&got, token) {
            prop_assert!(
                t >= max_written,
                "(c) step {i}: write with token {t} accepted after token {max_written}"
            );
            max_written = t;
            let stored = local.store.read().map(|(_, t)| t.get());
            prop_assert_eq!(stored, Some(t));
        }

        let want = reference.apply(op, token);
        prop_assert_eq!(&got, &want, "step {}: {:?}: lock vs reference", i, op);

        match (&got, owner) {
            (Answer::Granted { token, expires_at }, Some(w)) => {
                // (b) tokens strictly increase in grant order.
                let last = tokens.last();
                prop_assert!(tokens.grant(*token), "(b) token {token} after {last:?}");
                held.insert(w, (*token, *expires_at));
            }
            (Answer::Extended { expires_at }, Some(w)) => {
                held.get_mut(&w).unwrap().1 = *expires_at;
            }
            (Answer::Released, Some(w)) => {
                held.remove(&w);
            }
            (Answer::NotHolder | Answer::Expired, _) => {
                // (d) a refused release or extend leaves the current lease as it was.
                let holder_after = local.lock.holder().map(|l| (l.owner, l.token.get()));
                prop_assert_eq!(holder_before, holder_after, "(d) step {}", i);
            }
            (Answer::TimePassed, _) => {
                if let Op::Advance(dt) = op {
                    now += dt;
                }
            }
            _ => {}
        }
        // (a) at most one owner holds an unexpired lease.
        let live = held
            .values()
            .filter(|&&(_, deadline)| deadline > now)
            .count();
        prop_assert!(live <= 1, "(a) step {i}: {live} unexpired holders");
    }
    Ok(())
}

proptest! {
    #![proptest_config(Config { cases: 2_000, ..Config::default() })]

    #[test]
    fn lock_core_and_reference_agree_and_invariants_hold(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, FencePolicy::Fenced)?;
    }
}

/// Negative control: the same property against TTL-only storage must be caught, by invariant (c)
/// or by disagreeing with the reference.
#[test]
fn negative_control_accept_all_storage_is_caught() {
    let mut runner = TestRunner::new(Config {
        cases: 2_000,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(op(), 1..60), |ops| {
        run(&ops, FencePolicy::AcceptAll)
    });
    let Err(failure) = result else {
        panic!("accept-all storage passed the fencing property: the property cannot fail");
    };
    let message = failure.to_string();
    assert!(
        message.contains("(c)") || message.contains("lock vs reference"),
        "{message}"
    );
}
