//! Paging over HTTP (`metal_types::page`): a list route takes `?limit=&cursor=` through
//! the `Paging` extractor and answers the page as a JSON array with, when more follow,
//! `Link: <the same request with the next cursor>; rel="next"` (RFC 8288, as GitHub's API
//! pages), so a client follows links and never builds a cursor itself. `node_rows` is the
//! admin read of a page of one node's rows (wipe reports, boots, join log, ...).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::{AppState, Caller};
use metal_store::page::NodeRows;
use metal_types::error::{ApiError, ApiResult};
use metal_types::extract::ApiQuery;
use metal_types::page::{Page, PageQuery, Paged};

/// The description of the `Link` header in the OpenAPI document.
pub const LINK_HEADER: &str =
    "`<...>; rel=\"next\"`: the next page (the same request with its cursor), when there is one";

/// A list request's page and the URI it came in on (what the next page's link repeats).
#[derive(Debug)]
pub struct Paging {
    /// The validated page.
    pub page: Page,
    uri: Uri,
}

impl<S: Send + Sync> FromRequestParts<S> for Paging {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ApiQuery(query) = ApiQuery::<PageQuery>::from_request_parts(parts, state).await?;
        Ok(Paging { page: query.page()?, uri: parts.uri.clone() })
    }
}

impl Paging {
    /// The page as a JSON array, with the link to the next one when there is one.
    pub fn answer<T: Serialize>(&self, paged: Paged<T>) -> Response {
        self.answer_object(paged.items, paged.next)
    }

    /// `body` (which holds a page, as usage holds its records) with the link to the page
    /// after `next` when there is one.
    pub fn answer_object(&self, body: impl Serialize, next: Option<String>) -> Response {
        let mut response = axum::Json(body).into_response();
        if let Some(link) = next.and_then(|next| HeaderValue::from_str(&self.next_link(&next)).ok()) {
            response.headers_mut().insert(header::LINK, link);
        }
        response
    }

    /// `<path?query>; rel="next"`: the request's own query with its cursor replaced.
    fn next_link(&self, cursor: &str) -> String {
        let mut pairs: Vec<&str> =
            self.uri.query().unwrap_or("").split('&').filter(|p| !p.is_empty() && !p.starts_with("cursor=")).collect();
        let cursor = format!("cursor={cursor}");
        pairs.push(&cursor);
        format!("<{}?{}>; rel=\"next\"", self.uri.path(), pairs.join("&"))
    }
}

/// An admin read of a page of one node's rows: NOT_FOUND for a tenant member and for an
/// unknown node.
pub async fn node_rows<T: Serialize + Send + 'static>(
    app: &AppState,
    caller: &Caller,
    id: String,
    rows: &'static NodeRows<T>,
    paging: Paging,
) -> ApiResult<Response> {
    caller.admin(&format!("node {id}"))?;
    let (what, page) = (format!("node {id}"), paging.page.clone());
    let rows = app
        .store
        .read(move |tx| {
            metal_store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
            rows.page(tx, &id, &page)
        })
        .await?;
    Ok(paging.answer(rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_link_keeps_the_filters_and_replaces_the_cursor() {
        let paging = Paging { page: Page::default(), uri: "/v1/nodes?state=ready&cursor=old&limit=2".parse().unwrap() };
        let link = paging.next_link("new");
        assert_eq!(link, "</v1/nodes?state=ready&limit=2&cursor=new>; rel=\"next\"");
        assert_eq!(metal_types::page::next_cursor(&link).as_deref(), Some("new"));
        let bare = Paging { page: Page::default(), uri: "/v1/hosts".parse().unwrap() };
        assert_eq!(bare.next_link("c"), "</v1/hosts?cursor=c>; rel=\"next\"");
    }
}
