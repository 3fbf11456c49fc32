//! A node's durable Raft state: its vote and its log in files under the node's directory (each
//! written and `fsync`ed before openraft is told it is stored), and the [`Machine`] in memory,
//! rebuilt after a restart by applying the log again.

use super::machine::{Machine, Reply};
use super::TypeConfig;
use openraft::storage::{LogState, RaftLogReader, RaftSnapshotBuilder, RaftStorage, Snapshot};
use openraft::{
    Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership, Vote,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Cursor, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

type NodeId = u64;
type Node = openraft::BasicNode;

/// One line of the log file.
#[derive(Serialize, Deserialize)]
enum Record {
    /// An appended entry.
    Entry(Entry<TypeConfig>),
    /// Entries from this index on were removed (a conflicting suffix).
    TruncateFrom(u64),
    /// Entries up to and including this log id were purged.
    PurgeUpto(LogId<NodeId>),
}

/// A node's Raft storage (openraft's [`RaftStorage`]), shared between its log and state machine
/// halves.
#[derive(Clone)]
pub struct DiskStore {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    /// The directory's lock, held while the store is open (see [`lock_dir`]).
    _lock: File,
    dir: PathBuf,
    log_file: File,
    vote: Option<Vote<NodeId>>,
    log: BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<NodeId>>,
    machine: Machine,
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Node>,
    snapshot: Option<(SnapshotMeta<NodeId, Node>, Vec<u8>)>,
    snapshots_built: u64,
}

fn io_err(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    e: impl ToString,
) -> StorageError<NodeId> {
    StorageError::IO {
        source: StorageIOError::new(subject, verb, openraft::AnyError::error(e.to_string())),
    }
}

/// Why a node's storage could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process holds the directory: two nodes on one directory would both append to
    /// one log and vote twice.
    #[error(
        "{dir} is in use by another raft-node (pid {pid}); each node needs a directory of its own"
    )]
    InUse {
        /// The directory.
        dir: String,
        /// The holder's pid, as it wrote it.
        pid: String,
    },
    /// The log repeats an entry, goes backwards or skips: written by two nodes at once, or
    /// damaged. Replaying it would rebuild a state no cluster agreed on.
    #[error("{path} line {line}: {problem}; refusing to start on it")]
    BadLog {
        /// The log file.
        path: String,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// The directory or its files could not be read or written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Holds `dir` for this process: an exclusive `flock` on `dir/LOCK`, with this process's pid
/// written in it, kept until the returned file is closed (the kernel drops it when the process
/// ends, however it ends).
fn lock_dir(dir: &Path) -> Result<File, OpenError> {
    use std::os::unix::io::AsRawFd;
    let path = dir.join("LOCK");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)?;
    // SAFETY: flock on a descriptor this function owns and keeps open.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e.into());
        }
        let pid = std::fs::read_to_string(&path).unwrap_or_default();
        return Err(OpenError::InUse {
            dir: dir.display().to_string(),
            pid: match pid.trim() {
                "" => "unknown".into(),
                pid => pid.into(),
            },
        });
    }
    file.set_len(0)?;
    file.write_all(format!("{}\n", std::process::id()).as_bytes())?;
    file.sync_data()?;
    Ok(file)
}

/// Checks that `entry` may follow the log as it stands: the next index (after the last entry,
/// or after the purged prefix), in a term no lower than the last entry's.
fn follows(
    log: &BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<NodeId>>,
    entry: &Entry<TypeConfig>,
) -> Result<(), String> {
    let last = log.last_key_value().map(|(_, e)| e.log_id).or(last_purged);
    let Some(last) = last else {
        return Ok(());
    };
    let index = entry.log_id.index;
    if index <= last.index {
        return Err(format!(
            "entry {index} repeats or goes back (the log already reaches {})",
            last.index
        ));
    }
    if index != last.index + 1 {
        return Err(format!("entry {index} leaves a gap after {}", last.index));
    }
    let (term, before) = (entry.log_id.leader_id.term, last.leader_id.term);
    if term < before {
        return Err(format!(
            "entry {index} is of term {term}, below the term {before} of the entry before it"
        ));
    }
    Ok(())
}

