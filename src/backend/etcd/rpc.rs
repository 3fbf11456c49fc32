//! The handful of etcd v3 gRPC calls the lock makes, over tonic's client, with the messages written
//! by hand as prost structs.
//!
//! Writing them by hand instead of generating them from etcd's `.proto` files means building
//! fencecheck needs no `protoc`. Only the fields the lock reads or sets are declared; protobuf
//! decoders skip the rest. Field numbers are those of etcd's `etcdserverpb/rpc.proto` and
//! `mvccpb/kv.proto`, unchanged since etcd 3.0. `oneof` members are declared as optional fields:
//! on the wire the two are the same, and an optional field is sent even when it holds zero (a
//! compare against create revision 0 must reach the server).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// Every response's header.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    /// The store's revision when the request was applied.
    #[prost(int64, tag = "3")]
    pub revision: i64,
}

/// A stored key.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The revision of the write that created the key (the lock's fencing token).
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    /// The value.
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
    /// The lease the key is attached to (0: none).
    #[prost(int64, tag = "6")]
    pub lease: i64,
}

/// `RangeRequest.SortOrder.ASCEND`.
pub const SORT_ASCEND: i32 = 1;
/// `RangeRequest.SortTarget.CREATE`.
pub const SORT_BY_CREATE: i32 = 2;

/// A read of one key or a key range.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    /// The key, or the first key of the range.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The end of the range (exclusive); empty for the one key.
    #[prost(bytes = "vec", tag = "2")]
    pub range_end: Vec<u8>,
    /// At most this many keys (0: no limit).
    #[prost(int64, tag = "3")]
    pub limit: i64,
    /// [`SORT_ASCEND`] or 0 (unsorted).
    #[prost(int32, tag = "5")]
    pub sort_order: i32,
    /// [`SORT_BY_CREATE`] or 0 (by key).
    #[prost(int32, tag = "6")]
    pub sort_target: i32,
}

impl RangeRequest {
    /// Every key starting with `prefix`, oldest creation first; `limit` 0 for all of them.
    pub fn prefix_by_creation(prefix: &str, limit: i64) -> Self {
        RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            limit,
            sort_order: SORT_ASCEND,
            sort_target: SORT_BY_CREATE,
        }
    }

    /// The one key `key`.
    pub fn key(key: &str) -> Self {
        RangeRequest {
            key: key.as_bytes().to_vec(),
            ..RangeRequest::default()
        }
    }
}

/// The first key after every key that starts with `prefix` (etcd's range end for a prefix).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: the range runs to the end of the key space.
    vec![0]
}

/// The keys a range read found.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeResponse {
    /// The header.
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    /// The keys, in the order asked for.
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
}

/// A write of one key.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The value.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
    /// The lease the key lives and dies with (0: none).
    #[prost(int64, tag = "3")]
    pub lease: i64,
}

/// A delete of one key.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRangeRequest {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
}

/// The result of a delete.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRangeResponse {
    /// How many keys were deleted.
    #[prost(int64, tag = "2")]
    pub deleted: i64,
}

/// One operation of a transaction (a `oneof`: exactly one field is set).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestOp {
    /// A read.
    #[prost(message, optional, tag = "1")]
    pub range: Option<RangeRequest>,
    /// A write.
    #[prost(message, optional, tag = "2")]
    pub put: Option<PutRequest>,
    /// A delete.
    #[prost(message, optional, tag = "3")]
    pub delete: Option<DeleteRangeRequest>,
}

impl RequestOp {
    /// A read inside a transaction.
    pub fn range(r: RangeRequest) -> Self {
        RequestOp {
            range: Some(r),
            ..RequestOp::default()
        }
    }

    /// A write of `value` at `key` attached to `lease` (0: none).
    pub fn put(key: &str, value: &str, lease: i64) -> Self {
        RequestOp {
            put: Some(PutRequest {
                key: key.as_bytes().to_vec(),
                value: value.as_bytes().to_vec(),
                lease,
            }),
            ..RequestOp::default()
        }
    }

    /// A delete of `key`.
    pub fn delete(key: &str) -> Self {
        RequestOp {
            delete: Some(DeleteRangeRequest {
                key: key.as_bytes().to_vec(),
            }),
            ..RequestOp::default()
        }
    }
}

/// One operation's result (a `oneof`; only reads are looked at).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseOp {
    /// A read's result.
    #[prost(message, optional, tag = "1")]
    pub range: Option<RangeResponse>,
}

/// `Compare.CompareTarget.CREATE`.
const TARGET_CREATE: i32 = 1;

