//! Differential test of any lock backend against the protocol core: random sequences of acquire,
//! extend, release (with the owner's token or a stale one), holder reads and revocations go to
//! the core's `LeaseTable` and to the backend, and every answer must be the same.
//!
//! Tokens are compared by grant order: the backend's own numbers (etcd revisions, ZooKeeper
//! zxids) differ from the core's 1, 2, 3, ..., so the n-th grant of the backend stands for the
//! core's token n, and the backend's tokens must strictly increase.

use super::contract::{Broken, Flaw};
use fencecheck::backend::{Acquired, LockService};
use fencecheck::protocol::{Acquire, LeaseTable, Token};
use proptest::prelude::*;
use std::future::Future;

/// One call.
#[derive(Clone, Debug)]
pub enum Op {
    /// Owner `i` tries to take the lease.
    Acquire(u8),
    /// Owner `i` renews with its latest token.
    Extend(u8),
    /// Owner `i` releases with its latest token.
    Release(u8),
    /// Owner `i` releases with the token of grant `k` (modulo the grants so far): stale, or
    /// another owner's.
    ReleaseGrant(u8, u8),
    /// Who holds the lease?
    Holder,
    /// The lease is taken away behind its holder's back (the core: it runs out).
    Revoke,
}

/// Sequences of up to `len` calls among three owners.
pub fn ops(len: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..3u8).prop_map(Op::Acquire),
        2 => (0..3u8).prop_map(Op::Extend),
        2 => (0..3u8).prop_map(Op::Release),
        1 => ((0..3u8), any::<u8>()).prop_map(|(i, k)| Op::ReleaseGrant(i, k)),
        2 => Just(Op::Holder),
        2 => Just(Op::Revoke),
    ];
    prop::collection::vec(op, 1..len)
}

fn owner(i: u8) -> String {
    format!("owner-{i}")
}

/// An answer in backend-neutral form: tokens as grant numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    Granted(usize),
    Busy(Option<String>),
    Done(bool),
    Holder(Option<(String, usize)>),
    Skipped,
}

/// What a run compared: calls answered by both, grants, leases revoked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compared {
    /// Calls both answered (skipped ones not counted).
    pub calls: usize,
    /// Grants made.
    pub grants: usize,
    /// Live leases taken away.
    pub revoked: usize,
}

/// The core's lease length: long enough that nothing runs out unless revoked.
const TTL: u64 = 1_000_000;

/// Runs `ops` on the core and on `lock` (fresh: nothing held, no grants yet); `revoke` takes the
/// live lease away on the backend. `Err` names the first call answered differently.
pub async fn same_answers<L, R, F>(lock: &L, revoke: R, ops: &[Op]) -> Result<Compared, String>
where
    L: LockService,
    R: Fn() -> F,
    F: Future<Output = ()>,
{
    let mut table: LeaseTable<String> = LeaseTable::new();
    let mut now = 0;
    // The backend's tokens in grant order; grant n (1-based) is the core's token n.
    let mut grants: Vec<Token> = Vec::new();
    // Each owner's latest grant number.
    let mut latest: [Option<usize>; 3] = [None; 3];
    let mut compared = Compared::default();
    let number = |grants: &[Token], t: Token| grants.iter().position(|g| *g == t).map(|p| p + 1);
    for (step, op) in ops.iter().enumerate() {
        let (want, got) = match op {
            Op::Acquire(i) => {
                let want = match table.acquire(owner(*i), now, TTL).expect("no overflow") {
                    Acquire::Granted(l) => Answer::Granted(l.token.get() as usize),
                    Acquire::Busy { holder, .. } => Answer::Busy(Some(holder)),
                };
                let got = match lock
                    .try_acquire(&owner(*i))
                    .await
                    .map_err(|e| e.to_string())?
                {
                    Acquired::Granted(g) => {
                        if let Some(last) = grants.last() {
                            if g.token <= *last {
                                return Err(format!(
                                    "step {step} {op:?}: token {} after {last}: not increasing",
                                    g.token
                                ));
                            }
                        }
                        grants.push(g.token);
                        latest[*i as usize] = Some(grants.len());
                        Answer::Granted(grants.len())
                    }
                    // A backend that cannot tell the holder says so; the core always can.
                    Acquired::Busy { holder, .. } => {
                        Answer::Busy(holder.or_else(|| table.holder(now).map(|l| l.owner.clone())))
                    }
                };
                (want, got)
            }
            Op::Extend(i) => match latest[*i as usize] {
                None => (Answer::Skipped, Answer::Skipped),
                Some(n) => {
                    let want = table
                        .extend(&owner(*i), Token::new(n as u64), now, TTL)
                        .is_ok();
                    let got = lock
                        .extend(&owner(*i), grants[n - 1])
                        .await
                        .map_err(|e| e.to_string())?
                        .is_some();
                    (Answer::Done(want), Answer::Done(got))
                }
            },
            Op::Release(i) | Op::ReleaseGrant(i, _) => {
                let n = match op {
                    Op::ReleaseGrant(_, k) if !grants.is_empty() => {
                        Some(*k as usize % grants.len() + 1)
                    }
                    Op::ReleaseGrant(..) => None,
                    _ => latest[*i as usize],
                };
                match n {
                    None => (Answer::Skipped, Answer::Skipped),
                    Some(n) => {
                        // The contract: releasing a lease that ran out frees nothing -> false.
                        let want = table
                            .release(&owner(*i), Token::new(n as u64))
                            .is_ok_and(|l| l.is_live(now));
                        let got = lock
                            .release(&owner(*i), grants[n - 1])
                            .await
                            .map_err(|e| e.to_string())?;
                        (Answer::Done(want), Answer::Done(got))
                    }
                }
            }
            Op::Holder => {
                let want = table
                    .holder(now)
                    .map(|l| (l.owner.clone(), l.token.get() as usize));
                let got = lock.holder().await.map_err(|e| e.to_string())?;
                let got = match got {
                    None => None,
                    Some(h) => match number(&grants, h.token) {
                        Some(n) => Some((h.owner, n)),
                        None => {
                            return Err(format!(
                                "step {step} {op:?}: holder's token {} was never granted",
                                h.token
                            ))
                        }
                    },
                };
                (Answer::Holder(want), Answer::Holder(got))
            }
            Op::Revoke => {
                if let Some(live) = table.holder(now) {
                    now = live.expires_at;
                    revoke().await;
                    compared.revoked += 1;
                }
                (Answer::Skipped, Answer::Skipped)
            }
        };
        if want != Answer::Skipped {
            compared.calls += 1;
        }
        if want != got {
            return Err(format!(
                "the backend differs at step {step} {op:?}: the core answers {want:?}, the \
                 backend {got:?} (calls so far: {:?})",
                &ops[..=step]
            ));
        }
    }
    compared.grants = grants.len();
    Ok(compared)
}

