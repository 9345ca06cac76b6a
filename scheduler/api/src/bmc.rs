//! BMC routes (platform admins only): a node's BMC settings (the password is write-only),
//! power, boot override, virtual media, what the BMC reports, password rotation, and
//! discovery. Power and media calls return once the BMC reports the result. Power and the
//! serial console also answer a lessee for the node of its live lease, through the
//! platform's BMC session (`metal_machines::lessee`).

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use futures::{SinkExt, StreamExt as _};
use metal_machines::metal::console::ClientEnd;

use crate::ApiPath;
use axum::http::StatusCode;
use axum::response::Response;

use super::{ApiJson, Caller};
use crate::AppState;
use crate::paging::Paging;
use metal_machines::metal::bmcs;
use metal_types::error::ApiResult;
use metal_types::model::bmc::{
    BmcInfo, BmcSpec, BootRequest, ConsoleSession, DiscoverRequest, DiscoverResult, MediaInfo, MediaRequest,
    PowerRequest, PowerResult, PowerStatus, RotateRequest,
};
use metal_types::page::PageQuery;

/// Set how to reach a node's BMC.
#[utoipa::path(put, path = "/v1/nodes/{id}/bmc", params(("id" = String, Path, description = "node id")), request_body = BmcSpec,
    responses((status = 200, body = BmcInfo), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn put_bmc(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(spec): ApiJson<BmcSpec>,
) -> ApiResult<ApiJson<BmcInfo>> {
    caller.admin(&format!("node {id}"))?;
    Ok(ApiJson(bmcs::set(&app, id, spec).await?))
}

/// How a node's BMC is reached (never its password).
#[utoipa::path(get, path = "/v1/nodes/{id}/bmc", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = BmcInfo), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_bmc(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<BmcInfo>> {
    caller.admin(&format!("node {id}"))?;
    Ok(ApiJson(bmcs::info(&app, id).await?))
}

/// The node's power, read from its BMC now (a lessee: for the node of its live lease).
#[utoipa::path(get, path = "/v1/nodes/{id}/power", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = PowerStatus), (status = 404, body = metal_types::error::ErrorBody),
        (status = 409, body = metal_types::error::ErrorBody), (status = 502, body = metal_types::error::ErrorBody)))]
pub async fn get_power(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<PowerStatus>> {
    let power = match caller.lessee() {
        Some(lessee) => lessee.power_status(&app, &id).await?,
        None => bmcs::power_status(&app, &id).await?,
    };
    Ok(ApiJson(PowerStatus { power }))
}

/// Power on, off, reset or cycle; answers once the BMC reports the result. A lessee may for
/// the deployed node of its live lease (rate-limited per lease, recorded as `lessee.power`
/// on the node and the lease).
#[utoipa::path(post, path = "/v1/nodes/{id}/power", params(("id" = String, Path, description = "node id")), request_body = PowerRequest,
    responses((status = 200, body = PowerResult), (status = 404, body = metal_types::error::ErrorBody),
        (status = 409, body = metal_types::error::ErrorBody), (status = 429, body = metal_types::error::ErrorBody),
        (status = 502, body = metal_types::error::ErrorBody)))]
pub async fn post_power(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<PowerRequest>,
) -> ApiResult<ApiJson<PowerResult>> {
    match caller.lessee() {
        Some(lessee) => Ok(ApiJson(lessee.power(&app, &id, request.action).await?)),
        None => Ok(ApiJson(bmcs::power(&app, &id, request.action).await?)),
    }
}

/// Set the boot override (read back).
#[utoipa::path(post, path = "/v1/nodes/{id}/boot", params(("id" = String, Path, description = "node id")), request_body = BootRequest,
    responses((status = 204), (status = 502, body = metal_types::error::ErrorBody)))]
