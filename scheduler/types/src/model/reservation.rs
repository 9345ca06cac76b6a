//! Reservations: what a tenant asks for (seed 000's body), the validation rules, and the
//! reservation lifecycle.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::duration::parse_duration;
use crate::error::ApiError;

/// Shortest and longest lease.
pub const DURATION_RANGE: std::ops::RangeInclusive<u64> = 3600..=(366 * 86_400);
/// Largest device count per class.
pub const MAX_DEVICE_COUNT: u32 = 1024;
/// Largest gang.
pub const MAX_GANG: u32 = 256;
/// How far ahead a reservation may start.
pub const MAX_LEAD: time::Duration = time::Duration::days(366);
/// How long a node binding may wait for its deploy to bind before the lease fails (seed 000).
pub const BIND_LIMIT: time::Duration = time::Duration::hours(2);

/// Devices wanted on each node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceRequest {
    /// Device class, e.g. `gpu`.
    pub class: String,
    /// How many healthy devices of the class each node must have.
    pub count: u32,
}

/// What the reservation binds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Binding {
    /// A whole node with dedicated root: deploys the lessee's profile.
    Node,
}

/// The metal profile a node binding deploys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeProfile {
    /// Profile id, resolved in the lessee's tenant.
    #[serde(default)]
    pub profile_id: Option<String>,
    /// Profile version (metal refuses to start a lease without one).
    #[serde(default)]
    pub profile_version: Option<u32>,
}

/// Several nodes in one topology domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Gang {
    /// Number of nodes.
    pub count: u32,
    /// Label key whose value all nodes share, e.g. `rack` or `switch`.
    pub topology_key: String,
}

/// Creates a reservation (seed 000's body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReservationCreate {
    /// The lessee.
    pub tenant_id: String,
    /// Pool to place in.
    pub pool_id: String,
    /// Devices each node must have.
    #[serde(default)]
    pub devices: Vec<DeviceRequest>,
    /// `now` (default) or an RFC 3339 time.
    #[serde(default)]
    pub start: Option<String>,
    /// Lease length: `12h`, `7d`, ...
    pub duration: String,
    /// `node` for a whole-node, dedicated-root lease.
    #[serde(default)]
    pub binding: Option<Binding>,
    /// The profile a node binding deploys.
    #[serde(default)]
    pub node: Option<NodeProfile>,
    /// Spot (pre-emptible) capacity.
    #[serde(default)]
    pub spot: bool,
    /// Several nodes in one topology domain.
    #[serde(default)]
    pub gang: Option<Gang>,
    /// The machines' architecture: `x86_64` or `aarch64` (Grace-class). A node binding whose
    /// profile deploys an image takes the image's when none is given; without either, any.
    #[serde(default)]
    pub architecture: Option<String>,
    /// Replays the first response for the same key and body (per tenant, kept 24 hours).
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// A validated request: the window resolved against the clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Start.
    pub start: OffsetDateTime,
    /// End (exclusive).
    pub end: OffsetDateTime,
}

/// The machine architectures a reservation may ask for, as a node's inventory names them.
pub const MACHINE_ARCHITECTURES: [&str; 2] = ["x86_64", "aarch64"];

