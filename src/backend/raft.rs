//! The `raft` backend's client: a lock and fenced storage on a fencecheck Raft cluster
//! ([`crate::raftdb`], served by `fencecheck raft-node`).
//!
//! Every call is one command in the cluster's replicated log, sent to the node believed to lead
//! and retried on the others until the operation's timeout runs out.

pub use crate::raftdb::Status;

use super::contract::{
    validate_name, Acquired, BackendError, FencedStorage, Grant, Holder, LockService, Stored,
    WriteOutcome, WriteResult,
};
use crate::protocol::Ttl;
use crate::protocol::{FencePolicy, StaleWrite, Token};
use crate::raftdb::wire::{read_frame, write_frame, ClientAnswer, Request, Response};
use crate::raftdb::{Op, Reply};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

pub(crate) const BACKEND: &str = "raft";

/// Client settings.
#[derive(Clone, Copy, Debug)]
pub struct RaftOptions {
    /// The longest one operation may take, retries on other nodes included.
    pub request_timeout: Duration,
}

impl Default for RaftOptions {
    fn default() -> Self {
        RaftOptions {
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// A client of the cluster: sends each command to the node it believes leads, following
/// redirects and trying the next node when one cannot be reached.
#[derive(Debug)]
struct Client {
    nodes: Vec<String>,
    options: RaftOptions,
    /// The node that answered last (where the leader probably is).
    leader: parking_lot::Mutex<usize>,
    /// A node that took a command and did not answer (stopped, partitioned), and until when
    /// redirects to it are not followed: its followers may still name it leader for a while.
    avoid: parking_lot::Mutex<Option<(usize, Instant)>>,
}

/// The least time one node is given to answer.
const MIN_ATTEMPT: Duration = Duration::from_millis(100);

/// How long a node that did not answer is passed over.
const AVOID: Duration = Duration::from_secs(1);

/// The pause between attempts while the cluster has no leader.
const NO_LEADER_PAUSE: Duration = Duration::from_millis(25);

impl Client {
    fn new(nodes: &[String], options: RaftOptions) -> Result<Self, BackendError> {
        if nodes.is_empty() {
            return Err(BackendError::invalid(
                "raft nodes",
                "the list is empty; give the nodes' host:port, such as 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
            ));
        }
        for node in nodes {
            let port = node.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
            if !matches!(port, Some(Ok(p)) if p > 0) {
                return Err(BackendError::invalid(
                    "raft node",
                    format!("{node:?} is not host:port (such as 127.0.0.1:7001)"),
                ));
            }
        }
        if options.request_timeout.is_zero() {
            return Err(BackendError::invalid(
                "raft request timeout",
                "it is zero; give a positive bound such as 5s",
            ));
        }
        Ok(Client {
            nodes: nodes.to_vec(),
            options,
            leader: parking_lot::Mutex::new(0),
            avoid: parking_lot::Mutex::new(None),
        })
    }

    /// Whether node `i` is being passed over.
    fn avoided(&self, i: usize) -> bool {
        matches!(*self.avoid.lock(), Some((n, until)) if n == i && Instant::now() < until)
    }

    /// The node after `i`, passing over an avoided one.
    fn next(&self, i: usize) -> usize {
        let n = self.nodes.len();
        let j = (i + 1) % n;
        if self.avoided(j) && n > 1 {
            (j + 1) % n
        } else {
            j
        }
    }

    /// Node `at` took a command and gave no answer: pass it over for a while and start the next
    /// call elsewhere.
    fn no_answer(&self, at: usize) {
        *self.avoid.lock() = Some((at, Instant::now() + AVOID));
        *self.leader.lock() = self.next(at);
    }

    /// Runs `op` on the leader. A command refused by a follower (not proposed) is sent again to
    /// the leader it names, or to the next node; one whose fate is unknown (sent, then the
    /// connection or leadership was lost) is an error, never silently repeated.
    async fn call(&self, op: Op, operation: &'static str) -> Result<Reply, BackendError> {
        self.call_sent(op, operation).await.map(|(reply, _)| reply)
    }

    /// [`call`](Self::call), with the send time of the earliest attempt that may have been
    /// applied: the one answered, or an earlier one of a repeatable command that went
    /// unanswered. Attempts refused by a follower, or never sent (no connection), do not
    /// count: a lease granted after a leader change runs from the attempt that reached the
    /// new leader.
    async fn call_sent(
        &self,
        op: Op,
        operation: &'static str,
    ) -> Result<(Reply, Instant), BackendError> {
        let bound = self.options.request_timeout;
        let deadline = Instant::now() + bound;
        let mut at = *self.leader.lock();
        if self.avoided(at) {
            at = self.next(at);
        }
        let mut last_error = String::from("no node answered");
        let mut unanswered: Option<Instant> = None;
        let mut sent_any = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() && !sent_any {
                // Nothing was sent: no node took a connection. Say why, node by node.
                let server = "a raft node";
                let detail = super::probe::unreachable_because(&self.nodes, bound, server);
                return Err(BackendError::Connect {
                    backend: BACKEND,
                    target: self.nodes.join(","),
                    detail: detail.await,
                    source: None,
                });
            }
            if left.is_zero() {
                return Err(BackendError::Timeout {
                    backend: BACKEND,
                    operation,
                    after: bound,
                });
            }
            let addr = &self.nodes[at];
            // A partitioned node drops the handshake: each node gets a part of the bound to
            // accept, as to answer, so that a silent one leaves time to try another.
            let per_node = left.min((bound / 4).max(MIN_ATTEMPT));
            let connect = TcpStream::connect(addr.as_str());
            let connected = tokio::time::timeout(per_node, connect).await;
            let mut stream = match connected {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    // Nothing was sent: trying another node cannot apply the command twice.
                    last_error = format!("{addr}: {e}");
                    at = self.next(at);
                    if at == *self.leader.lock() {
                        tokio::time::sleep(NO_LEADER_PAUSE.min(left)).await;
                    }
                    continue;
                }
                Err(_) => {
                    // Nothing was sent either.
                    last_error = format!("{addr} did not accept a connection within {per_node:?}");
                    self.no_answer(at);
                    at = self.next(at);
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            // A stopped node still accepts connections (the kernel does): it gets a part of the
            // bound to answer too.
            let attempt = deadline
                .saturating_duration_since(Instant::now())
                .min((bound / 4).max(MIN_ATTEMPT));
            let sent = Instant::now();
            sent_any = true;
            let exchanged = tokio::time::timeout(attempt, async {
                write_frame(&mut stream, &Request::Client(op.clone())).await?;
                read_frame::<_, Response>(&mut stream).await
            })
            .await;
            if !matches!(exchanged, Ok(Ok(Some(_)))) {
                self.no_answer(at);
                // Commands whose repetition changes nothing more than one application would (a
                // read; a write or publish under the same token) go to the next node at once.
                if op.repeatable() && Instant::now() < deadline {
                    unanswered = unanswered.or(Some(sent));
                    last_error = format!("{addr} did not answer");
                    at = self.next(at);
                    continue;
                }
            }
            let answer = match exchanged {
                Err(_) => {
                    return Err(BackendError::Timeout {
                        backend: BACKEND,
                        operation,
                        after: attempt,
                    })
                }
                Ok(Err(e)) => {
                    return Err(BackendError::unexpected(
                        BACKEND,
                        operation,
                        format!("{addr}: {e}; the command may or may not have taken effect"),
                    ))
                }
                Ok(Ok(None)) => {
                    return Err(BackendError::unexpected(
                        BACKEND,
                        operation,
                        format!(
                            "{addr} closed the connection before answering; the command may or \
                             may not have taken effect"
                        ),
                    ))
                }
                Ok(Ok(Some(answer))) => answer,
            };
            match answer {
                Response::Client(ClientAnswer::Done(reply)) => {
                    *self.leader.lock() = at;
                    return Ok((reply, unanswered.unwrap_or(sent)));
                }
                Response::Client(ClientAnswer::NotLeader { leader }) => {
                    let known = leader.and_then(|l| self.nodes.iter().position(|n| *n == l));
                    match known {
                        Some(i) if i != at && !self.avoided(i) => at = i,
                        _ => {
                            last_error = format!("{addr} knows no leader that answers");
                            at = self.next(at);
                            tokio::time::sleep(NO_LEADER_PAUSE.min(left)).await;
                        }
                    }
                }
                Response::Client(ClientAnswer::Unknown(detail)) => {
                    return Err(BackendError::unexpected(
                        BACKEND,
                        operation,
                        format!(
                            "{addr}: {detail}; the command may or may not have taken effect \
                             (last error before it: {last_error})"
                        ),
                    ))
                }
                _ => {
                    return Err(BackendError::unexpected(
                        BACKEND,
                        operation,
                        format!("{addr} answered another kind of request"),
                    ))
                }
            }
        }
    }
}

/// Asks the node at `addr` for its view of the cluster (leader, term, applied index).
pub async fn status(addr: &str, timeout: Duration) -> Result<Status, BackendError> {
    let asked = async {
        let mut stream = TcpStream::connect(addr).await?;
        write_frame(&mut stream, &Request::Status).await?;
        read_frame::<_, Response>(&mut stream).await
    };
    match tokio::time::timeout(timeout, asked).await {
        Ok(Ok(Some(Response::Status(s)))) => Ok(s),
        Ok(Ok(_)) => Err(BackendError::unexpected(
            BACKEND,
            "status",
            format!("{addr} did not answer with its status"),
        )),
        Ok(Err(e)) => Err(BackendError::Connect {
            backend: BACKEND,
            target: addr.to_string(),
            detail: e.to_string(),
            source: None,
        }),
        Err(_) => Err(BackendError::Timeout {
            backend: BACKEND,
            operation: "status",
            after: timeout,
        }),
    }
}

/// A lease lock in a fencecheck Raft cluster (`fencecheck raft-node`): the lease, its token and
/// its expiry live in the replicated lease table; each call is one committed log entry.
#[derive(Debug)]
pub struct RaftLock {
    client: Client,
    name: String,
    ttl: Ttl,
}

impl RaftLock {
    /// The lock `name` on the cluster of `nodes` (`host:port` each), with leases of `ttl`.
    pub fn connect(nodes: &[String], name: &str, ttl: Duration) -> Result<Self, BackendError> {
        Self::connect_with(nodes, name, ttl, RaftOptions::default())
    }

    /// As [`RaftLock::connect`], with client settings.
    pub fn connect_with(
        nodes: &[String],
        name: &str,
        ttl: Duration,
        options: RaftOptions,
    ) -> Result<Self, BackendError> {
        validate_name("lock name", name)?;
        Ok(RaftLock {
            client: Client::new(nodes, options)?,
            name: name.to_string(),
            ttl: Ttl::new(ttl)?,
        })
    }

    fn ttl_us(&self) -> u64 {
        u64::try_from(self.ttl.granted().as_micros()).unwrap_or(u64::MAX)
    }

    fn grant(&self, token: u64, owner: &str, sent_at: Instant) -> Grant {
        Grant {
            token: Token::new(token),
            owner: owner.to_string(),
            ttl: self.ttl.granted(),
            sent_at,
        }
    }
}

fn unexpected(operation: &'static str, reply: Reply) -> BackendError {
    BackendError::unexpected(BACKEND, operation, format!("unexpected reply {reply:?}"))
}

impl LockService for RaftLock {
    fn ttl(&self) -> Ttl {
        self.ttl
    }

    async fn try_acquire(&self, owner: &str) -> Result<Acquired, BackendError> {
        let op = Op::Acquire {
            lock: self.name.clone(),
            owner: owner.to_string(),
            ttl_us: self.ttl_us(),
        };
        match self.client.call_sent(op, "acquire").await? {
            (Reply::Granted { token }, sent_at) => {
                Ok(Acquired::Granted(self.grant(token, owner, sent_at)))
            }
            (
                Reply::Busy {
                    holder,
                    remaining_us,
                },
                _,
            ) => Ok(Acquired::Busy {
                holder: Some(holder),
                remaining: Some(Duration::from_micros(remaining_us)),
            }),
            (other, _) => Err(unexpected("acquire", other)),
        }
    }

    async fn extend(&self, owner: &str, token: Token) -> Result<Option<Grant>, BackendError> {
        let op = Op::Extend {
            lock: self.name.clone(),
            owner: owner.to_string(),
            token: token.get(),
            ttl_us: self.ttl_us(),
        };
        match self.client.call_sent(op, "extend").await? {
            (Reply::Granted { token }, sent_at) => Ok(Some(self.grant(token, owner, sent_at))),
            (Reply::NotHeld, _) => Ok(None),
            (other, _) => Err(unexpected("extend", other)),
        }
    }

    async fn publish(&self, owner: &str, token: Token, value: &str) -> Result<bool, BackendError> {
        let op = Op::Publish {
            lock: self.name.clone(),
            owner: owner.to_string(),
            token: token.get(),
            value: value.to_string(),
        };
        match self.client.call(op, "publish").await? {
            Reply::Published => Ok(true),
            Reply::NotHeld => Ok(false),
            other => Err(unexpected("publish", other)),
        }
    }

    async fn holder(&self) -> Result<Option<Holder>, BackendError> {
        let op = Op::Holder {
            lock: self.name.clone(),
        };
        match self.client.call(op, "holder").await? {
            Reply::Holder(h) => Ok(h.map(|(owner, token, value)| Holder {
                owner,
                token: Token::new(token),
                value,
            })),
            other => Err(unexpected("holder", other)),
        }
    }

    async fn release(&self, owner: &str, token: Token) -> Result<bool, BackendError> {
        let op = Op::Release {
            lock: self.name.clone(),
            owner: owner.to_string(),
            token: token.get(),
        };
        match self.client.call(op, "release").await? {
            Reply::Released { live } => Ok(live),
            Reply::NotHeld => Ok(false),
            other => Err(unexpected("release", other)),
        }
    }
}

/// Fenced storage in the same Raft group as the locks: each write is one log entry whose fence
/// the state machine checks, ordered in the one log with the grants.
#[derive(Debug)]
pub struct RaftFencedStore {
    client: Client,
    table: String,
    policy: FencePolicy,
}

impl RaftFencedStore {
    /// The keys of `table` on the cluster of `nodes`; `policy` is the fence of each new key
    /// ([`FencePolicy::AcceptAll`] only as a control: a store that does not fence). A key keeps
    /// the fence it was made with: give a control its own table.
    pub fn connect(
        nodes: &[String],
        table: &str,
        policy: FencePolicy,
        options: RaftOptions,
    ) -> Result<Self, BackendError> {
        validate_name("table", table)?;
        Ok(RaftFencedStore {
            client: Client::new(nodes, options)?,
            table: table.to_string(),
            policy,
        })
    }

    /// The replicated key of `key` in this store's table.
    fn key(&self, key: &str) -> Result<String, BackendError> {
        validate_name("key", key)?;
        Ok(format!("{}/{key}", self.table))
    }
}

impl FencedStorage for RaftFencedStore {
    async fn write(&self, key: &str, token: Token, value: &[u8]) -> WriteResult {
        let op = Op::Write {
            key: self.key(key)?,
            token: token.get(),
            value: value.to_vec(),
            policy: self.policy,
        };
        match self.client.call(op, "write").await? {
            Reply::Accepted => Ok(WriteOutcome::Accepted),
            Reply::Stale { highest } => Ok(WriteOutcome::Stale(StaleWrite {
                token,
                highest: Token::new(highest),
            })),
            other => Err(unexpected("write", other)),
        }
    }

    async fn read(&self, key: &str) -> Result<Option<Stored>, BackendError> {
        let op = Op::Read {
            key: self.key(key)?,
        };
        match self.client.call(op, "read").await? {
            Reply::Value(v) => Ok(v.map(|(token, value)| Stored {
                token: Token::new(token),
                value,
            })),
            other => Err(unexpected("read", other)),
        }
    }
}
