//! A TCP proxy on 127.0.0.1 that can freeze: while frozen it keeps every connection open and
//! forwards nothing, so a client sees silence, not an error — a stalled network or a stopped
//! switch between a lock holder and its server.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// A freezable proxy to one upstream address; stops accepting when dropped (open connections end
/// when either side closes).
#[derive(Debug)]
pub struct FreezableProxy {
    addr: SocketAddr,
    /// Client to server.
    frozen: Arc<AtomicBool>,
    /// Server to client.
    replies_frozen: Arc<AtomicBool>,
    /// Freeze the replies once a request carrying these bytes has been forwarded.
    trigger: Trigger,
    closed: Arc<AtomicBool>,
}

type Trigger = Arc<Mutex<Option<Vec<u8>>>>;

/// One direction of a connection.
struct Pump {
    frozen: Arc<AtomicBool>,
    /// Client to server only: the trigger, and the replies it freezes.
    trigger: Option<(Trigger, Arc<AtomicBool>)>,
}

impl FreezableProxy {
    /// A proxy on a free port of 127.0.0.1 forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let frozen = Arc::new(AtomicBool::new(false));
        let replies_frozen = Arc::new(AtomicBool::new(false));
        let trigger: Trigger = Arc::new(Mutex::new(None));
        let closed = Arc::new(AtomicBool::new(false));
        let (f, r, t, c) = (
            Arc::clone(&frozen),
            Arc::clone(&replies_frozen),
            Arc::clone(&trigger),
            Arc::clone(&closed),
        );
        thread::spawn(move || {
            while !c.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        if let Ok(server) = TcpStream::connect(upstream) {
                            pump_both(client, server, &f, &r, &t);
                        }
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Ok(FreezableProxy {
            addr,
            frozen,
            replies_frozen,
            trigger,
            closed,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding both ways (bytes read from now on wait in the proxy).
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
        self.replies_frozen.store(true, Ordering::SeqCst);
    }

    /// Stops forwarding the server's replies only: requests still arrive and take effect, the
    /// client hears nothing back (a reply lost or late).
    pub fn freeze_replies(&self) {
        self.replies_frozen.store(true, Ordering::SeqCst);
    }

    /// Freezes the server's replies once a request carrying `pattern` has been forwarded (for
    /// example the command that takes a lock): that request takes effect, its answer is held.
    pub fn freeze_replies_after(&self, pattern: &[u8]) {
        *self.trigger.lock().expect("poisoned") = Some(pattern.to_vec());
    }

    /// Whether the server's replies are held back now.
    pub fn replies_frozen(&self) -> bool {
        self.replies_frozen.load(Ordering::SeqCst)
    }

    /// Waits (up to 20 s) until the replies are held back — until the request armed with
    /// [`freeze_replies_after`](Self::freeze_replies_after) has passed — then holds them `for`
    /// longer and thaws: the reply comes `for` after its request, however slowly the client
    /// started. Returns whether the trigger fired.
    pub fn hold_replies_for(&self, held: Duration) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while !self.replies_frozen() {
            if std::time::Instant::now() >= until {
                return false;
            }
            thread::sleep(Duration::from_millis(1));
        }
        thread::sleep(held);
        self.thaw();
        true
    }

    /// Forwards again both ways, including what waited.
    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
        self.replies_frozen.store(false, Ordering::SeqCst);
    }
}

impl Drop for FreezableProxy {
    fn drop(&mut self) {
        self.thaw();
        self.closed.store(true, Ordering::Relaxed);
    }
}

fn pump_both(
    client: TcpStream,
    server: TcpStream,
    frozen: &Arc<AtomicBool>,
    replies_frozen: &Arc<AtomicBool>,
    trigger: &Trigger,
) {
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let requests = Pump {
        frozen: Arc::clone(frozen),
        trigger: Some((Arc::clone(trigger), Arc::clone(replies_frozen))),
    };
    let replies = Pump {
        frozen: Arc::clone(replies_frozen),
        trigger: None,
    };
    thread::spawn(move || requests.run(client, server));
    thread::spawn(move || replies.run(s2, c2));
}

impl Pump {
    /// Copies `from` to `to`, holding every chunk while frozen.
    fn run(&self, mut from: TcpStream, mut to: TcpStream) {
        let mut buf = [0u8; 16 * 1024];
        // The end of the bytes forwarded so far: a pattern split across two reads still matches.
        let mut seen: Vec<u8> = Vec::new();
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            while self.frozen.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(1));
            }
            // Freeze the replies before the request goes on, so its answer cannot slip through.
            if let Some((trigger, replies)) = &self.trigger {
                let mut armed = trigger.lock().expect("poisoned");
                seen.extend_from_slice(&buf[..n]);
                let hit = armed
                    .as_deref()
                    .is_some_and(|p| seen.windows(p.len()).any(|w| w == p));
                if hit {
                    replies.store(true, Ordering::SeqCst);
                    *armed = None;
                }
                let keep = armed.as_ref().map_or(0, |p| p.len().saturating_sub(1));
                seen.drain(..seen.len().saturating_sub(keep));
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    }
}

/// A listening address on 127.0.0.1 that never completes a handshake, as a partitioned or
/// powered-off host: its accept queue (backlog 0) is full, so the kernel drops every further SYN
/// and a connect times out (it is not refused). Closed when dropped.
#[derive(Debug)]
pub struct SilentListener {
    _socket: std::os::fd::OwnedFd,
    _filling: Vec<std::net::TcpStream>,
    addr: SocketAddr,
}

impl SilentListener {
    /// Binds a free port, fills its accept queue, and checks that a further connect times out.
    ///
    /// # Panics
    /// When a socket call fails, or a connect to it does not time out.
    pub fn start() -> Self {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket calls on a socket this function owns; `sa` outlives the calls.
        let (socket, port) = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let socket = std::os::fd::OwnedFd::from_raw_fd(fd);
            let mut sa: libc::sockaddr_in = std::mem::zeroed();
            sa.sin_family = libc::AF_INET as libc::sa_family_t;
            sa.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            assert_eq!(libc::bind(fd, std::ptr::addr_of!(sa).cast(), len), 0);
            assert_eq!(libc::listen(fd, 0), 0);
            let mut got = len;
            libc::getsockname(fd, std::ptr::addr_of_mut!(sa).cast(), &mut got);
            (socket, u16::from_be(sa.sin_port))
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let short = Duration::from_millis(200);
        let filling: Vec<_> = (0..3)
            .filter_map(|_| std::net::TcpStream::connect_timeout(&addr, short).ok())
            .collect();
        // The control: it is silent indeed (a connect times out, it is not refused).
        let probe = std::net::TcpStream::connect_timeout(&addr, short).unwrap_err();
        assert_eq!(probe.kind(), std::io::ErrorKind::TimedOut, "{probe}");
        SilentListener {
            _socket: socket,
            _filling: filling,
            addr,
        }
    }

    /// Its `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}
