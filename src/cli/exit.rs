//! The one table of exit statuses: the same number for the same cause in every command (the
//! README lists it).

use std::process::ExitCode;

/// Every check passed, or the command's work ran and exited 0.
pub(super) const OK: u8 = 0;
/// A check failed: a verdict differs from its declaration, a trace is not explained, a trial
/// broke a property.
pub(super) const CHECK_FAILED: u8 = 1;
/// Bad usage: one line on stderr names the input and what was expected.
pub(super) const USAGE: u8 = 2;
/// A lock service or server could not be used (unreachable, timed out, refused).
#[cfg_attr(not(feature = "backends"), allow(dead_code))]
pub(super) const UNAVAILABLE: u8 = 69;
/// The lock is held by someone else (and `--wait` did not get it).
#[cfg_attr(not(feature = "backends"), allow(dead_code))]
pub(super) const HELD_ELSEWHERE: u8 = 75;
/// The lease was lost while the command ran, and the command was stopped.
#[cfg_attr(not(feature = "backends"), allow(dead_code))]
pub(super) const LEASE_LOST: u8 = 76;
/// The lock service granted a token not above one granted before (its counter was lost); the
/// command was not run.
#[cfg_attr(not(feature = "backends"), allow(dead_code))]
pub(super) const TOKEN_RESET: u8 = 78;

/// Stopped by signal N (SIGINT, SIGTERM) after cleaning up: 128 + N, as a shell reports a
/// command the signal ended.
#[cfg_attr(not(feature = "backends"), allow(dead_code))]
pub(super) const INTERRUPTED_BASE: u8 = 128;

/// The status as a process exit code.
pub(super) fn code(status: u8) -> ExitCode {
    ExitCode::from(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_has_its_own_status() {
        let all = [
            OK,
            CHECK_FAILED,
            USAGE,
            UNAVAILABLE,
            HELD_ELSEWHERE,
            LEASE_LOST,
            TOKEN_RESET,
        ];
        for (i, a) in all.iter().enumerate() {
            assert!(!all[i + 1..].contains(a), "status {a} is used twice");
        }
    }
}
