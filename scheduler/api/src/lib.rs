//! The HTTP API: routes, the request-counting middleware, the OpenAPI document generated
//! from the handlers, and serving them (`serve`). Its extractors (`ApiJson`, `ApiPath`,
//! `ApiQuery`) live in `metal_types::extract`, so the boot service's handlers use them too.

mod auth;
mod bmc;
mod boot;
pub mod boot_service;
mod console;
pub mod contract;
mod events;
mod files;
mod firmware;
mod health;
mod hosts;
pub mod http_server;
mod images;
mod nodes;
mod paging;
pub use nodes::parse_csv;
pub mod passes;
mod pools;
mod profiles;
mod reservations;
mod serve;
pub use serve::{Listeners, serve};
mod state;
pub use state::{AppState, start};
mod switches;
mod teardowns;
mod tenants;
mod usage;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Router, middleware};
use utoipa::OpenApi;

pub use auth::Caller;

use metal_types::error::ApiError;

/// Largest node import body (CSV or JSON): room for tens of thousands of nodes.
const IMPORT_LIMIT: usize = 64 << 20;

pub use metal_types::extract::{ApiJson, ApiPath, ApiQuery};

/// The OpenAPI document of every route.
#[derive(OpenApi)]
#[openapi(
    info(title = "metal-scheduler", description = "The metal control plane API. Errors are always {\"error\": {\"code\", \"message\", \"field\"}}."),
    paths(
        health::healthz,
        nodes::create_node,
        nodes::import_nodes,
        nodes::list_nodes,
        nodes::get_node,
        nodes::list_leases,
        nodes::patch_node,
        nodes::transition_node,
        teardowns::list_teardowns,
        teardowns::recover_node,
        tenants::create_tenant,
        tenants::list_tenants,
        tenants::get_tenant,
        tenants::delete_tenant,
        tenants::get_ssh_keys,
        tenants::put_ssh_keys,
        tenants::create_credential,
        tenants::list_credentials,
        tenants::revoke_credential,
        tenants::get_session,
        events::list_events,
        pools::create_pool,
        pools::offer_pool,
        pools::list_pools,
        pools::get_pool,
        reservations::create_reservation,
        reservations::list_reservations,
        reservations::get_reservation,
        reservations::cancel_reservation,
        reservations::release_reservation,
        usage::get_usage,
        bmc::put_bmc,
        bmc::get_bmc,
        bmc::get_power,
        bmc::post_power,
        nodes::reinstall_node,
        nodes::rescue_node,
        nodes::unrescue_node,
        bmc::post_boot,
        bmc::get_media,
        bmc::post_media,
        bmc::delete_media,
        bmc::get_readings,
        bmc::rotate_bmc,
        bmc::discover,
        bmc::console,
        bmc::console_sessions,
        boot::get_inventory,
        switches::create_switch,
        switches::list_switches,
        switches::get_switch,
        switches::delete_switch,
        switches::get_ports,
        switches::put_ports,
        boot::list_boots,
        boot::arm_boot,
        boot::list_wipe_reports,
        boot::list_attestations,
        boot::get_attestation,
        boot::get_attestation_envelope,
        boot::list_baselines,
        boot::approve_baseline,
        boot::retire_baseline,
        boot::revoke_baseline,
        boot::list_firmware_checks,
        boot::get_wipe_report,
        boot::get_wipe_envelope,
        boot::put_deploy_plan,
        hosts::list_hosts,
        hosts::get_host,
        hosts::join_log,
        hosts::create_enrolment,
        hosts::join_info,
        images::import_image,
        images::list_images,
        images::get_image,
        images::promote_image,
        images::delete_image,
        profiles::create_profile,
        profiles::add_version,
        profiles::list_profiles,
        profiles::get_profile,
        profiles::provision,
    ),
    components(schemas(metal_types::error::ErrorBody)),
    modifiers(&BearerAuth)
)]
#[derive(Debug)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.security = Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new())]);
    }
}

/// The OpenAPI document as pretty JSON (what `scheduler/openapi.json` holds).
pub fn openapi_json() -> String {
    let mut document = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    contract::complete(&mut document);
    let mut json = serde_json::to_string_pretty(&document).unwrap_or_default();
    json.push('\n');
    json
}

