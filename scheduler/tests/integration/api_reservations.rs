//! Pools, reservations and whole-node placement over real HTTP against a real SQLite file.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Site, error};
use serde_json::{Value, json};

/// A site with tenant acme, pool p1 (tenant-root) offered to it, and `racks` x `per_rack`
/// ready nodes with 8 GPUs each. Returns the site and acme's token.
pub(crate) async fn site_with_nodes(racks: usize, per_rack: usize) -> (Site, String) {
    let site = Site::start().await;
    let acme = site.tenant("acme").await;
    site.profile("root", "acme-root-os").await;
    let pool = json!({"id": "p1", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated",
        "policy": {"hardwareProfile": "gpu-redfish", "tenantRoot": true, "firmwareBaseline": {"bmc": "1.12.0", "bios": "2.4.1"},
                   "firmwareRemediation": "reflash", "firmwareImages": {"bios": {"url": "https://fw.site-a/bios-2.4.1.bin", "sha256": "ab".repeat(32)}}}});
    let (s, body) = site.admin("POST", "/v1/pools", Some(pool)).await;
    assert_eq!(s, 201, "{body}");
    let (s, _) = site.admin("POST", "/v1/pools/p1/offers", Some(json!({"tenantId": "acme"}))).await;
    assert_eq!(s, 200);
    let mut nodes = Vec::new();
    for r in 0..racks {
        for i in 0..per_rack {
            let gpus: Vec<Value> =
                (0..8).map(|g| json!({"id": format!("gpu{g}"), "class": "gpu", "healthy": true})).collect();
            nodes.push(json!({"id": format!("r{r}n{i}"), "poolId": "p1", "labels": {"rack": format!("r{r}")}, "devices": gpus}));
        }
    }
    let (s, body) = site.admin("POST", "/v1/nodes/import", Some(Value::Array(nodes.clone()))).await;
    assert_eq!(s, 200, "{body}");
    for n in &nodes {
        let id = n["id"].as_str().unwrap();
        site.admin(
            "POST",
            &format!("/v1/nodes/{id}/transitions"),
            Some(json!({"from": "new", "to": "commissioning", "owner": "t"})),
        )
        .await;
        let (s, _) = site
            .admin(
                "POST",
                &format!("/v1/nodes/{id}/transitions"),
                Some(json!({"from": "commissioning", "to": "ready"})),
            )
            .await;
        assert_eq!(s, 200);
    }
    (site, acme)
}

pub(crate) async fn reserve(site: &Site, token: &str, body: Value) -> (u16, Value) {
    site.call(Some(token), "POST", "/v1/reservations", Some(body)).await
}

pub(crate) fn lease(extra: Value) -> Value {
    let mut body = json!({"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 8}], "duration": "7d",
                          "binding": "node", "node": {"profileId": "acme-root-os", "profileVersion": 1}});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test]
