//! Reading one page of a collection (`metal_types::page`): a SELECT whose filters are
//! added one by one, in the order of its key columns after the page's cursor, `limit + 1`
//! rows. The cursor's key is the last row's key columns as a JSON array, so a key of
//! several columns (newest first, then id) pages as exactly as a single id.

use metal_types::error::ApiError;
use metal_types::page::{Page, Paged, encode_cursor};

use crate::db::{ToValue, Value};
use crate::{Conn, DbResult, Row};

/// The direction of a key column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Smallest first.
    Asc,
    /// Largest first.
    Desc,
}

/// A SELECT being filtered, then read as a page.
#[derive(Debug)]
pub struct Keyset {
    columns: String,
    table: &'static str,
    conditions: Vec<String>,
    params: Vec<Value>,
}

impl ToValue for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}

impl Keyset {
    /// `SELECT columns FROM table`, to be filtered. The key columns are read besides
    /// `columns` whatever they are: the next cursor is made of them.
    pub fn new(columns: impl Into<String>, table: &'static str) -> Self {
        Keyset { columns: columns.into(), table, conditions: Vec::new(), params: Vec::new() }
    }

    /// The next parameter's placeholder, once `value` is bound.
    fn bind(&mut self, value: &dyn ToValue) -> String {
        self.params.push(value.to_value());
        format!("${}", self.params.len())
    }

    /// Adds a condition; each `{}` in it stands for `value`'s placeholder.
    pub fn and(&mut self, condition: &str, value: &dyn ToValue) -> &mut Self {
        let placeholder = self.bind(value);
        self.conditions.push(condition.replace("{}", &placeholder));
        self
    }

    /// Adds a condition without parameters.
    pub fn and_sql(&mut self, condition: &str) -> &mut Self {
        self.conditions.push(condition.to_owned());
        self
    }

    /// Adds `condition` when `value` is given.
    pub fn and_some<T: ToValue>(&mut self, condition: &str, value: Option<T>) -> &mut Self {
        if let Some(value) = value {
            self.and(condition, &value);
        }
        self
    }

    /// Reads the page: the rows in `key` order after the cursor's key, each decoded by
    /// `decode` (which may read more in the same transaction). Every key column must be in
    /// the SELECT's result under its own name.
    pub fn read<T>(
        self,
        conn: &mut dyn Conn,
        key: &[(&str, Order)],
        page: &Page,
        mut decode: impl FnMut(&mut dyn Conn, &Row) -> DbResult<T>,
    ) -> Result<Paged<T>, ApiError> {
        let after = page.after.as_deref().map(|after| key_values(after, key.len())).transpose()?;
        let rows = self.rows(conn, key, after, Some(page.fetch()))?;
        let limit = usize::try_from(page.limit).unwrap_or(usize::MAX);
        // The key of the page's last row becomes the next cursor; only that one is needed.
        let last_key = match rows.get(limit.saturating_sub(1)) {
            Some(last) if rows.len() > limit => Some(row_key(last, key)?),
            _ => None,
        };
        let items = rows.iter().take(limit).map(|row| decode(conn, row)).collect::<DbResult<Vec<T>>>()?;
        Ok(Paged { items, next: last_key.map(|k| encode_cursor(&k)) })
    }

    /// Reads every row in `key` order (for the service's own reads, which want them all).
    pub fn all<T>(
        self,
        conn: &mut dyn Conn,
        key: &[(&str, Order)],
        mut decode: impl FnMut(&mut dyn Conn, &Row) -> DbResult<T>,
    ) -> DbResult<Vec<T>> {
        self.rows(conn, key, None, None)?.iter().map(|row| decode(conn, row)).collect()
    }

