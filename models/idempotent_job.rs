//! The cheapest answer: no lock at all, an idempotent job.
//!
//! N instances of a nightly job all run for the same run id. Each run finishes by applying its
//! effect. An idempotent effect (an upsert keyed by the run id) leaves the same state however many
//! runs finish: `effect_exactly_once` holds with no lock. A non-idempotent effect (an append, an
//! increment) is applied once per run. Putting a TTL lock (the protocol core's `LeaseTable`) in
//! front of a non-idempotent job does not save it: a run that outlives its lease lets another
//! instance run too. The lock is an optimisation; idempotence is the correctness rule.

use super::{
    declared_properties, prop, Declared, Declares, Expect, Expected, Narrate, Params, Step,
};
use crate::protocol::{Acquire, LeaseTable};
use stateright::{Expectation, Model, Property};

/// How the job applies its effect, and whether a lock guards it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobVariant {
    /// No lock; the effect is an upsert keyed by the run id.
    Idempotent,
    /// No lock; the effect is an append.
    Append,
    /// A TTL lock in front of an append.
    LockedAppend,
}

/// The model: `instances` instances of one job run.
#[derive(Clone, Debug)]
pub struct JobModel {
    /// Instances started for the run.
    pub instances: usize,
    /// The variant.
    pub variant: JobVariant,
}

/// One instance.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Instance {
    /// Not started.
    Idle,
    /// Running the job (holding the lock, in the locked variant).
    Running,
    /// Finished: its effect is applied.
    Done,
    /// Did not get the lock and skipped the run.
    Skipped,
}

/// The state: the instances, the lock, and the job's stored effect.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JobState {
    /// Each instance.
    pub instances: Vec<Instance>,
    /// The lock (locked variant only); time is the lock's logical clock.
    pub lock: LeaseTable<u8>,
    /// The lock's logical time.
    pub now: u64,
    /// The stored effect: rows for the run id (an upsert keeps one, an append adds one).
    pub rows: u8,
}

/// What happens next.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum JobAction {
    /// Instance starts (taking the lock first, in the locked variant).
    Start(u8),
    /// Instance finishes and applies its effect.
    Finish(u8),
    /// The lock's lease runs out while its holder is still running.
    Expire,
}

const TTL: u64 = 1;

impl Model for JobModel {
    type State = JobState;
    type Action = JobAction;

    fn init_states(&self) -> Vec<JobState> {
        vec![JobState {
            instances: vec![Instance::Idle; self.instances],
            lock: LeaseTable::new(),
            now: 0,
            rows: 0,
        }]
    }

    fn actions(&self, s: &JobState, actions: &mut Vec<JobAction>) {
        for (i, inst) in s.instances.iter().enumerate() {
            match inst {
                Instance::Idle => actions.push(JobAction::Start(i as u8)),
                Instance::Running => actions.push(JobAction::Finish(i as u8)),
                _ => {}
            }
        }
        if self.variant == JobVariant::LockedAppend && s.lock.holder(s.now).is_some() {
            actions.push(JobAction::Expire);
        }
    }