async fn pools_validate_field_by_field_and_tenants_see_only_offered_ones() {
    let (site, acme) = site_with_nodes(1, 2).await;
    for (policy, field) in [
        (
            json!({"firmwareImages": {"bios": {"url": "https://x/y", "sha256": "ab".repeat(32)}}}),
            "policy.firmwareImages.bios",
        ),
        (
            json!({"firmwareBaseline": {"bios": "1"}, "firmwareImages": {"bios": {"url": "http://x/y", "sha256": "ab".repeat(32)}}}),
            "policy.firmwareImages.bios.url",
        ),
        (
            json!({"firmwareBaseline": {"bios": "1"}, "firmwareImages": {"bios": {"url": "https://x/y", "sha256": "AB"}}}),
            "policy.firmwareImages.bios.sha256",
        ),
        (json!({"firmwareRemediation": "reflash"}), "policy.firmwareImages"),
        (json!({"allowUnverifiedRelease": true}), "policy.allowUnverifiedRelease"),
        (json!({"firmwareBaseline": {"bad component!": "1"}}), "policy.firmwareBaseline"),
        (json!({"agent": "none", "measuredBoot": {"mode": "enforce"}}), "policy.measuredBoot.mode"),
        (json!({"measuredBoot": {"mode": "learn", "pcrs": [0, 9]}}), "policy.measuredBoot.pcrs"),
        (json!({"measuredBoot": {"mode": "learn", "pcrs": [1, 1]}}), "policy.measuredBoot.pcrs"),
        (json!({"measuredBoot": {"mode": "learn", "pcrs": []}}), "policy.measuredBoot.pcrs"),
        (json!({"measuredBoot": {"mode": "learn", "nodePcrs": [8]}}), "policy.measuredBoot.nodePcrs"),
        (json!({"agent": "none", "biosBaseline": {"attributes": {"A": 1}}}), "policy.biosBaseline"),
        (json!({"biosBaseline": {"attributes": {}}}), "policy.biosBaseline.attributes"),
        (json!({"biosBaseline": {"attributes": {"BootOrder": ["Pxe"]}}}), "policy.biosBaseline.attributes.BootOrder"),
    ] {
        let (s, body) = site
            .admin(
                "POST",
                "/v1/pools",
                Some(json!({"tenantId": "root", "siteId": "s", "class": "c", "policy": policy})),
            )
            .await;
        assert_eq!(s, 422, "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }
    let (s, body) = site
        .admin(
            "POST",
            "/v1/pools",
            Some(json!({"tenantId": "root", "siteId": "s", "class": "c", "policy": {"agent": "none", "colour": 1}})),
        )
        .await;
    assert_eq!(s, 422, "unknown policy fields are refused: {body}");
    let (s, body) =
        site.admin("POST", "/v1/pools", Some(json!({"tenantId": "nobody", "siteId": "s", "class": "c"}))).await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("tenantId")));
    let (s, _) = site
        .admin("POST", "/v1/pools", Some(json!({"id": "p2", "tenantId": "root", "siteId": "s", "class": "c"})))
        .await;
    assert_eq!(s, 201);

    let (_, pools) = site.call(Some(&acme), "GET", "/v1/pools", None).await;
    let ids: Vec<&str> = pools.as_array().unwrap().iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["p1"], "p2 is not offered to acme");
    assert!(pools[0].get("capacity").is_none());
    let (s, _) = site.call(Some(&acme), "GET", "/v1/pools/p2", None).await;
    assert_eq!(s, 404);
    let (_, p1) = site.admin("GET", "/v1/pools/p1", None).await;
    assert_eq!(p1["capacity"], json!({"capacity": 2, "free": 2, "leased": 0}));
    let (s, _) = reserve(&site, &acme, lease(json!({"duration": "12h"}))).await;
    assert_eq!(s, 201);
    site.admin("PATCH", "/v1/nodes/r0n1", Some(json!({"maintenance": true}))).await;
    let (_, p1) = site.admin("GET", "/v1/pools/p1", None).await;
    assert_eq!(p1["capacity"], json!({"capacity": 2, "free": 0, "leased": 1}));
}

#[tokio::test]
async fn a_lease_books_a_whole_node_and_refusals_explain_themselves() {
    let (site, acme) = site_with_nodes(1, 2).await;
    let (s, first) = reserve(&site, &acme, lease(json!({}))).await;
    assert_eq!(s, 201, "{first}");
    assert_eq!(first["state"], "pending", "a node binding waits for its deploy");
    assert_eq!(first["nodes"].as_array().unwrap().len(), 1);
    site.admin("PATCH", "/v1/nodes/r0n1", Some(json!({"cordoned": true}))).await;
    let (s, body) = reserve(&site, &acme, lease(json!({}))).await;
    assert_eq!(s, 409);
    assert_eq!(
        error(&body, "CONFLICT"),
        "no placement: 2 nodes in the pool: 1 cordoned, 1 booked in the window; 0 eligible"
    );
    // A window after the first lease ends fits on the same node.
    let (s, later) = reserve(&site, &acme, lease(json!({"start": "2026-12-09T00:00:00Z", "duration": "1d"}))).await;
    assert_eq!(s, 201, "{later}");
    assert_eq!(later["nodes"], first["nodes"]);
}