impl ReservationCreate {
    /// Applies every validation rule of the seed; the error names the field.
    pub fn validate(&self, now: OffsetDateTime) -> Result<Window, ApiError> {
        metal_protocol::identity::validate_name("tenantId", &self.tenant_id)
            .map_err(|e| ApiError::invalid("tenantId", e.to_string()))?;
        metal_protocol::identity::validate_name("poolId", &self.pool_id)
            .map_err(|e| ApiError::invalid("poolId", e.to_string()))?;
        for (i, d) in self.devices.iter().enumerate() {
            if d.class.is_empty()
                || d.class.len() > 63
                || !d.class.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            {
                return Err(ApiError::invalid(format!("devices[{i}].class"), "must be 1 to 63 of A-Z a-z 0-9 . _ -"));
            }
            if d.count == 0 || d.count > MAX_DEVICE_COUNT {
                return Err(ApiError::invalid(
                    format!("devices[{i}].count"),
                    format!("must be 1 to {MAX_DEVICE_COUNT}"),
                ));
            }
            if self.devices[..i].iter().any(|e| e.class == d.class) {
                return Err(ApiError::invalid(format!("devices[{i}].class"), format!("{} is listed twice", d.class)));
            }
        }
        let seconds = parse_duration(&self.duration).map_err(|e| ApiError::invalid("duration", e))?.as_secs();
        if !DURATION_RANGE.contains(&seconds) {
            return Err(ApiError::invalid("duration", "must be between 1h and 366d"));
        }
        match (self.binding, &self.node) {
            (Some(Binding::Node), None) | (Some(Binding::Node), Some(NodeProfile { profile_id: None, .. })) => {
                return Err(ApiError::invalid("node.profileId", "binding 'node' needs node.profileId"));
            }
            (None, Some(_)) => return Err(ApiError::invalid("binding", "node needs binding: 'node'")),
            _ => {}
        }
        if let Some(NodeProfile { profile_id: Some(p), .. }) = &self.node {
            metal_protocol::identity::validate_name("node.profileId", p)
                .map_err(|e| ApiError::invalid("node.profileId", e.to_string()))?;
        }
        if self.spot && self.binding == Some(Binding::Node) {
            return Err(ApiError::invalid("spot", "a node binding cannot be spot"));
        }
        if let Some(g) = &self.gang {
            if g.count == 0 || g.count > MAX_GANG {
                return Err(ApiError::invalid("gang.count", format!("must be 1 to {MAX_GANG}")));
            }
            if g.topology_key.is_empty() || g.topology_key.len() > 63 {
                return Err(ApiError::invalid("gang.topologyKey", "must be a label key of 1 to 63 characters"));
            }
        }
        if let Some(arch) = &self.architecture
            && !MACHINE_ARCHITECTURES.contains(&arch.as_str())
        {
            return Err(ApiError::invalid("architecture", format!("{arch:?}: use x86_64 or aarch64")));
        }
        if let Some(key) = &self.idempotency_key
            && (key.is_empty() || key.len() > 255 || key.chars().any(char::is_control))
        {
            return Err(ApiError::invalid("idempotencyKey", "must be 1 to 255 printable characters"));
        }
        let start = match self.start.as_deref() {
            None | Some("now") => now,
            Some(text) => OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                .map_err(|_| ApiError::invalid("start", "must be 'now' or an RFC 3339 time"))?,
        };
        if start < now - time::Duration::minutes(5) {
            return Err(ApiError::invalid("start", "is in the past"));
        }
        if start > now + MAX_LEAD {
            return Err(ApiError::invalid("start", "is more than 366 days ahead"));
        }
        let start = start.max(now);
        let duration = time::Duration::seconds(i64::try_from(seconds).unwrap_or(i64::MAX));
        Ok(Window { start, end: start + duration })
    }

    /// Number of nodes wanted.
    pub fn node_count(&self) -> u32 {
        self.gang.as_ref().map_or(1, |g| g.count)
    }
}

/// What a reservation list keeps (`GET /v1/reservations`), applied in the store. A
/// tenant's member sees only its own tenant's whatever `tenant` says.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReservationFilter {
    /// Only reservations in this state.
    pub state: Option<ReservationState>,
    /// Only reservations of this pool.
    pub pool: Option<String>,
    /// Only this tenant's reservations.
    pub tenant: Option<String>,
}

/// Where a reservation is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReservationState {
    /// Placed; waiting for its start (or, for node bindings, for the deploy to bind).
    Pending,
    /// Running and billed.
    Active,
    /// Its time ran out or it was released.
    Ended,
    /// Cancelled before or during its time.
    Cancelled,
    /// Could not start (e.g. not bound within the 2-hour deploy limit).
    Failed,
}

impl ReservationState {
    /// Name as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationState::Pending => "pending",
            ReservationState::Active => "active",
            ReservationState::Ended => "ended",
            ReservationState::Cancelled => "cancelled",
            ReservationState::Failed => "failed",
        }
    }

    /// Parses the stored name.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Active, Self::Ended, Self::Cancelled, Self::Failed].into_iter().find(|r| r.as_str() == s)
    }

    /// Whether the reservation still holds its nodes.
    pub fn is_live(self) -> bool {
        matches!(self, ReservationState::Pending | ReservationState::Active)
    }
}

