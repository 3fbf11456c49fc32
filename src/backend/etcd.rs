//! etcd: a lease lock whose fencing token is the lock key's **create revision**, compatible with
//! etcd's own lock recipe (`etcdctl lock NAME`).
//!
//! The recipe: every contender writes `NAME/<lease id in hex>` attached to its own lease; the key
//! with the lowest create revision under `NAME/` holds the lock. Revisions are the cluster's
//! global, strictly increasing write counter, replicated by Raft, so a later holder's key always
//! has a larger create revision — the token survives restarts and leader changes without any
//! counter of ours.
//!
//! Each owner has a **session lease**, reused across acquisitions while it lives: an acquire is
//! one transaction that creates the key and reads the lowest key (one round trip, one Raft write),
//! preceded by a keepalive of the session lease when it was last renewed more than a tenth of the
//! TTL ago, or by a grant when it lapsed — at most two round trips. A release is one (delete the
//! key if its create revision is still the token). A contender that is not first
//! removes its key again (so it does not queue), while [`LockService::acquire`] keeps its key and
//! waits its turn as etcdctl does. Nothing renews a session in the background: a lease not
//! extended ends a TTL after its last acquire or extend, as on every backend.
//!
//! etcd leases count whole seconds: the TTL is rounded up to a whole number of seconds, at least 1.

use super::{validate_name, validate_ttl, Acquired, BackendError, Grant, Holder, LockService};
use crate::protocol::Token;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse,
};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BACKEND: &str = "etcd";

/// Whether a failed request may be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retry {
    /// Repeating it is harmless (reads, keepalives, lease grants, the idempotent acquire).
    Always,
    /// Only if it cannot have reached a server.
    IfNotSent,
}

/// gRPC status codes (tonic's `Code` discriminants).
const GRPC_CANCELLED: i32 = 1;
const GRPC_UNKNOWN: i32 = 2;
const GRPC_DEADLINE_EXCEEDED: i32 = 4;
const GRPC_UNAVAILABLE: i32 = 14;

fn retryable(e: &etcd_client::Error, retry: Retry) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            let code = status.code() as i32;
            code == GRPC_UNAVAILABLE
                || (retry == Retry::Always
                    && matches!(code, GRPC_CANCELLED | GRPC_UNKNOWN | GRPC_DEADLINE_EXCEEDED))
        }
        etcd_client::Error::TransportError(_) => true,
        _ => false,
    }
}

/// Connection settings for the etcd backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// Bound on establishing a connection.
    pub connect_timeout: Duration,
    /// Bound on each request.
    pub request_timeout: Duration,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(2),
        }
    }
}

/// A lease this lock instance granted: who holds it and which etcd lease and key back it.
#[derive(Clone, Debug)]
struct Held {
    owner: String,
    lease: i64,
    key: String,
}

/// An etcd lease lock with create-revision fencing tokens.
pub struct EtcdLock {
    client: Client,
    name: String,
    prefix: String,
    ttl: Duration,
    ttl_secs: i64,
    options: EtcdOptions,
    endpoints: usize,
    held: Mutex<HashMap<u64, Held>>,
    /// Each owner's session lease and when it was last granted or renewed (send time).
    sessions: Mutex<HashMap<String, (i64, Instant)>>,
}

fn etcd_err(operation: &'static str, e: etcd_client::Error) -> BackendError {
    BackendError::Server {
        backend: BACKEND,
        operation,
        detail: e.to_string(),
    }
}

/// A key's value is the owner's name, then (once published) a newline and the published value.
fn split_value(value: &str) -> (&str, Option<&str>) {
    match value.split_once('\n') {
        Some((owner, published)) => (owner, Some(published)),
        None => (value, None),
    }
}

/// Who holds a key: its owner's name, or the key itself for a holder that names no owner (a
/// lock taken by `etcdctl lock`).
fn owner_of(key: String, value: &str) -> String {
    match split_value(value).0 {
        "" => key,
        owner => owner.to_string(),
    }
}

/// Checks endpoints: at least one, each `http://HOST:PORT` or `HOST:PORT`.
fn validate_endpoints(endpoints: &[String]) -> Result<(), BackendError> {
    if endpoints.is_empty() {
        return Err(BackendError::invalid(
            "etcd endpoints",
            "none given; expected e.g. http://127.0.0.1:2379",
        ));
    }
    for e in endpoints {
        let rest = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"))
            .unwrap_or(e);
        let port_ok = rest
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(BackendError::invalid(
                "etcd endpoint",
                format!("{e:?}; expected http://HOST:PORT"),
            ));
        }
    }
    Ok(())
}

