//! Usage: metered records and their totals.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One meter record: a lease's share of one hourly window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageRecord {
    /// Deterministic id: `reservation/node/meter/windowStartMs`.
    pub id: String,
    /// The lease.
    pub reservation_id: String,
    /// `node.metal.hours` or `gpu.hours`.
    pub meter: String,
    /// Start of the hourly window.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub window_start: time::OffsetDateTime,
    /// End of the billed part of the window.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub window_end: time::OffsetDateTime,
    /// Quantity in hours (partial hours pro rata).
    pub quantity: f64,
}

/// A tenant's usage over a time range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// The tenant.
    pub tenant_id: String,
    /// Records, oldest window first.
    pub records: Vec<UsageRecord>,
    /// Sum per meter.
    pub totals: BTreeMap<String, f64>,
}
