//! The fault campaign, in Jepsen's shape: a workload (a counter in PostgreSQL that workers add
//! to under the lease, [`worker`]), a nemesis that strikes once per trial ([`Nemesis`]), and a
//! history per trial (the workers' observations on one clock) that
//! [`crate::check::campaign`] judges: increments lost, `storage_in_lease_order`, the trace
//! replayed through the model, and the counter's register history linearizable.
//!
//! The caller (`fencecheck torture`) resolves where the lock and the database are, starts any
//! throwaway servers, and lends them to the campaign through [`ServerControl`] so that the
//! kill-server nemesis can restart them. The campaign prints nothing: it reports each trial to
//! the caller as it ends.

mod history;
mod links;
mod nemesis;
mod trial;
pub mod worker;

pub use nemesis::{libfaketime, Nemesis, SKEW};

/// The network nodes (see `fencecheck_testkit::netns`) of a partition campaign: the lock
/// servers from [`SERVER_NODES`], worker `w` at [`WORKER_NODES`] + `w`.
pub const SERVER_NODES: u8 = 1;
/// See [`SERVER_NODES`].
pub const WORKER_NODES: u8 = 101;

use crate::backend::{monotonic_us, FencedStorage, LockService, LockSpec, PgFencedStore};
use crate::check::campaign::{judge, Totals, TrialRecord, TrialVerdict};
use crate::check::linearize::{Answer, Call, Operation};
use crate::check::trace::Replay;
use crate::protocol::{FencePolicy, Ttl};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Why a campaign could not run. Its verdicts are never errors: a broken rule is a verdict.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CampaignError {
    /// A setting out of range, or settings that cannot go together (one line naming the flag
    /// and what was expected).
    #[error("{0}")]
    Settings(String),
    /// A server, the database or a worker could not be used.
    #[error("{0}")]
    Unavailable(String),
    /// The caller asked the campaign to stop (a signal): the trial under way was abandoned,
    /// its workers killed; the trials before it were reported.
    #[error("interrupted during trial {trial}")]
    Interrupted {
        /// The trial abandoned, from 1.
        trial: u32,
    },
}

/// The lock servers the caller started, lent to the kill-server nemesis.
pub trait ServerControl {
    /// `kill -9` the lock server (a cluster's leader), start it again on its data and wait
    /// until it serves; says which it was. `None` when no lock server can be restarted.
    fn kill_and_restart(&mut self) -> Result<Option<String>, String>;

    /// Cut the lock service's leader off from its peers and its clients (every packet to and
    /// from it dropped); says which it was. `None` when the lock servers do not run in network
    /// namespaces of the campaign's own.
    fn isolate_leader(&mut self) -> Result<Option<String>, String> {
        Ok(None)
    }

    /// Undo every [`ServerControl::isolate_leader`].
    fn heal(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// How many trials of what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Trials to run, each with its own lock and counter (1 to 10,000).
    pub trials: u32,
    /// Workers per trial (2 to 16).
    pub workers: u32,
    /// Increments per worker per trial (1 to 100).
    pub increments: u32,
    /// The lease's time to live (50 ms to 10 s); [`Campaign::prepare`] replaces it with the one
    /// the lock service grants for it.
    pub ttl: Duration,
    /// The nemeses, taking turns; each once.
    pub nemeses: Vec<Nemesis>,
    /// Whether the workers write with their token (the control writes without). An external
    /// worker is told by `FENCECHECK_FENCE`; its trace is judged by this rule.
    pub fenced: bool,
    /// A user's own worker, any language: run as `sh -c 'exec CMD'` with its job in
    /// `FENCECHECK_*` variables, printing trace lines on stdout ([`worker::Job::env`]). `None`:
    /// fencecheck's own worker.
    pub worker_cmd: Option<String>,
}

/// Where the campaign runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The lock service; `None` for the in-process lock (workers are threads sharing it).
    pub lock: Option<LockSpec>,
    /// Whether the caller started the lock server and can restart it (kill-server).
    pub restartable: bool,
    /// The PostgreSQL the counter lives in.
    pub pg_url: String,
}

