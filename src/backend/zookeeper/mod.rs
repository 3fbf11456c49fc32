//! ZooKeeper: a lock whose fencing token is the lock node's **creation zxid** (`czxid`), laid
//! out as Apache Curator lays out its `InterProcessMutex`, so the two exclude each other.
//!
//! The recipe: every contender creates an ephemeral sequential node
//! `PATH/_c_<uuid>-lock-<sequence>` owned by its session; the node with the lowest sequence holds
//! the lock; a waiter watches only the node just below its own (no herd). The zxid is the
//! ensemble's global, strictly increasing transaction id, so a later holder's node always has a
//! larger `czxid` — a token that survives restarts and leader changes with no counter of ours.
//! The `_c_<uuid>` part is Curator's "protection": a create whose reply was lost is found again
//! by its uuid instead of being left behind. The node's data is the owner's name (Curator's is
//! the holder's IP address); a published value follows it after a newline.
//!
//! **Leases on sessions.** A ZooKeeper lock is held as long as the holder's session lives, and
//! the client library keeps a session alive by pinging. [`ZkLock`] gives every owner its own
//! session and turns it into a lease: a session on which the owner made no request (acquire,
//! extend, publish, release) for a TTL is closed by this process, which deletes the owner's lock
//! node. A holder that stops entirely (a crash, SIGSTOP, a partition) stops pinging and the
//! ensemble expires its session after the session timeout. Either way a lease ends no earlier
//! than a TTL after the send time of the owner's last successful request, which is the deadline
//! [`Grant::safe_deadline`] counts from.
//!
//! **Disconnected.** While the client is disconnected it reconnects to another server on its
//! own and the session may survive; this lock does not guess. Calls fail (bounded by the request
//! timeout), a keepalive's renewals fail, and the lease is reported lost at its safe deadline.
//!
//! The TTL is the session timeout, which the server clamps to its
//! `[minSessionTimeout, maxSessionTimeout]` (2 and 20 ticks by default): [`ZkLock::ttl`] reports
//! what the server granted.
//!
//! A lock name that starts with `/` is used as the lock's path (give Curator's path to share a
//! lock with Curator); any other name `NAME` lives at `/fencecheck/NAME`.

use super::contract::{Acquired, BackendError, Grant, Holder, LockService};
use super::queue::{entry_value, owner_of, position, split_value, Ledger, Position};
use crate::protocol::Token;
use crate::protocol::Ttl;
use crate::sync::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

mod path;
mod session;

use path::{contenders, lock_path, name_of};
use session::{validate_connect, Sessions};

const BACKEND: &str = "zookeeper";
/// The lock name Curator's `InterProcessMutex` and `LeaderSelector` use in their node names.
const LOCK_NAME: &str = "lock-";
/// ZooKeeper's sequence suffix: ten decimal digits.
const SEQUENCE_LEN: usize = 10;

/// Connection settings for the ZooKeeper backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZkOptions {
    /// Bound on establishing a session.
    pub connect_timeout: Duration,
    /// Bound on each request (retries of reads included).
    pub request_timeout: Duration,
}

impl Default for ZkOptions {
    fn default() -> Self {
        ZkOptions {
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(3),
        }
    }
}

/// The node and session behind a lease this lock instance granted.
#[derive(Clone, Debug)]
struct Held {
    node: String,
    session: i64,
}

/// Leader election on ZooKeeper: candidates contend for a [`ZkLock`]; the leader is the holder of
/// the lowest node and its term is that node's `czxid` (see [`LeaderElection`](super::LeaderElection)).
pub type ZkElection = super::LeaderElection<ZkLock>;

/// A ZooKeeper lock with `czxid` fencing tokens, interoperable with Curator's mutex.
pub struct ZkLock {
    connect: String,
    dir: String,
    ttl: Ttl,
    options: ZkOptions,
    reader: Client,
    sessions: Arc<Sessions>,
    held: Ledger<Held>,
}

/// `e` as a [`BackendError`]: a connection or session that ended under the request (lost, timed
/// out, closed, expired, or the client's "no response from connection") is
/// [`BackendError::Dropped`], which may succeed when tried again and whose effect is unknown;
/// what the server answered is [`BackendError::Server`].
fn zk_err(operation: &'static str, e: ZkError) -> BackendError {
    match e {
        ZkError::ConnectionLoss
        | ZkError::Timeout
        | ZkError::SessionExpired
        | ZkError::ClientClosed
        | ZkError::Custom(_) => BackendError::Dropped {
            backend: BACKEND,
            operation,
            detail: crate::backend::contract::one_line(&e.to_string()),
            source: Some(Box::new(e)),
        },
        e => BackendError::failed(BACKEND, operation, e),
    }
}

