//! Profile rows and their immutable versions. A version's image is resolved to an id when it
//! is created: the image must be ready and visible to the profile's tenant (its own, or
//! public); a public profile may only name a public image.

use serde_json::json;
use time::OffsetDateTime;

use crate::db::to_json;
use crate::page::{Keyset, Order};
use crate::{Conn, DbError, DbResult, events, images};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::image::ImageState;
use metal_types::model::profile::{Profile, ProfileSpec, ProfileVersion};
use metal_types::page::{Page, Paged};

/// Resolves `spec.image` for a profile of `tenant`: the image id (none for an installer
/// deploy).
fn resolve_image(
    conn: &mut dyn Conn,
    tenant: &str,
    public: bool,
    spec: &ProfileSpec,
) -> Result<Option<String>, ApiError> {
    let Some(name) = &spec.image else { return Ok(None) };
    let missing = || ApiError::invalid("image", format!("no image {name} visible to tenant {tenant}"));
    let image = images::find(conn, tenant, name)?.ok_or_else(missing)?;
    if image.tenant_id != tenant && !image.public {
        return Err(missing());
    }
    if image.state != ImageState::Ready {
        return Err(ApiError::Conflict(format!(
            "image {} is {}: a profile can only name a ready image",
            image.id, image.state
        )));
    }
    if public && !image.public {
        return Err(ApiError::invalid(
            "image",
            format!("image {} is not public: a public profile must name a public image (promote it first)", image.id),
        ));
    }
    Ok(Some(image.id))
}

fn insert_version(
    conn: &mut dyn Conn,
    profile: &str,
    version: i64,
    image_id: Option<&str>,
    spec: &ProfileSpec,
    now: OffsetDateTime,
) -> DbResult<()> {
    conn.execute(
        "INSERT INTO profile_versions (profile_id, version, image_id, spec, created_at) VALUES ($1, $2, $3, $4, $5)",
        &[&profile, &version, &image_id, &to_json(spec)?, &to_millis(now)],
    )?;
    Ok(())
}

/// Creates a profile with its version 1.
pub fn insert(
    conn: &mut dyn Conn,
    id: &str,
    tenant: &str,
    public: bool,
    spec: &ProfileSpec,
    now: OffsetDateTime,
) -> Result<Profile, ApiError> {
    if crate::auth::get_tenant(conn, tenant)?.is_none() {
        return Err(ApiError::invalid("tenantId", format!("no tenant {tenant}")));
    }
    let taken = || ApiError::Conflict(format!("profile {id} already exists"));
    if conn.query_opt("SELECT id FROM profiles WHERE id = $1", &[&id])?.is_some() {
        return Err(taken());
    }
    let image_id = resolve_image(conn, tenant, public, spec)?;
    let inserted = conn.execute(
        "INSERT INTO profiles (id, tenant_id, public, latest_version, created_at) VALUES ($1, $2, $3, 1, $4)",
        &[&id, &tenant, &i64::from(public), &to_millis(now)],
    );
    match inserted {
        Err(e) if e.is_unique_violation() => return Err(taken()),
        other => other?,
    };
    insert_version(conn, id, 1, image_id.as_deref(), spec, now)?;
    events::append(
        conn,
        "profile.created",
        &format!("profile/{id}"),
        Some(tenant),
        &json!({"profile": id, "version": 1, "image": image_id}),
        now,
    )?;
    get(conn, id)?.ok_or_else(|| ApiError::Internal("profile vanished".into()))
}

