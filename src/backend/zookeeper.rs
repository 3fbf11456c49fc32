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

use super::queue::{entry_value, owner_of, position, split_value, Ledger, Position};
use super::{validate_name, Acquired, BackendError, Grant, Holder, LockService, Ttl};
use crate::protocol::Token;
use crate::sync::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

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

/// An owner's session and the instant this process closes it unless the owner asks again.
struct Session {
    client: Client,
    id: i64,
    close_at: Instant,
}

type Sessions = Mutex<HashMap<String, Session>>;

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

fn zk_err(operation: &'static str, e: ZkError) -> BackendError {
    BackendError::failed(BACKEND, operation, e)
}

/// A node's data as text (see [`split_value`] for its format).
fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// A node's name: the last part of its path.
fn name_of(node: &str) -> &str {
    node.rsplit('/').next().unwrap_or_default()
}

/// The lock's contenders among `children`, lowest sequence first: Curator's rule (names that
/// contain `lock-`, ordered by the ten-digit suffix).
fn contenders(mut children: Vec<String>) -> Vec<String> {
    children.retain(|c| {
        c.contains(LOCK_NAME)
            && c.len() >= SEQUENCE_LEN
            && c.is_char_boundary(c.len() - SEQUENCE_LEN)
            && c[c.len() - SEQUENCE_LEN..].parse::<u32>().is_ok()
    });
    children.sort_by(|a, b| a[a.len() - SEQUENCE_LEN..].cmp(&b[b.len() - SEQUENCE_LEN..]));
    children
}

/// The lock's path for `name`: the name itself when it is an absolute ZooKeeper path, else
/// `/fencecheck/NAME`. Checks what ZooKeeper would refuse.
fn lock_path(name: &str) -> Result<String, BackendError> {
    validate_name("lock name", name)?;
    let path = if name.starts_with('/') {
        name.to_string()
    } else {
        format!("/fencecheck/{name}")
    };
    let bad = |reason: String| Err(BackendError::invalid("lock name", reason));
    if path.len() > 1 && path.ends_with('/') {
        return bad(format!(
            "{name:?} ends with '/'; expected a path such as /locks/nightly"
        ));
    }
    for part in path[1..].split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return bad(format!(
                "{name:?} has an empty, '.' or '..' path component; expected a path such as \
                 /locks/nightly"
            ));
        }
    }
    // The characters ZooKeeper refuses in a path (its PathUtils): controls, and what Java holds as
    // surrogates or private use (every character beyond U+FFFF, such as emoji).
    let refused = |c: char| {
        c <= '\u{1f}'
            || ('\u{7f}'..='\u{9f}').contains(&c)
            || ('\u{e000}'..='\u{f8ff}').contains(&c)
            || c >= '\u{fff0}'
    };
    if let Some(c) = path.chars().find(|&c| refused(c)) {
        return bad(format!(
            "{name:?} contains {c:?} (U+{:04X}), which ZooKeeper refuses in a path: control \
             characters, U+E000-U+F8FF and everything from U+FFF0 (emoji included)",
            u32::from(c)
        ));
    }
    if path == "/" || path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return bad(format!("{name:?} is reserved by ZooKeeper"));
    }
    Ok(path)
}

/// Checks a connect string: `HOST:PORT[,HOST:PORT...]`, no chroot.
fn validate_connect(connect: &str) -> Result<(), BackendError> {
    if connect.trim().is_empty() {
        return Err(BackendError::invalid(
            "ZooKeeper connect string",
            "it is empty; expected HOST:PORT[,HOST:PORT...] such as 127.0.0.1:2181",
        ));
    }
    for server in connect.split(',') {
        if server.contains("://") {
            return Err(BackendError::invalid(
                "ZooKeeper connect string",
                format!(
                    "{server:?} in {connect:?} has a scheme; expected HOST:PORT[,HOST:PORT...]"
                ),
            ));
        }
        let ok = server.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !ok {
            return Err(BackendError::invalid(
                "ZooKeeper connect string",
                format!("{server:?} in {connect:?}; expected HOST:PORT[,HOST:PORT...]"),
            ));
        }
    }
    Ok(())
}

