//! Real network partitions, inside network namespaces this process makes and nothing else.
//!
//! [`make_private`] moves the calling thread (call it first, before any other thread starts, so
//! that every later thread and child inherits it) into a network namespace of its own: the
//! *switch*. It brings up its loopback, takes [`HUB`] as an address every node can reach, turns
//! on forwarding, and moves the kernel's `local` routing rule behind the partition rules. Each
//! [`Node`] is a further namespace, held open by a file descriptor (no process), wired to the
//! switch by a veth pair: node `i` is `10.200.i.2`, its gateway `10.200.i.1`. A process started
//! with [`Node::enter`] lives in it (a server or a worker); talks between nodes go through the
//! switch.
//!
//! [`Node::isolate`] adds two `blackhole` policy rules in the switch: every packet from the node
//! and every packet to it is dropped silently (senders see silence, not an error; TCP keeps
//! retransmitting), and [`Node::heal`] deletes them. Nothing is proxied.
//!
//! Clean-up needs no code: the switch is this process's own namespace, a node's namespace ends
//! when its descriptor is closed and its last process has exited, and a veth pair goes with
//! either end's namespace, so a killed process leaves nothing behind in the machine's network.

use std::ffi::CString;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// The switch's address every node reaches (a server left in the switch listens on it).
pub const HUB: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);

/// The priority of the partition rules, ahead of the `local` rule moved to [`LOCAL_PREF`].
const PARTITION_PREF: u32 = 100;
/// Where the `local` routing rule is moved, so that the partition rules also drop packets for
/// the switch's own addresses.
const LOCAL_PREF: u32 = 32000;

/// The switch's namespace (its inode), once [`make_private`] made it; 0 before.
static SWITCH: AtomicU64 = AtomicU64::new(0);

/// The calling thread's network namespace, as an inode number.
fn current_namespace() -> io::Result<u64> {
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}

/// Runs `ip ARGS` in the calling thread's network namespace; an error naming the command and
/// what `ip` said.
fn ip(args: &[&str]) -> io::Result<()> {
    ip_in(None, args)
}

fn ip_in(node: Option<&OwnedFd>, args: &[&str]) -> io::Result<()> {
    let mut cmd = Command::new("ip");
    cmd.args(args).stdin(Stdio::null());
    if let Some(fd) = node {
        enter_fd(&mut cmd, fd);
    }
    let out = cmd.output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("running `ip` (Debian: apt-get install iproute2): {e}"),
        )
    })?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "`ip {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// Makes `cmd`'s process join the namespace `fd` before it runs.
fn enter_fd(cmd: &mut Command, fd: &OwnedFd) {
    let raw = fd.as_raw_fd();
    // SAFETY: `setns` is async-signal-safe and touches only the child after fork; the
    // descriptor stays open in the parent until the child has exec'd.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(raw, libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Whether the calling thread is in the switch [`make_private`] made (not merely whether some
/// thread of this process made one).
pub fn in_switch() -> bool {
    let switch = SWITCH.load(Ordering::SeqCst);
    switch != 0 && current_namespace().is_ok_and(|ns| ns == switch)
}

/// Moves the calling thread into a new network namespace and makes it the switch (see the
/// module's documentation). Needs root (`CAP_SYS_ADMIN`) and `ip`. Threads and children started
/// later by this thread inherit the namespace; addresses outside it (a server on the machine's
/// 127.0.0.1) are out of reach from then on.
pub fn make_private() -> io::Result<()> {
    // SAFETY: unshare takes no pointers; it changes the calling thread's namespace only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("a network namespace of its own (unshare CLONE_NEWNET, needs root): {e}"),
        ));
    }
    ip(&["link", "set", "lo", "up"])?;
    ip(&["addr", "add", &format!("{HUB}/32"), "dev", "lo"])?;
    ip(&[
        "rule",
        "add",
        "pref",
        &LOCAL_PREF.to_string(),
        "lookup",
        "local",
    ])?;
    ip(&["rule", "del", "pref", "0"])?;
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
        .map_err(|e| io::Error::new(e.kind(), format!("turning on forwarding: {e}")))?;
    SWITCH.store(current_namespace()?, Ordering::SeqCst);
    Ok(())
}

/// A network namespace wired to the switch, at `10.200.INDEX.2`.
#[derive(Debug)]
pub struct Node {
    index: u8,
    fd: OwnedFd,
}

