//! The contract every backend keeps: the lock service and fenced storage traits, the grant a
//! lock hands out, and the one typed error with its [`ErrorKind`].

use super::retry;
use crate::protocol::{StaleWrite, Token, Ttl, TtlError};
use std::future::Future;
use std::time::{Duration, Instant};

/// A lease a [`LockService`] granted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The fencing token: carry it to every write.
    pub token: Token,
    /// Who holds it.
    pub owner: String,
    /// The lease's time to live, counted by the server from when it handled the request.
    pub ttl: Duration,
    /// When the acquire (or last extend) request was sent. The server's TTL started after this,
    /// so `sent_at + ttl` is an upper bound on the lease's end as seen by this process.
    pub sent_at: Instant,
}

impl Grant {
    /// The latest instant at which this process may still act as the holder: `sent_at + ttl -
    /// drift`, where `drift` covers the clock-rate difference between this machine and the
    /// server. `None` when `drift >= ttl` (no safe window at all).
    ///
    /// Counting from when the request was sent, not from when the reply arrived, is the point: a
    /// reply delayed by a slow network or a pause would otherwise push the local deadline past the
    /// server's.
    pub fn safe_deadline(&self, drift: Duration) -> Option<Instant> {
        (self.ttl > drift).then_some(())?;
        self.sent_at.checked_add(crate::protocol::safe_deadline(
            Duration::ZERO,
            self.ttl,
            drift,
        ))
    }
}

/// The answer to a try-acquire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The lease is ours.
    Granted(Grant),
    /// Someone else holds it.
    Busy {
        /// The current holder, when the backend can tell.
        holder: Option<String>,
        /// How long the current lease has left, when the backend can tell.
        remaining: Option<Duration>,
    },
}

/// Why a backend call failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A setting was rejected before anything was sent.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// Which setting.
        what: &'static str,
        /// What was wrong and what was expected.
        reason: String,
    },
    /// The server could not be reached.
    #[error("cannot connect to {backend} at {target}: {detail}")]
    Connect {
        /// `redis`, `postgres`, ...
        backend: &'static str,
        /// The address tried.
        target: String,
        /// The underlying error, in one line.
        detail: String,
        /// The client library's error, when there is one (see [`BackendError::cause`]).
        #[source]
        source: Option<Cause>,
    },
    /// The server did not answer in time.
    #[error("{backend} did not answer {operation} within {after:?}")]
    Timeout {
        /// `redis`, `postgres`, ...
        backend: &'static str,
        /// What was being done.
        operation: &'static str,
        /// The bound that passed.
        after: Duration,
    },
    /// The connection ended before the answer came (a server that restarted or closed it): the
    /// request may or may not have taken effect.
    #[error(
        "{backend} closed the connection during {operation} ({detail}); it may or may not have \
         taken effect"
    )]
    Dropped {
        /// `redis`, `postgres`, ...
        backend: &'static str,
        /// What was being done.
        operation: &'static str,
        /// The client library's error, in one line.
        detail: String,
        /// The client library's error (see [`BackendError::cause`]).
        #[source]
        source: Option<Cause>,
    },
    /// The server answered with an error or something unexpected.
    #[error("{backend} {operation} failed: {detail}")]
    Server {
        /// `redis`, `postgres`, ...
        backend: &'static str,
        /// What was being done.
        operation: &'static str,
        /// The server's error, in one line.
        detail: String,
        /// The client library's error, when there is one (see [`BackendError::cause`]).
        #[source]
        source: Option<Cause>,
    },
    /// The lock handed out a token not larger than one this client already saw: the token
    /// counter was lost (for example a Redis restart without persistence). The lease was not
    /// taken.
    #[error(
        "fencing token went backwards on lock {name:?}: the server issued {issued} after this \
         client had seen {seen}; the token counter was lost (restart without persistence?). \
         Leases granted before the restart are not fenced from later ones; persist the counter"
    )]
    TokenRegressed {
        /// The lock.
        name: String,
        /// The token the server just issued.
        issued: Token,
        /// The highest token this client had seen before.
        seen: Token,
    },
}

