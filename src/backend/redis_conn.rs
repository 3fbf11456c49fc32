//! A Redis connection of one client's own: one request at a time, written and answered on the
//! caller's task.
//!
//! The `redis` crate's multiplexed connection hands every request to a driver task over a channel
//! and the reply back over another; on a lock, whose requests are sequential round trips anyway,
//! that hop costs more than fencecheck's own code (see `benches/redis.rs`). This connection keeps
//! the crate's command encoding, reply parser and script handling (it implements
//! [`redis::aio::ConnectionLike`]) and owns only the socket and the framing of replies.
//!
//! A request whose future is dropped before its reply was read (a caller's timeout) leaves the
//! connection [`interrupted`](Dedicated::interrupted): the reply may still arrive, and the next
//! request would read it as its own. The owner must then throw the connection away, as it must
//! after any error.

use redis::aio::ConnectionLike;
use redis::{Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline, RedisError, RedisFuture};
use redis::{RedisResult, Value};
use std::io;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// One connection, one request at a time; see the module documentation.
pub(crate) struct Dedicated {
    stream: Stream,
    /// Bytes read and not yet consumed as a reply.
    buf: Vec<u8>,
    /// True from a request's first write until its last reply was read whole.
    in_flight: bool,
    response_timeout: Duration,
    db: i64,
}

impl Dedicated {
    /// Connects to `info`'s address and runs its handshake: `AUTH` when it names a password,
    /// `SELECT` for a database other than 0, then `PING`, so that an address that is not a Redis
    /// server fails here rather than on the first request. Not bounded in time: the caller bounds it.
    pub(crate) async fn connect(
        info: &ConnectionInfo,
        response_timeout: Duration,
    ) -> RedisResult<Self> {
        let stream = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                let s = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
            ConnectionAddr::Unix(path) => {
                Stream::Unix(tokio::net::UnixStream::connect(path).await?)
            }
            other => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "unsupported address",
                    format!("{other}: expected redis://HOST:PORT or redis+unix://PATH"),
                )))
            }
        };
        let settings = info.redis_settings();
        let mut conn = Dedicated {
            stream,
            buf: Vec::with_capacity(512),
            in_flight: false,
            response_timeout,
            db: settings.db(),
        };
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            auth.query_async::<()>(&mut conn).await?;
        }
        if settings.db() != 0 {
            redis::cmd("SELECT")
                .arg(settings.db())
                .query_async::<()>(&mut conn)
                .await?;
        }
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok(conn)
    }

    /// Whether a request was cut off before its reply was read whole: the connection must not
    /// be used again.
    pub(crate) fn interrupted(&self) -> bool {
        self.in_flight
    }

    /// Writes `request` and reads `skip + count` replies, returning the last `count`.
    async fn exchange(
        &mut self,
        request: &[u8],
        skip: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        if self.in_flight {
            return Err(RedisError::from(io::Error::new(
                io::ErrorKind::NotConnected,
                "an earlier request on this connection was cut off before its reply",
            )));
        }
        self.in_flight = true;
        let bound = self.response_timeout;
        let replies = tokio::time::timeout(bound, async {
            match &mut self.stream {
                Stream::Tcp(s) => s.write_all(request).await?,
                Stream::Unix(s) => s.write_all(request).await?,
            }
            let mut replies = Vec::with_capacity(count);
            for i in 0..skip + count {
                let value = self.read_reply().await?;
                if i >= skip {
                    replies.push(value);
                }
            }
            Ok::<_, RedisError>(replies)
        })
        .await
        .map_err(|_| {
            RedisError::from(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no reply within {bound:?}"),
            ))
        })??;
        self.in_flight = false;
        Ok(replies)
    }

    /// Reads until the buffer holds one whole reply, then parses and consumes it.
    async fn read_reply(&mut self) -> RedisResult<Value> {
        loop {
            if let Some(end) = reply_len(&self.buf)? {
                let value = redis::parse_redis_value(&self.buf[..end])?;
                self.buf.drain(..end);
                return Ok(value);
            }
            let read = match &mut self.stream {
                Stream::Tcp(s) => s.read_buf(&mut self.buf).await?,
                Stream::Unix(s) => s.read_buf(&mut self.buf).await?,
            };
            if read == 0 {
                return Err(RedisError::from(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                )));
            }
        }
    }
}

impl ConnectionLike for Dedicated {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let request = cmd.get_packed_command();
            let mut replies = self.exchange(&request, 0, 1).await?;
            Ok(replies.pop().unwrap_or(Value::Nil))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let request = pipeline.get_packed_pipeline();
            self.exchange(&request, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        self.db
    }
}

