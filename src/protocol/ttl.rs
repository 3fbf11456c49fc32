//! A lease's time to live: checked once for every caller (the command line, the in-process lock,
//! every backend), and recording what the server grants.
//!
//! Backends count time differently: the in-process lock in nanoseconds, Redis in milliseconds
//! (`PX`), etcd in whole seconds, ZooKeeper as a session timeout the server clamps to its own
//! bounds. A holder must count its lease with the TTL the *server* uses, so each backend turns the
//! asked-for TTL into the one it grants here, and every grant a backend hands out carries that one.

use std::fmt;
use std::time::Duration;

/// The longest lease any backend accepts: a lease meant to outlive a crash by more than a day is a
/// configuration mistake.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A TTL outside what a lease accepts. Its message names the value and what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TtlError {
    /// Shorter than 1 ms.
    #[error("{0:?} is shorter than 1 ms; a lease needs a positive TTL such as 30s")]
    TooShort(Duration),
    /// Longer than [`MAX_TTL`].
    #[error("{0:?} is longer than the 24 h maximum; a crashed holder would block that long")]
    TooLong(Duration),
}

/// A lease time to live: what was asked for (at least 1 ms, at most [`MAX_TTL`]) and what the
/// backend grants for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ttl {
    asked: Duration,
    granted: Duration,
}

impl Ttl {
    /// Checks `asked`: at least 1 ms (a lease needs a positive TTL), at most [`MAX_TTL`] (a
    /// crashed holder would block longer than a day). Granted as asked until a backend says
    /// otherwise.
    pub fn new(asked: Duration) -> Result<Ttl, TtlError> {
        if asked < Duration::from_millis(1) {
            return Err(TtlError::TooShort(asked));
        }
        if asked > MAX_TTL {
            return Err(TtlError::TooLong(asked));
        }
        Ok(Ttl {
            asked,
            granted: asked,
        })
    }

    /// The TTL that was asked for.
    pub fn asked(self) -> Duration {
        self.asked
    }

    /// The TTL the backend grants: what a holder counts its lease with.
    pub fn granted(self) -> Duration {
        self.granted
    }

    /// Whether the backend grants something other than what was asked.
    pub fn adjusted(self) -> bool {
        self.asked != self.granted
    }

    /// The TTL as granted by a server that counts in whole `unit`s: the asked TTL rounded up to
    /// a whole number of them, at least one (never shorter than asked, so the holder's count
    /// never outlasts the server's).
    pub fn in_units_of(self, unit: Duration) -> Ttl {
        let units = self.asked.as_nanos().div_ceil(unit.as_nanos()).max(1);
        // At most MAX_TTL (a day) in units of at least 1 ms: far inside u32.
        let units = u32::try_from(units).unwrap_or(u32::MAX);
        self.granted_as(unit.saturating_mul(units))
    }

    /// The number of whole `unit`s granted (after [`in_units_of`](Self::in_units_of)).
    pub fn granted_units(self, unit: Duration) -> u64 {
        u64::try_from(self.granted.as_nanos() / unit.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records what the server granted (ZooKeeper's negotiated session timeout).
    pub fn granted_as(self, granted: Duration) -> Ttl {
        Ttl { granted, ..self }
    }
}

impl fmt::Display for Ttl {
    /// The granted TTL, with the asked one when the backend changed it: `2s (asked 1.5s)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.granted)?;
        if self.adjusted() {
            write!(f, " (asked {:?})", self.asked)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_longest_lease_is_a_day() {
        assert_eq!(MAX_TTL, Duration::from_secs(86_400));
        assert!(Ttl::new(Duration::from_secs(23 * 3600)).is_ok());
        assert!(Ttl::new(Duration::from_secs(25 * 3600)).is_err());
    }

    #[test]
    fn bounds_are_checked_once_for_every_backend() {
        assert!(Ttl::new(Duration::ZERO)
            .unwrap_err()
            .to_string()
            .contains("shorter than 1 ms"));
        assert!(Ttl::new(Duration::from_micros(999)).is_err());
        assert!(Ttl::new(ms(1)).is_ok());
        assert!(Ttl::new(MAX_TTL).is_ok());
        assert!(Ttl::new(MAX_TTL + ms(1))
            .unwrap_err()
            .to_string()
            .contains("24 h"));
    }

    #[test]
    fn a_server_counting_whole_units_grants_at_least_what_was_asked() {
        let secs = Duration::from_secs(1);
        let t = Ttl::new(ms(1500)).unwrap().in_units_of(secs);
        assert_eq!((t.asked(), t.granted()), (ms(1500), ms(2000)));
        assert_eq!(t.granted_units(secs), 2);
        assert!(t.adjusted());
        assert_eq!(t.to_string(), "2s (asked 1.5s)");
        let t = Ttl::new(ms(5)).unwrap().in_units_of(secs);
        assert_eq!(t.granted(), secs);
        let t = Ttl::new(ms(3000)).unwrap().in_units_of(secs);
        assert!(!t.adjusted());
        assert_eq!(t.to_string(), "3s");
        // Milliseconds (Redis PX): a fraction of a millisecond is rounded up, not dropped.
        let t = Ttl::new(Duration::from_micros(1500))
            .unwrap()
            .in_units_of(ms(1));
        assert_eq!((t.granted(), t.granted_units(ms(1))), (ms(2), 2));
        let t = Ttl::new(MAX_TTL).unwrap().in_units_of(ms(1));
        assert_eq!(t.granted(), MAX_TTL);
    }

    #[test]
    fn a_granted_ttl_is_recorded_beside_the_asked_one() {
        let t = Ttl::new(ms(1000)).unwrap().granted_as(ms(4000));
        assert_eq!((t.asked(), t.granted()), (ms(1000), ms(4000)));
        assert_eq!(t.to_string(), "4s (asked 1s)");
    }
}
