//! Kubernetes leader election: client-go's `leaderelection` over one `Lease` object, checked on the
//! library's own elector ([`crate::protocol::Elector`], [`crate::protocol::LeaseObject`]).
//!
//! The world: an API server holding the Lease (holderIdentity, renewTime, leaseTransitions) and
//! replacing it only by an update naming its current resourceVersion; candidates that each GET the
//! Lease every retryPeriod and judge expiry by their own clock, leaseDuration after they last saw
//! the Lease change; a leader that renews every retryPeriod and stops leading renewDeadline after
//! its next renewal was due, counted from its last successful update's reply; requests and replies
//! that take up to a request timeout or are lost; storage that checks the token each leader
//! carries (leaseTransitions + 1). Time moves in ticks: leaseDuration 4, renewDeadline 2,
//! retryPeriod 1 (client-go's 15 s / 10 s / 2 s leave 3 s of margin; these leave 1 tick).
//!
//! | model | what differs | `single_leader` | lesson |
//! |---|---|---|---|
//! | `k8s-lease` | requests may take up to renewDeadline, as client-go's per-attempt context allows | violated | a slow renewal reply moves the old leader's end past the moment a candidate takes over (kubernetes#44887); only the fence keeps the storage in order |
//! | `k8s-lease-long-request` | a request may take longer than renewDeadline (an HTTP client timeout above it) | violated | as with requests bounded by renewDeadline: a longer client timeout does not repair it; only the margin does (`k8s-lease-prompt`) |
//! | `k8s-lease-prompt` | every request answered within leaseDuration − retryPeriod − renewDeadline | holds | the margin between the three durations must cover request latency |
//! | `k8s-lease-fast-clock` | as prompt, but a candidate's clock may gain a tick | violated | the margin must also cover clock-rate skew |
//! | `k8s-lease-unfenced` | as `k8s-lease`, the storage ignores the token | violated (and `storage_in_lease_order` too) | a Lease is not a lock (kube-rs#1056): carry leaseTransitions to the storage |
//!
//! No kube-apiserver runs here, so these models are not tested against a real server.

use super::Step;
use super::{
    declared_properties, meaning, prop, Declared, Declares, Expect, Expected, Narrate, Params,
};
use crate::protocol::{
    one_leader_per_term, Attempt, ElectionTiming, Elector, Fence, FencePolicy, LeaseObject,
    LeaseOrder, LeaseRecord, Token,
};
use stateright::{Expectation, Model, Property};

/// leaseDuration, renewDeadline, retryPeriod in ticks.
const LEASE_DURATION: u64 = 4;
const RENEW_DEADLINE: u64 = 2;
const RETRY_PERIOD: u64 = 1;

/// The model.
#[derive(Clone, Debug)]
pub struct K8sLeaseModel {
    /// Candidates.
    pub candidates: usize,
    /// How long a request and its reply may take, in ticks, before the client gives up.
    pub request_timeout: u8,
    /// How many ticks a candidate's clock may gain on real time over the run.
    pub max_gain: u8,
    /// The storage's policy.
    pub policy: FencePolicy,
    /// The last tick.
    pub horizon: u8,
}

impl K8sLeaseModel {
    fn timing() -> ElectionTiming {
        ElectionTiming::new(LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
            .expect("the catalog's durations are valid for client-go")
    }

    /// Whether request latency and clock skew fit in the margin the durations leave.
    fn within_margin(&self) -> bool {
        u64::from(self.request_timeout) + u64::from(self.max_gain) <= Self::timing().margin()
    }
}

/// An update on its way: to the server (`reply: None`) or back (`reply: Some(..)`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    /// The candidate that sent it.
    pub from: u8,
    /// When it was sent (real time): it is answered or lost by `sent + request_timeout`.
    pub sent: u8,
    /// The resourceVersion it names.
    pub version: u64,
    /// The record it writes.
    pub record: LeaseRecord<u8>,
    /// The server's answer once applied: the new version, or `None` for a conflict.
    pub reply: Option<Option<u64>>,
}

/// A leader's write on its way to the storage: (token, candidate).
pub type Write = (Token, u8);

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct K8sLeaseState {
    /// Real time.
    pub now: u8,
    /// How far each candidate's clock is ahead of real time.
    pub gain: Vec<u8>,
    /// Each candidate's elector.
    pub electors: Vec<Elector<u8>>,
    /// Whether each candidate has tried this retryPeriod.
    pub tried: Vec<bool>,
    /// The Lease in the API server.
    pub lease: LeaseObject<u8>,
    /// Updates in flight (at most one per candidate), sorted.
    pub requests: Vec<Request>,
    /// Writes in flight, sorted.
    pub writes: Vec<Write>,
    /// The storage's fence.
    pub fence: Fence,
    /// Ghost: terms won, in order, with the winner.
    pub wins: Vec<(Token, u8)>,
    /// Ghost: the stored writes' terms in the order stored (the library's checker).
    pub lease_order: LeaseOrder<Token>,
}

