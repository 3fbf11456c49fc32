//! The sans-IO client interface: what a client is told ([`Event`]), what it asks ([`Command`]),
//! and the lock service semantics it is checked against ([`Service`]).

use crate::protocol::Token;
use std::fmt::Debug;
use std::hash::Hash;

/// A lease the lock service granted to this client: its fencing token, and (hidden) which grant it
/// was, so the checker can tell writes from an older lease from writes from a newer one.
///
/// A client keeps the `Lease` it was given and names it when it writes, renews or releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Lease {
    token: Token,
    /// Ghost: the n-th lease the service granted. No client reads it.
    epoch: u8,
}

impl Lease {
    /// The fencing token the lock service handed out with this lease.
    pub fn token(&self) -> Token {
        self.token
    }

    /// A grant with this token, the `epoch`-th the lock service made (for the environment).
    pub(crate) fn new(token: Token, epoch: u8) -> Lease {
        Lease { token, epoch }
    }

    /// Which grant this was (ghost state, read only by the properties).
    pub(crate) fn epoch(&self) -> u8 {
        self.epoch
    }
}

/// What a client can be told.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The lock service granted the lease.
    Granted(Lease),
    /// The lease is held by someone else ([`Busy::Refuse`] only: by default a request waits until
    /// the lease is free, as a blocking acquire does).
    Refused,
    /// The answer to [`Command::CheckLease`]: whether the lease is still this client's and live
    /// when the lock service looked. It may expire the moment after.
    LeaseStatus {
        /// The lease asked about.
        grant: Lease,
        /// Whether it was live and this client's.
        live: bool,
    },
    /// The answer to [`Command::Renew`]: whether the lease was still live and is now extended.
    Renewed {
        /// The lease renewed.
        grant: Lease,
        /// Whether the renewal succeeded.
        ok: bool,
    },
    /// The storage stored the write.
    WriteAccepted {
        /// The lease the write was made under.
        grant: Lease,
    },
    /// The fenced storage refused the write: a write with a larger token came first.
    WriteRejected {
        /// The lease the write was made under.
        grant: Lease,
        /// The largest token the storage has accepted.
        highest: Token,
    },
    /// The answer to [`Command::WriteOnce`] when the job's effect was already applied.
    AlreadyDone {
        /// The lease the write was made under.
        grant: Lease,
    },
    /// The answer to [`Command::Read`]: the largest token the storage has accepted, if any.
    ReadAnswer {
        /// The largest accepted token.
        highest: Option<Token>,
    },
    /// The lock service says this lease has ended ([`LeaseEnd::Notified`] only: an etcd lease
    /// whose keepalive failed, a ZooKeeper session that expired). The notice travels like any
    /// message: it can arrive late.
    LeaseLost(Lease),
    /// The answer to [`Command::ReleaseByName`]: whether a live lease was deleted (Redis `DEL`
    /// answers 1 or 0; etcd the number of keys deleted; ZooKeeper `delete` succeeds or finds no
    /// node). It does not say whose lease it was.
    Released {
        /// Whether a live lease was deleted.
        deleted: bool,
    },
    /// The client's timer fired. The environment has no clock the client could trust: a timer
    /// fires at any moment relative to the lease's expiry.
    Timer,
}

