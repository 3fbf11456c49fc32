//! What nodes and clients send each other over TCP: one frame per message, a 4-byte big-endian
//! length and that many bytes of JSON. One connection carries requests and answers in turn.

use super::machine::{Op, Reply};
use super::TypeConfig;
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 64 << 20;

/// A request to a node.
#[derive(Serialize, Deserialize)]
pub enum Request {
    /// Raft: append entries (and heartbeats) from the leader.
    Append(AppendEntriesRequest<TypeConfig>),
    /// Raft: a candidate asks for a vote.
    Vote(VoteRequest<u64>),
    /// Raft: a chunk of a snapshot from the leader.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A client's command, proposed by the node if it leads.
    Client(Op),
    /// The node's view of the cluster.
    Status,
}

/// A node's answer to a [`Request`] of the same kind.
#[derive(Serialize, Deserialize)]
pub enum Response {
    /// To [`Request::Append`].
    Append(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    /// To [`Request::Vote`].
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    /// To [`Request::Snapshot`].
    Snapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// To [`Request::Client`].
    Client(ClientAnswer),
    /// To [`Request::Status`].
    Status(Status),
}

/// What a node did with a client's command.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ClientAnswer {
    /// Committed and applied: the state machine's reply.
    Done(Reply),
    /// This node does not lead: ask `leader` (its address) when known. The command was not
    /// proposed here.
    NotLeader {
        /// The leader's address, if this node knows one.
        leader: Option<String>,
    },
    /// Proposed but not known to be committed (leadership lost meanwhile, the node shutting
    /// down): the command may or may not take effect.
    Unknown(String),
}

/// A node's view of the cluster, for tests and operators.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The node's id.
    pub id: u64,
    /// The leader this node knows of.
    pub leader: Option<u64>,
    /// The node's current term.
    pub term: u64,
    /// The index of the last entry applied to its state machine.
    pub applied: Option<u64>,
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWriteExt + Unpin, T: Serialize>(
    w: &mut W,
    message: &T,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME)
        .ok_or_else(|| std::io::Error::other(format!("a {}-byte frame is too long", body.len())))?;
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf).await?;
    w.flush().await
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub async fn read_frame<R: AsyncReadExt + Unpin, T: DeserializeOwned>(
    r: &mut R,
) -> std::io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "a {len}-byte frame is longer than the {MAX_FRAME}-byte limit"
        )));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| std::io::Error::other(format!("a malformed frame: {e}")))
}