/// Closes `owner`'s session (`id`) once its close time passes without a new request.
async fn close_when_idle(sessions: Weak<Sessions>, owner: String, id: i64) {
    loop {
        let Some(map) = sessions.upgrade() else {
            return;
        };
        let close_at = match map.lock().get(&owner) {
            Some(s) if s.id == id => s.close_at,
            _ => return,
        };
        drop(map);
        if Instant::now() >= close_at {
            let Some(map) = sessions.upgrade() else {
                return;
            };
            let mut map = map.lock();
            if map
                .get(&owner)
                .is_some_and(|s| s.id == id && Instant::now() >= s.close_at)
            {
                // Dropping the last handle closes the session; its lock node goes with it.
                let closed = map.remove(&owner);
                drop(map);
                drop(closed);
                return;
            }
            continue;
        }
        tokio::time::sleep_until(close_at.into()).await;
    }
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

    /// Opens a session. A server that accepts the TCP connection but does not answer (stopped,
    /// or not serving while the ensemble elects a leader) is left after a share of the connect
    /// bound; while every server refuses, they are tried again until the bound passes.
    async fn open(
        connect: &str,
        ttl: Duration,
        options: ZkOptions,
    ) -> Result<Client, BackendError> {
        let servers = connect.split(',').count() as u32;
        let per_server = (options.connect_timeout / (2 * servers))
            .min(ttl * 2 / 5)
            .max(Duration::from_millis(50));
        let until = Instant::now() + options.connect_timeout;
        let attempts = async {
            let mut reconnect = super::retry::RECONNECT;
            loop {
                let attempt = Client::connector()
                    .with_session_timeout(ttl)
                    .with_connection_timeout(per_server)
                    .with_fail_eagerly()
                    .connect(connect)
                    .await;
                match attempt {
                    Err(ZkError::NoHosts | ZkError::ConnectionLoss)
                        if Instant::now() + Duration::from_millis(100) < until =>
                    {
                        reconnect.pause(Some(until)).await;
                    }
                    other => return other,
                }
            }
        };
        super::bounded_connect(
            BACKEND,
            connect.to_string(),
            options.connect_timeout,
            ToString::to_string,
            attempts,
        )
        .await
    }

    /// The lock's path in ZooKeeper (its nodes are its children).
    pub fn path(&self) -> &str {
        &self.dir
    }

    /// Runs one request bounded by the request timeout. A read (`idempotent`) that lost its
    /// connection is sent again (the client reconnects to another server) until the bound.
    async fn call<T, F, Fut>(
        &self,
        operation: &'static str,
        idempotent: bool,
        mut request: F,
    ) -> Result<T, BackendError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ZkError>>,
    {
        let bound = self.options.request_timeout;
        let attempts = async {
            let mut resend = super::retry::RESEND;
            loop {
                match request().await {
                    Err(ZkError::ConnectionLoss) if idempotent => {
                        resend.pause(None).await;
                    }
                    other => return other,
                }
            }
        };
        tokio::time::timeout(bound, attempts)
            .await
            .map_err(|_| BackendError::Timeout {
                backend: BACKEND,
                operation,
                after: bound,
            })?
            .map_err(|e| zk_err(operation, e))
    }

    /// `owner`'s session, opened if it has none (or its session ended), with its close time
    /// pushed to a TTL from now: the send time of the request the caller makes next.
    async fn session(&self, owner: &str) -> Result<(Client, i64, Instant), BackendError> {
        validate_name("owner", owner)?;
        {
            let mut map = self.sessions.lock();
            if let Some(s) = map.get_mut(owner) {
                if !s.client.state().is_terminated() {
                    let now = Instant::now();
                    s.close_at = s.close_at.max(now + self.ttl.granted());
                    return Ok((s.client.clone(), s.id, now));
                }
                map.remove(owner);
            }
        }
        let sent_at = Instant::now();
        let client = Self::open(&self.connect, self.ttl.granted(), self.options).await?;
        let id = client.session_id().0;
        self.sessions.lock().insert(
            owner.to_string(),
            Session {
                client: client.clone(),
                id,
                close_at: sent_at + self.ttl.granted(),
            },
        );
        tokio::spawn(close_when_idle(
            Arc::downgrade(&self.sessions),
            owner.to_string(),
            id,
        ));
        Ok((client, id, sent_at))
    }

    /// `owner`'s current session if it is `id` and still open, its close time pushed a TTL on.
    fn session_if(&self, owner: &str, id: i64) -> Option<(Client, Instant)> {
        let mut map = self.sessions.lock();
        let s = map.get_mut(owner).filter(|s| s.id == id)?;
        if s.client.state().is_terminated() {
            return None;
        }
        let now = Instant::now();
        s.close_at = s.close_at.max(now + self.ttl.granted());
        Some((s.client.clone(), now))
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
                Ok((data, stat)) if super::is_token(stat.czxid, token) => {
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
        let token = super::server_token(BACKEND, "acquire", czxid)?;
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
        let token = super::server_token(BACKEND, "acquire", czxid)?;
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
                if super::is_token(stat.czxid, token) && stat.ephemeral_owner == held.session =>
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
            token: super::server_token(BACKEND, "holder", czxid)?,
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
    fn connect_strings_are_checked() {
        assert!(validate_connect("127.0.0.1:2181").is_ok());
        assert!(validate_connect("a:1,b:2,c:3").is_ok());
        for bad in ["zk://127.0.0.1:2181", "h/chroot:2181"] {
            assert!(validate_connect(bad).is_err(), "{bad}");
        }
        for bad in [
            "",
            " ",
            "127.0.0.1",
            ":2181",
            "h:0",
            "h:99999",
            "a:1,",
            "h:1/chroot",
        ] {
            let e = validate_connect(bad).unwrap_err().to_string();
            assert!(e.contains("HOST:PORT"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn lock_paths_follow_zookeeper_rules() {
        assert_eq!(lock_path("nightly").unwrap(), "/fencecheck/nightly");
        assert_eq!(lock_path("/locks/nightly").unwrap(), "/locks/nightly");
        assert_eq!(lock_path("a/b").unwrap(), "/fencecheck/a/b");
        assert_eq!(lock_path("é-ü").unwrap(), "/fencecheck/é-ü");
        for refused in ["🔒", "a\u{fff5}b", "x\u{e000}"] {
            let e = lock_path(refused).unwrap_err().to_string();
            assert!(e.contains("ZooKeeper refuses"), "{e}");
        }
        for bad in ["/", "/a/", "/a//b", "a/../b", "/zookeeper/x", "", "a{b}"] {
            assert!(lock_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn contenders_are_curators_nodes_in_sequence_order() {
        let names = vec![
            "_c_b-lock-0000000003".to_string(),
            "_c_a-lock-0000000001".to_string(),
            "other-0000000000".to_string(),
            "_c_x-lock-notanumber".to_string(),
            "lock-0000000002".to_string(),
        ];
        assert_eq!(
            contenders(names),
            [
                "_c_a-lock-0000000001",
                "lock-0000000002",
                "_c_b-lock-0000000003"
            ]
        );
        assert_eq!(
            name_of("/fencecheck/x/_c_a-lock-0000000001"),
            "_c_a-lock-0000000001"
        );
        assert_eq!(text(b"w\nv"), "w\nv");
    }
}
