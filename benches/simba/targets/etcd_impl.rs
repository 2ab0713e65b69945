//! etcd for the benchmark: the raw lock (a transaction that puts the key only when absent, and a
//! delete), the raw notification and hand-off samples (a delete seen by another client's watch),
//! the server's gRPC message counter and fsyncs (its `/metrics`), the version. The gRPC code is the
//! crate's own generated code (`src/backends/etcd/proto`, one copy), on a small runtime of the
//! benchmark's own.

use std::time::Instant;

use tonic::transport::Channel;

use super::*;

#[path = "../../../src/backends/etcd/proto/mod.rs"]
#[allow(unreachable_pub)]
mod proto;

use proto::etcdserverpb::kv_client::KvClient;
use proto::etcdserverpb::lease_client::LeaseClient;
use proto::etcdserverpb::maintenance_client::MaintenanceClient;
use proto::etcdserverpb::watch_client::WatchClient;
use proto::etcdserverpb::{
    compare, request_op, watch_request, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest, PutRequest,
    RequestOp, StatusRequest, TxnRequest, WatchCreateRequest, WatchRequest,
};

/// Prefix of the raw lock keys (the backend's keys are under `/simba-bench/`).
pub const RAW_PREFIX: &str = "/simba-bench-raw/";

/// The first member's `host:port` of an `etcd://` URL (the benchmark runs on plain TCP).
pub fn first_member(url: &str) -> BenchResult<String> {
    let rest = url
        .strip_prefix("etcd://")
        .ok_or_else(|| err(format!("the etcd benchmark needs a plain etcd:// URL, not {url}")))?;
    let hosts = rest.split('/').next().unwrap_or("");
    let first = hosts.split(',').next().unwrap_or("");
    let first = first.rsplit_once('@').map_or(first, |(_, h)| h);
    if first.is_empty() {
        return Err(err(format!("no etcd member in {url}")));
    }
    Ok(if first.contains(':') { first.to_string() } else { format!("{first}:2379") })
}

/// A connection of the benchmark's own: a current-thread runtime and one channel.
struct Conn {
    rt: tokio::runtime::Runtime,
    channel: Channel,
}

impl Conn {
    fn open(member: &str) -> BenchResult<Conn> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{member}"))?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true);
        let channel = rt.block_on(endpoint.connect())?;
        Ok(Conn { rt, channel })
    }

    fn kv(&self) -> KvClient<Channel> {
        KvClient::new(self.channel.clone())
    }

    /// Puts `key` only when it is absent (create revision 0): true when it was put.
    fn put_if_absent(&self, key: &[u8]) -> BenchResult<bool> {
        self.put_if_absent_leased(key, 0)
    }

    /// [`Conn::put_if_absent`], the key attached to etcd lease `lease` (0: none).
    fn put_if_absent_leased(&self, key: &[u8], lease: i64) -> BenchResult<bool> {
        let absent = Compare {
            result: compare::CompareResult::Equal as i32,
            target: compare::CompareTarget::Create as i32,
            key: key.to_vec(),
            range_end: Vec::new(),
            target_union: Some(compare::TargetUnion::CreateRevision(0)),
        };
        let put = RequestOp {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: key.to_vec(),
                value: b"raw".to_vec(),
                lease,
                ..Default::default()
            })),
        };
        let txn = TxnRequest { compare: vec![absent], success: vec![put], failure: Vec::new() };
        let mut kv = self.kv();
        Ok(self.rt.block_on(kv.txn(txn))?.into_inner().succeeded)
    }

    /// Grants an etcd lease of `ttl` seconds (the server chooses the id).
    fn grant(&self, ttl: i64) -> BenchResult<i64> {
        let mut lease = LeaseClient::new(self.channel.clone());
        Ok(self.rt.block_on(lease.lease_grant(LeaseGrantRequest { ttl, id: 0 }))?.into_inner().id)
    }

    fn revoke(&self, id: i64) -> BenchResult<()> {
        let mut lease = LeaseClient::new(self.channel.clone());
        self.rt.block_on(lease.lease_revoke(LeaseRevokeRequest { id }))?;
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        let mut kv = self.kv();
        self.rt.block_on(kv.delete_range(DeleteRangeRequest { key: key.to_vec(), ..Default::default() }))?;
        Ok(())
    }
}

/// Checks the member answers; returns its version.
pub fn init(url: &str) -> BenchResult<String> {
    let conn = Conn::open(&first_member(url)?)?;
    let mut m = MaintenanceClient::new(conn.channel.clone());
    let status = conn.rt.block_on(m.status(StatusRequest {}))?.into_inner();
    Ok(format!("etcd {}", status.version))
}

/// The raw lock: a put-if-absent transaction and a delete, on a dedicated connection.
pub struct RawEtcd {
    conn: Conn,
}

