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

mod line;
pub mod rpc;
mod session;

use super::contract::{validate_name, Acquired, BackendError, Grant, Holder, LockService};
use super::queue::{entry_value, owner_of, split_value, Ledger};
use crate::protocol::Token;
use crate::protocol::Ttl;
use crate::sync::Mutex;
use line::InLine;
use rpc::{Compare, KeyValue, RangeRequest, RequestOp, TxnRequest, TxnResponse};
use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};
use tonic::Status;

const BACKEND: &str = "etcd";

/// Whether a failed request may be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retry {
    /// Repeating it is harmless (reads, keepalives, lease grants, the idempotent acquire).
    Always,
    /// Only if it cannot have reached a server.
    IfNotSent,
}

/// Why a call failed after its retries.
enum Failure {
    /// The last member tried answered with this status.
    Status(Status),
    /// No member answered within the bound.
    Timeout(Duration),
}

impl Failure {
    fn lease_not_found(&self) -> bool {
        matches!(self, Failure::Status(s) if rpc::lease_not_found(s))
    }

    fn into_error(self, operation: &'static str) -> BackendError {
        match self {
            Failure::Status(status) => BackendError::Server {
                backend: BACKEND,
                operation,
                detail: rpc::describe(&status),
                source: Some(Box::new(status)),
            },
            Failure::Timeout(after) => BackendError::Timeout {
                backend: BACKEND,
                operation,
                after,
            },
        }
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

/// The etcd lease and key behind a lease this lock instance granted.
#[derive(Clone, Debug)]
struct Held {
    lease: i64,
    key: String,
}

/// An etcd lease lock with create-revision fencing tokens.
pub struct EtcdLock {
    members: rpc::Members,
    name: String,
    prefix: String,
    ttl: Ttl,
    ttl_secs: i64,
    options: EtcdOptions,
    held: Ledger<Held>,
    /// Each owner's session lease and when it was last granted or renewed (send time).
    sessions: Mutex<HashMap<String, (i64, Instant)>>,
}

/// Checks endpoints: at least one, each `http://HOST:PORT` or `HOST:PORT`. An `https://`
/// endpoint is refused rather than spoken to in plaintext: this client has no TLS.
fn validate_endpoints(endpoints: &[String]) -> Result<(), BackendError> {
    if endpoints.is_empty() {
        return Err(BackendError::invalid(
            "etcd endpoints",
            "none given; expected e.g. http://127.0.0.1:2379",
        ));
    }
    for e in endpoints {
        let rest = match e.split_once("://") {
            None => e.as_str(),
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(BackendError::invalid(
                    "etcd endpoint",
                    format!(
                        "{e:?}: TLS is not supported, and an https endpoint is never spoken to in \
                         plaintext; expected http://HOST:PORT"
                    ),
                ))
            }
            Some((scheme, _)) => {
                return Err(BackendError::invalid(
                    "etcd endpoint",
                    format!("{e:?}: unknown scheme {scheme:?}; expected http://HOST:PORT"),
                ))
            }
        };
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
        let ttl = Ttl::new(ttl)?.in_units_of(Duration::from_secs(1));
        validate_endpoints(endpoints)?;
        // At most 24 h (Ttl::new): far inside i64.
        let ttl_secs = i64::try_from(ttl.granted_units(Duration::from_secs(1))).unwrap_or(i64::MAX);
        let members =
            rpc::Members::new(endpoints, options.connect_timeout, options.request_timeout)
                .map_err(|reason| BackendError::invalid("etcd endpoint", reason))?;
        let lock = EtcdLock {
            members,
            name: name.to_string(),
            prefix: format!("{name}/"),
            ttl,
            ttl_secs,
            options,
            held: Ledger::new(),
            sessions: Mutex::new(HashMap::new()),
        };
        // Reach the cluster once now, so that a wrong address fails here, naming it.
        // One connect timeout in all, whatever the members: a silent one is not asked thrice.
        let ping = lock.call(Retry::IfNotSent, |c| async move {
            c.range(RangeRequest::key("fencecheck/ping")).await
        });
        let status = match tokio::time::timeout(options.connect_timeout, ping).await {
            Ok(Ok(_)) => return Ok(lock),
            Ok(Err(Failure::Status(status))) => Some(status),
            Ok(Err(Failure::Timeout(_))) | Err(_) => None,
        };
        // "Unavailable", a call cut short or no answer at all says nothing of why: probe each
        // member.
        let detail = match &status {
            Some(s) if !matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Cancelled) => {
                rpc::describe(s)
            }
            _ => {
                let server = "etcd (no gRPC answer: a stopped server, or not an etcd client URL?)";
                let bound = options.connect_timeout;
                super::probe::unreachable_because(endpoints, bound, server).await
            }
        };
        Err(BackendError::Connect {
            backend: BACKEND,
            target: endpoints.join(","),
            detail,
            source: status.map(|s| Box::new(s) as super::contract::Cause),
        })
    }