#[tokio::test]
async fn seed_rules_are_enforced_through_the_api() {
    let (site, acme) = site_with_nodes(1, 1).await;
    site.admin("POST", "/v1/pools", Some(json!({"id": "plain", "tenantId": "root", "siteId": "s", "class": "c"})))
        .await;
    site.admin("POST", "/v1/pools/plain/offers", Some(json!({"tenantId": "acme"}))).await;
    let (s, body) = reserve(&site, &acme, lease(json!({"poolId": "plain"}))).await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("binding")), "{body}");
    let (s, body) = reserve(&site, &acme, lease(json!({"spot": true}))).await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("spot")));
    let (s, body) = reserve(&site, &acme, lease(json!({"tenantId": "globex"}))).await;
    assert_eq!(s, 404, "a tenant cannot reserve for another: {body}");
    site.tenant("globex").await;
    let (s, _) = site.admin("POST", "/v1/reservations", Some(lease(json!({"tenantId": "globex"})))).await;
    assert_eq!(s, 404, "p1 is not offered to globex");
}

#[tokio::test]
async fn gangs_land_in_one_rack_or_not_at_all() {
    let (site, acme) = site_with_nodes(2, 3).await;
    let (s, first) = reserve(&site, &acme, lease(json!({"gang": {"count": 2, "topologyKey": "rack"}}))).await;
    assert_eq!(s, 201, "{first}");
    let racks = |r: &Value| -> std::collections::BTreeSet<String> {
        r["nodes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()[..2].to_owned()).collect()
    };
    assert_eq!(racks(&first).len(), 1);
    // A lone node of a gang of one goes to the rack already most booked.
    let (_, single) = reserve(&site, &acme, lease(json!({"gang": {"count": 1, "topologyKey": "rack"}}))).await;
    assert_eq!(racks(&single), racks(&first), "less fragmentation: fill the booked rack first");
    let (s, body) = reserve(&site, &acme, lease(json!({"gang": {"count": 4, "topologyKey": "rack"}}))).await;
    assert_eq!(s, 409);
    assert!(error(&body, "CONFLICT").contains("but no rack has 4 of them"), "{body}");
}

#[tokio::test]
async fn idempotency_replays_refuses_other_bodies_and_expires() {
    let (site, acme) = site_with_nodes(1, 3).await;
    let body = lease(json!({"idempotencyKey": "acme-root-2026-09"}));
    let first =
        site.http.post(format!("{}/v1/reservations", site.url)).bearer_auth(&acme).json(&body).send().await.unwrap();
    assert_eq!(first.status(), 201);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.unwrap();
    // The same body with other key order and spacing is the same request.
    let text = serde_json::to_string_pretty(&body).unwrap();
    let again = site
        .http
        .post(format!("{}/v1/reservations", site.url))
        .bearer_auth(&acme)
        .header("content-type", "application/json")
        .body(text)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again, first);
    let (_, all) = site.call(Some(&acme), "GET", "/v1/reservations", None).await;
    assert_eq!(all.as_array().unwrap().len(), 1, "the replay booked nothing");

    let (s, body2) =
        reserve(&site, &acme, lease(json!({"idempotencyKey": "acme-root-2026-09", "duration": "8d"}))).await;
    assert_eq!((s, body2["error"]["field"].as_str()), (422, Some("idempotencyKey")));

    // Keys are per tenant.
    let globex = site.tenant("globex").await;
    site.admin("POST", "/v1/pools/p1/offers", Some(json!({"tenantId": "globex"}))).await;
    let (s, other) =
        reserve(&site, &globex, lease(json!({"tenantId": "globex", "idempotencyKey": "acme-root-2026-09"}))).await;
    assert_eq!(s, 201);
    assert_ne!(other["id"], first["id"]);

    // Kept 24 hours, then the key is new again.
    site.clock.advance(Duration::from_secs(23 * 3600));
    let (_, replay) = reserve(&site, &acme, body.clone()).await;
    assert_eq!(replay["id"], first["id"]);
    site.clock.advance(Duration::from_secs(2 * 3600));
    let (s, fresh) = reserve(&site, &acme, body).await;
    assert_eq!(s, 201);
    assert_ne!(fresh["id"], first["id"]);
}