/// A transaction's condition; only "the key's create revision equals N" is used.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Compare {
    /// `EQUAL` (0).
    #[prost(int32, tag = "1")]
    pub result: i32,
    /// What is compared: `CREATE` (1), the key's create revision.
    #[prost(int32, tag = "2")]
    pub target: i32,
    /// The key.
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    /// The create revision compared against (0: the key does not exist).
    #[prost(int64, optional, tag = "5")]
    pub create_revision: Option<i64>,
}

impl Compare {
    /// True when `key` was created at `revision` (0: when `key` does not exist).
    pub fn created_at(key: &str, revision: i64) -> Self {
        Compare {
            result: 0,
            target: TARGET_CREATE,
            key: key.as_bytes().to_vec(),
            create_revision: Some(revision),
        }
    }
}

/// An atomic if-then-else over keys.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRequest {
    /// All must hold for `success` to run.
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    /// Run when every comparison holds.
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
    /// Run otherwise.
    #[prost(message, repeated, tag = "3")]
    pub failure: Vec<RequestOp>,
}

/// A transaction's result.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnResponse {
    /// The header (its revision is the transaction's own when it wrote).
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    /// Whether the comparisons held.
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
    /// One result per operation run.
    #[prost(message, repeated, tag = "3")]
    pub responses: Vec<ResponseOp>,
}

impl TxnResponse {
    /// The results of the reads, in order.
    pub fn ranges(&self) -> impl Iterator<Item = &RangeResponse> {
        self.responses.iter().filter_map(|r| r.range.as_ref())
    }
}

/// A request for a new lease.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantRequest {
    /// Whole seconds.
    #[prost(int64, tag = "1")]
    pub ttl: i64,
}

/// A granted lease.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseGrantResponse {
    /// Its id.
    #[prost(int64, tag = "2")]
    pub id: i64,
    /// The TTL the server granted, in whole seconds.
    #[prost(int64, tag = "3")]
    pub ttl: i64,
    /// A refusal, when the server gives one in the body.
    #[prost(string, tag = "4")]
    pub error: String,
}

/// One keepalive of a lease.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseKeepAliveRequest {
    /// The lease.
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// The answer to a keepalive.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaseKeepAliveResponse {
    /// The lease.
    #[prost(int64, tag = "2")]
    pub id: i64,
    /// Seconds left after renewal; 0 or less when the lease no longer exists.
    #[prost(int64, tag = "3")]
    pub ttl: i64,
}

/// Whether a failed call may be sent again to another member: always when the request cannot have
/// taken effect (`Unavailable`: refused connection, no leader); for requests that are safe to repeat
/// (`idempotent`) also when the outcome is unknown.
pub fn retryable(status: &Status, idempotent: bool) -> bool {
    match status.code() {
        Code::Unavailable => true,
        Code::Cancelled | Code::Unknown | Code::DeadlineExceeded => idempotent,
        _ => false,
    }
}

/// etcd answers a request on a lease that no longer exists with `NotFound` (`etcdserver: requested
/// lease not found`); the code says it, no message text is read.
pub fn lease_not_found(status: &Status) -> bool {
    status.code() == Code::NotFound
}

/// What an HTTP/1 server, or anything else that does not speak gRPC, leaves the client with.
const NOT_GRPC: &str =
    "no gRPC answer (is this an etcd client URL? an HTTP port answers like this)";

/// One short line for a failed call: the gRPC code and the server's message, without the transport
/// chain tonic keeps in the status's source.
pub fn describe(status: &Status) -> String {
    let message = status.message().lines().next().unwrap_or("").trim();
    let code = status.code();
    match (code, message.is_empty()) {
        (Code::Unavailable, _) => "unreachable (no gRPC answer: is it an etcd client URL?)".into(),
        // What an HTTP/1 server (or anything else that is not gRPC) leaves tonic with.
        // Our own calls are never cancelled (their bounds are our Timeout errors): a cancelled one
        // is a connection the other side dropped.
        (Code::Unknown, _) if message.contains("transport error") => NOT_GRPC.into(),
        (Code::Cancelled, _) => NOT_GRPC.into(),
        (Code::Unimplemented, _) | (Code::Internal, _) => {
            format!("not an etcd v3 server? ({code:?}: {message})")
        }
        (_, true) => format!("{code:?}"),
        (_, false) => format!("{code:?}: {message}"),
    }
}

/// Channels to each member of a cluster, and which member to try first.
#[derive(Clone, Debug)]
pub struct Members {
    channels: Arc<[Channel]>,
    preferred: Arc<AtomicUsize>,
}