impl EtcdLock {
    /// A lock named `name` with lease `ttl` on the etcd cluster at `endpoints`.
    pub async fn connect(
        endpoints: &[String],
        name: &str,
        ttl: Duration,
    ) -> Result<Self, BackendError> {
        Self::connect_with(endpoints, name, ttl, EtcdOptions::default()).await
    }

    /// [`connect`](Self::connect) with explicit timeouts.
    pub async fn connect_with(
        endpoints: &[String],
        name: &str,
        ttl: Duration,
        options: EtcdOptions,
    ) -> Result<Self, BackendError> {
        validate_name("lock name", name)?;
        validate_ttl(ttl)?;
        validate_endpoints(endpoints)?;
        let ttl_secs = ttl.as_millis().div_ceil(1000).max(1) as i64;
        let connect = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_timeout(options.request_timeout);
        let bound = options.connect_timeout + options.request_timeout;
        let client = super::bounded_connect(
            BACKEND,
            endpoints.join(","),
            bound,
            Client::connect(endpoints, Some(connect)),
        )
        .await?;
        Ok(EtcdLock {
            client,
            name: name.to_string(),
            prefix: format!("{name}/"),
            ttl: Duration::from_secs(ttl_secs as u64),
            ttl_secs,
            options,
            endpoints: endpoints.len(),
            held: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
        })
    }

    /// The lock's name (its keys live under `NAME/`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs one request, bounded by the request timeout, retrying on another member when the
    /// request cannot have taken effect (connection refused, no leader: gRPC `Unavailable`) and,
    /// for requests safe to repeat, also after a timeout. At most `2 × endpoints + 1` attempts.
    async fn call<T, F, Fut>(
        &self,
        operation: &'static str,
        retry: Retry,
        mut request: F,
    ) -> Result<T, BackendError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let bound = self.options.request_timeout + Duration::from_millis(100);
        let attempts = 2 * self.endpoints + 1;
        let mut attempt = 1;
        loop {
            let last = attempt >= attempts;
            match tokio::time::timeout(bound, request(self.client.clone())).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if !last && retryable(&e, retry) => {}
                Ok(Err(e)) => return Err(etcd_err(operation, e)),
                Err(_) if !last && retry == Retry::Always => {}
                Err(_) => {
                    return Err(BackendError::Timeout {
                        backend: BACKEND,
                        operation,
                        after: bound,
                    })
                }
            }
            attempt += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The lowest key under the prefix: (key, create revision, value).
    fn lowest(kvs: &[etcd_client::KeyValue]) -> Option<(String, i64, String)> {
        kvs.first().map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                kv.create_revision(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
    }

    fn first_in_line() -> GetOptions {
        GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1)
    }

    /// Grants a lease and creates our key; returns (lease, key, our create revision, lowest key,
    /// send time of the lease grant). The transaction is idempotent (a repeat finds our key and
    /// reads its create revision), so it is retried like a read.
    async fn enqueue(
        &self,
        owner: &str,
    ) -> Result<(i64, String, i64, Option<(String, i64, String)>, Instant), BackendError> {
        self.enqueue_once(owner, true).await
    }

