//! A lean explicit-state search over any Stateright [`Model`]: the same states, the same
//! properties and the same verdicts as Stateright's depth-first checker, with less machinery
//! per state and threads that share work.
//!
//! Stateright's checker keeps, for every pending state, the list of action indices that reached
//! it (to rebuild a path for each discovery), stores fingerprints in a concurrent map, and hands
//! work between threads in blocks that, on two cores, made a second thread no faster. This
//! search keeps for a pending state only what deciding the properties needs (its depth and which
//! `eventually` properties its path has not yet met), stores fingerprints in sharded sets, and
//! has a busy thread hand half of its pending states to an idle one. Asked to, it keeps each
//! fingerprint's parent (8 more bytes a state) and rebuilds the path to a discovery by replaying
//! the model along the chain; minimal counterexamples come from the breadth-first search in
//! [`super::shortest`].
//!
//! The rules follow Stateright's depth-first checker exactly, so that the two agree on counts
//! and verdicts (the tests compare them on every model of the catalog):
//! - a state is counted when generated inside the model's boundary, and explored the first time
//!   its fingerprint (of its symmetry representative, when reducing) is seen;
//! - an `always` property is violated by a state where it is false, a `sometimes` property is
//!   met by a state where it is true;
//! - an `eventually` property is violated by a terminal state (no successor inside the boundary)
//!   whose path never met it; a successor already seen counts as a successor (a join, not an
//!   end), so like Stateright this search can miss a violation whose path joins a seen state;
//! - a state where no property can be decided any more (every `always` property false there,
//!   every `sometimes` property true there, every `eventually` property already broken elsewhere
//!   and met on this state's path) is not expanded;
//! - with one thread the order of exploration is Stateright's: last action first.

use super::seen::{fingerprint, Seen, ROOT};
use super::{next_nap, Counts, Trail, FIRST_NAP};
use parking_lot::Mutex;
use stateright::{Expectation, Model};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// What the search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explored<S, A> {
    /// Distinct states (symmetry representatives, when reducing).
    pub unique: usize,
    /// States generated inside the boundary, repeats included.
    pub generated: usize,
    /// The deepest state explored (the initial states are at depth 1).
    pub max_depth: usize,
    /// The names of the properties with a discovery: a violated `always` or `eventually`
    /// property, a met `sometimes` property.
    pub discovered: Vec<&'static str>,
    /// With [`Search::paths`], a path to each discovery, in the order of `discovered`: from an
    /// initial state to the state that violated an `always` property, met a `sometimes`
    /// property, or ended a run that never met an `eventually` property.
    pub paths: Vec<Trail<S, A>>,
    /// Whether the search found more than [`Search::max_unique`] distinct states and stopped
    /// before covering the space.
    pub cut: bool,
}

/// How to search.
pub struct Search<S> {
    /// Worker threads (at least one).
    pub threads: usize,
    /// The symmetry representative of a state, when reducing.
    pub symmetry: Option<fn(&S) -> S>,
    /// The most distinct states to find: the search stops as soon as it finds one more, and
    /// says so ([`Explored::cut`]).
    pub max_unique: Option<usize>,
    /// Keep each state's parent, so that [`Explored::paths`] can be rebuilt.
    pub paths: bool,
}

/// A pending state: the state, its fingerprint, its depth, and the `eventually` properties its
/// path has not met.
struct Job<S> {
    state: S,
    fp: u64,
    depth: u32,
    ebits: u64,
}

/// The fingerprint a state is known by: its symmetry representative's, when reducing.
fn key<S: Hash>(search: &Search<S>, state: &S) -> u64 {
    match search.symmetry {
        Some(representative) => fingerprint(&representative(state)),
        None => fingerprint(state),
    }
}

/// Work shared between threads: pending states given away by busy threads, and who is idle.
struct Pool<S> {
    jobs: Mutex<Vec<Job<S>>>,
    /// Whether `jobs` holds some (a hint for givers, written under its lock).
    stocked: AtomicBool,
    idle: AtomicUsize,
    done: AtomicBool,
}

struct Shared<'m, M: Model> {
    model: &'m M,
    properties: Vec<stateright::Property<M>>,
    search: &'m Search<M::State>,
    seen: Seen,
    pool: Pool<M::State>,
    generated: AtomicUsize,
    /// Distinct states inserted into `seen`.
    unique: AtomicUsize,
    /// Whether `unique` passed the bound.
    cut: AtomicBool,
    max_depth: AtomicUsize,
    /// One flag per property: discovered.
    discovered: Vec<AtomicBool>,
    /// One per property: the fingerprint of the state where it was first discovered.
    found_at: Vec<AtomicU64>,
    threads: usize,
}

/// Explores every state of `model` reachable inside its boundary, calling `progress` from the
/// calling thread: often at first, then every 100 ms, and once at the end.
pub fn explore<M>(
    model: &M,
    search: &Search<M::State>,
    progress: &mut dyn FnMut(Counts),
) -> Explored<M::State, M::Action>
where
    M: Model + Sync,
    M::State: Hash + Send,
    M::Action: Clone,
{
    let shared = Shared::new(model, search);
    shared.seed();
    let threads = shared.threads;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| scope.spawn(|| work(&shared)))
            .collect();
        // Poll finely at first so that a short search reports its real counts; back off to
        // MAX_NAP.
        let mut nap = FIRST_NAP;
        while !workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(nap);
            nap = next_nap(nap);
            progress(shared.counts());
        }
        for w in workers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    progress(shared.counts());
    shared.found()
}