/// A node's data as text (see [`split_value`] for its format).
fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

impl ZkLock {
    /// A lock named `name` with lease `ttl` on the ensemble at `connect` (`HOST:PORT,...`).
    pub async fn connect(connect: &str, name: &str, ttl: Duration) -> Result<Self, BackendError> {
        Self::connect_with(connect, name, ttl, ZkOptions::default()).await
    }

    /// [`connect`](Self::connect) with explicit timeouts.
    pub async fn connect_with(
        connect: &str,
        name: &str,
        ttl: Duration,
        options: ZkOptions,
    ) -> Result<Self, BackendError> {
        let dir = lock_path(name)?;
        let ttl = Ttl::new(ttl)?;
        validate_connect(connect)?;
        let reader = Self::open(connect, ttl.asked(), options).await?;
        // The server clamps the session timeout to its own bounds (2 to 20 ticks by default).
        let ttl = ttl.granted_as(reader.session_timeout());
        Ok(ZkLock {
            connect: connect.to_string(),
            dir,
            ttl,
            options,
            reader,
            sessions: Arc::new(Mutex::new(HashMap::new())),
            held: Ledger::new(),
        })
    }

    /// The lock's path in ZooKeeper (its nodes are its children).
    pub fn path(&self) -> &str {
        &self.dir
    }

    /// Creates our node (and the lock's path, the first time) and lists the contenders, the list
    /// pipelined behind the create on the same session (one round trip). Returns (node path,
    /// czxid, contenders). A create whose reply was lost is found again by its uuid.
    async fn enqueue(
        &self,
        client: &Client,
        owner: &str,
    ) -> Result<(String, i64, Vec<String>), BackendError> {
        let protection = format!("_c_{}-", uuid::Uuid::new_v4());
        let prefix = format!("{}/{protection}{LOCK_NAME}", self.dir);
        let acls = Acls::anyone_all();
        let ephemeral = CreateMode::EphemeralSequential.with_acls(acls);
        let bound = self.options.request_timeout;
        let mut made_dir = false;
        let until = Instant::now() + bound;
        let mut resend = super::retry::RESEND;
        loop {
            let (created, listed) = tokio::time::timeout(bound, async {
                let create = client.create(&prefix, owner.as_bytes(), &ephemeral);
                let list = client.list_children(&self.dir);
                tokio::join!(create, list)
            })
            .await
            .map_err(|_| BackendError::Timeout {
                backend: BACKEND,
                operation: "acquire",
                after: bound,
            })?;
            match created {
                Ok((stat, sequence)) => {
                    let node = format!("{prefix}{sequence}");
                    let children = match listed {
                        Ok(children) => children,
                        Err(_) => self.children(client).await?,
                    };
                    return Ok((node, stat.czxid, contenders(children)));
                }
                Err(ZkError::NoNode) if !made_dir => {
                    let persistent = CreateMode::Persistent.with_acls(acls);
                    self.call("create the lock path", true, || {
                        client.mkdir(&self.dir, &persistent)
                    })
                    .await?;
                    made_dir = true;
                }
                Err(ZkError::ConnectionLoss) if Instant::now() < until => {
                    resend.pause(Some(until)).await;
                    let children = self.children(client).await?;
                    if let Some(found) = children.iter().find(|c| c.starts_with(&protection)) {
                        let node = format!("{}/{found}", self.dir);
                        let (_, stat) = self
                            .call("acquire", true, || client.get_data(&node))
                            .await?;
                        return Ok((node, stat.czxid, contenders(children)));
                    }
                }
                Err(e) => return Err(zk_err("acquire", e)),
            }
        }
    }

    async fn children(&self, client: &Client) -> Result<Vec<String>, BackendError> {
        match self
            .call("list", true, || client.list_children(&self.dir))
            .await
        {
            Err(e) if e.cause() == Some(&ZkError::NoNode) => Ok(Vec::new()),
            other => other,
        }
    }

    fn granted(
        &self,
        owner: &str,
        node: String,
        token: Token,
        session: i64,
        sent_at: Instant,
    ) -> Grant {
        self.held.grant(
            owner,
            token,
            Held { node, session },
            self.ttl.granted(),
            sent_at,
        )
    }

