//! The token floor `fencecheck run` keeps across runs: the highest fencing token any run on this
//! machine was granted for a lock, in a small file per lock service and name. A grant at or below
//! it means the lock service lost its token counter (a Redis restart without persistence, a
//! restored snapshot): the run refuses to start the command rather than hand out a token that
//! fenced storage may already have seen.

use fencecheck::backend::LockSpec;
use fencecheck::protocol::Token;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// One lock's floor file.
pub(super) struct TokenFloor {
    path: PathBuf,
}

/// Why a grant was not admitted.
pub(super) enum FloorError {
    /// The token is not above the floor.
    Regressed {
        /// The floor.
        floor: u64,
    },
    /// The file could not be read or written.
    Io(String),
}

/// The directory floors live in when none is given: `$XDG_STATE_HOME/fencecheck`, else
/// `$HOME/.local/state/fencecheck`.
pub(super) fn default_dir() -> Option<PathBuf> {
    let nonempty = |v: &str| {
        std::env::var_os(v)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    };
    nonempty("XDG_STATE_HOME")
        .or_else(|| nonempty("HOME").map(|h| h.join(".local/state")))
        .map(|d| d.join("fencecheck"))
}

impl TokenFloor {
    /// The floor of lock `name` on the service at `spec` (however it is spelt), in `dir`.
    pub(super) fn new(dir: &Path, spec: &LockSpec, name: &str) -> Self {
        // The service's identity, not its spelling: aliases of one server share a floor.
        let key = format!("{}\n{}\n{name}", spec.backend(), spec.identity());
        let readable: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let file = format!("{}-{readable}-{:016x}.token", spec.backend(), fnv1a(&key));
        TokenFloor {
            path: dir.join(file),
        }
    }

    /// The file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Admits `token` if it is above the floor and raises the floor to it, under an exclusive
    /// lock on the file (runs on this machine do not race).
    pub(super) fn admit(&self, token: Token) -> Result<(), FloorError> {
        let io = |what: &str, e: std::io::Error| {
            FloorError::Io(format!("{what} {}: {e}", self.path.display()))
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("cannot create the directory of", e))?;
        }
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(|e| io("cannot open", e))?;
        // SAFETY: flock on a file descriptor this function owns; released when `file` closes.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io("cannot lock", std::io::Error::last_os_error()));
        }
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|e| io("cannot read", e))?;
        let floor = match text.trim() {
            "" => 0,
            t => t.parse::<u64>().map_err(|_| {
                FloorError::Io(format!(
                    "{} holds {t:?}, not a token; remove it to start the floor again",
                    self.path.display()
                ))
            })?,
        };
        if token.get() <= floor {
            return Err(FloorError::Regressed { floor });
        }
        file.set_len(0).map_err(|e| io("cannot write", e))?;
        file.seek(SeekFrom::Start(0))
            .map_err(|e| io("cannot write", e))?;
        writeln!(file, "{}", token.get()).map_err(|e| io("cannot write", e))?;
        file.sync_data().map_err(|e| io("cannot write", e))?;
        Ok(())
    }
}

/// FNV-1a, 64 bits: a file name that stays the same across builds (std's hasher does not promise
/// that).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fencecheck-floor-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_floor_rises_and_refuses_a_token_at_or_below_it() {
        let dir = scratch("rise");
        let spec = LockSpec::Redis {
            url: "redis://127.0.0.1:6379".into(),
        };
        let floor = TokenFloor::new(&dir, &spec, "nightly/report");
        assert!(floor.admit(Token::new(3)).is_ok());
        assert!(floor.admit(Token::new(5)).is_ok());
        for t in [5, 1] {
            assert!(matches!(
                floor.admit(Token::new(t)),
                Err(FloorError::Regressed { floor: 5 })
            ));
        }
        // Another name, or the same name on another server, has a floor of its own.
        assert!(TokenFloor::new(&dir, &spec, "other")
            .admit(Token::new(1))
            .is_ok());
        let elsewhere = LockSpec::Redis {
            url: "redis://127.0.0.1:6380".into(),
        };
        assert!(TokenFloor::new(&dir, &elsewhere, "nightly/report")
            .admit(Token::new(1))
            .is_ok());
        let name = floor
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(name.starts_with("redis-nightly_report-"), "{name}");
        std::fs::write(floor.path(), "garbage\n").unwrap();
        assert!(matches!(
            floor.admit(Token::new(9)),
            Err(FloorError::Io(e)) if e.contains("not a token")
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
