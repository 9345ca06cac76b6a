//! Reservation routes: create (placement, idempotency), read, cancel, release, and bind
//! (the metal side's "deploy complete" for node bindings).
//!
//! Idempotency follows Stripe: the same key with the same body (compared as canonical JSON)
//! replays the first response, status included; the same key with another body is refused.
//! Keys are per tenant and kept 24 hours. Validation errors are not recorded.

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest as _, Sha256};

use super::{ApiJson, Caller};
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::model::reservation::{Reservation, ReservationCreate, ReservationState};
use crate::store::{self, capacity::StoredResponse};

fn visible(caller: &Caller, tenant: &str, what: &str) -> ApiResult<()> {
    match caller.tenant_scope() {
        Some(own) if own != tenant => Err(ApiError::NotFound(what.to_owned())),
        _ => Ok(()),
    }
}

/// Create a reservation: validate, place whole nodes in the window, book them.
#[utoipa::path(post, path = "/v1/reservations", request_body = ReservationCreate,
    responses((status = 201, body = Reservation), (status = 409, description = "no placement (the message counts each constraint)", body = crate::error::ErrorBody),
               (status = 422, body = crate::error::ErrorBody)))]
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
    let mut tx = app.store.write().await?;
    if let Some(key) = &request.idempotency_key
        && let Some(stored) = store::capacity::idempotent_response(&mut tx.tx, &request.tenant_id, key, now).await?
    {
        if stored.body_hash != body_hash {
            return Err(ApiError::invalid("idempotencyKey", "was already used with a different request body"));
        }
        return Ok(replay(&stored));
    }
    // Placement outcomes (a booking, or a refusal) are recorded under the key; validation
    // and internal errors are not, so a corrected retry with the same key can succeed.
    let outcome = match crate::capacity::place_and_book(&app.placement, &mut tx.tx, &request, &window, now).await {
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
        store::capacity::record_response(&mut tx.tx, &request.tenant_id, key, &stored, now).await?;
    }
    if let Err(e) = tx.commit().await {
        app.placement.invalidate();
        return Err(e.into());
    }
    app.events.notify_waiters();
    outcome.map(|_| (status, [(axum::http::header::CONTENT_TYPE, "application/json")], json).into_response())
}

fn replay(stored: &StoredResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut response =
        (status, [(axum::http::header::CONTENT_TYPE, "application/json")], stored.response.clone()).into_response();
    response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

/// Reservations: a tenant's own, or all for admins.
#[utoipa::path(get, path = "/v1/reservations", responses((status = 200, body = Vec<Reservation>)))]
pub async fn list_reservations(State(app): State<AppState>, caller: Caller) -> ApiResult<ApiJson<Vec<Reservation>>> {
    let mut conn = app.store.pool().acquire().await?;
    Ok(ApiJson(store::capacity::list_reservations(&mut conn, caller.tenant_scope()).await?))
}

/// One reservation.
#[utoipa::path(get, path = "/v1/reservations/{id}", params(("id" = String, Path, description = "reservation id")),
    responses((status = 200, body = Reservation), (status = 404, body = crate::error::ErrorBody)))]
pub async fn get_reservation(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<ApiJson<Reservation>> {
    let mut conn = app.store.pool().acquire().await?;
    let what = format!("reservation {id}");
    let reservation =
        store::capacity::get_reservation(&mut conn, &id).await?.ok_or_else(|| ApiError::NotFound(what.clone()))?;
    visible(&caller, &reservation.tenant_id, &what)?;
    Ok(ApiJson(reservation))
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
    let mut tx = app.store.write().await?;
    let current =
        store::capacity::get_reservation(&mut tx.tx, id).await?.ok_or_else(|| ApiError::NotFound(what.clone()))?;
    visible(caller, &current.tenant_id, &what)?;
    let updated = store::capacity::set_state(&mut tx.tx, id, from, to, Some(reason), app.clock.now()).await?;
    tx.commit().await?;
    app.placement.invalidate();
    app.events.notify_waiters();
    Ok(ApiJson(updated))
}

/// Cancel a pending or active reservation; its nodes are free from now on.
#[utoipa::path(post, path = "/v1/reservations/{id}/cancel", params(("id" = String, Path, description = "reservation id")),
    responses((status = 200, body = Reservation), (status = 409, body = crate::error::ErrorBody)))]
pub async fn cancel_reservation(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
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
    responses((status = 200, body = Reservation), (status = 409, body = crate::error::ErrorBody)))]
pub async fn release_reservation(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<ApiJson<Reservation>> {
    change(&app, &caller, &id, &[ReservationState::Active], ReservationState::Ended, "released").await
}

/// Mark a node binding bound (its deploy completed): it becomes active and billing starts.
/// Admin only: this is the metal side's row until the tenant-root workflow lands.
#[utoipa::path(post, path = "/v1/reservations/{id}/bind", params(("id" = String, Path, description = "reservation id")),
    responses((status = 200, body = Reservation), (status = 409, body = crate::error::ErrorBody)))]
pub async fn bind_reservation(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<ApiJson<Reservation>> {
    caller.admin(&format!("reservation {id}"))?;
    let mut conn = app.store.pool().acquire().await?;
    let current = store::capacity::get_reservation(&mut conn, &id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("reservation {id}")))?;
    drop(conn);
    if current.request.binding.is_none() {
        return Err(ApiError::Conflict(format!("reservation {id} has no node binding to bind")));
    }
    change(&app, &caller, &id, &[ReservationState::Pending], ReservationState::Active, "bound: deploy completed").await
}