fn check_range(flag: &str, value: u64, range: RangeInclusive<u64>) -> Result<(), CampaignError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(CampaignError::Settings(format!(
        "{flag} {value}: expected {} to {}",
        range.start(),
        range.end()
    )))
}

impl Settings {
    /// Checks the settings on their own and against the lock service (`lock`: `None` for the
    /// in-process lock; `restartable`: whether the campaign's caller starts the server). Every
    /// error is one line naming the flag.
    pub fn check(&self, lock: Option<&LockSpec>, restartable: bool) -> Result<(), CampaignError> {
        check_range("--trials", self.trials.into(), 1..=10_000)?;
        check_range("--workers", self.workers.into(), 2..=16)?;
        check_range("--increments", self.increments.into(), 1..=100)?;
        check_range("--ttl-ms", self.ttl.as_millis() as u64, 50..=10_000)?;
        if self.nemeses.is_empty() {
            return Err(CampaignError::Settings(format!(
                "--nemesis: expected one or more of {}",
                Nemesis::names()
            )));
        }
        if let Some(cmd) = &self.worker_cmd {
            if cmd.trim().is_empty() {
                return Err(CampaignError::Settings(
                    "--worker-cmd: expected a command to run as each worker".into(),
                ));
            }
            if lock.is_none() {
                return Err(CampaignError::Settings(
                    "--worker-cmd: an external worker needs a lock service it can reach; expected \
                     --lock redis, etcd, zk or raft (or an address)"
                        .into(),
                ));
            }
        }
        if self.nemeses.contains(&Nemesis::Partition) {
            let cluster = matches!(
                lock,
                Some(LockSpec::Etcd { .. } | LockSpec::Zookeeper { .. } | LockSpec::Raft { .. })
            );
            if !cluster || !restartable {
                return Err(CampaignError::Settings(
                    "--nemesis partition cuts a cluster's leader off from its peers, inside \
                     network namespaces torture makes for the servers it starts: expected --lock \
                     etcd, zk or raft (a kind alone, not an address)"
                        .into(),
                ));
            }
        }
        let zk = matches!(lock, Some(LockSpec::Zookeeper { .. }));
        if zk && self.nemeses.contains(&Nemesis::ClockSkew) {
            return Err(CampaignError::Settings(
                "--nemesis clock-skew has no teeth on ZooKeeper: the server expires a session by \
                 its own clock and the client hears of it from the server, so a slow client clock \
                 forces no handover; expected pause, stall, kill-server"
                    .into(),
            ));
        }
        if lock.is_none() {
            for n in [Nemesis::KillServer, Nemesis::ClockSkew] {
                if self.nemeses.contains(&n) {
                    return Err(CampaignError::Settings(format!(
                        "--nemesis {}: not for the in-process lock (no server to kill; one clock \
                         for every worker); expected pause or stall",
                        n.name()
                    )));
                }
            }
        }
        if lock.is_some() && !restartable && self.nemeses.contains(&Nemesis::KillServer) {
            return Err(CampaignError::Settings(
                "--nemesis kill-server kills only servers torture starts itself: give --lock a \
                 kind alone (redis, etcd, zk, raft) rather than an address, or leave out \
                 kill-server"
                    .into(),
            ));
        }
        nemesis::faketime_for(&self.nemeses).map(drop)
    }