impl K8sLeaseState {
    /// Candidate `i`'s clock.
    pub fn clock(&self, i: usize) -> u64 {
        u64::from(self.now) + u64::from(self.gain[i])
    }

    /// How many candidates lead now, each by its own clock.
    pub fn leaders(&self) -> usize {
        (0..self.electors.len())
            .filter(|&i| self.electors[i].leads(self.clock(i)))
            .count()
    }
}

/// What happens next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum K8sLeaseAction {
    /// A candidate GETs the Lease and, unless it must wait, sends an update.
    Try(u8),
    /// An update reaches the API server.
    Apply(u8),
    /// An update's reply reaches its candidate.
    Answer(u8),
    /// An update or its reply is lost; the candidate's request times out.
    Lose(u8),
    /// A leader's write reaches the storage.
    Deliver(Write),
    /// Time moves one tick; candidate `Some(i)`'s clock moves two.
    Tick(Option<u8>),
}

impl Model for K8sLeaseModel {
    type State = K8sLeaseState;
    type Action = K8sLeaseAction;

    fn init_states(&self) -> Vec<K8sLeaseState> {
        let timing = Self::timing();
        vec![K8sLeaseState {
            now: 0,
            gain: vec![0; self.candidates],
            electors: (0..self.candidates as u8)
                .map(|i| Elector::new(i, timing))
                .collect(),
            tried: vec![false; self.candidates],
            lease: LeaseObject::new(),
            requests: Vec::new(),
            writes: Vec::new(),
            fence: Fence::new(self.policy),
            wins: Vec::new(),
            lease_order: LeaseOrder::new(),
        }]
    }

    fn actions(&self, s: &K8sLeaseState, actions: &mut Vec<K8sLeaseAction>) {
        for i in 0..self.candidates {
            let id = i as u8;
            let waiting = s.requests.iter().any(|r| r.from == id);
            let e = &s.electors[i];
            // A leader renews when its renewal is due; a follower tries every retryPeriod.
            let due = !e.leads(s.clock(i)) || e.renewal_due(s.clock(i));
            if !waiting && !s.tried[i] && due {
                actions.push(K8sLeaseAction::Try(id));
            }
        }
        for r in &s.requests {
            match r.reply {
                None => actions.push(K8sLeaseAction::Apply(r.from)),
                Some(_) => actions.push(K8sLeaseAction::Answer(r.from)),
            }
            actions.push(K8sLeaseAction::Lose(r.from));
        }
        actions.extend(super::distinct(&s.writes).map(K8sLeaseAction::Deliver));
        // Time moves on only once every request still in flight can wait another tick.
        let limit = |r: &Request| r.sent + self.request_timeout;
        if s.now < self.horizon && s.requests.iter().all(|r| limit(r) > s.now) {
            actions.push(K8sLeaseAction::Tick(None));
            for i in 0..self.candidates {
                if s.gain[i] < self.max_gain {
                    actions.push(K8sLeaseAction::Tick(Some(i as u8)));
                }
            }
        }
    }

