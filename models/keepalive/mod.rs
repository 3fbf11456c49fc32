//! The client side: one supervisor holding a lease for the work it runs (`fencecheck run`), checked
//! on the library's own holder ([`crate::protocol::StopPolicy`], [`crate::protocol::StopTimer`]).
//!
//! The world: a lock service (the core `LeaseTable`, on the true clock), a supervisor whose clock
//! may run slow by up to a declared bound, its work as a process with a child of its own, a
//! successor that takes the lease as soon as the service lets it, fenced storage, and a network
//! that delays every request and reply for as long as anything else takes. Time moves in ticks; a
//! running supervisor acts on its timers before the next tick (a paused one does not).
//!
//! `work_stopped_before_successor` — no instant at which the holder's work or its child still
//! runs while the successor holds a later lease — holds for the holder as written. Each sibling is one
//! mistake real lock clients shipped, fed to the same holder, with its minimal counterexample:
//!
//! | sibling | mistake | the report it stands for |
//! |---|---|---|
//! | `keepalive-paused` | the supervisor itself is paused (`run` cannot promise more; fencing still keeps the storage in order) | a GC pause or a stopped VM |
//! | `keepalive-reply-deadline` | the deadline is dated from the reply's arrival, not the request's sending | kubernetes#44887 |
//! | `keepalive-grace-outside` | the gentle stop comes at the deadline and the kill a grace period after it | `fencecheck run` before the holder |
//! | `keepalive-late-start` | the work starts although the deadline has passed | `fencecheck run` before the holder (dead on arrival) |
//! | `keepalive-direct-child` | only the direct child is signalled; its own child lives on | `fencecheck run` before process groups |
//! | `keepalive-slow-clock` | the supervisor's clock runs slower than the drift margin allows | clock-rate bounds in every lease paper |
//! | `keepalive-stale-release` | a retried release names the owner, not the lease, and frees its next lease | etcd#22082 |
//!
//! `healthy_work_not_stopped` — the work is never asked to stop by its lease's timer — is the
//! other side of a stop inside the lease: a healthy service must not see a job stopped for want of
//! a renewal the supervisor never sent in time. It holds in `keepalive-healthy`, where the service
//! answers every request before time moves on and the supervisor renews on the library's own
//! schedule ([`crate::protocol::Schedule`], [`crate::protocol::Renewals`]) with a grace of two
//! thirds of the TTL; `keepalive-third-cadence` renews every third of the TTL whatever the grace
//! (`fencecheck run` before its schedule fitted the grace) and the job is stopped before its first
//! renewal is due. Everywhere else a renewal may be delayed past the stop, and it is violated.
//!
//! `keepalive-silent-reacquire` (an extend that takes an expired lease again, redis-semaphore#175)
//! is exercised but harmless here: the reply arrives after the server's expiry, so after the
//! holder's send-time deadline, by which the work has been killed.
use super::Params;
use crate::protocol::{Fence, LeaseOrder, LeaseTable, Phase, Renewals, Schedule, StopPolicy};
use crate::protocol::{StopTimer, Token};
use std::time::Duration;

mod narrate;
mod properties;
mod step;

/// The mistake built into a sibling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flaw {
    /// None: the holder as written, the supervisor never paused.
    None,
    /// The supervisor may be paused once, for any time.
    PausedSupervisor,
    /// The deadline is dated from the reply's arrival.
    ReplyDeadline,
    /// The stop schedule is shifted by one grace period: SIGTERM at the deadline, SIGKILL after it.
    GraceOutside,
    /// The work starts whatever the time left.
    LateStart,
    /// Signals reach the direct child only, and the lease is released when it exits.
    DirectChild,
    /// The supervisor's clock may fall behind by the whole drift margin.
    SlowClock,
    /// The release names the owner, not the lease, and is retried: a late copy frees the owner's
    /// next lease.
    StaleRelease,
    /// A renewal that reaches the service after the lease expired takes the lease again instead
    /// of being refused.
    SilentReacquire,
    /// Renewals every third of the TTL whatever the grace, on a healthy service.
    ThirdOfTtl,
}

impl Flaw {
    /// Whether the work still stops inside its lease with this mistake.
    fn stops_in_time(self) -> bool {
        matches!(self, Flaw::None | Flaw::SilentReacquire | Flaw::ThirdOfTtl)
    }
}

