//! The faults a campaign injects, one per trial, and where each can strike.

use super::CampaignError;
use std::path::PathBuf;
use std::str::FromStr;

/// A fault of the campaign: one per trial, taking turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Nemesis {
    /// SIGSTOP a worker holding the lease (just granted, or between its read and its write)
    /// past its lease and past the moment its successor writes (the granted TTL, the longest
    /// busy poll, one think time, plus 20-200 ms), then SIGCONT.
    Pause,
    /// Cut a worker holding the lease off from the lock service and the database for as long
    /// as a pause lasts: each worker talks to both through TCP proxies of its own, and the
    /// holder's stop forwarding (connections stay open; bytes wait).
    Stall,
    /// kill -9 the lock server (a cluster's leader) while a worker holds the lease and start it
    /// again, the holder stopped (SIGSTOP) meanwhile and after the restart until a successor has
    /// sent its write (at most eight pauses): the restarted
    /// service must still know the lease, let it run out, and hand the successor a larger token.
    /// Only servers the campaign's caller started and can restart.
    KillServer,
    /// Cut the holder off from the lock service and the database, and the cluster's leader off
    /// from its peers and its clients (a minority of one), until a successor has sent its write
    /// (at most eight pauses); then heal. Every worker and cluster member runs in a network namespace of the campaign's own,
    /// wired to a switch that drops their packets (nothing is proxied; see
    /// `fencecheck_testkit::netns`). Only on clusters the campaign's caller starts in
    /// namespaces: etcd and Raft.
    Partition,
    /// Run one worker under libfaketime with every clock at a quarter speed: its timers
    /// (renewals, session pings, think time) fire four times late.
    ClockSkew,
}

impl Nemesis {
    /// Every nemesis, in the order `--nemesis` lists them.
    pub const ALL: [Nemesis; 5] = [
        Nemesis::Pause,
        Nemesis::Stall,
        Nemesis::KillServer,
        Nemesis::Partition,
        Nemesis::ClockSkew,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Nemesis::Pause => "pause",
            Nemesis::Stall => "stall",
            Nemesis::KillServer => "kill-server",
            Nemesis::Partition => "partition",
            Nemesis::ClockSkew => "clock-skew",
        }
    }

    /// Every name, for messages: `pause, stall, kill-server, partition, clock-skew`.
    pub fn names() -> String {
        let names: Vec<&str> = Nemesis::ALL.iter().map(|n| n.name()).collect();
        names.join(", ")
    }
}

impl FromStr for Nemesis {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Nemesis::ALL
            .into_iter()
            .find(|n| n.name() == text.trim())
            .ok_or_else(|| {
                format!(
                    "unknown nemesis {text:?}; expected one of {}",
                    Nemesis::names()
                )
            })
    }
}

/// The clock rate of a clock-skewed worker, as libfaketime's `FAKETIME` reads it.
pub const SKEW: &str = "+0 x0.25";

/// Where libfaketime's library is, if installed.
pub fn libfaketime() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
        "/usr/local/lib/faketime/libfaketimeMT.so.1",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// libfaketime when `nemeses` need it; an error naming the package when they do and it is
/// missing.
pub(super) fn faketime_for(nemeses: &[Nemesis]) -> Result<Option<PathBuf>, CampaignError> {
    if !nemeses.contains(&Nemesis::ClockSkew) {
        return Ok(None);
    }
    libfaketime().map(Some).ok_or_else(|| {
        CampaignError::Settings(
            "--nemesis clock-skew runs a worker under libfaketime, which is not installed \
             (Debian: apt-get install faketime)"
                .into(),
        )
    })
}

/// Which nemesis strikes trial `i` and at which worker line: `granted` (before the holder
/// writes) or `read` (inside its write), taking turns.
pub(super) fn for_trial(nemeses: &[Nemesis], i: u32) -> (Nemesis, &'static str) {
    let n = nemeses.len();
    let at = if (i as usize / n) % 2 == 0 {
        "granted"
    } else {
        "read"
    };
    (nemeses[i as usize % n], at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        for n in Nemesis::ALL {
            assert_eq!(n.name().parse::<Nemesis>(), Ok(n));
        }
        let err = "split-brain".parse::<Nemesis>().unwrap_err();
        assert!(err.contains("expected one of pause, stall"), "{err}");
    }

    #[test]
    fn each_nemesis_strikes_before_and_inside_a_write_by_turns() {
        let both = [Nemesis::Pause, Nemesis::Stall];
        let turns: Vec<_> = (0..5).map(|i| for_trial(&both, i)).collect();
        assert_eq!(
            turns,
            [
                (Nemesis::Pause, "granted"),
                (Nemesis::Stall, "granted"),
                (Nemesis::Pause, "read"),
                (Nemesis::Stall, "read"),
                (Nemesis::Pause, "granted"),
            ]
        );
    }
}
