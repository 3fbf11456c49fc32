//! Raft inside the database: the lock table and the fenced data in one Raft group (openraft).
//!
//! Every lock operation and every fenced write is one command in the replicated log. The state
//! machine ([`Machine`]) is the protocol core: a [`LeaseTable`](crate::protocol::LeaseTable) per
//! lock, whose token counter is replicated state (so tokens strictly increase across leader
//! changes: each grant is a later entry of one log), and a [`Fence`](crate::protocol::Fence) per
//! key. A fenced write is decided by the same log that orders the grants.
//!
//! Lease time is the proposing leader's clock stamped on the command, never lowered by the
//! machine. On one machine every node shares the clock; across machines, clocks must agree within
//! the margin a holder keeps ([`default_drift`](crate::backend::default_drift)).
//!
//! Reads (`holder`, `read`) also go through the log, so every answer is linearizable; a node that
//! has lost leadership cannot commit and answers nothing stale.

mod machine;
mod node;
mod store;
pub(crate) mod wire;

pub use self::machine::{Command, Machine, Op, Reply};
pub use self::node::{serve, wall_clock_us, NodeError, NodeOptions};
pub use self::wire::Status;

use std::io::Cursor;

openraft::declare_raft_types!(
    /// The openraft types of fencecheck's Raft group.
    pub TypeConfig:
        D = Command,
        R = Reply,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);
