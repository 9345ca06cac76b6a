//! Image rows: the import's request, progress and verdict, and the stored image's plan.
//!
//! An import is claimed by one worker with a lease (`owner`, `lease_until`) that its
//! progress updates renew; every update is fenced by the owner, so a worker whose lease
//! lapsed (a replica that stalled, a service that died) can never overwrite the one that
//! took over. A restarted service finds imports whose lease lapsed and resumes them.

use serde_json::json;
use time::OffsetDateTime;

use crate::db::to_json;
use crate::page::{Keyset, Order};
use crate::{Conn, DbResult, Row, events};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::image::{Image, ImageOrigin, ImagePlan, ImageProgress, ImageState};
use metal_types::page::{Page, Paged};

const COLUMNS: &str = "id, generation, tenant_id, name, public, state, source, bytes_done, bytes_total, rate_bps, \
                       attempts, error, source_format, plan, created_at, updated_at";

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn from_row(row: &Row) -> DbResult<Image> {
    let done = unsigned(row.get("bytes_done")?);
    let total = row.get::<Option<i64>>("bytes_total")?.map(unsigned);
    let plan: Option<ImagePlan> = row.get::<Option<String>>("plan")?.map(|_| row.json("plan")).transpose()?;
    #[allow(clippy::cast_precision_loss)] // a percentage
    let percent = total.filter(|t| *t > 0).map(|t| ((done as f64 / t as f64) * 1000.0).round() / 10.0);
    Ok(Image {
        id: row.get("id")?,
        generation: row.get("generation")?,
        tenant_id: row.get("tenant_id")?,
        name: row.get("name")?,
        public: row.flag("public")?,
        state: row.parse("state")?,
        origin: row.json("source")?,
        progress: ImageProgress {
            bytes_done: done,
            bytes_total: total,
            percent,
            rate_bytes_per_second: unsigned(row.get("rate_bps")?),
        },
        attempts: unsigned(row.get("attempts")?),
        error: row.get("error")?,
        source_format: row.get("source_format")?,
        served_size_bytes: plan.as_ref().map(|p| p.image.size_bytes),
        raw_size_bytes: plan.as_ref().map(|p| p.chunks.raw_size_bytes),
        served_sha256: plan.map(|p| p.image.digest.hex),
        created_at: from_millis(row.get("created_at")?),
        updated_at: from_millis(row.get("updated_at")?),
    })
}

/// Who takes a new import: the replica that accepted it, until its lease ends.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The worker's owner name.
    pub owner: &'a str,
    /// When its lease ends unless renewed.
    pub until: OffsetDateTime,
}

/// Records a new import (state importing), claimed by `claim` from the start (no other
/// replica's pass can take it before its worker starts), with its `image.import.started`
/// event.
pub fn insert(
    conn: &mut dyn Conn,
    id: &str,
    tenant_id: &str,
    name: &str,
    origin: &ImageOrigin,
    claim: Claim<'_>,
    now: OffsetDateTime,
) -> Result<Image, ApiError> {
    if crate::auth::get_tenant(conn, tenant_id)?.is_none() {
        return Err(ApiError::invalid("tenantId", format!("no tenant {tenant_id}")));
    }
    let taken = || ApiError::Conflict(format!("tenant {tenant_id} already has an image named {name}"));
    if conn.query_opt("SELECT id FROM images WHERE tenant_id = $1 AND name = $2", &[&tenant_id, &name])?.is_some() {
        return Err(taken());
    }
    let inserted = conn.execute(
        "INSERT INTO images (id, generation, tenant_id, name, public, state, source, bytes_done, rate_bps, attempts, \
         owner, lease_until, created_at, updated_at) VALUES ($1, 1, $2, $3, 0, 'importing', $4, 0, 0, 0, $5, $6, $7, $8)",
        &[&id, &tenant_id, &name, &to_json(origin)?, &claim.owner, &to_millis(claim.until), &to_millis(now), &to_millis(now)],
    );
    match inserted {
        Err(e) if e.is_unique_violation() => return Err(taken()),
        other => other?,
    };
    events::append(
        conn,
        "image.import.started",
        &format!("image/{id}"),
        Some(tenant_id),
        &json!({"image": id, "name": name, "url": origin.url}),
        now,
    )?;
    get(conn, id)?.ok_or_else(|| ApiError::Internal("image vanished".into()))
}

