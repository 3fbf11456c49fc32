//! Trace validation: a recorded [`Trace`] replayed through the models' own lock service and
//! storage (`serve` and `store` of the lease-service model, the steps `fencecheck check`
//! explores), asking of every observed answer: is it one the model could have given?
//!
//! The steps nobody observes are searched for. Each request is handled by the service at some
//! moment between when it was sent and when its answer was observed; requests of different
//! clients may be handled in any order that fits those windows; a lease ends when its TTL has
//! run on the service's clock, which is the trace's clock within `slack`. Real tokens are matched
//! to the model's by grant order, so a token that repeats or goes backwards cannot be explained.
//!
//! The moments tried for a request are the ends of its window and the moment the live lease
//! ends (just before and at it): the service's answers change only there. The search is
//! memoised and bounded ([`Replay::max_states`]); a trace it cannot finish is an error, never a
//! pass.

use crate::models::lease_service::{client_id, serve, store, Busy, Msg, Node, Writer};
use crate::protocol::{Fence, FencePolicy, LeaseTable, Observed, Token, Trace, TraceEvent};
use stateright::actor::{Command, Id, Out};
use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

/// How to replay a trace: the lease's TTL as the server grants it, how far the service's clock
/// may be from the trace's, and what the storage does with a stale token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replay {
    /// The TTL the server grants, in microseconds.
    pub ttl_us: u64,
    /// How far (µs) the moment a lease ends on the server may be from where the trace's clock
    /// puts it.
    pub slack_us: u64,
    /// The storage's rule.
    pub policy: FencePolicy,
    /// Give up (with an error) after this many search states.
    pub max_states: usize,
}

impl Replay {
    /// A replay of a lock granting `ttl` in front of storage with `policy`; slack 2 ms plus 1 %
    /// of the TTL; at most a million search states.
    pub fn new(ttl: Duration, policy: FencePolicy) -> Self {
        let ttl_us = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
        Replay {
            ttl_us,
            slack_us: 2_000 + ttl_us / 100,
            policy,
            max_states: 1_000_000,
        }
    }

    /// The same replay with another slack.
    pub fn slack(self, slack: Duration) -> Self {
        let slack_us = u64::try_from(slack.as_micros()).unwrap_or(u64::MAX);
        Replay { slack_us, ..self }
    }
}

/// A trace the model explains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validated {
    /// Events replayed.
    pub events: usize,
    /// Grants among them.
    pub grants: usize,
    /// Search states visited.
    pub states: usize,
}

/// Why a trace was not validated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// An observed event is no step the model allows, however the unobserved steps are placed.
    #[error(
        "event {} cannot be explained by the model: {}\n  {reason}\n  model state: {state}\n{timeline}",
        index + 1,
        event
    )]
    Unexplained {
        /// Index of the first event no placement of the unobserved steps explains.
        index: usize,
        /// That event.
        event: Box<TraceEvent>,
        /// What the model does instead.
        reason: String,
        /// The model's lock service and storage just before it (real tokens, client names).
        state: String,
        /// The trace up to that event, the event marked.
        timeline: String,
    },
    /// The search passed [`Replay::max_states`] before finishing.
    #[error(
        "trace validation gave up after {states} search states (Replay::max_states): no verdict"
    )]
    TooLarge {
        /// States visited.
        states: usize,
    },
    /// The replay's TTL is zero.
    #[error("replay ttl must be at least 1 µs")]
    ZeroTtl,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Req {
    Acquire,
    Renew(Token),
    Release(Token),
    Write(Token),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Answer {
    Granted(Token),
    Busy,
    Renewed(bool),
    Released(bool),
    /// Released after it had run out: nothing was freed.
    RanOut,
    Accepted,
    Rejected(Token),
}

/// A request sent and not yet answered; `answer` once the service or storage handled it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    client: usize,
    req: Req,
    sent: u64,
    answer: Option<Answer>,
}

/// The model's lock service and storage, the service's clock, the real tokens matched to the
/// model's (grant order), and the requests in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct World {
    table: LeaseTable<Id>,
    fence: Fence,
    now: u64,
    tokens: Vec<(Token, Token)>,
    pending: Vec<Pending>,
}

impl World {
    fn model_token(&self, real: Token) -> Option<Token> {
        self.tokens.iter().find(|(r, _)| *r == real).map(|p| p.1)
    }

