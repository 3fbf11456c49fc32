//! A lock-and-write worker driven line by line on stdin: the process the pause trials
//! (`tests/pause.rs`) start, SIGSTOP and SIGCONT. It is a test driver, kept out of the shipped
//! `fencecheck` binary; `cargo test` builds it.
//!
//! Commands, one a line, each answered with one line: `acquire` -> `GRANTED <token>` (waits up to
//! 30 s) · `write <value>` -> `ACCEPTED` or `REJECTED <highest>` (no lease check: the check
//! happened before the pause) · `write-if-held <value>` -> like `write`, or `LOST <reason>` when
//! the safe deadline passed · `release` -> `RELEASED <true|false>` · EOF ends it.
//!
//! ```text
//! pause_worker --lock redis://127.0.0.1:6379 --pg-url postgres://... \
//!     --name L --ttl-ms 300 --owner A
//! ```

use fencecheck::backend::raft::{RaftFencedStore, RaftOptions};
use fencecheck::backend::{
    connect, hold, FencedStorage, KeepaliveOptions, LockService, LockSpec, PgFencedStore,
    WriteOutcome,
};
use fencecheck::protocol::FencePolicy;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

/// The worker's settings, from `--flag value` pairs.
struct Settings {
    spec: LockSpec,
    /// PostgreSQL; without it (raft only) the keys of the lock's own Raft group.
    pg_url: Option<String>,
    name: String,
    ttl: Duration,
    owner: String,
    key: String,
    table: String,
    unfenced: bool,
}

fn settings() -> Result<Settings, String> {
    let mut args = std::env::args().skip(1);
    let mut spec: Option<LockSpec> = None;
    let (mut pg_url, mut name, mut ttl, mut owner) = (None, None, None, None);
    let (mut key, mut table, mut unfenced) = ("data".to_string(), "fenced".to_string(), false);
    while let Some(flag) = args.next() {
        if flag == "--unfenced" {
            unfenced = true;
            continue;
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag}: expected a value after it"))?;
        match flag.as_str() {
            "--lock" => spec = Some(value.parse().map_err(|e| format!("--lock: {e}"))?),
            "--pg-url" => pg_url = Some(value),
            "--name" => name = Some(value),
            "--ttl-ms" => {
                let ms: u64 = value
                    .parse()
                    .map_err(|_| format!("--ttl-ms {value:?}: expected milliseconds"))?;
                ttl = Some(Duration::from_millis(ms));
            }
            "--owner" => owner = Some(value),
            "--key" => key = value,
            "--table" => table = value,
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    let spec = spec.ok_or("--lock SPEC is required (redis://, etcd://, zk:// or raft://)")?;
    if pg_url.is_none() && !matches!(spec, LockSpec::Raft { .. }) {
        return Err("--pg-url is required (only a raft:// lock has keys of its own)".into());
    }
    let need = |v: Option<String>, flag: &str| v.ok_or_else(|| format!("{flag} is required"));
    Ok(Settings {
        spec,
        pg_url,
        name: need(name, "--name")?,
        ttl: ttl.ok_or("--ttl-ms is required")?,
        owner: need(owner, "--owner")?,
        key,
        table,
        unfenced,
    })
}

/// Where the worker writes.
enum Store {
    Pg(PgFencedStore),
    Raft(RaftFencedStore),
}

impl Store {
    async fn write(
        &self,
        key: &str,
        token: fencecheck::protocol::Token,
        value: &[u8],
    ) -> Result<WriteOutcome, fencecheck::backend::BackendError> {
        match self {
            Store::Pg(s) => s.write(key, token, value).await,
            Store::Raft(s) => s.write(key, token, value).await,
        }
    }
}

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn serve(s: Settings) -> Result<(), String> {
    let fail = |e: fencecheck::backend::BackendError| format!("worker {}: {e}", s.owner);
    let lock = Arc::new(
        connect(&s.spec, &s.name, s.ttl, Duration::from_secs(2))
            .await
            .map_err(fail)?,
    );
    let policy = if s.unfenced {
        FencePolicy::AcceptAll
    } else {
        FencePolicy::Fenced
    };
    let store = match (&s.pg_url, &s.spec) {
        (Some(url), _) => Store::Pg(
            PgFencedStore::connect_with(url, &s.table, policy, Duration::from_secs(5))
                .await
                .map_err(fail)?,
        ),
        (None, LockSpec::Raft { nodes }) => Store::Raft(
            RaftFencedStore::connect(nodes, &s.table, policy, RaftOptions::default())
                .map_err(fail)?,
        ),
        (None, _) => unreachable!("settings() requires --pg-url off raft"),
    };
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut held = None;
    while let Ok(Some(line)) = lines.next_line().await {
        let (cmd, arg) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match cmd {
            "acquire" => match lock.acquire(&s.owner, Duration::from_secs(30)).await {
                Ok(Some(g)) => {
                    say(format!("GRANTED {}", g.token));
                    match hold(Arc::clone(&lock), g, KeepaliveOptions::default()) {
                        Ok(h) => held = Some(h),
                        Err(e) => say(format!("ERROR {e}")),
                    }
                }
                Ok(None) => say("BUSY".into()),
                Err(e) => say(format!("ERROR {e}")),
            },
            "write" | "write-if-held" => {
                let Some(h) = held.as_ref() else {
                    say("ERROR no lease".into());
                    continue;
                };
                if cmd == "write-if-held" {
                    if let Some(reason) = h.lost_reason() {
                        say(format!("LOST {reason}"));
                        continue;
                    }
                }
                match store.write(&s.key, h.token(), arg.as_bytes()).await {
                    Ok(WriteOutcome::Accepted) => say("ACCEPTED".into()),
                    Ok(WriteOutcome::Stale(st)) => say(format!("REJECTED {}", st.highest)),
                    Err(e) => say(format!("ERROR {e}")),
                }
            }
            "release" => match held.take() {
                Some(h) => match h.release().await {
                    Ok(done) => say(format!("RELEASED {done}")),
                    Err(e) => say(format!("ERROR {e}")),
                },
                None => say("RELEASED false".into()),
            },
            other => say(format!("ERROR unknown command {other:?}")),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let result = settings().and_then(|s| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?
            .block_on(serve(s))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pause_worker: {e}");
            ExitCode::from(2)
        }
    }
}
