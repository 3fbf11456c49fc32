//! Redis: a lease lock whose acquire takes the lease and its fencing token in one script, and a
//! fenced key-value store whose writes are a compare-and-set script.
//!
//! Keys of one lock share a hash tag (`fencecheck:{NAME}:lock`, `fencecheck:{NAME}:token`), so in
//! Redis Cluster the lock and its token counter live in one slot and one script can touch both.
//!
//! **Token durability.** The counter is an ordinary Redis key. Tokens stay strictly increasing
//! only while Redis keeps it: a restart without persistence (or a failover to a replica that had
//! not received the last `INCR`) starts it again from 1. Run Redis with `appendonly yes` and
//! `appendfsync always` for monotonic tokens. A [`RedisLock`] remembers the highest token it has
//! seen and refuses a grant that is not larger ([`BackendError::TokenRegressed`]), releasing the
//! key it just took. Fenced storage rejects the smaller tokens, but not a token handed out twice: a
//! holder paused across the restart and the new holder of the same token both get their writes in,
//! the older last (the `token-reset` model). Raising the counter afterwards
//! ([`RedisLock::raise_token_floor`]) restores progress, not that safety: persist the counter.

use super::contract::{
    validate_name, Acquired, BackendError, FencedStorage, Grant, Holder, LockService, Stored,
    WriteOutcome, WriteResult,
};
use super::redis_conn::Dedicated;
use crate::protocol::Ttl;
use crate::protocol::{FencePolicy, StaleWrite, Token};
use redis::Script;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

const BACKEND: &str = "redis";

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::ACQUIRE));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::EXTEND));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RELEASE));
static RAISE_FLOOR: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::RAISE_FLOOR));
static HOLDER: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::HOLDER));
static PUBLISH: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::PUBLISH));
static FENCED_WRITE: LazyLock<Script> = LazyLock::new(|| Script::new(scripts::FENCED_WRITE));

/// The Lua scripts the Redis backend runs (public so benchmarks can run the same ones).
pub mod scripts {
    /// Takes the lease if free, issues the next token and stores `token:owner` with the TTL.
    /// KEYS: lock, counter. ARGV: owner, ttl ms, highest token this client has seen (0 if none).
    /// Returns {1, token, 0} granted, {0, "token:owner", pttl} busy, {2, token, 0} token regressed.
    pub const ACQUIRE: &str = r"
local held = redis.call('GET', KEYS[1])
if held then return {0, held, redis.call('PTTL', KEYS[1])} end
local t = redis.call('INCR', KEYS[2])
if t <= tonumber(ARGV[3]) then return {2, string.format('%d', t), 0} end
redis.call('SET', KEYS[1], string.format('%d', t) .. ':' .. ARGV[1], 'PX', ARGV[2])
return {1, string.format('%d', t), 0}
";

    /// Renews the lease iff it is still `token:owner`. KEYS: lock. ARGV: `token:owner`, ttl ms.
    pub const EXTEND: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
";

    /// Deletes the lease iff it is still `token:owner`. KEYS: lock. ARGV: `token:owner`.
    pub const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

    /// The lease's value `token:owner` (or nil) and what the holder published (or nil).
    /// KEYS: lock, published value.
    pub const HOLDER: &str = r"
local held = redis.call('GET', KEYS[1])
if not held then return {} end
local value = redis.call('GET', KEYS[2])
if value and string.sub(value, 1, string.len(held) + 1) == held .. '\n' then
  return {held, string.sub(value, string.len(held) + 2)}
end
return {held}
";

    /// Publishes `ARGV[2]` iff the lease is still `ARGV[1]` (`token:owner`), stored after that value
    /// and a newline so it is tied to that lease, and expiring with it.
    /// KEYS: lock, published value.
    pub const PUBLISH: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local left = redis.call('PTTL', KEYS[1])
if left <= 0 then return 0 end
redis.call('SET', KEYS[2], ARGV[1] .. '\n' .. ARGV[2], 'PX', left)
return 1
";

    /// Sets the counter to at least `ARGV[1]`; returns the counter. KEYS: counter.
    pub const RAISE_FLOOR: &str = r"
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if cur < floor then redis.call('SET', KEYS[1], ARGV[1]) cur = floor end
return string.format('%d', cur)
";

