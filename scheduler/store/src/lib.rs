//! Persistence behind one interface for SQLite (embedded default) and PostgreSQL.
//!
//! The logic sees `Store::write` and `Store::read`, which run a closure inside one
//! transaction on the database's own thread, and the repository functions in the
//! submodules, which take that transaction as `&mut dyn Conn`. So a change, its outbox
//! events, its meter rows and its idempotency record commit together, in one hop. SQL is
//! portable (`$n` parameters, no upserts or locking clauses, the same migrations on both);
//! the backend differences stay in `sqlite` and `postgres`: SQLite has one writer thread,
//! PostgreSQL serialises conflicting writers with the row locks the compare-and-set
//! UPDATEs take.
//!
//! The store also says when something changed: `Store::change` is a write after which the
//! change counter moves and the event waiters wake. Caches above (the placement cache)
//! compare the counter with the one they were filled at, so nothing below needs to know
//! them; a write that must not drop them (a booking) uses `Store::write`.

pub mod attestations;
pub mod auth;
pub mod billing;
pub mod bmcs;
pub mod boot;
pub mod boots;
pub mod capacity;
pub mod db;
pub mod events;
pub mod hosts;
pub mod images;
pub mod lessee;
mod migrate;
pub mod nodes;
pub mod page;
mod postgres;
pub mod profiles;
mod sqlite;
pub mod switches;
pub mod work;
pub mod workflows;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

pub use db::{Conn, DbError, DbResult, Row};

/// Makes the rest of this write transaction exclusive with every other replica's migrations
/// and bootstrap: PostgreSQL's transaction-scoped advisory lock (the one migrations take);
/// nothing on SQLite, whose writers are exclusive already.
pub fn exclusive_with_migrations(conn: &mut dyn Conn) -> DbResult<()> {
    match conn.backend() {
        Backend::Postgres => conn.batch(&format!("SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")),
        Backend::Sqlite => Ok(()),
    }
}

/// The PostgreSQL advisory lock key of migrations and bootstrap.
const MIGRATION_LOCK: i64 = 7411;

/// Which database is behind the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Embedded SQLite file (WAL).
    Sqlite,
    /// PostgreSQL server.
    Postgres,
}

/// What [`Store::change`] tells readers in this process.
#[derive(Debug, Default)]
struct Changes {
    /// Moves after every change but a booking.
    count: AtomicU64,
    /// Woken whenever events are committed.
    events: Notify,
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no supported database.
    #[error("unsupported database URL (use sqlite://PATH or postgres://...)")]
    UnsupportedUrl,
    /// Connecting or migrating failed.
    #[error("database: {0}")]
    Database(#[from] DbError),
}

#[derive(Debug)]
enum Engine {
    Sqlite(Arc<sqlite::Sqlite>),
    Postgres(Arc<postgres::Postgres>),
}

/// The database.
#[derive(Debug, Clone)]
pub struct Store {
    engine: Arc<Engine>,
    changes: Arc<Changes>,
}

impl Store {
    /// The SQLite URL of `metal.db` in a data directory.
    pub fn sqlite_url(data_dir: &Path) -> String {
        format!("sqlite://{}", data_dir.join("metal.db").display())
    }

