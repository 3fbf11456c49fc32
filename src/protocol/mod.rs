//! The sans-IO protocol core: the rules of a fenced lease, with no clock, thread, lock or I/O.
//!
//! Everything in fencecheck that decides who holds a lease or whether a write is accepted calls
//! these types: the Stateright models hold them in their state, the in-process
//! [`LeaseLock`](crate::local::LeaseLock) wraps them in a mutex, and backends that cannot run Rust
//! (a Lua script, a SQL statement) are tested against them.
//!
//! Time is an input. Every method that needs it takes `now` as a `u64` in whatever unit the caller
//! uses (logical ticks in the models, nanoseconds in the in-process lock); the core never reads a
//! clock. A lease with `expires_at <= now` is free.

mod elector;
mod fence;
mod history;
mod holder;
mod leader_lease;
mod lease;
mod register;
mod session;
mod token;
mod trace;
mod ttl;

pub use elector::{
    Attempt, Conflict, ElectionTiming, Elector, LeaseObject, LeaseRecord, TimingError,
};
pub use fence::{Fence, FencePolicy, StaleWrite};
pub use history::{
    one_leader_per_term, storage_in_lease_order, History, HistoryError, HistoryEvent, LeaseOrder,
    TermReused, TokenOrder,
};
pub use holder::{
    default_drift, default_grace, renew_every, safe_deadline, Phase, Renewals, Schedule,
    ScheduleError, StopPolicy, StopStep, StopTimer,
};
pub use leader_lease::{Drift, LeaderLease, LeaderLeaseError};
pub use lease::{Acquire, Lease, LeaseError, LeaseTable};
pub use register::{Campaign, TermRegister};
pub use session::{Refused, SessionLock};
pub use token::{NegativeToken, Token, TokenExhausted, TokenIssuer};
pub use trace::{Observed, Trace, TraceEvent, TTL_NOTE};
pub use ttl::{Ttl, TtlError, MAX_TTL};