impl RawEtcd {
    pub fn connect(member: &str) -> BenchResult<RawEtcd> {
        Ok(RawEtcd { conn: Conn::open(member)? })
    }
}

impl RawLock for RawEtcd {
    fn lock(&mut self, name: &str) -> BenchResult<bool> {
        self.conn.put_if_absent(format!("{RAW_PREFIX}{name}").as_bytes())
    }
    fn unlock(&mut self, name: &str) -> BenchResult<()> {
        self.conn.delete(format!("{RAW_PREFIX}{name}").as_bytes())
    }
}

/// What a raw sample measures, from one client's delete of the key another client watches.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// Until the watch reports the delete.
    Notify,
    /// The raw hand-off: the watcher then puts the key if absent (its lock is taken once the
    /// transaction returns). Two durable writes, one after the other, as simba's hand-off.
    Handoff,
    /// [`Sample::Handoff`] with both clients' keys attached to an etcd lease of their own, as
    /// simba's keys are to their session's.
    LeasedHandoff,
}

/// delete on one connection → the watch of another connection reports it (→ for a hand-off,
/// that connection's put-if-absent returns): the time from the delete, per sample.
pub fn samples(url: &str, samples: usize, sample: Sample) -> BenchResult<Vec<Duration>> {
    let mut sampler = Sampler::open(url, sample)?;
    let out = (0..samples).map(|_| sampler.next()).collect::<BenchResult<Vec<_>>>()?;
    sampler.close()?;
    Ok(out)
}

/// Raw samples one at a time (so that section 2 can interleave them with simba's): two
/// connections, one watch stream, a key of its own.
pub struct Sampler {
    writer: Conn,
    watcher: Conn,
    key: Vec<u8>,
    sample: Sample,
    /// Each client's lease (leased hand-off only), long enough for a run without keep-alives.
    leases: (i64, i64),
    tx: futures::channel::mpsc::UnboundedSender<WatchRequest>,
    /// Until the stream opens: it opens once its first create is queued (etcd answers the call,
    /// its headers, only with its first reply).
    rx: Option<futures::channel::mpsc::UnboundedReceiver<WatchRequest>>,
    stream: Option<tonic::Streaming<proto::etcdserverpb::WatchResponse>>,
}

impl RawSampler for Sampler {
    fn next(&mut self) -> BenchResult<Duration> {
        Sampler::next(self)
    }
    fn close(self: Box<Self>) -> BenchResult<()> {
        Sampler::close(*self)
    }
}

impl Sampler {
    pub fn open(url: &str, sample: Sample) -> BenchResult<Sampler> {
        let member = first_member(url)?;
        let writer = Conn::open(&member)?;
        let watcher = Conn::open(&member)?;
        let key = format!(
            "{RAW_PREFIX}{}-{:08x}",
            match sample {
                Sample::Notify => "notify",
                Sample::Handoff => "handoff",
                Sample::LeasedHandoff => "leased",
            },
            rand::random::<u32>()
        );
        let leases = if sample == Sample::LeasedHandoff { (writer.grant(3600)?, watcher.grant(3600)?) } else { (0, 0) };
        let (tx, rx) = futures::channel::mpsc::unbounded::<WatchRequest>();
        Ok(Sampler { writer, watcher, key: key.into_bytes(), sample, leases, tx, rx: Some(rx), stream: None })
    }

