//! The placement service: an in-memory cache of each pool's node snapshots in placement
//! order, and `place_and_book`, which places from the cache and books inside the caller's
//! write transaction.
//!
//! The cache is only a fast first guess. The chosen nodes are re-read and re-checked on
//! locked rows inside the committing transaction, so a stale cache can cost a retry but can
//! never double-book or pick an ineligible node; a refusal is only given after a reload from
//! the database. Anything other than a booking invalidates the cache.

pub mod billing;
pub mod leases;
pub mod placement;
pub mod tenants;

use std::collections::HashMap;
use std::sync::Mutex;

use time::OffsetDateTime;

use metal_store::{self as store, Conn};
use metal_types::clock::to_millis;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::node::Candidate;
use metal_types::model::reservation::{Binding, Reservation, ReservationCreate, ReservationState, Window};
use placement::Ask;

/// Placement attempts before giving up on racing writers (PostgreSQL replicas).
const ATTEMPTS: usize = 3;

/// A time as the database stores it (milliseconds), so the answer equals a later read.
fn to_millis_round(t: OffsetDateTime) -> OffsetDateTime {
    metal_types::clock::from_millis(to_millis(t))
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// Per-pool node snapshots in placement order.
#[derive(Debug, Default)]
pub struct PlacementCache {
    pools: Mutex<HashMap<String, CachedPool>>,
}

/// One pool's nodes in placement order, and where each node id sits in that order.
#[derive(Debug)]
struct CachedPool {
    nodes: Vec<Candidate>,
    position: HashMap<String, usize>,
}

impl PlacementCache {
    /// Forgets everything (after any change other than a booking).
    pub fn invalidate(&self) {
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn forget(&self, pool: &str) {
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).remove(pool);
    }

    fn place(
        &self,
        conn: &mut dyn Conn,
        pool: &str,
        ask: &Ask<'_>,
        fresh: bool,
    ) -> ApiResult<Result<Vec<String>, placement::Refusal>> {
        if !fresh {
            let pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(cached) = pools.get(pool) {
                return Ok(placement::place(&cached.nodes, ask));
            }
        }
        let mut nodes = store::capacity::candidates(conn, pool)?;
        placement::sort_for_placement(&mut nodes);
        let outcome = placement::place(&nodes, ask);
        let position = nodes.iter().enumerate().map(|(i, n)| (n.id.clone(), i)).collect();
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).insert(pool.to_owned(), CachedPool { nodes, position });
        Ok(outcome)
    }

    fn record_booking(&self, pool: &str, nodes: &[String], window: (i64, i64)) {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cached) = pools.get_mut(pool) {
            for id in nodes {
                if let Some(&i) = cached.position.get(id) {
                    cached.nodes[i].bookings.push(window);
                }
            }
        }
    }
}

/// Places the request in its pool and books the nodes inside `conn`'s transaction.
/// NOT_FOUND when the pool is not offered to the tenant; CONFLICT (with per-constraint
/// counts) when nothing fits.
pub fn place_and_book(
    cache: &PlacementCache,
    conn: &mut dyn Conn,
    request: &ReservationCreate,
    window: &Window,
    now: OffsetDateTime,
) -> ApiResult<Reservation> {
    if store::auth::get_tenant(conn, &request.tenant_id)?.is_none() {
        return Err(ApiError::invalid("tenantId", format!("no tenant {}", request.tenant_id)));
    }
    let pool_id = &request.pool_id;
    let pool =
        store::capacity::get_pool(conn, pool_id)?.ok_or_else(|| ApiError::NotFound(format!("pool {pool_id}")))?;
    if !pool.offered_to.contains(&request.tenant_id) && pool.tenant_id != request.tenant_id {
        return Err(ApiError::NotFound(format!("pool {pool_id}")));
    }
    if request.binding == Some(Binding::Node) && !pool.policy.tenant_root {
        return Err(ApiError::invalid(
            "binding",
            format!("pool {pool_id} does not allow node bindings (policy.tenantRoot is off)"),
        ));
    }
    let span = (to_millis(window.start), to_millis(window.end));
    let ask = Ask {
        tenant: &request.tenant_id,
        devices: &request.devices,
        window: span,
        gang: request.gang.as_ref(),
        architecture: request.architecture.as_deref(),
    };
    let mut fresh = false;
    for _ in 0..ATTEMPTS {
        let chosen = match cache.place(conn, pool_id, &ask, fresh)? {
            Ok(chosen) => chosen,
            // Refuse only on what the database says, never on a cached snapshot.
            Err(_) if !fresh => {
                fresh = true;
                continue;
            }
            Err(refusal) => return Err(ApiError::Conflict(refusal.message)),
        };
        // The eligibility check again, on locked rows inside the committing transaction.
        let mut still_eligible = true;
        for id in &chosen {
            let row = store::capacity::lock_candidate(conn, id)?;
            still_eligible &= row.is_some_and(|c| placement::eligibility(&c, &ask).is_ok());
        }
        if !still_eligible {
            cache.forget(pool_id);
            fresh = true;
            continue;
        }
        let id = format!("res-{}", uuid::Uuid::new_v4().simple());
        let state = if request.binding.is_none() && window.start <= now {
            ReservationState::Active
        } else {
            ReservationState::Pending
        };
        let new = store::capacity::NewReservation {
            id: &id,
            request,
            start: window.start,
            end: window.end,
            state,
            nodes: &chosen,
        };
        store::capacity::insert_reservation(conn, &new, now)?;
        // Recorded before the commit; if the commit fails the caller invalidates the cache.
        cache.record_booking(pool_id, &chosen, span);
        // What a read of the stored rows would return, without reading them back.
        return Ok(Reservation {
            id,
            generation: 1,
            tenant_id: request.tenant_id.clone(),
            pool_id: pool_id.clone(),
            state,
            state_reason: None,
            request: request.clone(),
            start: to_millis_round(window.start),
            end: to_millis_round(window.end),
            bound_at: None,
            nodes: sorted(chosen),
            created_at: to_millis_round(now),
        }
        .explained());
    }
    Err(ApiError::Busy("placement kept racing with other writers; retry".into()))
}