    /// Opens (creating if needed) and migrates the database at `url`.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let url = url.to_owned();
        let engine = tokio::task::spawn_blocking(move || -> Result<Engine, StoreError> {
            if let Some(path) = url.strip_prefix("sqlite://") {
                let path = PathBuf::from(path.split('?').next().unwrap_or(path));
                Ok(Engine::Sqlite(Arc::new(sqlite::Sqlite::open(path, migrate::run)?)))
            } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
                Ok(Engine::Postgres(Arc::new(postgres::Postgres::open(&url, migrate::run)?)))
            } else {
                Err(StoreError::UnsupportedUrl)
            }
        })
        .await
        .map_err(|_| DbError::WorkerGone)??;
        Ok(Self { engine: Arc::new(engine), changes: Arc::default() })
    }

    /// Which backend.
    pub fn backend(&self) -> Backend {
        match &*self.engine {
            Engine::Sqlite(_) => Backend::Sqlite,
            Engine::Postgres(_) => Backend::Postgres,
        }
    }

    /// Runs `f` in a write transaction, committed when it returns `Ok`.
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Conn) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        match &*self.engine {
            Engine::Sqlite(db) => db.write(f).await,
            Engine::Postgres(db) => db.transaction(f).await,
        }
    }

    /// Runs a change other than a booking in one write transaction; once it commits the
    /// change counter moves and event waiters are woken ([`Store::changed`]).
    pub async fn change<T, F>(&self, f: F) -> Result<T, metal_types::error::ApiError>
    where
        F: FnOnce(&mut dyn Conn) -> Result<T, metal_types::error::ApiError> + Send + 'static,
        T: Send + 'static,
    {
        let out = self.write(f).await?;
        self.changed();
        Ok(out)
    }

    /// Says that a change committed (by [`Store::write`], when the caller knows it changed
    /// something): the change counter moves and event waiters are woken.
    pub fn changed(&self) {
        self.changes.count.fetch_add(1, Ordering::AcqRel);
        self.changes.events.notify_waiters();
    }

    /// Says that events committed without a change a cache must see (a booking, meter
    /// records, an image's progress): event waiters are woken.
    pub fn events_committed(&self) {
        self.changes.events.notify_waiters();
    }

    /// How many changes this process committed so far: a cache filled at one count is stale
    /// at any other.
    pub fn change_count(&self) -> u64 {
        self.changes.count.load(Ordering::Acquire)
    }

    /// Woken whenever events are committed (long-poll and SSE waiters).
    pub fn events(&self) -> &Notify {
        &self.changes.events
    }

    /// Runs `f` in a read transaction (one consistent snapshot).
    pub async fn read<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Conn) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        match &*self.engine {
            Engine::Sqlite(db) => db.read(f).await,
            Engine::Postgres(db) => db.transaction(f).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn open(dir: &Path) -> Store {
        Store::open(&Store::sqlite_url(dir)).await.unwrap()
    }

    #[tokio::test]
    async fn parameters_bind_by_number_in_any_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let row = store.read(|c| c.query_one("SELECT $2 AS b, $1 AS a, $2 AS again", &[&1_i64, &"two"])).await.unwrap();
        assert_eq!(row.get::<String>("b").unwrap(), "two");
        assert_eq!(row.get::<i64>("a").unwrap(), 1);
        assert_eq!(row.get::<String>("again").unwrap(), "two");
        let e = store.read(|c| c.query("SELECT $1 AS a", &[])).await.unwrap_err();
        assert!(e.to_string().contains("takes 1 parameters, 0 given"), "{e}");
    }

    #[tokio::test]
    async fn a_failed_or_panicking_write_leaves_nothing_and_the_next_write_works() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let insert = "INSERT INTO tenants (id, name, created_at) VALUES ($1, $1, 0)";
        let failed: Result<(), DbError> = store
            .write(move |c| {
                c.execute(insert, &[&"a"])?;
                Err(DbError::NoRow)
            })
            .await;
        assert!(failed.is_err());
        let panicked: Result<(), DbError> = store
            .write(move |c| {
                c.execute(insert, &[&"b"])?;
                panic!("a bug in a write")
            })
            .await;
        assert!(matches!(panicked, Err(DbError::WorkerGone)), "{panicked:?}");
        store.write(move |c| c.execute(insert, &[&"c"])).await.unwrap();
        let ids: Vec<String> = store
            .read(|c| c.query("SELECT id FROM tenants ORDER BY id", &[])?.iter().map(|r| r.get("id")).collect())
            .await
            .unwrap();
        assert_eq!(ids, ["c"]);
    }

    #[tokio::test]
    async fn migrations_run_once_and_a_changed_one_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let first = store
            .read(|c| {
                c.query("SELECT version FROM schema_migrations ORDER BY version", &[])?
                    .iter()
                    .map(|r| r.get::<i64>("version"))
                    .collect::<DbResult<Vec<_>>>()
            })
            .await
            .unwrap();
        assert_eq!(first, (1..=i64::try_from(first.len()).unwrap()).collect::<Vec<_>>());
        store
            .write(|c| c.execute("UPDATE schema_migrations SET sha256 = 'edited' WHERE version = 1", &[]))
            .await
            .unwrap();
        drop(store);
        let e = Store::open(&Store::sqlite_url(dir.path())).await.unwrap_err().to_string();
        assert!(e.contains("migration 1 (core) was applied with different contents"), "{e}");
        assert!(matches!(Store::open("mysql://x").await, Err(StoreError::UnsupportedUrl)));
    }
}