/// One image.
pub fn get(conn: &mut dyn Conn, id: &str) -> DbResult<Option<Image>> {
    conn.query_opt(&format!("SELECT {COLUMNS} FROM images WHERE id = $1"), &[&id])?.as_ref().map(from_row).transpose()
}

/// The image named `name` in `tenant`, or with that id.
pub fn find(conn: &mut dyn Conn, tenant: &str, id_or_name: &str) -> DbResult<Option<Image>> {
    if let Some(image) = get(conn, id_or_name)? {
        return Ok(Some(image));
    }
    conn.query_opt(
        &format!("SELECT {COLUMNS} FROM images WHERE tenant_id = $1 AND name = $2"),
        &[&tenant, &id_or_name],
    )?
    .as_ref()
    .map(from_row)
    .transpose()
}

/// A page of the images a tenant may see (its own and public ones), or of all of them for
/// `None`, by tenant and name.
pub fn page(conn: &mut dyn Conn, scope: Option<&str>, page: &Page) -> Result<Paged<Image>, ApiError> {
    let mut select = Keyset::new(COLUMNS, "images");
    select.and_some("(tenant_id = {} OR public = 1)", scope);
    let key = [("tenant_id", Order::Asc), ("name", Order::Asc), ("id", Order::Asc)];
    select.read(conn, &key, page, |_, row| from_row(row))
}

/// The stored plan of a ready image.
pub fn plan(conn: &mut dyn Conn, id: &str) -> DbResult<Option<ImagePlan>> {
    conn.query_opt("SELECT plan FROM images WHERE id = $1 AND state = 'ready'", &[&id])?
        .map(|row| row.json("plan"))
        .transpose()
}

/// Imports no live worker holds: the ones a restart (or a dead replica) left behind.
pub fn orphaned(conn: &mut dyn Conn, now: OffsetDateTime) -> DbResult<Vec<String>> {
    conn.query(
        "SELECT id FROM images WHERE state = 'importing' AND (lease_until IS NULL OR lease_until < $1) ORDER BY created_at",
        &[&to_millis(now)],
    )?
    .iter()
    .map(|row| row.get("id"))
    .collect()
}

/// Takes the import for `owner` until `lease_until` when nobody else holds a live lease.
pub fn claim(
    conn: &mut dyn Conn,
    id: &str,
    owner: &str,
    now: OffsetDateTime,
    lease_until: OffsetDateTime,
) -> DbResult<bool> {
    Ok(conn.execute(
        "UPDATE images SET owner = $1, lease_until = $2, generation = generation + 1 WHERE id = $3 \
         AND state = 'importing' AND (owner IS NULL OR owner = $1 OR lease_until IS NULL OR lease_until < $4)",
        &[&owner, &to_millis(lease_until), &id, &to_millis(now)],
    )? == 1)
}

/// A progress update from the import's owner (renewing its lease); false when the import is
/// no longer this owner's.
#[allow(clippy::too_many_arguments)] // one row's progress columns
pub fn progress(
    conn: &mut dyn Conn,
    id: &str,
    owner: &str,
    progress: &ImageProgress,
    attempts: u64,
    error: Option<&str>,
    now: OffsetDateTime,
    lease_until: OffsetDateTime,
) -> DbResult<bool> {
    Ok(conn.execute(
        "UPDATE images SET bytes_done = $1, bytes_total = $2, rate_bps = $3, attempts = $4, error = $5, \
         lease_until = $6, updated_at = $7 WHERE id = $8 AND owner = $9 AND state = 'importing'",
        &[
            &signed(progress.bytes_done),
            &progress.bytes_total.map(signed),
            &signed(progress.rate_bytes_per_second),
            &signed(attempts),
            &error,
            &to_millis(lease_until),
            &to_millis(now),
            &id,
            &owner,
        ],
    )? == 1)
}