/// A reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// Id.
    pub id: String,
    /// Row generation.
    pub generation: i64,
    /// Lessee.
    pub tenant_id: String,
    /// Pool.
    pub pool_id: String,
    /// State.
    pub state: ReservationState,
    /// Why it is in its state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_reason: Option<String>,
    /// The request as accepted.
    pub request: ReservationCreate,
    /// Start of the window.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub start: OffsetDateTime,
    /// End of the window.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub end: OffsetDateTime,
    /// When a node binding was bound (deploy complete); billing starts there.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>)]
    pub bound_at: Option<OffsetDateTime>,
    /// The nodes booked.
    pub nodes: Vec<String>,
    /// Creation time.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub created_at: OffsetDateTime,
}

impl Reservation {
    /// The reservation with a reason when it has none of its own: what a pending one waits
    /// for (its start, and for a node binding the deploy that must bind it within the 2-hour
    /// limit).
    pub fn explained(mut self) -> Self {
        if self.state == ReservationState::Pending && self.state_reason.is_none() {
            let at = crate::clock::to_rfc3339;
            self.state_reason = Some(match self.request.binding {
                Some(_) => format!(
                    "waiting for its start at {}, then for its deploy, which must bind by {} (the 2-hour limit)",
                    at(self.start),
                    at(self.start + BIND_LIMIT)
                ),
                None => format!("waiting for its start at {}", at(self.start)),
            });
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(extra: serde_json::Value) -> ReservationCreate {
        let mut base =
            json!({"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 8}], "duration": "7d"});
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn field(extra: serde_json::Value) -> String {
        let now = time::macros::datetime!(2026-12-01 10:00 UTC);
        match request(extra).validate(now).unwrap_err() {
            ApiError::InvalidInput { field, .. } => field,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn every_seed_rule_names_its_field() {
        assert_eq!(field(json!({"binding": "node"})), "node.profileId");
        assert_eq!(field(json!({"binding": "node", "node": {"profileVersion": 1}})), "node.profileId");
        assert_eq!(field(json!({"node": {"profileId": "os", "profileVersion": 1}})), "binding");
        assert_eq!(field(json!({"binding": "node", "node": {"profileId": "os"}, "spot": true})), "spot");
        assert_eq!(field(json!({"duration": "30m"})), "duration");
        assert_eq!(field(json!({"duration": "400d"})), "duration");
        assert_eq!(field(json!({"duration": "soon"})), "duration");
        assert_eq!(field(json!({"devices": [{"class": "gpu", "count": 0}]})), "devices[0].count");
        assert_eq!(
            field(json!({"devices": [{"class": "gpu", "count": 1}, {"class": "gpu", "count": 2}]})),
            "devices[1].class"
        );
        assert_eq!(field(json!({"gang": {"count": 0, "topologyKey": "rack"}})), "gang.count");
        assert_eq!(field(json!({"gang": {"count": 2, "topologyKey": ""}})), "gang.topologyKey");
        assert_eq!(field(json!({"start": "yesterday"})), "start");
        assert_eq!(field(json!({"start": "2026-11-01T00:00:00Z"})), "start");
        assert_eq!(field(json!({"tenantId": "a/b"})), "tenantId");
        assert_eq!(field(json!({"idempotencyKey": ""})), "idempotencyKey");
    }

    #[test]
    fn a_valid_request_resolves_its_window() {
        let now = time::macros::datetime!(2026-12-01 10:00 UTC);
        let w = request(json!({"binding": "node", "node": {"profileId": "acme-root-os", "profileVersion": 1}}))
            .validate(now)
            .unwrap();
        assert_eq!((w.start, w.end), (now, now + time::Duration::days(7)));
        let w = request(json!({"start": "2026-12-02T00:00:00Z", "duration": "12h"})).validate(now).unwrap();
        assert_eq!(w.end, time::macros::datetime!(2026-12-02 12:00 UTC));
    }
}
