//! The PostgreSQL backend, for sites running several scheduler replicas. Transactions run
//! on the blocking thread pool over a small pool of clients, each with its own prepared
//! statement cache. Conflicting writers are serialised by the row locks the compare-and-set
//! UPDATEs take (no in-process lock: other replicas write too).

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use postgres::{Client, NoTls, Statement, Transaction};

use super::db::{Conn, DbError, DbResult, Row, ToValue, Value};

impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                _ => Err(format!("an integer cannot be stored as {ty}").into()),
            },
            Value::Real(f) => match *ty {
                Type::FLOAT8 => f.to_sql(ty, out),
                _ => Err(format!("a double cannot be stored as {ty}").into()),
            },
            Value::Text(s) => s.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn value(row: &postgres::Row, i: usize) -> DbResult<Value> {
    let column = &row.columns()[i];
    let decode = |e: postgres::Error| DbError::Postgres(e);
    Ok(match *column.type_() {
        Type::INT8 => row.try_get::<_, Option<i64>>(i).map_err(decode)?.map_or(Value::Null, Value::Int),
        Type::INT4 => row.try_get::<_, Option<i32>>(i).map_err(decode)?.map_or(Value::Null, |v| Value::Int(v.into())),
        Type::INT2 => row.try_get::<_, Option<i16>>(i).map_err(decode)?.map_or(Value::Null, |v| Value::Int(v.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i).map_err(decode)?.map_or(Value::Null, Value::Real),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            row.try_get::<_, Option<String>>(i).map_err(decode)?.map_or(Value::Null, Value::Text)
        }
        ref other => {
            return Err(DbError::Decode {
                column: column.name().to_owned(),
                message: format!("unsupported type {other}"),
            });
        }
    })
}

/// A client with the statements it has prepared.
struct Pooled {
    client: Client,
    statements: HashMap<String, Statement>,
}

impl std::fmt::Debug for Pooled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pooled").field("statements", &self.statements.len()).finish_non_exhaustive()
    }
}

struct PgConn<'a, 'b> {
    tx: &'a mut Transaction<'b>,
    statements: &'a mut HashMap<String, Statement>,
}

impl PgConn<'_, '_> {
    fn statement(&mut self, sql: &str) -> DbResult<Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let prepared = self.tx.prepare(sql)?;
        self.statements.insert(sql.to_owned(), prepared.clone());
        Ok(prepared)
    }
}

fn params(params: &[&dyn ToValue]) -> Vec<Value> {
    params.iter().map(|p| p.to_value()).collect()
}

fn refs(values: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    values.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

impl Conn for PgConn<'_, '_> {
    fn backend(&self) -> super::Backend {
        super::Backend::Postgres
    }

    fn query(&mut self, sql: &str, p: &[&dyn ToValue]) -> DbResult<Vec<Row>> {
        let statement = self.statement(sql)?;
        let values = params(p);
        let rows = self.tx.query(&statement, &refs(&values))?;
        let columns: Arc<[String]> = statement.columns().iter().map(|c| c.name().to_owned()).collect();
        rows.iter()
            .map(|row| {
                let values = (0..row.len()).map(|i| value(row, i)).collect::<DbResult<Vec<_>>>()?;
                Ok(Row::new(columns.clone(), values))
            })
            .collect()
    }

    fn execute(&mut self, sql: &str, p: &[&dyn ToValue]) -> DbResult<u64> {
        let statement = self.statement(sql)?;
        let values = params(p);
        Ok(self.tx.execute(&statement, &refs(&values))?)
    }

    fn batch(&mut self, sql: &str) -> DbResult<()> {
        Ok(self.tx.batch_execute(sql)?)
    }
}

/// The PostgreSQL backend.
#[derive(Debug)]
pub(super) struct Postgres {
    url: String,
    clients: Mutex<Vec<Pooled>>,
}

impl Drop for Postgres {
    /// Closing a client blocks on its own runtime, which panics on an async thread: the
    /// clients are closed on a thread of their own.
    fn drop(&mut self) {
        let clients = std::mem::take(self.clients.get_mut().unwrap_or_else(|p| p.into_inner()));
        if !clients.is_empty() {
            let _ = std::thread::Builder::new().name("postgres-close".into()).spawn(move || drop(clients));
        }
    }
}

impl Postgres {
    /// Connects and runs `migrate` in one transaction.
    pub(super) fn open(url: &str, migrate: impl FnOnce(&mut dyn Conn) -> DbResult<()>) -> DbResult<Self> {
        let this = Self { url: url.to_owned(), clients: Mutex::new(Vec::new()) };
        this.run(|conn| {
            // Replicas starting together migrate one at a time.
            super::exclusive_with_migrations(conn)?;
            migrate(conn)
        })?;
        Ok(this)
    }

    fn run<T, E: From<DbError>>(&self, f: impl FnOnce(&mut dyn Conn) -> Result<T, E>) -> Result<T, E> {
        let pooled = self.clients.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut pooled = match pooled {
            Some(p) if !p.client.is_closed() => p,
            _ => {
                Pooled { client: Client::connect(&self.url, NoTls).map_err(DbError::from)?, statements: HashMap::new() }
            }
        };
        let out = (|| {
            let mut tx = pooled.client.transaction().map_err(DbError::from)?;
            let out = f(&mut PgConn { tx: &mut tx, statements: &mut pooled.statements })?;
            tx.commit().map_err(DbError::from)?;
            Ok(out)
        })();
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).push(pooled);
        out
    }

    /// Runs `f` in a transaction on the blocking pool.
    pub(super) async fn transaction<T, E, F>(self: &Arc<Self>, f: F) -> Result<T, E>
    where
        F: FnOnce(&mut dyn Conn) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.run(f)).await.map_err(|_| DbError::WorkerGone)?
    }
}
