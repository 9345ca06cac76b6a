//! The capacity side: pools' placement, reservations moving with the clock (`leases`), the
//! metal side's notices, billing and tenant deletion. It sees the types and the store only;
//! the metal side is reached through work rows (`store::work`), never imported.
//!
//! The placement service here is an in-memory cache of each pool's node snapshots in
//! placement order, and `place_and_book`, which places from the cache and books inside the
//! caller's write transaction. The cache is only a fast first guess. The chosen nodes are
//! re-read and re-checked on locked rows inside the committing transaction, so a stale cache
//! can cost a retry but can never double-book or pick an ineligible node; a refusal is only
//! given after a reload from the database. Any change other than a booking (a
//! `Store::change`, which moves the store's change counter) empties the cache.

pub mod billing;
pub mod leases;
pub mod placement;
pub mod tenants;

use std::collections::HashMap;
use std::sync::Mutex;

use time::OffsetDateTime;

use metal_store::{self as store, Conn, Store};
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

/// Per-pool node snapshots in placement order, valid while the store's change counter stays
/// where it was when they were read.
#[derive(Debug)]
pub struct PlacementCache {
    store: Store,
    pools: Mutex<Snapshots>,
}

/// The snapshots, and the store's change count they were read at.
#[derive(Debug)]
struct Snapshots {
    at: u64,
    pools: HashMap<String, CachedPool>,
}

/// One pool's nodes in placement order, and where each node id sits in that order.
#[derive(Debug)]
struct CachedPool {
    nodes: Vec<Candidate>,
    position: HashMap<String, usize>,
}

impl PlacementCache {
    /// An empty cache of `store`'s pools, which empties itself when the store changes.
    pub fn new(store: &Store) -> Self {
        Self { store: store.clone(), pools: Mutex::new(Snapshots { at: store.change_count(), pools: HashMap::new() }) }
    }

    /// The snapshots, emptied first when the store changed since they were read.
    fn current(&self) -> std::sync::MutexGuard<'_, Snapshots> {
        let mut snapshots = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.store.change_count();
        if snapshots.at != now {
            snapshots.pools.clear();
            snapshots.at = now;
        }
        snapshots
    }

    /// Forgets everything (after a booking whose commit failed).
    pub fn invalidate(&self) {
        self.current().pools.clear();
    }

    fn forget(&self, pool: &str) {
        self.current().pools.remove(pool);
    }

    fn place(
        &self,
        conn: &mut dyn Conn,
        pool: &str,
        ask: &Ask<'_>,
        fresh: bool,
    ) -> ApiResult<Result<Vec<String>, placement::Refusal>> {
        // Read before the nodes are: a change committed meanwhile leaves this snapshot unsaved.
        let at = self.store.change_count();
        if !fresh && let Some(cached) = self.current().pools.get(pool) {
            return Ok(placement::place(&cached.nodes, ask));
        }
        let mut nodes = store::capacity::candidates(conn, pool)?;
        placement::sort_for_placement(&mut nodes);
        let outcome = placement::place(&nodes, ask);
        let position = nodes.iter().enumerate().map(|(i, n)| (n.id.clone(), i)).collect();
        let mut snapshots = self.current();
        if snapshots.at == at {
            snapshots.pools.insert(pool.to_owned(), CachedPool { nodes, position });
        }
        Ok(outcome)
    }

    fn record_booking(&self, pool: &str, nodes: &[String], window: (i64, i64)) {
        if let Some(cached) = self.current().pools.get_mut(pool) {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Whether `cache` holds a snapshot of `pool` now.
    fn holds(cache: &PlacementCache, pool: &str) -> bool {
        cache.current().pools.contains_key(pool)
    }

    /// Places an empty ask in `pool` from the cache (filling it).
    async fn place(store: &Store, cache: &Arc<PlacementCache>, pool: &'static str) {
        let cache = cache.clone();
        let ask = Ask { tenant: "t", devices: &[], window: (0, 1), gang: None, architecture: None };
        store.read(move |conn| cache.place(conn, pool, &ask, false).map(|_| ())).await.unwrap();
    }

    #[tokio::test]
    async fn a_change_empties_the_cache_and_a_plain_write_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&Store::sqlite_url(dir.path())).await.unwrap();
        let cache = Arc::new(PlacementCache::new(&store));
        place(&store, &cache, "p").await;
        assert!(holds(&cache, "p"), "a placement fills the cache");
        // A booking writes with `Store::write` and records itself: the snapshot stays.
        store.write(|_| Ok::<_, metal_store::DbError>(())).await.unwrap();
        assert!(holds(&cache, "p"), "a plain write kept the snapshot");
        store.change(|_| Ok(())).await.unwrap();
        assert!(!holds(&cache, "p"), "a change emptied the cache");
        place(&store, &cache, "p").await;
        assert!(holds(&cache, "p"), "the next placement fills it again");
        // What a pass that changed rows with `Store::write` says afterwards.
        store.changed();
        assert!(!holds(&cache, "p"), "`changed` emptied the cache");
    }
}
