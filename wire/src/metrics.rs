//! The Prometheus endpoint of a coordinator or node process (docs/usage.md, "Metrics"): the
//! optional `metrics = "host:port"` of the process in `cluster.toml` is a TCP address on which
//! `GET /metrics` answers the process's metrics in Prometheus's text format (version 0.0.4),
//! encoded by the `prometheus-client` crate.
//!
//! What it owns and guarantees:
//! - the HTTP server ([`serve`]): one request per connection, its head read within
//!   [`REQUEST_TIMEOUT`] and [`REQUEST_HEAD_BYTES_MAX`], at most [`CONNECTIONS_MAX`] at once
//!   (more are closed at once): a scraper that never reads or never ends its request holds
//!   one slot for a bounded time and nothing of the process's own work;
//! - the figures every process has ([`ProcessCollector`]): its identity, uptime, and the bytes
//!   its links sent and received (counted in [`crate::endpoint`] on every frame, with one
//!   relaxed atomic add);
//! - [`Samples`], which the node's and the coordinator's collectors write their figures with
//!   (read from their state when scraped, so nothing is counted twice or on the hot path).
//!
//! Metric names start with `glass_`; counters end with `_total` in the text.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// The content type of the answer: Prometheus's text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Largest request head read; a longer one is answered 431 and closed.
pub const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;
/// Time a scraper has to send its request head, and then to read the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Scrapes served at once; a connection beyond them is closed unanswered.
pub const CONNECTIONS_MAX: usize = 8;

/// Why the metrics endpoint cannot start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot listen for metrics scrapes on {address} (`{field}` in cluster.toml)")]
    Bind { field: String, address: String, source: std::io::Error },
}

/// Bytes every link of this process sent and received, as frames (see [`crate::endpoint`]).
#[derive(Debug)]
pub struct LinkTraffic {
    sent: AtomicU64,
    received: AtomicU64,
}

/// This process's link traffic.
pub static LINK_TRAFFIC: LinkTraffic = LinkTraffic { sent: AtomicU64::new(0), received: AtomicU64::new(0) };