/// Adds the next version; returns the profile.
pub fn add_version(
    conn: &mut dyn Conn,
    id: &str,
    spec: &ProfileSpec,
    now: OffsetDateTime,
) -> Result<Profile, ApiError> {
    let profile = get(conn, id)?.ok_or_else(|| ApiError::NotFound(format!("profile {id}")))?;
    let image_id = resolve_image(conn, &profile.tenant_id, profile.public, spec)?;
    let next = profile.latest_version + 1;
    // The compare-and-set on latest_version: two concurrent versions cannot both be `next`.
    let moved = conn.execute(
        "UPDATE profiles SET latest_version = $1 WHERE id = $2 AND latest_version = $3",
        &[&next, &id, &profile.latest_version],
    )?;
    if moved == 0 {
        return Err(ApiError::Conflict(format!("profile {id} got another version meanwhile; retry")));
    }
    insert_version(conn, id, next, image_id.as_deref(), spec, now)?;
    events::append(
        conn,
        "profile.versioned",
        &format!("profile/{id}"),
        Some(&profile.tenant_id),
        &json!({"profile": id, "version": next, "image": image_id}),
        now,
    )?;
    get(conn, id)?.ok_or_else(|| ApiError::Internal("profile vanished".into()))
}

/// One profile with every version.
pub fn get(conn: &mut dyn Conn, id: &str) -> DbResult<Option<Profile>> {
    let Some(row) =
        conn.query_opt("SELECT id, tenant_id, public, latest_version FROM profiles WHERE id = $1", &[&id])?
    else {
        return Ok(None);
    };
    let versions = conn
        .query(
            "SELECT profile_id, version, image_id, spec, created_at FROM profile_versions WHERE profile_id = $1 \
             ORDER BY version",
            &[&id],
        )?
        .iter()
        .map(|r| {
            Ok(ProfileVersion {
                profile_id: r.get("profile_id")?,
                version: r.get("version")?,
                image_id: r.get("image_id")?,
                spec: r.json("spec")?,
                created_at: from_millis(r.get("created_at")?),
            })
        })
        .collect::<DbResult<Vec<_>>>()?;
    Ok(Some(Profile {
        id: row.get("id")?,
        tenant_id: row.get("tenant_id")?,
        public: row.flag("public")?,
        latest_version: row.get("latest_version")?,
        versions,
    }))
}

/// A page of the profiles a tenant may see (its own and public ones), or of every one for
/// `None`, by id, each with every version.
pub fn page(conn: &mut dyn Conn, scope: Option<&str>, page: &Page) -> Result<Paged<Profile>, ApiError> {
    let mut select = Keyset::new("id", "profiles");
    select.and_some("(tenant_id = {} OR public = 1)", scope);
    select.read(conn, &[("id", Order::Asc)], page, |conn, row| {
        let id: String = row.get("id")?;
        get(conn, &id)?
            .ok_or_else(|| DbError::Decode { column: "id".into(), message: format!("profile {id} vanished") })
    })
}

/// One version of a profile.
pub fn version(conn: &mut dyn Conn, id: &str, version: i64) -> DbResult<Option<(Profile, ProfileVersion)>> {
    let Some(profile) = get(conn, id)? else { return Ok(None) };
    let found = profile.versions.iter().find(|v| v.version == version).cloned();
    Ok(found.map(|v| (profile, v)))
}

/// Profiles whose latest version asks for `autoDeploy`, with how many machines they are short:
/// `(profile, latest version, missing)`. A machine counts while its plan was derived from
/// the profile (any version) and it is allocated, deploying or deployed.
pub fn auto_deploy_shortfalls(conn: &mut dyn Conn) -> DbResult<Vec<(String, i64, u32)>> {
    let rows = conn.query(
        "SELECT v.profile_id, v.version, v.spec FROM profile_versions v JOIN profiles p \
         ON p.id = v.profile_id AND p.latest_version = v.version ORDER BY v.profile_id",
        &[],
    )?;
    let mut out = Vec::new();
    for row in &rows {
        let spec: ProfileSpec = row.json("spec")?;
        let Some(auto) = spec.auto_deploy else { continue };
        let profile: String = row.get("profile_id")?;
        let have: i64 = conn
            .query_one(
                "SELECT COUNT(*) AS n FROM deploy_plans d JOIN nodes n ON n.id = d.node_id \
                 WHERE d.profile_id = $1 AND n.state IN ('allocated', 'deploying', 'deployed')",
                &[&profile],
            )?
            .get("n")?;
        let missing = i64::from(auto.desired) - have;
        if missing > 0 {
            out.push((profile, row.get("version")?, u32::try_from(missing).unwrap_or(u32::MAX)));
        }
    }
    Ok(out)
}
