//! A Raft node: openraft driving the [`DiskStore`] and the replicated [`Machine`](super::Machine),
//! peers and clients served on one TCP port.

use super::store::{DiskStore, OpenError};
use super::wire::{read_frame, write_frame, ClientAnswer, Request, Response, Status};
use super::{Command, TypeConfig};
use openraft::error::{
    ClientWriteError, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::Adaptor;
use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::{TcpListener, TcpStream};

/// How a node is started.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// This node's id: a key of `members`.
    pub id: u64,
    /// Every member's id and `host:port`, this node's included (where it listens).
    pub members: BTreeMap<u64, String>,
    /// Where the node keeps its vote and log.
    pub dir: PathBuf,
    /// Make the cluster of `members` if this node's storage is empty.
    pub init: bool,
    /// The leader's heartbeat interval.
    pub heartbeat: Duration,
    /// The election timeout is drawn from `[election, 2 × election)`.
    pub election: Duration,
}

/// The microseconds since the Unix epoch on this machine's clock: the stamp a leader puts on a
/// command. Nodes on several machines need their clocks synchronised within the lease margin.
pub fn wall_clock_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Why a node could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A setting is wrong: which one, and what was expected.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// Which setting.
        what: &'static str,
        /// What was wrong and what was expected.
        reason: String,
    },
    /// The node's directory is not this node's to use: another node holds it, or its log
    /// was written by two nodes at once (or damaged).
    #[error("{0}")]
    Refused(String),
    /// Storage, network or the Raft engine failed.
    #[error("raft serve failed: {0}")]
    Failed(String),
}

fn node_err(what: &str, e: impl std::fmt::Display) -> NodeError {
    NodeError::Failed(format!("{what}: {e}"))
}

/// Runs a node until the process ends: opens its storage, joins (or with `init`, makes) the
/// cluster, and serves peers and clients on its address.
pub async fn serve(options: NodeOptions) -> Result<(), NodeError> {
    let Some(addr) = options.members.get(&options.id).cloned() else {
        return Err(NodeError::Invalid {
            what: "raft node id",
            reason: format!(
                "{} is not among the members {:?}; give --id one of them",
                options.id,
                options.members.keys().collect::<Vec<_>>()
            ),
        });
    };
    let heartbeat = u64::try_from(options.heartbeat.as_millis()).unwrap_or(u64::MAX);
    let election = u64::try_from(options.election.as_millis()).unwrap_or(u64::MAX);
    let config = Config {
        cluster_name: "fencecheck".into(),
        heartbeat_interval: heartbeat.max(1),
        election_timeout_min: election,
        election_timeout_max: election.saturating_mul(2),
        snapshot_policy: SnapshotPolicy::Never,
        ..Default::default()
    }
    .validate()
    .map_err(|e| NodeError::Invalid {
        what: "raft timing",
        reason: e.to_string(),
    })?;
    let store = DiskStore::open(&options.dir).map_err(|e| match e {
        OpenError::Io(e) => node_err(&format!("opening {}", options.dir.display()), e),
        refused => NodeError::Refused(refused.to_string()),
    })?;
    let fresh = store.is_fresh();
    let (log_store, state_machine) = Adaptor::new(store);
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|e| node_err(&format!("listening on {addr}"), e))?;
    let raft = Raft::new(
        options.id,
        Arc::new(config),
        Peers,
        log_store,
        state_machine,
    )
    .await
    .map_err(|e| node_err("starting raft", e))?;
    if options.init && fresh {
        let members: BTreeMap<u64, BasicNode> = options
            .members
            .iter()
            .map(|(id, addr)| (*id, BasicNode::new(addr)))
            .collect();
        raft.initialize(members)
            .await
            .map_err(|e| node_err("initializing the cluster", e))?;
    }
    loop {
        let (stream, _) = listener
            .accept()
            .await
            .map_err(|e| node_err("accepting", e))?;
        let _ = stream.set_nodelay(true);
        let raft = raft.clone();
        let id = options.id;
        tokio::spawn(async move {
            let _ = serve_connection(id, raft, stream).await;
        });
    }
}