/// The model. Times are in ticks.
#[derive(Clone, Debug)]
pub struct KeepaliveModel {
    /// The lease's TTL.
    pub ttl: u64,
    /// The drift margin the supervisor subtracts.
    pub drift: u64,
    /// Between the gentle and the forced stop.
    pub grace: u64,
    /// How far the supervisor's clock may fall behind the service's over the run.
    pub max_lag: u8,
    /// The last tick.
    pub horizon: u8,
    /// Renewals the supervisor may send per lease.
    pub renewals: u8,
    /// Jobs the supervisor runs one after another, each under its own lease.
    pub jobs: u8,
    /// When the supervisor renews: `None` at any moment (which covers every cadence), or on the
    /// library's renewal timer ([`Renewals`]) with this period, before time moves on once due.
    pub every: Option<Duration>,
    /// Whether the service answers each acquire and renewal, and the supervisor reads the
    /// answer, before time moves on (a healthy service); else either may take any time.
    pub prompt: bool,
    /// The mistake built in.
    pub flaw: Flaw,
}

impl KeepaliveModel {
    /// The model with `flaw`, at the catalog's sizes: TTL 4, drift margin 2, grace 1, the clock
    /// slow by up to 1 tick (2 with [`Flaw::SlowClock`]), one renewal, 9 ticks, one job (two with
    /// [`Flaw::StaleRelease`], whose release can only free a later lease).
    pub fn with(flaw: Flaw) -> Self {
        KeepaliveModel {
            ttl: 4,
            drift: 2,
            grace: 1,
            max_lag: if flaw == Flaw::SlowClock { 2 } else { 1 },
            horizon: 9,
            renewals: 1,
            jobs: if flaw == Flaw::StaleRelease { 2 } else { 1 },
            every: None,
            prompt: false,
            flaw,
        }
    }

    /// The holder on a healthy service (it answers at once; the supervisor's clock keeps up and
    /// is never paused), with a grace of two thirds of the TTL: TTL 9, drift margin 1, grace 6,
    /// 9 ticks. It renews on the library's schedule for those margins ([`Schedule::new`]), or
    /// with [`Flaw::ThirdOfTtl`] every third of the TTL.
    pub fn healthy(flaw: Flaw) -> Self {
        let (ttl, drift, grace) = (9, 1, 6);
        let every = if flaw == Flaw::ThirdOfTtl {
            crate::protocol::renew_every(ticks(ttl))
        } else {
            Schedule::new(ticks(ttl), None, Some(ticks(drift)), Some(ticks(grace)))
                .expect("the healthy model's margins fit in the TTL")
                .every
        };
        KeepaliveModel {
            ttl,
            drift,
            grace,
            max_lag: 0,
            horizon: 9,
            renewals: 9,
            jobs: 1,
            every: Some(every),
            prompt: true,
            flaw,
        }
    }

    /// The renewal timer of a lease granted to a request sent at `sent`, when the supervisor
    /// renews on one.
    fn renewing(&self, sent: u8) -> Option<Renewals> {
        let every = self.every?;
        let (ttl, drift) = (ticks(self.ttl), ticks(self.drift));
        Some(Renewals::new(ttl, drift, every, ticks(u64::from(sent))))
    }

    fn policy(&self) -> StopPolicy {
        StopPolicy::new(ticks(self.ttl), ticks(self.drift), ticks(self.grace))
            .expect("the catalog's margins fit in the TTL")
    }

    /// The safe deadline of a request sent at `sent` and answered at `now` (supervisor's clock).
    fn deadline(&self, sent: u8, now: u8) -> Duration {
        let from = if self.flaw == Flaw::ReplyDeadline {
            now
        } else {
            sent
        };
        crate::protocol::safe_deadline(ticks(u64::from(from)), ticks(self.ttl), ticks(self.drift))
    }
}

fn ticks(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A process of the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proc {
    /// Not started.
    Idle,
    /// Running.
    Running,
    /// Sent SIGTERM; it may take any time to exit, or ignore it.
    Terminating,
    /// Gone.
    Exited,
}

impl Proc {
    fn alive(self) -> bool {
        matches!(self, Proc::Running | Proc::Terminating)
    }

    fn term(&mut self) {
        if *self == Proc::Running {
            *self = Proc::Terminating;
        }
    }

    fn kill(&mut self) {
        if self.alive() {
            *self = Proc::Exited;
        }
    }
}

/// A message between the supervisor and the lock service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Msg {
    /// Nothing in flight.
    None,
    /// A request sent at this time of the supervisor's clock, on its way to the service.
    Request(u8),
    /// The service's answer to a request sent at this time; `Some` on success.
    Reply(u8, Option<Token>),
}