impl<'m, M: Model> Shared<'m, M>
where
    M::State: Hash,
    M::Action: Clone,
{
    fn new(model: &'m M, search: &'m Search<M::State>) -> Self {
        let properties = model.properties();
        assert!(
            properties.len() <= 64,
            "a model with more than 64 properties"
        );
        Shared {
            model,
            search,
            seen: Seen::new(search.paths),
            pool: Pool {
                jobs: Mutex::new(Vec::new()),
                stocked: AtomicBool::new(false),
                idle: AtomicUsize::new(0),
                done: AtomicBool::new(false),
            },
            generated: AtomicUsize::new(0),
            unique: AtomicUsize::new(0),
            cut: AtomicBool::new(false),
            max_depth: AtomicUsize::new(0),
            discovered: properties.iter().map(|_| AtomicBool::new(false)).collect(),
            found_at: properties.iter().map(|_| AtomicU64::new(ROOT)).collect(),
            threads: search.threads.max(1),
            properties,
        }
    }

    /// The initial states inside the boundary, counted, seen and pending, with every
    /// `eventually` property still to meet.
    fn seed(&self) {
        let ebits = self
            .properties
            .iter()
            .enumerate()
            .filter(|(_, p)| p.expectation == Expectation::Eventually)
            .map(|(i, _)| 1u64 << i)
            .sum::<u64>();
        let mut first = Vec::new();
        for state in self.model.init_states() {
            if !self.model.within_boundary(&state) {
                continue;
            }
            self.generated.fetch_add(1, Ordering::Relaxed);
            let fp = key(self.search, &state);
            if !self.seen.insert(fp, ROOT) {
                continue;
            }
            if self.past_bound() {
                break;
            }
            first.push(Job {
                state,
                fp,
                depth: 1,
                ebits,
            });
        }
        // Stateright pops its initial states from the back as well.
        self.pool
            .stocked
            .store(!first.is_empty(), Ordering::Relaxed);
        *self.pool.jobs.lock() = first;
    }

    /// Counts one more distinct state; whether it is one past the bound (the search then
    /// stops: every thread sees `done`).
    fn past_bound(&self) -> bool {
        let unique = self.unique.fetch_add(1, Ordering::Relaxed) + 1;
        let past = self.search.max_unique.is_some_and(|max| unique > max);
        if past {
            self.cut.store(true, Ordering::Relaxed);
            self.pool.done.store(true, Ordering::Relaxed);
        }
        past
    }

    fn counts(&self) -> Counts {
        Counts {
            unique: self.seen.len(),
            generated: self.generated.load(Ordering::Relaxed),
            max_depth: self.max_depth.load(Ordering::Relaxed),
        }
    }

    /// Records a discovery of property `i` at the state with fingerprint `fp` (the first one
    /// is kept).
    fn discover(&self, i: usize, fp: u64) {
        if !self.discovered[i].swap(true, Ordering::Relaxed) {
            self.found_at[i].store(fp, Ordering::Relaxed);
        }
    }

    /// What the search found, with a path to each discovery when parents were kept.
    fn found(&self) -> Explored<M::State, M::Action> {
        let mut discovered = Vec::new();
        let mut paths = Vec::new();
        for (i, p) in self.properties.iter().enumerate() {
            if !self.discovered[i].load(Ordering::Relaxed) {
                continue;
            }
            discovered.push(p.name);
            if self.search.paths {
                let fp = self.found_at[i].load(Ordering::Relaxed);
                paths.push(self.replay(fp).expect("a discovery's chain replays"));
            }
        }
        Explored {
            unique: self.seen.len(),
            generated: self.generated.load(Ordering::Relaxed),
            max_depth: self.max_depth.load(Ordering::Relaxed),
            discovered,
            paths,
            cut: self.cut.load(Ordering::Relaxed),
        }
    }

    /// The path to the state with fingerprint `fp`: the chain of parents from an initial state,
    /// followed by replaying the model, at each step taking the action whose successor has the
    /// next fingerprint. `None` if the chain is unknown or the model does not replay it (a model
    /// whose steps are not deterministic).
    fn replay(&self, fp: u64) -> Option<Trail<M::State, M::Action>> {
        let (model, search) = (self.model, self.search);
        let chain = self.seen.chain(fp)?;
        let mut state = model
            .init_states()
            .into_iter()
            .find(|s| key(search, s) == chain[0])?;
        let mut trail = Vec::with_capacity(chain.len());
        let mut actions = Vec::new();
        for &next_fp in &chain[1..] {
            model.actions(&state, &mut actions);
            let (action, next) = actions.drain(..).find_map(|action| {
                let next = model.next_state(&state, action.clone())?;
                let fits = model.within_boundary(&next) && key(search, &next) == next_fp;
                fits.then_some((action, next))
            })?;
            trail.push((state, Some(action)));
            state = next;
        }
        trail.push((state, None));
        Some(trail)
    }
}

