//! The boot service's TLS listener. Its certificate is issued by the site CA for the
//! controller URL's host, from a key that lives only in memory, and is re-issued when half
//! its life is gone; client certificates are optional at the handshake (the join has none)
//! and checked against the site CA by the handlers that need them (`Peer`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::routing::{get, post};
use metal_protocol::{SigningKey, SiteCa};
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tracing::{info, warn};

use crate::app::AppState;
use crate::http_server::{Connections, accept_loop};
use crate::metal::boot::{BootService, Peer, ramdisk};

/// How long the listener's own certificate is valid.
const SERVER_VALIDITY: Duration = Duration::from_secs(30 * 86400);

/// The listener's certificate, re-issued by the site CA when half of its life is gone.
#[derive(Debug)]
struct RenewingCertificate {
    ca: Arc<SiteCa>,
    names: Vec<String>,
    provider: Arc<CryptoProvider>,
    current: Mutex<(Arc<CertifiedKey>, SystemTime)>,
}

fn issue(ca: &SiteCa, names: &[String], provider: &CryptoProvider) -> Result<(Arc<CertifiedKey>, SystemTime), String> {
    let now = SystemTime::now();
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let der = ca
        .issue_server(&key.verifying_key(), names, now - Duration::from_secs(300), SERVER_VALIDITY)
        .map_err(|e| e.to_string())?;
    let pkcs8 = ed25519_dalek::pkcs8::EncodePrivateKey::to_pkcs8_der(&key).map_err(|e| e.to_string())?;
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(pkcs8.as_bytes().to_vec().into());
    let signing = provider.key_provider.load_private_key(key_der).map_err(|e| e.to_string())?;
    let chain = vec![der.into(), ca.certificate().der().to_vec().into()];
    Ok((Arc::new(CertifiedKey::new(chain, signing)), now + SERVER_VALIDITY / 2))
}

impl ResolvesServerCert for RenewingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if SystemTime::now() >= current.1 {
            match issue(&self.ca, &self.names, &self.provider) {
                Ok(renewed) => {
                    info!(names = ?self.names, "renewed the boot listener's certificate");
                    *current = renewed;
                }
                Err(e) => warn!(error = %e, "could not renew the boot listener's certificate; serving the old one"),
            }
        }
        Some(current.0.clone())
    }
}

/// The rustls configuration of the boot listener.
pub fn server_config(service: &BootService) -> Result<rustls::ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let names = service.certificate_names();
    let current = issue(&service.ca, &names, &provider)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(service.ca.certificate().der().to_vec().into()).map_err(|e| e.to_string())?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| e.to_string())?;
    let resolver =
        RenewingCertificate { ca: service.ca.clone(), names, provider: provider.clone(), current: Mutex::new(current) };
    Ok(rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(resolver)))
}

/// The routes of the ramdisk protocol.
pub fn router(app: AppState) -> Router {
    use metal_protocol::boot::{IMAGES_PATH, JOIN_PATH, PLAN_PATH, REPORTS_PATH};
    Router::new()
        .route(JOIN_PATH, post(ramdisk::join))
        .route(REPORTS_PATH, post(ramdisk::reports))
        .route(PLAN_PATH, get(ramdisk::plan))
        .route(&format!("{IMAGES_PATH}/{{id}}"), get(ramdisk::image))
        .fallback(|| async { crate::error::ApiError::NotFound("route".into()) })
        .with_state(app)
}

/// Serves the ramdisk protocol on `listener` until `shutdown` resolves.
pub async fn serve(
    app: AppState,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let service = BootService::of(&app).map_err(|e| std::io::Error::other(e.to_string()))?;
    let config = server_config(service).map_err(std::io::Error::other)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let router = router(app.clone());
    info!(address = %listener.local_addr()?, url = %service.controller_url, "boot listener (TLS) up");
    let connections = Arc::new(Connections::default());
    accept_loop(&listener, shutdown, |tcp, client| {
        let (acceptor, router, connections) = (acceptor.clone(), router.clone(), connections.clone());
        tokio::spawn(async move {
            match acceptor.accept(tcp).await {
                Ok(tls) => {
                    let peer = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec());
                    connections.serve(tls, client, router.layer(axum::Extension(Peer(peer))));
                }
                Err(e) => info!(%client, error = %e, "boot listener: TLS handshake failed"),
            }
        });
    })
    .await;
    if let Some(connections) = Arc::into_inner(connections) {
        connections.shutdown(Duration::from_secs(30)).await;
    }
    Ok(())
}
