//! The running service: shared state, start-up (database, first admin credential), the
//! reaper, and the HTTP server with graceful shutdown.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::Arc;

use tokio::sync::Notify;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::model::node::NodeTransition;
use crate::model::tenant::CredentialRole;
use crate::store::{self, Store};

/// Everything a request handler needs.
#[derive(Debug)]
pub struct App {
    /// The database.
    pub store: Store,
    /// The clock every handler reads.
    pub clock: Arc<dyn Clock>,
    /// Configuration.
    pub config: Config,
    /// Woken whenever events are committed (long-poll and SSE waiters).
    pub events: Notify,
    /// Request counters.
    pub metrics: Metrics,
    /// Node snapshots for placement (a cache; the database decides).
    pub placement: crate::capacity::PlacementCache,
}

/// Shared handle to the service state.
pub type AppState = Arc<App>;

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory is unusable.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory or file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The database could not be opened.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// A database operation failed during start-up.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// The platform's own tenant, which owns platform pools (seed 000's `tenantId: 'root'`).
pub const ROOT_TENANT: &str = "root";

/// File in the data directory holding the first admin token (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// Opens the store and makes sure a platform admin credential exists; the first one's token
/// is written to `DATA_DIR/admin.token` (0600) and never logged.
pub async fn start(config: Config, clock: Arc<dyn Clock>) -> Result<AppState, StartError> {
    let data_dir = config.data_dir.clone();
    std::fs::create_dir_all(&data_dir)
        .map_err(|source| StartError::DataDir { path: data_dir.display().to_string(), source })?;
    let url = config.database_url.clone().unwrap_or_else(|| Store::sqlite_url(&data_dir));
    let store = Store::open(&url).await?;
    info!(backend = ?store.backend(), "database ready");
    if !store::auth::has_admin(store.pool()).await? {
        let mut tx = store.write().await?;
        let root = crate::model::tenant::Tenant { id: ROOT_TENANT.into(), name: "platform".into() };
        store::auth::create_tenant(&mut tx.tx, &root, clock.now()).await?;
        let (_, token) = store::auth::create_credential(
            &mut tx.tx,
            CredentialRole::PlatformAdmin,
            None,
            "bootstrap admin",
            clock.now(),
        )
        .await?;
        let path = data_dir.join(ADMIN_TOKEN_FILE);
        write_secret(&path, &token)
            .map_err(|source| StartError::DataDir { path: path.display().to_string(), source })?;
        tx.commit().await?;
        info!(path = %path.display(), "created the first platform admin credential; its token is in this file");
    }
    Ok(Arc::new(App {
        store,
        clock,
        config,
        events: Notify::new(),
        metrics: Metrics::default(),
        placement: Default::default(),
    }))
}

fn write_secret(path: &Path, secret: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    file.write_all(secret.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Fails every in-progress node whose deadline has passed. Returns how many it failed.
pub async fn reap_once(app: &App) -> Result<usize, crate::error::ApiError> {
    let now = app.clock.now();
    let mut failed = 0;
    for node in store::nodes::overdue(app.store.pool(), now).await? {
        let limit =
            app.config.deadlines.for_state(node.state).map(|d| format!(" of {}s", d.as_secs())).unwrap_or_default();
        let request = NodeTransition {
            from: node.state,
            to: crate::model::node::NodeState::Failed,
            generation: Some(node.generation),
            owner: None,
            reason: Some(format!(
                "deadline passed: {} (owner {}) exceeded its time limit{limit}",
                node.state,
                node.owner.as_deref().unwrap_or("none")
            )),
        };
        let mut tx = app.store.write().await?;
        match store::nodes::transition(&mut tx.tx, &node.id, &request, &app.config.deadlines, now).await {
            Ok(_) => {
                tx.commit().await?;
                app.placement.invalidate();
                app.events.notify_waiters();
                warn!(node = %node.id, state = %node.state, "reaper failed overdue node");
                failed += 1;
            }
            // Someone moved it meanwhile: not overdue any more.
            Err(crate::error::ApiError::Conflict(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(failed)
}

/// How long a node binding may wait for its deploy to bind before the lease fails (seed 000).
pub const BIND_LIMIT: time::Duration = time::Duration::hours(2);

/// Moves reservations along with the clock: pending ones whose start came become active
/// (node bindings wait for their deploy instead, and fail when not bound within
/// [`BIND_LIMIT`]; they are never placed again); active ones whose end came are ended.
/// Returns how many reservations changed.
pub async fn tick_reservations(app: &App) -> Result<usize, crate::error::ApiError> {
    use crate::model::reservation::ReservationState::{Active, Ended, Failed, Pending};
    let now = app.clock.now();
    let mut changed = 0;
    let mut conn = app.store.pool().acquire().await?;
    let starting = store::capacity::due(&mut conn, Pending, "start_at", now).await?;
    let ending = store::capacity::due(&mut conn, Active, "end_at", now).await?;
    let overdue_binds = store::capacity::due(&mut conn, Pending, "start_at", now - BIND_LIMIT).await?;
    drop(conn);
    let mut moves: Vec<(
        String,
        Vec<crate::model::reservation::ReservationState>,
        crate::model::reservation::ReservationState,
        String,
    )> = Vec::new();
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
    for (id, from, to, reason) in moves {
        let mut tx = app.store.write().await?;
        let Some(current) = store::capacity::get_reservation(&mut tx.tx, &id).await? else { continue };
        // Node bindings start only when bound.
        if to == Active && current.request.binding.is_some() {
            continue;
        }
        match store::capacity::set_state(&mut tx.tx, &id, &from, to, Some(&reason), now).await {
            Ok(_) => {
                tx.commit().await?;
                app.placement.invalidate();
                changed += 1;
            }
            Err(crate::error::ApiError::Conflict(_)) => {}
            Err(e) => return Err(e),
        }
    }
    if changed > 0 {
        app.events.notify_waiters();
    }
    Ok(changed)
}

/// Writes every meter record that is due. Returns how many were written.
pub async fn bill_once(app: &App) -> Result<usize, crate::error::ApiError> {
    let mut tx = app.store.write().await?;
    let written = store::billing::emit(&mut tx.tx, app.clock.now()).await?;
    tx.commit().await?;
    if written > 0 {
        app.events.notify_waiters();
    }
    Ok(written)
}

/// Runs the reaper until the process ends.
pub fn spawn_reaper(app: AppState) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(app.config.reaper_interval);
        loop {
            tick.tick().await;
            if let Err(e) = reap_once(&app).await {
                warn!(error = %e, "reaper pass failed");
            }
            if let Err(e) = tick_reservations(&app).await {
                warn!(error = %e, "reservation pass failed");
            }
            if let Err(e) = bill_once(&app).await {
                warn!(error = %e, "billing pass failed");
            }
        }
    });
}

/// Serves the API on `listener` until SIGINT or SIGTERM, then finishes in-flight requests.
pub async fn serve(app: AppState, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    spawn_reaper(app.clone());
    let router = crate::api::router(app);
    info!(address = %listener.local_addr()?, "metal-scheduler listening");
    axum::serve(listener, router).with_graceful_shutdown(shutdown_signal()).await?;
    info!("shut down cleanly");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    info!("shutdown requested");
}