    /// The fencing rule on a hash {token, value}. KEYS: data key. ARGV: token, value, policy.
    /// Returns {1, highest} stored, {0, highest} refused as stale.
    pub const FENCED_WRITE: &str = r"
local cur = redis.call('HGET', KEYS[1], 'token')
if cur and tonumber(cur) > tonumber(ARGV[1]) then
  if ARGV[3] == 'fenced' then return {0, cur} end
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {1, ARGV[1]}
";
}

/// Connection settings for the Redis backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedisOptions {
    /// Bound on establishing a connection.
    pub connect_timeout: Duration,
    /// Bound on each request's reply.
    pub response_timeout: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
        }
    }
}

/// One lazily (re)connected connection of this client's own ([`Dedicated`]), one request at a
/// time: thrown away by the next call once interrupted (an I/O error, a timeout, a request cut
/// off by its caller), so a restarted server is reached again.
struct Conn {
    info: Box<redis::ConnectionInfo>,
    target: String,
    options: RedisOptions,
    cached: tokio::sync::Mutex<Option<Dedicated>>,
}

impl Conn {
    fn open(url: &str, options: RedisOptions) -> Result<Self, BackendError> {
        let info = redis::IntoConnectionInfo::into_connection_info(url).map_err(|e| {
            BackendError::invalid(
                "redis url",
                format!("{url:?}: {e}; expected redis://HOST:PORT[/DB]"),
            )
        })?;
        let target = info.addr().to_string();
        Ok(Conn {
            info: Box::new(info),
            target,
            options,
            cached: tokio::sync::Mutex::new(None),
        })
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        operation: &'static str,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T, BackendError> {
        Ok(self.run_sent(operation, invocation).await?.0)
    }

    /// As [`Conn::run`], with the instant the request was sent: after any reconnect, so that a
    /// lease is not counted from before a server that was down (or stopped) could see it.
    async fn run_sent<T: redis::FromRedisValue>(
        &self,
        operation: &'static str,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<(T, Instant), BackendError> {
        let mut slot = self.cached.lock().await;
        if slot.as_ref().is_some_and(Dedicated::interrupted) {
            *slot = None;
        }
        let conn = match &mut *slot {
            Some(conn) => conn,
            empty => {
                let bound = self.options.connect_timeout + self.options.response_timeout;
                let connecting = Dedicated::connect(&self.info, self.options.response_timeout);
                let conn = super::contract::bounded_connect(
                    BACKEND,
                    self.target.clone(),
                    bound,
                    describe,
                    connecting,
                )
                .await?;
                empty.insert(conn)
            }
        };
        // The connection bounds every reply by `response_timeout` itself.
        let sent_at = Instant::now();
        match invocation.invoke_async::<T>(conn).await {
            Ok(v) => Ok((v, sent_at)),
            Err(e) => {
                // An I/O error, a timeout or a reply that is not RESP leaves the connection
                // interrupted, and the next call throws it away; a server's error reply does not.
                if e.is_timeout() {
                    return Err(BackendError::Timeout {
                        backend: BACKEND,
                        operation,
                        after: self.options.response_timeout,
                    });
                }
                if e.is_io_error() || e.is_connection_dropped() {
                    return Err(BackendError::Dropped {
                        backend: BACKEND,
                        operation,
                        detail: describe(&e),
                        source: Some(Box::new(e)),
                    });
                }
                Err(BackendError::Server {
                    backend: BACKEND,
                    operation,
                    detail: describe(&e),
                    source: Some(Box::new(e)),
                })
            }
        }
    }
}

/// A Redis lease lock with fencing tokens.
///
/// ```no_run
/// # async fn demo() -> Result<(), fencecheck::backend::BackendError> {
/// use fencecheck::backend::{Acquired, LockService, RedisLock};
/// use std::time::Duration;
///
/// let lock = RedisLock::connect("redis://127.0.0.1:6379", "nightly", Duration::from_secs(30))?;
/// if let Acquired::Granted(grant) = lock.try_acquire("worker-1").await? {
///     // ... write with grant.token to fenced storage ...
///     lock.release("worker-1", grant.token).await?;
/// }
/// # Ok(()) }
/// ```
pub struct RedisLock {
    conn: Conn,
    name: String,
    ttl: Ttl,
    lock_key: String,
    token_key: String,
    value_key: String,
    seen: AtomicU64,
}