/// The supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Supervisor {
    /// Has not asked yet.
    Idle,
    /// Asked for the lease.
    Asking,
    /// Holds a lease for running work.
    Holding {
        /// The library's holder.
        holder: StopTimer,
        /// The lease's token.
        token: Token,
        /// Renewals it may still send.
        renewals: u8,
        /// The library's renewal timer, when the model renews on one.
        renewing: Option<Renewals>,
    },
}

/// The successor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Successor {
    /// Waiting for the lease.
    Waiting,
    /// Holds a lease with this token.
    Holds(Token),
    /// Holds it and has written.
    Wrote(Token),
}

/// The state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KaState {
    /// The true time (the lock service's clock).
    pub now: u8,
    /// How far the supervisor's clock is behind.
    pub lag: u8,
    /// Whether the supervisor is paused, and whether its one pause is used.
    pub paused: bool,
    /// The one pause has been taken.
    pub pause_used: bool,
    /// The lock service.
    pub table: LeaseTable<u8>,
    /// The supervisor.
    pub supervisor: Supervisor,
    /// Acquire request or reply in flight.
    pub acquire: Msg,
    /// Renewal request or reply in flight.
    pub renew: Msg,
    /// A release in flight, naming the lease's token.
    pub release: Option<Token>,
    /// The late copy of a retried release, still in flight after the first was answered.
    pub late_release: Option<Token>,
    /// Jobs the supervisor has still to run.
    pub jobs: u8,
    /// The work (the supervisor's direct child).
    pub work: Proc,
    /// The work's own child.
    pub child: Proc,
    /// The token of the lease the work runs under.
    pub work_token: Option<Token>,
    /// Whether the work has written to the storage.
    pub work_wrote: bool,
    /// The successor.
    pub successor: Successor,
    /// The storage's fence.
    pub fence: Fence,
    /// Ghost: `storage_in_lease_order` over the stored writes' tokens (one service: token order
    /// is grant order).
    pub lease_order: LeaseOrder<Token>,
    /// Ghost: the holder's deadline was moved by a renewal.
    pub renewed: bool,
    /// Ghost: writes the fence refused.
    pub refused: u8,
    /// Ghost: the fence refused the work's write.
    pub work_refused: bool,
    /// Ghost: a renewal that reached the service after the lease expired was answered with
    /// success.
    pub late_renewal: bool,
}

impl KaState {
    fn local(&self) -> u8 {
        self.now - self.lag
    }

    /// A write with `token` reaches the storage; whether it was accepted.
    fn store(&mut self, token: Token) -> bool {
        let accepted = self.fence.admit(token).is_ok();
        if accepted {
            self.lease_order.accept(token);
        } else {
            self.refused += 1;
        }
        accepted
    }

    fn work_alive(&self) -> bool {
        self.work.alive() || self.child.alive()
    }

    /// Whether the supervisor's renewal timer is due now (and a renewal may be sent).
    fn renewal_due(&self) -> bool {
        let Supervisor::Holding {
            holder,
            renewals,
            renewing,
            ..
        } = self.supervisor
        else {
            return false;
        };
        let idle = holder.phase() == Phase::Working && renewals > 0 && self.renew == Msg::None;
        idle && renewing.is_none_or(|r| r.next_at() <= ticks(u64::from(self.local())))
    }

    /// Whether a healthy service owes an answer, or the supervisor a reaction, before time moves
    /// on.
    fn urgent(&self, m: &KeepaliveModel) -> bool {
        let answer = self.acquire != Msg::None || self.renew != Msg::None;
        m.prompt && (answer || (m.every.is_some() && self.renewal_due()))
    }

    /// The supervisor's next timer step if it is due now.
    fn due(&self) -> Option<crate::protocol::StopStep> {
        let Supervisor::Holding { mut holder, .. } = self.supervisor else {
            return None;
        };
        match holder.tick(ticks(u64::from(self.local()))) {
            s @ (crate::protocol::StopStep::StopGently | crate::protocol::StopStep::ForceStop) => {
                Some(s)
            }
            _ => None,
        }
    }
}

