//! The tenant side of a simulated site, as a tenant and the platform drive it through the API:
//! a tenant offered the pool, a public image imported from the simulator's file server and
//! promoted, the lessee's profile, and node-binding reservations that run until they are
//! bound (the lessee's OS deployed by the ramdisk). The demo and the tests share these.

use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use crate::site::{GPUS, Options, POOL, Site};

/// The tenant that leases.
pub const TENANT: &str = "acme";
/// The lessee's profile.
pub const PROFILE: &str = "acme-os";
const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops@acme";
/// The longest a stage waits, in real time.
pub const STAGE: Duration = Duration::from_secs(180);

/// The lessee's OS image: 16 MiB.
pub const IMAGE_BYTES: u64 = 16 << 20;

/// A site whose every machine commissioned and whose tenant is prepared ([`prepare`]):
/// where a lease starts from. A machine that fails to commission is an error.
pub async fn prepared(options: &Options) -> anyhow::Result<Site> {
    let site = Site::start(options).await?;
    let failed = site.commission().await?;
    if !failed.is_empty() {
        bail!("machines failed to commission: {}", failed.join(", "));
    }
    prepare(&site).await?;
    Ok(site)
}

/// Creates the tenant, offers it the pool, imports and promotes an OS image and creates the
/// lessee's profile on it; the image's id and SHA-256.
pub async fn prepare(site: &Site) -> anyhow::Result<(String, String)> {
    prepare_with(site, IMAGE_BYTES).await
}

/// [`prepare`] with an image of `image_bytes` (at least 1 MiB; a fleet's worth of deploys
/// writes it to every leased machine's disk file).
pub async fn prepare_with(site: &Site, image_bytes: u64) -> anyhow::Result<(String, String)> {
    let admin = &site.admin;
    admin.post("/v1/tenants", json!({"id": TENANT})).await?;
    admin.post(&format!("/v1/pools/{POOL}/offers"), json!({"tenantId": TENANT})).await?;
    image_profile(site, "sim-os", PROFILE, image_bytes, None).await
}

/// Imports an OS image `name` of `image_bytes` (at least 1 MiB) for `architecture`
/// (Debian's name; `None`: amd64), promotes it and makes the tenant's profile `profile` on
/// it; the image's id and SHA-256.
pub async fn image_profile(
    site: &Site,
    name: &str,
    profile: &str,
    image_bytes: u64,
    architecture: Option<&str>,
) -> anyhow::Result<(String, String)> {
    let admin = &site.admin;
    let image = crate::site::os_image(image_bytes.max(1 << 20));
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&image));
    let url = site.publish(&format!("{name}.img"), &image)?;
    let body = json!({"name": name, "url": url, "checksum": digest, "architecture": architecture});
    let imported = admin.post("/v1/images", body).await?;
    let image_id = imported["id"].as_str().context("the import has no id")?.to_owned();
    site.until("the image imported", STAGE, || async {
        let image = admin.get(&format!("/v1/images/{image_id}")).await?;
        if image["state"] == "failed" {
            bail!("the import failed: {image}");
        }
        Ok(image["state"] == "ready")
    })
    .await?;
    admin.post(&format!("/v1/images/{image_id}/promote"), Value::Null).await?;
    admin
        .post(
            "/v1/profiles",
            json!({"id": profile, "tenantId": TENANT, "image": image_id, "adminUser": "ops", "role": "lessee",
                   "sshAuthorizedKeys": [KEY]}),
        )
        .await?;
    Ok((image_id, digest))
}

/// Reserves `count` whole nodes for `duration` (e.g. `7d`) and waits until every lease is
/// bound; each reservation's id and node, in the order they were made.
pub async fn lease(site: &Site, count: usize, duration: &str) -> anyhow::Result<Vec<(String, String)>> {
    let reservations = reserve(site, count, duration).await?;
    bound(site, reservations).await
}

/// Reserves `count` whole nodes for `duration` (e.g. `7d`), each with the lessee's profile;
/// the reservations' ids, as the API acknowledged them.
pub async fn reserve(site: &Site, count: usize, duration: &str) -> anyhow::Result<Vec<String>> {
    let admin = &site.admin;
    let mut reservations = Vec::new();
    for _ in 0..count {
        let r = admin
            .post(
                "/v1/reservations",
                json!({"tenantId": TENANT, "poolId": POOL, "devices": [{"class": "gpu", "count": GPUS}],
                       "duration": duration, "binding": "node", "node": {"profileId": PROFILE, "profileVersion": 1}}),
            )
            .await?;
        reservations.push(r["id"].as_str().context("a reservation without an id")?.to_owned());
    }
    Ok(reservations)
}

