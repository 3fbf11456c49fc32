//! `fencecheck raft-node`: one node of a fencecheck Raft cluster, the `raft` backend's server.

use super::{parse_duration, UsageError};
use clap::Args;
use fencecheck::raftdb::{serve, NodeError, NodeOptions};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Args)]
pub(super) struct RaftNodeArgs {
    /// This node's id, one of the ids in --members.
    #[arg(long, value_name = "N")]
    id: u64,
    /// Every member as ID=HOST:PORT, comma-separated (this node listens on its own entry), e.g.
    /// 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003.
    #[arg(long, value_name = "ID=HOST:PORT,...")]
    members: String,
    /// Where this node keeps its vote and log (created if missing). Reuse it after a restart:
    /// a node that forgets its vote can vote twice in one term.
    #[arg(long, value_name = "DIR")]
    dir: std::path::PathBuf,
    /// Make the cluster of --members if this node's DIR is empty (give it to one node, once).
    #[arg(long)]
    init: bool,
    /// The leader's heartbeat interval.
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = parse_duration)]
    heartbeat: Duration,
    /// The election timeout: a follower that hears no leader for a random time in
    /// [DURATION, 2 × DURATION) starts an election. Must exceed --heartbeat.
    #[arg(long, value_name = "DURATION", default_value = "300ms", value_parser = parse_duration)]
    election: Duration,
    /// A deliberately broken node for negative controls: forget the vote and the log at every
    /// start (storage that does not survive a crash).
    #[arg(long, hide = true)]
    forget_on_restart: bool,
}

/// The longest election timeout `raft-node` accepts.
const MAX_ELECTION: Duration = Duration::from_secs(600);

/// Parses `1=127.0.0.1:7001,2=127.0.0.1:7002`.
fn parse_members(text: &str) -> Result<BTreeMap<u64, String>, UsageError> {
    let mut members = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let parsed = item.split_once('=').and_then(|(id, addr)| {
            let id = id.trim().parse::<u64>().ok()?;
            let (_, port) = addr.trim().rsplit_once(':')?;
            port.parse::<u16>().ok().filter(|&p| p > 0)?;
            Some((id, addr.trim().to_string()))
        });
        let Some((id, addr)) = parsed else {
            return Err(UsageError(format!(
                "--members: {item:?} is not ID=HOST:PORT (such as 1=127.0.0.1:7001)"
            )));
        };
        if let Some((other, _)) = members.iter().find(|(_, a)| **a == addr) {
            return Err(UsageError(format!(
                "--members: ids {other} and {id} share {addr}; each member needs its own address"
            )));
        }
        if members.insert(id, addr).is_some() {
            return Err(UsageError(format!("--members: id {id} is given twice")));
        }
    }
    if members.is_empty() {
        return Err(UsageError(
            "--members is empty; expected ID=HOST:PORT,... such as 1=127.0.0.1:7001".into(),
        ));
    }
    Ok(members)
}

pub(super) fn run(args: RaftNodeArgs) -> Result<ExitCode, UsageError> {
    let members = parse_members(&args.members)?;
    if !members.contains_key(&args.id) {
        return Err(UsageError(format!(
            "--id {} is not among --members (ids {:?})",
            args.id,
            members.keys().collect::<Vec<_>>()
        )));
    }
    if args.heartbeat < Duration::from_millis(1) {
        return Err(UsageError(format!(
            "--heartbeat {:?}: expected at least 1ms",
            args.heartbeat
        )));
    }
    if args.election > MAX_ELECTION {
        return Err(UsageError(format!(
            "--election {:?}: expected at most {MAX_ELECTION:?} (a leader lost for longer leaves \
             the cluster unavailable for that long)",
            args.election
        )));
    }
    if args.election <= args.heartbeat {
        return Err(UsageError(format!(
            "--election {:?} must be longer than --heartbeat {:?}",
            args.election, args.heartbeat
        )));
    }
    if args.forget_on_restart {
        match std::fs::remove_dir_all(&args.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(UsageError(format!(
                    "--dir {}: cannot clear it: {e}",
                    args.dir.display()
                )))
            }
        }
    }
    let options = NodeOptions {
        id: args.id,
        members,
        dir: args.dir,
        init: args.init,
        heartbeat: args.heartbeat,
        election: args.election,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    match runtime.block_on(serve(options)) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e @ (NodeError::Refused(_) | NodeError::Invalid { .. })) => {
            Err(UsageError(e.to_string()))
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(super::exit::code(super::exit::UNAVAILABLE))
        }
    }
}
