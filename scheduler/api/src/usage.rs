//! Usage: a tenant's meter records over a time range, with totals.

use axum::extract::State;
use axum::response::Response;
use metal_types::page::PageQuery;

use crate::paging::Paging;

use crate::ApiQuery;
use serde::Deserialize;
use time::OffsetDateTime;
use utoipa::IntoParams;

use super::Caller;
use crate::AppState;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::usage::Usage;

/// Whose usage and when.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(rename_all = "camelCase")]
pub struct UsageQuery {
    /// The tenant (defaults to the caller's own).
    pub tenant_id: Option<String>,
    /// Windows starting at or after this time (RFC 3339; default: the Unix epoch).
    #[param(format = DateTime)]
    pub from: Option<String>,
    /// Windows starting before this time (RFC 3339; default: now).
    #[param(format = DateTime)]
    pub to: Option<String>,
}

fn time_param(field: &str, value: Option<&str>, default: OffsetDateTime) -> ApiResult<OffsetDateTime> {
    value.map_or(Ok(default), |v| {
        OffsetDateTime::parse(v, &time::format_description::well_known::Rfc3339)
            .map_err(|_| ApiError::invalid(field, "must be an RFC 3339 time"))
    })
}

/// Usage by tenant and time range.
/// The records page (`limit`, `cursor`; the next page in the `Link` header); the totals are
/// over the whole range on every page.
#[utoipa::path(get, path = "/v1/usage", params(UsageQuery, PageQuery), responses((status = 200, body = Usage)))]
pub async fn get_usage(
    State(app): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<UsageQuery>,
    paging: Paging,
) -> ApiResult<Response> {
    let tenant = match (caller.tenant_scope(), query.tenant_id) {
        (Some(own), None) => own.to_owned(),
        (Some(own), Some(asked)) if asked != own => return Err(ApiError::NotFound(format!("tenant {asked}"))),
        (_, Some(asked)) => asked,
        (None, None) => return Err(ApiError::invalid("tenantId", "name the tenant whose usage to show")),
    };
    let from = time_param("from", query.from.as_deref(), OffsetDateTime::UNIX_EPOCH)?;
    let to = time_param("to", query.to.as_deref(), app.clock.now())?;
    if from > to {
        return Err(ApiError::invalid("from", "is after to"));
    }
    let (page, range) = (paging.page.clone(), (from, to));
    let (records, totals) = {
        let tenant = tenant.clone();
        app.store
            .read(move |conn| {
                let records = store::billing::usage(conn, &tenant, range, &page)?;
                Ok::<_, ApiError>((records, store::billing::usage_totals(conn, &tenant, range)?))
            })
            .await?
    };
    let link = records.next.clone();
    let usage = Usage { tenant_id: tenant, records: records.items, totals };
    Ok(paging.answer_object(usage, link))
}
