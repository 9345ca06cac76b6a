//! The routes PXE firmware, boot loaders, BMCs and installers fetch over plain HTTP: the
//! boot script (`/boot/ipxe`, `/boot/grub`), the ramdisk's files, the per-boot ISOs of
//! virtual-media boots and the installer's files. Their URLs carry nothing but one-time
//! tokens and claims; the metal side (`metal_machines::metal::boot::{ipxe, media}`) checks
//! them, rate-limits by client address and decides. These shells take the request apart
//! and answer plain text, bytes or ranges.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::boot_service::ClientAddr;
use metal_machines::metal::boot::ipxe::{self, Dialect, FileQuery, ScriptQuery};
use metal_machines::metal::boot::media;
use metal_types::error::ApiResult;
use metal_types::extract::{ApiPath, ApiQuery};

/// The URL a client reached this service at (`http://` + its Host header), what an
/// installer fetches its configuration from.
pub fn base_url(headers: &HeaderMap, fallback: std::net::SocketAddr) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b)));
    format!("http://{}", host.map_or_else(|| fallback.to_string(), str::to_owned))
}

/// A script or configuration answer: plain text, never cached.
fn plain(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], body).into_response()
}

/// Bytes a boot fetches.
fn octets(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/octet-stream")], body).into_response()
}

async fn script(
    app: &AppState,
    address: ClientAddr,
    headers: &HeaderMap,
    query: ScriptQuery,
    dialect: Dialect,
) -> ApiResult<Response> {
    let base = base_url(headers, app.config.listen);
    ipxe::script(app, address.0, &base, query, dialect).await.map(plain)
}

/// `GET /boot/ipxe?mac=` (or `?claim=&mac=` from a per-boot ISO): the iPXE script for the
/// node's next step.
pub async fn ipxe_script(
    State(app): State<AppState>,
    address: ClientAddr,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<ScriptQuery>,
) -> ApiResult<Response> {
    script(&app, address, &headers, query, Dialect::Ipxe).await
}

/// `GET /boot/grub?mac=` (or `?claim=&mac=`): the same in GRUB's language.
pub async fn grub_script(
    State(app): State<AppState>,
    address: ClientAddr,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<ScriptQuery>,
) -> ApiResult<Response> {
    script(&app, address, &headers, query, Dialect::Grub).await
}

/// `GET /boot/files/{vmlinuz|initrd}?token=[&arch=aarch64]`: the ramdisk, for holders of a
/// live token (`ipxe::file`).
pub async fn file(
    State(app): State<AppState>,
    ClientAddr(address): ClientAddr,
    ApiPath(name): ApiPath<String>,
    ApiQuery(query): ApiQuery<FileQuery>,
) -> ApiResult<Response> {
    ipxe::file(&app, address, name, query).await.map(octets)
}

/// `GET /boot/media/{claim}/metal.iso`: the per-boot ISO (`media::iso_file`), with Range, as
/// BMCs read ISOs in pieces.
pub async fn iso_file(
    State(app): State<AppState>,
    ClientAddr(address): ClientAddr,
    headers: HeaderMap,
    ApiPath((claim, name)): ApiPath<(String, String)>,
) -> ApiResult<Response> {
    let template = media::iso_file(&app, address, &claim, &name).await?;
    let part = |start, end| template.part(&claim, start, end);
    crate::files::bytes_response(template.size(), part, &headers, "application/x-iso9660-image")
}

/// `GET /boot/installer/{token}/{user-data|meta-data|vendor-data|ks.cfg}`
/// (`ipxe::installer_file`).
pub async fn installer_file(
    State(app): State<AppState>,
    ClientAddr(address): ClientAddr,
    headers: HeaderMap,
    ApiPath((token, name)): ApiPath<(String, String)>,
) -> ApiResult<Response> {
    let base = base_url(&headers, app.config.listen);
    ipxe::installer_file(&app, address, &base, token, name).await.map(plain)
}

/// `POST /boot/installer/{token}/done` (`ipxe::installer_done`).
pub async fn installer_done(
    State(app): State<AppState>,
    ClientAddr(address): ClientAddr,
    ApiPath(token): ApiPath<String>,
) -> ApiResult<StatusCode> {
    ipxe::installer_done(&app, address, token).await.map(|()| StatusCode::NO_CONTENT)
}
