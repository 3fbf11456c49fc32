//! The stall nemesis's links: each worker reaches the lock service and the database through TCP
//! proxies of its own, which the nemesis freezes (connections stay open; bytes wait).

use super::CampaignError;
use crate::backend::LockSpec;
use fencecheck_testkit::FreezableProxy;
use std::net::ToSocketAddrs;

/// A worker's own TCP proxies to the lock service and the database (the stall nemesis freezes
/// them), and the addresses it is given.
pub(super) struct Links {
    proxies: Vec<FreezableProxy>,
    pub(super) spec: Option<LockSpec>,
    pub(super) pg_url: String,
}

impl Links {
    pub(super) fn new(spec: Option<&LockSpec>, pg_url: &str) -> Result<Links, CampaignError> {
        let mut proxies = Vec::new();
        let mut via = |host_port: &str| -> Result<String, CampaignError> {
            let upstream = host_port
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| {
                    CampaignError::Settings(format!(
                        "--nemesis stall: cannot resolve {host_port:?} to put a proxy before it"
                    ))
                })?;
            let proxy = FreezableProxy::start(upstream).map_err(|e| {
                CampaignError::Settings(format!("--nemesis stall: starting a proxy: {e}"))
            })?;
            let addr = proxy.addr().to_string();
            proxies.push(proxy);
            Ok(addr)
        };
        let spec = match spec {
            None => None,
            Some(LockSpec::Redis { url }) => Some(LockSpec::Redis {
                url: via_url(url, &mut via)?,
            }),
            Some(LockSpec::Etcd { endpoints }) => Some(LockSpec::Etcd {
                endpoints: endpoints
                    .iter()
                    .map(|e| via_url(e, &mut via))
                    .collect::<Result<_, _>>()?,
            }),
            Some(LockSpec::Zookeeper { connect }) => {
                let (hosts, chroot) = match connect.find('/') {
                    Some(k) => connect.split_at(k),
                    None => (connect.as_str(), ""),
                };
                let hosts: Vec<String> = hosts
                    .split(',')
                    .map(|h| via(h.trim()))
                    .collect::<Result<_, _>>()?;
                Some(LockSpec::Zookeeper {
                    connect: format!("{}{chroot}", hosts.join(",")),
                })
            }
            Some(LockSpec::Raft { nodes }) => Some(LockSpec::Raft {
                nodes: nodes.iter().map(|n| via(n)).collect::<Result<_, _>>()?,
            }),
        };
        let pg_url = if pg_url.contains("://") {
            via_url(pg_url, &mut via)?
        } else {
            via_keywords(pg_url, &mut via)?
        };
        Ok(Links {
            proxies,
            spec,
            pg_url,
        })
    }

    pub(super) fn freeze(&self) {
        self.proxies.iter().for_each(FreezableProxy::freeze);
    }

    pub(super) fn thaw(&self) {
        self.proxies.iter().for_each(FreezableProxy::thaw);
    }
}

/// `url` (`scheme://[user@]host:port[/rest]`) with its host and port replaced by `via`'s.
fn via_url(
    url: &str,
    via: &mut impl FnMut(&str) -> Result<String, CampaignError>,
) -> Result<String, CampaignError> {
    let bad = || {
        CampaignError::Settings(format!(
            "--nemesis stall: expected scheme://host:port in {url:?}"
        ))
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, host_port) = match authority.rfind('@') {
        Some(k) => authority.split_at(k + 1),
        None => ("", authority),
    };
    if !host_port.contains(':') {
        return Err(bad());
    }
    Ok(format!("{scheme}://{user}{}{tail}", via(host_port)?))
}

/// A PostgreSQL keyword connection string (`host=H port=P ...`) with its host and port replaced
/// by `via`'s.
fn via_keywords(
    conn: &str,
    via: &mut impl FnMut(&str) -> Result<String, CampaignError>,
) -> Result<String, CampaignError> {
    let words: Vec<&str> = conn.split_whitespace().collect();
    let get = |key: &str| {
        words
            .iter()
            .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
    };
    let host = get("host").unwrap_or("localhost");
    let port = get("port").unwrap_or("5432");
    let proxied = via(&format!("{host}:{port}"))?;
    let (h, p) = proxied.rsplit_once(':').expect("a socket address");
    let mut out: Vec<String> = words
        .iter()
        .filter(|w| !w.starts_with("host=") && !w.starts_with("port="))
        .map(|w| w.to_string())
        .collect();
    out.push(format!("host={h}"));
    out.push(format!("port={p}"));
    Ok(out.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_routed_through_a_proxy() {
        let mut seen = Vec::new();
        let mut via = |hp: &str| {
            seen.push(hp.to_string());
            Ok::<_, CampaignError>("127.0.0.1:9".to_string())
        };
        assert_eq!(
            via_url("redis://u:p@127.0.0.1:6379/2", &mut via).unwrap(),
            "redis://u:p@127.0.0.1:9/2"
        );
        assert_eq!(
            via_url("http://localhost:2379", &mut via).unwrap(),
            "http://127.0.0.1:9"
        );
        assert_eq!(
            via_keywords("host=127.0.0.1 port=5433 user=postgres", &mut via).unwrap(),
            "user=postgres host=127.0.0.1 port=9"
        );
        let err = via_url("redis-no-scheme", &mut via).unwrap_err();
        assert!(
            err.to_string().contains("expected scheme://host:port"),
            "{err}"
        );
        assert_eq!(seen, ["127.0.0.1:6379", "localhost:2379", "127.0.0.1:5433"]);
    }
}
