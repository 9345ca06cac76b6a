//! Liveness and metrics.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::AppState;
use metal_store as store;
use metal_types::error::ApiResult;

/// Health: answers 200 when the database answers.
#[utoipa::path(get, path = "/healthz", security(()), responses((status = 200, description = "healthy", body = String)))]
pub async fn healthz(State(app): State<AppState>) -> ApiResult<&'static str> {
    app.store.read(|conn| conn.query("SELECT 1 AS ok", &[])).await?;
    Ok("ok\n")
}

/// Prometheus metrics.
pub async fn metrics(State(app): State<AppState>) -> ApiResult<impl IntoResponse> {
    let (nodes, last) = app
        .store
        .read(|conn| Ok::<_, store::DbError>((store::nodes::count_by_state(conn)?, store::events::last_seq(conn)?)))
        .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render(&nodes, last)))
}
