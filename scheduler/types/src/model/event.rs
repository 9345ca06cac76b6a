//! Events: the outbox rows every change writes in its own transaction, read back in order.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Position in the outbox: strictly increasing, no gaps.
    pub seq: i64,
    /// Kind, e.g. "node.state.changed", "node.tenant-root.leased".
    pub kind: String,
    /// What it is about, e.g. "node/n1".
    pub subject: String,
    /// The tenant it concerns, if any (tenants see only their own events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Kind-specific details.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    /// When it happened.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub at: time::OffsetDateTime,
}

/// A page of events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventPage {
    /// Events after the requested sequence number, oldest first.
    pub events: Vec<Event>,
    /// Pass as `after` to continue.
    pub next: i64,
}