/// How an import ended.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// Stored in its served form.
    Ready {
        /// The served file and its manifest.
        plan: ImagePlan,
        /// What was downloaded (`raw`, `gzip`, `xz`, `zstd`, `qcow2`).
        source_format: String,
    },
    /// No image; why.
    Failed(String),
}

/// Ends the owner's import with its verdict and event; false when it is not this owner's.
pub fn finish(conn: &mut dyn Conn, id: &str, owner: &str, verdict: &Verdict, now: OffsetDateTime) -> DbResult<bool> {
    let (state, plan, format, error) = match verdict {
        Verdict::Ready { plan, source_format } => {
            (ImageState::Ready, Some(to_json(plan)?), Some(source_format.as_str()), None)
        }
        Verdict::Failed(reason) => (ImageState::Failed, None, None, Some(reason.as_str())),
    };
    let done = conn.execute(
        "UPDATE images SET state = $1, plan = $2, source_format = $3, error = $4, owner = NULL, lease_until = NULL, \
         rate_bps = 0, updated_at = $5, generation = generation + 1 WHERE id = $6 AND owner = $7 AND state = 'importing'",
        &[&state.as_str(), &plan, &format, &error, &to_millis(now), &id, &owner],
    )? == 1;
    if done && let Some(image) = get(conn, id)? {
        let (kind, data) = match verdict {
            Verdict::Ready { plan, .. } => (
                "image.imported",
                json!({"image": id, "name": image.name, "rawSizeBytes": plan.chunks.raw_size_bytes,
                       "servedSizeBytes": plan.image.size_bytes, "servedSha256": plan.image.digest.hex}),
            ),
            Verdict::Failed(reason) => {
                ("image.import.failed", json!({"image": id, "name": image.name, "reason": reason}))
            }
        };
        events::append(conn, kind, &format!("image/{id}"), Some(&image.tenant_id), &data, now)?;
    }
    Ok(done)
}

/// Makes an image public (platform only).
pub fn promote(conn: &mut dyn Conn, id: &str, now: OffsetDateTime) -> Result<Image, ApiError> {
    let image = get(conn, id)?.ok_or_else(|| ApiError::NotFound(format!("image {id}")))?;
    if image.state != ImageState::Ready {
        return Err(ApiError::Conflict(format!("image {id} is {}: only a ready image can be promoted", image.state)));
    }
    conn.execute(
        "UPDATE images SET public = 1, updated_at = $1, generation = generation + 1 WHERE id = $2",
        &[&to_millis(now), &id],
    )?;
    events::append(conn, "image.promoted", &format!("image/{id}"), Some(&image.tenant_id), &json!({"image": id}), now)?;
    get(conn, id)?.ok_or_else(|| ApiError::NotFound(format!("image {id}")))
}

/// Deletes an image no profile version names; returns it (its files are the caller's to remove).
pub fn delete(conn: &mut dyn Conn, id: &str, now: OffsetDateTime) -> Result<Image, ApiError> {
    let image = get(conn, id)?.ok_or_else(|| ApiError::NotFound(format!("image {id}")))?;
    let users = conn.query(
        "SELECT profile_id, version FROM profile_versions WHERE image_id = $1 ORDER BY profile_id, version",
        &[&id],
    )?;
    if !users.is_empty() {
        let names = users
            .iter()
            .map(|r| Ok(format!("{}:{}", r.get::<String>("profile_id")?, r.get::<i64>("version")?)))
            .collect::<DbResult<Vec<_>>>()?;
        return Err(ApiError::Conflict(format!("image {id} is named by profile versions {}", names.join(", "))));
    }
    conn.execute("DELETE FROM images WHERE id = $1", &[&id])?;
    events::append(conn, "image.deleted", &format!("image/{id}"), Some(&image.tenant_id), &json!({"image": id}), now)?;
    Ok(image)
}