/// The error of a client library behind a [`BackendError`].
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Connects with `connecting`, bounded by `bound`: a timeout or a connection error is
/// [`BackendError::Connect`] naming the backend and the address; `describe` puts the client
/// library's error in words.
pub(crate) async fn bounded_connect<T, E>(
    backend: &'static str,
    target: String,
    bound: Duration,
    describe: impl FnOnce(&E) -> String,
    connecting: impl Future<Output = Result<T, E>>,
) -> Result<T, BackendError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    // A connection that was never made carried no request: unreachable, not a fate unknown.
    let Ok(connected) = tokio::time::timeout(bound, connecting).await else {
        return Err(BackendError::Connect {
            backend,
            target,
            detail: format!(
                "no answer within {bound:?} (the host is down, drops packets, or the server is \
                 stopped)"
            ),
            source: None,
        });
    };
    connected.map_err(|e| BackendError::Connect {
        backend,
        target,
        detail: one_line(&describe(&e)),
        source: Some(Box::new(e)),
    })
}

/// The token a server's signed counter stands for (an etcd revision, a ZooKeeper zxid, a
/// PostgreSQL BIGINT); a negative one is a server error naming the operation, never a cast.
pub(crate) fn server_token(
    backend: &'static str,
    operation: &'static str,
    value: i64,
) -> Result<Token, BackendError> {
    Token::try_from(value).map_err(|e| BackendError::failed(backend, operation, e))
}

/// Whether a server's signed counter is `token`.
pub(crate) fn is_token(value: i64, token: Token) -> bool {
    Token::try_from(value) == Ok(token)
}

/// A server's or client library's error text as one line: its lines joined with "; ", blanks
/// dropped (a protocol parse error from a server that is not what the URL says can span several).
pub(crate) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// What kind of failure a [`BackendError`] is: what a caller decides on (retry, report bad input,
/// stop), without reading the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Bad input, refused before anything was sent: fix the call.
    Invalid,
    /// The server could not be reached: may succeed later.
    Unreachable,
    /// The server did not answer in time: may succeed later; the request may have taken effect.
    Timeout,
    /// The connection ended before the answer: may succeed later; the request may have taken
    /// effect.
    Dropped,
    /// The server answered with an error or something unexpected.
    Server,
    /// The lock service lost its token counter.
    TokenRegressed,
}

impl BackendError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            BackendError::Invalid { .. } => ErrorKind::Invalid,
            BackendError::Connect { .. } => ErrorKind::Unreachable,
            BackendError::Timeout { .. } => ErrorKind::Timeout,
            BackendError::Dropped { .. } => ErrorKind::Dropped,
            BackendError::Server { .. } => ErrorKind::Server,
            BackendError::TokenRegressed { .. } => ErrorKind::TokenRegressed,
        }
    }

    /// Whether trying again later may succeed (the server was unreachable, slow, or ended the
    /// connection).
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Unreachable | ErrorKind::Timeout | ErrorKind::Dropped
        )
    }

    /// Whether the request may have taken effect although no answer came (a timeout, a
    /// connection that ended): whoever depends on its effect must look.
    pub fn fate_unknown(&self) -> bool {
        matches!(self.kind(), ErrorKind::Timeout | ErrorKind::Dropped)
    }

    /// The client library's error behind this one, as its own type: what a caller matches on
    /// instead of reading the message (`e.cause::<ZkError>() == Some(&ZkError::NoNode)`).
    pub fn cause<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            BackendError::Connect { source, .. }
            | BackendError::Server { source, .. }
            | BackendError::Dropped { source, .. } => source.as_deref()?.downcast_ref::<E>(),
            _ => None,
        }
    }

    /// The server (or client library) reported `error` during `operation`: its text, in one line,
    /// is the detail and the error itself the [`cause`](Self::cause).
    pub(crate) fn failed(
        backend: &'static str,
        operation: &'static str,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        BackendError::Server {
            backend,
            operation,
            detail: one_line(&error.to_string()),
            source: Some(Box::new(error)),
        }
    }

    /// The server answered something unexpected, described by `detail` (no library error).
    pub(crate) fn unexpected(
        backend: &'static str,
        operation: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        BackendError::Server {
            backend,
            operation,
            detail: detail.into(),
            source: None,
        }
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        BackendError::Invalid {
            what,
            reason: reason.into(),
        }
    }
}