/// A new network namespace, held open by the descriptor returned; the calling thread stays
/// where it was.
fn new_namespace() -> io::Result<OwnedFd> {
    std::thread::spawn(|| -> io::Result<OwnedFd> {
        // SAFETY: unshare takes no pointers; it moves this short-lived thread only.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let path = CString::new("/proc/thread-self/ns/net").expect("no NUL");
        // SAFETY: a valid C string; the descriptor returned is owned below.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    })
    .join()
    .map_err(|_| io::Error::other("the thread making a namespace panicked"))?
}

impl Node {
    /// Makes node `index` (1 to 250): its namespace, its loopback, and its veth pair to the
    /// switch with addresses and a default route. Only after [`make_private`], so that nothing
    /// outside namespaces this process made is ever touched: the calling thread must be in the switch.
    pub fn create(index: u8) -> io::Result<Node> {
        if !in_switch() {
            return Err(io::Error::other(
                "a node is made from inside the switch: call netns::make_private first, on this \
                 thread or one that started it",
            ));
        }
        if !(1..=250).contains(&index) {
            return Err(io::Error::other(format!("node {index}: expected 1 to 250")));
        }
        let fd = new_namespace()?;
        let node = Node { index, fd };
        let (outer, inner) = (node.outer(), format!("n{index}"));
        ip(&[
            "link", "add", &outer, "type", "veth", "peer", "name", &inner,
        ])?;
        let path = format!("/proc/{}/fd/{}", std::process::id(), node.fd.as_raw_fd());
        ip(&["link", "set", &inner, "netns", &path])?;
        ip(&[
            "addr",
            "add",
            &format!("10.200.{index}.1/24"),
            "dev",
            &outer,
        ])?;
        ip(&["link", "set", &outer, "up"])?;
        let inside = |args: &[&str]| ip_in(Some(&node.fd), args);
        inside(&["link", "set", "lo", "up"])?;
        inside(&["addr", "add", &format!("{}/24", node.addr()), "dev", &inner])?;
        inside(&["link", "set", &inner, "up"])?;
        inside(&[
            "route",
            "add",
            "default",
            "via",
            &format!("10.200.{index}.1"),
        ])?;
        Ok(node)
    }

    /// The switch's end of the node's veth pair.
    fn outer(&self) -> String {
        format!("s{}", self.index)
    }

    /// The node's address, `10.200.INDEX.2`.
    pub fn addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 200, self.index, 2)
    }

    /// Makes `cmd` run inside this node (the descriptor must outlive the spawn).
    pub fn enter(&self, cmd: &mut Command) {
        enter_fd(cmd, &self.fd);
    }

    /// Runs `f` on a thread inside this node (its sockets are the node's) and returns its
    /// result.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> io::Result<T> {
        let raw = self.fd.as_raw_fd();
        std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: `raw` is this node's open descriptor; only this thread moves.
                if unsafe { libc::setns(raw, libc::CLONE_NEWNET) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(f())
            })
            .join()
            .map_err(|_| io::Error::other("a thread inside a node panicked"))?
        })
    }

    fn rules(&self, verb: &str) -> io::Result<()> {
        let pref = PARTITION_PREF.to_string();
        let outer = self.outer();
        ip(&["rule", verb, "pref", &pref, "iif", &outer, "blackhole"])?;
        let to = self.addr().to_string();
        ip(&["rule", verb, "pref", &pref, "to", &to, "blackhole"])
    }

    /// Cuts the node off: the switch drops every packet from it and to it.
    pub fn isolate(&self) -> io::Result<()> {
        self.rules("add")
    }

    /// Undoes [`Node::isolate`].
    pub fn heal(&self) -> io::Result<()> {
        self.rules("del")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // The namespace (and the veth pair with it) ends once the descriptor is closed and the
        // last process in it has exited; deleting the switch's end frees its name at once.
        let _ = ip(&["link", "del", &self.outer()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::Duration;

    /// Whether this TCP connect from `from` reaches `to` within 300 ms.
    fn reaches(from: &Node, to: SocketAddr) -> bool {
        from.run_in(move || TcpStream::connect_timeout(&to, Duration::from_millis(300)).is_ok())
            .expect("runs in the node")
    }

    /// Two nodes talk through the switch; isolating one drops its packets silently (a connect
    /// times out rather than being refused, an open connection hears nothing), healing brings
    /// them back, and dropping the nodes removes their links. Everything on this test's own
    /// thread, which alone moves into the switch.
    #[test]
    fn isolating_a_node_drops_its_packets_until_healed() {
        std::thread::spawn(|| {
            if let Err(e) = make_private() {
                assert!(!crate::servers_required(), "cannot make a switch: {e}");
                eprintln!("SKIPPED: no network namespaces here: {e}");
                return;
            }
            let (a, b) = (Node::create(1).unwrap(), Node::create(2).unwrap());
            let listener = a
                .run_in(|| TcpListener::bind((Ipv4Addr::UNSPECIFIED, 7000)).unwrap())
                .unwrap();
            let to = SocketAddr::from((a.addr(), 7000));
            assert!(reaches(&b, to), "before any partition");
            let mut open = b.run_in(move || TcpStream::connect(to).unwrap()).unwrap();
            let mine = open.local_addr().unwrap();
            let mut served = loop {
                let (conn, peer) = listener.accept().unwrap();
                if peer == mine {
                    break conn;
                }
            };
            a.isolate().unwrap();
            let refused_or_timed_out = b
                .run_in(move || TcpStream::connect_timeout(&to, Duration::from_millis(300)))
                .unwrap()
                .unwrap_err();
            assert_eq!(refused_or_timed_out.kind(), io::ErrorKind::TimedOut);
            served.write_all(b"x").unwrap();
            open.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let mut byte = [0u8; 1];
            let heard = open.read(&mut byte);
            assert!(heard.is_err(), "an isolated node's byte arrived: {heard:?}");
            a.heal().unwrap();
            assert!(reaches(&b, to), "after healing");
            open.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let held = open.read(&mut byte);
            assert_eq!(held.unwrap(), 1, "the held byte arrives once healed");
            b.isolate().unwrap();
            assert!(!reaches(&b, to), "isolating the client's node cuts it too");
            b.heal().unwrap();
            drop((a, b));
            assert!(
                ip(&["link", "show", "s1"]).is_err(),
                "the switch's end is gone"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_node_without_a_switch_is_refused() {
        assert!(!in_switch());
        let err = Node::create(3).unwrap_err();
        assert!(err.to_string().contains("make_private"), "{err}");
    }
}