pub async fn post_boot(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<BootRequest>,
) -> ApiResult<StatusCode> {
    caller.admin(&format!("node {id}"))?;
    // An operator's network or CD boot is a boot the scheduler started: its ramdisk may
    // take one token (armed only after the BMC took the override).
    bmcs::boot(&app, &id, &request).await?;
    if matches!(request.target, metal_bmc::BootTarget::Pxe | metal_bmc::BootTarget::Cd) {
        bmcs::arm(&app, &id, &format!("operator {}", caller.0.id), None).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// What the virtual CD holds.
#[utoipa::path(get, path = "/v1/nodes/{id}/media", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = MediaInfo), (status = 502, body = metal_types::error::ErrorBody)))]
pub async fn get_media(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<MediaInfo>> {
    caller.admin(&format!("node {id}"))?;
    Ok(ApiJson(bmcs::media_status(&app, &id).await?))
}

/// Insert an ISO by URL as the virtual CD.
#[utoipa::path(post, path = "/v1/nodes/{id}/media", params(("id" = String, Path, description = "node id")), request_body = MediaRequest,
    responses((status = 200, body = MediaInfo), (status = 502, body = metal_types::error::ErrorBody)))]
pub async fn post_media(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<MediaRequest>,
) -> ApiResult<ApiJson<MediaInfo>> {
    caller.admin(&format!("node {id}"))?;
    Ok(ApiJson(bmcs::media(&app, &id, Some(&request.url)).await?))
}

/// Eject the virtual CD.
#[utoipa::path(delete, path = "/v1/nodes/{id}/media", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = MediaInfo), (status = 502, body = metal_types::error::ErrorBody)))]
pub async fn delete_media(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<MediaInfo>> {
    caller.admin(&format!("node {id}"))?;
    Ok(ApiJson(bmcs::media(&app, &id, None).await?))
}

/// Everything the BMC reports: identity, health, power, temperatures, power draw,
/// firmware, newest log entries (sections it lacks are `absent` with a reason).
#[utoipa::path(get, path = "/v1/nodes/{id}/bmc/readings", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = Object), (status = 502, body = metal_types::error::ErrorBody)))]
pub async fn get_readings(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<serde_json::Value>> {
    caller.admin(&format!("node {id}"))?;
    Ok(ApiJson(bmcs::read_model(&app, &id).await?))
}

/// Rotate the BMC password the service uses (stored only once the BMC took it). Refused with
/// 409 while a workflow (a teardown, which rotates the credential itself) runs on the node,
/// and with 422 when the BMC refuses the password.
#[utoipa::path(post, path = "/v1/nodes/{id}/bmc/rotate", params(("id" = String, Path, description = "node id")), request_body = RotateRequest,
    responses((status = 200, body = BmcInfo), (status = 409, body = metal_types::error::ErrorBody),
        (status = 422, body = metal_types::error::ErrorBody), (status = 502, body = metal_types::error::ErrorBody)))]
pub async fn rotate_bmc(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<RotateRequest>,
) -> ApiResult<ApiJson<BmcInfo>> {
    caller.admin(&format!("node {id}"))?;
    request.password.check("password")?;
    Ok(ApiJson(bmcs::rotate(&app, &id, request.password.0).await?))
}

/// Scan a private range for Redfish BMCs (at most 512 addresses, at most three
/// credentials per BMC), optionally enrolling what a credential opened.
#[utoipa::path(post, path = "/v1/bmcs/discover", request_body = DiscoverRequest,
    responses((status = 200, body = DiscoverResult), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn discover(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<DiscoverRequest>,
) -> ApiResult<ApiJson<DiscoverResult>> {
    caller.admin("bmcs")?;
    Ok(ApiJson(metal_machines::metal::discovery::discover(&app, request).await?))
}

/// The node's serial console as a WebSocket (IPMI Serial-over-LAN): binary messages both
/// ways, one writer at a time (409 while another session holds it). Every session is
/// recorded (who, which node, when, bytes each way). A browser, which cannot send an
/// Authorization header here, offers the subprotocols `metal.console` and
/// `metal.bearer.<base64url of its token>`. A lessee may open it for the deployed node of
/// its live lease; its session is closed, with a last line saying why, once the lease no
/// longer reaches the node.
#[utoipa::path(get, path = "/v1/nodes/{id}/console", params(("id" = String, Path, description = "node id")),
    responses((status = 101, description = "switching to the WebSocket protocol"), (status = 404, body = metal_types::error::ErrorBody),
        (status = 409, body = metal_types::error::ErrorBody), (status = 429, body = metal_types::error::ErrorBody),
        (status = 502, body = metal_types::error::ErrorBody)))]
pub async fn console(
    State(app): State<AppState>,
    super::auth::SocketCaller(caller): super::auth::SocketCaller,
    ApiPath(id): ApiPath<String>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let lessee = caller.lessee();
    if let Some(lessee) = &lessee {
        lessee.leased(&app, &id, metal_types::model::lessee::LesseeAction::Console).await?;
    }
    let upgrade = upgrade.map_err(|rejection| {
        metal_types::error::ApiError::invalid(
            "upgrade",
            format!("the console is a WebSocket: {}", rejection.body_text()),
        )
    })?;
    let (child, session, scope) = match &lessee {
        Some(lessee) => {
            let (child, session, scope) = lessee.open_console(&app, &id).await?;
            (child, session, Some(scope))
        }
        None => {
            let (child, session) = bmcs::open_console(&app, &id, &caller.0.id).await?;
            (child, session, None)
        }
    };
    tracing::info!(node = %id, credential = %caller.0.id, %session, lessee = scope.is_some(), "console session opened");
    // A browser offers its token as a subprotocol (auth.rs) and needs one answered back.
    let upgrade = upgrade.protocols([super::auth::CONSOLE_PROTOCOL]);
    Ok(upgrade.on_upgrade(move |socket| {
        metal_machines::metal::console::bridge(app.machines, Browser(socket), child, session, scope)
    }))
}

/// The node's console sessions, newest first, a page at a time (audit): who opened each (a
/// credential, or `ssh-key SHA256:...` for the SSH gateway), when, until when, bytes each
/// way. A lessee sees those of its node since its lease started.
#[utoipa::path(get, path = "/v1/nodes/{id}/console/sessions", params(("id" = String, Path, description = "node id"), PageQuery),
    responses((status = 200, body = Vec<ConsoleSession>), (status = 404, body = metal_types::error::ErrorBody),
        (status = 409, body = metal_types::error::ErrorBody)))]
pub async fn console_sessions(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    paging: Paging,
) -> ApiResult<Response> {
    let since = match caller.lessee() {
        Some(lessee) => Some(lessee.leased(&app, &id, metal_types::model::lessee::LesseeAction::Read).await?.1.start),
        None => None,
    };
    let page = paging.page.clone();
    let sessions = app.store.read(move |c| metal_store::bmcs::console_sessions(c, &id, since, &page)).await?;
    Ok(paging.answer(sessions))
}

/// A browser's end of a console bridge: its WebSocket.
struct Browser(WebSocket);

impl ClientEnd for Browser {
    async fn recv(&mut self) -> Option<Vec<u8>> {
        loop {
            return match self.0.next().await {
                Some(Ok(Message::Text(text))) => Some(text.as_bytes().to_vec()),
                Some(Ok(Message::Binary(bytes))) => Some(bytes.to_vec()),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Close(_)) | Err(_)) | None => None,
            };
        }
    }

    async fn send(&mut self, bytes: Vec<u8>) -> bool {
        SinkExt::send(&mut self.0, Message::Binary(bytes.into())).await.is_ok()
    }

    async fn close(mut self) {
        let _ = SinkExt::send(&mut self.0, Message::Close(None)).await;
    }
}
