//! PostgreSQL fenced storage: a conditional upsert that stores a write only if its token is not
//! older than the row's, and a guard that fences any writes inside the caller's own transaction.

use super::contract::{
    validate_name, BackendError, FencedStorage, Stored, WriteOutcome, WriteResult,
};
use crate::protocol::{FencePolicy, StaleWrite, Token};
use std::future::Future;
use std::time::Duration;
use tokio_postgres::{Client, GenericClient, NoTls, Statement};

const BACKEND: &str = "postgres";

/// A PostgreSQL table `(key text primary key, token bigint, value bytea)` written only through the
/// fencing rule.
///
/// The write is one statement, so the check and the write cannot be separated by another writer:
///
/// ```sql
/// INSERT INTO t AS s (key, token, value) VALUES ($1, $2, $3)
/// ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value
/// WHERE s.token <= EXCLUDED.token
/// ```
///
/// No row written (the statement's row count is 0) means the stored token was newer: the write
/// is refused and the stored token is read back as the highest.
pub struct PgFencedStore {
    client: Client,
    table: String,
    policy: FencePolicy,
    timeout: Duration,
    write: Statement,
    read: Statement,
}

fn pg_err(operation: &'static str, e: tokio_postgres::Error) -> BackendError {
    // The crate's Display is just "db error"; the server's code and message are what help.
    let detail = match e.as_db_error() {
        Some(db) => format!("{} ({}): {}", db.severity(), db.code().code(), db.message()),
        None => e.to_string(),
    };
    BackendError::Server {
        backend: BACKEND,
        operation,
        detail,
        source: Some(Box::new(e)),
    }
}

/// `CREATE TABLE IF NOT EXISTS` is not atomic against itself: two sessions creating the same
/// table at once can fail with a unique violation on the catalog. Such a failure means the
/// table now exists.
fn created_concurrently(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code()
        .is_some_and(|c| *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_TABLE)
}

fn sql_token(token: Token) -> Result<i64, BackendError> {
    i64::try_from(token.get()).map_err(|_| {
        BackendError::invalid(
            "token",
            format!(
                "{token} does not fit PostgreSQL's bigint (at most {})",
                i64::MAX
            ),
        )
    })
}

/// Checks a table name: a plain SQL identifier (letters, digits, `_`, not starting with a digit).
fn validate_table(table: &str) -> Result<(), BackendError> {
    let ok = !table.is_empty()
        && table.len() <= 63
        && table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !table.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(BackendError::invalid(
            "table name",
            format!(
                "{table:?}; expected 1-63 ASCII letters, digits or _, not starting with a digit"
            ),
        ))
    }
}

impl PgFencedStore {
    /// Connects to `url` (`postgresql://USER@HOST:PORT/DB` or `host=.. port=.. user=..`), creates
    /// `table` if missing, and fences writes.
    pub async fn connect(url: &str, table: &str) -> Result<Self, BackendError> {
        Self::connect_with(url, table, FencePolicy::Fenced, Duration::from_secs(5)).await
    }

