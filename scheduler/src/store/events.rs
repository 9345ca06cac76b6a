//! The outbox: `append` inside the writing transaction, `after` to read in order.

use sqlx::{AnyConnection, Row as _};
use time::OffsetDateTime;

use crate::clock::{from_millis, to_millis};
use crate::model::event::Event;

/// Appends an event in the caller's transaction and returns its sequence number. The
/// counter row's UPDATE serialises appenders, so sequence numbers have no gaps or reuse.
pub async fn append(
    conn: &mut AnyConnection,
    kind: &str,
    subject: &str,
    tenant_id: Option<&str>,
    data: &serde_json::Value,
    at: OffsetDateTime,
) -> Result<i64, sqlx::Error> {
    let seq: i64 = sqlx::query("UPDATE counters SET value = value + 1 WHERE name = 'events' RETURNING value")
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)?;
    sqlx::query("INSERT INTO events (seq, kind, subject, tenant_id, data, at) VALUES ($1, $2, $3, $4, $5, $6)")
        .bind(seq)
        .bind(kind)
        .bind(subject)
        .bind(tenant_id)
        .bind(data.to_string())
        .bind(to_millis(at))
        .execute(&mut *conn)
        .await?;
    Ok(seq)
}

/// Events after `seq`, oldest first, at most `limit`; only `tenant`'s when given.
pub async fn after(
    pool: &sqlx::AnyPool,
    seq: i64,
    limit: i64,
    tenant: Option<&str>,
) -> Result<Vec<Event>, sqlx::Error> {
    let rows = match tenant {
        Some(t) => {
            sqlx::query("SELECT seq, kind, subject, tenant_id, data, at FROM events WHERE seq > $1 AND tenant_id = $2 ORDER BY seq LIMIT $3")
                .bind(seq)
                .bind(t)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }
        None => {
            sqlx::query("SELECT seq, kind, subject, tenant_id, data, at FROM events WHERE seq > $1 ORDER BY seq LIMIT $2")
                .bind(seq)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }
    };
    rows.iter()
        .map(|row| {
            let data: String = row.try_get("data")?;
            Ok(Event {
                seq: row.try_get("seq")?,
                kind: row.try_get("kind")?,
                subject: row.try_get("subject")?,
                tenant_id: row.try_get("tenant_id")?,
                data: serde_json::from_str(&data).map_err(crate::store::decode_err)?,
                at: from_millis(row.try_get("at")?),
            })
        })
        .collect()
}

/// The newest sequence number.
pub async fn last_seq(pool: &sqlx::AnyPool) -> Result<i64, sqlx::Error> {
    sqlx::query("SELECT value FROM counters WHERE name = 'events'").fetch_one(pool).await?.try_get(0)
}