    fn real_token(&self, model: Token) -> Option<Token> {
        self.tokens.iter().find(|(_, m)| *m == model).map(|p| p.0)
    }
}

struct Search<'a> {
    replay: &'a Replay,
    events: &'a [TraceEvent],
    clients: Vec<usize>,
    names: Vec<&'a str>,
    seen: HashSet<(usize, World)>,
    deepest: Option<(usize, String, String)>,
    grants: usize,
}

/// Replays `trace` through the model's lock service and storage.
///
/// ```
/// use fencecheck::check::trace::{validate, Replay};
/// use fencecheck::protocol::{FencePolicy, Observed, Token, Trace};
/// use std::time::Duration;
///
/// let replay = Replay::new(Duration::from_millis(100), FencePolicy::Fenced);
/// let mut t = Trace::new();
/// t.record(0, "A", Observed::AcquireSent);
/// t.record(1_000, "A", Observed::Granted { token: Token::new(1) });
/// t.record(2_000, "B", Observed::AcquireSent);
/// // A's lease (100 ms) is live: no lock service grants B the lease 3 ms in.
/// t.record(3_000, "B", Observed::Granted { token: Token::new(2) });
/// let err = validate(&t, &replay).unwrap_err();
/// assert!(err.to_string().starts_with("event 4 cannot be explained"));
/// ```
pub fn validate(trace: &Trace, replay: &Replay) -> Result<Validated, TraceError> {
    if replay.ttl_us == 0 {
        return Err(TraceError::ZeroTtl);
    }
    let events = trace.events();
    let mut names: Vec<&str> = Vec::new();
    let clients = events
        .iter()
        .map(|e| match names.iter().position(|n| *n == e.who) {
            Some(i) => i,
            None => {
                names.push(&e.who);
                names.len() - 1
            }
        })
        .collect();
    let mut search = Search {
        replay,
        events,
        clients,
        names,
        seen: HashSet::new(),
        deepest: None,
        grants: 0,
    };
    let start = World {
        table: LeaseTable::new(),
        fence: Fence::new(replay.policy),
        now: events.first().map_or(0, |e| e.at_us),
        tokens: Vec::new(),
        pending: Vec::new(),
    };
    match search.explore(0, start) {
        Some(true) => Ok(Validated {
            events: events.len(),
            grants: search.grants,
            states: search.seen.len(),
        }),
        None => Err(TraceError::TooLarge {
            states: search.seen.len(),
        }),
        Some(false) => {
            let (index, reason, state) = search.deepest.expect("a failed search records why");
            let mut timeline = String::new();
            for (i, e) in events.iter().enumerate().take(index + 1) {
                let mark = if i == index { ">>" } else { "  " };
                timeline.push_str(&format!("{mark}{:>3}. {e}\n", i + 1));
            }
            Err(TraceError::Unexplained {
                index,
                event: Box::new(events[index].clone()),
                reason,
                state,
                timeline,
            })
        }
    }
}