    /// Deletes `node`: whether it was there. A delete whose connection was lost is sent again;
    /// if the repeat finds the node gone, the lost attempt is what deleted it.
    async fn delete(&self, client: &Client, node: &str) -> Result<bool, BackendError> {
        let lost = std::sync::atomic::AtomicBool::new(false);
        let result = self
            .call("release", true, || {
                let attempt = client.delete(node, None);
                let lost = &lost;
                async move {
                    let r = attempt.await;
                    if r == Err(ZkError::ConnectionLoss) {
                        lost.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    r
                }
            })
            .await;
        match result {
            Ok(()) => Ok(true),
            Err(e) if e.cause() == Some(&ZkError::NoNode) => Ok(lost.into_inner()),
            Err(e) => Err(e),
        }
    }

    /// The holder's node name and data, read on `client`; `None` when the lock is free.
    async fn first(&self, client: &Client) -> Result<Option<(String, Vec<u8>, i64)>, BackendError> {
        for _ in 0..10 {
            let Some(first) = contenders(self.children(client).await?).into_iter().next() else {
                return Ok(None);
            };
            let node = format!("{}/{first}", self.dir);
            match self.call("get", true, || client.get_data(&node)).await {
                Ok((data, stat)) => return Ok(Some((first, data, stat.czxid))),
                // Released between the list and the read: look again.
                Err(e) if e.cause() == Some(&ZkError::NoNode) => {}
                Err(e) => return Err(e),
            }
        }
        Err(BackendError::unexpected(
            BACKEND,
            "holder",
            "the first node kept changing while it was read",
        ))
    }

    /// The node `owner` holds under `token`: from this instance's memory, or found among the
    /// contenders (a lease another instance granted).
    async fn find(&self, owner: &str, token: Token) -> Result<Option<String>, BackendError> {
        if let Some(known) = self.held.lookup(owner, token) {
            return Ok(known.map(|h| h.node));
        }
        for name in contenders(self.children(&self.reader).await?) {
            let node = format!("{}/{name}", self.dir);
            match self.call("get", true, || self.reader.get_data(&node)).await {
                Ok((data, stat)) if super::contract::is_token(stat.czxid, token) => {
                    return Ok((split_value(&text(&data)).0 == owner).then_some(node));
                }
                Ok(_) => {}
                Err(e) if e.cause() == Some(&ZkError::NoNode) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }
}

impl LockService for ZkLock {
    fn ttl(&self) -> Ttl {
        self.ttl
    }

    async fn try_acquire(&self, owner: &str) -> Result<Acquired, BackendError> {
        let (client, session, sent_at) = self.session(owner).await?;
        let (node, czxid, contenders) = self.enqueue(&client, owner).await?;
        let token = super::contract::server_token(BACKEND, "acquire", czxid)?;
        if position(&contenders, name_of(&node)) == Position::First {
            return Ok(Acquired::Granted(
                self.granted(owner, node, token, session, sent_at),
            ));
        }
        // Not first: leave the line, and read who is first (pipelined).
        let first = contenders
            .first()
            .map(|c| format!("{}/{c}", self.dir))
            .unwrap_or_default();
        let (deleted, read) = tokio::join!(self.delete(&client, &node), async {
            if first.is_empty() {
                None
            } else {
                client.get_data(&first).await.ok()
            }
        });
        deleted?;
        let holder = read.map(|(data, _)| owner_of(name_of(&first), &text(&data)));
        Ok(Acquired::Busy {
            holder,
            remaining: None,
        })
    }

    async fn acquire(&self, owner: &str, timeout: Duration) -> Result<Option<Grant>, BackendError> {
        let deadline = Instant::now() + timeout;
        let (client, session, sent_at) = self.session(owner).await?;
        let (node, czxid, mut contenders) = self.enqueue(&client, owner).await?;
        let token = super::contract::server_token(BACKEND, "acquire", czxid)?;
        let mut sent_at = sent_at;
        let mut waited = false;
        loop {
            let below = match position(&contenders, name_of(&node)) {
                Position::First => {
                    if waited {
                        // First after waiting, but the list may come from a server behind the
                        // leader, and our session may have expired meanwhile (a leader change,
                        // a pause): after a sync, our node must still be there under our
                        // session, and the grant's TTL starts from that check.
                        let sent = Instant::now();
                        self.call("acquire", true, || client.sync(&node)).await?;
                        let stat = self
                            .call("acquire", true, || client.check_stat(&node))
                            .await?;
                        if stat.is_none_or(|s| s.ephemeral_owner != session) {
                            return Err(BackendError::unexpected(
                                BACKEND,
                                "acquire",
                                "our lock node vanished while waiting in line (session expired?)",
                            ));
                        }
                        // The session must outlive the grant's TTL from the check: push its
                        // close time on, unless it closed meanwhile (idle past its TTL while
                        // the ensemble was slow to answer).
                        if self.session_if(owner, session).is_none() {
                            return Err(BackendError::unexpected(
                                BACKEND,
                                "acquire",
                                "our session ended while waiting in line",
                            ));
                        }
                        sent_at = sent;
                    }
                    return Ok(Some(self.granted(owner, node, token, session, sent_at)));
                }
                // Watch only the node just below ours.
                Position::Behind { ahead } => format!("{}/{ahead}", self.dir),
                Position::Gone => {
                    return Err(BackendError::unexpected(
                        BACKEND,
                        "acquire",
                        "our lock node vanished while waiting in line (session expired?)",
                    ));
                }
            };
            let (stat, watcher) = self
                .call("acquire", true, || client.check_and_watch_stat(&below))
                .await?;
            if stat.is_some() {
                let now = Instant::now();
                if now >= deadline {
                    self.delete(&client, &node).await?;
                    return Ok(None);
                }
                // Wake at the latest a third of a TTL on: listing again renews our session.
                let nap = (deadline - now).min(self.ttl.granted() / 3);
                let _ = tokio::time::timeout(nap, watcher.changed()).await;
            }
            let Some((_, sent)) = self.session_if(owner, session) else {
                return Err(BackendError::unexpected(
                    BACKEND,
                    "acquire",
                    "our session ended while waiting in line",
                ));
            };
            sent_at = sent;
            waited = true;
            contenders = self::contenders(self.children(&client).await?);
        }
    }

    async fn extend(&self, owner: &str, token: Token) -> Result<Option<Grant>, BackendError> {
        let Some(Some(held)) = self.held.lookup(owner, token) else {
            return Ok(None);
        };
        let forget = || self.held.forget(token);
        let Some((client, sent_at)) = self.session_if(owner, held.session) else {
            forget();
            return Ok(None);
        };
        match self
            .call("extend", true, || client.check_stat(&held.node))
            .await
        {
            Ok(Some(stat))
                if super::contract::is_token(stat.czxid, token)
                    && stat.ephemeral_owner == held.session =>
            {
                Ok(Some(Grant {
                    token,
                    owner: owner.to_string(),
                    ttl: self.ttl.granted(),
                    sent_at,
                }))
            }
            Ok(_) => {
                forget();
                Ok(None)
            }
            Err(e)
                if matches!(
                    e.cause(),
                    Some(ZkError::SessionExpired | ZkError::ClientClosed)
                ) =>
            {
                forget();
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn holder(&self) -> Result<Option<Holder>, BackendError> {
        let Some((name, data, czxid)) = self.first(&self.reader).await? else {
            return Ok(None);
        };
        Ok(Some(Holder {
            value: split_value(&text(&data)).1.map(String::from),
            owner: owner_of(&name, &text(&data)),
            token: super::contract::server_token(BACKEND, "holder", czxid)?,
        }))
    }

    async fn publish(&self, owner: &str, token: Token, value: &str) -> Result<bool, BackendError> {
        let Some(node) = self.find(owner, token).await? else {
            return Ok(false);
        };
        let data = entry_value(owner, Some(value));
        let client = match self.sessions.lock().get_mut(owner) {
            Some(s) => {
                s.close_at = s.close_at.max(Instant::now() + self.ttl.granted());
                s.client.clone()
            }
            None => self.reader.clone(),
        };
        match self
            .call("publish", true, || {
                client.set_data(&node, data.as_bytes(), None)
            })
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.cause() == Some(&ZkError::NoNode) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn release(&self, owner: &str, token: Token) -> Result<bool, BackendError> {
        if let Some(Some(held)) = self.held.lookup(owner, token) {
            self.held.forget(token);
            // Our own grant: delete the node on the session that made it. A session that ended
            // took its node with it, so the lease was no longer ours; and on a live session a
            // node missing after a lost delete can only have gone by that delete.
            let Some((client, _)) = self.session_if(owner, held.session) else {
                return Ok(false);
            };
            return self.delete(&client, &held.node).await;
        }
        let Some(node) = self.find(owner, token).await? else {
            return Ok(false);
        };
        self.held.forget(token);
        // The owner's session is kept for its next acquisition; it closes a TTL after its last
        // request if there is none.
        let client = match self.sessions.lock().get(owner) {
            Some(s) => s.client.clone(),
            None => self.reader.clone(),
        };
        self.delete(&client, &node).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_data_reads_as_text() {
        assert_eq!(text(b"w\nv"), "w\nv");
    }
}