    fn next_state(&self, s: &JobState, action: JobAction) -> Option<JobState> {
        let mut next = s.clone();
        match action {
            JobAction::Start(i) => {
                next.instances[i as usize] = if self.variant == JobVariant::LockedAppend {
                    match next.lock.acquire(i, next.now, TTL).ok()? {
                        Acquire::Granted(_) => Instance::Running,
                        Acquire::Busy { .. } => Instance::Skipped,
                    }
                } else {
                    Instance::Running
                };
            }
            JobAction::Finish(i) => {
                next.instances[i as usize] = Instance::Done;
                next.rows = match self.variant {
                    JobVariant::Idempotent => 1,
                    JobVariant::Append | JobVariant::LockedAppend => s.rows + 1,
                };
                if self.variant == JobVariant::LockedAppend {
                    let token = next
                        .lock
                        .current()
                        .filter(|l| l.owner == i)
                        .map(|l| l.token);
                    if let Some(token) = token {
                        next.lock.release(&i, token).ok()?;
                    }
                }
            }
            JobAction::Expire => {
                next.now = next.lock.holder(s.now)?.expires_at;
                // Keep time bounded: the table is rebased so that `now` stays 0.
                next.lock.rebase(next.now);
                next.now = 0;
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        declared_properties(self)
    }
}

impl Narrate for JobModel {
    fn narrate(&self, before: &JobState, action: &JobAction, after: &JobState) -> Step {
        let who = |i: &u8| format!("instance-{i}");
        match action {
            JobAction::Start(i) => {
                let text = match (self.variant, &after.instances[*i as usize]) {
                    (JobVariant::LockedAppend, Instance::Running) => {
                        let token = after.lock.current().map_or(0, |l| l.token.get());
                        format!(
                            "{} takes the lock (token {token}) and starts the job",
                            who(i)
                        )
                    }
                    (_, Instance::Skipped) => {
                        format!("{} finds the lock taken and skips the run", who(i))
                    }
                    _ => format!("{} starts the job", who(i)),
                };
                Step {
                    from: who(i),
                    to: if self.variant == JobVariant::LockedAppend {
                        "lock-service".into()
                    } else {
                        who(i)
                    },
                    text,
                }
            }
            JobAction::Finish(i) => Step {
                from: who(i),
                to: "storage".into(),
                text: format!(
                    "{} finishes and applies its effect: {} row(s) for the run",
                    who(i),
                    after.rows
                ),
            },
            JobAction::Expire => {
                let owner = before.lock.current().map_or(0, |l| l.owner);
                Step {
                    from: "lock-service".into(),
                    to: "lock-service".into(),
                    text: format!(
                        "the lease of {} expires while its job still runs",
                        who(&owner)
                    ),
                }
            }
        }
    }
}

not_symmetric!(JobModel, JobState);

const EXACTLY_ONCE: &str = "the run's effect is stored as if the job ran once";

/// Every property of this model, declared once.
const DECLARED: &[Declared<JobModel>] = &[
    Declared {
        name: prop::EFFECT_EXACTLY_ONCE,
        kind: Expectation::Always,
        meaning: EXACTLY_ONCE,
        expect: Expect::When {
            rule: "holds only for the idempotent upsert",
            when: |m| match m.variant {
                JobVariant::Idempotent => Expected::Holds,
                JobVariant::Append | JobVariant::LockedAppend => Expected::Violated,
            },
        },
        condition: |_: &JobModel, s: &JobState| s.rows <= 1,
    },
    Declared {
        name: "job_ran",
        kind: Expectation::Sometimes,
        meaning: "some run applies its effect",
        expect: Expect::Holds,
        condition: |_: &JobModel, s: &JobState| s.rows >= 1,
    },
    Declared {
        name: "job_done",
        kind: Expectation::Eventually,
        meaning: "every complete history has the effect applied",
        expect: Expect::Holds,
        condition: |_: &JobModel, s: &JobState| s.rows >= 1,
    },
];

impl Declares for JobModel {
    fn declarations(&self) -> &'static [Declared<Self>] {
        DECLARED
    }
}

catalog_entry! {
    JobModel, clients: 2..=6, defaults: Params::sized(3, 1, 0);
    /// No lock, an idempotent effect.
    IdempotentJob "idempotent-job": "no lock; every instance runs; the effect is an upsert keyed by the run id",
        |p| JobModel { instances: p.clients, variant: JobVariant::Idempotent };
    /// No lock, an append.
    AppendJob "append-job": "no lock; every instance runs; the effect is an append (not idempotent)",
        |p| JobModel { instances: p.clients, variant: JobVariant::Append };
    /// A TTL lock in front of an append.
    LockedAppendJob "locked-append-job": "a TTL lock in front of an append: the lock is only an optimisation",
        |p| JobModel { instances: p.clients, variant: JobVariant::LockedAppend };
}
