//! The API's state: the metal side's running state and the capacity side's placement cache,
//! composed here, the lowest crate that may know both. Handlers read the metal side's fields
//! through `Deref` (`app.store`, `app.clock`, `app.config`), and the boot service's handlers,
//! which take the metal side's state alone, get it by `FromRef`.

use std::ops::Deref;
use std::sync::Arc;

use axum::extract::FromRef;

use metal_capacity::PlacementCache;
use metal_machines::app::{App, StartError};
use metal_types::clock::Clock;
use metal_types::config::Config;

/// Everything a request handler needs.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The metal side's running state (store, clock, configuration, boot service, images).
    pub machines: metal_machines::app::AppState,
    /// Node snapshots for placement (a cache; the database decides).
    pub placement: Arc<PlacementCache>,
}

impl AppState {
    /// The API's state over the metal side's, with an empty placement cache of its store.
    pub fn new(machines: metal_machines::app::AppState) -> Self {
        let placement = Arc::new(PlacementCache::new(&machines.store));
        Self { machines, placement }
    }
}

impl Deref for AppState {
    type Target = App;

    fn deref(&self) -> &App {
        &self.machines
    }
}

impl FromRef<AppState> for metal_machines::app::AppState {
    fn from_ref(state: &AppState) -> Self {
        state.machines.clone()
    }
}

/// Starts the metal side (`metal_machines::app::start`) and composes the API's state over it.
pub async fn start(config: Config, clock: Arc<dyn Clock>) -> Result<AppState, StartError> {
    Ok(AppState::new(metal_machines::app::start(config, clock).await?))
}
