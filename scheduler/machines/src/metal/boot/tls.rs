//! The boot service's TLS listener (the ramdisk protocol, measured boot's challenges and the
//! hosts' join service). Its certificate is issued by the site CA for the
//! controller URL's host (`server_tls::RenewingCertificate`); client certificates are
//! optional at the handshake (the join has none) and checked against the site CA by the
//! handlers that need them (`Peer`).

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use rustls::server::WebPkiClientVerifier;
use tracing::info;

use crate::app::AppState;
use crate::metal::boot::{BootService, Peer, attest, hosts, ramdisk};
use crate::server_tls::RenewingCertificate;

/// The rustls configuration of the boot listener.
pub fn server_config(service: &BootService) -> Result<rustls::ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver = RenewingCertificate::new(service.ca.clone(), service.certificate_names(), provider.clone())?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(service.ca.certificate().der().to_vec().into()).map_err(|e| e.to_string())?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| e.to_string())?;
    Ok(rustls::ServerConfig::builder_with_details(provider, Arc::new(metal_clock::RustlsTime))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(resolver)))
}

/// The routes of the ramdisk protocol.
pub fn router(app: AppState) -> Router {
    use metal_protocol::boot::{ATTEST_CHALLENGE_PATH, IMAGES_PATH, JOIN_PATH, PLAN_PATH, REPORTS_PATH};
    use metal_protocol::join::{
        HOST_AGENT_PATH, HOST_INSTALL_PATH, HOST_JOIN_FAILED_PATH, HOST_JOIN_PATH, HOST_RENEW_PATH,
    };
    Router::new()
        .route(JOIN_PATH, post(ramdisk::join))
        .route(HOST_JOIN_PATH, post(hosts::join))
        .route(HOST_JOIN_FAILED_PATH, post(hosts::join_failed))
        .route(HOST_RENEW_PATH, post(hosts::renew))
        .route(HOST_INSTALL_PATH, get(hosts::install))
        .route(HOST_AGENT_PATH, get(hosts::agent))
        .route(REPORTS_PATH, post(ramdisk::reports))
        .route(ATTEST_CHALLENGE_PATH, post(attest::challenge))
        .route(PLAN_PATH, get(ramdisk::plan))
        .route(&format!("{IMAGES_PATH}/{{id}}"), get(ramdisk::image))
        .fallback(|| async { metal_types::error::ApiError::NotFound("route".into()) })
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
    let router = router(app.clone());
    info!(address = %listener.local_addr()?, url = %service.controller_url, "boot listener (TLS) up");
    crate::http_server::serve_tls(listener, Arc::new(config), shutdown, move |tls| {
        let peer = tls.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec());
        router.clone().layer(axum::Extension(Peer(peer)))
    })
    .await;
    Ok(())
}
