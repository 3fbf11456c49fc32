//! The search behind trace validation: the model's lock service and storage, its clock, and the
//! requests in flight, explored over the moments each answer could have been given.

use super::{Replay, TraceEvent};
use crate::models::lease_service::{client_id, serve, store, Busy, Msg, Node, Writer};
use crate::protocol::{Fence, LeaseTable, Observed, Token};
use stateright::actor::{Command, Id, Out};
use std::collections::HashSet;

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
pub(super) struct Pending {
    client: usize,
    req: Req,
    sent: u64,
    answer: Option<Answer>,
}

/// The model's lock service and storage, the service's clock, the real tokens matched to the
/// model's (grant order), and the requests in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct World {
    pub(super) table: LeaseTable<Id>,
    pub(super) fence: Fence,
    pub(super) now: u64,
    pub(super) tokens: Vec<(Token, Token)>,
    pub(super) pending: Vec<Pending>,
}

impl World {
    fn model_token(&self, real: Token) -> Option<Token> {
        self.tokens.iter().find(|(r, _)| *r == real).map(|p| p.1)
    }

    fn real_token(&self, model: Token) -> Option<Token> {
        self.tokens.iter().find(|(_, m)| *m == model).map(|p| p.0)
    }
}

pub(super) struct Search<'a> {
    pub(super) replay: &'a Replay,
    pub(super) events: &'a [TraceEvent],
    pub(super) clients: Vec<usize>,
    pub(super) names: Vec<&'a str>,
    pub(super) seen: HashSet<(usize, World)>,
    pub(super) deepest: Option<(usize, String, String)>,
    pub(super) grants: usize,
}

impl Search<'_> {
    /// Whether the events from `i` on can be explained from `w`; `None` when the search is over
    /// its bound.
    pub(super) fn explore(&mut self, i: usize, w: World) -> Option<bool> {
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
            // The client's own records: no step of the service or the storage.
            Observed::LeaseLost { .. }
            | Observed::WorkStarted { .. }
            | Observed::WorkStopped { .. } => return Ok(vec![next]),
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
