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

pub mod auth;
pub mod billing;
pub mod capacity;
pub mod db;
pub mod events;
mod migrate;
pub mod nodes;
mod postgres;
mod sqlite;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use db::{Conn, DbError, DbResult, Row};

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
        Ok(Self { engine: Arc::new(engine) })
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