    fn next_state(&self, s: &K8sLeaseState, action: K8sLeaseAction) -> Option<K8sLeaseState> {
        let mut next = s.clone();
        match action {
            K8sLeaseAction::Try(i) => {
                let at = usize::from(i);
                next.tried[at] = true;
                let (record, version) = s.lease.get();
                let now = s.clock(at);
                if let Attempt::Update { version, record } =
                    next.electors[at].on_read(record, version, now)
                {
                    next.requests.push(Request {
                        from: i,
                        sent: s.now,
                        version,
                        record,
                        reply: None,
                    });
                    next.requests.sort();
                }
            }
            K8sLeaseAction::Apply(i) => {
                let r = next.requests.iter_mut().find(|r| r.from == i)?;
                r.reply = Some(next.lease.update(r.version, r.record.clone()).ok());
                next.requests.sort();
            }
            K8sLeaseAction::Answer(i) => {
                let at = next.requests.iter().position(|r| r.from == i)?;
                let r = next.requests.remove(at);
                if let Some(Some(version)) = r.reply {
                    let now = s.clock(usize::from(i));
                    if let Some(term) =
                        next.electors[usize::from(i)].on_updated(&r.record, version, now)
                    {
                        // A leader acts on the term it took: one write with its token.
                        if !next.wins.contains(&(term, i)) {
                            next.wins.push((term, i));
                        }
                        next.writes.push((term, i));
                        next.writes.sort();
                    }
                }
            }
            K8sLeaseAction::Lose(i) => {
                let at = next.requests.iter().position(|r| r.from == i)?;
                next.requests.remove(at);
            }
            K8sLeaseAction::Deliver(w) => {
                let at = next.writes.iter().position(|x| *x == w)?;
                next.writes.remove(at);
                if next.fence.admit(w.0).is_ok() {
                    next.lease_order.accept(w.0);
                }
            }
            K8sLeaseAction::Tick(fast) => {
                next.now += 1;
                next.tried.iter_mut().for_each(|t| *t = false);
                if let Some(i) = fast {
                    next.gain[usize::from(i)] += 1;
                }
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        declared_properties(self)
    }
}

impl Narrate for K8sLeaseModel {
    fn narrate(
        &self,
        before: &K8sLeaseState,
        action: &K8sLeaseAction,
        after: &K8sLeaseState,
    ) -> Step {
        let who = |i: &u8| format!("candidate-{i}");
        let holder = |r: &LeaseRecord<u8>| r.holder.as_ref().map_or("nobody".to_string(), who);
        let server = "api-server".to_string();
        let clock = |s: &K8sLeaseState, i: &u8| s.clock(usize::from(*i));
        match action {
            K8sLeaseAction::Try(i) => {
                let (record, version) = before.lease.get();
                let sent = after
                    .requests
                    .iter()
                    .find(|r| r.from == *i && !before.requests.contains(r));
                let text = match sent {
                    None => format!(
                        "{} (clock {}) GETs the Lease: holderIdentity {}, resourceVersion {version}; \
                         not expired by its clock, waits a retryPeriod",
                        who(i),
                        clock(before, i),
                        holder(record)
                    ),
                    Some(r) if record.holder == Some(*i) => format!(
                        "{} (clock {}) renews: UPDATE renewTime {} at resourceVersion {version}",
                        who(i),
                        clock(before, i),
                        r.record.renew_time
                    ),
                    Some(r) => format!(
                        "{} (clock {}) finds the Lease of {} expired by its clock; UPDATE \
                         holderIdentity {}, renewTime {}, leaseTransitions {} at resourceVersion \
                         {version}",
                        who(i),
                        clock(before, i),
                        holder(record),
                        who(i),
                        r.record.renew_time,
                        r.record.transitions
                    ),
                };
                Step {
                    from: who(i),
                    to: server,
                    text,
                }
            }
            K8sLeaseAction::Apply(i) => {
                let r = after.requests.iter().find(|r| r.from == *i);
                let text = match r.and_then(|r| r.reply) {
                    Some(Some(v)) => format!(
                        "the API server applies {}'s UPDATE: resourceVersion {v}",
                        who(i)
                    ),
                    _ => format!(
                        "the API server refuses {}'s UPDATE: resourceVersion conflict",
                        who(i)
                    ),
                };
                Step {
                    from: server.clone(),
                    to: server,
                    text,
                }
            }
            K8sLeaseAction::Answer(i) => {
                let at = usize::from(*i);
                let now = clock(after, i);
                let text = match after.electors[at].term(now) {
                    Some(t) if before.electors[at].term(clock(before, i)) != Some(t) => format!(
                        "the reply reaches {} (clock {now}): it leads with token {t} until \
                         clock {} (retryPeriod + renewDeadline after this reply); sends a write \
                         with token {t}",
                        who(i),
                        after.electors[at].steps_down_at().unwrap_or(now)
                    ),
                    Some(_) => format!(
                        "the renewal's reply reaches {} (clock {now}): it leads until clock {}",
                        who(i),
                        after.electors[at].steps_down_at().unwrap_or(now)
                    ),
                    None => format!("the reply reaches {}: not leading", who(i)),
                };
                Step {
                    from: server,
                    to: who(i),
                    text,
                }
            }
            K8sLeaseAction::Lose(i) => Step {
                from: who(i),
                to: server,
                text: format!(
                    "{}'s UPDATE or its reply is lost; the request times out",
                    who(i)
                ),
            },
            K8sLeaseAction::Deliver((t, i)) => {
                let stored = after.fence.policy() == FencePolicy::AcceptAll
                    || after.fence.highest() == Some(*t);
                Step {
                    from: who(i),
                    to: "storage".into(),
                    text: format!(
                        "{}'s write with token {t} reaches the storage: {}",
                        who(i),
                        if stored { "accepted" } else { "rejected" }
                    ),
                }
            }
            K8sLeaseAction::Tick(fast) => {
                let leaders: Vec<String> = (0..after.electors.len())
                    .filter(|&i| after.electors[i].leads(after.clock(i)))
                    .map(|i| who(&(i as u8)))
                    .collect();
                let fast = fast.map_or(String::new(), |i| {
                    format!(" ({}'s clock gains a tick: {})", who(&i), clock(after, &i))
                });
                Step {
                    from: "clock".into(),
                    to: "clock".into(),
                    text: format!(
                        "time {}{fast}; leading by their own clocks: {}",
                        after.now,
                        super::nobody_or(&leaders)
                    ),
                }
            }
        }
    }
}

not_symmetric!(K8sLeaseModel, K8sLeaseState);

/// Every property of this model, declared once.
const DECLARED: &[Declared<K8sLeaseModel>] = &[
    Declared {
        name: "single_leader",
        kind: Expectation::Always,
        meaning: "at no instant do two candidates lead, each by its own clock",
        expect: Expect::When {
            rule: "holds when request timeout + clock gain <= leaseDuration - retryPeriod - renewDeadline",
            when: |m| Expected::holds_if(m.within_margin()),
        },
        condition: |_: &K8sLeaseModel, s: &K8sLeaseState| s.leaders() <= 1,
    },
    Declared {
        name: prop::STORAGE_IN_LEASE_ORDER,
        kind: Expectation::Always,
        meaning: meaning::STORAGE_IN_LEASE_ORDER,
        expect: Expect::When {
            rule: "holds when the storage checks leaseTransitions as a fencing token (a late write outlives any margin)",
            when: |m| match m.policy {
                FencePolicy::Fenced => Expected::Holds,
                FencePolicy::AcceptAll => Expected::Violated,
            },
        },
        condition: |_: &K8sLeaseModel, s: &K8sLeaseState| s.lease_order.holds(),
    },
    Declared {
        name: prop::ONE_LEADER_PER_TERM,
        kind: Expectation::Always,
        meaning: "no two candidates take the Lease with the same leaseTransitions",
        expect: Expect::Holds,
        condition: |_: &K8sLeaseModel, s: &K8sLeaseState| one_leader_per_term(&s.wins).is_ok(),
    },
    Declared {
        name: prop::LEADER_ELECTED,
        kind: Expectation::Sometimes,
        meaning: "some candidate takes the Lease",
        expect: Expect::Holds,
        condition: |_: &K8sLeaseModel, s: &K8sLeaseState| !s.wins.is_empty(),
    },
    Declared {
        name: prop::LEADERSHIP_CHANGES,
        kind: Expectation::Sometimes,
        meaning: "a second candidate takes the Lease after the first",
        expect: Expect::Holds,
        condition: |_: &K8sLeaseModel, s: &K8sLeaseState| {
            s.wins.windows(2).any(|w| w[0].1 != w[1].1)
        },
    },
    Declared {
        name: prop::WRITE_ACCEPTED,
        kind: Expectation::Sometimes,
        meaning: meaning::WRITE_ACCEPTED,
        expect: Expect::Holds,
        condition: |_: &K8sLeaseModel, s: &K8sLeaseState| s.lease_order.newest().is_some(),
    },
];

impl Declares for K8sLeaseModel {
    fn declarations(&self) -> &'static [Declared<Self>] {
        DECLARED
    }
}

/// The catalog's sizes: `clients` candidates, requests answered within `request_timeout`.
fn build(p: &Params, request_timeout: u8, max_gain: u8, policy: FencePolicy) -> K8sLeaseModel {
    K8sLeaseModel {
        candidates: p.clients,
        request_timeout,
        max_gain,
        policy,
        horizon: 6,
    }
}

catalog_entry! {
    K8sLeaseModel, clients: 2..=2, defaults: Params::sized(2, 1, 0);
    /// The catalog entry: client-go as written, requests up to renewDeadline.
    K8sLease "k8s-lease": "client-go leader election on a Lease: a slow renewal reply lets two lead; leaseTransitions fences the storage",
        |p| build(p, RENEW_DEADLINE as u8, 0, FencePolicy::Fenced);
    /// The catalog entry: a request may outlast renewDeadline.
    K8sLeaseLongRequest "k8s-lease-long-request": "client-go leader election whose requests may take longer than renewDeadline: the overlap only grows",
        |p| build(p, RENEW_DEADLINE as u8 + 1, 0, FencePolicy::Fenced);
    /// The catalog entry: requests answered within the margin.
    K8sLeasePrompt "k8s-lease-prompt": "the same election with requests answered within leaseDuration - retryPeriod - renewDeadline: one leader",
        |p| build(p, 1, 0, FencePolicy::Fenced);
    /// The catalog entry: prompt requests, a candidate's clock runs fast.
    K8sLeaseFastClock "k8s-lease-fast-clock": "prompt requests, but a candidate's clock gains a tick: it takes over while the leader leads",
        |p| build(p, 1, 1, FencePolicy::Fenced);
    /// The catalog entry: client-go as written, storage without the token.
    K8sLeaseUnfenced "k8s-lease-unfenced": "client-go leader election whose storage ignores leaseTransitions: a Lease is not a lock",
        |p| build(p, RENEW_DEADLINE as u8, 0, FencePolicy::AcceptAll);
}
