//! The portable SQL layer under the store: one synchronous connection interface, the same
//! SQL text (`$n` parameters) on SQLite (rusqlite) and PostgreSQL (postgres), values in
//! one small enum. Repository functions take `&mut dyn Conn` inside a transaction the store
//! opened, so a whole change runs in one hop to the database thread.

use std::sync::Arc;

/// A column or parameter value. Times are integer milliseconds, booleans 0/1, structured
/// fields JSON text (see the migrations).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A 64-bit integer.
    Int(i64),
    /// A double.
    Real(f64),
    /// Text.
    Text(String),
}

/// Why a statement failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// SQLite refused or failed a statement.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL refused or failed a statement.
    #[error("postgres: {0}")]
    Postgres(#[from] postgres::Error),
    /// A stored value does not decode into what the code expects.
    #[error("column {column}: {message}")]
    Decode {
        /// The column.
        column: String,
        /// What was wrong.
        message: String,
    },
    /// A statement and its parameters do not match.
    #[error("statement parameters: {0}")]
    Parameters(String),
    /// A query that must return a row returned none.
    #[error("no row returned")]
    NoRow,
    /// The checked-in migrations differ from the ones this database ran.
    #[error("migration {0}")]
    Migration(String),
    /// A database thread could not be started.
    #[error("cannot start a database thread: {0}")]
    Thread(std::io::Error),
    /// The database worker is gone (the service is shutting down, or a write panicked).
    #[error("the database worker stopped")]
    WorkerGone,
}

impl DbError {
    /// Whether SQLite answered "database is locked" (another process holds the file).
    pub fn is_busy(&self) -> bool {
        matches!(self, DbError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) if f.code == rusqlite::ErrorCode::DatabaseBusy)
    }

    /// Whether a unique or primary-key constraint refused the statement (a row with that key
    /// exists, perhaps written by another replica since we looked).
    pub fn is_unique_violation(&self) -> bool {
        match self {
            DbError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => {
                e.code == rusqlite::ErrorCode::ConstraintViolation
                    && matches!(
                        e.extended_code,
                        rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                    )
            }
            DbError::Postgres(e) => e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION),
            _ => false,
        }
    }
}

/// A database failure reaches an API caller as an internal error (here, not in the error
/// module, so that the types below the store never name it).
impl From<DbError> for metal_types::error::ApiError {
    fn from(e: DbError) -> Self {
        metal_types::error::ApiError::Internal(format!("database: {e}"))
    }
}

/// Result of a database call.
pub type DbResult<T> = Result<T, DbError>;

/// Runs an INSERT that may collide with a row another writer (another replica) committed
/// after this transaction looked: true when the row went in, false when a unique key refused
/// it. The statement runs inside a savepoint, so the transaction stays usable after a refusal
/// on both backends (PostgreSQL would otherwise abort it).
pub fn insert_unique(conn: &mut dyn Conn, sql: &str, params: &[&dyn ToValue]) -> DbResult<bool> {
    conn.batch("SAVEPOINT metal_insert_unique")?;
    match conn.execute(sql, params) {
        Ok(_) => {
            conn.batch("RELEASE SAVEPOINT metal_insert_unique")?;
            Ok(true)
        }
        Err(e) if e.is_unique_violation() => {
            conn.batch("ROLLBACK TO SAVEPOINT metal_insert_unique")?;
            conn.batch("RELEASE SAVEPOINT metal_insert_unique")?;
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Something that can be bound as a parameter.
pub trait ToValue: Sync {
    /// The value to bind.
    fn to_value(&self) -> Value;
}

impl ToValue for i64 {
    fn to_value(&self) -> Value {
        Value::Int(*self)
    }
}

impl ToValue for f64 {
    fn to_value(&self) -> Value {
        Value::Real(*self)
    }
}

impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_owned())
    }
}

impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}

/// Something a column decodes into.
pub trait FromValue: Sized {
    /// Decodes, or says what was wrong.
    fn from_value(value: &Value) -> Result<Self, String>;
}

impl FromValue for i64 {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Int(i) => Ok(*i),
            other => Err(format!("expected an integer, found {other:?}")),
        }
    }
}

impl FromValue for f64 {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Real(f) => Ok(*f),
            #[allow(clippy::cast_precision_loss)] // SQLite may hand back a whole REAL as an integer
            Value::Int(i) => Ok(*i as f64),
            other => Err(format!("expected a number, found {other:?}")),
        }
    }
}

impl FromValue for String {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Text(s) => Ok(s.clone()),
            other => Err(format!("expected text, found {other:?}")),
        }
    }
}