/// A lease lock that hands out fencing tokens. Each lock has one name and one TTL, fixed when it is
/// made; `owner` names the process or worker asking.
pub trait LockService: Send + Sync {
    /// The lease time to live: what was asked for and what the server grants (which a
    /// [`Grant`] carries and a holder counts with).
    fn ttl(&self) -> Ttl;

    /// Takes the lease if it is free (or its holder's lease expired), in one round trip.
    fn try_acquire(
        &self,
        owner: &str,
    ) -> impl Future<Output = Result<Acquired, BackendError>> + Send;

    /// Renews `owner`'s lease with `token` for another TTL. `Ok(None)` when the lease is no
    /// longer this owner's (expired and possibly taken): the caller must stop acting as holder.
    fn extend(
        &self,
        owner: &str,
        token: Token,
    ) -> impl Future<Output = Result<Option<Grant>, BackendError>> + Send;

    /// Publishes `value` with `owner`'s lease under `token` (for an election: the leader's
    /// proclamation), replacing what it published before. `Ok(false)`, publishing nothing, when
    /// the lease is no longer theirs. The value lasts as long as the lease.
    fn publish(
        &self,
        owner: &str,
        token: Token,
        value: &str,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Who holds the lease now and under which token; `None` when it is free. A read only: it
    /// changes nothing.
    fn holder(&self) -> impl Future<Output = Result<Option<Holder>, BackendError>> + Send;

    /// Releases `owner`'s lease with `token`. `Ok(false)` when it was no longer held by them:
    /// another owner or token holds it, or it expired (nothing is changed then).
    fn release(
        &self,
        owner: &str,
        token: Token,
    ) -> impl Future<Output = Result<bool, BackendError>> + Send;

    /// Takes the lease, waiting up to `timeout` for it to become free. `Ok(None)` when the time
    /// ran out. Polls as [`retry::POLL_BUSY`] says, never sleeping past the holder's
    /// remaining TTL (when known) or the deadline.
    fn acquire(
        &self,
        owner: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<Grant>, BackendError>> + Send {
        async move {
            let deadline = Instant::now() + timeout;
            let mut backoff = retry::POLL_BUSY;
            loop {
                match self.try_acquire(owner).await? {
                    Acquired::Granted(grant) => return Ok(Some(grant)),
                    Acquired::Busy { remaining, .. } => {
                        let Some(mut nap) = backoff.next_pause(Instant::now(), Some(deadline))
                        else {
                            return Ok(None);
                        };
                        if let Some(left) = remaining {
                            nap = nap.min(left.max(Duration::from_millis(1)));
                        }
                        tokio::time::sleep(nap).await;
                    }
                }
            }
        }
    }
}

/// The current holder of a lease, as [`LockService::holder`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Who holds it.
    pub owner: String,
    /// The token of its lease (for an election: the term).
    pub token: Token,
    /// What the holder published with [`LockService::publish`] (for an election: the leader's
    /// proclamation, such as its address), if anything.
    pub value: Option<String>,
}

/// What fenced storage did with a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Stored.
    Accepted,
    /// Refused: a write with a newer token was already stored.
    Stale(StaleWrite),
}

impl WriteOutcome {
    /// The write was stored.
    pub fn is_accepted(&self) -> bool {
        matches!(self, WriteOutcome::Accepted)
    }
}

/// A stored value and the token of the write that stored it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The highest token accepted for this key.
    pub token: Token,
    /// The value last stored.
    pub value: Vec<u8>,
}

/// The answer to a fenced write: accepted or refused, or the error that kept it from an answer.
pub type WriteResult = Result<WriteOutcome, BackendError>;

/// Storage that applies the fencing rule to every write: a write whose token is older than the
/// highest already accepted for that key is refused, naming that highest token. Equal tokens are
/// accepted (one holder writes many times under one lease).
pub trait FencedStorage: Send + Sync {
    /// Writes `value` under `key` if `token` is not older than the key's highest token.
    fn write(
        &self,
        key: &str,
        token: Token,
        value: &[u8],
    ) -> impl Future<Output = WriteResult> + Send;

    /// Reads the key's value and highest token.
    fn read(&self, key: &str) -> impl Future<Output = Result<Option<Stored>, BackendError>> + Send;
}

