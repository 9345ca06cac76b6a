//! Billing over real HTTP: hourly windows, partial hours pro rata, GPUs healthy at each
//! window's start, deterministic records that never bill twice, and usage queries.

use crate::common;

use std::time::Duration;

use common::Site;
use serde_json::{Value, json};

/// Tenant acme, tenant-root pool p1 offered to it, and ready node n1 with 8 healthy GPUs.
async fn site_with_one_node() -> (Site, String, Vec<Value>) {
    let site = Site::start().await;
    let acme = site.tenant("acme").await;
    site.profile("acme", "acme-root-os").await;
    site.profile("acme", "os").await;
    let pool = json!({"id": "p1", "tenantId": "root", "siteId": "s", "class": "c", "policy": {"tenantRoot": true}});
    site.admin("POST", "/v1/pools", Some(pool)).await;
    site.admin("POST", "/v1/pools/p1/offers", Some(json!({"tenantId": "acme"}))).await;
    let gpus: Vec<Value> = (0..8).map(|g| json!({"id": format!("gpu{g}"), "class": "gpu", "healthy": true})).collect();
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n1", "poolId": "p1", "devices": gpus.clone()}))).await;
    site.admin("POST", "/v1/nodes/n1/transitions", Some(json!({"from": "new", "to": "commissioning", "owner": "t"})))
        .await;
    let (s, b) =
        site.admin("POST", "/v1/nodes/n1/transitions", Some(json!({"from": "commissioning", "to": "ready"}))).await;
    assert_eq!(s, 200, "{b}");
    (site, acme, gpus)
}

#[tokio::test]
async fn a_lease_bound_and_released_mid_hour_bills_pro_rata_and_only_once() {
    let (site, acme, gpus) = site_with_one_node().await; // clock: 2026-12-01 10:00 UTC

    site.clock.advance(Duration::from_secs(20 * 60)); // 10:20
    let body = json!({"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 8}], "duration": "7d",
                      "binding": "node", "node": {"profileId": "acme-root-os", "profileVersion": 1}});
    let (s, lease) = site.call(Some(&acme), "POST", "/v1/reservations", Some(body)).await;
    assert_eq!(s, 201, "{lease}");
    let id = lease["id"].as_str().unwrap().to_owned();
    site.clock.advance(Duration::from_secs(10 * 60)); // 10:30: deploy done, billing starts
    site.bound_by_metal(&id).await;

    site.clock.advance(Duration::from_secs(60 * 60)); // 11:30: two GPUs fail (platform-trusted)
    let mut degraded = gpus.clone();
    degraded[0]["healthy"] = json!(false);
    degraded[1]["healthy"] = json!(false);
    let (s, _) = site.admin("PATCH", "/v1/nodes/n1", Some(json!({"devices": degraded}))).await;
    assert_eq!(s, 200);
    assert!(
        metal_capacity::billing::bill_once(&site.app.store, &*site.app.clock).await.unwrap() > 0,
        "the 10:00 window is complete"
    );

    site.clock.advance(Duration::from_secs(105 * 60)); // 13:15: released
    let (s, _) = site.call(Some(&acme), "POST", &format!("/v1/reservations/{id}/release"), None).await;
    assert_eq!(s, 200);
    metal_capacity::billing::bill_once(&site.app.store, &*site.app.clock).await.unwrap();
    site.clock.advance(Duration::from_secs(3 * 3600));
    assert_eq!(
        metal_capacity::billing::bill_once(&site.app.store, &*site.app.clock).await.unwrap(),
        0,
        "emitting again bills nothing twice"
    );

    let (s, usage) = site.call(Some(&acme), "GET", "/v1/usage", None).await;
    assert_eq!(s, 200, "{usage}");
    assert_eq!(usage["totals"]["node.metal.hours"], 2.75, "0.5 + 1 + 1 + 0.25: {usage}");
    assert_eq!(usage["totals"]["gpu.hours"], 19.5, "8x0.5 + 8x1 + 6x1 + 6x0.25: {usage}");
    let node_hours: Vec<f64> = usage["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["meter"] == "node.metal.hours")
        .map(|r| r["quantity"].as_f64().unwrap())
        .collect();
    assert_eq!(node_hours, [0.5, 1.0, 1.0, 0.25]);
    assert_eq!(usage["records"][0]["id"], format!("{id}/n1/gpu.hours/1796119200000"));

    // A range picks windows by their start; other tenants see none of it.
    let (_, part) =
        site.call(Some(&acme), "GET", "/v1/usage?from=2026-12-01T11:00:00Z&to=2026-12-01T13:00:00Z", None).await;
    assert_eq!(part["totals"]["node.metal.hours"], 2.0);
    let globex = site.tenant("globex").await;
    let (s, _) = site.call(Some(&globex), "GET", "/v1/usage?tenantId=acme", None).await;
    assert_eq!(s, 404);
    let (s, body) = site.admin("GET", "/v1/usage", None).await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("tenantId")));
    let (s, admin_view) = site.admin("GET", "/v1/usage?tenantId=acme", None).await;
    assert_eq!((s, &admin_view["totals"]), (200, &usage["totals"]));
    // Meter events give their window like every other time: RFC 3339.
    let (_, page) = site.admin("GET", "/v1/events?after=0", None).await;
    let metered: Vec<&Value> =
        page["events"].as_array().unwrap().iter().filter(|e| e["kind"] == "billing.metered").collect();
    assert!(!metered.is_empty());
    assert_eq!(metered[0]["data"]["windowStart"], "2026-12-01T10:00:00Z", "{}", metered[0]);
}

#[tokio::test]
async fn an_unbound_or_never_started_lease_bills_nothing() {
    let (site, acme, _) = site_with_one_node().await;
    let body = json!({"tenantId": "acme", "poolId": "p1", "duration": "1d", "binding": "node", "node": {"profileId": "os", "profileVersion": 1}});
    site.call(Some(&acme), "POST", "/v1/reservations", Some(body)).await;
    site.clock.advance(Duration::from_secs(3 * 3600));
    metal_capacity::leases::tick(&site.app.store, &*site.app.clock).await.unwrap();
    assert_eq!(metal_capacity::billing::bill_once(&site.app.store, &*site.app.clock).await.unwrap(), 0);
    let (_, usage) = site.call(Some(&acme), "GET", "/v1/usage", None).await;
    assert_eq!(usage["records"], json!([]));
}
