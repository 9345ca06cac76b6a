//! Schema migrations: the numbered SQL files in `scheduler/store/migrations`, compiled in, run in
//! order inside the store's first transaction on both backends. Each applied migration is
//! recorded with its SHA-256, and a database whose recorded migration differs from the
//! checked-in file refuses to open rather than run on a schema nobody wrote.

use sha2::{Digest as _, Sha256};

use super::db::{Conn, DbError, DbResult};

const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "core", include_str!("../migrations/0001_core.sql")),
    (2, "capacity", include_str!("../migrations/0002_capacity.sql")),
    (3, "billing", include_str!("../migrations/0003_billing.sql")),
    (4, "row-locks", include_str!("../migrations/0004_row_locks.sql")),
    (5, "bmcs", include_str!("../migrations/0005_bmcs.sql")),
    (6, "console-sessions", include_str!("../migrations/0006_console_sessions.sql")),
    (7, "boot", include_str!("../migrations/0007_boot.sql")),
    (8, "firmware-checks", include_str!("../migrations/0008_firmware_checks.sql")),
    (9, "images-profiles", include_str!("../migrations/0009_images_profiles.sql")),
    (10, "workflows", include_str!("../migrations/0010_workflows.sql")),
    (11, "hosts", include_str!("../migrations/0011_hosts.sql")),
    (12, "wipe-generation", include_str!("../migrations/0012_wipe_generation.sql")),
    (13, "event-filters", include_str!("../migrations/0013_event_filters.sql")),
    (14, "bmc-pending-at", include_str!("../migrations/0014_bmc_pending_at.sql")),
    (15, "node-boots", include_str!("../migrations/0015_node_boots.sql")),
    (16, "switches", include_str!("../migrations/0016_switches.sql")),
    (17, "media-claims", include_str!("../migrations/0017_media_claims.sql")),
    (18, "lessee", include_str!("../migrations/0018_lessee.sql")),
    (19, "architecture", include_str!("../migrations/0019_architecture.sql")),
    (20, "measured-boot", include_str!("../migrations/0020_measured_boot.sql")),
    (21, "boot-baselines", include_str!("../migrations/0021_boot_baselines.sql")),
    (22, "baseline-ends", include_str!("../migrations/0022_baseline_ends.sql")),
    (23, "event-retention", include_str!("../migrations/0023_event_retention.sql")),
];

/// Brings the schema up to date.
pub(super) fn run(conn: &mut dyn Conn) -> DbResult<()> {
    conn.batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, sha256 TEXT NOT NULL)",
    )?;
    for (version, name, sql) in MIGRATIONS {
        let digest = hex::encode(Sha256::digest(sql.as_bytes()));
        match conn.query_opt("SELECT sha256 FROM schema_migrations WHERE version = $1", &[version])? {
            Some(row) => {
                let recorded: String = row.get("sha256")?;
                if recorded != digest {
                    return Err(DbError::Migration(format!(
                        "{version} ({name}) was applied with different contents (sha256 {recorded}, the file is {digest})"
                    )));
                }
            }
            None => {
                conn.batch(sql)?;
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, sha256) VALUES ($1, $2, $3)",
                    &[version, name, &digest],
                )?;
            }
        }
    }
    Ok(())
}
