//! The capacity side of a tenant-root lease: reservations move with the clock, a node
//! binding whose start came asks the metal side for its lease (`lease.start`, one per
//! allocation), and the metal side's notices (`lease.bound`, `lease.refused`,
//! `lease.failed`) move the reservation on. Ending a node binding asks for its teardown
//! (`lease.end`, queued by [`set_state`]). Only work rows cross over.

use metal_store::work::{Side, WorkItem};
use metal_store::{self as store, Conn, Store};
use metal_types::clock::Clock;
use metal_types::error::ApiError;
use metal_types::model::reservation::BIND_LIMIT;
use metal_types::model::reservation::Reservation;
use metal_types::model::reservation::ReservationState::{self, Active, Ended, Failed, Pending};
use metal_types::work::{CapacityNotice, LeaseEnd, LeaseStart, MetalWork};

/// Moves reservations along with the clock: pending ones whose start came become active,
/// except node bindings, which queue their lease start instead (and fail when not bound
/// within [`BIND_LIMIT`]; they are never placed again); active ones whose end came are
/// ended. Returns how many reservations changed or queued a lease start.
pub async fn tick(store: &Store, clock: &dyn Clock) -> Result<usize, ApiError> {
    let now = clock.now();
    let (starting, ending, overdue_binds) = store
        .read(move |conn| {
            Ok::<_, store::DbError>((
                store::capacity::due(conn, Pending, "start_at", now)?,
                store::capacity::due(conn, Active, "end_at", now)?,
                store::capacity::due(conn, Pending, "start_at", now - BIND_LIMIT)?,
            ))
        })
        .await?;
    let mut moves: Vec<(String, Vec<ReservationState>, ReservationState, String)> = Vec::new();
    for id in ending {
        moves.push((id, vec![Active], Ended, "its time ended".into()));
    }
    for id in overdue_binds {
        moves.push((
            id,
            vec![Pending],
            Failed,
            "not bound within 2 hours of its start (deploy limit); not placed again".into(),
        ));
    }
    for id in starting {
        moves.push((id, vec![Pending], Active, "its start came".into()));
    }
    let mut changed = 0;
    for (id, from, to, reason) in moves {
        // Not `change`: a node binding already asked for must not drop the placement cache
        // every tick.
        let moved = store
            .write(move |tx| {
                let Some(current) = store::capacity::get_reservation(tx, &id)? else { return Ok(false) };
                if to == Active && current.request.binding.is_some() {
                    return if current.state == Pending { request_leases(tx, &current, now) } else { Ok(false) };
                }
                set_state(tx, &id, &from, to, Some(&reason), now).map(|_| true)
            })
            .await;
        match moved {
            Ok(true) => changed += 1,
            Ok(false) | Err(ApiError::Conflict(_)) => {}
            Err(e) => return Err(e),
        }
    }
    if changed > 0 {
        store.changed();
    }
    Ok(changed)
}

/// Moves a reservation from one of `from` to `to` (`store::capacity::set_state`: a
/// compare-and-set, CONFLICT otherwise); a node binding that leaves the live states asks the
/// metal side to end the lease of each of its allocations (`lease.end`: the teardown).
pub fn set_state(
    tx: &mut dyn Conn,
    id: &str,
    from: &[ReservationState],
    to: ReservationState,
    reason: Option<&str>,
    now: time::OffsetDateTime,
) -> Result<Reservation, ApiError> {
    let moved = store::capacity::set_state(tx, id, from, to, reason, now)?;
    if !to.is_live() && moved.request.binding.is_some() {
        for (allocation, node) in store::capacity::allocations(tx, id)? {
            let reason = reason.unwrap_or(to.as_str()).to_owned();
            let end = LeaseEnd { reservation: id.to_owned(), allocation, node, reason };
            store::work::ask_metal(tx, &MetalWork::LeaseEnd(end), now)?;
        }
    }
    Ok(moved)
}

/// Queues `lease.start` for each allocation of a node binding (once per allocation).
fn request_leases(tx: &mut dyn Conn, reservation: &Reservation, now: time::OffsetDateTime) -> Result<bool, ApiError> {
    let node = reservation.request.node.as_ref();
    let mut queued = false;
    for (allocation, node_id) in store::capacity::allocations(tx, &reservation.id)? {
        let start = LeaseStart {
            reservation: reservation.id.clone(),
            allocation,
            node: node_id,
            tenant: reservation.tenant_id.clone(),
            // A node binding always names its profile (the request's validation).
            profile_id: node.and_then(|n| n.profile_id.clone()).unwrap_or_default(),
            profile_version: node.and_then(|n| n.profile_version),
        };
        queued |= store::work::ask_metal(tx, &MetalWork::LeaseStart(start), now)?;
    }
    Ok(queued)
}

/// Handles every queued notice of the metal side; returns how many it handled.
pub async fn drain_once(store: &Store, clock: &dyn Clock) -> Result<usize, ApiError> {
    store::work::drain(store, clock, Side::Capacity, notice).await
}

/// One metal notice, in the transaction that takes it. A reservation that moved on
/// meanwhile (released, failed by the bind limit) is left as it is.
fn notice(tx: &mut dyn Conn, item: &WorkItem, now: time::OffsetDateTime) -> Result<String, ApiError> {
    let notice = match CapacityNotice::parse(&item.kind, &item.payload) {
        Ok(Some(notice)) => notice,
        Ok(None) => return Ok(format!("unknown kind {}: ignored", item.kind)),
        Err(e) => return Err(ApiError::Internal(format!("work {}: {e}", item.id))),
    };
    let lease = notice.lease();
    let (reservation, allocation) = (lease.reservation.as_str(), lease.allocation.as_str());
    let reason = lease.reason.as_deref().unwrap_or_default();
    let moved = match notice {
        CapacityNotice::LeaseBound(_) => {
            if !store::capacity::mark_bound(tx, allocation, now)? {
                return Ok(format!("{allocation} waits for the other allocations of {reservation} to bind"));
            }
            let reason = format!("bound: every node deployed its profile (last {})", lease.node);
            set_state(tx, reservation, &[Pending], Active, Some(&reason), now)
        }
        CapacityNotice::LeaseRefused(_) => {
            let reason = format!("lease refused: {reason}");
            set_state(tx, reservation, &[Pending], Failed, Some(&reason), now)
        }
        CapacityNotice::LeaseFailed(_) => {
            let reason = format!("lease failed: {reason}");
            set_state(tx, reservation, &[Pending, Active], Failed, Some(&reason), now)
        }
    };
    match moved {
        Ok(r) => Ok(format!("reservation {} is {}", r.id, r.state.as_str())),
        Err(ApiError::Conflict(m)) => Ok(format!("left as it is: {m}")),
        Err(e) => Err(e),
    }
}
