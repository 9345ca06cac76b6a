//! The program that produced a report: inventories, wipe reports, firmware checks and host
//! setup reports all name theirs the same way (its own module, so that the report modules
//! need not import each other for it).

use serde::{Deserialize, Serialize};

/// The program that produced a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tool {
    /// Program name, e.g. "metal-erase".
    pub name: String,
    /// Its version.
    pub version: String,
}