/// The label of an HTTP method: the standard ones by name, anything a client makes up as
/// `other`, so no client can grow the series without bound.
fn method_label(method: &axum::http::Method) -> &'static str {
    const KNOWN: [&str; 9] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "CONNECT", "TRACE"];
    KNOWN.into_iter().find(|known| *known == method.as_str()).unwrap_or("other")
}

async fn count_requests(state: axum::extract::State<AppState>, request: Request, next: Next) -> Response {
    let method = method_label(request.method());
    let route =
        request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "unmatched".into());
    let response = next.run(request).await;
    state.metrics.count_request(method, &route, response.status().as_u16());
    response
}

/// Every route of the service. The API's and the console's responses are gzipped for a
/// client that accepts it (a 5,000-node list is megabytes of JSON); the event stream is not
/// (the default predicate leaves `text/event-stream` alone, which a compressor would hold
/// back), nor are the firmware's routes.
pub fn router(state: AppState) -> Router {
    let compressed = api_routes()
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::audit_refusals))
        .layer(tower_http::compression::CompressionLayer::new());
    finish(compressed.merge(firmware_routes()), state)
}

/// Only the routes PXE firmware and installers fetch (`/boot/...`, whose URLs carry nothing
/// but one-time tokens) and `/healthz`: what `boot-http-listen` serves in plain HTTP when
/// the API itself is HTTPS.
pub fn firmware_router(state: AppState) -> Router {
    finish(firmware_routes(), state)
}

fn firmware_routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/boot/ipxe", get(firmware::ipxe_script))
        .route("/boot/grub", get(firmware::grub_script))
        .route("/boot/files/{name}", get(firmware::file))
        .route("/boot/media/{claim}/{name}", get(firmware::iso_file))
        .route("/boot/installer/{token}/done", post(firmware::installer_done))
        .route("/boot/installer/{token}/{name}", get(firmware::installer_file))
}