impl Search<'_> {
    /// Whether the events from `i` on can be explained from `w`; `None` when the search is over
    /// its bound.
    fn explore(&mut self, i: usize, w: World) -> Option<bool> {
        if i == self.events.len() {
            self.grants = w.tokens.len();
            return Some(true);
        }
        if !self.seen.insert((i, w.clone())) {
            return Some(false);
        }
        if self.seen.len() > self.replay.max_states {
            return None;
        }
        let at = self.events[i].at_us;
        // The event as things stand: the lazy placement, tried first (a request that was never
        // answered stays unhandled unless something needs it).
        match self.consume(i, &w) {
            Ok(nexts) => {
                for next in nexts {
                    if self.explore(i + 1, next)? {
                        return Some(true);
                    }
                }
            }
            Err(reason) => {
                if self.deepest.as_ref().is_none_or(|(d, _, _)| i >= *d) {
                    self.deepest = Some((i, reason, self.describe(&w)));
                }
            }
        }
        // Or handle a request in flight before this event (another client's, in any order).
        for k in 0..w.pending.len() {
            if w.pending[k].answer.is_some() {
                continue;
            }
            for next in self.handled(&w, k, at) {
                if self.explore(i, next)? {
                    return Some(true);
                }
            }
        }
        Some(false)
    }

    /// The worlds after the service (or storage) handles pending request `k` at a moment no
    /// later than `until` (plus slack).
    fn handled(&self, w: &World, k: usize, until: u64) -> Vec<World> {
        let p = &w.pending[k];
        if matches!(p.req, Req::Write(_)) {
            // The storage keeps no clock: when it handles a write does not matter.
            return vec![self.step(w, k, p.sent)];
        }
        let lo = w.now.max(p.sent);
        let hi = until.saturating_add(self.replay.slack_us);
        if lo > hi {
            return Vec::new();
        }
        let mut moments = vec![lo, hi];
        if let Some(end) = w.table.current().map(|l| l.expires_at) {
            moments.extend(
                [end.saturating_sub(1), end]
                    .into_iter()
                    .filter(|m| (lo..=hi).contains(m)),
            );
        }
        moments.sort_unstable();
        moments.dedup();
        moments.into_iter().map(|t| self.step(w, k, t)).collect()
    }

    /// The world after request `k` is handled at `t`.
    fn step(&self, w: &World, k: usize, t: u64) -> World {
        let mut next = w.clone();
        let p = &w.pending[k];
        let src = client_id(p.client);
        let mut o: Out<Node<Writer>> = Out::new();
        let answer = match p.req {
            Req::Write(token) => {
                if let Some((fence, _)) = store(
                    None,
                    &w.fence,
                    false,
                    src,
                    Msg::Write { token, epoch: 0 },
                    &mut o,
                ) {
                    next.fence = fence;
                }
                answer_of(o, None)
            }
            req => {
                let msg = match req {
                    Req::Acquire => Msg::Acquire,
                    Req::Renew(token) => Msg::Renew { token, epoch: 0 },
                    Req::Release(token) => Msg::Release { token },
                    Req::Write(_) => unreachable!("writes go to the storage, above"),
                };
                let clock = (t, self.replay.ttl_us);
                let changed = serve(None, Busy::Refuse, clock, &w.table, 0, src, msg, &mut o);
                // A release of a lease that had already run out frees nothing: the core allows
                // it and a server may say it was not held; either answer fits.
                let ran_out = w.table.holder(t).is_none_or(|l| l.owner != src);
                let released = match req {
                    Req::Release(_) if ran_out && changed.is_some() => Some(None),
                    Req::Release(_) => Some(Some(changed.is_some())),
                    _ => None,
                };
                if let Some((table, _)) = changed {
                    next.table = table;
                }
                next.now = t;
                answer_of(o, released)
            }
        };
        next.pending[k].answer = answer;
        next
    }

    /// The worlds after event `i` is consumed, or why it cannot be.
    fn consume(&self, i: usize, w: &World) -> Result<Vec<World>, String> {
        let e = &self.events[i];
        let client = self.clients[i];
        let mut next = w.clone();
        let known = |real: Token| {
            w.model_token(real)
                .ok_or_else(|| format!("token {real} was never granted in this trace"))
        };
        let req = match e.what {
            Observed::AcquireSent => Some(Req::Acquire),
            Observed::RenewSent { token } => Some(Req::Renew(known(token)?)),
            Observed::ReleaseSent { token } => Some(Req::Release(known(token)?)),
            Observed::WriteSent { token } => Some(Req::Write(known(token)?)),
            _ => None,
        };
        if let Some(req) = req {
            next.pending.push(Pending {
                client,
                req,
                sent: e.at_us,
                answer: None,
            });
            return Ok(vec![next]);
        }
        let (asked, expect) = match e.what {
            Observed::LeaseLost { .. } => return Ok(vec![next]),
            Observed::Granted { token } => {
                if let Some(&(last, _)) = w.tokens.last() {
                    if token <= last {
                        return Err(format!(
                            "the lock service's grants carry ever larger tokens; {token} is not \
                             larger than the last grant's {last}"
                        ));
                    }
                }
                (Req::Acquire, None)
            }
            Observed::Busy => (Req::Acquire, Some(Answer::Busy)),
            Observed::Renewed { token, ok } => {
                (Req::Renew(known(token)?), Some(Answer::Renewed(ok)))
            }
            Observed::Released { token, ok } => {
                (Req::Release(known(token)?), Some(Answer::Released(ok)))
            }
            Observed::WriteAccepted { token } => {
                (Req::Write(known(token)?), Some(Answer::Accepted))
            }
            Observed::WriteRejected { token, highest } => {
                let highest = known(highest)?;
                (Req::Write(known(token)?), Some(Answer::Rejected(highest)))
            }
            _ => unreachable!("requests were handled above"),
        };
        let Some(k) = w
            .pending
            .iter()
            .position(|p| p.client == client && p.req == asked)
        else {
            return Err("an answer to a request this client did not send".into());
        };
        // Its own request is handled last, in the window up to this answer.
        let handled = match w.pending[k].answer {
            Some(_) => vec![w.clone()],
            None => self.handled(w, k, e.at_us),
        };
        let mut explained = Vec::new();
        let mut answers = Vec::new();
        for mut h in handled {
            let p = h.pending.remove(k);
            let answer = p.answer.expect("handled");
            let fits = match (expect, answer, e.what) {
                (None, Answer::Granted(model), Observed::Granted { token }) => {
                    h.tokens.push((token, model));
                    true
                }
                (Some(Answer::Released(_)), Answer::RanOut, _) => true,
                (Some(want), got, _) => want == got,
                _ => false,
            };
            if fits {
                explained.push(h);
            } else {
                answers.push(self.say(w, answer));
            }
        }
        if explained.is_empty() && answers.is_empty() {
            return Err(format!(
                "the service's clock had passed {} before the answer came",
                ms(e.at_us + self.replay.slack_us)
            ));
        }
        if explained.is_empty() {
            answers.sort();
            answers.dedup();
            let p = &w.pending[k];
            return Err(format!(
                "sent at {}, answered at {}: whenever the model handles it in between (slack \
                 {} µs), it answers {}",
                ms(p.sent),
                ms(e.at_us),
                self.replay.slack_us,
                answers.join(" or ")
            ));
        }
        Ok(explained)
    }

    fn say(&self, w: &World, answer: Answer) -> String {
        let real = |m: Token| {
            w.real_token(m)
                .map_or(format!("new token #{m}"), |r| r.to_string())
        };
        match answer {
            Answer::Granted(_) => "with a grant".into(),
            Answer::Busy => "busy".into(),
            Answer::Renewed(ok) => format!("renewed: {ok}"),
            Answer::Released(ok) => format!("released: {ok}"),
            Answer::RanOut => "released (it had run out)".into(),
            Answer::Accepted => "accepted".into(),
            Answer::Rejected(h) => format!("rejected (highest {})", real(h)),
        }
    }

    fn describe(&self, w: &World) -> String {
        let lease = match w.table.current() {
            Some(l) => {
                let who = (0..self.names.len())
                    .find(|&c| client_id(c) == l.owner)
                    .map_or("?", |c| self.names[c]);
                let token = w.real_token(l.token).map_or("?".into(), |t| t.to_string());
                format!("lease of {who} (token {token}) until {}", ms(l.expires_at))
            }
            None => "no lease".into(),
        };
        let highest = w
            .fence
            .highest()
            .and_then(|h| w.real_token(h))
            .map_or("none".into(), |t| t.to_string());
        format!(
            "{lease}; service clock {}; storage's highest token {highest}",
            ms(w.now)
        )
    }
}

/// What the service or storage put in `o`, as an answer; `released` for a release (which the
/// model answers with its table).
fn answer_of(o: Out<Node<Writer>>, released: Option<Option<bool>>) -> Option<Answer> {
    match released {
        Some(Some(ok)) => return Some(Answer::Released(ok)),
        Some(None) => return Some(Answer::RanOut),
        None => {}
    }
    o.into_iter().find_map(|c| match c {
        Command::Send(_, msg) => match msg {
            Msg::Grant { token, .. } => Some(Answer::Granted(token)),
            Msg::Refused => Some(Answer::Busy),
            Msg::Renewed { ok, .. } => Some(Answer::Renewed(ok)),
            Msg::Accepted { .. } => Some(Answer::Accepted),
            Msg::Rejected { highest, .. } => Some(Answer::Rejected(highest)),
            _ => None,
        },
        _ => None,
    })
}

fn ms(us: u64) -> String {
    format!("{}.{:03} ms", us / 1000, us % 1000)
}

impl fmt::Display for Validated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} events ({} grants) explained by the model ({} search states)",
            self.events, self.grants, self.states
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
