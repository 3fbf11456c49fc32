//! What the keepalive models check: each property, declared once with what each sibling
//! expects of it.

use super::{Flaw, KaState, KeepaliveModel, Successor, Supervisor};
use crate::models::{meaning, prop, Declared, Declares, Expect};
use crate::protocol::Phase;
use stateright::Expectation;

/// The successor holds a lease granted after the one the holder's work runs under.
fn successor_later(s: &KaState) -> bool {
    match (s.successor, s.work_token) {
        (Successor::Holds(t) | Successor::Wrote(t), Some(work)) => t > work,
        _ => false,
    }
}

/// The work has not been asked to stop by its timer (the holder's stop schedule not begun).
fn not_stopped(s: &KaState) -> bool {
    match s.supervisor {
        Supervisor::Holding { holder, .. } => holder.phase() == Phase::Working,
        _ => true,
    }
}

/// Every property of the keepalive models, declared once.
const DECLARED: &[Declared<KeepaliveModel>] = &[
    Declared {
        name: prop::WORK_STOPPED_BEFORE_SUCCESSOR,
        kind: Expectation::Always,
        meaning: meaning::WORK_STOPPED_BEFORE_SUCCESSOR,
        expect: Expect::When {
            rule: "holds for the holder as written and with a re-acquiring extend (the late \
                   reply finds the work already stopped by its send-time deadline); violated by \
                   every other sibling's mistake",
            when: |m| crate::models::Expected::holds_if(m.flaw.stops_in_time()),
        },
        condition: |_: &KeepaliveModel, s: &KaState| !(successor_later(s) && s.work_alive()),
    },
    Declared {
        name: prop::STORAGE_IN_LEASE_ORDER,
        kind: Expectation::Always,
        meaning: meaning::STORAGE_IN_LEASE_ORDER,
        expect: Expect::Holds,
        condition: |_: &KeepaliveModel, s: &KaState| s.lease_order.holds(),
    },
    Declared {
        name: "successor_takes_over",
        kind: Expectation::Sometimes,
        meaning: "the successor takes the lease after the holder's work ran",
        expect: Expect::Holds,
        condition: |_: &KeepaliveModel, s: &KaState| successor_later(s),
    },
    Declared {
        name: "renewal_extends",
        kind: Expectation::Sometimes,
        meaning: "a renewal moves the holder's deadline",
        expect: Expect::When {
            rule: "violated with renewals every third of the TTL and a long grace: the stop \
                   comes before the first renewal is due",
            when: |m| crate::models::Expected::holds_if(m.flaw != Flaw::ThirdOfTtl),
        },
        condition: |_: &KeepaliveModel, s: &KaState| s.renewed,
    },
    Declared {
        name: "fence_refuses_late_write",
        kind: Expectation::Sometimes,
        meaning: "the storage refuses a write of the holder's work after the successor's",
        expect: Expect::When {
            rule: "only where the work can outlive its lease",
            when: |m| crate::models::Expected::holds_if(!m.flaw.stops_in_time()),
        },
        condition: |_: &KeepaliveModel, s: &KaState| s.work_refused,
    },
    Declared {
        name: "late_renewal_succeeds",
        kind: Expectation::Sometimes,
        meaning: "a renewal reaching the service after the lease expired is answered with success",
        expect: Expect::When {
            rule: "only with a re-acquiring extend",
            when: |m| crate::models::Expected::holds_if(m.flaw == Flaw::SilentReacquire),
        },
        condition: |_: &KeepaliveModel, s: &KaState| s.late_renewal,
    },
    Declared {
        name: "healthy_work_not_stopped",
        kind: Expectation::Always,
        meaning: "the holder's work is never asked to stop by its lease's timer",
        expect: Expect::When {
            rule: "holds on a service that answers at once with renewals on the library's \
                   schedule; violated with renewals every third of the TTL (the grace's stop \
                   comes first) and wherever a renewal may be delayed past the stop",
            when: |m| crate::models::Expected::holds_if(m.prompt && m.flaw == Flaw::None),
        },
        condition: |_: &KeepaliveModel, s: &KaState| not_stopped(s),
    },
];

impl Declares for KeepaliveModel {
    fn declarations(&self) -> &'static [Declared<Self>] {
        DECLARED
    }
}