async fn serve_connection(
    id: u64,
    raft: Raft<TypeConfig>,
    mut stream: TcpStream,
) -> std::io::Result<()> {
    while let Some(request) = read_frame::<_, Request>(&mut stream).await? {
        let response = match request {
            Request::Append(rpc) => Response::Append(raft.append_entries(rpc).await),
            Request::Vote(rpc) => Response::Vote(raft.vote(rpc).await),
            Request::Snapshot(rpc) => Response::Snapshot(raft.install_snapshot(rpc).await),
            Request::Status => {
                let m = raft.metrics().borrow().clone();
                Response::Status(Status {
                    id,
                    leader: m.current_leader,
                    term: m.current_term,
                    applied: m.last_applied.map(|l| l.index),
                })
            }
            Request::Client(op) => {
                let command = Command {
                    at_us: wall_clock_us(),
                    op,
                };
                Response::Client(match raft.client_write(command).await {
                    Ok(written) => ClientAnswer::Done(written.data),
                    Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                        ClientAnswer::NotLeader {
                            leader: f.leader_node.map(|n| n.addr),
                        }
                    }
                    Err(e) => ClientAnswer::Unknown(e.to_string()),
                })
            }
        };
        write_frame(&mut stream, &response).await?;
    }
    Ok(())
}

/// Makes a [`Peer`] connection for each member the leader replicates to.
struct Peers;

impl RaftNetworkFactory<TypeConfig> for Peers {
    type Network = Peer;

    async fn new_client(&mut self, _target: u64, node: &BasicNode) -> Peer {
        Peer {
            addr: node.addr.clone(),
            stream: None,
        }
    }
}

/// One member as seen by another: a connection made on first use and again after a failure.
struct Peer {
    addr: String,
    stream: Option<TcpStream>,
}

impl Peer {
    /// One request and its response within `option`'s hard timeout.
    async fn exchange(
        &mut self,
        request: &Request,
        option: &RPCOption,
    ) -> std::io::Result<Response> {
        let bound = option.hard_ttl();
        let result = tokio::time::timeout(bound, async {
            if self.stream.is_none() {
                let stream = TcpStream::connect(&self.addr).await?;
                let _ = stream.set_nodelay(true);
                self.stream = Some(stream);
            }
            let stream = self.stream.as_mut().expect("connected above");
            write_frame(stream, request).await?;
            read_frame::<_, Response>(stream)
                .await?
                .ok_or_else(|| std::io::Error::other("the peer closed the connection"))
        })
        .await
        .unwrap_or_else(|_| Err(std::io::Error::other(format!("no answer within {bound:?}"))));
        if result.is_err() {
            self.stream = None;
        }
        result
    }
}

fn unreachable<E: std::error::Error>(e: std::io::Error) -> RPCError<u64, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&e))
}

fn mismatched<E: std::error::Error>() -> RPCError<u64, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "the peer answered another kind of request",
    )))
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.exchange(&Request::Append(rpc), &option).await {
            Ok(Response::Append(Ok(r))) => Ok(r),
            Ok(Response::Append(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(0, e))),
            Ok(_) => Err(mismatched()),
            Err(e) => Err(unreachable(e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        match self.exchange(&Request::Snapshot(rpc), &option).await {
            Ok(Response::Snapshot(Ok(r))) => Ok(r),
            Ok(Response::Snapshot(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(0, e))),
            Ok(_) => Err(mismatched()),
            Err(e) => Err(unreachable(e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.exchange(&Request::Vote(rpc), &option).await {
            Ok(Response::Vote(Ok(r))) => Ok(r),
            Ok(Response::Vote(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(0, e))),
            Ok(_) => Err(mismatched()),
            Err(e) => Err(unreachable(e)),
        }
    }
}