    async fn enqueue_once(
        &self,
        owner: &str,
        may_renew: bool,
    ) -> Result<(i64, String, i64, Option<(String, i64, String)>, Instant), BackendError> {
        validate_name("owner", owner)?;
        let (lease, sent_at) = self.session(owner).await?;
        let key = format!("{}{lease:x}", self.prefix);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(
                    key.clone(),
                    owner,
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::get(self.prefix.clone(), Some(Self::first_in_line())),
            ])
            .or_else([
                TxnOp::get(key.clone(), None),
                TxnOp::get(self.prefix.clone(), Some(Self::first_in_line())),
            ]);
        let attempt = self
            .call("acquire", Retry::Always, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await;
        let resp = match attempt {
            Err(BackendError::Server { ref detail, .. })
                if may_renew && detail.contains("lease not found") =>
            {
                // The session lease ended between its renewal and our write: start a new one.
                self.sessions.lock().expect("poisoned").remove(owner);
                return Box::pin(self.enqueue_once(owner, false)).await;
            }
            other => other?,
        };
        let gets: Vec<_> = resp
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(g) => Some(g),
                _ => None,
            })
            .collect();
        let revision = if resp.succeeded() {
            resp.header().map(|h| h.revision()).unwrap_or(0)
        } else {
            // A repeat of a transaction that had already created our key.
            gets.first()
                .and_then(|g| g.kvs().first())
                .map(|kv| kv.create_revision())
                .unwrap_or(0)
        };
        let lowest = gets.last().and_then(|g| Self::lowest(g.kvs()));
        Ok((lease, key, revision, lowest, sent_at))
    }

    /// The owner's session lease and the send time of its last grant or renewal. A session
    /// renewed less than a tenth of the TTL ago is used as it is (no round trip); an older one is
    /// renewed (one keepalive, no Raft write); a lapsed one is replaced by a fresh grant. A lock
    /// taken under the session lives until that send time plus the TTL, which is what the grant
    /// reports.
    async fn session(&self, owner: &str) -> Result<(i64, Instant), BackendError> {
        let known = self.sessions.lock().expect("poisoned").get(owner).copied();
        if let Some((lease, renewed)) = known {
            if renewed.elapsed() < self.ttl / 10 {
                return Ok((lease, renewed));
            }
            let sent = Instant::now();
            if self.keep_alive_once(lease).await? {
                self.remember_session(owner, lease, sent);
                return Ok((lease, sent));
            }
        }
        let ttl = self.ttl_secs;
        let sent = Instant::now();
        let lease = self
            .call("lease grant", Retry::Always, |mut c| async move {
                c.lease_grant(ttl, None).await
            })
            .await?
            .id();
        self.remember_session(owner, lease, sent);
        Ok((lease, sent))
    }

    fn remember_session(&self, owner: &str, lease: i64, renewed: Instant) {
        self.sessions
            .lock()
            .expect("poisoned")
            .insert(owner.to_string(), (lease, renewed));
    }

    /// Deletes `key` if it is still the one created at `token`: whether it was.
    async fn delete_key(&self, key: &str, token: i64) -> Result<bool, BackendError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, token)])
            .and_then([TxnOp::delete(key, None)]);
        Ok(self
            .call("release", Retry::IfNotSent, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?
            .succeeded())
    }

    /// Whether `owner` already holds the lock under `token` (this lock is not reentrant: asking
    /// again while holding is busy).
    fn holds_already(&self, owner: &str, token: i64) -> bool {
        self.held
            .lock()
            .expect("poisoned")
            .get(&(token as u64))
            .is_some_and(|h| h.owner == owner)
    }

    fn granted(&self, owner: &str, lease: i64, key: String, token: i64, sent_at: Instant) -> Grant {
        let token = Token::new(token as u64);
        self.held.lock().expect("poisoned").insert(
            token.get(),
            Held {
                owner: owner.to_string(),
                lease,
                key,
            },
        );
        Grant {
            token,
            owner: owner.to_string(),
            ttl: self.ttl,
            sent_at,
        }
    }

    /// The keys under the prefix, sorted by create revision (`first_only`: just the lowest).
    async fn keys(&self, first_only: bool) -> Result<Vec<etcd_client::KeyValue>, BackendError> {
        let options = if first_only {
            Self::first_in_line()
        } else {
            GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
        };
        let prefix = self.prefix.clone();
        let resp = self
            .call("get", Retry::Always, |mut c| {
                let (prefix, options) = (prefix.clone(), options.clone());
                async move { c.get(prefix, Some(options)).await }
            })
            .await?;
        Ok(resp.kvs().to_vec())
    }

    /// Finds `owner`'s key with create revision `token` (from this instance's memory, or by
    /// reading the prefix when another process took it).
    async fn find(&self, owner: &str, token: Token) -> Result<Option<Held>, BackendError> {
        if let Some(h) = self.held.lock().expect("poisoned").get(&token.get()) {
            return Ok((h.owner == owner).then(|| h.clone()));
        }
        Ok(self
            .keys(false)
            .await?
            .iter()
            .find(|kv| {
                kv.create_revision() as u64 == token.get()
                    && split_value(&String::from_utf8_lossy(kv.value())).0 == owner
            })
            .map(|kv| Held {
                owner: owner.to_string(),
                lease: kv.lease(),
                key: String::from_utf8_lossy(kv.key()).into_owned(),
            }))
    }

    /// Whether `key` still exists with create revision `token` and is the lowest under the prefix.
    async fn still_first(&self, key: &str, token: Token) -> Result<bool, BackendError> {
        Ok(Self::lowest(&self.keys(true).await?)
            .is_some_and(|(k, rev, _)| k == key && rev as u64 == token.get()))
    }

    /// One keepalive of `lease`: `false` when the lease is gone.
    async fn keep_alive_once(&self, lease: i64) -> Result<bool, BackendError> {
        let result = self
            .call("keepalive", Retry::Always, |mut c| async move {
                let (mut keeper, mut stream) = c.lease_keep_alive(lease).await?;
                keeper.keep_alive().await?;
                stream.message().await
            })
            .await;
        match result {
            Ok(resp) => Ok(resp.is_some_and(|r| r.ttl() > 0)),
            Err(BackendError::Server { detail, .. }) if detail.contains("lease not found") => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

impl LockService for EtcdLock {
    fn ttl(&self) -> Duration {
        self.ttl
    }

    async fn try_acquire(&self, owner: &str) -> Result<Acquired, BackendError> {
        let (lease, key, revision, lowest, sent_at) = self.enqueue(owner).await?;
        if self.holds_already(owner, revision) {
            return Ok(Acquired::Busy {
                holder: Some(owner.to_string()),
                remaining: None,
            });
        }
        match lowest {
            Some((k, rev, _)) if k == key => Ok(Acquired::Granted(
                self.granted(owner, lease, key, rev, sent_at),
            )),
            other => {
                // Not first: leave the line (the session lease stays for the next try).
                self.delete_key(&key, revision).await?;
                Ok(Acquired::Busy {
                    holder: other.map(|(k, _, v)| owner_of(k, &v)),
                    remaining: None,
                })
            }
        }
    }

    async fn acquire(&self, owner: &str, timeout: Duration) -> Result<Option<Grant>, BackendError> {
        let deadline = Instant::now() + timeout;
        let (lease, key, revision, lowest, mut sent_at) = self.enqueue(owner).await?;
        let token = Token::new(revision as u64);
        if self.holds_already(owner, revision) {
            return Ok(None);
        }
        if lowest.is_some_and(|(k, _, _)| k == key) {
            return Ok(Some(self.granted(owner, lease, key, revision, sent_at)));
        }
        // Wait our turn, keeping our lease alive, as etcd's own lock does.
        let mut backoff = Duration::from_millis(10);
        let mut renew_at = sent_at + self.ttl / 3;
        loop {
            let now = Instant::now();
            if now >= deadline {
                self.delete_key(&key, revision).await?;
                return Ok(None);
            }
            tokio::time::sleep(backoff.min(deadline - now)).await;
            backoff = (backoff * 2).min(Duration::from_millis(100));
            if Instant::now() >= renew_at {
                let sent = Instant::now();
                if !self.keep_alive_once(lease).await? {
                    return Err(BackendError::Server {
                        backend: BACKEND,
                        operation: "acquire",
                        detail: "our lease expired while waiting in line".into(),
                    });
                }
                self.remember_session(owner, lease, sent);
                sent_at = sent;
                renew_at = sent + self.ttl / 3;
            }
            if self.still_first(&key, token).await? {
                return Ok(Some(self.granted(owner, lease, key, revision, sent_at)));
            }
        }
    }

    async fn extend(&self, owner: &str, token: Token) -> Result<Option<Grant>, BackendError> {
        let Some(held) = self.find(owner, token).await? else {
            return Ok(None);
        };
        let sent_at = Instant::now();
        if !self.keep_alive_once(held.lease).await? || !self.still_first(&held.key, token).await? {
            self.held.lock().expect("poisoned").remove(&token.get());
            return Ok(None);
        }
        self.remember_session(owner, held.lease, sent_at);
        Ok(Some(Grant {
            token,
            owner: owner.to_string(),
            ttl: self.ttl,
            sent_at,
        }))
    }

    async fn holder(&self) -> Result<Option<Holder>, BackendError> {
        Ok(
            Self::lowest(&self.keys(true).await?).map(|(key, rev, value)| Holder {
                value: split_value(&value).1.map(String::from),
                owner: owner_of(key, &value),
                token: Token::new(rev as u64),
            }),
        )
    }

    async fn publish(&self, owner: &str, token: Token, value: &str) -> Result<bool, BackendError> {
        let Some(held) = self.find(owner, token).await? else {
            return Ok(false);
        };
        let txn = Txn::new()
            .when([Compare::create_revision(
                held.key.clone(),
                CompareOp::Equal,
                token.get() as i64,
            )])
            .and_then([TxnOp::put(
                held.key.clone(),
                format!("{owner}\n{value}"),
                Some(PutOptions::new().with_lease(held.lease)),
            )]);
        // Idempotent: a repeat writes the same value under the same condition.
        Ok(self
            .call("publish", Retry::Always, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?
            .succeeded())
    }

    async fn release(&self, owner: &str, token: Token) -> Result<bool, BackendError> {
        let Some(held) = self.find(owner, token).await? else {
            return Ok(false);
        };
        self.held.lock().expect("poisoned").remove(&token.get());
        // Delete the key only if it is still the one created at `token`; the owner's session
        // lease is kept for its next acquisition (it lapses on its own if there is none).
        self.delete_key(&held.key, token.get() as i64).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked() {
        assert!(validate_endpoints(&["http://127.0.0.1:2379".into()]).is_ok());
        assert!(validate_endpoints(&["127.0.0.1:2379".into()]).is_ok());
        assert!(validate_endpoints(&[])
            .unwrap_err()
            .to_string()
            .contains("none given"));
        assert!(validate_endpoints(&["http://127.0.0.1".into()]).is_err());
        assert!(validate_endpoints(&["http://:2379".into()]).is_err());
        assert!(validate_endpoints(&["http://h:99999".into()]).is_err());
    }
}
