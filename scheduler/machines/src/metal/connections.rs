//! BMC connections kept between calls, one per node. A Redfish BMC's discovered layout, its
//! HTTP connections and its session serve every call on the node until the node's BMC row or
//! password changes, a call on it fails (its session, layout or address may be what
//! failed), or it sits unused for [`IDLE`]. A connection gives its session back to the BMC
//! (which has few session slots) when the last call holding it ends, whether it was kept
//! here or opened for one proof.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use metal_bmc::{Bmc, Secret};
use metal_types::model::bmc::BmcInfo;

/// A kept connection unused this long is dropped: a BMC's own session timeout (Redfish's
/// `SessionTimeout`, 30 minutes on most) would end its session later anyway, and a dropped
/// one is logged out now.
pub const IDLE: Duration = Duration::from_secs(300);

/// How often kept connections are swept for idle ones.
const SWEEP: Duration = Duration::from_secs(60);

/// One open connection to a BMC. Dropping the last handle closes it (in the background:
/// a logout is a request to the BMC).
pub struct Connection(Arc<dyn Bmc>);

impl Connection {
    /// Wraps a BMC client just connected.
    pub fn new(bmc: Box<dyn Bmc>) -> Self {
        Self(Arc::from(bmc))
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connection({})", self.0.protocol())
    }
}

impl Deref for Connection {
    type Target = dyn Bmc;

    fn deref(&self) -> &(dyn Bmc + 'static) {
        self.0.as_ref()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let bmc = self.0.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { bmc.close().await });
        }
    }
}

/// What a kept connection was opened with: another row or password is another connection.
struct Opened {
    row: String,
    password: Secret,
    connection: Arc<Connection>,
    used: Instant,
}

impl Opened {
    /// The connection, marked used now, when it was opened with `row` and `password` and
    /// used within [`IDLE`].
    fn reuse(&mut self, row: &str, password: &Secret) -> Option<Arc<Connection>> {
        if self.row != row || self.password != *password || self.used.elapsed() >= IDLE {
            return None;
        }
        self.used = Instant::now();
        Some(self.connection.clone())
    }
}

/// The kept connections, by node.
#[derive(Default)]
pub struct Connections {
    kept: Mutex<HashMap<String, Opened>>,
    swept: Mutex<Option<Instant>>,
}

/// The parts of a BMC row a connection depends on (not its recorded health or generation).
fn row_key(info: &BmcInfo) -> String {
    serde_json::json!([info.protocol, info.address, info.username, info.tls, info.system_id, info.privilege])
        .to_string()
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connections({} kept)", self.kept().len())
    }
}

impl Connections {
    fn kept(&self) -> MutexGuard<'_, HashMap<String, Opened>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The kept connection to `node`'s BMC as `info` and `password` describe it, if there
    /// is one that was used within [`IDLE`].
    pub fn get(&self, node: &str, info: &BmcInfo, password: &Secret) -> Option<Arc<Connection>> {
        self.kept().get_mut(node)?.reuse(&row_key(info), password)
    }

    /// Keeps `connection` as `node`'s, in place of any other; answers the one to use (one
    /// another call kept for the same row and password meanwhile wins, so a node has one
    /// session). Sweeps idle connections once a minute.
    pub fn keep(&self, node: &str, info: &BmcInfo, password: &Secret, connection: Connection) -> Arc<Connection> {
        self.sweep();
        let row = row_key(info);
        let mut kept = self.kept();
        if let Some(connection) = kept.get_mut(node).and_then(|opened| opened.reuse(&row, password)) {
            return connection;
        }
        let connection = Arc::new(connection);
        let opened = Opened { row, password: password.clone(), connection: connection.clone(), used: Instant::now() };
        kept.insert(node.to_owned(), opened);
        connection
    }

    /// Stops keeping `connection` for `node` (a call on it failed); calls still holding it
    /// finish on it.
    pub fn forget(&self, node: &str, connection: &Arc<Connection>) {
        let mut kept = self.kept();
        if kept.get(node).is_some_and(|o| Arc::ptr_eq(&o.connection, connection)) {
            kept.remove(node);
        }
    }

    fn sweep(&self) {
        {
            let mut swept = self.swept.lock().unwrap_or_else(|p| p.into_inner());
            if swept.is_some_and(|at| at.elapsed() < SWEEP) {
                return;
            }
            *swept = Some(Instant::now());
        }
        self.kept().retain(|_, opened| opened.used.elapsed() < IDLE);
    }
}
