//! Admin views of hosts: the deployed OSes that joined (`metal::boot::hosts`) and each
//! node's join log, refusals included; and enrolments of machines that already run an OS.

use axum::extract::State;
use axum::response::Response;
use metal_types::page::PageQuery;

use crate::paging::{Paging, node_rows};

use crate::AppState;
use crate::{ApiJson, ApiPath, Caller};
use metal_machines::metal::boot::BootService;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::host::{Enrolment, EnrolmentCreate, Host, JoinInfo, JoinLogEntry};
use metal_types::model::node::NodeState;
use serde_json::json;

/// The hosts, by node id, a page at a time.
#[utoipa::path(get, path = "/v1/hosts", params(PageQuery), responses((status = 200, body = Vec<Host>)))]
pub async fn list_hosts(State(app): State<AppState>, caller: Caller, paging: Paging) -> ApiResult<Response> {
    caller.admin("hosts")?;
    let page = paging.page.clone();
    Ok(paging.answer(app.store.read(move |tx| store::hosts::page(tx, &page)).await?))
}

/// The host of a node.
#[utoipa::path(get, path = "/v1/hosts/{id}", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = Host), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_host(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Host>> {
    caller.admin(&format!("host {id}"))?;
    let what = format!("host {id} (its node has not joined)");
    let found = app.store.read(move |tx| store::hosts::get(tx, &id)).await?;
    found.map(ApiJson).ok_or(ApiError::NotFound(what))
}

/// Every step of every join of a node, oldest first: tokens issued, certificates, each
/// network and pool applied or refused, first boots that stopped, renewals.
#[utoipa::path(get, path = "/v1/hosts/{id}/join-log", params(("id" = String, Path, description = "node id"), PageQuery),
    responses((status = 200, body = Vec<JoinLogEntry>), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn join_log(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    paging: Paging,
) -> ApiResult<Response> {
    node_rows(&app, &caller, id, &store::hosts::JOIN_LOG, paging).await
}

/// Enrols a machine that already runs an OS: a single-use enrolment token for the node (its
/// current identity generation), shown once, with what the host needs to join over the
/// pinned site CA. `metalctl host add` and the offline bundle use it.
#[utoipa::path(post, path = "/v1/hosts/enrolments", request_body = EnrolmentCreate,
    responses((status = 201, body = Enrolment), (status = 404, body = metal_types::error::ErrorBody),
              (status = 409, body = metal_types::error::ErrorBody), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn create_enrolment(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<EnrolmentCreate>,
) -> ApiResult<(axum::http::StatusCode, ApiJson<Enrolment>)> {
    caller.admin("hosts")?;
    request.setup.validate().map_err(|e| ApiError::invalid(format!("setup.{}", e.field), e.message))?;
    let ttl = match &request.ttl {
        Some(text) => metal_types::duration::parse_duration(text).map_err(|e| ApiError::invalid("ttl", e))?,
        None => app.config.boot.host_token_ttl,
    };
    if ttl.is_zero() || ttl > std::time::Duration::from_secs(7 * 86400) {
        return Err(ApiError::invalid("ttl", "must be more than 0 and at most 7d"));
    }
    let join = join_template(&app).await?;
    let now = app.clock.now();
    let (node_id, setup) = (request.node_id.clone(), request.setup.clone());
    let (token, id) = app
        .store
        .change(move |tx| {
            store::nodes::lock(tx, &node_id)?;
            let node = store::nodes::get(tx, &node_id)?.ok_or_else(|| ApiError::NotFound(format!("node {node_id}")))?;
            if !matches!(node.state, NodeState::New | NodeState::Deployed) {
                return Err(ApiError::Conflict(format!(
                    "node {} is {}: a machine that already runs an OS is new or deployed",
                    node.id, node.state
                )));
            }
            let token_request = store::hosts::TokenRequest {
                node_id: &node.id,
                identity_generation: node.identity_generation,
                profile: None,
                setup: &setup,
                origin: store::hosts::TokenOrigin::Operator,
            };
            let (token, id) = store::hosts::issue_token(tx, token_request, now, ttl)?;
            let detail = format!("enrolment token {id} issued by an operator, valid until {}", now + ttl);
            store::hosts::log(tx, &node.id, node.identity_generation, "token", true, &detail, now)?;
            let data = json!({"node": node.id, "enrolmentToken": id, "expiresAt": (now + ttl).to_string()});
            store::events::append(tx, "host.enrolment.created", &format!("node/{}", node.id), None, &data, now)?;
            Ok((token, id))
        })
        .await?;
    Ok((
        axum::http::StatusCode::CREATED,
        ApiJson(Enrolment {
            id,
            node_id: request.node_id,
            token,
            expires_at: now + ttl,
            controller_url: join.controller_url,
            ca_pem: join.ca_pem,
            ca_fingerprint: join.ca_fingerprint,
            install_sha256: join.install_sha256,
        }),
    ))
}

/// The join without a token, or why hosts cannot join.
async fn join_template(app: &AppState) -> ApiResult<metal_protocol::cloudinit::FirstBootJoin> {
    let service = BootService::of(app)
        .map_err(|_| ApiError::InvalidConfig("hosts join on the boot listener (set boot-listen)".into()))?;
    metal_machines::metal::boot::hosts::join_template(service).await.ok_or_else(|| {
        ApiError::InvalidConfig("the boot files have no metal-agent to serve (see boot-files-dir)".into())
    })
}

/// What a host needs to join, but a token: the boot listener's URL, the site CA and its
/// pin, the join script's digest (the offline bundle carries them).
#[utoipa::path(get, path = "/v1/hosts/join-info",
    responses((status = 200, body = JoinInfo), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn join_info(State(app): State<AppState>, caller: Caller) -> ApiResult<ApiJson<JoinInfo>> {
    caller.admin("hosts")?;
    let join = join_template(&app).await?;
    Ok(ApiJson(JoinInfo {
        controller_url: join.controller_url,
        ca_pem: join.ca_pem,
        ca_fingerprint: join.ca_fingerprint,
        install_sha256: join.install_sha256,
    }))
}