impl DiskStore {
    /// Opens (or creates) the storage in `dir`, holding the directory for this process and
    /// replaying the log file. A last line cut short by a crash (an append never acknowledged) is
    /// dropped; a log whose entries repeat, go backwards or skip is refused.
    pub fn open(dir: &Path) -> Result<Self, OpenError> {
        std::fs::create_dir_all(dir)?;
        let lock = lock_dir(dir)?;
        let vote = match std::fs::read(dir.join("vote.json")) {
            Ok(bytes) => Some(serde_json::from_slice(&bytes).map_err(std::io::Error::other)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        let path = dir.join("log.jsonl");
        let mut log = BTreeMap::new();
        let mut last_purged = None;
        let mut good_len = 0u64;
        if let Ok(file) = File::open(&path) {
            let mut reader = BufReader::new(file);
            let mut line = String::new();
            let mut number = 0;
            loop {
                number += 1;
                line.clear();
                let n = reader.read_line(&mut line)?;
                if n == 0 || !line.ends_with('\n') {
                    break;
                }
                let Ok(record) = serde_json::from_str::<Record>(&line) else {
                    break;
                };
                good_len += n as u64;
                match record {
                    Record::Entry(e) => {
                        follows(&log, last_purged, &e).map_err(|problem| OpenError::BadLog {
                            path: path.display().to_string(),
                            line: number,
                            problem,
                        })?;
                        log.insert(e.log_id.index, e);
                    }
                    Record::TruncateFrom(index) => {
                        log.split_off(&index);
                    }
                    Record::PurgeUpto(id) => {
                        log = log.split_off(&(id.index + 1));
                        last_purged = Some(id);
                    }
                }
            }
        }
        let log_file = OpenOptions::new().create(true).append(true).open(&path)?;
        log_file.set_len(good_len)?;
        Ok(DiskStore {
            inner: Arc::new(Mutex::new(Inner {
                _lock: lock,
                dir: dir.to_path_buf(),
                log_file,
                vote,
                log,
                last_purged,
                machine: Machine::new(),
                last_applied: None,
                membership: StoredMembership::default(),
                snapshot: None,
                snapshots_built: 0,
            })),
        })
    }

    /// Whether nothing was ever stored here (no vote, no log): a node that may initialize a
    /// cluster.
    pub fn is_fresh(&self) -> bool {
        let inner = self.inner.lock();
        inner.vote.is_none() && inner.log.is_empty() && inner.last_purged.is_none()
    }
}

impl Inner {
    /// Appends `records` to the log file and waits until they are on disk.
    fn write_records(&mut self, records: &[Record]) -> std::io::Result<()> {
        let mut buf = Vec::new();
        for r in records {
            serde_json::to_writer(&mut buf, r).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        self.log_file.write_all(&buf)?;
        self.log_file.sync_data()
    }
}

impl RaftLogReader<TypeConfig> for DiskStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let inner = self.inner.lock();
        Ok(inner.log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for DiskStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let mut inner = self.inner.lock();
        let data = serde_json::to_vec(&inner.machine)
            .map_err(|e| io_err(ErrorSubject::StateMachine, ErrorVerb::Read, e))?;
        inner.snapshots_built += 1;
        let meta = SnapshotMeta {
            last_log_id: inner.last_applied,
            last_membership: inner.membership.clone(),
            snapshot_id: format!(
                "{}-{}",
                inner.last_applied.map_or(0, |id| id.index),
                inner.snapshots_built
            ),
        };
        inner.snapshot = Some((meta.clone(), data.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStorage<TypeConfig> for DiskStore {
    type LogReader = Self;
    type SnapshotBuilder = Self;

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock();
        let err = |e: std::io::Error| io_err(ErrorSubject::Vote, ErrorVerb::Write, e);
        let tmp = inner.dir.join("vote.json.tmp");
        let bytes = serde_json::to_vec(vote)
            .map_err(std::io::Error::other)
            .map_err(err)?;
        let mut f = File::create(&tmp).map_err(err)?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .map_err(err)?;
        std::fs::rename(&tmp, inner.dir.join("vote.json")).map_err(err)?;
        File::open(&inner.dir)
            .and_then(|d| d.sync_all())
            .map_err(err)?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.inner.lock().vote)
    }

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let inner = self.inner.lock();
        let last = inner.log.values().next_back().map(|e| e.log_id);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last.or(inner.last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn append_to_log<I>(&mut self, entries: I) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
    {
        let mut inner = self.inner.lock();
        let entries: Vec<_> = entries.into_iter().collect();
        let records: Vec<_> = entries.iter().cloned().map(Record::Entry).collect();
        inner
            .write_records(&records)
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))?;
        for e in entries {
            inner.log.insert(e.log_id.index, e);
        }
        Ok(())
    }

    async fn delete_conflict_logs_since(
        &mut self,
        log_id: LogId<NodeId>,
    ) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock();
        inner
            .write_records(&[Record::TruncateFrom(log_id.index)])
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))?;
        inner.log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge_logs_upto(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let mut inner = self.inner.lock();
        inner
            .write_records(&[Record::PurgeUpto(log_id)])
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))?;
        inner.log = inner.log.split_off(&(log_id.index + 1));
        inner.last_purged = Some(log_id);
        Ok(())
    }

    async fn last_applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, Node>), StorageError<NodeId>> {
        let inner = self.inner.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply_to_state_machine(
        &mut self,
        entries: &[Entry<TypeConfig>],
    ) -> Result<Vec<Reply>, StorageError<NodeId>> {
        let mut inner = self.inner.lock();
        let mut replies = Vec::with_capacity(entries.len());
        for e in entries {
            inner.last_applied = Some(e.log_id);
            replies.push(match &e.payload {
                EntryPayload::Blank => Reply::Nothing,
                EntryPayload::Normal(command) => inner.machine.apply(command),
                EntryPayload::Membership(m) => {
                    inner.membership = StoredMembership::new(Some(e.log_id), m.clone());
                    Reply::Nothing
                }
            });
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Node>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        let machine: Machine = serde_json::from_slice(&data).map_err(|e| {
            io_err(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Read,
                e,
            )
        })?;
        let mut inner = self.inner.lock();
        inner.machine = machine;
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        inner.snapshot = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let inner = self.inner.lock();
        Ok(inner.snapshot.as_ref().map(|(meta, data)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(data.clone())),
        }))
    }
}
