//! A lean explicit-state search over any Stateright [`Model`]: the same states, the same
//! properties and the same verdicts as Stateright's depth-first checker, with less machinery
//! per state and threads that share work.
//!
//! Stateright's checker keeps, for every pending state, the list of action indices that reached
//! it (to rebuild a path for each discovery), stores fingerprints in a concurrent map, and hands
//! work between threads in blocks that, on two cores, made a second thread no faster. This
//! search keeps for a pending state only what deciding the properties needs (its depth and which
//! `eventually` properties its path has not yet met), stores fingerprints in sharded sets, and
//! has a busy thread hand half of its pending states to an idle one. Paths are not kept:
//! minimal counterexamples come from the separate breadth-first search in `shortest`.
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

use parking_lot::Mutex;
use stateright::{Expectation, Model};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// What the search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explored {
    /// Distinct states (symmetry representatives, when reducing).
    pub unique: usize,
    /// States generated inside the boundary, repeats included.
    pub generated: usize,
    /// The deepest state explored (the initial states are at depth 1).
    pub max_depth: usize,
    /// The names of the properties with a discovery: a violated `always` or `eventually`
    /// property, a met `sometimes` property.
    pub discovered: Vec<&'static str>,
}

/// A snapshot for progress lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Distinct states so far.
    pub unique: usize,
    /// Generated states so far.
    pub generated: usize,
    /// The deepest state so far.
    pub max_depth: usize,
}

/// How to search.
pub struct Search<S> {
    /// Worker threads (at least one).
    pub threads: usize,
    /// The symmetry representative of a state, when reducing.
    pub symmetry: Option<fn(&S) -> S>,
    /// Stop once this many states were generated.
    pub target_generated: Option<usize>,
}

/// A pending state: the state, its depth, and the `eventually` properties its path has not met.
struct Job<S> {
    state: S,
    depth: u32,
    ebits: u64,
}

/// Fingerprints: 64-bit hashes of states under a fixed-key hasher, so that runs are repeatable.
fn fingerprint<T: Hash>(value: &T) -> u64 {
    ahash::RandomState::with_seeds(
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    )
    .hash_one(value)
}

/// The fingerprint a state is known by: its symmetry representative's, when reducing.
fn key<S: Hash>(search: &Search<S>, state: &S) -> u64 {
    match search.symmetry {
        Some(representative) => fingerprint(&representative(state)),
        None => fingerprint(state),
    }
}

/// A set of fingerprints: open addressing with linear probing over a power-of-two array, zero
/// marking an empty slot. A lookup usually touches one cache line (a general hash table touches
/// its control bytes and then its slot); the set doubles when a value would fill it past five
/// eighths.
struct FingerprintSet {
    slots: Vec<u64>,
    len: usize,
}

impl FingerprintSet {
    const INITIAL: usize = 1 << 10;

    fn new() -> Self {
        FingerprintSet {
            slots: vec![0; Self::INITIAL],
            len: 0,
        }
    }