    /// The table the counter lives in: fenced and unfenced campaigns keep theirs apart.
    fn table(&self) -> &'static str {
        if self.fenced {
            "fencecheck_torture"
        } else {
            "fencecheck_torture_unfenced"
        }
    }

    /// A worker's pause after a grant and between its read and its write: a fifth of the
    /// (granted) TTL, at least 5 ms.
    fn think(&self) -> Duration {
        (self.ttl / 5).max(Duration::from_millis(5))
    }

    /// How long a pause or a stall lasts: past the lease's end on the server (the granted TTL),
    /// past the time a waiter takes to notice (the longest busy poll) and to begin its write
    /// (one think), so that the successor writes first, plus `overshoot`.
    fn strike_length(&self, granted: Duration, overshoot: Duration) -> Duration {
        granted + crate::backend::retry::POLL_BUSY.max() + self.think() + overshoot
    }

    fn policy(&self) -> FencePolicy {
        if self.fenced {
            FencePolicy::Fenced
        } else {
            FencePolicy::AcceptAll
        }
    }
}

/// One trial as it ended: its number (from 0), its nemesis, what it recorded and its verdict.
pub struct TrialDone<'a> {
    /// The trial's number, from 0.
    pub index: u32,
    /// The nemesis that struck it.
    pub nemesis: Nemesis,
    /// What it recorded.
    pub record: &'a TrialRecord,
    /// Its verdict.
    pub verdict: &'a TrialVerdict,
}

/// Every trial's record and verdict, and the totals.
pub struct Outcome {
    /// Each trial's record, in order.
    pub records: Vec<TrialRecord>,
    /// Each trial's verdict, in order.
    pub verdicts: Vec<TrialVerdict>,
    /// The totals over every trial.
    pub totals: Totals,
}

/// A campaign ready to run: its settings checked, the database's table created, the lock
/// service reached once.
pub struct Campaign {
    settings: Settings,
    target: Target,
    store: PgFencedStore,
    rt: tokio::runtime::Runtime,
    faketime: Option<PathBuf>,
    exe: PathBuf,
    /// The lease's TTL as asked and as the lock service grants it; the settings' TTL is the
    /// granted one.
    ttl: Ttl,
    /// The workers' network nodes, for the partition nemesis.
    nodes: Vec<fencecheck_testkit::netns::Node>,
}