    /// [`connect`](Self::connect) with a policy ([`FencePolicy::AcceptAll`] is the unfenced
    /// negative control: a plain upsert; the row keeps the last writer's token) and a bound on
    /// every request.
    pub async fn connect_with(
        url: &str,
        table: &str,
        policy: FencePolicy,
        timeout: Duration,
    ) -> Result<Self, BackendError> {
        validate_table(table)?;
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            BackendError::invalid(
                "postgres url",
                format!("{url:?}: {e}; expected postgresql://USER@HOST:PORT/DB"),
            )
        })?;
        config.connect_timeout(timeout);
        let target = config
            .get_hosts()
            .iter()
            .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
            .map(|(h, p)| match h {
                tokio_postgres::config::Host::Tcp(h) => format!("{h}:{p}"),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .collect::<Vec<_>>()
            .join(",");
        let (client, connection) = super::contract::bounded_connect(
            BACKEND,
            target,
            timeout,
            ToString::to_string,
            config.connect(NoTls),
        )
        .await?;
        tokio::spawn(async move {
            // Ends when the client is dropped or the server goes away; errors surface on calls.
            let _ = connection.await;
        });
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {table} \
             (key text PRIMARY KEY, token bigint NOT NULL, value bytea NOT NULL)"
        );
        match tokio::time::timeout(timeout, client.batch_execute(&create)).await {
            Err(_) => {
                return Err(BackendError::Timeout {
                    backend: BACKEND,
                    operation: "create table",
                    after: timeout,
                })
            }
            Ok(Err(e)) if !created_concurrently(&e) => return Err(pg_err("create table", e)),
            Ok(_) => {}
        }
        let on_conflict = match policy {
            FencePolicy::Fenced => {
                "DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value \
                 WHERE s.token <= EXCLUDED.token"
            }
            FencePolicy::AcceptAll => {
                "DO UPDATE SET token = EXCLUDED.token, value = EXCLUDED.value"
            }
        };
        let write = bounded(
            "prepare",
            timeout,
            client.prepare(&format!(
                "INSERT INTO {table} AS s (key, token, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (key) {on_conflict}"
            )),
        )
        .await?;
        let read = bounded(
            "prepare",
            timeout,
            client.prepare(&format!("SELECT token, value FROM {table} WHERE key = $1")),
        )
        .await?;
        Ok(PgFencedStore {
            client,
            table: table.to_string(),
            policy,
            timeout,
            write,
            read,
        })
    }

    /// The table this store writes.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Fences the caller's own transaction: records `token` for `key` in this store's table if it
    /// is not older than the stored one, and holds that row's lock until the transaction ends, so
    /// a concurrent fenced transaction on the same key waits and then sees the newer token. On
    /// [`WriteOutcome::Stale`] roll the transaction back; on `Accepted` make the writes and
    /// commit.
    ///
    /// ```no_run
    /// # async fn demo(store: &fencecheck::backend::PgFencedStore, client: &mut tokio_postgres::Client,
    /// #               token: fencecheck::protocol::Token) -> Result<(), Box<dyn std::error::Error>> {
    /// let tx = client.transaction().await?;
    /// if store.fence(&tx, "ledger", token).await?.is_accepted() {
    ///     tx.execute("UPDATE ledger SET total = total + 1", &[]).await?;
    ///     tx.commit().await?;
    /// } // else: dropped, rolled back
    /// # Ok(()) }
    /// ```
    pub async fn fence<C: GenericClient + Sync>(
        &self,
        client: &C,
        key: &str,
        token: Token,
    ) -> WriteResult {
        validate_name("key", key)?;
        let t = sql_token(token)?;
        let sql = format!(
            "INSERT INTO {} AS s (key, token, value) VALUES ($1, $2, ''::bytea) \
             ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token \
             WHERE s.token <= EXCLUDED.token RETURNING token",
            self.table
        );
        let rows = bounded("fence", self.timeout, client.query(&sql, &[&key, &t])).await?;
        if !rows.is_empty() {
            return Ok(WriteOutcome::Accepted);
        }
        let row = bounded(
            "fence",
            self.timeout,
            client.query_one(
                &format!("SELECT token FROM {} WHERE key = $1", self.table),
                &[&key],
            ),
        )
        .await?;
        Ok(WriteOutcome::Stale(StaleWrite {
            token,
            highest: super::contract::server_token(BACKEND, "write", row.get::<_, i64>(0))?,
        }))
    }

    /// The policy this store applies.
    pub fn policy(&self) -> FencePolicy {
        self.policy
    }
}

async fn bounded<T>(
    operation: &'static str,
    timeout: Duration,
    f: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, BackendError> {
    tokio::time::timeout(timeout, f)
        .await
        .map_err(|_| BackendError::Timeout {
            backend: BACKEND,
            operation,
            after: timeout,
        })?
        .map_err(|e| pg_err(operation, e))
}

impl FencedStorage for PgFencedStore {
    async fn write(&self, key: &str, token: Token, value: &[u8]) -> WriteResult {
        validate_name("key", key)?;
        let t = sql_token(token)?;
        // The row count is 1 when the row was inserted or updated, 0 when the update's fencing
        // condition was false: no RETURNING row is needed to tell which.
        let written = bounded(
            "fenced write",
            self.timeout,
            self.client.execute(&self.write, &[&key, &t, &value]),
        )
        .await?;
        if written > 0 {
            return Ok(WriteOutcome::Accepted);
        }
        // Refused: the row's token is newer. It can only have grown since, so it is a true
        // highest at some point after our write was refused.
        let stored = self.read(key).await?;
        let highest = stored.map(|s| s.token).unwrap_or(token);
        Ok(WriteOutcome::Stale(StaleWrite { token, highest }))
    }

    async fn read(&self, key: &str) -> Result<Option<Stored>, BackendError> {
        validate_name("key", key)?;
        let rows = bounded("read", self.timeout, self.client.query(&self.read, &[&key])).await?;
        rows.first()
            .map(|row| {
                Ok(Stored {
                    token: super::contract::server_token(BACKEND, "read", row.get::<_, i64>(0))?,
                    value: row.get::<_, Vec<u8>>(1),
                })
            })
            .transpose()
    }
}
