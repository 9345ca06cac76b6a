//! Placement throughput and latency: N nodes, M reservation creates, measured twice on fresh
//! databases: in-process (the full router, no TCP) and over HTTP on loopback with concurrent
//! clients. Prints placements per second and p50/p99 latency against the goal (2,000/s and
//! p99 under 10 ms over HTTP) and the Kubernetes scheduler's CI threshold (680-810 pods/s at
//! 5,000 nodes) as the named baseline.
//!
//!   cargo bench -p metal-scheduler --bench placement -- [NODES] [RESERVATIONS] [CLIENTS]

// Statistics of a benchmark: float conversions of counts and durations are intended.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use metal_machines::app;
use metal_types::clock::ManualClock;
use metal_types::config::Config;
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use tower::ServiceExt as _;

const KUBE_BASELINE_PODS_PER_SEC: f64 = 810.0;

/// The scheduler's allocator (`main.rs`), so the benchmark measures what it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Bench {
    app: metal_api::AppState,
    admin: String,
    _dir: tempfile::TempDir,
}

async fn setup(nodes: usize) -> Bench {
    let dir = tempfile::tempdir().unwrap();
    let config = Config { data_dir: dir.path().to_path_buf(), ..Config::default() };
    let clock = ManualClock::new(time::macros::datetime!(2026-12-01 10:00 UTC));
    let app = metal_api::start(config, Arc::new(clock)).await.unwrap();
    let admin = std::fs::read_to_string(dir.path().join(app::ADMIN_TOKEN_FILE)).unwrap().trim().to_owned();
    let bench = Bench { app, admin, _dir: dir };
    for (path, body) in [
        ("/v1/tenants", json!({"id": "acme"})),
        ("/v1/pools", json!({"id": "p1", "tenantId": "root", "siteId": "s", "class": "c"})),
        ("/v1/pools/p1/offers", json!({"tenantId": "acme"})),
    ] {
        let (status, answer) = bench.call("POST", path, body).await;
        assert!(status < 300, "{path}: {status} {answer}");
    }
    let gpus: Vec<Value> = (0..8).map(|g| json!({"id": format!("gpu{g}"), "class": "gpu", "healthy": true})).collect();
    let batch: Vec<Value> = (0..nodes)
        .map(|i| json!({"id": format!("n{i:05}"), "poolId": "p1", "labels": {"rack": format!("r{}", i / 40)}, "devices": gpus}))
        .collect();
    let (status, answer) = bench.call("POST", "/v1/nodes/import", Value::Array(batch)).await;
    assert_eq!(status, 200, "import: {answer}");
    assert_eq!(answer["created"].as_array().map(Vec::len), Some(nodes));
    // Commissioning is not what is measured: mark every node ready directly.
    bench.app.store.write(|tx| tx.execute("UPDATE nodes SET state = 'ready'", &[])).await.unwrap();
    bench.app.placement.invalidate();
    bench
}

impl Bench {
    async fn call(&self, method: &str, path: &str, body: Value) -> (u16, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {}", self.admin))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = metal_api::router(self.app.clone()).oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

/// Reservation bodies: random windows over a year, 1 hour to 7 days, 8 GPUs.
fn workload(count: usize) -> Vec<Value> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(42);
    let start = time::macros::datetime!(2026-12-01 10:00 UTC);
    (0..count)
        .map(|_| {
            let at = start + time::Duration::minutes(rng.gen_range(0..365 * 24 * 60));
            let hours = rng.gen_range(1..=168);
            json!({"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 8}],
                   "start": at.format(&time::format_description::well_known::Rfc3339).unwrap(), "duration": format!("{hours}h")})
        })
        .collect()
}

fn report(label: &str, latencies: &mut [Duration], placed: usize, refused: usize, elapsed: Duration) {
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p) as usize];
    let rate = latencies.len() as f64 / elapsed.as_secs_f64();
    println!(
        "{label:<12} {} creates in {:.1} s: {rate:>7.0}/s  p50 {:>6.2} ms  p99 {:>6.2} ms  ({placed} placed, {refused} refused)  {:.2}x the Kubernetes CI threshold ({KUBE_BASELINE_PODS_PER_SEC} pods/s)",
        latencies.len(),
        elapsed.as_secs_f64(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        rate / KUBE_BASELINE_PODS_PER_SEC,
    );
}

async fn in_process(nodes: usize, count: usize) {
    let bench = setup(nodes).await;
    let mut latencies = Vec::with_capacity(count);
    let (mut placed, mut refused) = (0, 0);
    let started = Instant::now();
    for body in workload(count) {
        let t = Instant::now();
        let (status, _) = bench.call("POST", "/v1/reservations", body).await;
        latencies.push(t.elapsed());
        match status {
            201 => placed += 1,
            409 => refused += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    report("in-process", &mut latencies, placed, refused, started.elapsed());
}

async fn over_http(nodes: usize, count: usize, clients: usize) {
    let bench = setup(nodes).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/reservations", listener.local_addr().unwrap());
    let router = metal_api::router(bench.app.clone());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let http = reqwest::Client::new();
    let bodies = Arc::new(workload(count));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (http, url, bodies, next, token) =
                (http.clone(), url.clone(), bodies.clone(), next.clone(), bench.admin.clone());
            tokio::spawn(async move {
                let mut out = (Vec::new(), 0usize, 0usize);
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(body) = bodies.get(i) else { break };
                    let t = Instant::now();
                    let status = http.post(&url).bearer_auth(&token).json(body).send().await.unwrap().status().as_u16();
                    out.0.push(t.elapsed());
                    match status {
                        201 => out.1 += 1,
                        409 => out.2 += 1,
                        other => panic!("unexpected status {other}"),
                    }
                }
                out
            })
        })
        .collect();
    let (mut latencies, mut placed, mut refused) = (Vec::new(), 0, 0);
    for w in workers {
        let (l, p, r) = w.await.unwrap();
        latencies.extend(l);
        placed += p;
        refused += r;
    }
    report(&format!("http x{clients}"), &mut latencies, placed, refused, started.elapsed());
}

fn main() {
    let args: Vec<usize> =
        std::env::args().skip(1).filter(|a| !a.starts_with('-')).filter_map(|a| a.parse().ok()).collect();
    let nodes = args.first().copied().unwrap_or(10_000);
    let count = args.get(1).copied().unwrap_or(100_000);
    let clients = args.get(2).copied().unwrap_or(8);
    println!(
        "placement benchmark: {nodes} nodes, {count} reservation creates (random windows over a year, 1h-7d, 8 GPUs)"
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(in_process(nodes, count));
    runtime.block_on(over_http(nodes, count, clients));
}
