//! A TCP proxy on 127.0.0.1 that can freeze: while frozen it keeps every connection open and
//! forwards nothing, so a client sees silence, not an error — a stalled network or a stopped
//! switch between a lock holder and its server.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// A freezable proxy to one upstream address; stops accepting when dropped (open connections end
/// when either side closes).
#[derive(Debug)]
pub struct FreezableProxy {
    addr: SocketAddr,
    frozen: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
}

impl FreezableProxy {
    /// A proxy on a free port of 127.0.0.1 forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let frozen = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicBool::new(false));
        let (f, c) = (Arc::clone(&frozen), Arc::clone(&closed));
        thread::spawn(move || {
            while !c.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        if let Ok(server) = TcpStream::connect(upstream) {
                            pump_both(client, server, &f);
                        }
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Ok(FreezableProxy {
            addr,
            frozen,
            closed,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding (bytes read from now on wait in the proxy).
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Forwards again, including what waited.
    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }
}

impl Drop for FreezableProxy {
    fn drop(&mut self) {
        self.thaw();
        self.closed.store(true, Ordering::Relaxed);
    }
}

fn pump_both(client: TcpStream, server: TcpStream, frozen: &Arc<AtomicBool>) {
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let (f1, f2) = (Arc::clone(frozen), Arc::clone(frozen));
    thread::spawn(move || pump(client, server, &f1));
    thread::spawn(move || pump(s2, c2, &f2));
}

/// Copies `from` to `to`, holding every chunk while frozen.
fn pump(mut from: TcpStream, mut to: TcpStream, frozen: &AtomicBool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(1));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