/// One worker: depth-first over its own stack, taking work from the pool when it runs dry and
/// giving half of its stack to the pool when another thread is idle.
fn work<M>(shared: &Shared<M>)
where
    M: Model,
    M::State: Hash,
    M::Action: Clone,
{
    let model = shared.model;
    let mut stack: Vec<Job<M::State>> = Vec::new();
    let mut actions = Vec::new();
    let mut local_max_depth = 0usize;
    loop {
        let Some(job) = stack.pop() else {
            match take(shared) {
                Some(jobs) => {
                    stack = jobs;
                    continue;
                }
                None => return,
            }
        };
        if shared.pool.done.load(Ordering::Relaxed) {
            return;
        }
        let Job {
            state,
            fp,
            depth,
            mut ebits,
        } = job;
        if depth as usize > local_max_depth {
            local_max_depth = depth as usize;
            shared
                .max_depth
                .fetch_max(local_max_depth, Ordering::Relaxed);
        }
        // Whether this state can still decide anything; Stateright's checker does not expand a
        // state where nothing can (every `always` false here, every `sometimes` true here, every
        // `eventually` decided).
        let mut awaiting = false;
        for (i, p) in shared.properties.iter().enumerate() {
            let discovered = &shared.discovered[i];
            match p.expectation {
                Expectation::Always | Expectation::Sometimes => {
                    if awaiting && discovered.load(Ordering::Relaxed) {
                        continue;
                    }
                    if (p.condition)(model, &state) == (p.expectation == Expectation::Always) {
                        awaiting = true;
                    } else {
                        shared.discover(i, fp);
                    }
                }
                Expectation::Eventually => {
                    let bit = 1u64 << i;
                    if ebits & bit == 0 && discovered.load(Ordering::Relaxed) {
                        continue;
                    }
                    awaiting = true;
                    if (p.condition)(model, &state) {
                        ebits &= !bit;
                    }
                }
            }
        }
        if !awaiting {
            continue;
        }
        let mut terminal = true;
        model.actions(&state, &mut actions);
        for action in actions.drain(..) {
            let Some(next) = model.next_state(&state, action) else {
                continue;
            };
            if !model.within_boundary(&next) {
                continue;
            }
            terminal = false;
            shared.generated.fetch_add(1, Ordering::Relaxed);
            let next_fp = key(shared.search, &next);
            if shared.seen.insert(next_fp, fp) {
                if shared.past_bound() {
                    return;
                }
                stack.push(Job {
                    state: next,
                    fp: next_fp,
                    depth: depth + 1,
                    ebits,
                });
            }
        }
        if terminal {
            for (i, p) in shared.properties.iter().enumerate() {
                if ebits & 1 << i != 0 {
                    shared.discover(i, fp);
                    debug_assert_eq!(p.expectation, Expectation::Eventually);
                }
            }
        }
        let give = to_give(
            shared.threads,
            shared.pool.idle.load(Ordering::Relaxed),
            shared.pool.stocked.load(Ordering::Relaxed),
            stack.len(),
        );
        if give > 0 {
            // The oldest: the shallowest states, with the most work below them.
            let mut jobs = shared.pool.jobs.lock();
            jobs.extend(stack.drain(..give));
            shared.pool.stocked.store(true, Ordering::Relaxed);
        }
    }
}

/// How many of its `pending` states a thread gives to the pool: half, when it has company, some
/// thread is idle and the pool is empty (it asks after every state: relaxed loads of lines
/// that are rarely written, so cheap).
fn to_give(threads: usize, idle: usize, stocked: bool, pending: usize) -> usize {
    if threads > 1 && idle > 0 && !stocked {
        pending / 2
    } else {
        0
    }
}

/// Work from the pool for a thread whose stack is empty, waiting while other threads may still
/// give some; `None` when every thread is idle and the pool is empty (or the search is done).
fn take<M: Model>(shared: &Shared<M>) -> Option<Vec<Job<M::State>>> {
    let pool = &shared.pool;
    let mut idle = false;
    loop {
        if pool.done.load(Ordering::Relaxed) {
            return None;
        }
        {
            let mut jobs = pool.jobs.lock();
            if !jobs.is_empty() {
                if idle {
                    pool.idle.fetch_sub(1, Ordering::SeqCst);
                }
                // All of it: a thread that still has work gives half again as soon as it sees
                // another idle and the pool empty.
                pool.stocked.store(false, Ordering::Relaxed);
                return Some(std::mem::take(&mut *jobs));
            }
            if !idle {
                idle = true;
                pool.idle.fetch_add(1, Ordering::SeqCst);
            }
            if pool.idle.load(Ordering::SeqCst) == shared.threads {
                // Everyone is idle with the pool empty, seen under the pool's lock: no work
                // remains anywhere.
                pool.done.store(true, Ordering::Relaxed);
                return None;
            }
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

#[cfg(test)]
mod tests;
