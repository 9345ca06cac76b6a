//! Reservation routes: create (placement, idempotency), read, cancel and release. A node
//! binding becomes active when the metal side's lease binds (`capacity::leases`).
//!
//! Idempotency follows Stripe: the same key with the same body (compared as canonical JSON)
//! replays the first response, status included; the same key with another body is refused.
//! Keys are per tenant and kept 24 hours. Validation errors are not recorded.

use axum::extract::State;

use crate::paging::Paging;
use crate::{ApiPath, ApiQuery};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest as _, Sha256};

use super::{ApiJson, Caller};
use crate::AppState;
use metal_store::{self as store, capacity::StoredResponse};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::reservation::{Reservation, ReservationCreate, ReservationFilter, ReservationState, Window};
use metal_types::page::PageQuery;

fn visible(caller: &Caller, tenant: &str, what: &str) -> ApiResult<()> {
    match caller.tenant_scope() {
        Some(own) if own != tenant => Err(ApiError::NotFound(what.to_owned())),
        _ => Ok(()),
    }
}

/// Create a reservation: validate, place whole nodes in the window, book them.
#[utoipa::path(post, path = "/v1/reservations", request_body = ReservationCreate,
    responses((status = 201, body = Reservation), (status = 409, description = "no placement (the message counts each constraint)", body = metal_types::error::ErrorBody),
               (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn create_reservation(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<serde_json::Value>,
) -> ApiResult<Response> {
    let request: ReservationCreate =
        serde_json::from_value(body.clone()).map_err(|e| ApiError::BadBody(e.to_string()))?;
    visible(&caller, &request.tenant_id, &format!("tenant {}", request.tenant_id))?;
    let now = app.clock.now();
    let window = request.validate(now)?;
    let body_hash = metal_protocol::canonical::to_canonical_vec(&body)
        .map(|bytes| hex::encode(Sha256::digest(bytes)))
        .map_err(|e| ApiError::BadBody(e.to_string()))?;
    let mut written = Err(ApiError::Busy(KEY_RACE.into()));
    for _ in 0..2 {
        let (state, request, window, body_hash) = (app.clone(), request.clone(), window.clone(), body_hash.clone());
        written = app.store.write(move |tx| create_in(&state, tx, &request, &window, body_hash, now)).await;
        if !matches!(&written, Err(ApiError::Busy(message)) if message == KEY_RACE) {
            break;
        }
    }
    match written {
        Ok(Created::Replay(stored)) => Ok(replay(&stored)),
        Ok(Created::Placed(json)) => {
            app.store.events_committed();
            Ok((StatusCode::CREATED, [(axum::http::header::CONTENT_TYPE, "application/json")], json).into_response())
        }
        Ok(Created::Refused(e)) => Err(e),
        Err(e) => {
            // The booking may be in the cache but did not commit.
            app.placement.invalidate();
            Err(e)
        }
    }
}

/// Why a create rolled back when its idempotency key was recorded by another request first.
const KEY_RACE: &str = "a request with this idempotency key finished meanwhile; retry to get its answer";

/// What a create transaction did.
enum Created {
    /// The key was used before with this body: the first response again.
    Replay(StoredResponse),
    /// Placed and booked: the reservation as JSON.
    Placed(String),
    /// Refused (no placement, or no such pool), recorded under the key when there is one.
    Refused(ApiError),
}

/// A node binding's profile must be the tenant's own or public, and its version (when
/// given; the lease start refuses a reservation without one) must exist. Returns the
/// machine architecture of the version's image, when it deploys one.
fn check_profile(
    tx: &mut dyn store::Conn,
    tenant: &str,
    id: &str,
    version: Option<u32>,
) -> ApiResult<Option<&'static str>> {
    let profile = store::profiles::get(tx, id)?.filter(|p| p.tenant_id == tenant || p.public);
    let Some(profile) = profile else {
        return Err(ApiError::invalid("node.profileId", format!("no profile {id} of tenant {tenant} or public")));
    };
    let Some(version) = version else { return Ok(None) };
    let Some(found) = profile.versions.iter().find(|v| v.version == i64::from(version)) else {
        return Err(ApiError::invalid(
            "node.profileVersion",
            format!("profile {id} has no version {version} (its latest is {})", profile.latest_version),
        ));
    };
    let image = match &found.image_id {
        Some(image) => store::images::get(tx, image)?,
        None => None,
    };
    Ok(image.map(|image| image.origin.machine_architecture()))
}

fn create_in(
    app: &AppState,
    tx: &mut dyn store::Conn,
    request: &ReservationCreate,
    window: &Window,
    body_hash: String,
    now: time::OffsetDateTime,
) -> ApiResult<Created> {
    if let Some(key) = &request.idempotency_key
        && let Some(stored) = store::capacity::idempotent_response(tx, &request.tenant_id, key, now)?
    {
        if stored.body_hash != body_hash {
            return Err(ApiError::invalid("idempotencyKey", "was already used with a different request body"));
        }
        return Ok(Created::Replay(stored));
    }
    // Only for a pool the tenant may see: placement answers for the others. A profile's
    // image decides the machines' architecture when the request names none.
    let mut request = request.clone();
    if let Some(metal_types::model::reservation::NodeProfile { profile_id: Some(id), profile_version }) = &request.node
        && store::capacity::pool_access(tx, &request.pool_id, &request.tenant_id)?.is_some_and(|a| a.visible)
        && let Some(image_arch) = check_profile(tx, &request.tenant_id, id, *profile_version)?
    {
        match &request.architecture {
            Some(asked) if asked != image_arch => {
                return Err(ApiError::invalid(
                    "architecture",
                    format!("{asked}, but profile {id}'s image is for {image_arch} machines"),
                ));
            }
            _ => request.architecture = Some(image_arch.to_owned()),
        }
    }
    let request = &request;
    // Placement outcomes (a booking, or a refusal) are recorded under the key; validation
    // and internal errors are not, so a corrected retry with the same key can succeed.
    // A refusal that asks for a retry (placement raced other writers) is not an answer to
    // keep: the retry must be able to succeed.
    let outcome = match metal_capacity::place_and_book(&app.placement, tx, request, window, now) {
        Ok(reservation) => Ok(reservation),
        Err(e @ (ApiError::Conflict(_) | ApiError::NotFound(_))) => Err(e),
        Err(other) => return Err(other),
    };
    let (status, json) = match &outcome {
        Ok(reservation) => (StatusCode::CREATED, serde_json::to_string(reservation)),
        Err(e) => (e.status(), serde_json::to_string(&e.body())),
    };
    let json = json.map_err(|e| ApiError::Internal(e.to_string()))?;
    if let Some(key) = &request.idempotency_key {
        let stored = StoredResponse { body_hash, status: status.as_u16(), response: json.clone() };
        if !store::capacity::record_response(tx, &request.tenant_id, key, &stored, now)? {
            // The same key finished on another replica meanwhile: this booking rolls back, and
            // the request runs again to replay that answer.
            return Err(ApiError::Busy(KEY_RACE.into()));
        }
    }
    Ok(match outcome {
        Ok(_) => Created::Placed(json),
        Err(e) => Created::Refused(e),
    })
}

fn replay(stored: &StoredResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut response =
        (status, [(axum::http::header::CONTENT_TYPE, "application/json")], stored.response.clone()).into_response();
    response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

/// Reservations, newest first, a page at a time: a tenant's own, or all for admins.
#[utoipa::path(get, path = "/v1/reservations", params(ReservationFilter, PageQuery),
    responses((status = 200, body = Vec<Reservation>)))]