impl LinkTraffic {
    pub fn sent(&self, bytes: usize) {
        self.sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn received(&self, bytes: usize) {
        self.received.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// (sent, received) bytes so far.
    pub fn totals(&self) -> (u64, u64) {
        (self.sent.load(Ordering::Relaxed), self.received.load(Ordering::Relaxed))
    }
}

/// The labels of one sample: `(name, value)` pairs.
pub type Labels = Vec<(&'static str, String)>;

/// Writes a collector's figures: one family per call, its samples with their labels.
pub struct Samples<'a> {
    enc: DescriptorEncoder<'a>,
}

impl<'a> Samples<'a> {
    pub fn new(enc: DescriptorEncoder<'a>) -> Samples<'a> {
        Samples { enc }
    }

    /// A counter family `name` (the text adds `_total`).
    pub fn counters(&mut self, name: &str, help: &str, samples: &[(Labels, u64)]) -> std::fmt::Result {
        self.family(name, help, MetricType::Counter, samples, |v, m| ConstCounter::new(*v).encode(m))
    }

    /// A counter family `name` of real numbers (seconds).
    pub fn counters_f64(&mut self, name: &str, help: &str, samples: &[(Labels, f64)]) -> std::fmt::Result {
        self.family(name, help, MetricType::Counter, samples, |v, m| ConstCounter::new(*v).encode(m))
    }

    /// A gauge family `name` of whole numbers.
    pub fn gauges(&mut self, name: &str, help: &str, samples: &[(Labels, i64)]) -> std::fmt::Result {
        self.family(name, help, MetricType::Gauge, samples, |v, m| ConstGauge::new(*v).encode(m))
    }

    /// A gauge family `name` of real numbers (seconds, ratios).
    pub fn gauges_f64(&mut self, name: &str, help: &str, samples: &[(Labels, f64)]) -> std::fmt::Result {
        self.family(name, help, MetricType::Gauge, samples, |v, m| ConstGauge::new(*v).encode(m))
    }

    /// A histogram family `name` of [`Latencies`] (seconds; `_bucket`, `_sum` and `_count`).
    pub fn latencies(&mut self, name: &str, help: &str, samples: &[(Labels, &Latencies)]) -> std::fmt::Result {
        let bounds: Vec<f64> = latency_bounds().chain([f64::INFINITY]).collect();
        self.family(name, help, MetricType::Histogram, samples, |l, mut m| {
            let counts = l.counts();
            let buckets: Vec<(f64, u64)> = bounds.iter().copied().zip(counts.iter().copied()).collect();
            m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                l.sum_seconds(),
                counts.iter().sum(),
                &buckets,
                None,
            )
        })
    }

    fn family<V>(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        samples: &[(Labels, V)],
        encode: impl Fn(&V, prometheus_client::encoding::MetricEncoder<'_>) -> std::fmt::Result,
    ) -> std::fmt::Result {
        if samples.is_empty() {
            return Ok(());
        }
        let mut family = self.enc.encode_descriptor(name, help, None, kind)?;
        for (labels, value) in samples {
            encode(value, family.encode_family(labels)?)?;
        }
        Ok(())
    }
}

/// Upper bounds, in seconds, of the buckets of a latency histogram: 50 µs to about 3.3 s, each
/// twice the last ([`LATENCY_BUCKETS`] of them, and one more above them all).
pub fn latency_bounds() -> impl Iterator<Item = f64> {
    (0..LATENCY_BUCKETS).map(|k| 50e-6 * f64::from(1u32 << k))
}

/// Buckets of [`latency_bounds`].
pub const LATENCY_BUCKETS: usize = 17;

/// Durations counted into the buckets of [`latency_bounds`] (and one above them), lock-free:
/// an observation is two atomic adds. What a process reports in its status
/// (`PartitionReport::latency_buckets`, so that `glass cluster status` can take a
/// percentile over a window) and serves as a Prometheus histogram ([`Samples::latencies`]).
#[derive(Debug, Default)]
pub struct Latencies {
    counts: [AtomicU64; LATENCY_BUCKETS + 1],
    sum_ns: AtomicU64,
}

impl Latencies {
    pub fn observe(&self, d: Duration) {
        let us = d.as_micros();
        // Bucket k holds (50·2^(k−1), 50·2^k] µs; bucket 0 everything up to 50 µs.
        let k = if us <= 50 { 0 } else { (128 - ((us - 1) / 50).leading_zeros()) as usize };
        self.counts[k.min(LATENCY_BUCKETS)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// The count of each bucket (not cumulative), the last one above every bound.
    pub fn counts(&self) -> Vec<u64> {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }

    pub fn sum_seconds(&self) -> f64 {
        self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9
    }
}

/// The 99th percentile of the observations counted between two readings of [`Latencies::counts`]
/// (`before` may be empty: since the start), as the upper bound of its bucket in seconds
/// (`f64::INFINITY` above the last bound); `None` when nothing was counted between them.
pub fn p99_between(before: &[u64], after: &[u64]) -> Option<f64> {
    let window: Vec<u64> =
        after.iter().enumerate().map(|(i, a)| a.saturating_sub(before.get(i).copied().unwrap_or(0))).collect();
    let total: u64 = window.iter().sum();
    if total == 0 {
        return None;
    }
    let needed = total - total / 100; // at least 99% of them, rounded up
    let mut seen = 0;
    let bounds: Vec<f64> = latency_bounds().collect();
    for (i, n) in window.iter().enumerate() {
        seen += n;
        if seen >= needed {
            return Some(bounds.get(i).copied().unwrap_or(f64::INFINITY));
        }
    }
    Some(f64::INFINITY)
}

/// The figures of any glass process: `glass_process_info`, its uptime and its link bytes.
#[derive(Debug)]
pub struct ProcessCollector {
    role: &'static str,
    id: u16,
    started: Instant,
}

impl ProcessCollector {
    pub fn new(role: &'static str, id: u16) -> ProcessCollector {
        ProcessCollector { role, id, started: Instant::now() }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, enc: DescriptorEncoder) -> std::fmt::Result {
        let mut s = Samples::new(enc);
        let me: Labels = vec![
            ("role", self.role.to_string()),
            ("id", self.id.to_string()),
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("pid", std::process::id().to_string()),
        ];
        s.gauges(
            "glass_process_info",
            "The process: its role, id in cluster.toml, version and pid (always 1).",
            &[(me, 1)],
        )?;
        let up = self.started.elapsed().as_secs_f64();
        s.gauges_f64("glass_process_uptime_seconds", "Seconds since the process started.", &[(Vec::new(), up)])?;
        let (sent, received) = LINK_TRAFFIC.totals();
        s.counters(
            "glass_link_bytes",
            "Bytes of frames the process's QUIC links sent and received (every channel, before TLS).",
            &[(vec![("direction", "sent".into())], sent), (vec![("direction", "received".into())], received)],
        )
    }
}

/// A registry holding `role`'s [`ProcessCollector`] and `collector`.
pub fn registry(role: &'static str, id: u16, collector: impl Collector) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ProcessCollector::new(role, id)));
    registry.register_collector(Box::new(collector));
    registry
}

/// Listens on `address` (the process's `field` in cluster.toml) for scrapes.
pub async fn bind(field: &str, address: &str) -> Result<TcpListener, MetricsError> {
    TcpListener::bind(address).await.map_err(|source| MetricsError::Bind {
        field: field.to_string(),
        address: address.to_string(),
        source,
    })
}

/// The registry's metrics as Prometheus text.
pub fn render(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing to a String cannot fail; a collector's own error leaves what it wrote.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, registry);
    text
}

/// Serves scrapes of `registry` on `listener` until `stopping` turns true.
pub async fn serve(listener: TcpListener, registry: Arc<Registry>, mut stopping: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopping.wait_for(|s| *s) => return,
        };
        let Ok((stream, _)) = accepted else {
            // Out of descriptors, most likely: wait rather than spin on the error.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        // Beyond the slots a connection is dropped (closed) at once: scrapes never queue.
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let registry = registry.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REQUEST_TIMEOUT * 2, answer(stream, &registry)).await;
            drop(slot);
        });
    }
}

/// Reads one request head and answers it.
async fn answer(mut stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read_head = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            if head.len() >= REQUEST_HEAD_BYTES_MAX {
                return Ok(false);
            }
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<bool, std::io::Error>(true)
    };
    let whole = tokio::time::timeout(REQUEST_TIMEOUT, read_head).await.map_err(|_| std::io::ErrorKind::TimedOut)??;
    let (status, content_type, body) = if !whole {
        ("431 Request Header Fields Too Large", "text/plain", "request head too large\n".to_string())
    } else {
        route(&head, registry)
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head.starts_with(b"HEAD ") {
        reply.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&reply).await?;
    stream.shutdown().await
}

/// The answer to a request head: `GET /metrics` the metrics, anything else a short refusal.
fn route(head: &[u8], registry: &Registry) -> (&'static str, &'static str, String) {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    match (method, path) {
        (b"GET" | b"HEAD", b"/metrics") => ("200 OK", CONTENT_TYPE, render(registry)),
        (b"GET" | b"HEAD", _) => ("404 Not Found", "text/plain", "glass serves /metrics only\n".to_string()),
        _ => ("405 Method Not Allowed", "text/plain", "glass answers GET /metrics only\n".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Two;
    impl Collector for Two {
        fn encode(&self, enc: DescriptorEncoder) -> std::fmt::Result {
            let mut s = Samples::new(enc);
            s.counters("glass_test_things", "Things.", &[(vec![("partition", "1".into())], 7)])?;
            s.gauges("glass_test_depth", "Depth.", &[(vec![("partition", "1".into())], -2)])
        }
    }

    async fn get(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        // A connection closed unanswered may also refuse the request or reset: nothing read.
        let _ = s.write_all(request).await;
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        out
    }

    #[tokio::test]
    async fn a_scrape_gets_the_text_format_and_anything_else_a_refusal() {
        let listener = bind("nodes[0].metrics", "127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopping) = watch::channel(false);
        let server = tokio::spawn(serve(listener, Arc::new(registry("node", 3, Two)), stopping));

        let ok = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains(CONTENT_TYPE), "{ok}");
        assert!(ok.contains("glass_test_things_total{partition=\"1\"} 7"), "{ok}");
        assert!(ok.contains("glass_test_depth{partition=\"1\"} -2"), "{ok}");
        assert!(ok.contains("glass_process_info{role=\"node\",id=\"3\""), "{ok}");
        assert!(ok.contains("glass_link_bytes_total{direction=\"sent\"}"), "{ok}");
        let head = get(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"), "{head}");
        assert!(get(addr, b"GET / HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 404"));
        assert!(get(addr, b"POST /metrics HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 405"));
        let huge = [b"GET /metrics HTTP/1.1\r\nX: ".as_slice(), &[b'a'; 9000]].concat();
        assert!(get(addr, &huge).await.starts_with("HTTP/1.1 431"));

        stop.send_replace(true);
        server.await.unwrap();
    }

    /// Scrapers that connect and never send (hostile or broken peers) take at most
    /// [`CONNECTIONS_MAX`] slots, each for a bounded time: one more connection is closed
    /// unanswered at once, and once their time is up the endpoint answers again.
    #[tokio::test]
    async fn silent_scrapers_do_not_hold_the_endpoint() {
        let listener = bind("coordinators[0].metrics", "127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_stop, stopping) = watch::channel(false);
        tokio::spawn(serve(listener, Arc::new(registry("coordinator", 0, Two)), stopping));
        let mut silent = Vec::new();
        for _ in 0..CONNECTIONS_MAX {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        // Let the server take them all.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let bound = REQUEST_TIMEOUT * 5;
        let refused =
            tokio::time::timeout(bound, get(addr, b"GET /metrics HTTP/1.0\r\n\r\n")).await.expect("closed, not held");
        assert_eq!(refused, "", "beyond the slots a connection is closed unanswered");
        // Each silent one is closed once its time is up, and a scrape is answered again.
        let mut buf = Vec::new();
        let n =
            tokio::time::timeout(bound, silent[0].read_to_end(&mut buf)).await.expect("closed in time").unwrap_or(0);
        assert_eq!(n, 0, "closed without an answer");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let ok = tokio::time::timeout(bound, get(addr, b"GET /metrics HTTP/1.0\r\n\r\n")).await.unwrap();
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
    }

    /// Each duration lands in the bucket whose bound is the first at or above it, and the
    /// percentile of a window is the bound that covers 99% of what the window counted.
    #[test]
    fn latencies_bucket_and_their_percentile_covers_the_window() {
        let l = Latencies::default();
        for us in [1, 50, 51, 100, 101, 3_276_800, 3_276_801, 9_000_000] {
            l.observe(Duration::from_micros(us));
        }
        assert_eq!(&l.counts()[..4], &[2, 2, 1, 0]);
        assert_eq!(l.counts()[LATENCY_BUCKETS - 1], 1, "3.2768 s is the last bound's");
        assert_eq!(l.counts()[LATENCY_BUCKETS], 2, "above every bound");
        let before = l.counts();
        assert_eq!(p99_between(&before, &l.counts()), None, "nothing in the window");
        for _ in 0..99 {
            l.observe(Duration::from_micros(70));
        }
        l.observe(Duration::from_micros(300));
        assert_eq!(p99_between(&before, &l.counts()), Some(100e-6), "99 of 100 within 100 µs");
        l.observe(Duration::from_micros(300));
        assert_eq!(p99_between(&before, &l.counts()), Some(400e-6), "99 of 101 need the 400 µs bucket");
        assert_eq!(p99_between(&[], &[0, 0, 1]), Some(200e-6));
        let text = {
            #[derive(Debug)]
            struct One(Arc<Latencies>);
            impl Collector for One {
                fn encode(&self, enc: DescriptorEncoder) -> std::fmt::Result {
                    Samples::new(enc).latencies("glass_test_seconds", "Test.", &[(vec![], &self.0)])
                }
            }
            let shared = Arc::new(Latencies::default());
            shared.observe(Duration::from_micros(60));
            render(&registry("node", 1, One(shared)))
        };
        assert!(text.contains("glass_test_seconds_bucket{le=\"0.0001\"} 1"), "{text}");
        assert!(
            text.contains("glass_test_seconds_bucket{le=\"+Inf\"} 1") && text.contains("glass_test_seconds_count 1"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_taken_address_is_named_in_the_error() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = held.local_addr().unwrap().to_string();
        let e = bind("nodes[1].metrics", &address).await.unwrap_err().to_string();
        assert!(e.contains(&address) && e.contains("nodes[1].metrics"), "{e}");
    }
}
