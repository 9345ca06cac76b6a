//! The metal side's running state: what its handlers and passes share, start-up (database,
//! first admin credential, the boot service and image store) and the deadline reaper.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::sync::Arc;

use tracing::{info, warn};

use crate::metrics::Metrics;
use metal_store::{self as store, Store};
use metal_types::clock::Clock;
use metal_types::config::Config;
use metal_types::error::ApiError;
use metal_types::model::node::NodeTransition;
use metal_types::model::tenant::CredentialRole;

/// Everything a request handler needs.
#[derive(Debug)]
pub struct App {
    /// The database.
    pub store: Store,
    /// The clock every handler reads.
    pub clock: Arc<dyn Clock>,
    /// Configuration.
    pub config: Config,
    /// Request counters.
    pub metrics: Metrics,
    /// The boot service, when `boot-listen` is set.
    pub boot: Option<crate::metal::boot::BootService>,
    /// The image store.
    pub images: crate::metal::images::ImageService,
    /// This process's name as a worker (workflow claims, image imports): unique per start.
    pub worker: String,
    /// The API listener's TLS configuration (None: plain HTTP).
    pub api_tls: Option<Arc<rustls::ServerConfig>>,
    /// What lessees do to their machines, per lease.
    pub lessee_limiter: crate::ratelimit::RateLimiter<String>,
    /// Connections to nodes' BMCs, kept between calls.
    pub bmc_connections: crate::metal::connections::Connections,
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
    Database(#[from] store::DbError),
    /// The boot service could not start (its CA, or its configuration).
    #[error("boot service: {0}")]
    Boot(String),
    /// The settings cannot stand together.
    #[error(transparent)]
    Config(#[from] metal_types::config::ConfigError),
    /// The API listener's certificate could not be loaded or issued.
    #[error("API listener: {0}")]
    Tls(String),
    /// The image store could not start (its directory, catalog or CA file).
    #[error("image store: {0}")]
    Images(String),
    /// The first admin token could not be written.
    #[error("{path}: {source}")]
    AdminToken {
        /// The token file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// File in the data directory holding the first admin token (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// Opens the store and makes sure a platform admin credential exists; the first one's token
/// is written to `DATA_DIR/admin.token` (0600) and never logged.
pub async fn start(config: Config, clock: Arc<dyn Clock>) -> Result<AppState, StartError> {
    let data_dir = config.data_dir.clone();
    std::fs::create_dir_all(&data_dir)
        .map_err(|source| StartError::DataDir { path: data_dir.display().to_string(), source })?;
    let transport = config.api_transport()?;
    let boot = crate::metal::boot::BootService::open(&config)?;
    let api_tls = crate::server_tls::api_config(&transport, || match &boot {
        Some(boot) => Ok(boot.ca.clone()),
        None => crate::ca_files::open_or_init(&data_dir.join(crate::metal::boot::CA_DIR), &config.boot.site)
            .map(|(ca, _)| Arc::new(ca))
            .map_err(|e| e.to_string()),
    })
    .map_err(StartError::Tls)?
    .map(Arc::new);
    let images = crate::metal::images::ImageService::open(&config)?;
    let url = config.database_url.clone().unwrap_or_else(|| Store::sqlite_url(&data_dir));
    let store = Store::open(&url).await?;
    info!(backend = ?store.backend(), "database ready");
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    let now = clock.now();
    let bootstrapped = {
        let path = path.clone();
        store
            .write(move |tx| -> Result<bool, StartError> {
                // Replicas starting together bootstrap one at a time, as they migrate: the
                // second sees the first one's admin.
                store::exclusive_with_migrations(tx)?;
                if store::auth::has_admin(tx)? {
                    return Ok(false);
                }
                let root = metal_types::model::tenant::Tenant {
                    id: metal_types::model::tenant::ROOT_TENANT.into(),
                    name: "platform".into(),
                };
                store::auth::create_tenant(tx, &root, now)?;
                let (_, token) =
                    store::auth::create_credential(tx, CredentialRole::PlatformAdmin, None, "bootstrap admin", now)?;
                // Written before the commit: a credential nobody holds the token of is never stored.
                write_secret(&path, &token)
                    .map_err(|source| StartError::AdminToken { path: path.display().to_string(), source })?;
                Ok(true)
            })
            .await?
    };
    if bootstrapped {
        info!(path = %path.display(), "created the first platform admin credential; its token is in this file");
    }
    let worker = format!("worker-{}", uuid::Uuid::new_v4().simple());
    info!(%worker, "workflow worker");
    let lessee_limiter = crate::ratelimit::RateLimiter::new(config.lessee_rate_per_minute, "lessee actions on lease");
    Ok(Arc::new(App {
        store,
        clock,
        config,
        metrics: Metrics::default(),
        boot,
        images,
        worker,
        api_tls,
        lessee_limiter,
        bmc_connections: Default::default(),
    }))
}

/// Writes `secret` and a newline to `path` (mode 0600) by way of a temporary file.
pub fn write_secret(path: &Path, secret: &str) -> std::io::Result<()> {
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
pub async fn reap_once(app: &App) -> Result<usize, ApiError> {
    let now = app.clock.now();
    let mut failed = 0;
    for node in app.store.read(move |conn| store::nodes::overdue(conn, now)).await? {
        // A teardown workflow bounds its own steps and quarantines on its own.
        if node.owner.as_deref().is_some_and(|o| o.starts_with("workflow/")) {
            continue;
        }
        let limit =
            app.config.deadlines.for_state(node.state).map(|d| format!(" of {}s", d.as_secs())).unwrap_or_default();
        let request = NodeTransition {
            from: node.state,
            to: metal_types::model::node::NodeState::Failed,
            generation: Some(node.generation),
            owner: None,
            reason: Some(format!(
                "deadline passed: {} (owner {}) exceeded its time limit{limit}",
                node.state,
                node.owner.as_deref().unwrap_or("none")
            )),
        };
        let (id, deadlines) = (node.id.clone(), app.config.deadlines);
        match app.store.change(move |tx| store::nodes::transition(tx, &id, &request, &deadlines, now)).await {
            Ok(_) => {
                warn!(node = %node.id, state = %node.state, "reaper failed overdue node");
                failed += 1;
            }
            // Someone moved it meanwhile: not overdue any more.
            Err(ApiError::Conflict(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(failed)
}
