//! Persistence behind one interface for SQLite (embedded default) and PostgreSQL.
//!
//! The logic sees only `Store` and the repository functions in the submodules, which take a
//! transaction so a change, its outbox events and (later) its meter rows and idempotency
//! record commit together. SQL is portable (`$n` parameters, no upserts or locking clauses);
//! the one backend difference is here: SQLite allows one writer, so write transactions are
//! serialised in-process, while PostgreSQL serialises conflicting writers with row locks
//! taken by the compare-and-set UPDATEs themselves.

pub mod auth;
pub mod billing;
pub mod capacity;
pub mod events;
pub mod nodes;

use std::path::Path;
use std::sync::Arc;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{Any, AnyPool, Executor as _, Transaction};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// Which database is behind the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Embedded SQLite file (WAL).
    Sqlite,
    /// PostgreSQL server.
    Postgres,
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no supported database.
    #[error("unsupported database URL {0:?} (use sqlite://PATH or postgres://...)")]
    UnsupportedUrl(String),
    /// Connecting or migrating failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// Migrations failed.
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// The database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    writer: Arc<Mutex<()>>,
}

/// A write transaction (holding the in-process writer lock on SQLite).
#[derive(Debug)]
pub struct WriteTx {
    /// The transaction; repository functions take `&mut *tx.tx`.
    pub tx: Transaction<'static, Any>,
    _writer: Option<OwnedMutexGuard<()>>,
}

impl WriteTx {
    /// Commits.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

/// A decoding error for a column whose text does not parse.
pub(crate) fn decode_err(e: impl std::error::Error + Send + Sync + 'static) -> sqlx::Error {
    sqlx::Error::Decode(Box::new(e))
}

/// A JSON text column, parsed.
pub(crate) fn json_column<T: serde::de::DeserializeOwned>(
    row: &sqlx::any::AnyRow,
    name: &str,
) -> Result<T, sqlx::Error> {
    use sqlx::Row as _;
    let text: String = row.try_get(name)?;
    serde_json::from_str(&text).map_err(decode_err)
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

impl Store {
    /// The SQLite URL of `metal.db` in a data directory.
    pub fn sqlite_url(data_dir: &Path) -> String {
        format!("sqlite://{}?mode=rwc", data_dir.join("metal.db").display())
    }

    /// Opens (creating if needed) and migrates the database at `url`.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Backend::Postgres
        } else {
            return Err(StoreError::UnsupportedUrl(url.to_owned()));
        };
        let options: AnyConnectOptions = url.parse()?;
        let pool = AnyPoolOptions::new()
            .max_connections(if backend == Backend::Sqlite { 8 } else { 16 })
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                        conn.execute("PRAGMA foreign_keys = ON").await?;
                        conn.execute("PRAGMA busy_timeout = 5000").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(options)
            .await?;
        MIGRATOR.run(&pool).await?;
        Ok(Self { pool, backend, writer: Arc::new(Mutex::new(())) })
    }

    /// Which backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The pool, for reads.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Begins a write transaction.
    pub async fn write(&self) -> Result<WriteTx, sqlx::Error> {
        let guard = match self.backend {
            Backend::Sqlite => Some(self.writer.clone().lock_owned().await),
            Backend::Postgres => None,
        };
        Ok(WriteTx { tx: self.pool.begin().await?, _writer: guard })
    }
}
