//! The keepalive world's transitions: what each actor may do next, on the library's holder.

use super::{ticks, Flaw, KaAction, KaState, KeepaliveModel, Msg, Proc, Successor, Supervisor};
use crate::models::declared_properties;
use crate::protocol::{Acquire, Fence, LeaseOrder, LeaseTable};
use stateright::{Model, Property};

impl Model for KeepaliveModel {
    type State = KaState;
    type Action = KaAction;

    fn init_states(&self) -> Vec<KaState> {
        vec![KaState {
            now: 0,
            lag: 0,
            paused: false,
            pause_used: false,
            table: LeaseTable::new(),
            supervisor: Supervisor::Idle,
            acquire: Msg::None,
            renew: Msg::None,
            release: None,
            late_release: None,
            jobs: self.jobs,
            work: Proc::Idle,
            child: Proc::Idle,
            work_token: None,
            work_wrote: false,
            successor: Successor::Waiting,
            fence: Fence::fenced(),
            lease_order: LeaseOrder::new(),
            renewed: false,
            refused: 0,
            work_refused: false,
            late_renewal: false,
        }]
    }

    fn actions(&self, s: &KaState, actions: &mut Vec<KaAction>) {
        use KaAction::*;
        let running = !s.paused;
        // A running supervisor acts on a due timer before time moves on.
        if s.now < self.horizon && (s.paused || (s.due().is_none() && !s.urgent(self))) {
            actions.push(Tick);
            if s.lag < self.max_lag {
                actions.push(SlowTick);
            }
        }
        if self.flaw == Flaw::PausedSupervisor && !s.pause_used && s.work_alive() {
            actions.push(Pause);
        }
        if s.paused {
            actions.push(Resume);
        }
        if matches!(s.acquire, Msg::Request(_)) {
            actions.push(ServeAcquire);
        }
        if matches!(s.renew, Msg::Request(_)) {
            actions.push(ServeRenew);
        }
        if s.release.is_some() {
            actions.push(ServeRelease);
        }
        if s.late_release.is_some() {
            actions.push(ServeLateRelease);
        }
        if s.work.alive() {
            actions.push(WorkExits);
        }
        if s.child.alive() {
            actions.push(ChildExits);
        }
        if s.work_alive() && !s.work_wrote {
            actions.push(WorkWrites);
        }
        match s.successor {
            Successor::Waiting if s.table.holder(u64::from(s.now)).is_none() => {
                actions.push(SuccessorTakes)
            }
            Successor::Holds(_) => actions.push(SuccessorWrites),
            _ => {}
        }
        if !running {
            return;
        }
        match s.supervisor {
            // The next job starts once the last release was answered.
            Supervisor::Idle if s.jobs > 0 && s.release.is_none() => actions.push(Ask),
            Supervisor::Asking if matches!(s.acquire, Msg::Reply(..)) => actions.push(Granted),
            Supervisor::Holding { .. } => {
                if s.due().is_some() {
                    actions.push(Timer);
                }
                if s.renewal_due() {
                    actions.push(SendRenew);
                }
                if matches!(s.renew, Msg::Reply(..)) {
                    actions.push(Renewed);
                }
                let gone = if self.flaw == Flaw::DirectChild {
                    !s.work.alive()
                } else {
                    !s.work_alive()
                };
                if gone {
                    actions.push(Release);
                }
            }
            _ => {}
        }
    }

