//! The contract every backend meets: the same calls, the same answers, on the in-process lock and
//! on every server backend.

use fencecheck::backend::{Acquired, FencedStorage, Grant, LockService, Ttl, WriteOutcome};
use fencecheck::protocol::{StaleWrite, Token};
use std::time::{Duration, Instant};

pub fn granted(a: Acquired) -> Grant {
    match a {
        Acquired::Granted(g) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

pub fn stale(token: u64, highest: u64) -> WriteOutcome {
    WriteOutcome::Stale(StaleWrite {
        token: Token::new(token),
        highest: Token::new(highest),
    })
}

/// The lock contract, on any backend: one holder, increasing tokens, stale calls refused,
/// stealing only after expiry.
pub async fn lock_contract<L: LockService>(lock: &L) {
    let a = granted(lock.try_acquire("a").await.unwrap());
    let Acquired::Busy { holder, remaining } = lock.try_acquire("b").await.unwrap() else {
        panic!("b acquired a held lock");
    };
    assert_eq!(holder.as_deref(), Some("a"));
    if let Some(left) = remaining {
        assert!(
            left <= lock.ttl().granted(),
            "{left:?} left of a {:?} lease",
            lock.ttl().granted()
        );
    }
    assert!(lock.extend("a", a.token).await.unwrap().is_some());
    assert!(
        lock.extend("b", a.token).await.unwrap().is_none(),
        "wrong owner extended"
    );
    assert!(
        !lock.release("b", a.token).await.unwrap(),
        "wrong owner released"
    );
    assert!(lock.release("a", a.token).await.unwrap());
    assert!(!lock.release("a", a.token).await.unwrap(), "double release");

    let b = granted(lock.try_acquire("b").await.unwrap());
    assert!(b.token > a.token);
    assert!(
        !lock.release("a", a.token).await.unwrap(),
        "stale token released"
    );
    // Expiry: someone else may take it only after the TTL, then with a larger token; the old
    // holder's extend and release are refused. (Servers expire leases a little after the TTL:
    // etcd's lessor checks every 500 ms.)
    let c = lock
        .acquire("c", lock.ttl().granted() * 3)
        .await
        .unwrap()
        .expect("b's lease expires");
    let waited = c.sent_at.saturating_duration_since(b.sent_at);
    assert!(
        waited + Duration::from_millis(50) >= lock.ttl().granted(),
        "stolen after {waited:?}"
    );
    assert!(c.token > b.token);
    assert!(lock.extend("b", b.token).await.unwrap().is_none());
    assert!(!lock.release("b", b.token).await.unwrap());
    // acquire with a timeout gives up on time while c holds it, then gets it after release.
    let t0 = Instant::now();
    assert!(lock
        .acquire("d", Duration::from_millis(60))
        .await
        .unwrap()
        .is_none());
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(60),
        "gave up early: {waited:?}"
    );
    assert!(waited < Duration::from_secs(1), "gave up late: {waited:?}");
    assert!(lock.release("c", c.token).await.unwrap());
    let d = lock
        .acquire("d", Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    assert!(d.token > c.token);
    lock.release("d", d.token).await.unwrap();
}

/// The lost-lease signal fires on every backend: a held lease that is not renewed is reported
/// lost at its safe deadline (counted from the acquire's send time), and a renewed one is not.
pub async fn lost_signal_contract<L: LockService + 'static>(lock: std::sync::Arc<L>) {
    use fencecheck::backend::{hold, KeepaliveOptions, LostReason, Stop};
    let ttl = lock.ttl().granted();
    let grant = granted(lock.try_acquire("k").await.unwrap());
    let renewed = hold(
        std::sync::Arc::clone(&lock),
        grant,
        KeepaliveOptions::default(),
    )
    .expect("the default schedule fits");
    tokio::time::sleep(ttl + ttl / 2).await;
    assert!(!renewed.is_lost(), "{:?}", renewed.lost_reason());
    assert!(renewed.release().await.unwrap());

    let grant = granted(lock.try_acquire("k").await.unwrap());
    let deadline_bound = grant.sent_at + ttl;
    let never = KeepaliveOptions {
        every: Some(Duration::from_secs(3600)),
        ..KeepaliveOptions::default()
    };
    let mut unrenewed =
        hold(std::sync::Arc::clone(&lock), grant, never).expect("the default schedule fits");
    let reason = tokio::time::timeout(ttl * 2, unrenewed.lost())
        .await
        .expect("the lost signal fires");
    assert!(
        matches!(reason, LostReason::DeadlinePassed { .. }),
        "{reason:?}"
    );
    let at = Instant::now();
    assert!(
        at <= deadline_bound + Duration::from_millis(100),
        "fired late"
    );
    let drift = ttl / 100 + Duration::from_millis(2);
    assert!(
        at + drift + Duration::from_millis(1) >= deadline_bound,
        "fired early"
    );
    let _ = unrenewed.release().await;

    // The stop schedule of an unrenewed lease: the gentle stop a grace before the safe deadline,
    // then the forced stop at it; both inside the lease the server granted, never early.
    let grant = granted(lock.try_acquire("k").await.unwrap());
    let server_bound = grant.sent_at + grant.ttl;
    let grace = ttl / 4;
    let schedule = KeepaliveOptions {
        every: Some(Duration::from_secs(3600)),
        grace: Some(grace),
        ..KeepaliveOptions::default()
    };
    let mut held =
        hold(std::sync::Arc::clone(&lock), grant, schedule).expect("a quarter of the TTL fits");
    assert!(held.may_start());
    let (stop_at, force_at) = (held.stop_at(), held.force_stop_at());
    assert_eq!(force_at, held.deadline());
    assert_eq!(stop_at + grace, force_at);
    assert!(
        force_at < server_bound,
        "the kill comes before the server's expiry"
    );
    let first = tokio::time::timeout(ttl * 2, held.next_stop())
        .await
        .expect("the gentle stop comes");
    assert_eq!(first, Stop::Gently { lost: None });
    assert!(Instant::now() >= stop_at, "never early");
    let second = tokio::time::timeout(ttl * 2, held.next_stop())
        .await
        .expect("the forced stop comes");
    assert_eq!(second, Stop::Force);
    assert!(Instant::now() >= force_at, "never early");
    assert!(
        tokio::time::timeout(Duration::from_millis(50), held.next_stop())
            .await
            .is_err(),
        "nothing after the forced stop"
    );
    let _ = held.release().await;

    // A lease taken away behind the holder's back: the next renewal is refused, the work is
    // asked to stop at once and killed a grace later (before the deadline it would have had).
    let grant = granted(lock.try_acquire("k").await.unwrap());
    let token = grant.token;
    let watched = KeepaliveOptions {
        every: Some(ttl / 10),
        grace: Some(grace),
        ..KeepaliveOptions::default()
    };
    let mut held =
        hold(std::sync::Arc::clone(&lock), grant, watched).expect("a quarter of the TTL fits");
    let deadline = held.deadline();
    assert!(lock.release("k", token).await.unwrap());
    let first = tokio::time::timeout(ttl, held.next_stop())
        .await
        .expect("the loss is noticed within the TTL");
    assert_eq!(
        first,
        Stop::Gently {
            lost: Some(LostReason::Revoked)
        }
    );
    let noticed = Instant::now();
    assert!(held.force_stop_at() <= deadline);
    assert!(held.force_stop_at() <= noticed + grace);
    let second = tokio::time::timeout(ttl * 2, held.next_stop())
        .await
        .expect("the forced stop comes");
    assert_eq!(second, Stop::Force);
    assert!(!held.release().await.unwrap(), "nothing left to release");
}

/// The storage contract, on any backend; `fenced = false` is the accept-all control.
pub async fn storage_contract<S: FencedStorage>(store: &S, fenced: bool) {
    assert_eq!(store.read("k").await.unwrap(), None);
    assert_eq!(
        store.write("k", Token::new(2), b"two").await.unwrap(),
        WriteOutcome::Accepted
    );
    assert_eq!(
        store.write("k", Token::new(2), b"two again").await.unwrap(),
        WriteOutcome::Accepted
    );
    let late = store.write("k", Token::new(1), b"one").await.unwrap();
    let read = store.read("k").await.unwrap().unwrap();
    if fenced {
        assert_eq!(late, stale(1, 2));
        assert_eq!(
            (read.token, &read.value[..]),
            (Token::new(2), &b"two again"[..])
        );
    } else {
        assert_eq!(late, WriteOutcome::Accepted);
        assert_eq!((read.token, &read.value[..]), (Token::new(1), &b"one"[..]));
    }
    assert_eq!(
        store.write("k", Token::new(3), b"three").await.unwrap(),
        WriteOutcome::Accepted
    );
    assert_eq!(
        store.write("other", Token::new(1), b"x").await.unwrap(),
        WriteOutcome::Accepted
    );
    assert_eq!(store.read("k").await.unwrap().unwrap().value, b"three");
}

/// The election contract, on any backend: of two concurrent candidates exactly one leads; the
/// leader and its term are observable; renewals keep it leading past its TTL; after it resigns,
/// or dies without resigning, a new candidate wins a larger term. Returns the wins (term, winner)
/// in order, which the caller checks with `one_leader_per_term`.
pub async fn election_contract<L: LockService + 'static>(
    lock: std::sync::Arc<L>,
) -> Vec<(Token, String)> {
    use fencecheck::backend::LeaderElection;
    let ttl = lock.ttl().granted();
    let election = LeaderElection::new(lock);
    let mut wins = Vec::new();
    assert_eq!(election.leader().await.unwrap(), None);

    let patience = Duration::from_millis(300);
    let (a, b) = tokio::join!(
        election.campaign("a", patience),
        election.campaign("b", patience)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(
        a.is_some() != b.is_some(),
        "exactly one of two concurrent candidates wins"
    );
    let leader = a.or(b).unwrap();
    wins.push((leader.term(), leader.candidate().to_string()));
    let seen = election.leader().await.unwrap().expect("a leader");
    assert_eq!(
        (seen.owner.as_str(), seen.token),
        (leader.candidate(), leader.term())
    );
    assert_eq!(seen.value, None);
    // The leader proclaims (say, its address); observers read it with the term.
    assert!(leader.proclaim("10.0.0.1:8080").await.unwrap());
    assert!(leader.proclaim("10.0.0.2:8080").await.unwrap());
    let seen = election.leader().await.unwrap().expect("a leader");
    assert_eq!(seen.value.as_deref(), Some("10.0.0.2:8080"));
    assert_eq!(seen.owner.as_str(), leader.candidate());

    // Renewals keep it leading past its TTL.
    tokio::time::sleep(ttl + ttl / 2).await;
    assert!(!leader.is_lost());
    assert_eq!(
        election.leader().await.unwrap().map(|h| h.token),
        Some(leader.term())
    );

    // Resigning hands over: the next candidate wins a larger term.
    let first = leader.term();
    assert!(leader.resign().await.unwrap());
    let c = election
        .campaign("c", ttl)
        .await
        .unwrap()
        .expect("free after resign");
    assert!(c.term() > first);
    // A new term starts with no proclamation.
    assert_eq!(election.leader().await.unwrap().unwrap().value, None);
    wins.push((c.term(), "c".to_string()));

    // The leader dies without resigning (its renewals stop): a new term only after its lease.
    let dead_term = c.term();
    drop(c);
    let t0 = Instant::now();
    let d = election
        .campaign("d", ttl * 4)
        .await
        .unwrap()
        .expect("the dead leader's lease expires");
    // Its last renewal was at most ttl/3 before it died, so its lease ran at least 2/3 ttl more.
    assert!(
        t0.elapsed() >= ttl / 2,
        "took over too early: {:?}",
        t0.elapsed()
    );
    assert!(d.term() > dead_term);
    let observed = election
        .observe(Some(dead_term), ttl)
        .await
        .unwrap()
        .expect("new leader");
    assert_eq!((observed.owner.as_str(), observed.token), ("d", d.term()));
    wins.push((d.term(), "d".to_string()));
    assert!(d.resign().await.unwrap());
    wins
}

/// The negative control for the election contract: on `lock` with [`Flaw::BlindCampaign`], two
/// candidates both win one term, and `one_leader_per_term` names that term.
pub async fn blind_campaign_is_caught<L: LockService + 'static>(lock: L) {
    use fencecheck::backend::LeaderElection;
    let election = LeaderElection::new(std::sync::Arc::new(Broken {
        lock,
        flaw: Flaw::BlindCampaign,
    }));
    let a = election.campaign("a", Duration::ZERO).await.unwrap();
    let b = election.campaign("b", Duration::ZERO).await.unwrap();
    let (a, b) = (a.expect("a wins"), b.expect("b wins blindly"));
    let wins = [(a.term(), "a"), (b.term(), "b")];
    let e = fencecheck::protocol::one_leader_per_term(&wins).unwrap_err();
    assert_eq!(e.term, a.term());
}