/// What a client can ask for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Command {
    /// Ask the lock service for the lease.
    Acquire,
    /// Ask the lock service to extend this lease.
    Renew(Lease),
    /// Ask the lock service whether this lease is still live (the check before a write).
    CheckLease(Lease),
    /// Write to the storage under this lease, sending its token (the fenced write).
    Write(Lease),
    /// Write to the storage under this lease without its token: the storage cannot fence it.
    WriteUnfenced(Lease),
    /// Apply the job's effect unless it has been applied already: an idempotent write keyed by
    /// the job (`INSERT ... ON CONFLICT DO NOTHING`), answered with
    /// [`Event::WriteAccepted`] or [`Event::AlreadyDone`]. The token is not compared.
    WriteOnce(Lease),
    /// Ask the storage for the largest token it has accepted.
    Read,
    /// Give this lease back: the service frees it only if it is still this client's lease
    /// with this token (a compare-and-delete: Redis `DEL` inside a script that checks the
    /// owner, etcd's delete of its own key revision, ZooKeeper's delete of its own node). A
    /// stale release frees nothing. No answer is sent.
    Release(Lease),
    /// Delete the lock by its name, whoever holds it: a plain `DEL key` (etcd: delete the key;
    /// ZooKeeper: delete the node by path). Answered with [`Event::Released`]. A client whose
    /// lease has already expired frees its successor's.
    ReleaseByName,
    /// Set the client's timer (one per client; setting it again keeps one). It fires at any
    /// moment; in a clocked world, at once or later.
    SetTimer,
    /// Set the client's timer to fire when its own clock reads this time (a clocked world; in
    /// the untimed world it fires at any moment).
    SetTimerAt(u64),
}

/// The commands a client issues in one step, in order, and what its clock reads at that step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Commands {
    commands: Vec<Command>,
    now: Option<u64>,
}

impl Commands {
    /// No commands, no clock.
    pub fn new() -> Commands {
        Commands::default()
    }

    /// No commands, at `now` on the instance's clock.
    pub(crate) fn at(now: u64) -> Commands {
        Commands {
            commands: Vec::new(),
            now: Some(now),
        }
    }

    /// What the instance's own clock reads at this step, in ticks: `Some` in a clocked world
    /// ([`Environment::clocked`](super::Environment::clocked)), `None` in the untimed one, where no clock can be trusted.
    /// The clock may run slower or faster than the lock service's, within the drift bound.
    pub fn now(&self) -> Option<u64> {
        self.now
    }

    /// Sets the timer to fire when the instance's clock reads `at`.
    pub fn set_timer_at(&mut self, at: u64) {
        self.commands.push(Command::SetTimerAt(at));
    }

    /// Asks for the lease.
    pub fn acquire(&mut self) {
        self.commands.push(Command::Acquire);
    }

    /// Asks to extend `grant`'s lease.
    pub fn renew(&mut self, grant: &Lease) {
        self.commands.push(Command::Renew(*grant));
    }

    /// Asks whether `grant`'s lease is still live.
    pub fn check_lease(&mut self, grant: &Lease) {
        self.commands.push(Command::CheckLease(*grant));
    }

    /// Writes under `grant` with its token.
    pub fn write(&mut self, grant: &Lease) {
        self.commands.push(Command::Write(*grant));
    }

    /// Writes under `grant` without its token.
    pub fn write_unfenced(&mut self, grant: &Lease) {
        self.commands.push(Command::WriteUnfenced(*grant));
    }

    /// Applies the job's effect under `grant` unless it has been applied.
    pub fn write_once(&mut self, grant: &Lease) {
        self.commands.push(Command::WriteOnce(*grant));
    }

    /// Reads the storage's largest accepted token.
    pub fn read(&mut self) {
        self.commands.push(Command::Read);
    }

    /// Deletes the lock by its name, whoever holds it ([`Command::ReleaseByName`]).
    pub fn release_by_name(&mut self) {
        self.commands.push(Command::ReleaseByName);
    }

    /// Releases `grant`'s lease ([`Command::Release`]: only if it is still this lease).
    pub fn release(&mut self, grant: &Lease) {
        self.commands.push(Command::Release(*grant));
    }

    /// Sets the timer.
    pub fn set_timer(&mut self) {
        self.commands.push(Command::SetTimer);
    }

    /// Adds any command.
    pub fn push(&mut self, command: Command) {
        self.commands.push(command);
    }

    /// The commands issued, in order.
    pub fn as_slice(&self) -> &[Command] {
        &self.commands
    }

    /// Takes the commands out, leaving none.
    pub(crate) fn take(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.commands)
    }
}