#[tokio::test]
async fn fifty_concurrent_creates_for_the_last_free_node_exactly_one_wins() {
    let (site, acme) = site_with_nodes(1, 2).await;
    let (s, _) = reserve(&site, &acme, lease(json!({}))).await;
    assert_eq!(s, 201);
    let site = Arc::new(site);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (site, acme) = (site.clone(), acme.clone());
            tokio::spawn(async move { reserve(&site, &acme, lease(json!({}))).await.0 })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 409).count(), 49, "{statuses:?}");
}

#[tokio::test]
async fn leases_end_at_their_time_and_unbound_node_leases_fail_after_two_hours() {
    let (site, acme) = site_with_nodes(1, 2).await;
    let tick = || metal_capacity::leases::tick(&site.app.store, &*site.app.clock);
    let (_, unbound) = reserve(&site, &acme, lease(json!({"duration": "1d"}))).await;
    let (_, bound) = reserve(&site, &acme, lease(json!({"duration": "1d"}))).await;
    let bound_id = bound["id"].as_str().unwrap();
    site.clock.advance(Duration::from_secs(3600));
    site.bound_by_metal(bound_id).await;
    let (_, b) = site.call(Some(&acme), "GET", &format!("/v1/reservations/{bound_id}"), None).await;
    assert_eq!(b["state"], "active", "{b}");
    assert_eq!(b["boundAt"], "2026-12-01T11:00:00Z");
    let (s, _) = site.call(Some(&acme), "POST", &format!("/v1/reservations/{bound_id}/bind"), None).await;
    assert_eq!(s, 404, "there is no bind route: binding is the metal side's row");

    site.clock.advance(Duration::from_secs(3600 + 1));
    assert_eq!(tick().await.unwrap(), 1);
    let (_, u) =
        site.call(Some(&acme), "GET", &format!("/v1/reservations/{}", unbound["id"].as_str().unwrap()), None).await;
    assert_eq!(u["state"], "failed");
    assert!(u["stateReason"].as_str().unwrap().contains("2 hours"), "{u}");
    // Its node is free again; the failed lease was not placed elsewhere.
    assert_eq!(u["nodes"], unbound["nodes"]);
    let (s, again) = reserve(&site, &acme, lease(json!({"duration": "2h"}))).await;
    assert_eq!(s, 201, "{again}");
    assert_eq!(again["nodes"], unbound["nodes"]);

    site.clock.advance(Duration::from_secs(22 * 3600));
    tick().await.unwrap();
    let (_, b) = site.call(Some(&acme), "GET", &format!("/v1/reservations/{bound_id}"), None).await;
    assert_eq!(b["state"], "ended");
    let (s, _) = site.call(Some(&acme), "POST", &format!("/v1/reservations/{bound_id}/release"), None).await;
    assert_eq!(s, 409, "an ended lease cannot be released");
}