impl Campaign {
    /// Checks the settings, creates the counter's table, and makes sure the lock service
    /// answers (within a few seconds), so that nothing fails only once trials have begun.
    /// The trials run on the TTL the lock service grants for the one asked (etcd's whole
    /// seconds, ZooKeeper's negotiated session timeout): workers think, and nemeses last, in
    /// proportion to the lease the server keeps. `exe` is the program whose `torture-worker`
    /// command runs a worker.
    pub fn prepare(
        mut settings: Settings,
        target: Target,
        exe: PathBuf,
    ) -> Result<Campaign, CampaignError> {
        settings.check(target.lock.as_ref(), target.restartable)?;
        let mut ttl = Ttl::new(settings.ttl).map_err(|e| CampaignError::Settings(e.to_string()))?;
        let faketime = nemesis::faketime_for(&settings.nemeses)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CampaignError::Unavailable(format!("a tokio runtime: {e}")))?;
        let store = rt
            .block_on(PgFencedStore::connect_with(
                &target.pg_url,
                settings.table(),
                settings.policy(),
                Duration::from_secs(10),
            ))
            .map_err(|e| CampaignError::Unavailable(format!("the database: {e}")))?;
        if let Some(spec) = &target.lock {
            let probe = crate::backend::connect(
                spec,
                "fencecheck-torture-probe",
                settings.ttl,
                Duration::from_secs(5),
            );
            let lock = rt
                .block_on(probe)
                .map_err(|e| CampaignError::Unavailable(format!("the lock service {spec}: {e}")))?;
            let holder = rt.block_on(LockService::holder(&lock));
            holder
                .map_err(|e| CampaignError::Unavailable(format!("the lock service {spec}: {e}")))?;
            ttl = LockService::ttl(&lock);
            settings.ttl = ttl.granted();
        }
        let mut nodes = Vec::new();
        if settings.nemeses.contains(&Nemesis::Partition) {
            for w in 0..settings.workers as u8 {
                let node =
                    fencecheck_testkit::netns::Node::create(WORKER_NODES + w).map_err(|e| {
                        CampaignError::Unavailable(format!("worker w{}'s network: {e}", w + 1))
                    })?;
                nodes.push(node);
            }
        }
        Ok(Campaign {
            settings,
            target,
            store,
            rt,
            faketime,
            exe,
            ttl,
            nodes,
        })
    }

    /// A one-line description: backend, fencing, sizes and nemeses.
    pub fn title(&self) -> String {
        let s = &self.settings;
        let backend = match &self.target.lock {
            None => "in-process".to_string(),
            Some(LockSpec::Redis { .. }) => "redis".to_string(),
            Some(LockSpec::Etcd { .. }) => "etcd".to_string(),
            Some(LockSpec::Zookeeper { .. }) => "zk".to_string(),
            Some(LockSpec::Raft { .. }) => "raft".to_string(),
        };
        let nemeses: Vec<&str> = s.nemeses.iter().map(|n| n.name()).collect();
        let worker = match &s.worker_cmd {
            Some(cmd) => format!(", workers `{cmd}`"),
            None => String::new(),
        };
        format!(
            "torture: {backend} lock{worker}, PostgreSQL counter {}, {} trials x {} workers x {} \
             increments, lease {}, nemesis {}",
            if s.fenced {
                "with fencing"
            } else {
                "WITHOUT fencing"
            },
            s.trials,
            s.workers,
            s.increments,
            self.ttl,
            nemeses.join(",")
        )
    }

    /// Runs every trial, telling `done` about each as it ends. Once `stop` is set (a signal
    /// handler may set it) the trial under way is abandoned within a fifth of a second (its
    /// workers killed, its faults healed) and the run ends with [`CampaignError::Interrupted`].
    pub fn run(
        &self,
        servers: &mut dyn ServerControl,
        done: &mut dyn FnMut(TrialDone),
        stop: &AtomicBool,
    ) -> Result<Outcome, CampaignError> {
        let s = &self.settings;
        let run_id = format!("{}-{}", std::process::id(), monotonic_us() / 1000);
        let mut outcome = Outcome {
            records: Vec::new(),
            verdicts: Vec::new(),
            totals: Totals::default(),
        };
        for i in 0..s.trials {
            let (nemesis, strike_at) = nemesis::for_trial(&s.nemeses, i);
            let setup = trial::Setup {
                settings: s,
                spec: self.target.lock.as_ref(),
                pg_url: &self.target.pg_url,
                table: s.table(),
                name: format!("torture-{run_id}-{i}"),
                nemesis,
                strike_at,
                faketime: self.faketime.as_deref(),
                exe: &self.exe,
                nodes: &self.nodes,
                stop,
            };
            let (mut record, ttl) = trial::run(&setup, i, servers)?;
            self.read_final(&setup.name, &mut record)?;
            // The workers' safety is the fence, not stopping: a paused holder works on, and
            // the replay checks that its late writes were refused.
            let replay = Replay::new(ttl, s.policy()).work_may_overlap();
            let verdict = judge(&record, &replay);
            outcome.totals.add_struck_by(nemesis.name(), &verdict);
            done(TrialDone {
                index: i,
                nemesis,
                record: &record,
                verdict: &verdict,
            });
            outcome.records.push(record);
            outcome.verdicts.push(verdict);
        }
        Ok(outcome)
    }

    /// Reads the counter after every worker has exited: the record's final value, and the last
    /// operation of its register history.
    fn read_final(&self, name: &str, record: &mut TrialRecord) -> Result<(), CampaignError> {
        let value = self
            .rt
            .block_on(self.store.read(name))
            .map_err(|e| CampaignError::Unavailable(format!("the database: {e}")))?;
        let value = value.map(|v| (v.token, worker::counter(&v.value)));
        record.final_value = value.map_or(0, |(_, v)| v);
        let at = record.trace.events().last().map_or(0, |e| e.at_us) + 1;
        record.register.push(Operation {
            key: 0,
            call: Call::Read,
            invoked: at,
            completed: Some((at + 1, Answer::Read(value))),
        });
        Ok(())
    }
}