    /// One sample: the key put, a watch on it created (confirmed), the release delay, then the
    /// delete until the watch reports it (and, for a hand-off, the watcher's put returns).
    pub fn next(&mut self) -> BenchResult<Duration> {
        let Sampler { writer, watcher, key, sample, leases: (own, theirs), tx, rx, stream } = self;
        let (sample, theirs) = (*sample, *theirs);
        writer.put_if_absent_leased(key, *own)?;
        let create = WatchCreateRequest { key: key.clone(), ..Default::default() };
        tx.unbounded_send(WatchRequest { request_union: Some(watch_request::RequestUnion::CreateRequest(create)) })
            .map_err(|e| err(format!("the raw watch stream closed: {e}")))?;
        if let Some(rx) = rx.take() {
            let mut client = WatchClient::new(watcher.channel.clone());
            *stream = Some(watcher.rt.block_on(client.watch(rx))?.into_inner());
        }
        let events = stream.as_mut().ok_or_else(|| err("the raw watch stream did not open"))?;
        // The creation's own reply first: the watch is in place from here on.
        let watch_id = loop {
            let reply = watcher.rt.block_on(events.message())?.ok_or_else(|| err("the raw watch stream ended"))?;
            if reply.created {
                break reply.watch_id;
            }
        };
        let (done_tx, done_rx) = crossbeam_channel::bounded::<Result<Instant, String>>(1);
        let took = std::thread::scope(|scope| -> BenchResult<Duration> {
            let watcher = &*watcher;
            let key = &*key;
            scope.spawn(move || {
                // Bounded, so that a watch that never reports ends the scope too.
                let seen = loop {
                    let next = async { tokio::time::timeout(Duration::from_secs(5), events.message()).await };
                    match watcher.rt.block_on(next) {
                        Ok(Ok(Some(r))) if r.watch_id == watch_id && !r.events.is_empty() => break Ok(()),
                        Ok(Ok(Some(_))) => {}
                        Ok(Ok(None)) => break Err("the raw watch stream ended".to_string()),
                        Ok(Err(e)) => break Err(e.to_string()),
                        Err(_) => break Err("no report of the delete within 5 s".to_string()),
                    }
                };
                let r = seen.and_then(|()| match sample {
                    Sample::Notify => Ok(Instant::now()),
                    Sample::Handoff | Sample::LeasedHandoff => {
                        watcher.put_if_absent_leased(key, theirs).map(|_| Instant::now()).map_err(|e| e.to_string())
                    }
                });
                let _ = done_tx.send(r);
            });
            std::thread::sleep(crate::common::release_delay());
            let t0 = Instant::now();
            writer.delete(key)?;
            let t1 = done_rx
                .recv_timeout(Duration::from_secs(5))
                .map_err(|_| err("the raw etcd watch did not report the delete"))?
                .map_err(|e| err(format!("the raw etcd watch or hand-off failed: {e}")))?;
            Ok(t1.saturating_duration_since(t0))
        })?;
        let cancel = proto::etcdserverpb::WatchCancelRequest { watch_id };
        tx.unbounded_send(WatchRequest { request_union: Some(watch_request::RequestUnion::CancelRequest(cancel)) })
            .map_err(|e| err(format!("the raw watch stream closed: {e}")))?;
        writer.delete(key)?;
        Ok(took)
    }

    /// Revokes the leases (the key is already deleted).
    pub fn close(self) -> BenchResult<()> {
        for (conn, id) in [(&self.writer, self.leases.0), (&self.watcher, self.leases.1)] {
            if id != 0 {
                conn.revoke(id)?;
            }
        }
        Ok(())
    }
}

/// The member's `/metrics` (Prometheus text), over plain HTTP on the client port.
fn metrics(addr: SocketAddr) -> Stat<String> {
    let fetch = || -> BenchResult<String> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    };
    let reply = fetch().map_err(|e| Unavailable::new(format!("GET /metrics from {addr}: {e}")))?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((reply.as_str(), ""));
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(Unavailable::new(format!("GET /metrics from {addr}: {}", head.lines().next().unwrap_or(""))));
    }
    Ok(body.to_string())
}

/// The sum of every sample of the metric `name` (all label sets).
fn metric_sum(text: &str, name: &str) -> Stat<f64> {
    let mut sum = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value = rest.rsplit(' ').next().unwrap_or("");
        let v: f64 = value
            .parse()
            .map_err(|e| Unavailable::new(format!("/metrics: {name}'s value {value:?} is not a number: {e}")))?;
        sum = Some(sum.unwrap_or(0.0) + v);
    }
    sum.ok_or_else(|| Unavailable::new(format!("/metrics has no {name}")))
}

/// The member's WAL fsyncs: count and total ms (etcd keeps a histogram: no longest).
pub fn fsync(addr: SocketAddr) -> Stat<Fsyncs> {
    let m = metrics(addr)?;
    let count = metric_sum(&m, "etcd_disk_wal_fsync_duration_seconds_count")?;
    let secs = metric_sum(&m, "etcd_disk_wal_fsync_duration_seconds_sum")?;
    Ok((count as u64, (secs * 1000.0).round() as u64, None))
}

/// gRPC messages the member received (`grpc_server_msg_received_total`, every method: unary
/// requests and each message on a stream, keep-alives and watch requests included).
pub struct MetricsCounter {
    addr: SocketAddr,
}

impl MetricsCounter {
    pub fn new(addr: SocketAddr) -> MetricsCounter {
        MetricsCounter { addr }
    }
}

impl ServerCounter for MetricsCounter {
    fn read(&mut self) -> Stat<Reading> {
        let requests = metric_sum(&metrics(self.addr)?, "grpc_server_msg_received_total")?;
        Ok(Reading { requests: requests as u64, executed: None, server_us: None })
    }
}

/// Deletes the raw keys a run left behind (an interrupted run).
pub fn cleanup(url: &str) -> BenchResult<()> {
    let conn = Conn::open(&first_member(url)?)?;
    let key = RAW_PREFIX.as_bytes().to_vec();
    let mut end = key.clone();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    let mut kv = conn.kv();
    conn.rt.block_on(kv.delete_range(DeleteRangeRequest { key, range_end: end, ..Default::default() }))?;
    Ok(())
}