/// What happens next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KaAction {
    /// One tick passes; the supervisor's clock keeps up.
    Tick,
    /// One tick passes; the supervisor's clock stands still.
    SlowTick,
    /// The supervisor is paused.
    Pause,
    /// The supervisor resumes.
    Resume,
    /// The supervisor asks for the lease.
    Ask,
    /// The service answers the acquire request.
    ServeAcquire,
    /// The supervisor reads the acquire reply.
    Granted,
    /// The supervisor acts on its due timer (gentle or forced stop).
    Timer,
    /// The supervisor sends a renewal.
    SendRenew,
    /// The service answers the renewal.
    ServeRenew,
    /// The supervisor reads the renewal's reply.
    Renewed,
    /// The work exits (finished, or on SIGTERM).
    WorkExits,
    /// The work's child exits.
    ChildExits,
    /// The work writes with the lease's token.
    WorkWrites,
    /// The supervisor sees its work gone and releases the lease.
    Release,
    /// The service handles a release.
    ServeRelease,
    /// The service handles the late copy of a retried release.
    ServeLateRelease,
    /// The successor takes the lease.
    SuccessorTakes,
    /// The successor writes with its token.
    SuccessorWrites,
}

not_symmetric!(KeepaliveModel, KaState);

macro_rules! keepalive_entry {
    ($(#[$doc:meta])* $ty:ident, $name:expr, $summary:expr, $flaw:expr) => {
        keepalive_entry!($(#[$doc])* $ty, $name, $summary, $flaw, with);
    };
    ($(#[$doc:meta])* $ty:ident, $name:expr, $summary:expr, $flaw:expr, $build:ident) => {
        catalog_entry! {
            $(#[$doc])*
            $ty: KeepaliveModel {
                name: $name,
                summary: $summary,
                clients: 2..=2,
                mutants: &[],
                defaults: Params::sized(2, 1, 0),
                build: |_p| KeepaliveModel::$build($flaw),
            }
        }
    };
}

keepalive_entry!(
    /// The holder as written.
    Keepalive,
    "keepalive",
    "a supervisor holds a lease for its work: deadline from the send time, stop inside the lease",
    Flaw::None
);
keepalive_entry!(
    /// The supervisor itself paused.
    KeepalivePaused,
    "keepalive-paused",
    "the same supervisor, paused: its work outlives the lease, fencing keeps the storage in order",
    Flaw::PausedSupervisor
);
keepalive_entry!(
    /// Deadline from the reply's arrival.
    KeepaliveReplyDeadline,
    "keepalive-reply-deadline",
    "the deadline is dated from the reply's arrival (kubernetes#44887)",
    Flaw::ReplyDeadline
);
keepalive_entry!(
    /// The grace period outside the lease.
    KeepaliveGraceOutside,
    "keepalive-grace-outside",
    "SIGTERM at the deadline, SIGKILL a grace period after it",
    Flaw::GraceOutside
);
keepalive_entry!(
    /// Work started after its deadline.
    KeepaliveLateStart,
    "keepalive-late-start",
    "the work starts although the lease's deadline has passed",
    Flaw::LateStart
);
keepalive_entry!(
    /// Direct child only.
    KeepaliveDirectChild,
    "keepalive-direct-child",
    "signals reach the direct child only; its own child lives on",
    Flaw::DirectChild
);
keepalive_entry!(
    /// A clock slower than the margin.
    KeepaliveSlowClock,
    "keepalive-slow-clock",
    "the supervisor's clock falls behind by the whole drift margin",
    Flaw::SlowClock
);
keepalive_entry!(
    /// A retried release that names the owner.
    KeepaliveStaleRelease,
    "keepalive-stale-release",
    "a retried release names the owner, not the lease: its late copy frees the next lease (etcd#22082)",
    Flaw::StaleRelease
);
keepalive_entry!(
    /// The holder on a healthy service.
    KeepaliveHealthy,
    "keepalive-healthy",
    "the same supervisor on a service that answers at once: renewals on its schedule keep a job with a long grace running",
    Flaw::None,
    healthy
);
keepalive_entry!(
    /// Renewals every third of the TTL, whatever the grace.
    KeepaliveThirdCadence,
    "keepalive-third-cadence",
    "renewals every third of the TTL whatever the grace: a healthy job with a long grace is stopped before its first renewal",
    Flaw::ThirdOfTtl,
    healthy
);
keepalive_entry!(
    /// An extend that re-acquires.
    KeepaliveSilentReacquire,
    "keepalive-silent-reacquire",
    "a renewal arriving after expiry takes the lease again instead of failing (redis-semaphore#175)",
    Flaw::SilentReacquire
);
