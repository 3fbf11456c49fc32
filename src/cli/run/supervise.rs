//! Supervising the command's process group the way `tini` and `timeout(1)` do: it dies with the
//! supervisor (a watchdog kills the group if the supervisor is killed), signals go to the whole
//! group, and the supervisor exits with the command's status.

use std::process::ExitCode;
use std::time::{Duration, Instant};

/// In the command's process, before exec: die with the supervisor (SIGKILL when the thread that
/// forked it ends, which here is the supervisor's main thread), and do not start at all if the
/// supervisor is already gone.
pub(super) fn die_with(supervisor: u32) -> std::io::Result<()> {
    // SAFETY: prctl and getppid are async-signal-safe and touch no memory of ours.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() as u32 != supervisor {
            return Err(std::io::Error::other("the supervisor is gone"));
        }
    }
    Ok(())
}

/// In the command's process, before exec: writes its PID (its process group, from
/// `process_group(0)`) to the watchdog's pipe as one decimal line. One `write` of at most 21
/// bytes to a pipe is atomic.
pub(super) fn tell_watchdog(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: getpid is async-signal-safe.
    let (buf, len) = decimal_line(unsafe { libc::getpid() } as u64);
    // SAFETY: write(2) from a stack buffer we own, to a descriptor the supervisor keeps open.
    let n = unsafe { libc::write(fd, buf[buf.len() - len..].as_ptr().cast(), len) };
    if n == len as isize {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `n` followed by a newline, right-aligned in a stack buffer (no allocation: this runs between
/// fork and exec), and its length.
fn decimal_line(mut n: u64) -> ([u8; 21], usize) {
    let mut buf = [0u8; 21];
    let mut at = buf.len() - 1;
    buf[at] = b'\n';
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    (buf, buf.len() - at)
}

/// Sends `sig` to the command's whole process group.
pub(super) fn signal_group(group: Option<libc::pid_t>, sig: i32) {
    if let Some(g) = group {
        // SAFETY: kill(2) on the process group our own child leads.
        unsafe { libc::kill(-g, sig) };
    }
}

/// Whether the command's process group still has members.
pub(super) fn group_alive(group: Option<libc::pid_t>) -> bool {
    // SAFETY: kill(2) with signal 0 only asks whether the group still has members.
    group.is_some_and(|g| unsafe { libc::kill(-g, 0) } == 0)
}

/// Waits until the command's process group is empty or `by`; then kills what is left and waits
/// (up to a second) for it to go.
pub(super) async fn end_group(group: Option<libc::pid_t>, by: Instant) {
    while group_alive(group) && Instant::now() < by {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if !group_alive(group) {
        return;
    }
    signal_group(group, libc::SIGKILL);
    let until = Instant::now() + Duration::from_secs(1);
    while group_alive(group) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A process that kills the command's group when the supervisor dies however it dies (kill -9
/// included): it waits for the end of a pipe only the supervisor holds. PR_SET_PDEATHSIG reaches the
/// command itself; this reaches what the command started.
///
/// It is started before the command, and the command writes its process group to the pipe before
/// it execs, so it knows the group before any process of the group can exist. Started after the
/// command (as it once was), a supervisor killed in between left the command's children running.
pub(super) struct Watchdog {
    child: std::process::Child,
    pipe: std::os::fd::OwnedFd,
}

impl Watchdog {
    pub(super) fn start() -> std::io::Result<Self> {
        use std::os::fd::FromRawFd;
        use std::os::unix::process::CommandExt;
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two fds we then own; O_CLOEXEC keeps the write end out of every
        // process we start once it execs.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both fds were just created and are owned by nothing else.
        let (read, write) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        // The first line is the group; the end of the pipe is the supervisor's death. With no
        // group (the supervisor died before the command told it), there is nothing to kill.
        let child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .stdin(read)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            // Out of the terminal's group, so a Ctrl-C meant for the supervisor does not end it.
            .process_group(0)
            .spawn()?;
        Ok(Watchdog { child, pipe: write })
    }

    /// The pipe's write end, for the command to write its process group to before it execs.
    pub(super) fn report_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.pipe.as_raw_fd()
    }
}

/// The watchdog's shell: read the group, wait for the end of the pipe, kill the group.
const WATCHDOG_SCRIPT: &str =
    "read g; while read _; do :; done; case $g in [0-9]*) kill -9 -$g 2>/dev/null;; esac";

impl Drop for Watchdog {
    fn drop(&mut self) {
        // The supervisor is ending normally: stop the watchdog before the pipe closes, so it
        // never signals a process group number that may have been reused.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The terminating signals a supervisor passes on to the command's group instead of dying of them.
pub(super) struct Signals(Vec<(i32, tokio::signal::unix::Signal)>);

impl Signals {
    pub(super) fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let kinds = [
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGQUIT, SignalKind::quit()),
            (libc::SIGUSR1, SignalKind::user_defined1()),
            (libc::SIGUSR2, SignalKind::user_defined2()),
        ];
        Signals(
            kinds
                .into_iter()
                .filter_map(|(n, k)| signal(k).ok().map(|s| (n, s)))
                .collect(),
        )
    }

    /// The next signal received.
    pub(super) async fn next(&mut self) -> i32 {
        std::future::poll_fn(|cx| {
            for (n, s) in &mut self.0 {
                if s.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*n);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

pub(super) fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}

#[cfg(test)]
impl Watchdog {
    /// What a killed supervisor leaves: the pipe's write end closed with no orderly stop.
    fn supervisor_dies(self) -> std::process::Child {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: each field is read once and `this` is never dropped, so neither is freed twice.
        let (child, pipe) = unsafe { (std::ptr::read(&this.child), std::ptr::read(&this.pipe)) };
        drop(pipe);
        child
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;

    #[test]
    fn a_pid_is_written_as_one_decimal_line() {
        for n in [0u64, 7, 10, 4_194_304, u64::MAX] {
            let (buf, len) = decimal_line(n);
            assert_eq!(&buf[buf.len() - len..], format!("{n}\n").as_bytes());
        }
    }

    /// Starts `sh` in a group of its own with a background `sleep`, telling the watchdog its group
    /// from before exec when `tell`; returns the shell and the sleep's PID.
    fn group_with_a_background_job(w: &Watchdog, tell: bool) -> (std::process::Child, i32) {
        let fd = w.report_fd();
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .process_group(0);
        if tell {
            // SAFETY: tell_watchdog makes only async-signal-safe calls.
            unsafe { cmd.pre_exec(move || tell_watchdog(fd)) };
        }
        let mut sh = cmd.spawn().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(sh.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (sh, line.trim().parse().unwrap())
    }

    fn alive(pid: i32) -> bool {
        // SAFETY: kill(2) with signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    #[test]
    fn the_watchdog_kills_the_group_it_was_told_when_the_supervisor_dies() {
        let w = Watchdog::start().unwrap();
        let (mut sh, job) = group_with_a_background_job(&w, true);
        let status = w.supervisor_dies().wait().unwrap();
        assert!(status.success(), "the watchdog's shell: {status}");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(sh.wait().unwrap().signal(), Some(libc::SIGKILL));
        let until = Instant::now() + Duration::from_secs(2);
        while alive(job) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !alive(job),
            "the background job {job} outlived the supervisor"
        );
    }

    /// The control: a watchdog that was never told the group (a supervisor killed before it
    /// knew, the old order) kills nothing, and the background job lives on.
    #[test]
    fn a_watchdog_not_told_the_group_kills_nothing() {
        let w = Watchdog::start().unwrap();
        let (mut sh, job) = group_with_a_background_job(&w, false);
        w.supervisor_dies().wait().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let survived = alive(job);
        // SAFETY: kill(2) on the group of the shell this test started.
        unsafe { libc::kill(-(sh.id() as i32), libc::SIGKILL) };
        sh.wait().unwrap();
        assert!(
            survived,
            "the job {job} died without a watchdog that knew its group"
        );
    }
}
