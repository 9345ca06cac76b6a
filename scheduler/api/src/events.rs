//! Reading the outbox: `GET /v1/events?after=SEQ&wait=SECONDS` (long-poll) and
//! `GET /v1/events/stream?after=SEQ` (Server-Sent Events; a reconnecting client's
//! `Last-Event-ID` says where it was). Tenants see only their own. Events older than
//! `event-retention` are pruned; resuming from before them is 410 GONE, never a silent gap.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;

use crate::ApiQuery;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use utoipa::IntoParams;

use super::{ApiJson, Caller};
use crate::AppState;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::event::EventPage;

/// Longest long-poll wait.
const MAX_WAIT_SECS: u64 = 60;
/// Events per page.
const PAGE: i64 = 500;

/// Where to read from.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    /// Return events after this sequence number (default 0: from the start).
    #[serde(default)]
    pub after: i64,
    /// Seconds to wait for an event when none is there yet (0 to 60, default 0).
    #[serde(default)]
    #[param(minimum = 0, maximum = 60)]
    pub wait: u64,
    /// Only events about this subject (`node/n001`, `reservation/r-...`).
    pub subject: Option<String>,
    /// Start after the newest event now, whatever `after` says: a page answers at once with
    /// no events and `next` at the newest, and a stream sends only what happens from now on.
    #[serde(default)]
    pub tail: bool,
}

/// The page of events after `after`, in the transaction that checks they are all kept.
async fn page_after(
    app: &AppState,
    after: i64,
    scope: Option<String>,
    subject: Option<String>,
) -> ApiResult<Vec<metal_types::model::event::Event>> {
    app.store
        .read(move |conn| {
            kept_after(conn, after)?;
            Ok(store::events::after(conn, after, PAGE, scope.as_deref(), subject.as_deref())?)
        })
        .await
}

/// GONE when events after `after` were pruned (a reader at 0 starts from the oldest kept).
fn kept_after(conn: &mut dyn store::Conn, after: i64) -> ApiResult<()> {
    let pruned = store::events::pruned_through(conn)?;
    if after > 0 && after < pruned {
        let newest = store::events::last_seq(conn)?;
        return Err(ApiError::Gone(format!(
            "the events after {after} up to {pruned} are past retention (event-retention) and were pruned: \
             list what you follow again, then resume from now (tail=true, or after={newest})"
        )));
    }
    Ok(())
}

/// Where a read starts: `after` (or the stream's `Last-Event-ID`, which a reconnecting
/// client sends and which wins), or the newest event now when the caller asks for the tail.
async fn start(app: &AppState, query: &EventQuery, last_event_id: Option<i64>) -> ApiResult<i64> {
    if query.tail {
        Ok(app.store.read(store::events::last_seq).await?)
    } else {
        Ok(last_event_id.unwrap_or(query.after))
    }
}

/// The `Last-Event-ID` header of a reconnecting stream: a sequence number this service sent.
fn last_event_id(headers: &HeaderMap) -> ApiResult<Option<i64>> {
    let Some(value) = headers.get("last-event-id") else { return Ok(None) };
    let id = value.to_str().ok().and_then(|v| v.trim().parse::<i64>().ok()).filter(|id| *id >= 0);
    id.map(Some).ok_or_else(|| ApiError::invalid("Last-Event-ID", "must be the id of an event this stream sent"))
}

/// Events after a sequence number, waiting up to `wait` seconds for the first one.
#[utoipa::path(get, path = "/v1/events", params(EventQuery),
    responses((status = 200, body = EventPage), (status = 410, body = metal_types::error::ErrorBody)))]
pub async fn list_events(
    State(app): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<EventQuery>,
) -> ApiResult<ApiJson<EventPage>> {
    if query.wait > MAX_WAIT_SECS {
        return Err(ApiError::invalid("wait", format!("at most {MAX_WAIT_SECS} seconds")));
    }
    let after = start(&app, &query, None).await?;
    if query.tail {
        return Ok(ApiJson(EventPage { events: Vec::new(), next: after }));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(query.wait);
    let scope = caller.tenant_scope().map(str::to_owned);
    loop {
        // Register interest before reading, so an event committed in between still wakes us.
        let notified = app.store.events().notified();
        let events = page_after(&app, after, scope.clone(), query.subject.clone()).await?;
        if !events.is_empty() || tokio::time::Instant::now() >= deadline {
            let next = events.last().map_or(after, |e| e.seq);
            return Ok(ApiJson(EventPage { events, next }));
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return Ok(ApiJson(EventPage { events: Vec::new(), next: after }));
        }
    }
}

/// A Server-Sent Events stream of events after `after` (or after `Last-Event-ID` when a
/// client reconnects), each with its sequence number as id. A start before what retention
/// kept is 410 before the stream opens.
pub async fn stream_events(
    State(app): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventQuery>,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    let scope = caller.tenant_scope().map(str::to_owned);
    let after = start(&app, &query, last_event_id(&headers)?).await?;
    // Checked here so the refusal is an answer, not a stream that ends at once.
    app.store.read(move |conn| kept_after(conn, after)).await?;
    let subject = query.subject;
    let stream = futures::stream::unfold((app, after, Vec::new()), move |(app, mut after, mut pending)| {
        let (scope, subject) = (scope.clone(), subject.clone());
        async move {
            loop {
                if let Some(event) = pending.pop() {
                    let event: metal_types::model::event::Event = event;
                    let sse = SseEvent::default()
                        .id(event.seq.to_string())
                        .event(event.kind.clone())
                        .json_data(&event)
                        .unwrap_or_else(|_| SseEvent::default().comment("unserialisable event"));
                    return Some((Ok(sse), (app, after, pending)));
                }
                let notified = app.store.events().notified();
                match page_after(&app, after, scope.clone(), subject.clone()).await {
                    Ok(events) if !events.is_empty() => {
                        after = events.last().map_or(after, |e| e.seq);
                        pending = events.into_iter().rev().collect();
                    }
                    Ok(_) => {
                        let _ = tokio::time::timeout(Duration::from_secs(15), notified).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "event stream read failed; ending stream");
                        return None;
                    }
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