    fn rows(
        mut self,
        conn: &mut dyn Conn,
        key: &[(&str, Order)],
        after: Option<Vec<Value>>,
        limit: Option<i64>,
    ) -> DbResult<Vec<Row>> {
        if let Some(values) = after {
            let mut alternatives = Vec::new();
            for (i, (column, order)) in key.iter().enumerate() {
                let mut terms: Vec<String> = Vec::new();
                for (equal, value) in key[..i].iter().zip(&values) {
                    terms.push(format!("{} = {}", equal.0, self.bind(value)));
                }
                let op = if *order == Order::Asc { ">" } else { "<" };
                terms.push(format!("{column} {op} {}", self.bind(&values[i])));
                alternatives.push(format!("({})", terms.join(" AND ")));
            }
            self.conditions.push(format!("({})", alternatives.join(" OR ")));
        }
        let key_columns: Vec<&str> = key.iter().map(|(column, _)| *column).collect();
        let mut sql = format!("SELECT {}, {} FROM {}", self.columns, key_columns.join(", "), self.table);
        if !self.conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&self.conditions.join(" AND "));
        }
        let order: Vec<String> =
            key.iter().map(|(c, o)| format!("{c} {}", if *o == Order::Asc { "ASC" } else { "DESC" })).collect();
        sql.push_str(&format!(" ORDER BY {}", order.join(", ")));
        if let Some(limit) = limit {
            sql.push_str(&format!(" LIMIT {}", self.bind(&limit)));
        }
        let params: Vec<&dyn ToValue> = self.params.iter().map(|v| v as &dyn ToValue).collect();
        conn.query(&sql, &params)
    }
}

/// The key columns of a row as the JSON array a cursor carries.
fn row_key(row: &Row, key: &[(&str, Order)]) -> DbResult<String> {
    let mut values = Vec::with_capacity(key.len());
    for (column, _) in key {
        values.push(match row.get::<Value>(column)? {
            Value::Int(i) => serde_json::Value::from(i),
            Value::Text(s) => serde_json::Value::from(s),
            Value::Real(f) => serde_json::Value::from(f),
            Value::Null => serde_json::Value::Null,
        });
    }
    Ok(serde_json::Value::Array(values).to_string())
}

/// A cursor's key back as values to bind, refused unless it has the key's shape.
fn key_values(after: &str, columns: usize) -> Result<Vec<Value>, ApiError> {
    let refused = || ApiError::invalid("cursor", "not a cursor of this collection (take it from a page's Link header)");
    let parsed: Vec<serde_json::Value> = serde_json::from_str(after).map_err(|_| refused())?;
    if parsed.len() != columns {
        return Err(refused());
    }
    parsed
        .into_iter()
        .map(|v| match v {
            serde_json::Value::String(s) => Ok(Value::Text(s)),
            serde_json::Value::Number(n) => n.as_i64().map(Value::Int).ok_or_else(refused),
            _ => Err(refused()),
        })
        .collect()
}

/// One node's rows of a table (its wipe reports, boots, attestations): the SELECT, the key
/// and the decoding, read whole by the service or a page at a time by the API.
#[derive(Debug)]
pub struct NodeRows<T> {
    /// The table (it has a `node_id` column).
    pub table: &'static str,
    /// The columns read.
    pub columns: &'static str,
    /// The key columns, in order.
    pub key: &'static [(&'static str, Order)],
    /// One row to its value.
    pub decode: fn(&Row) -> DbResult<T>,
}

impl<T> NodeRows<T> {
    fn of(&self, node_id: &str) -> Keyset {
        let mut select = Keyset::new(self.columns, self.table);
        select.and("node_id = {}", &node_id);
        select
    }

    /// Every row of the node, in key order.
    pub fn all(&self, conn: &mut dyn Conn, node_id: &str) -> DbResult<Vec<T>> {
        self.of(node_id).all(conn, self.key, |_, row| (self.decode)(row))
    }

    /// A page of the node's rows.
    pub fn page(&self, conn: &mut dyn Conn, node_id: &str, page: &Page) -> Result<Paged<T>, ApiError> {
        self.of(node_id).read(conn, self.key, page, |_, row| (self.decode)(row))
    }
}