#[tokio::test]
async fn cancel_and_release_free_the_nodes_and_tenants_see_only_their_own() {
    let (site, acme) = site_with_nodes(1, 1).await;
    let plain =
        json!({"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 1}], "duration": "1d"});
    let (s, r) = reserve(&site, &acme, plain.clone()).await;
    assert_eq!((s, r["state"].as_str()), (201, Some("active")), "{r}");
    let id = r["id"].as_str().unwrap();
    let globex = site.tenant("globex").await;
    let (s, _) = site.call(Some(&globex), "GET", &format!("/v1/reservations/{id}"), None).await;
    assert_eq!(s, 404);
    let (s, _) = site.call(Some(&globex), "POST", &format!("/v1/reservations/{id}/cancel"), None).await;
    assert_eq!(s, 404);
    let (_, list) = site.call(Some(&globex), "GET", "/v1/reservations", None).await;
    assert_eq!(list, json!([]));
    let node = r["nodes"][0].as_str().unwrap();
    let (_, held) = site.call(Some(&site.admin), "GET", &format!("/v1/nodes/{node}"), None).await;
    assert_eq!(held["heldBy"], id, "the node says which reservation holds it: {held}");
    let (s, released) = site.call(Some(&acme), "POST", &format!("/v1/reservations/{id}/release"), None).await;
    assert_eq!((s, released["state"].as_str()), (200, Some("ended")));
    let (_, nodes) = site.call(Some(&site.admin), "GET", "/v1/nodes", None).await;
    assert!(nodes.as_array().unwrap().iter().all(|n| n.get("heldBy").is_none()), "released: {nodes}");
    let (s, r2) = reserve(&site, &acme, plain).await;
    assert_eq!(s, 201, "the released node is free: {r2}");
    let (s, c) =
        site.call(Some(&acme), "POST", &format!("/v1/reservations/{}/cancel", r2["id"].as_str().unwrap()), None).await;
    assert_eq!((s, c["state"].as_str()), (200, Some("cancelled")));
}

#[tokio::test]
async fn a_stale_placement_cache_never_books_what_the_database_forbids() {
    let (site, acme) = site_with_nodes(1, 2).await;
    // Warm the cache with a first placement.
    let (s, first) = reserve(&site, &acme, lease(json!({"duration": "1d"}))).await;
    assert_eq!(s, 201);
    // Another replica (simulated: a direct write that this process's cache never hears of)
    // puts the remaining node into maintenance.
    let other = if first["nodes"][0] == "r0n0" { "r0n1" } else { "r0n0" };
    let other = other.to_owned();
    site.app
        .store
        .write(move |tx| tx.execute("UPDATE nodes SET maintenance = 1 WHERE id = $1", &[&other]))
        .await
        .unwrap();
    let (s, body) = reserve(&site, &acme, lease(json!({"duration": "1d"}))).await;
    assert_eq!(s, 409, "{body}");
    assert_eq!(
        error(&body, "CONFLICT"),
        "no placement: 2 nodes in the pool: 1 in maintenance, 1 booked in the window; 0 eligible"
    );
}

#[tokio::test]
async fn the_create_answer_equals_a_later_read() {
    let (site, acme) = site_with_nodes(2, 2).await;
    site.clock.advance(Duration::from_millis(1234));
    let (s, created) = reserve(&site, &acme, lease(json!({"gang": {"count": 2, "topologyKey": "rack"}}))).await;
    assert_eq!(s, 201);
    let (_, read) =
        site.call(Some(&acme), "GET", &format!("/v1/reservations/{}", created["id"].as_str().unwrap()), None).await;
    assert_eq!(created, read);
}

#[tokio::test]
async fn a_reservation_for_a_tenant_that_does_not_exist_names_the_tenant() {
    let (site, _) = site_with_nodes(1, 1).await;
    let (s, body) = site
        .admin("POST", "/v1/reservations", Some(json!({"tenantId": "nobody", "poolId": "p1", "devices": [{"class": "gpu", "count": 8}], "duration": "1d"})))
        .await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("tenantId")), "{body}");
    assert!(error(&body, "INVALID_INPUT").contains("no tenant nobody"), "{body}");
}

#[tokio::test]
async fn a_pending_reservation_says_what_it_waits_for_and_release_points_at_cancel() {
    let (site, acme) = site_with_nodes(1, 1).await;
    let (s, r) = reserve(&site, &acme, lease(json!({}))).await;
    assert_eq!(s, 201, "{r}");
    let reason = r["stateReason"].as_str().unwrap();
    assert!(
        reason.contains("waiting for its start") && reason.contains("must bind by") && reason.contains("2-hour"),
        "{reason}"
    );
    let id = r["id"].as_str().unwrap();
    let (s, body) = site.call(Some(&acme), "POST", &format!("/v1/reservations/{id}/release"), None).await;
    assert_eq!(s, 409, "{body}");
    assert!(error(&body, "CONFLICT").contains("cancelled, not released"), "{body}");
}

#[tokio::test]
async fn asking_more_devices_than_any_node_has_says_the_most_one_has() {
    let (site, acme) = site_with_nodes(1, 1).await;
    let (s, body) = reserve(
        &site,
        &acme,
        json!({"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 16}], "duration": "1d"}),
    )
    .await;
    assert_eq!(s, 409, "{body}");
    let message = error(&body, "CONFLICT");
    assert!(
        message
            .contains("1 node in the pool: 1 without enough healthy devices (16 gpu asked, the most on one node is 8)"),
        "{message}"
    );
}