    /// Whether `fp` is new (and now recorded). The slot index comes from the low bits; the
    /// shard from the high bits.
    fn insert(&mut self, fp: u64) -> bool {
        // Zero marks an empty slot: the one fingerprint zero is stored as one.
        let fp = fp.max(1);
        if (self.len + 1) * 8 > self.slots.len() * 5 {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = fp as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == fp {
                return false;
            }
            if slot == 0 {
                self.slots[i] = fp;
                self.len += 1;
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let doubled = vec![0; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        let mask = self.slots.len() - 1;
        for fp in old.into_iter().filter(|&fp| fp != 0) {
            let mut i = fp as usize & mask;
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = fp;
        }
    }
}

/// The seen fingerprints, in shards chosen by the fingerprint's top bits so that threads rarely
/// meet on one lock.
struct Seen {
    shards: Vec<Mutex<FingerprintSet>>,
}

const SHARD_BITS: u32 = 6;

impl Seen {
    fn new() -> Self {
        Seen {
            shards: (0..1 << SHARD_BITS)
                .map(|_| Mutex::new(FingerprintSet::new()))
                .collect(),
        }
    }

    /// Whether `fp` is new (and now recorded).
    fn insert(&self, fp: u64) -> bool {
        let shard = (fp >> (64 - SHARD_BITS)) as usize;
        self.shards[shard].lock().insert(fp)
    }

    /// How many fingerprints are recorded.
    fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.lock().len).sum()
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
    max_depth: AtomicUsize,
    /// One flag per property: discovered.
    discovered: Vec<AtomicBool>,
    threads: usize,
}

/// Explores every state of `model` reachable inside its boundary, calling `progress` from the
/// calling thread: often at first, then every 100 ms, and once at the end.
pub fn explore<M>(
    model: &M,
    search: &Search<M::State>,
    progress: &mut dyn FnMut(Counts),
) -> Explored
where
    M: Model + Sync,
    M::State: Hash + Send,
{
    let properties = model.properties();
    assert!(
        properties.len() <= 64,
        "a model with more than 64 properties"
    );
    let threads = search.threads.max(1);
    let shared = Shared {
        model,
        search,
        seen: Seen::new(),
        pool: Pool {
            jobs: Mutex::new(Vec::new()),
            stocked: AtomicBool::new(false),
            idle: AtomicUsize::new(0),
            done: AtomicBool::new(false),
        },
        generated: AtomicUsize::new(0),
        max_depth: AtomicUsize::new(0),
        discovered: properties.iter().map(|_| AtomicBool::new(false)).collect(),
        threads,
        properties,
    };
    let ebits = shared
        .properties
        .iter()
        .enumerate()
        .filter(|(_, p)| p.expectation == Expectation::Eventually)
        .map(|(i, _)| 1u64 << i)
        .sum::<u64>();
    let mut first = Vec::new();
    for state in model.init_states() {
        if !model.within_boundary(&state) {
            continue;
        }
        shared.generated.fetch_add(1, Ordering::Relaxed);
        shared.seen.insert(key(search, &state));
        first.push(Job {
            state,
            depth: 1,
            ebits,
        });
    }
    // Stateright pops its initial states from the back as well.
    shared
        .pool
        .stocked
        .store(!first.is_empty(), Ordering::Relaxed);
    *shared.pool.jobs.lock() = first;

    let counts = |s: &Shared<M>| Counts {
        unique: s.seen.len(),
        generated: s.generated.load(Ordering::Relaxed),
        max_depth: s.max_depth.load(Ordering::Relaxed),
    };
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
            progress(counts(&shared));
        }
        for w in workers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    progress(counts(&shared));
    Explored {
        unique: shared.seen.len(),
        generated: shared.generated.load(Ordering::Relaxed),
        max_depth: shared.max_depth.load(Ordering::Relaxed),
        discovered: shared
            .properties
            .iter()
            .zip(&shared.discovered)
            .filter(|(_, d)| d.load(Ordering::Relaxed))
            .map(|(p, _)| p.name)
            .collect(),
    }
}

/// The first pause between progress reports.
pub(crate) const FIRST_NAP: Duration = Duration::from_micros(20);
/// The longest pause between progress reports.
const MAX_NAP: Duration = Duration::from_millis(100);

/// The pause after `nap`: twice as long, at most [`MAX_NAP`].
pub(crate) fn next_nap(nap: Duration) -> Duration {
    (nap * 2).min(MAX_NAP)
}

/// One worker: depth-first over its own stack, taking work from the pool when it runs dry and
/// giving half of its stack to the pool when another thread is idle.
fn work<M>(shared: &Shared<M>)
where
    M: Model,
    M::State: Hash,
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
                        discovered.store(true, Ordering::Relaxed);
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
            let generated = shared.generated.fetch_add(1, Ordering::Relaxed) + 1;
            if shared.seen.insert(key(shared.search, &next)) {
                stack.push(Job {
                    state: next,
                    depth: depth + 1,
                    ebits,
                });
            }
            if shared
                .search
                .target_generated
                .is_some_and(|target| generated >= target)
            {
                // Stop at once: alone, a thread generates exactly the target.
                shared.pool.done.store(true, Ordering::Relaxed);
                return;
            }
        }
        if terminal {
            for (i, p) in shared.properties.iter().enumerate() {
                if ebits & 1 << i != 0 {
                    shared.discovered[i].store(true, Ordering::Relaxed);
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
mod tests {
    use super::*;
    use crate::check::{find_model, Engine, Options, Params};
    use crate::models::fenced::FencedModelCfg;
    use crate::models::lease_service::LeaseModel;
    use crate::models::Symmetric;
    use stateright::{Checker, HasDiscoveries, Model};
    use std::collections::BTreeSet;

    /// Stateright's depth-first checker on `model`: (distinct, generated, depth, discoveries).
    fn stateright(model: &LeaseModel, symmetry: bool) -> (usize, usize, usize, Vec<&'static str>) {
        let mut builder = model
            .clone()
            .checker()
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::new()));
        if symmetry {
            builder = builder.symmetry_fn(LeaseModel::representative);
        }
        let checker = builder.spawn_dfs().join();
        let mut found: Vec<_> = checker.discoveries().into_keys().collect();
        found.sort_unstable();
        (
            checker.unique_state_count(),
            checker.state_count(),
            checker.max_depth(),
            found,
        )
    }

    fn lean(model: &LeaseModel, symmetry: bool, threads: usize) -> Explored {
        let search = Search {
            threads,
            symmetry: symmetry.then_some(LeaseModel::representative as fn(&_) -> _),
            target_generated: None,
        };
        let mut found = explore(model, &search, &mut |_| {});
        found.discovered.sort_unstable();
        found
    }

    #[test]
    fn the_same_states_and_discoveries_as_stateright() {
        for (clients, writes) in [(2, 1), (2, 2), (3, 1)] {
            let model = FencedModelCfg {
                clients,
                writes_per_client: writes,
                ..FencedModelCfg::default()
            }
            .into_model();
            for symmetry in [false, true] {
                let want = stateright(&model, symmetry);
                for threads in [1, 2] {
                    let got = lean(&model, symmetry, threads);
                    let what = format!("{clients}x{writes} symmetry {symmetry} threads {threads}");
                    assert_eq!(got.unique, want.0, "{what}: distinct");
                    assert_eq!(got.discovered, want.3, "{what}: discoveries");
                    if threads == 1 {
                        assert_eq!((got.generated, got.max_depth), (want.1, want.2), "{what}");
                    }
                }
            }
        }
    }

    /// Verdicts through `check`: an `eventually` property broken only at terminal states
    /// (token-reset's progress), `always` and `sometimes` properties either way.
    #[test]
    fn the_same_verdicts_through_check() {
        for name in ["token-reset", "fenced", "idempotent-job", "leader-election"] {
            let entry = find_model(name).expect("in the catalog");
            let params: Params = (entry.defaults)();
            let check = |engine, threads| {
                let options = Options {
                    engine,
                    threads,
                    ..Options::default()
                };
                (entry.check)(&params, &options, &mut |_| {}).expect("accepted")
            };
            let want = check(Engine::Stateright, 1);
            for threads in [1, 2] {
                let got = check(Engine::Lean, threads);
                assert_eq!(got.states, want.states, "{name}");
                let verdicts = |r: &crate::check::ModelRun| {
                    r.properties.iter().map(|p| p.verdict).collect::<Vec<_>>()
                };
                assert_eq!(verdicts(&got), verdicts(&want), "{name}");
            }
        }
    }

    #[test]
    fn a_target_stops_the_search_at_once() {
        let model = FencedModelCfg::default().into_model();
        for (threads, most) in [(1, 100), (2, 200)] {
            let search = Search {
                threads,
                symmetry: None,
                target_generated: Some(100),
            };
            let found = explore(&model, &search, &mut |_| {});
            assert!(
                (100..=most).contains(&found.generated),
                "{threads} threads: {found:?}"
            );
        }
    }

    #[test]
    fn progress_is_reported_while_searching_and_at_the_end() {
        let model = FencedModelCfg {
            clients: 3,
            ..FencedModelCfg::default()
        }
        .into_model();
        let search = Search {
            threads: 1,
            symmetry: None,
            target_generated: None,
        };
        let mut reports = Vec::new();
        let found = explore(&model, &search, &mut |c| reports.push(c));
        assert!(reports.len() >= 2, "{} reports", reports.len());
        let last = reports.last().expect("a final report");
        assert_eq!(
            (last.unique, last.generated, last.max_depth),
            (found.unique, found.generated, found.max_depth)
        );
        assert!(reports.windows(2).all(|w| w[0].generated <= w[1].generated));
    }

    #[test]
    fn a_thread_gives_half_its_pending_states_to_an_idle_companion_with_an_empty_pool() {
        assert_eq!(to_give(2, 1, false, 10), 5);
        assert_eq!(to_give(4, 3, false, 3), 1);
        assert_eq!(to_give(2, 1, false, 1), 0);
        assert_eq!(to_give(2, 1, true, 10), 0, "the pool already has work");
        assert_eq!(to_give(2, 0, false, 10), 0);
        assert_eq!(to_give(1, 1, false, 10), 0);
    }

    #[test]
    fn reports_come_often_at_first_and_at_most_every_tenth_of_a_second() {
        assert_eq!(next_nap(FIRST_NAP), Duration::from_micros(40));
        assert_eq!(next_nap(Duration::from_millis(80)), MAX_NAP);
        assert_eq!(next_nap(MAX_NAP), MAX_NAP);
    }

    /// A toy model over small numbers: `edges` gives each state's successors, `props` the
    /// properties.
    #[derive(Clone)]
    struct Toy {
        edges: fn(u8) -> Vec<u8>,
        props: fn() -> Vec<stateright::Property<Toy>>,
    }

    impl Model for Toy {
        type State = u8;
        type Action = u8;
        fn init_states(&self) -> Vec<u8> {
            vec![0]
        }
        fn actions(&self, n: &u8, actions: &mut Vec<u8>) {
            actions.extend((self.edges)(*n));
        }
        fn next_state(&self, _: &u8, to: u8) -> Option<u8> {
            Some(to)
        }
        fn properties(&self) -> Vec<stateright::Property<Self>> {
            (self.props)()
        }
    }

    /// Distinct states and discoveries of Stateright's checker and of the lean search (one and
    /// two threads) on `toy`.
    fn both(toy: Toy) -> [(usize, Vec<&'static str>); 3] {
        let checker = toy
            .clone()
            .checker()
            .finish_when(HasDiscoveries::AnyOf(BTreeSet::new()))
            .spawn_dfs()
            .join();
        let mut found: Vec<_> = checker.discoveries().into_keys().collect();
        found.sort_unstable();
        let lean = |threads| {
            let search = Search {
                threads,
                symmetry: None,
                target_generated: None,
            };
            let mut e = explore(&toy, &search, &mut |_| {});
            e.discovered.sort_unstable();
            (e.unique, e.discovered)
        };
        [(checker.unique_state_count(), found), lean(1), lean(2)]
    }

    /// A state where every `always` property is false and every `sometimes` property true is
    /// not expanded: the chain 0-1-...-9 stops at 4.
    #[test]
    fn a_state_that_decides_everything_is_not_expanded() {
        use stateright::Property;
        let toy = Toy {
            edges: |n| if n < 9 { vec![n + 1] } else { vec![] },
            props: || {
                vec![
                    Property::always("not four", |_, n| *n != 4),
                    Property::sometimes("four", |_, n| *n == 4),
                ]
            },
        };
        let [stateright, one, two] = both(toy);
        assert_eq!(stateright, (5, vec!["four", "not four"]));
        assert_eq!(one, stateright);
        assert_eq!(two, stateright);
    }

    /// An `eventually` property broken at a terminal state (2, reached first) and met on the
    /// path to 3 (at 1): state 3, where the `always` property is false and the `sometimes`
    /// property true, then decides everything and is not expanded (4 and 5 stay unseen).
    #[test]
    fn eventually_is_broken_at_terminal_states_and_then_stops_mattering() {
        use stateright::Property;
        let toy = Toy {
            edges: |n| match n {
                0 => vec![1, 2],
                1 | 3 | 4 => vec![n + 1 + u8::from(n == 1)],
                _ => vec![],
            },
            props: || {
                vec![
                    Property::always("not three", |_, n| *n != 3),
                    Property::eventually("odd", |_, n| n % 2 == 1),
                    Property::sometimes("three", |_, n| *n == 3),
                ]
            },
        };
        let [stateright, one, two] = both(toy);
        assert_eq!(stateright, (4, vec!["not three", "odd", "three"]));
        assert_eq!(one, stateright);
        assert_eq!(two.1, stateright.1);
    }

    #[test]
    fn the_fingerprint_set_doubles_when_the_next_value_would_pass_five_eighths() {
        let mut set = FingerprintSet::new();
        let initial = FingerprintSet::INITIAL;
        let fit = initial * 5 / 8;
        for v in 1..=fit as u64 {
            assert!(set.insert(v));
        }
        assert_eq!(
            set.slots.len(),
            initial,
            "{fit} values fit in {initial} slots"
        );
        assert!(set.insert(fit as u64 + 1));
        assert_eq!(set.slots.len(), 2 * initial, "one more doubles the table");
    }

    #[test]
    fn the_fingerprint_set_keeps_every_distinct_value_across_growth() {
        let mut set = FingerprintSet::new();
        // Values sharing their low bits collide in the table and must probe onwards.
        let values: Vec<u64> = (0..5_000u64).map(|i| i << 20 | 7).chain([0]).collect();
        for &v in &values {
            assert!(set.insert(v), "{v} is new");
        }
        for &v in &values {
            assert!(!set.insert(v), "{v} was seen");
        }
        assert!(!set.insert(1), "zero is stored as one");
        assert_eq!(set.len, values.len());
        assert!(set.slots.len() * 5 >= set.len * 8);
    }
}