/// What a [`Broken`] lock gets wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// A busy try-acquire "wins" anyway, with the current holder's token (a blind campaign).
    BlindCampaign,
    /// Any renewal succeeds, lost lease or not (a client trusting its own bookkeeping).
    RenewsAnything,
}

/// A broken lock for the negative controls: `lock` with one [`Flaw`].
pub struct Broken<L> {
    /// The real lock underneath.
    pub lock: L,
    /// What it gets wrong.
    pub flaw: Flaw,
}

impl<L: LockService> LockService for Broken<L> {
    fn ttl(&self) -> Ttl {
        self.lock.ttl()
    }
    async fn try_acquire(
        &self,
        owner: &str,
    ) -> Result<Acquired, fencecheck::backend::BackendError> {
        match self.lock.try_acquire(owner).await? {
            Acquired::Busy { .. } if self.flaw == Flaw::BlindCampaign => {
                let holder = self.lock.holder().await?.expect("busy means held");
                Ok(Acquired::Granted(self.grant(owner, holder.token)))
            }
            answer => Ok(answer),
        }
    }
    async fn extend(
        &self,
        owner: &str,
        token: Token,
    ) -> Result<Option<Grant>, fencecheck::backend::BackendError> {
        match self.lock.extend(owner, token).await? {
            None if self.flaw == Flaw::RenewsAnything => Ok(Some(self.grant(owner, token))),
            answer => Ok(answer),
        }
    }
    async fn holder(
        &self,
    ) -> Result<Option<fencecheck::backend::Holder>, fencecheck::backend::BackendError> {
        self.lock.holder().await
    }
    async fn publish(
        &self,
        owner: &str,
        token: Token,
        value: &str,
    ) -> Result<bool, fencecheck::backend::BackendError> {
        self.lock.publish(owner, token, value).await
    }
    async fn release(
        &self,
        owner: &str,
        token: Token,
    ) -> Result<bool, fencecheck::backend::BackendError> {
        self.lock.release(owner, token).await
    }
}

impl<L: LockService> Broken<L> {
    /// A grant the real lock never made.
    fn grant(&self, owner: &str, token: Token) -> Grant {
        Grant {
            token,
            owner: owner.to_string(),
            ttl: self.lock.ttl().granted(),
            sent_at: Instant::now(),
        }
    }
}

/// The verdict of a fault trial: every one of `rounds` fenced writes landed, in lease order, and
/// the grants' tokens strictly increase.
pub fn every_round_served_in_order(history: &fencecheck::protocol::History, rounds: usize) {
    use fencecheck::protocol::{storage_in_lease_order, HistoryEvent, TokenOrder};
    storage_in_lease_order(history).unwrap();
    assert_eq!(history.accepted_writes(), rounds, "{history}");
    let mut tokens = TokenOrder::new();
    for e in history.events() {
        if let HistoryEvent::Granted { token, .. } = e {
            tokens.grant(*token);
        }
    }
    assert!(tokens.holds(), "tokens_increase: {history}");
}