fn api_routes() -> Router<AppState> {
    Router::new()
        .route("/metrics", get(health::metrics))
        .route("/console", get(console::index))
        .route("/console/", get(console::index))
        .route("/console/{*path}", get(console::path))
        .route("/v1/nodes", post(nodes::create_node).get(nodes::list_nodes))
        .route("/v1/nodes/import", post(nodes::import_nodes).layer(axum::extract::DefaultBodyLimit::max(IMPORT_LIMIT)))
        .route("/v1/nodes/{id}", get(nodes::get_node).patch(nodes::patch_node))
        .route("/v1/leases", get(nodes::list_leases))
        .route("/v1/nodes/{id}/transitions", post(nodes::transition_node))
        .route("/v1/nodes/{id}/teardowns", get(teardowns::list_teardowns))
        .route("/v1/nodes/{id}/recover", post(teardowns::recover_node))
        .route("/v1/tenants", post(tenants::create_tenant).get(tenants::list_tenants))
        .route("/v1/tenants/{id}", get(tenants::get_tenant).delete(tenants::delete_tenant))
        .route("/v1/tenants/{id}/ssh-keys", get(tenants::get_ssh_keys).put(tenants::put_ssh_keys))
        .route("/v1/credentials", post(tenants::create_credential).get(tenants::list_credentials))
        .route("/v1/credentials/{id}", axum::routing::delete(tenants::revoke_credential))
        .route("/v1/session", get(tenants::get_session))
        .route("/v1/pools", post(pools::create_pool).get(pools::list_pools))
        .route("/v1/pools/{id}", get(pools::get_pool))
        .route("/v1/pools/{id}/offers", post(pools::offer_pool))
        .route("/v1/reservations", post(reservations::create_reservation).get(reservations::list_reservations))
        .route("/v1/reservations/{id}", get(reservations::get_reservation))
        .route("/v1/reservations/{id}/cancel", post(reservations::cancel_reservation))
        .route("/v1/reservations/{id}/release", post(reservations::release_reservation))
        .route("/v1/usage", get(usage::get_usage))
        .route("/v1/nodes/{id}/bmc", get(bmc::get_bmc).put(bmc::put_bmc))
        .route("/v1/nodes/{id}/bmc/readings", get(bmc::get_readings))
        .route("/v1/nodes/{id}/bmc/rotate", post(bmc::rotate_bmc))
        .route("/v1/nodes/{id}/power", get(bmc::get_power).post(bmc::post_power))
        .route("/v1/nodes/{id}/reinstall", post(nodes::reinstall_node))
        .route("/v1/nodes/{id}/rescue", post(nodes::rescue_node))
        .route("/v1/nodes/{id}/unrescue", post(nodes::unrescue_node))
        .route("/v1/nodes/{id}/boot", post(bmc::post_boot))
        .route("/v1/nodes/{id}/media", get(bmc::get_media).post(bmc::post_media).delete(bmc::delete_media))
        .route("/v1/bmcs/discover", post(bmc::discover))
        .route("/v1/nodes/{id}/console", get(bmc::console))
        .route("/v1/nodes/{id}/console/sessions", get(bmc::console_sessions))
        .route("/v1/nodes/{id}/inventory", get(boot::get_inventory))
        .route("/v1/switches", post(switches::create_switch).get(switches::list_switches))
        .route("/v1/switches/{id}", get(switches::get_switch).delete(switches::delete_switch))
        .route("/v1/nodes/{id}/ports", get(switches::get_ports).put(switches::put_ports))
        .route("/v1/nodes/{id}/boots", get(boot::list_boots).post(boot::arm_boot))
        .route("/v1/nodes/{id}/wipe-reports", get(boot::list_wipe_reports))
        .route("/v1/nodes/{id}/attestations", get(boot::list_attestations))
        .route("/v1/nodes/{id}/attestations/{attestation}", get(boot::get_attestation))
        .route("/v1/nodes/{id}/attestations/{attestation}/envelope", get(boot::get_attestation_envelope))
        .route("/v1/nodes/{id}/boot-baselines", get(boot::list_baselines).post(boot::approve_baseline))
        .route("/v1/nodes/{id}/boot-baselines/{baseline}/retire", post(boot::retire_baseline))
        .route("/v1/nodes/{id}/boot-baselines/{baseline}/revoke", post(boot::revoke_baseline))
        .route("/v1/nodes/{id}/firmware-checks", get(boot::list_firmware_checks))
        .route("/v1/nodes/{id}/wipe-reports/{report}", get(boot::get_wipe_report))
        .route("/v1/nodes/{id}/wipe-reports/{report}/envelope", get(boot::get_wipe_envelope))
        .route("/v1/nodes/{id}/deploy-plan", axum::routing::put(boot::put_deploy_plan))
        .route("/v1/hosts", get(hosts::list_hosts))
        .route("/v1/hosts/enrolments", post(hosts::create_enrolment))
        .route("/v1/hosts/join-info", get(hosts::join_info))
        .route("/v1/hosts/{id}", get(hosts::get_host))
        .route("/v1/hosts/{id}/join-log", get(hosts::join_log))
        .route("/v1/images", post(images::import_image).get(images::list_images))
        .route("/v1/images/{id}", get(images::get_image).delete(images::delete_image))
        .route("/v1/images/{id}/promote", post(images::promote_image))
        .route("/v1/profiles", post(profiles::create_profile).get(profiles::list_profiles))
        .route("/v1/profiles/{id}", get(profiles::get_profile))
        .route("/v1/profiles/{id}/versions", post(profiles::add_version))
        .route("/v1/provision", post(profiles::provision))
        .route("/v1/events", get(events::list_events))
        .route("/v1/events/stream", get(events::stream_events))
}

/// The fallbacks and the request counter every listener's routes share.
fn finish(routes: Router<AppState>, state: AppState) -> Router {
    routes
        .fallback(|state: axum::extract::State<AppState>, method: axum::http::Method| async move {
            // Unmatched paths count under one label, whatever a client asks for.
            state.metrics.count_request(method_label(&method), "unmatched", 404);
            ApiError::NotFound("route".into())
        })
        .method_not_allowed_fallback(|method: axum::http::Method| async move {
            ApiError::MethodNotAllowed(format!("this route does not take {method}"))
        })
        .route_layer(middleware::from_fn_with_state(state.clone(), count_requests))
        .with_state(state)
}