impl From<TtlError> for BackendError {
    /// A TTL outside the bounds is bad input, named `ttl`.
    fn from(e: TtlError) -> Self {
        BackendError::invalid("ttl", e.to_string())
    }
}

/// Checks a lock or store name: non-empty, at most 200 bytes, no control characters and no
/// braces (they would break Redis Cluster hash tags).
pub fn validate_name(what: &'static str, name: &str) -> Result<(), BackendError> {
    if name.is_empty() {
        return Err(BackendError::invalid(
            what,
            "it is empty; give a name such as nightly-job",
        ));
    }
    if name.len() > 200 {
        return Err(BackendError::invalid(
            what,
            format!("it is {} bytes long; at most 200 are allowed", name.len()),
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_control() || *c == '{' || *c == '}')
    {
        return Err(BackendError::invalid(
            what,
            format!("{name:?} contains {c:?}; braces and control characters are not allowed"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_deadline_counts_from_the_send_time_minus_drift() {
        let sent_at = Instant::now();
        let g = Grant {
            token: Token::new(1),
            owner: "a".into(),
            ttl: Duration::from_millis(1000),
            sent_at,
        };
        assert_eq!(
            g.safe_deadline(Duration::from_millis(100)),
            Some(sent_at + Duration::from_millis(900))
        );
        assert_eq!(g.safe_deadline(Duration::ZERO), Some(sent_at + g.ttl));
        assert_eq!(g.safe_deadline(Duration::from_millis(1000)), None);
        assert_eq!(g.safe_deadline(Duration::from_millis(2000)), None);
    }

    #[test]
    fn error_kinds_say_what_to_do_without_reading_the_message() {
        let unreachable = BackendError::Connect {
            backend: "redis",
            target: "127.0.0.1:1".into(),
            detail: "refused".into(),
            source: None,
        };
        let slow = BackendError::Timeout {
            backend: "redis",
            operation: "acquire",
            after: Duration::from_secs(1),
        };
        assert_eq!(unreachable.kind(), ErrorKind::Unreachable);
        assert_eq!(slow.kind(), ErrorKind::Timeout);
        assert!(unreachable.is_transient() && slow.is_transient());
        // A refused connection sent nothing; a timeout or a connection closed mid-request may
        // have taken effect.
        let dropped = BackendError::Dropped {
            backend: "redis",
            operation: "acquire",
            detail: "the server closed the connection".into(),
            source: None,
        };
        assert_eq!(dropped.kind(), ErrorKind::Dropped);
        assert!(dropped.is_transient() && dropped.fate_unknown() && slow.fate_unknown());
        assert!(!unreachable.fate_unknown());
        assert!(dropped
            .to_string()
            .contains("may or may not have taken effect"));
        let bad = BackendError::invalid("lock name", "empty");
        assert_eq!(bad.kind(), ErrorKind::Invalid);
        assert!(!bad.is_transient() && !bad.fate_unknown());
        let negative = server_token("etcd", "holder", -3).unwrap_err();
        assert_eq!(negative.kind(), ErrorKind::Server);
        assert!(negative.to_string().contains("-3 is not a token"));
        // The library's error travels typed, as the source: matched by type, not by its text.
        assert_eq!(
            negative.cause::<crate::protocol::NegativeToken>(),
            Some(&crate::protocol::NegativeToken(-3))
        );
        assert!(std::error::Error::source(&negative).is_some());
        assert_eq!(negative.cause::<std::io::Error>().map(|_| ()), None);
        assert_eq!(bad.cause::<crate::protocol::NegativeToken>(), None);
        assert!(is_token(5, Token::new(5)) && !is_token(-5, Token::new(5)));
        assert_eq!(one_line("a\n\n  b \n"), "a; b");
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_name("lock name", "nightly").is_ok());
        let e = validate_name("lock name", "").unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid lock name: it is empty; give a name such as nightly-job"
        );
        assert!(validate_name("lock name", "a{b}")
            .unwrap_err()
            .to_string()
            .contains("'{'"));
        assert!(validate_name("lock name", "a\nb").is_err());
        assert!(validate_name("lock name", &"x".repeat(201)).is_err());
        assert!(validate_name("lock name", &"x".repeat(200)).is_ok());
    }
}