/// The length of the first whole RESP2 reply at the start of `buf`, or `None` while it is
/// incomplete.
///
/// # Errors
/// A protocol error (kind [`ErrorKind::Parse`]) when the bytes are not RESP2: the connection is
/// then of no further use.
pub(crate) fn reply_len(buf: &[u8]) -> RedisResult<Option<usize>> {
    let mut at = 0;
    // Values still to be read: one reply, plus every element of each array met on the way.
    let mut pending: u64 = 1;
    while pending > 0 {
        let Some(&kind) = buf.get(at) else {
            return Ok(None);
        };
        let Some(line) = buf[at..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let header = &buf[at + 1..at + line];
        let next = at + line + 2;
        pending -= 1;
        at = match kind {
            b'+' | b'-' | b':' => next,
            b'$' => match length(header)? {
                None => next,
                Some(n) => {
                    let end = next.saturating_add(n).saturating_add(2);
                    if buf.len() < end {
                        return Ok(None);
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(not_resp("a bulk string is not followed by CRLF"));
                    }
                    end
                }
            },
            b'*' => {
                if let Some(n) = length(header)? {
                    pending = pending.saturating_add(n as u64);
                }
                next
            }
            _ => return Err(not_resp("a reply starts with an unknown type byte")),
        };
    }
    Ok(Some(at))
}

/// A bulk string's or array's length; `None` for the null one (`-1`).
fn length(header: &[u8]) -> RedisResult<Option<usize>> {
    if header == b"-1" {
        return Ok(None);
    }
    std::str::from_utf8(header)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<usize>().ok())
        .map(Some)
        .ok_or_else(|| not_resp("a length is not a number"))
}

fn not_resp(what: &'static str) -> RedisError {
    RedisError::from((ErrorKind::Parse, "Parse error", what.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replies of every shape the scripts answer with, and their exact lengths.
    const REPLIES: &[&[u8]] = &[
        b"+OK\r\n",
        b"-NOSCRIPT No matching script\r\n",
        b":42\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"$0\r\n\r\n",
        b"$7\r\n3:owner\r\n",
        b"$4\r\na\r\nb\r\n",
        b"*3\r\n:1\r\n$2\r\n17\r\n:0\r\n",
        b"*3\r\n:0\r\n$9\r\n5:worker1\r\n:29870\r\n",
        b"*2\r\n$-1\r\n*2\r\n:1\r\n$3\r\nabc\r\n",
    ];

    #[test]
    fn a_whole_reply_is_measured_exactly_and_every_prefix_is_incomplete() {
        for reply in REPLIES {
            assert_eq!(reply_len(reply).unwrap(), Some(reply.len()), "{reply:?}");
            for cut in 0..reply.len() {
                assert_eq!(
                    reply_len(&reply[..cut]).unwrap(),
                    None,
                    "{reply:?} cut at {cut}"
                );
            }
            // What follows a reply is the next one's, never part of this one.
            let mut two = reply.to_vec();
            two.extend_from_slice(b":7\r\n");
            assert_eq!(
                reply_len(&two).unwrap(),
                Some(reply.len()),
                "{reply:?} then more"
            );
            // The parser agrees the frame is one value.
            redis::parse_redis_value(reply).unwrap();
        }
    }

    #[test]
    fn bytes_that_are_not_resp_are_a_parse_error() {
        for junk in [
            &b"HTTP/1.1 400 Bad Request\r\n"[..],
            b"$x\r\n",
            b"*-2\r\n",
            b"$3\r\nabcd\r\n",
            b"\x16\x03\x01\x00\r\n",
        ] {
            let err = reply_len(junk).expect_err(&format!("{junk:?}"));
            assert_eq!(err.kind(), ErrorKind::Parse, "{junk:?}");
        }
    }

    /// A request cut off by its caller (its future dropped while the server was stopped) leaves
    /// its reply on the way: the connection says it is interrupted and refuses the next request.
    /// Control: the same connection with the guard cleared hands that stale reply to the next
    /// request, which is what the guard is for.
    #[tokio::test]
    async fn a_request_cut_off_leaves_the_connection_unusable() {
        let redis = match fencecheck_testkit::RedisServer::start(false) {
            Ok(r) => r,
            Err(e) if e.is_missing() && !fencecheck_testkit::servers_required() => {
                eprintln!("SKIPPED a_request_cut_off_leaves_the_connection_unusable: {e}");
                return;
            }
            Err(e) => panic!("redis-server starts: {e}"),
        };
        let info = redis::IntoConnectionInfo::into_connection_info(redis.url()).unwrap();
        let pid = redis.pid().unwrap();
        for guarded in [true, false] {
            let mut conn = Dedicated::connect(&info, Duration::from_secs(5))
                .await
                .unwrap();
            redis::cmd("SET")
                .arg("k")
                .arg("first")
                .query_async::<()>(&mut conn)
                .await
                .unwrap();
            fencecheck_testkit::signal(pid, libc::SIGSTOP).unwrap();
            let cut = tokio::time::timeout(
                Duration::from_millis(200),
                redis::cmd("GET").arg("k").query_async::<String>(&mut conn),
            )
            .await;
            fencecheck_testkit::signal(pid, libc::SIGCONT).unwrap();
            assert!(
                cut.is_err(),
                "the GET was answered while the server was stopped"
            );
            assert!(conn.interrupted());
            if guarded {
                let refused = redis::cmd("ECHO")
                    .arg("second")
                    .query_async::<String>(&mut conn)
                    .await;
                assert!(
                    refused.is_err(),
                    "an interrupted connection served a request"
                );
            } else {
                conn.in_flight = false;
                let echoed: String = redis::cmd("ECHO")
                    .arg("second")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert_eq!(
                    echoed, "first",
                    "the control did not read the cut-off GET's reply"
                );
            }
        }
    }
}
