//! The in-process fenced lease lock: what a program uses to elect one of its threads, with the
//! same rules (and the same code) the models check.

mod clock;
mod lock;
mod published;
mod store;

pub use clock::{Clock, CoarseClock, ManualClock, SystemClock, TickClock};
pub use lock::{AcquireError, LeaseGuard, LeaseLock};
pub use store::FencedStore;