    fn next_state(&self, s: &KaState, action: KaAction) -> Option<KaState> {
        use KaAction::*;
        let mut n = s.clone();
        let now = u64::from(s.now);
        let local = s.local();
        match action {
            Tick => n.now += 1,
            SlowTick => {
                n.now += 1;
                n.lag += 1;
            }
            Pause => {
                n.paused = true;
                n.pause_used = true;
            }
            Resume => n.paused = false,
            Ask => {
                n.jobs -= 1;
                n.supervisor = Supervisor::Asking;
                n.acquire = Msg::Request(local);
            }
            ServeAcquire => {
                let Msg::Request(sent) = s.acquire else {
                    return None;
                };
                let token = match n.table.acquire(0, now, self.ttl).ok()? {
                    Acquire::Granted(lease) => Some(lease.token),
                    Acquire::Busy { .. } => None,
                };
                n.acquire = Msg::Reply(sent, token);
            }
            Granted => {
                let Msg::Reply(sent, token) = s.acquire else {
                    return None;
                };
                n.acquire = Msg::None;
                n.supervisor = Supervisor::Idle;
                let Some(token) = token else {
                    return Some(n);
                };
                let policy = self.policy();
                let deadline = self.deadline(sent, local);
                let at = ticks(u64::from(local));
                if policy.may_start(at, deadline) || self.flaw == Flaw::LateStart {
                    let holder = if self.flaw == Flaw::GraceOutside {
                        policy.timer(deadline + policy.grace())
                    } else {
                        policy.timer(deadline)
                    };
                    n.supervisor = Supervisor::Holding {
                        holder,
                        token,
                        renewals: self.renewals,
                        renewing: self.renewing(sent),
                    };
                    n.work = Proc::Running;
                    n.child = Proc::Running;
                    n.work_token = Some(token);
                } else {
                    // Dead on arrival: nothing runs; the lease is handed back.
                    n.release = Some(token);
                }
            }
            Timer => {
                let Supervisor::Holding { holder, .. } = &mut n.supervisor else {
                    return None;
                };
                match holder.tick(ticks(u64::from(local))) {
                    crate::protocol::StopStep::StopGently => {
                        n.work.term();
                        if self.flaw != Flaw::DirectChild {
                            n.child.term();
                        }
                    }
                    crate::protocol::StopStep::ForceStop => {
                        n.work.kill();
                        if self.flaw != Flaw::DirectChild {
                            n.child.kill();
                        }
                    }
                    _ => return None,
                }
            }
            SendRenew => {
                let Supervisor::Holding { renewals, .. } = &mut n.supervisor else {
                    return None;
                };
                *renewals -= 1;
                n.renew = Msg::Request(local);
            }
            ServeRenew => {
                let (Msg::Request(sent), Supervisor::Holding { token, .. }) =
                    (s.renew, s.supervisor)
                else {
                    return None;
                };
                let mut ok = n
                    .table
                    .extend(&0, token, now, self.ttl)
                    .ok()
                    .map(|l| l.token);
                if ok.is_none() && self.flaw == Flaw::SilentReacquire {
                    // The extend script's fallback: take the key again if it is free.
                    if let Ok(Acquire::Granted(lease)) = n.table.acquire(0, now, self.ttl) {
                        ok = Some(lease.token);
                        n.late_renewal = true;
                    }
                }
                n.renew = Msg::Reply(sent, ok);
            }
            Renewed => {
                let Msg::Reply(sent, ok) = s.renew else {
                    return None;
                };
                n.renew = Msg::None;
                let deadline = self.deadline(sent, local);
                let Supervisor::Holding {
                    holder, renewing, ..
                } = &mut n.supervisor
                else {
                    return None;
                };
                if ok.is_some() {
                    if let Some(r) = renewing {
                        r.answered(ticks(u64::from(sent)));
                    }
                    let before = holder.deadline();
                    holder.renewed(if self.flaw == Flaw::GraceOutside {
                        deadline + ticks(self.grace)
                    } else {
                        deadline
                    });
                    n.renewed |= holder.deadline() > before;
                } else {
                    holder.revoked(ticks(u64::from(local)));
                }
            }
            WorkExits => n.work = Proc::Exited,
            ChildExits => n.child = Proc::Exited,
            WorkWrites => {
                let token = s.work_token?;
                n.work_wrote = true;
                n.work_refused = !n.store(token);
            }
            Release => {
                let Supervisor::Holding { token, .. } = s.supervisor else {
                    return None;
                };
                // Leftovers of the work are killed with the group before the release.
                if self.flaw != Flaw::DirectChild {
                    n.child.kill();
                }
                n.release = Some(token);
                if self.flaw == Flaw::StaleRelease {
                    n.late_release = Some(token);
                }
                n.supervisor = Supervisor::Idle;
            }
            ServeRelease | ServeLateRelease => {
                let token = if action == ServeRelease {
                    n.release.take()?
                } else {
                    n.late_release.take()?
                };
                if self.flaw == Flaw::StaleRelease {
                    // Whatever lease the owner holds now.
                    let current = n.table.current().filter(|l| l.owner == 0).map(|l| l.token);
                    if let Some(current) = current {
                        let _ = n.table.release(&0, current);
                    }
                } else {
                    // Only the lease it names; a newer one refuses.
                    let _ = n.table.release(&0, token);
                }
            }
            SuccessorTakes => {
                let Acquire::Granted(lease) = n.table.acquire(1, now, self.ttl).ok()? else {
                    return None;
                };
                n.successor = Successor::Holds(lease.token);
            }
            SuccessorWrites => {
                let Successor::Holds(token) = s.successor else {
                    return None;
                };
                n.successor = Successor::Wrote(token);
                n.store(token);
            }
        }
        Some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        declared_properties(self)
    }
}
