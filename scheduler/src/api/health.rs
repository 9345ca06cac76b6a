//! Liveness and metrics.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::app::AppState;
use crate::error::ApiResult;
use crate::store;

/// Health: answers 200 when the database answers.
#[utoipa::path(get, path = "/healthz", security(()), responses((status = 200, description = "healthy", body = String)))]
pub async fn healthz(State(app): State<AppState>) -> ApiResult<&'static str> {
    sqlx::query("SELECT 1").execute(app.store.pool()).await?;
    Ok("ok\n")
}

/// Prometheus metrics.
pub async fn metrics(State(app): State<AppState>) -> ApiResult<impl IntoResponse> {
    let nodes = store::nodes::count_by_state(app.store.pool()).await?;
    let last = store::events::last_seq(app.store.pool()).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render(&nodes, last)))
}