/// One instance of your program, as a sans-IO state machine: what it does when it starts and when
/// something happens, and what it believes.
///
/// The checker runs several instances of the same `Client` value, so the instances are
/// interchangeable: the state must not hold the instance's identity (symmetry reduction relies on
/// it). The state must be finite in practice: a counter that grows forever makes the check run
/// into its state bound ([`Environment::max_states`](super::Environment::max_states)) and report that it did.
pub trait Client: Clone + Debug + Send + Sync + 'static {
    /// The instance's state: your own type. `Ord` lets the checker put interchangeable instances
    /// in a canonical order.
    type State: Clone + Debug + Eq + Hash + Ord + Send + Sync + 'static;

    /// The instance starts: its first commands and state.
    fn start(&self, out: &mut Commands) -> Self::State;

    /// Something happened: the next state and commands, or `None` when the event changes nothing
    /// (and no command may be issued then).
    fn on_event(
        &self,
        state: &Self::State,
        event: &Event,
        out: &mut Commands,
    ) -> Option<Self::State>;

    /// Whether the instance believes it holds the lease in `state` (`single_believer`).
    fn holds(&self, state: &Self::State) -> bool;

    /// Whether the instance is done in `state` (`clients_finish`).
    fn finished(&self, state: &Self::State) -> bool;

    /// The lease under which the instance's work is running in `state`, if it is
    /// (`work_stopped_before_successor`, `work_ran`). By default `None`: nothing is known of the
    /// work, `work_stopped_before_successor` holds vacuously and its companion `work_ran` says
    /// so by being violated. Override it to check that the work stops before a later lease is
    /// granted.
    fn working_under(&self, state: &Self::State) -> Option<Lease> {
        let _ = state;
        None
    }

    /// Tells a step of a counterexample in your words: `me` is the instance's name (`client-0`),
    /// `event` what it was told, `before` and `after` its states, `sent` what it issued. `None`
    /// keeps the environment's own telling.
    fn narrate(
        &self,
        me: &str,
        event: &Event,
        before: &Self::State,
        after: &Self::State,
        sent: &[Command],
    ) -> Option<String> {
        let _ = (me, event, before, after, sent);
        None
    }
}

/// What the lock service does with a request for the lease while someone holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Busy {
    /// The request waits until the lease is free (a blocking acquire; the catalog's models).
    #[default]
    Wait,
    /// The request is answered at once with [`super::Event::Refused`] (`SET NX` returning nil).
    Refuse,
}

/// What the holder learns when its lease ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LeaseEnd {
    /// Nothing: the lease runs out on the server's clock and the holder is not told (a Redis key
    /// with a TTL; the catalog's models).
    #[default]
    Silent,
    /// The holder is sent [`super::Event::LeaseLost`], which may arrive late (an etcd lease whose
    /// keepalive stream reports it gone, a ZooKeeper session-expired event).
    Notified,
}

/// The lock service's semantics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Service {
    /// What it does with a request while the lease is held.
    pub busy: Busy,
    /// Whether the holder is told when its lease ends.
    pub end: LeaseEnd,
    /// Whether it may restart (once, at any moment) without persistence, losing the lease and
    /// its token counter (Redis without an append-only file).
    pub restarts: bool,
}

impl Service {
    /// A Redis key with a TTL (`SET NX PX`): silent expiry; a busy request is refused at once.
    pub const REDIS: Service = Service {
        busy: Busy::Refuse,
        end: LeaseEnd::Silent,
        restarts: false,
    };
    /// An etcd lock on a lease (`etcdctl lock`): a busy request waits in line; the holder learns
    /// from its keepalive that the lease ended.
    pub const ETCD: Service = Service {
        busy: Busy::Wait,
        end: LeaseEnd::Notified,
        restarts: false,
    };
    /// A ZooKeeper lock of ephemeral sequential nodes: a busy request waits on its predecessor;
    /// the holder is told when its session expired.
    pub const ZOOKEEPER: Service = Service {
        busy: Busy::Wait,
        end: LeaseEnd::Notified,
        restarts: false,
    };
}
