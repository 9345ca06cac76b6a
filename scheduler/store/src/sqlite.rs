//! The embedded SQLite backend (WAL). One writer thread owns the only write connection and
//! runs each write transaction start to finish in one hop, so a placement is a single
//! round trip however many statements it takes; reads run on a small pool of read
//! connections on the blocking thread pool, concurrently with the writer (WAL). A third
//! thread checkpoints the WAL into the database file, so the writer never does (beyond a
//! backstop when the WAL grows large).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::db::{Conn, DbError, DbResult, Row, ToValue, Value};

/// A connection (inside a transaction) as the repository functions see it.
struct SqliteConn<'a>(&'a Connection);

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(*i),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

/// Binds `$1..$n` by name, so a statement may use them in any order or more than once.
fn bind(stmt: &mut rusqlite::CachedStatement<'_>, params: &[&dyn ToValue]) -> DbResult<()> {
    if stmt.parameter_count() != params.len() {
        return Err(DbError::Parameters(format!(
            "the statement takes {} parameters, {} given",
            stmt.parameter_count(),
            params.len()
        )));
    }
    for (i, param) in params.iter().enumerate() {
        let name = format!("${}", i + 1);
        let index = stmt
            .parameter_index(&name)?
            .ok_or_else(|| DbError::Parameters(format!("the statement does not use {name}")))?;
        stmt.raw_bind_parameter(index, param.to_value())?;
    }
    Ok(())
}

fn value(column: &str, v: ValueRef<'_>) -> DbResult<Value> {
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => Value::Text(
            String::from_utf8(t.to_vec())
                .map_err(|e| DbError::Decode { column: column.to_owned(), message: e.to_string() })?,
        ),
        ValueRef::Blob(_) => {
            return Err(DbError::Decode { column: column.to_owned(), message: "unexpected blob".into() });
        }
    })
}

impl Conn for SqliteConn<'_> {
    fn backend(&self) -> super::Backend {
        super::Backend::Sqlite
    }

    fn query(&mut self, sql: &str, params: &[&dyn ToValue]) -> DbResult<Vec<Row>> {
        let mut stmt = self.0.prepare_cached(sql)?;
        bind(&mut stmt, params)?;
        let columns: Arc<[String]> = stmt.column_names().into_iter().map(str::to_owned).collect();
        let mut rows = stmt.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let values =
                columns.iter().enumerate().map(|(i, c)| value(c, row.get_ref(i)?)).collect::<DbResult<Vec<_>>>()?;
            out.push(Row::new(columns.clone(), values));
        }
        Ok(out)
    }

    fn execute(&mut self, sql: &str, params: &[&dyn ToValue]) -> DbResult<u64> {
        let mut stmt = self.0.prepare_cached(sql)?;
        bind(&mut stmt, params)?;
        Ok(stmt.raw_execute()? as u64)
    }

    fn batch(&mut self, sql: &str) -> DbResult<()> {
        Ok(self.0.execute_batch(sql)?)
    }
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// How often the checkpointer copies committed pages from the WAL into the database.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// WAL pages after which the writer checkpoints itself (the checkpointer fell behind).
const WRITER_CHECKPOINT_PAGES: i64 = 20_000;

/// The SQLite backend.
#[derive(Debug)]
pub(super) struct Sqlite {
    path: PathBuf,
    writer: Mutex<mpsc::Sender<Job>>,
    readers: Mutex<Vec<Connection>>,
    /// Dropping it stops the checkpointer.
    _checkpointer: mpsc::Sender<()>,
}

fn connect(path: &std::path::Path, write: bool) -> DbResult<Connection> {
    let flags = if write {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE
    } else {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.set_prepared_statement_cache_capacity(64);
    if write {
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.pragma_update(None, "journal_size_limit", 64 << 20)?;
    }
    Ok(conn)
}

/// Runs passive checkpoints until `stop`'s sender is dropped.
fn spawn_checkpointer(path: &std::path::Path, stop: mpsc::Receiver<()>) -> DbResult<()> {
    let conn = connect(path, true)?;
    std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY) {
                if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    tracing::warn!(error = %e, "WAL checkpoint failed; will retry");
                }
            }
        })
        .map_err(DbError::Thread)?;
    Ok(())
}

/// Runs `f` in a transaction of `conn`, committing when it succeeds.
fn in_transaction<T, E: From<DbError>>(
    conn: &mut Connection,
    behavior: TransactionBehavior,
    f: impl FnOnce(&mut dyn Conn) -> Result<T, E>,
) -> Result<T, E> {
    let tx = conn.transaction_with_behavior(behavior).map_err(DbError::from)?;
    let out = f(&mut SqliteConn(&tx))?;
    tx.commit().map_err(DbError::from)?;
    Ok(out)
}

/// How often opening a new database is tried while another process creates the same file
/// (SQLite answers "database is locked" at once, not after its busy timeout, while the file
/// is switched to WAL or its schema changes under a starting connection).
const OPEN_ATTEMPTS: u32 = 10;

/// Connects for writing and migrates in one IMMEDIATE transaction, trying again a bounded
/// number of times while another process holds the file.
fn open_migrated(path: &std::path::Path, migrate: &dyn Fn(&mut dyn Conn) -> DbResult<()>) -> DbResult<Connection> {
    let mut attempt = 0;
    loop {
        let outcome = connect(path, true)
            .and_then(|mut conn| in_transaction(&mut conn, TransactionBehavior::Immediate, migrate).map(|()| conn));
        match outcome {
            Err(e) if e.is_busy() && attempt + 1 < OPEN_ATTEMPTS => {
                attempt += 1;
                tracing::info!(attempt, "the database is busy (another process is opening it); trying again");
                std::thread::sleep(Duration::from_millis(200 * u64::from(attempt)));
            }
            other => return other,
        }
    }
}

impl Sqlite {
    /// Opens (creating) the database file, runs `migrate` in the first write transaction
    /// and starts the writer thread.
    pub(super) fn open(path: PathBuf, migrate: impl Fn(&mut dyn Conn) -> DbResult<()>) -> DbResult<Self> {
        let mut conn = open_migrated(&path, &migrate)?;
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)?;
        let (checkpointer, stop) = mpsc::channel();
        spawn_checkpointer(&path, stop)?;
        let (sender, receiver) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || {
                // Ends when the last sender (the store) is dropped. A panicking job rolls
                // back its own transaction and its caller sees WorkerGone; the next job runs.
                for job in receiver {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut conn)));
                }
            })
            .map_err(DbError::Thread)?;
        Ok(Self { path, writer: Mutex::new(sender), readers: Mutex::new(Vec::new()), _checkpointer: checkpointer })
    }

    /// Runs `f` in a write transaction on the writer thread.
    pub(super) async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Conn) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let _ = reply.send(in_transaction(conn, TransactionBehavior::Immediate, f));
        });
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).send(job).map_err(|_| DbError::WorkerGone)?;
        // A dropped reply means the job panicked (its transaction rolled back).
        answer.await.map_err(|_| DbError::WorkerGone)?
    }

    /// Runs `f` in a read transaction (a consistent snapshot) on the blocking pool.
    pub(super) async fn read<T, E, F>(self: &Arc<Self>, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Conn) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let pooled = this.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let mut conn = match pooled {
                Some(conn) => conn,
                None => connect(&this.path, false)?,
            };
            let out = in_transaction(&mut conn, TransactionBehavior::Deferred, f);
            this.readers.lock().unwrap_or_else(|p| p.into_inner()).push(conn);
            out
        })
        .await
        .map_err(|_| DbError::WorkerGone)?
    }
}
