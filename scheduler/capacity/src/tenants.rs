//! Deleting a tenant (the capacity side): its live reservations end (a pending one is
//! cancelled), so each node binding's lease is torn down by the metal side; the pools it
//! owns are handed to the metal side to retire their machines (`pool.retire`); its
//! credentials are revoked and the tenant disappears from the API. The platform machines it
//! leased are not retired: their teardown returns them to `ready`.

use serde_json::json;
use time::OffsetDateTime;

use metal_store::{self as store, Conn};
use metal_types::error::ApiError;
use metal_types::model::reservation::ReservationState;
use metal_types::model::tenant::TenantDeleted;
use metal_types::work::{MetalWork, PoolRetire};

/// Deletes `id` in one transaction; NOT_FOUND for no such tenant, CONFLICT for `root`.
pub fn delete(tx: &mut dyn Conn, id: &str, now: OffsetDateTime) -> Result<TenantDeleted, ApiError> {
    if id == metal_types::model::tenant::ROOT_TENANT {
        return Err(ApiError::Conflict("the platform's own tenant (root) cannot be deleted".into()));
    }
    if store::auth::get_tenant(tx, id)?.is_none() {
        return Err(ApiError::NotFound(format!("tenant {id}")));
    }
    let reason = format!("tenant {id} deleted");
    let mut reservations = Vec::new();
    for reservation in store::capacity::list_reservations(tx, Some(id))? {
        let to = match reservation.state {
            ReservationState::Pending => ReservationState::Cancelled,
            ReservationState::Active => ReservationState::Ended,
            _ => continue,
        };
        crate::leases::set_state(tx, &reservation.id, &[reservation.state], to, Some(&reason), now)?;
        reservations.push(reservation.id);
    }
    let pools: Vec<String> = store::capacity::pool_ids(tx, None)?
        .into_iter()
        .filter_map(|pool| match store::capacity::get_pool(tx, &pool) {
            Ok(Some(p)) if p.tenant_id == id => Some(Ok(pool)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect::<Result<_, _>>()?;
    for pool in &pools {
        let retire = PoolRetire { pool: pool.clone(), reason: reason.to_owned() };
        store::work::ask_metal(tx, &MetalWork::PoolRetire(retire), now)?;
    }
    store::auth::delete_tenant(tx, id, now)?;
    let deleted = TenantDeleted { tenant_id: id.to_owned(), reservations, pools };
    store::events::append(tx, "tenant.deleted", &format!("tenant/{id}"), Some(id), &json!(deleted), now)?;
    Ok(deleted)
}