impl FromValue for Value {
    fn from_value(value: &Value) -> Result<Self, String> {
        Ok(value.clone())
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// One result row.
#[derive(Debug, Clone)]
pub struct Row {
    columns: Arc<[String]>,
    values: Vec<Value>,
}

impl Row {
    /// A row from column names and values (the backends build these).
    pub(crate) fn new(columns: Arc<[String]>, values: Vec<Value>) -> Self {
        Self { columns, values }
    }

    fn value(&self, column: &str) -> DbResult<&Value> {
        self.columns
            .iter()
            .position(|c| c == column)
            .map(|i| &self.values[i])
            .ok_or_else(|| DbError::Decode { column: column.to_owned(), message: "not in the result".into() })
    }

    /// A column by name.
    pub fn get<T: FromValue>(&self, column: &str) -> DbResult<T> {
        T::from_value(self.value(column)?).map_err(|message| DbError::Decode { column: column.to_owned(), message })
    }

    /// A 0/1 column as a boolean.
    pub fn flag(&self, column: &str) -> DbResult<bool> {
        Ok(self.get::<i64>(column)? != 0)
    }

    /// A JSON text column, parsed.
    pub fn json<T: serde::de::DeserializeOwned>(&self, column: &str) -> DbResult<T> {
        let text: String = self.get(column)?;
        serde_json::from_str(&text).map_err(|e| DbError::Decode { column: column.to_owned(), message: e.to_string() })
    }

    /// A text column through `FromStr`.
    pub fn parse<T: std::str::FromStr>(&self, column: &str) -> DbResult<T>
    where
        T::Err: std::fmt::Display,
    {
        let text: String = self.get(column)?;
        text.parse().map_err(|e: T::Err| DbError::Decode { column: column.to_owned(), message: e.to_string() })
    }

    /// A text column holding a serde enum's string form (`"on"`, `"platform"`).
    pub fn enum_text<T: serde::de::DeserializeOwned>(&self, column: &str) -> DbResult<T> {
        let text: String = self.get(column)?;
        serde_json::from_value(serde_json::Value::String(text))
            .map_err(|e| DbError::Decode { column: column.to_owned(), message: e.to_string() })
    }
}

/// A connection inside a transaction.
pub trait Conn {
    /// Which database this is (for the few statements that differ, such as row locks).
    fn backend(&self) -> super::Backend;

    /// Runs a statement and returns its rows.
    fn query(&mut self, sql: &str, params: &[&dyn ToValue]) -> DbResult<Vec<Row>>;

    /// Runs a statement and returns how many rows it changed.
    fn execute(&mut self, sql: &str, params: &[&dyn ToValue]) -> DbResult<u64>;

    /// Runs several statements without parameters (migrations).
    fn batch(&mut self, sql: &str) -> DbResult<()>;

    /// The first row, if any.
    fn query_opt(&mut self, sql: &str, params: &[&dyn ToValue]) -> DbResult<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The first row, which must exist.
    fn query_one(&mut self, sql: &str, params: &[&dyn ToValue]) -> DbResult<Row> {
        self.query_opt(sql, params)?.ok_or(DbError::NoRow)
    }
}

/// Encodes a value as JSON text for a column.
pub fn to_json<T: serde::Serialize>(value: &T) -> DbResult<String> {
    serde_json::to_string(value).map_err(|e| DbError::Parameters(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Row {
        let columns: Arc<[String]> = ["n", "t", "missing", "flag"].iter().map(|s| (*s).to_owned()).collect();
        Row::new(columns, vec![Value::Int(7), Value::Text("[1,2]".into()), Value::Null, Value::Int(1)])
    }

    #[test]
    fn columns_decode_by_name_and_type() {
        let r = row();
        assert_eq!(r.get::<i64>("n").unwrap(), 7);
        assert_eq!(r.get::<Option<String>>("missing").unwrap(), None);
        assert_eq!(r.json::<Vec<i64>>("t").unwrap(), vec![1, 2]);
        assert!(r.flag("flag").unwrap());
        assert_eq!(r.get::<f64>("n").unwrap(), 7.0);
    }

    #[test]
    fn wrong_types_and_unknown_columns_name_the_column() {
        let r = row();
        let e = r.get::<String>("n").unwrap_err().to_string();
        assert!(e.contains("column n") && e.contains("expected text"), "{e}");
        let e = r.get::<i64>("nope").unwrap_err().to_string();
        assert!(e.contains("column nope") && e.contains("not in the result"), "{e}");
        assert!(r.get::<i64>("missing").is_err());
    }

    #[test]
    fn parameters_convert() {
        assert_eq!(Some("a").to_value(), Value::Text("a".into()));
        assert_eq!(None::<i64>.to_value(), Value::Null);
        let through_a_reference: &dyn ToValue = &&5_i64;
        assert_eq!(through_a_reference.to_value(), Value::Int(5));
    }
}