impl RedisLock {
    /// A lock named `name` with lease `ttl` on the Redis at `url` (`redis://HOST:PORT`). Checks
    /// its arguments; connects on first use.
    pub fn connect(url: &str, name: &str, ttl: Duration) -> Result<Self, BackendError> {
        Self::connect_with(url, name, ttl, RedisOptions::default())
    }

    /// [`connect`](Self::connect) with explicit timeouts.
    pub fn connect_with(
        url: &str,
        name: &str,
        ttl: Duration,
        options: RedisOptions,
    ) -> Result<Self, BackendError> {
        validate_name("lock name", name)?;
        let ttl = Ttl::new(ttl)?.in_units_of(Duration::from_millis(1));
        Ok(RedisLock {
            conn: Conn::open(url, options)?,
            name: name.to_string(),
            ttl,
            lock_key: format!("fencecheck:{{{name}}}:lock"),
            token_key: format!("fencecheck:{{{name}}}:token"),
            value_key: format!("fencecheck:{{{name}}}:value"),
            seen: AtomicU64::new(0),
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis keys holding the lease and the token counter.
    pub fn keys(&self) -> (&str, &str) {
        (&self.lock_key, &self.token_key)
    }

    /// The highest token this client has been granted or seen held.
    pub fn highest_seen(&self) -> Option<Token> {
        match self.seen.load(Ordering::Acquire) {
            0 => None,
            t => Some(Token::new(t)),
        }
    }

    fn saw(&self, token: u64) {
        self.seen.fetch_max(token, Ordering::AcqRel);
    }

    /// Raises the token counter to at least `floor` (for example the fenced storage's highest
    /// token after the counter was lost) and returns the counter's value.
    pub async fn raise_token_floor(&self, floor: Token) -> Result<Token, BackendError> {
        let mut inv = RAISE_FLOOR.key(&self.token_key);
        inv.arg(floor.get());
        let v: u64 = self.conn.run("raise token floor", inv).await?;
        Ok(Token::new(v))
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.granted_units(Duration::from_millis(1))
    }
}

fn held_value(owner: &str, token: Token) -> String {
    format!("{token}:{owner}")
}

fn parse_token(operation: &'static str, raw: &str) -> Result<u64, BackendError> {
    raw.parse().map_err(|_| {
        BackendError::unexpected(BACKEND, operation, format!("expected a token, got {raw:?}"))
    })
}

impl LockService for RedisLock {
    fn ttl(&self) -> Ttl {
        self.ttl
    }

    async fn try_acquire(&self, owner: &str) -> Result<Acquired, BackendError> {
        validate_name("owner", owner)?;
        let mut inv = ACQUIRE.key(&self.lock_key);
        inv.key(&self.token_key)
            .arg(owner)
            .arg(self.ttl_ms())
            .arg(self.seen.load(Ordering::Acquire));
        let ((status, value, pttl), sent_at): ((i64, String, i64), _) =
            self.conn.run_sent("acquire", inv).await?;
        match status {
            1 => {
                let token = parse_token("acquire", &value)?;
                self.saw(token);
                Ok(Acquired::Granted(Grant {
                    token: Token::new(token),
                    owner: owner.to_string(),
                    ttl: self.ttl.granted(),
                    sent_at,
                }))
            }
            0 => {
                let (token, holder) = value.split_once(':').unwrap_or((value.as_str(), ""));
                if let Ok(t) = token.parse::<u64>() {
                    self.saw(t);
                }
                Ok(Acquired::Busy {
                    holder: Some(holder.to_string()),
                    remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
                })
            }
            _ => Err(BackendError::TokenRegressed {
                name: self.name.clone(),
                issued: Token::new(parse_token("acquire", &value)?),
                seen: self.highest_seen().unwrap_or(Token::new(0)),
            }),
        }
    }

    async fn extend(&self, owner: &str, token: Token) -> Result<Option<Grant>, BackendError> {
        let mut inv = EXTEND.key(&self.lock_key);
        inv.arg(held_value(owner, token)).arg(self.ttl_ms());
        let (done, sent_at): (i64, _) = self.conn.run_sent("extend", inv).await?;
        Ok((done == 1).then(|| Grant {
            token,
            owner: owner.to_string(),
            ttl: self.ttl.granted(),
            sent_at,
        }))
    }

    async fn holder(&self) -> Result<Option<Holder>, BackendError> {
        let mut inv = HOLDER.key(&self.lock_key);
        inv.key(&self.value_key);
        let mut reply: Vec<String> = self.conn.run("holder", inv).await?;
        if reply.is_empty() {
            return Ok(None);
        }
        let value = (reply.len() > 1).then(|| reply.remove(1));
        let held = reply.remove(0);
        let (token, owner) = held.split_once(':').unwrap_or((held.as_str(), ""));
        Ok(Some(Holder {
            owner: owner.to_string(),
            token: Token::new(parse_token("holder", token)?),
            value,
        }))
    }

    async fn publish(&self, owner: &str, token: Token, value: &str) -> Result<bool, BackendError> {
        let mut inv = PUBLISH.key(&self.lock_key);
        inv.key(&self.value_key)
            .arg(held_value(owner, token))
            .arg(value);
        let done: i64 = self.conn.run("publish", inv).await?;
        Ok(done == 1)
    }

    async fn release(&self, owner: &str, token: Token) -> Result<bool, BackendError> {
        let mut inv = RELEASE.key(&self.lock_key);
        inv.arg(held_value(owner, token));
        let done: i64 = self.conn.run("release", inv).await?;
        Ok(done == 1)
    }
}

/// A Redis key-value store that applies the fencing rule in a compare-and-set script. Each key
/// is a hash `{token, value}` at `PREFIX:{KEY}`.
pub struct RedisFencedStore {
    conn: Conn,
    prefix: String,
    policy: FencePolicy,
}

impl RedisFencedStore {
    /// A fenced store on the Redis at `url`, keys under `prefix`.
    pub fn connect(url: &str, prefix: &str) -> Result<Self, BackendError> {
        Self::connect_with(url, prefix, FencePolicy::Fenced, RedisOptions::default())
    }

    /// A store with the given policy; [`FencePolicy::AcceptAll`] is the unfenced negative control
    /// (a plain overwrite: the key keeps the last writer's token).
    pub fn connect_with(
        url: &str,
        prefix: &str,
        policy: FencePolicy,
        options: RedisOptions,
    ) -> Result<Self, BackendError> {
        validate_name("key prefix", prefix)?;
        Ok(RedisFencedStore {
            conn: Conn::open(url, options)?,
            prefix: prefix.to_string(),
            policy,
        })
    }

    fn key(&self, key: &str) -> Result<String, BackendError> {
        validate_name("key", key)?;
        Ok(format!("{}:{{{key}}}", self.prefix))
    }
}

impl FencedStorage for RedisFencedStore {
    async fn write(&self, key: &str, token: Token, value: &[u8]) -> WriteResult {
        let key = self.key(key)?;
        let policy = match self.policy {
            FencePolicy::Fenced => "fenced",
            FencePolicy::AcceptAll => "all",
        };
        let mut inv = FENCED_WRITE.key(key);
        inv.arg(token.get()).arg(value).arg(policy);
        let (stored, highest): (i64, String) = self.conn.run("fenced write", inv).await?;
        if stored == 1 {
            Ok(WriteOutcome::Accepted)
        } else {
            Ok(WriteOutcome::Stale(StaleWrite {
                token,
                highest: Token::new(parse_token("fenced write", &highest)?),
            }))
        }
    }

    async fn read(&self, key: &str) -> Result<Option<Stored>, BackendError> {
        let key = self.key(key)?;
        let script = Script::new(
            "return {redis.call('HGET', KEYS[1], 'token'), redis.call('HGET', KEYS[1], 'value')}",
        );
        let inv = script.key(key);
        let (token, value): (Option<String>, Option<Vec<u8>>) = self.conn.run("read", inv).await?;
        match token {
            None => Ok(None),
            Some(t) => Ok(Some(Stored {
                token: Token::new(parse_token("read", &t)?),
                value: value.unwrap_or_default(),
            })),
        }
    }
}

/// A Redis client error in one line; an answer that is not the Redis protocol at all (an HTTP or
/// TLS port, another service) says so rather than print the parser's complaints.
fn describe(e: &redis::RedisError) -> String {
    let text = e.to_string();
    if e.kind() == redis::ErrorKind::Parse || text.contains("Parse error") {
        return "the answer is not the Redis protocol (is this a Redis server's address? an HTTP \
                or TLS port answers like this)"
            .into();
    }
    super::contract::one_line(&text)
}
