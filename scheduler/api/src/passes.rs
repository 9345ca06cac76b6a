//! The periodic pass, the one loop that drives both sides: the metal side's deadline reaper,
//! the capacity side's reservations and its queue of metal notices, billing, orphaned image
//! imports, profile auto-deploy, enrolment lapses and event retention.

use tracing::warn;

use crate::AppState;

/// Runs the periodic pass every `reaper-interval` until the process ends.
pub fn spawn(app: AppState) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(app.config.reaper_interval);
        loop {
            tick.tick().await;
            once(&app).await;
        }
    });
}

/// One periodic pass: each part logs its own failure and the others run regardless.
pub async fn once(app: &AppState) {
    if let Err(e) = metal_machines::app::reap_once(app).await {
        warn!(error = %e, "reaper pass failed");
    }
    if let Err(e) = metal_capacity::leases::tick(&app.store, &*app.clock).await {
        warn!(error = %e, "reservation pass failed");
    }
    if let Err(e) = metal_capacity::leases::drain_once(&app.store, &*app.clock).await {
        warn!(error = %e, "capacity work pass failed");
    }
    if let Err(e) = metal_capacity::billing::bill_once(&app.store, &*app.clock).await {
        warn!(error = %e, "billing pass failed");
    }
    if let Err(e) = metal_machines::metal::images::import::resume_orphans(&app.machines).await {
        warn!(error = %e, "image import pass failed");
    }
    if let Err(e) = metal_machines::metal::provision::auto_deploy_once(&app.machines).await {
        warn!(error = %e, "auto-deploy pass failed");
    }
    if let Err(e) = metal_machines::metal::boot::hosts::lapse_once(&app.machines).await {
        warn!(error = %e, "enrolment lapse pass failed");
    }
    if let Err(e) = prune_events(app).await {
        warn!(error = %e, "event retention pass failed");
    }
}

/// Events past `event-retention` go, a bounded batch a pass, oldest first.
async fn prune_events(app: &AppState) -> Result<(), metal_store::DbError> {
    let before = app.clock.now() - app.config.event_retention;
    let pruned = app.store.write(move |tx| metal_store::events::prune(tx, before, PRUNE_BATCH)).await?;
    if pruned > 0 {
        tracing::info!(pruned, "events past retention pruned");
    }
    Ok(())
}

/// The most events one pass prunes, so a first pass over a long history holds the writer
/// briefly.
const PRUNE_BATCH: i64 = 5000;