/// Runs `case` on `cases` random sequences of up to `len` calls (no shrinking: each case runs on
/// real servers). `case(n, ops)` gets a fresh case number for a fresh lock name. Returns what all
/// the cases compared together.
pub fn run_cases(
    cases: u32,
    len: usize,
    case: impl Fn(u64, &[Op]) -> Result<Compared, String>,
) -> Result<Compared, String> {
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 0,
        ..Config::default()
    });
    let n = std::cell::Cell::new(0);
    let total = std::cell::Cell::new(Compared::default());
    runner
        .run(&ops(len), |ops| {
            n.set(n.get() + 1);
            let c = case(n.get(), &ops).map_err(TestCaseError::fail)?;
            let t = total.get();
            total.set(Compared {
                calls: t.calls + c.calls,
                grants: t.grants + c.grants,
                revoked: t.revoked + c.revoked,
            });
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    Ok(total.get())
}

/// The differential on a real backend and its negative control: `cases` random sequences through
/// `connect(name)` (a fresh lock per case) must answer like the core, with `revoke(name)` taking
/// the live lease away; the same lock with [`Flaw::RenewsAnything`] must be told apart. Panics
/// otherwise; returns what the real lock compared.
pub fn differential_with_control<L: LockService>(
    label: &str,
    cases: u32,
    connect: impl AsyncFn(&str) -> L,
    revoke: impl AsyncFn(&str),
) -> Compared {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let run = |flaw: Option<Flaw>| {
        run_cases(cases, 25, |n, ops| {
            rt.block_on(async {
                let name = format!("diff-{}-{n}", flaw.is_some());
                let lock = connect(&name).await;
                let revoke = || revoke(&name);
                match flaw {
                    Some(flaw) => same_answers(&Broken { lock, flaw }, revoke, ops).await,
                    None => same_answers(&lock, revoke, ops).await,
                }
            })
        })
    };
    let compared = run(None).unwrap_or_else(|e| panic!("{label}: {e}"));
    println!("{label} differential: {compared:?}");
    // Floors against a generator that stopped producing interesting sequences. With 96 cases a
    // run compares ~740 calls, ~185 grants and ~90 revocations (625-830, 166-202 and 69-107 in
    // eight runs on etcd and ZooKeeper); each floor is several standard deviations below, so that
    // chance alone does not trip it (with 48 cases, 299 calls once fell under a floor of 300).
    assert!(
        compared.calls >= 450 && compared.grants >= 110 && compared.revoked >= 40,
        "{label}: too little compared: {compared:?}"
    );
    let caught = run(Some(Flaw::RenewsAnything))
        .expect_err("a lock renewing lost leases passed the differential");
    println!(
        "{label} control: {}",
        caught.lines().next().unwrap_or_default()
    );
    assert!(caught.contains("the backend differs"), "{caught}");
    assert!(caught.contains("Extend"), "{caught}");
    compared
}
