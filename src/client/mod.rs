//! Check your own lock client: the code that uses a lease, placed in the world the catalog's models
//! check.
//!
//! A job runner, a scheduler or a leader loop built on a lock makes the catalog's mistakes in its
//! own code: it checks that the lease is live and then writes, it forgets to send the token, it
//! keeps working after a rejected write. This module lets such code meet the same environment as
//! the `ttl-only` and `fenced` models: the catalog's lock service (the core's lease table, a TTL
//! lease that may expire at any moment while it is live, as on Redis) and its storage (the core's
//! fence, or storage that accepts every write), with messages delayed and reordered (a paused
//! process is a message that stays in flight).
//!
//! You write one instance of your program as a sans-IO state machine, a [`Client`]: it starts,
//! reacts to [`Event`]s and answers with [`Command`]s. [`Environment`] places instances of it in
//! the world; [`verify`] checks every reachable state with symmetry reduction and reports each
//! property with a minimal counterexample told in your client's words.
//!
//! ```
//! use fencecheck::client::{Client, Commands, Environment, Event, Lease};
//!
//! /// Takes the lease, writes once with its token, releases.
//! #[derive(Clone, Debug)]
//! struct OneWrite;
//!
//! #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
//! enum State {
//!     Waiting,
//!     Writing(Lease),
//!     Done,
//! }
//!
//! impl Client for OneWrite {
//!     type State = State;
//!
//!     fn start(&self, out: &mut Commands) -> State {
//!         out.acquire();
//!         State::Waiting
//!     }
//!
//!     fn on_event(&self, state: &State, event: &Event, out: &mut Commands) -> Option<State> {
//!         match (state, event) {
//!             (State::Waiting, Event::Granted(grant)) => {
//!                 out.write(grant);
//!                 Some(State::Writing(*grant))
//!             }
//!             (State::Writing(grant), Event::WriteAccepted { .. }) => {
//!                 out.release(grant);
//!                 Some(State::Done)
//!             }
//!             (State::Writing(_), Event::WriteRejected { .. }) => Some(State::Done),
//!             _ => None,
//!         }
//!     }
//!
//!     fn holds(&self, state: &State) -> bool {
//!         matches!(state, State::Writing(_))
//!     }
//!
//!     fn finished(&self, state: &State) -> bool {
//!         *state == State::Done
//!     }
//! }
//!
//! // Fenced storage keeps the writes in lease order, although two clients may believe at once.
//! let report = fencecheck::verify(Environment::new(OneWrite).instances(2));
//! report.expect_holds("storage_in_lease_order");
//! report.expect_violated("single_believer");
//! ```

//!
//! This module only re-exports: the world lives in [`crate::models::lease_service`] beside the
//! catalog's models that share its actors and properties, and the checker in [`crate::check`].

pub use crate::check::verify::{explain, try_verify, verify, Verification};
pub use crate::check::{Counterexample, Verdict};
pub use crate::models::lease_service::{
    Busy, Client, Command, Commands, Environment, EnvironmentError, Event, Lease, LeaseEnd,
    Service, TimedAction, TimedState, TimedWorld, Timing, World, WorldCfg, BUILT_IN_NAMES,
    EFFECT_EXACTLY_ONCE, MAX_PREDICATES,
};
pub use crate::protocol::FencePolicy;

/// The former name of [`Lease`] (a lease the lock service granted to the client; `Grant` is the
/// backend's answer to an acquire, `fencecheck::backend::Grant`).
#[deprecated(since = "0.1.0", note = "renamed to `Lease`")]
pub type Grant = Lease;

/// The former name of [`Timing`] (the clocked world's TTL, drift, horizon and pauses;
/// `fencecheck::local::Clock` is the in-process lock's time source).
#[deprecated(since = "0.1.0", note = "renamed to `Timing`")]
pub type Clock = Timing;
