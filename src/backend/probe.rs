//! Why a lock server cannot be reached, in words a user can act on. A client library often says
//! only "unavailable" or "no hosts"; each address is then probed with a plain TCP connect, its
//! host resolved first, and the answer names the cause: the host does not resolve (DNS), nothing
//! listens on the port (refused), or nothing answers at all (silent: a host down, packets
//! dropped, a server stopped).

use std::time::Duration;
use tokio::net::{lookup_host, TcpStream};

/// What a TCP connect to one address found.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reach {
    /// The host name did not resolve: the resolver's words.
    Unresolved(String),
    /// The connection was refused: nothing listens there.
    Refused,
    /// No answer within the bound.
    Silent(Duration),
    /// Another failure: its words.
    Failed(String),
    /// The connection was accepted: the server is there, the trouble is past the handshake.
    Accepted,
}

/// Probes `address` (`HOST:PORT`, an `http://` prefix allowed) within `within`.
async fn probe(address: &str, within: Duration) -> Reach {
    let address = address.trim_start_matches("http://");
    let resolved = match tokio::time::timeout(within, lookup_host(address)).await {
        Err(_) => return Reach::Silent(within),
        Ok(Err(e)) => return Reach::Unresolved(e.to_string()),
        Ok(Ok(addrs)) => addrs.collect::<Vec<_>>(),
    };
    let Some(first) = resolved.first() else {
        return Reach::Unresolved("no address".into());
    };
    match tokio::time::timeout(within, TcpStream::connect(first)).await {
        Err(_) => Reach::Silent(within),
        Ok(Ok(_)) => Reach::Accepted,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Reach::Refused,
        Ok(Err(e)) => Reach::Failed(e.to_string()),
    }
}

/// The longest a probe waits for an answer: it runs on the error path, after the request's own
/// bound has passed.
const AT_MOST: Duration = Duration::from_secs(1);

/// One line saying why none of `addresses` could be used, each probed at the same time within
/// `bound` (at most a second): `127.0.0.1:1: connection refused (nothing listens on that port);
/// ...`. `server` says what an accepted connection failed to be.
pub(crate) async fn unreachable_because(
    addresses: &[String],
    bound: Duration,
    server: &str,
) -> String {
    let within = bound.min(AT_MOST);
    let probes: Vec<_> = addresses
        .iter()
        .map(|a| {
            let a = a.clone();
            tokio::spawn(async move { probe(&a, within).await })
        })
        .collect();
    let mut found = Vec::with_capacity(probes.len());
    for p in probes {
        found.push(p.await.unwrap_or_else(|e| Reach::Failed(e.to_string())));
    }
    addresses
        .iter()
        .zip(found)
        .map(|(address, reach)| {
            let address = address.trim_start_matches("http://");
            let why = match reach {
                Reach::Unresolved(e) => format!("the host name does not resolve ({e})"),
                Reach::Refused => "connection refused (nothing listens on that port)".into(),
                Reach::Silent(d) => format!(
                    "no answer within {d:?} (the host is down, drops packets, or the server is \
                     stopped)"
                ),
                Reach::Failed(e) => e,
                Reach::Accepted => format!("accepts connections but did not answer as {server}"),
            };
            format!("{address}: {why}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_cause_is_named() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open = listener.local_addr().unwrap().to_string();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let within = Duration::from_secs(2);
        assert_eq!(probe(&open, within).await, Reach::Accepted);
        assert_eq!(probe(&closed, within).await, Reach::Refused);
        let unresolved = probe("no-such-host.invalid:2379", within).await;
        assert!(matches!(unresolved, Reach::Unresolved(_)), "{unresolved:?}");
        let line = unreachable_because(&[closed.clone(), open.clone()], within, "etcd").await;
        assert_eq!(
            line,
            format!(
                "{closed}: connection refused (nothing listens on that port); {open}: accepts \
                 connections but did not answer as etcd"
            )
        );
    }
}
