//! ZooKeeper sessions: one per owner, opened on first use, closed when idle, and every request
//! bounded by the request timeout.

use super::{zk_err, ZkLock, ZkOptions, BACKEND};
use crate::backend::contract::{validate_name, BackendError};
use crate::sync::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use zookeeper_client::{Client, Error as ZkError};

/// An owner's session and the instant this process closes it unless the owner asks again.
pub(super) struct Session {
    pub(super) client: Client,
    pub(super) id: i64,
    pub(super) close_at: Instant,
}

pub(super) type Sessions = Mutex<HashMap<String, Session>>;

/// Checks a connect string: `HOST:PORT[,HOST:PORT...]`, no chroot.
pub(super) fn validate_connect(connect: &str) -> Result<(), BackendError> {
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
pub(super) async fn close_when_idle(sessions: Weak<Sessions>, owner: String, id: i64) {
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
    /// Opens a session. A server that accepts the TCP connection but does not answer (stopped,
    /// or not serving while the ensemble elects a leader) is left after a share of the connect
    /// bound; while every server refuses, they are tried again until the bound passes.
    pub(super) async fn open(
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
            let mut reconnect = crate::backend::retry::RECONNECT;
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
        let opened = crate::backend::contract::bounded_connect(
            BACKEND,
            connect.to_string(),
            options.connect_timeout,
            ToString::to_string,
            attempts,
        )
        .await;
        match opened {
            // "No hosts" says nothing of why: probe each server.
            Err(BackendError::Connect { target, source, .. })
                if source.as_deref().and_then(|e| e.downcast_ref::<ZkError>())
                    == Some(&ZkError::NoHosts) =>
            {
                let servers: Vec<String> = connect.split(',').map(str::to_string).collect();
                let bound = options.connect_timeout;
                let server = "a ZooKeeper server";
                let detail = crate::backend::probe::unreachable_because(&servers, bound, server);
                Err(BackendError::Connect {
                    backend: BACKEND,
                    target,
                    detail: detail.await,
                    source,
                })
            }
            other => other,
        }
    }

    /// Runs one request bounded by the request timeout. A read (`idempotent`) that lost its
    /// connection is sent again (the client reconnects to another server) until the bound.
    pub(super) async fn call<T, F, Fut>(
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
            let mut resend = crate::backend::retry::RESEND;
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
    /// pushed to a TTL from now: the send time of the request the caller makes next (taken once
    /// the session is open).
    pub(super) async fn session(
        &self,
        owner: &str,
    ) -> Result<(Client, i64, Instant), BackendError> {
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
        let client = Self::open(&self.connect, self.ttl.granted(), self.options).await?;
        // The server restarts a session's timeout on every request it receives: the caller's
        // next request, sent after now, keeps the session a TTL past now, however long opening
        // it took (a server restarting, an ensemble electing).
        let sent_at = Instant::now();
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
    pub(super) fn session_if(&self, owner: &str, id: i64) -> Option<(Client, Instant)> {
        let mut map = self.sessions.lock();
        let s = map.get_mut(owner).filter(|s| s.id == id)?;
        if s.client.state().is_terminated() {
            return None;
        }
        let now = Instant::now();
        s.close_at = s.close_at.max(now + self.ttl.granted());
        Some((s.client.clone(), now))
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
}