pub async fn list_reservations(
    State(app): State<AppState>,
    caller: Caller,
    ApiQuery(filter): ApiQuery<ReservationFilter>,
    paging: Paging,
) -> ApiResult<Response> {
    let scope = caller.tenant_scope().map(str::to_owned);
    let page = paging.page.clone();
    let reservations =
        app.store.read(move |conn| store::capacity::page_reservations(conn, scope.as_deref(), &filter, &page)).await?;
    Ok(paging.answer(reservations))
}

/// One reservation.
#[utoipa::path(get, path = "/v1/reservations/{id}", params(("id" = String, Path, description = "reservation id")),
    responses((status = 200, body = Reservation), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_reservation(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Reservation>> {
    Ok(ApiJson(load(&app, &caller, id).await?))
}

/// A reservation the caller may see.
async fn load(app: &AppState, caller: &Caller, id: String) -> ApiResult<Reservation> {
    let what = format!("reservation {id}");
    let reservation = app.store.read(move |conn| store::capacity::get_reservation(conn, &id)).await?;
    let reservation = reservation.ok_or_else(|| ApiError::NotFound(what.clone()))?;
    visible(caller, &reservation.tenant_id, &what)?;
    Ok(reservation)
}

async fn change(
    app: &AppState,
    caller: &Caller,
    id: &str,
    from: &[ReservationState],
    to: ReservationState,
    reason: &str,
) -> ApiResult<ApiJson<Reservation>> {
    let what = format!("reservation {id}");
    let (id, from, reason, now, scope) =
        (id.to_owned(), from.to_vec(), reason.to_owned(), app.clock.now(), caller.tenant_scope().map(str::to_owned));
    let updated = app
        .store
        .change(move |tx| {
            let current = store::capacity::get_reservation(tx, &id)?.ok_or_else(|| ApiError::NotFound(what.clone()))?;
            if scope.is_some_and(|own| own != current.tenant_id) {
                return Err(ApiError::NotFound(what));
            }
            metal_capacity::leases::set_state(tx, &id, &from, to, Some(&reason), now)
        })
        .await?;
    Ok(ApiJson(updated))
}

/// Cancel a pending or active reservation; its nodes are free from now on.
#[utoipa::path(post, path = "/v1/reservations/{id}/cancel", params(("id" = String, Path, description = "reservation id")),
    responses((status = 200, body = Reservation), (status = 409, body = metal_types::error::ErrorBody)))]
pub async fn cancel_reservation(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Reservation>> {
    change(
        &app,
        &caller,
        &id,
        &[ReservationState::Pending, ReservationState::Active],
        ReservationState::Cancelled,
        "cancelled",
    )
    .await
}

/// Release an active lease before its end.
#[utoipa::path(post, path = "/v1/reservations/{id}/release", params(("id" = String, Path, description = "reservation id")),
    responses((status = 200, body = Reservation), (status = 409, body = metal_types::error::ErrorBody)))]
pub async fn release_reservation(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Reservation>> {
    change(&app, &caller, &id, &[ReservationState::Active], ReservationState::Ended, "released").await
}