    /// The lock's name (its keys live under `NAME/`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs one request, bounded by the request timeout, retrying on another member when the
    /// request cannot have taken effect (connection refused, no leader: gRPC `Unavailable`) and,
    /// for requests safe to repeat, also after a timeout. At most `2 × endpoints + 1` attempts.
    async fn call<T, F, Fut>(&self, retry: Retry, request: F) -> Result<T, Failure>
    where
        F: FnMut(rpc::Client) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.call_sent(retry, request).await.map(|(v, _)| v)
    }

    /// [`call`](Self::call), with the time the attempt that was answered was sent: a lease's
    /// TTL runs from when the server handled that attempt, not from an earlier one that failed
    /// (a server restarting, a member down).
    async fn call_sent<T, F, Fut>(
        &self,
        retry: Retry,
        mut request: F,
    ) -> Result<(T, Instant), Failure>
    where
        F: FnMut(rpc::Client) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let bound = self.options.request_timeout + Duration::from_millis(100);
        let attempts = 2 * self.members.len() + 1;
        let idempotent = retry == Retry::Always;
        let mut resend = super::retry::RESEND;
        for attempt in 0..attempts {
            let last = attempt + 1 >= attempts;
            let client = self.members.client(attempt);
            let sent = Instant::now();
            match tokio::time::timeout(bound, request(client.clone())).await {
                Ok(Ok(v)) => {
                    self.members.answered(&client);
                    return Ok((v, sent));
                }
                Ok(Err(e)) if !last && rpc::retryable(&e, idempotent) => {}
                Ok(Err(e)) => return Err(Failure::Status(e)),
                Err(_) if !last && idempotent => {}
                Err(_) => return Err(Failure::Timeout(bound)),
            }
            resend.pause(None).await;
        }
        unreachable!("the last attempt returns")
    }

    /// [`call`](Self::call) with its failure as a [`BackendError`].
    async fn request<T, F, Fut>(
        &self,
        operation: &'static str,
        retry: Retry,
        request: F,
    ) -> Result<T, BackendError>
    where
        F: FnMut(rpc::Client) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        self.call(retry, request)
            .await
            .map_err(|f| f.into_error(operation))
    }

    /// The lowest key under the prefix: (key, create revision, value).
    fn lowest(kvs: &[KeyValue]) -> Option<(String, i64, String)> {
        kvs.first().map(|kv| {
            (
                String::from_utf8_lossy(&kv.key).into_owned(),
                kv.create_revision,
                String::from_utf8_lossy(&kv.value).into_owned(),
            )
        })
    }

    fn first_in_line(&self) -> RangeRequest {
        RangeRequest::prefix_by_creation(&self.prefix, 1)
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
        let txn = TxnRequest {
            compare: vec![Compare::created_at(&key, 0)],
            success: vec![
                RequestOp::put(&key, owner, lease),
                RequestOp::range(self.first_in_line()),
            ],
            failure: vec![
                RequestOp::range(RangeRequest::key(&key)),
                RequestOp::range(self.first_in_line()),
            ],
        };
        let attempt = self
            .call(Retry::Always, |c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await;
        let resp: TxnResponse = match attempt {
            Err(f) if may_renew && f.lease_not_found() => {
                // The session lease ended between its renewal and our write: start a new one.
                self.sessions.lock().remove(owner);
                return Box::pin(self.enqueue_once(owner, false)).await;
            }
            other => other.map_err(|f| f.into_error("acquire"))?,
        };
        let gets: Vec<_> = resp.ranges().collect();
        let revision = if resp.succeeded {
            resp.header.as_ref().map_or(0, |h| h.revision)
        } else {
            // A repeat of a transaction that had already created our key.
            gets.first()
                .and_then(|g| g.kvs.first())
                .map_or(0, |kv| kv.create_revision)
        };
        let lowest = gets.last().and_then(|g| Self::lowest(&g.kvs));
        Ok((lease, key, revision, lowest, sent_at))
    }

    /// Deletes `key` if it is still the one created at `token`: whether it was.
    async fn delete_key(&self, key: &str, token: i64) -> Result<bool, BackendError> {
        let txn = TxnRequest {
            compare: vec![Compare::created_at(key, token)],
            success: vec![RequestOp::delete(key)],
            failure: vec![],
        };
        Ok(self
            .request("release", Retry::IfNotSent, |c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?
            .succeeded)
    }

    /// Whether `owner` already holds the lock under `token` (this lock is not reentrant: asking
    /// again while holding is busy).
    fn holds_already(&self, owner: &str, token: Token) -> bool {
        self.held.holds(owner, token)
    }

    fn granted(
        &self,
        owner: &str,
        lease: i64,
        key: String,
        token: Token,
        sent_at: Instant,
    ) -> Grant {
        self.held.grant(
            owner,
            token,
            Held { lease, key },
            self.ttl.granted(),
            sent_at,
        )
    }

    /// The keys under the prefix, sorted by create revision (`first_only`: just the lowest).
    async fn keys(&self, first_only: bool) -> Result<Vec<KeyValue>, BackendError> {
        let range = RangeRequest::prefix_by_creation(&self.prefix, i64::from(first_only));
        let resp = self
            .request("get", Retry::Always, |c| {
                let range = range.clone();
                async move { c.range(range).await }
            })
            .await?;
        Ok(resp.kvs)
    }

    /// Finds `owner`'s key with create revision `token` (from this instance's memory, or by
    /// reading the prefix when another process took it).
    async fn find(&self, owner: &str, token: Token) -> Result<Option<Held>, BackendError> {
        if let Some(known) = self.held.lookup(owner, token) {
            return Ok(known);
        }
        Ok(self
            .keys(false)
            .await?
            .iter()
            .find(|kv| {
                super::contract::is_token(kv.create_revision, token)
                    && split_value(&String::from_utf8_lossy(&kv.value)).0 == owner
            })
            .map(|kv| Held {
                lease: kv.lease,
                key: String::from_utf8_lossy(&kv.key).into_owned(),
            }))
    }

    /// Whether `key` still exists with create revision `token` and is the lowest under the prefix.
    async fn still_first(&self, key: &str, token: Token) -> Result<bool, BackendError> {
        Ok(Self::lowest(&self.keys(true).await?)
            .is_some_and(|(k, rev, _)| k == key && super::contract::is_token(rev, token)))
    }
}

impl LockService for EtcdLock {
    fn ttl(&self) -> Ttl {
        self.ttl
    }

    async fn try_acquire(&self, owner: &str) -> Result<Acquired, BackendError> {
        let (lease, key, revision, lowest, sent_at) = self.enqueue(owner).await?;
        let token = super::contract::server_token(BACKEND, "acquire", revision)?;
        if self.holds_already(owner, token) {
            return Ok(Acquired::Busy {
                holder: Some(owner.to_string()),
                remaining: None,
            });
        }
        match lowest {
            Some((k, _, _)) if k == key => Ok(Acquired::Granted(
                self.granted(owner, lease, key, token, sent_at),
            )),
            other => {
                // Not first: leave the line (the session lease stays for the next try).
                self.delete_key(&key, revision).await?;
                Ok(Acquired::Busy {
                    holder: other.map(|(k, _, v)| owner_of(&k, &v)),
                    remaining: None,
                })
            }
        }
    }

    async fn acquire(&self, owner: &str, timeout: Duration) -> Result<Option<Grant>, BackendError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.wait_in_line(owner, deadline).await? {
                InLine::Granted(grant) => return Ok(Some(grant)),
                InLine::TimedOut => return Ok(None),
                // The session lease ran out while we waited (a server stopped or restarted, a
                // pause): our key went with it. Join the line again with a new session.
                InLine::LeaseLost => {
                    self.sessions.lock().remove(owner);
                }
            }
        }
    }

    async fn extend(&self, owner: &str, token: Token) -> Result<Option<Grant>, BackendError> {
        let Some(held) = self.find(owner, token).await? else {
            return Ok(None);
        };
        let Some(sent_at) = self.keep_alive_once(held.lease).await? else {
            self.held.forget(token);
            return Ok(None);
        };
        if !self.still_first(&held.key, token).await? {
            self.held.forget(token);
            return Ok(None);
        }
        self.remember_session(owner, held.lease, sent_at);
        Ok(Some(Grant {
            token,
            owner: owner.to_string(),
            ttl: self.ttl.granted(),
            sent_at,
        }))
    }

    async fn holder(&self) -> Result<Option<Holder>, BackendError> {
        let Some((key, rev, value)) = Self::lowest(&self.keys(true).await?) else {
            return Ok(None);
        };
        Ok(Some(Holder {
            value: split_value(&value).1.map(String::from),
            owner: owner_of(&key, &value),
            token: super::contract::server_token(BACKEND, "holder", rev)?,
        }))
    }

    async fn publish(&self, owner: &str, token: Token, value: &str) -> Result<bool, BackendError> {
        let Some(held) = self.find(owner, token).await? else {
            return Ok(false);
        };
        let txn = TxnRequest {
            compare: vec![Compare::created_at(&held.key, revision_of(token)?)],
            success: vec![RequestOp::put(
                &held.key,
                &entry_value(owner, Some(value)),
                held.lease,
            )],
            failure: vec![],
        };
        // Idempotent: a repeat writes the same value under the same condition.
        Ok(self
            .request("publish", Retry::Always, |c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?
            .succeeded)
    }

    async fn release(&self, owner: &str, token: Token) -> Result<bool, BackendError> {
        let Some(held) = self.find(owner, token).await? else {
            return Ok(false);
        };
        self.held.forget(token);
        // Delete the key only if it is still the one created at `token`; the owner's session
        // lease is kept for its next acquisition (it lapses on its own if there is none).
        self.delete_key(&held.key, revision_of(token)?).await
    }
}

/// The create revision a token stands for (tokens on etcd are revisions, which etcd keeps as i64).
fn revision_of(token: Token) -> Result<i64, BackendError> {
    i64::try_from(token.get()).map_err(|_| {
        BackendError::invalid(
            "token",
            format!(
                "{token} is larger than any etcd revision (at most {})",
                i64::MAX
            ),
        )
    })
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
        let tls = validate_endpoints(&["https://127.0.0.1:2379".into()]).unwrap_err();
        assert!(tls.to_string().contains("TLS is not supported"), "{tls}");
        assert_eq!(tls.kind(), crate::backend::ErrorKind::Invalid);
        let ftp = validate_endpoints(&["ftp://127.0.0.1:2379".into()]).unwrap_err();
        assert!(ftp.to_string().contains("unknown scheme \"ftp\""), "{ftp}");
    }
}
