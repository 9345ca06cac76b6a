//! The boot service's TLS listener: the ramdisk protocol (`metal_machines::metal::boot::ramdisk`),
//! measured boot's challenges (`attest`) and the hosts' join service (`hosts`). These are
//! its HTTP shells: each takes the request apart (the client's address, the TLS peer's
//! certificate, the JSON body) and hands plain values to the metal side, which does the work.
//! `ClientAddr` is the extractor every unauthenticated boot route rate-limits by.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use tracing::info;

use metal_machines::app::AppState;
use metal_machines::metal::boot::{BootService, Peer, attest, hosts, ramdisk, tls};
use metal_protocol::Envelope;
use metal_protocol::boot::{JoinRequest, JoinResponse, ReportReceipt};
use metal_protocol::join::{HostCertificate, HostJoinRequest, HostJoinResponse, HostRenewRequest, JoinFailure};
use metal_protocol::measurement::{Challenge, TpmKeys};
use metal_types::error::{ApiError, ApiResult};
use metal_types::extract::{ApiJson, ApiPath};

/// The client's address (from the connection; unspecified when the server did not record it).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let address = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        Ok(ClientAddr(address.unwrap_or(IpAddr::from([0, 0, 0, 0]))))
    }
}

/// The routes of the ramdisk protocol.
pub fn router(app: AppState) -> Router {
    use metal_protocol::boot::{ATTEST_CHALLENGE_PATH, IMAGES_PATH, JOIN_PATH, PLAN_PATH, REPORTS_PATH};
    use metal_protocol::join::{
        HOST_AGENT_PATH, HOST_INSTALL_PATH, HOST_JOIN_FAILED_PATH, HOST_JOIN_PATH, HOST_RENEW_PATH,
    };
    Router::new()
        .route(JOIN_PATH, post(ramdisk_join))
        .route(HOST_JOIN_PATH, post(host_join))
        .route(HOST_JOIN_FAILED_PATH, post(host_join_failed))
        .route(HOST_RENEW_PATH, post(host_renew))
        .route(HOST_INSTALL_PATH, get(host_install))
        .route(HOST_AGENT_PATH, get(host_agent))
        .route(REPORTS_PATH, post(reports))
        .route(ATTEST_CHALLENGE_PATH, post(attest_challenge))
        .route(PLAN_PATH, get(plan))
        .route(&format!("{IMAGES_PATH}/{{id}}"), get(image))
        .fallback(|| async { ApiError::NotFound("route".into()) })
        .with_state(app)
}

/// Serves the ramdisk protocol on `listener` until `shutdown` resolves.
pub async fn serve(
    app: AppState,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let service = BootService::of(&app).map_err(|e| std::io::Error::other(e.to_string()))?;
    let config = tls::server_config(service).map_err(std::io::Error::other)?;
    let router = router(app.clone());
    info!(address = %listener.local_addr()?, url = %service.controller_url, "boot listener (TLS) up");
    crate::http_server::serve_tls(listener, Arc::new(config), shutdown, move |tls| {
        let peer = tls.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec());
        router.clone().layer(Extension(Peer(peer)))
    })
    .await;
    Ok(())
}

/// `POST /v1/boot/join` (`ramdisk::join`).
async fn ramdisk_join(
    State(app): State<AppState>,
    ClientAddr(address): ClientAddr,
    ApiJson(request): ApiJson<JoinRequest>,
) -> ApiResult<ApiJson<JoinResponse>> {
    ramdisk::join(&app, address, request).await.map(ApiJson)
}

/// `POST /v1/boot/reports` (`ramdisk::reports`).
async fn reports(
    State(app): State<AppState>,
    Extension(peer): Extension<Peer>,
    ApiJson(envelope): ApiJson<Envelope>,
) -> ApiResult<ApiJson<ReportReceipt>> {
    ramdisk::reports(&app, &peer, envelope).await.map(ApiJson)
}

/// `GET /v1/boot/images/{id}` (`ramdisk::image`), with Range.
async fn image(
    State(app): State<AppState>,
    Extension(peer): Extension<Peer>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let path = ramdisk::image(&app, &peer, id).await?;
    crate::files::file_response(&path, &headers, "application/zstd").await
}

/// `GET /v1/boot/plan` (`ramdisk::plan`).
async fn plan(State(app): State<AppState>, Extension(peer): Extension<Peer>) -> ApiResult<ApiJson<serde_json::Value>> {
    ramdisk::plan(&app, &peer).await.map(ApiJson)
}

/// `POST /v1/boot/attest/challenge` (`attest::challenge`).
async fn attest_challenge(
    State(app): State<AppState>,
    Extension(peer): Extension<Peer>,
    ApiJson(request): ApiJson<TpmKeys>,
) -> ApiResult<ApiJson<Challenge>> {
    attest::challenge(&app, &peer, request).await.map(ApiJson)
}

/// `GET /v1/hosts/install.sh` (`hosts::install`).
async fn host_install(State(app): State<AppState>, ClientAddr(address): ClientAddr) -> ApiResult<Response> {
    let script = hosts::install(&app, address).await?;
    Ok(([(header::CONTENT_TYPE, "text/x-shellscript")], script).into_response())
}

/// `GET /v1/hosts/agent` (`hosts::agent`).
async fn host_agent(State(app): State<AppState>, ClientAddr(address): ClientAddr) -> ApiResult<Response> {
    let bytes = hosts::agent(&app, address).await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

/// `POST /v1/hosts/join` (`hosts::join`).
async fn host_join(
    State(app): State<AppState>,
    ClientAddr(address): ClientAddr,
    ApiJson(request): ApiJson<HostJoinRequest>,
) -> ApiResult<ApiJson<HostJoinResponse>> {
    hosts::join(&app, address, request).await.map(ApiJson)
}

/// `POST /v1/hosts/join-failed` (`hosts::join_failed`).
async fn host_join_failed(
    State(app): State<AppState>,
    ClientAddr(address): ClientAddr,
    ApiJson(report): ApiJson<JoinFailure>,
) -> ApiResult<StatusCode> {
    hosts::join_failed(&app, address, report).await.map(|()| StatusCode::NO_CONTENT)
}

/// `POST /v1/hosts/renew` (`hosts::renew`).
async fn host_renew(
    State(app): State<AppState>,
    Extension(peer): Extension<Peer>,
    ApiJson(request): ApiJson<HostRenewRequest>,
) -> ApiResult<ApiJson<HostCertificate>> {
    hosts::renew(&app, &peer, request).await.map(ApiJson)
}
