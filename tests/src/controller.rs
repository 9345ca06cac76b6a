//! A test controller that speaks the ramdisk protocol (`protocol::boot`) over real TLS: its
//! certificate comes from a fresh site CA, the join endpoint takes single-use tokens (and can
//! answer "busy" first), and the reports endpoint demands the ramdisk certificate (mutual
//! TLS) and a DSSE signature by that same certificate. Until the scheduler serves these
//! endpoints, metal-boot's tests and the HIL tests talk to this.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use base64::Engine as _;
use metal_protocol::boot::{JoinRequest, JoinResponse, ReportReceipt};
use metal_protocol::identity::pem_encode;
use metal_protocol::{Envelope, Identity, Role, SigningKey, SiteCa, VerifyingKey};

/// The client certificate of a connection, if it sent one.
#[derive(Clone)]
struct Peer(Option<Vec<u8>>);

/// What the test controller knows and received.
#[derive(Debug)]
pub struct Controller {
    /// The site CA.
    pub ca: SiteCa,
    /// Tokens not used yet.
    pub tokens: HashSet<String>,
    /// Join requests still to answer 503.
    pub busy_joins: u32,
    /// Every accepted report: who signed it, its payload type, its payload.
    pub reports: Vec<(Identity, String, serde_json::Value)>,
    /// The plan handed to a deploying ramdisk.
    pub plan: Option<metal_protocol::deploy::DeployPlan>,
    /// Files served at `/images/NAME`.
    pub files: std::collections::HashMap<String, Vec<u8>>,
}

/// The controller state, shared with the test.
pub type Shared = Arc<Mutex<Controller>>;

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({"code": "REFUSED", "message": message}))).into_response()
}

async fn join_handler(State(s): State<Shared>, Json(request): Json<JoinRequest>) -> Response {
    let mut c = s.lock().unwrap();
    if c.busy_joins > 0 {
        c.busy_joins -= 1;
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "busy");
    }
    if !c.tokens.remove(&request.token) {
        return refuse(StatusCode::FORBIDDEN, "the join token is unknown or already used");
    }
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(&request.public_key) else {
        return refuse(StatusCode::BAD_REQUEST, "publicKey is not base64");
    };
    let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| ())
        .and_then(|b| VerifyingKey::from_bytes(&b).map_err(|_| ()))
    else {
        return refuse(StatusCode::BAD_REQUEST, "publicKey is not an Ed25519 key");
    };
    let now = SystemTime::now();
    let der =
        c.ca.issue(&key, "node-9", 2, Role::Ramdisk, now - Duration::from_secs(60), Duration::from_secs(900)).unwrap();
    Json(JoinResponse {
        node_id: "node-9".into(),
        generation: 2,
        certificate_chain: pem_encode("CERTIFICATE", &der) + &c.ca.certificate().pem(),
        expires_at: time::OffsetDateTime::from(now + Duration::from_secs(900)),
    })
    .into_response()
}

async fn reports_handler(
    State(s): State<Shared>,
    Extension(peer): Extension<Peer>,
    Json(envelope): Json<Envelope>,
) -> Response {
    let mut c = s.lock().unwrap();
    let Some(der) = peer.0 else { return refuse(StatusCode::UNAUTHORIZED, "reports need the ramdisk certificate") };
    let Ok(verified) = c.ca.certificate().verify(&der, SystemTime::now()) else {
        return refuse(StatusCode::UNAUTHORIZED, "the client certificate is not of this site");
    };
    let signature = envelope.single_signature().unwrap();
    if envelope.verify_signature(signature, &verified.public_key).is_err() {
        return refuse(StatusCode::BAD_REQUEST, "the report is not signed by the connection's certificate");
    }
    let payload: serde_json::Value = serde_json::from_slice(&envelope.payload_bytes().unwrap()).unwrap();
    c.reports.push((verified.identity, envelope.payload_type.clone(), payload));
    Json(ReportReceipt { accepted: true, reason: None }).into_response()
}

async fn plan_handler(State(s): State<Shared>, Extension(peer): Extension<Peer>) -> Response {
    let c = s.lock().unwrap();
    if peer.0.as_ref().is_none_or(|der| c.ca.certificate().verify(der, SystemTime::now()).is_err()) {
        return refuse(StatusCode::UNAUTHORIZED, "the plan needs the ramdisk certificate");
    }
    match &c.plan {
        Some(plan) => Json(plan.clone()).into_response(),
        None => refuse(StatusCode::NOT_FOUND, "no deploy planned for this node"),
    }
}