/// Waits until every reservation is bound (its lessee's OS deployed); each one's id and node.
pub async fn bound(site: &Site, reservations: Vec<String>) -> anyhow::Result<Vec<(String, String)>> {
    let admin = &site.admin;
    let mut bound = Vec::new();
    for id in reservations {
        site.until("the lease bound (deployed)", STAGE, || async {
            let r = admin.get(&format!("/v1/reservations/{id}")).await?;
            if matches!(r["state"].as_str(), Some("failed" | "cancelled")) {
                let node = r["nodes"][0].as_str().unwrap_or_default();
                bail!("reservation {id} ended: {r}\n{}", diagnose(site, node).await);
            }
            Ok(r["state"] == "active")
        })
        .await?;
        let r = admin.get(&format!("/v1/reservations/{id}")).await?;
        let node = r["nodes"][0].as_str().context("an active reservation without a node")?.to_owned();
        bound.push((id, node));
    }
    Ok(bound)
}

/// Waits until `node` is in `state`; a node that fails on the way (when `state` is not
/// `failed`), or a wait past [`STAGE`], is an error that says where it stopped.
pub async fn reaches(site: &Site, node: &str, state: &str) -> anyhow::Result<()> {
    let reached = site
        .until(&format!("{node} {state}"), STAGE, || async {
            let n = site.admin.get(&format!("/v1/nodes/{node}")).await?;
            if n["state"] == "failed" && state != "failed" {
                bail!("{node} failed: {}", n["stateReason"]);
            }
            Ok(n["state"] == state)
        })
        .await;
    match reached {
        Ok(()) => Ok(()),
        Err(e) => bail!("{e}\n{}", diagnose(site, node).await),
    }
}

/// Recovers a quarantined node: `recover` runs its teardown again; once it is ready, the
/// operator takes it out of maintenance (where the quarantine put it).
pub async fn recover(site: &Site, node: &str) -> anyhow::Result<()> {
    site.admin.post(&format!("/v1/nodes/{node}/recover"), Value::Null).await?;
    reaches(site, node, "ready").await?;
    site.admin.call("PATCH", &format!("/v1/nodes/{node}"), &json!({"maintenance": false})).await?;
    Ok(())
}

/// Where a node stands, its last teardown, and what its machine said last: for an operator
/// reading a failure.
pub async fn diagnose(site: &Site, node: &str) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    if let Ok(n) = site.admin.get(&format!("/v1/nodes/{node}")).await {
        let _ = writeln!(
            text,
            "{node}: {} ({})",
            n["state"].as_str().unwrap_or("?"),
            n["stateReason"].as_str().unwrap_or("-")
        );
    }
    if let Ok(runs) = site.admin.get(&format!("/v1/nodes/{node}/teardowns")).await
        && let Some(run) = runs.as_array().and_then(|r| r.last())
    {
        let _ = writeln!(
            text,
            "teardown {}: last error: {}",
            run["status"].as_str().unwrap_or("?"),
            run["lastError"].as_str().unwrap_or("-")
        );
    }
    if let Ok(app) = site.app() {
        let id = node.to_owned();
        let runs = app.store.read(move |tx| metal_store::workflows::for_node(tx, &id, "")).await;
        if let Some(run) = runs.ok().and_then(|r| r.into_iter().next_back()) {
            let step = run.current().map_or("-", |s| s.name.as_str());
            let _ = writeln!(
                text,
                "last workflow {} ({:?}) at {step}, attempt {}: {}",
                run.definition,
                run.status,
                run.attempt,
                run.last_error.as_deref().unwrap_or("no error")
            );
        }
    }
    if let Some(machine) = site.machine(node) {
        let _ = writeln!(text, "{node}'s machine: {:?}; console:", machine.state().activity);
        for line in machine.console().iter().rev().take(40).rev() {
            let _ = writeln!(text, "  {line}");
        }
    }
    text
}
