//! The keepalive world's steps told in the protocol's words.

use super::{Flaw, KaAction, KaState, KeepaliveModel, Msg, Successor, Supervisor};
use crate::models::{Narrate, Step};
use crate::protocol::{Phase, Token};

impl Narrate for KeepaliveModel {
    fn narrate(&self, s: &KaState, action: &KaAction, n: &KaState) -> Step {
        use KaAction::*;
        let t = s.now;
        let clock = |st: &KaState| st.local();
        let step = |from: &str, to: &str, text: String| Step {
            from: from.into(),
            to: to.into(),
            text: format!("t={t}: {text}"),
        };
        let verdict = if n.refused > s.refused {
            "refused"
        } else {
            "accepted"
        };
        let group = if self.flaw == Flaw::DirectChild {
            "the work only (its child is not signalled)"
        } else {
            "the work's process group"
        };
        let expiry = |st: &KaState| {
            st.table
                .current()
                .map_or(String::new(), |l| format!(" until t={}", l.expires_at))
        };
        match action {
            Tick => step(
                "clock",
                "clock",
                format!("a tick passes (supervisor's clock {})", clock(n)),
            ),
            SlowTick => step(
                "clock",
                "clock",
                format!(
                    "a tick passes; the supervisor's clock stands still at {}",
                    clock(n)
                ),
            ),
            Pause => step(
                "supervisor",
                "supervisor",
                "the supervisor is paused (GC pause, SIGSTOP, stopped VM)".into(),
            ),
            Resume => step("supervisor", "supervisor", "the supervisor resumes".into()),
            Ask => step(
                "supervisor",
                "lock-service",
                format!("supervisor asks for the lease at its clock {}", clock(s)),
            ),
            ServeAcquire => match n.acquire {
                Msg::Reply(_, Some(token)) => step(
                    "lock-service",
                    "supervisor",
                    format!("lock service grants the lease (token {token}){}", expiry(n)),
                ),
                _ => step(
                    "lock-service",
                    "supervisor",
                    "lock service refuses: the successor holds the lease".into(),
                ),
            },
            Granted => {
                let Msg::Reply(sent, token) = s.acquire else {
                    unreachable!("a reply is read")
                };
                let text = match (token, n.supervisor) {
                    (None, _) => "supervisor reads the refusal: runs nothing".to_string(),
                    (Some(_), Supervisor::Holding { holder, .. }) => format!(
                        "supervisor reads the grant sent at its clock {sent}: deadline {}, \
                         SIGTERM at {}, SIGKILL at {}; starts the work and its child",
                        holder.deadline().as_millis(),
                        holder.stop_at().as_millis(),
                        holder.force_stop_at().as_millis()
                    ),
                    (Some(_), _) => format!(
                        "supervisor reads the grant sent at its clock {sent}: deadline {} leaves \
                         no time at its clock {}; runs nothing and releases",
                        self.deadline(sent, clock(s)).as_millis(),
                        clock(s)
                    ),
                };
                step("supervisor", "work", text)
            }
            Timer => {
                let killed = matches!(
                    n.supervisor,
                    Supervisor::Holding { holder, .. } if holder.phase() == Phase::Killed
                );
                let signal = if killed { "SIGKILL" } else { "SIGTERM" };
                step(
                    "supervisor",
                    "work",
                    format!("supervisor's clock reads {}: {signal} to {group}", clock(s)),
                )
            }
            SendRenew => step(
                "supervisor",
                "lock-service",
                format!("supervisor sends a renewal at its clock {}", clock(s)),
            ),
            ServeRenew => match n.renew {
                Msg::Reply(_, Some(_)) => step(
                    "lock-service",
                    "supervisor",
                    format!("lock service extends the lease{}", expiry(n)),
                ),
                _ => step(
                    "lock-service",
                    "supervisor",
                    "lock service refuses the renewal: the lease is gone".into(),
                ),
            },
            Renewed => {
                let text = match (s.renew, n.supervisor) {
                    (Msg::Reply(_, Some(_)), Supervisor::Holding { holder, .. }) => format!(
                        "supervisor reads the renewal: deadline {}",
                        holder.deadline().as_millis()
                    ),
                    (_, Supervisor::Holding { holder, .. }) => format!(
                        "supervisor reads the refusal: stops the work now, kills it by {}",
                        holder.force_stop_at().as_millis()
                    ),
                    _ => "supervisor reads the renewal".into(),
                };
                step("supervisor", "supervisor", text)
            }
            WorkExits => step("work", "supervisor", "the work exits".into()),
            ChildExits => step("work", "work", "the work's child exits".into()),
            WorkWrites => {
                let token = s.work_token.map_or(0, Token::get);
                step(
                    "work",
                    "storage",
                    format!("the work writes with token {token}: {verdict}"),
                )
            }
            Release => {
                let retried = if self.flaw == Flaw::StaleRelease {
                    " (the request times out and is sent again)"
                } else {
                    ""
                };
                step(
                    "supervisor",
                    "lock-service",
                    format!("the work has exited: supervisor releases the lease{retried}"),
                )
            }
            ServeRelease | ServeLateRelease => {
                let token = if *action == ServeRelease {
                    s.release
                } else {
                    s.late_release
                }
                .map_or(0, Token::get);
                let freed = match (s.table.current(), n.table.current()) {
                    (Some(l), None) => format!("frees the lease with token {}", l.token),
                    _ => "frees nothing".to_string(),
                };
                step(
                    "lock-service",
                    "lock-service",
                    format!(
                        "lock service handles {}release of token {token}: {freed}",
                        if *action == ServeRelease {
                            "a "
                        } else {
                            "the late copy of the "
                        }
                    ),
                )
            }
            SuccessorTakes => {
                let token = match n.successor {
                    Successor::Holds(t) | Successor::Wrote(t) => t.get(),
                    Successor::Waiting => 0,
                };
                step(
                    "successor",
                    "lock-service",
                    format!("successor takes the lease (token {token}){}", expiry(n)),
                )
            }
            SuccessorWrites => step(
                "successor",
                "storage",
                format!("successor writes: {verdict}"),
            ),
        }
    }
}