impl Members {
    /// Lazily connecting channels to `endpoints` (`http://HOST:PORT` or `HOST:PORT`): nothing is
    /// sent until the first call, which is bounded by `request_timeout`.
    ///
    /// # Errors
    /// A malformed endpoint, or a call from outside a Tokio runtime (the channels' connections
    /// are driven by tasks of the caller's runtime).
    pub fn new(
        endpoints: &[String],
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Self, String> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err("etcd channels must be made inside a Tokio runtime \
                        (call this from async code or under Runtime::enter)"
                .into());
        }
        let channels = endpoints
            .iter()
            .map(|e| {
                let url = if e.contains("://") {
                    e.clone()
                } else {
                    format!("http://{e}")
                };
                Endpoint::from_shared(url)
                    .map(|ep| {
                        ep.connect_timeout(connect_timeout)
                            .timeout(request_timeout)
                            .tcp_nodelay(true)
                            .connect_lazy()
                    })
                    .map_err(|err| format!("{e:?}: {err}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Members {
            channels: channels.into(),
            preferred: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.channels.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// The client for the `attempt`-th try of a call: the preferred member first, then the others
    /// in turn.
    pub fn client(&self, attempt: usize) -> Client {
        let member = (self.preferred.load(Ordering::Relaxed) + attempt) % self.channels.len();
        Client {
            channel: self.channels[member].clone(),
            member,
        }
    }

    /// Remembers that `client`'s member answered: later calls try it first.
    pub fn answered(&self, client: &Client) {
        self.preferred.store(client.member, Ordering::Relaxed);
    }
}

/// A connection to one member.
#[derive(Clone, Debug)]
pub struct Client {
    channel: Channel,
    member: usize,
}

impl Client {
    /// A gRPC client on this member's channel, once the channel can take a request.
    async fn ready(&self) -> Result<tonic::client::Grpc<Channel>, Status> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(grpc)
    }

    async fn unary<Req, Resp>(&self, path: &'static str, req: Req) -> Result<Resp, Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.ready().await?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        let path = http::uri::PathAndQuery::from_static(path);
        Ok(grpc
            .unary(tonic::Request::new(req), path, codec)
            .await?
            .into_inner())
    }

    /// `KV.Range`.
    pub async fn range(&self, req: RangeRequest) -> Result<RangeResponse, Status> {
        self.unary("/etcdserverpb.KV/Range", req).await
    }

    /// `KV.Txn`.
    pub async fn txn(&self, req: TxnRequest) -> Result<TxnResponse, Status> {
        self.unary("/etcdserverpb.KV/Txn", req).await
    }

    /// `KV.DeleteRange` of one key: how many keys it deleted.
    pub async fn delete(&self, key: &str) -> Result<i64, Status> {
        let req = DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
        };
        let resp: DeleteRangeResponse = self.unary("/etcdserverpb.KV/DeleteRange", req).await?;
        Ok(resp.deleted)
    }

    /// `Lease.LeaseGrant`.
    pub async fn lease_grant(&self, ttl_secs: i64) -> Result<LeaseGrantResponse, Status> {
        let resp: LeaseGrantResponse = self
            .unary(
                "/etcdserverpb.Lease/LeaseGrant",
                LeaseGrantRequest { ttl: ttl_secs },
            )
            .await?;
        if resp.error.is_empty() {
            Ok(resp)
        } else {
            Err(Status::failed_precondition(resp.error))
        }
    }

    /// One keepalive of `lease` on a stream of its own: the TTL left after renewal, 0 or less when
    /// the lease is gone.
    pub async fn keep_alive_once(&self, lease: i64) -> Result<i64, Status> {
        let mut grpc = self.ready().await?;
        let codec =
            tonic_prost::ProstCodec::<LeaseKeepAliveRequest, LeaseKeepAliveResponse>::default();
        let path = http::uri::PathAndQuery::from_static("/etcdserverpb.Lease/LeaseKeepAlive");
        let requests = tokio_stream::once(LeaseKeepAliveRequest { id: lease });
        let mut answers = grpc
            .streaming(tonic::Request::new(requests), path, codec)
            .await?
            .into_inner();
        Ok(answers.message().await?.map_or(0, |r| r.ttl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end(b"lock/"), b"lock0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn a_compare_with_revision_zero_is_sent() {
        // The field must be present on the wire: "create revision is 0" means "does not exist".
        let bytes = Compare::created_at("k", 0).encode_to_vec();
        assert!(bytes.ends_with(&[5 << 3, 0]), "{bytes:?}");
    }

    #[test]
    fn channels_outside_a_runtime_are_an_error_not_a_panic() {
        let endpoints = vec!["127.0.0.1:2379".to_string()];
        let d = Duration::from_secs(1);
        let err = Members::new(&endpoints, d, d).unwrap_err();
        assert!(err.contains("inside a Tokio runtime"), "{err}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _in_runtime = rt.enter();
        assert!(Members::new(&endpoints, d, d).is_ok());
    }

    #[test]
    fn request_ops_carry_one_member() {
        let op = RequestOp::put("k", "v", 7);
        let back = RequestOp::decode(op.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back, op);
        assert!(back.range.is_none() && back.delete.is_none());
    }
}