async fn image_handler(State(s): State<Shared>, axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    match s.lock().unwrap().files.get(&name) {
        Some(bytes) => bytes.clone().into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A running test controller.
#[derive(Debug)]
pub struct TestController {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// Its port.
    pub port: u16,
    /// SHA-256 of the site CA, hex.
    pub fingerprint: String,
    /// What it knows and received.
    pub state: Shared,
    _runtime: tokio::runtime::Runtime,
}

/// Serves `router` over TLS on loopback with a certificate `ca` issues for 127.0.0.1 and
/// `extra_names`; client certificates of `ca` are asked for but optional, and each request
/// carries the connection's as a `Peer` extension. Returns the port and the runtime that
/// serves (dropping it stops the server).
fn serve_tls(ca: &SiteCa, extra_names: &[&str], router: Router) -> (u16, tokio::runtime::Runtime) {
    let now = SystemTime::now();
    let server_key = SigningKey::generate(&mut rand::rngs::OsRng);
    let server_der = ca
        .issue_server(
            &server_key.verifying_key(),
            &std::iter::once("127.0.0.1").chain(extra_names.iter().copied()).map(str::to_owned).collect::<Vec<_>>(),
            now - Duration::from_secs(60),
            Duration::from_secs(3600),
        )
        .unwrap();
    let ca_der = ca.certificate().der().to_vec();
    let pkcs8 = ed25519_dalek::pkcs8::EncodePrivateKey::to_pkcs8_der(&server_key).unwrap();
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(pkcs8.as_bytes().to_vec().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_der.clone().into()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![server_der.into(), ca_der.into()], key_der)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    runtime.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let (acceptor, router) = (acceptor.clone(), router.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let peer = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec());
                let service = hyper_util::service::TowerToHyperService::new(router.layer(Extension(Peer(peer))));
                let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, runtime)
}

impl TestController {
    /// Starts on loopback with these one-time tokens; the first `busy_joins` joins get 503.
    /// The certificate names 127.0.0.1 and `extra_names` (10.0.2.2 for QEMU guests).
    pub fn start(tokens: &[&str], busy_joins: u32, extra_names: &[&str]) -> TestController {
        let ca =
            SiteCa::create("site-a", SystemTime::now() - Duration::from_secs(600), Duration::from_secs(86400)).unwrap();
        let fingerprint = ca.certificate().fingerprint_sha256();
        let tls_ca = SiteCa::from_pem(&ca.certificate().pem(), &ca.key_pem().unwrap()).unwrap();
        let state: Shared = Arc::new(Mutex::new(Controller {
            ca,
            tokens: tokens.iter().map(|t| (*t).to_owned()).collect(),
            busy_joins,
            reports: Vec::new(),
            plan: None,
            files: std::collections::HashMap::new(),
        }));
        let router = Router::new()
            .route(metal_protocol::boot::JOIN_PATH, post(join_handler))
            .route(metal_protocol::boot::REPORTS_PATH, post(reports_handler))
            .route(metal_protocol::boot::PLAN_PATH, axum::routing::get(plan_handler))
            .route("/images/{name}", axum::routing::get(image_handler))
            .with_state(state.clone());
        let (port, runtime) = serve_tls(&tls_ca, extra_names, router);
        TestController { url: format!("https://127.0.0.1:{port}"), port, fingerprint, state, _runtime: runtime }
    }
}

/// How the image server misbehaves (all off by default: a plain server with Range).
#[derive(Debug, Clone, Default)]
pub struct Misbehaviour {
    /// The first this many responses with a body end (the connection drops) after
    /// `drop_after` bytes.
    pub drops: u32,
    /// Bytes sent before a drop.
    pub drop_after: u64,
    /// Answer every request with the whole file (200), as servers without Range do.
    pub ignore_range: bool,
    /// Pause this long after each 64 KiB sent (to stop a service mid-download).
    pub pace: Option<Duration>,
}

/// What the image server saw: each request's path and Range header.
#[derive(Debug, Default)]
pub struct ServerLog {
    /// `(path, range)` of each request, in order.
    pub requests: Vec<(String, Option<String>)>,
    /// Drops still to do.
    drops_left: u32,
}

/// An HTTPS image server whose certificate a given site CA issued (a deploying ramdisk trusts
/// only its site CA), serving `files` at `/images/NAME`, with Range, and misbehaving as told.
#[derive(Debug)]
pub struct ImageServer {
    /// Its port on loopback.
    pub port: u16,
    /// What it saw.
    pub log: Arc<Mutex<ServerLog>>,
    _runtime: tokio::runtime::Runtime,
}

/// One image response: the range asked (unless ignored), dropped or paced as told.
fn image_response(
    bytes: &Arc<Vec<u8>>,
    range: Option<&str>,
    misbehaviour: &Misbehaviour,
    drop_this: bool,
) -> axum::response::Response {
    let size = bytes.len() as u64;
    let asked = if misbehaviour.ignore_range { None } else { range.and_then(|r| r.strip_prefix("bytes=")) };
    let (status, start, end) = match asked.and_then(|r| r.split_once('-')) {
        Some((a, b)) => {
            let start: u64 = a.parse().unwrap_or(0);
            let end = if b.is_empty() { size } else { b.parse::<u64>().map_or(size, |e| (e + 1).min(size)) };
            if start >= size {
                let mut response = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
                response.headers_mut().insert("content-range", format!("bytes */{size}").parse().unwrap());
                return response;
            }
            (StatusCode::PARTIAL_CONTENT, start, end)
        }
        None => (StatusCode::OK, 0, size),
    };
    let (bytes, pace) = (bytes.clone(), misbehaviour.pace);
    let cut = drop_this.then_some(start + misbehaviour.drop_after);
    let stream = body_stream(bytes, start, end, cut, pace);
    let mut response = axum::response::Response::new(axum::body::Body::from_stream(stream));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert("content-length", (end - start).to_string().parse().unwrap());
    headers.insert("accept-ranges", "bytes".parse().unwrap());
    if status == StatusCode::PARTIAL_CONTENT {
        headers.insert("content-range", format!("bytes {start}-{}/{size}", end - 1).parse().unwrap());
    }
    response
}

/// The bytes `[start, end)` in 64 KiB pieces, failing at `cut` (the connection drops).
fn body_stream(
    bytes: Arc<Vec<u8>>,
    start: u64,
    end: u64,
    cut: Option<u64>,
    pace: Option<Duration>,
) -> impl futures::Stream<Item = std::io::Result<Vec<u8>>> + Send {
    let state = (bytes, start);
    futures::stream::unfold(state, move |(bytes, at)| async move {
        if at >= end {
            return None;
        }
        if let Some(cut) = cut
            && at >= cut
        {
            // Let what was sent reach the client before the connection drops.
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Some((Err(std::io::Error::other("dropped by the test server")), (bytes, end)));
        }
        if let Some(pace) = pace {
            tokio::time::sleep(pace).await;
        }
        let stop = (at + 65536).min(end).min(cut.unwrap_or(u64::MAX).max(at + 1));
        let piece = bytes[usize::try_from(at).unwrap()..usize::try_from(stop).unwrap()].to_vec();
        Some((Ok(piece), (bytes, stop)))
    })
}

impl ImageServer {
    /// Starts on loopback; the certificate names 127.0.0.1 and `extra_names`.
    pub fn start(ca: &SiteCa, extra_names: &[&str], files: std::collections::HashMap<String, Vec<u8>>) -> ImageServer {
        ImageServer::misbehaving(ca, extra_names, files, Misbehaviour::default())
    }

    /// Starts on loopback, misbehaving as told.
    pub fn misbehaving(
        ca: &SiteCa,
        extra_names: &[&str],
        files: std::collections::HashMap<String, Vec<u8>>,
        misbehaviour: Misbehaviour,
    ) -> ImageServer {
        let files: Arc<std::collections::HashMap<String, Arc<Vec<u8>>>> =
            Arc::new(files.into_iter().map(|(k, v)| (k, Arc::new(v))).collect());
        let log = Arc::new(Mutex::new(ServerLog { requests: Vec::new(), drops_left: misbehaviour.drops }));
        let router = {
            let log = log.clone();
            Router::new().route(
                "/images/{name}",
                axum::routing::get(
                    move |axum::extract::Path(name): axum::extract::Path<String>, headers: axum::http::HeaderMap| {
                        let (files, log, misbehaviour) = (files.clone(), log.clone(), misbehaviour.clone());
                        async move {
                            let range = headers.get("range").and_then(|v| v.to_str().ok()).map(str::to_owned);
                            let drop_this = {
                                let mut log = log.lock().unwrap();
                                log.requests.push((format!("/images/{name}"), range.clone()));
                                let drop_this = log.drops_left > 0;
                                log.drops_left = log.drops_left.saturating_sub(1);
                                drop_this
                            };
                            match files.get(&name) {
                                Some(bytes) => image_response(bytes, range.as_deref(), &misbehaviour, drop_this),
                                None => StatusCode::NOT_FOUND.into_response(),
                            }
                        }
                    },
                ),
            )
        };
        let (port, runtime) = serve_tls(ca, extra_names, router);
        ImageServer { port, log, _runtime: runtime }
    }

    /// `https://127.0.0.1:PORT/images/NAME`.
    pub fn url(&self, name: &str) -> String {
        format!("https://127.0.0.1:{}/images/{name}", self.port)
    }
}
