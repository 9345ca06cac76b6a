//! The node API over real HTTP against a real SQLite file.

use crate::common;

use std::time::Duration;

use common::{Site, error};
use serde_json::json;

#[tokio::test]
async fn requests_need_a_valid_token_and_errors_have_one_shape() {
    let site = Site::start().await;
    let (s, body) = site.call(None, "GET", "/v1/nodes", None).await;
    assert_eq!(s, 401);
    error(&body, "UNAUTHENTICATED");
    let (s, body) = site.call(Some("mtl_nope"), "GET", "/v1/nodes", None).await;
    assert_eq!(s, 401);
    error(&body, "UNAUTHENTICATED");
    let (s, body) = site.admin("GET", "/v1/nowhere", None).await;
    assert_eq!(s, 404);
    error(&body, "NOT_FOUND");
    let (s, _) = site.call(None, "GET", "/healthz", None).await;
    assert_eq!(s, 200);
    // Over-limit bodies: JSON routes (2 MiB) and the import route (64 MiB) answer 413 in the
    // same shape.
    let big = json!({"id": "t", "name": "x".repeat(3 << 20)});
    let (s, body) = site.admin("POST", "/v1/tenants", Some(big)).await;
    assert_eq!(s, 413, "{body}");
    error(&body, "INVALID_INPUT");
    let huge = format!("id\n{}", "n\n".repeat(33 << 20));
    let response = site.admin_csv("/v1/nodes/import", huge).await;
    assert_eq!(response.status().as_u16(), 413);
    error(&response.json().await.unwrap(), "INVALID_INPUT");
}

#[tokio::test]
async fn enrol_read_and_refuse_duplicates_and_bad_input() {
    let site = Site::start().await;
    let node = json!({"id": "n1", "bootMac": "52-54-00-AA-BB-01", "labels": {"rack": "r1"}, "taints": ["dedicated=acme:NoSchedule"],
                      "devices": [{"id": "gpu0", "class": "gpu", "healthy": true}]});
    let (s, created) = site.admin("POST", "/v1/nodes", Some(node.clone())).await;
    assert_eq!(s, 201, "{created}");
    assert_eq!(created["state"], "new");
    assert_eq!(created["bootMac"], "52:54:00:aa:bb:01");
    assert_eq!(created["taints"][0], json!({"key": "dedicated", "value": "acme", "effect": "NoSchedule"}));
    let (s, got) = site.admin("GET", "/v1/nodes/n1", None).await;
    assert_eq!((s, &got), (200, &created));

    let (s, body) = site.admin("POST", "/v1/nodes", Some(node)).await;
    assert_eq!(s, 409);
    error(&body, "CONFLICT");

    for (bad, field) in [
        (json!({"id": "bad/id"}), "id"),
        (json!({"id": "n2", "bootMac": "nope"}), "bootMac"),
        (json!({"id": "n2", "taints": ["x=y:NoExecute"]}), "taints"),
        (
            json!({"id": "n2", "devices": [{"id": "g", "class": "gpu", "healthy": true}, {"id": "g", "class": "gpu", "healthy": true}]}),
            "devices",
        ),
    ] {
        let (s, body) = site.admin("POST", "/v1/nodes", Some(bad.clone())).await;
        assert_eq!(s, 422, "{bad}");
        error(&body, "INVALID_INPUT");
        assert_eq!(body["error"]["field"], field, "{body}");
    }
    let (s, body) = site.admin("POST", "/v1/nodes", Some(json!({"id": "n3", "colour": "red"}))).await;
    assert_eq!(s, 422);
    assert!(error(&body, "INVALID_INPUT").contains("colour"), "{body}");
    let (s, nodes) = site.admin("GET", "/v1/nodes", None).await;
    assert_eq!(s, 200);
    assert_eq!(nodes.as_array().unwrap().len(), 1, "nothing invalid was stored");
}

#[tokio::test]
async fn import_from_csv_and_json_skips_existing_and_rejects_invalid_whole() {
    let site = Site::start().await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    let csv = "id,bootMac,labels,taints,devices\n\
               n1,,,,\n\
               n2,52:54:00:00:00:02,rack=r1;switch=s1,,gpu=8\n\
               n3,52:54:00:00:00:03,rack=r2,dedicated=acme:NoSchedule,\n";
    let response = site.admin_csv("/v1/nodes/import", csv.to_owned()).await;
    assert_eq!(response.status(), 200);
    let result: serde_json::Value = response.json().await.unwrap();
    assert_eq!(result["created"], json!(["n2", "n3"]));
    assert_eq!(result["skipped"][0]["id"], "n1");
    let (_, n2) = site.admin("GET", "/v1/nodes/n2", None).await;
    assert_eq!(n2["devices"].as_array().unwrap().len(), 8);
    assert_eq!(n2["labels"]["switch"], "s1");

    // One bad entry: nothing from this import lands.
    let (s, body) = site.admin("POST", "/v1/nodes/import", Some(json!([{"id": "n4"}, {"id": "n 5"}]))).await;
    assert_eq!(s, 422);
    assert_eq!(body["error"]["field"], "nodes[1].id");
    let (s, _) = site.admin("GET", "/v1/nodes/n4", None).await;
    assert_eq!(s, 404);
    let (s, result) = site.admin("POST", "/v1/nodes/import", Some(json!([{"id": "n4"}, {"id": "n2"}]))).await;
    assert_eq!(s, 200);
    assert_eq!(result["created"], json!(["n4"]));
}

async fn mv(site: &Site, id: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    site.admin("POST", &format!("/v1/nodes/{id}/transitions"), Some(body)).await
}

#[tokio::test]
async fn lifecycle_moves_are_compare_and_set() {
    let site = Site::start().await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    let (s, body) = mv(&site, "n1", json!({"from": "new", "to": "commissioning"})).await;
    assert_eq!(s, 422, "in-progress states need an owner");
    assert_eq!(body["error"]["field"], "owner");
    let (s, node) = mv(&site, "n1", json!({"from": "new", "to": "commissioning", "owner": "ramdisk"})).await;
    assert_eq!(s, 200, "{node}");
    assert_eq!(node["deadline"], "2026-12-01T11:00:00Z", "commissioning gets its one-hour deadline");
    let (s, body) = mv(&site, "n1", json!({"from": "new", "to": "commissioning", "owner": "x"})).await;
    assert_eq!(s, 409, "a stale 'from' loses");
    assert!(error(&body, "CONFLICT").contains("commissioning"));
    let (s, _) = mv(&site, "n1", json!({"from": "commissioning", "to": "deployed"})).await;
    assert_eq!(s, 409, "not in the table");
    let generation = node["generation"].as_i64().unwrap();
    let (s, _) = mv(&site, "n1", json!({"from": "commissioning", "to": "ready", "generation": generation - 1})).await;
    assert_eq!(s, 409, "a stale generation loses");
    let (s, node) = mv(
        &site,
        "n1",
        json!({"from": "commissioning", "to": "failed", "generation": generation, "reason": "memory test failed"}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        (node["failedFrom"].as_str(), node["stateReason"].as_str()),
        (Some("commissioning"), Some("memory test failed"))
    );
    assert!(node.get("deadline").is_none() && node.get("owner").is_none());
    let (s, _) = site.admin("POST", "/v1/nodes/ghost/transitions", Some(json!({"from": "new", "to": "retired"}))).await;
    assert_eq!(s, 409, "new -> retired is not a move, whatever the node");
    let (s, _) =
        site.admin("POST", "/v1/nodes/ghost/transitions", Some(json!({"from": "failed", "to": "retired"}))).await;
    assert_eq!(s, 404);
}

#[tokio::test]
async fn fifty_concurrent_callers_exactly_one_wins() {
    let site = Site::start().await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    mv(&site, "n1", json!({"from": "new", "to": "commissioning", "owner": "r"})).await;
    mv(&site, "n1", json!({"from": "commissioning", "to": "ready"})).await;
    let site = std::sync::Arc::new(site);
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let site = site.clone();
            tokio::spawn(async move {
                mv(&site, "n1", json!({"from": "ready", "to": "allocated", "reason": format!("caller {i}")})).await.0
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 409).count(), 49, "{statuses:?}");
}

#[tokio::test]
async fn the_reaper_fails_overdue_work_with_a_reason() {
    let site = Site::start().await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n2"}))).await;
    mv(&site, "n1", json!({"from": "new", "to": "commissioning", "owner": "ramdisk-7"})).await;
    site.clock.advance(Duration::from_secs(30 * 60));
    mv(&site, "n2", json!({"from": "new", "to": "commissioning", "owner": "ramdisk-8"})).await;
    site.clock.advance(Duration::from_secs(31 * 60));
    assert_eq!(metal_machines::app::reap_once(&site.app).await.unwrap(), 1, "only n1 is past its hour");
    let (_, n1) = site.admin("GET", "/v1/nodes/n1", None).await;
    assert_eq!(n1["state"], "failed");
    assert_eq!(n1["failedFrom"], "commissioning");
    assert!(n1["stateReason"].as_str().unwrap().contains("ramdisk-7"), "{n1}");
    let (_, n2) = site.admin("GET", "/v1/nodes/n2", None).await;
    assert_eq!(n2["state"], "commissioning");
    assert_eq!(metal_machines::app::reap_once(&site.app).await.unwrap(), 0);
}

#[tokio::test]
async fn patches_change_placement_attributes_and_respect_generations() {
    let site = Site::start().await;
    let (_, node) = site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    let (s, patched) = site
        .admin(
            "PATCH",
            "/v1/nodes/n1",
            Some(json!({"maintenance": true, "taints": ["dedicated=acme:NoSchedule"], "labels": {"rack": "r9"}})),
        )
        .await;
    assert_eq!(s, 200, "{patched}");
    assert_eq!((patched["maintenance"].as_bool(), patched["labels"]["rack"].as_str()), (Some(true), Some("r9")));
    assert_eq!(patched["generation"].as_i64().unwrap(), node["generation"].as_i64().unwrap() + 1);
    let (s, _) =
        site.admin("PATCH", "/v1/nodes/n1", Some(json!({"cordoned": true, "generation": node["generation"]}))).await;
    assert_eq!(s, 409);
    let current = json!({"cordoned": true, "generation": patched["generation"]});
    let (s, cordoned) = site.admin("PATCH", "/v1/nodes/n1", Some(current)).await;
    assert_eq!((s, cordoned["cordoned"].as_bool()), (200, Some(true)), "the current generation wins: {cordoned}");
    let (s, body) = site.admin("PATCH", "/v1/nodes/n1", Some(json!({"poolId": "nowhere"}))).await;
    assert_eq!((s, body["error"]["field"].as_str()), (422, Some("poolId")));
    site.admin("POST", "/v1/pools", Some(json!({"id": "p1", "tenantId": "root", "siteId": "s", "class": "c"}))).await;
    let (_, pooled) = site.admin("PATCH", "/v1/nodes/n1", Some(json!({"poolId": "p1"}))).await;
    assert_eq!(pooled["poolId"], "p1");
    let (_, read) = site.admin("GET", "/v1/nodes/n1", None).await;
    assert_eq!(read["poolId"], "p1");
    let (_, unpooled) = site.admin("PATCH", "/v1/nodes/n1", Some(json!({"poolId": ""}))).await;
    assert!(unpooled.get("poolId").is_none(), "{unpooled}");
    let (s, body) = site.admin("PATCH", "/v1/nodes/n1", Some(json!({"taints": ["bad"]}))).await;
    assert_eq!(s, 422);
    assert_eq!(body["error"]["field"], "taints");
}

#[tokio::test]
async fn tenants_see_none_of_the_platform() {
    let site = Site::start().await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    let acme = site.tenant("acme").await;
    site.tenant("globex").await;
    for path in ["/v1/nodes", "/v1/nodes/n1", "/v1/tenants", "/v1/tenants/globex"] {
        let (s, body) = site.call(Some(&acme), "GET", path, None).await;
        assert_eq!(s, 404, "{path}: {body}");
        error(&body, "NOT_FOUND");
    }
    let (s, own) = site.call(Some(&acme), "GET", "/v1/tenants/acme", None).await;
    assert_eq!((s, own["id"].as_str()), (200, Some("acme")));
    let (s, _) = site.call(Some(&acme), "POST", "/v1/nodes", Some(json!({"id": "mine"}))).await;
    assert_eq!(s, 404);
    // Its event feed holds only its own tenant's events.
    let (_, page) = site.call(Some(&acme), "GET", "/v1/events", None).await;
    let events = page["events"].as_array().unwrap();
    assert!(!events.is_empty() && events.iter().all(|e| e["tenantId"] == "acme"), "{page}");
}

#[tokio::test]
async fn credentials_are_shown_once_and_validated() {
    let site = Site::start().await;
    let (s, body) = site.admin("POST", "/v1/credentials", Some(json!({"role": "tenant-member", "name": "x"}))).await;
    assert_eq!(s, 422);
    assert_eq!(body["error"]["field"], "tenantId");
    let (s, body) = site
        .admin("POST", "/v1/credentials", Some(json!({"role": "tenant-member", "tenantId": "nobody", "name": "x"})))
        .await;
    assert_eq!(s, 422);
    assert_eq!(body["error"]["field"], "tenantId");
    let token = site.tenant("acme").await;
    assert!(token.starts_with("mtl_") && token.len() == 68);
    let (_, page) = site.admin("GET", "/v1/events", None).await;
    assert!(!page.to_string().contains(&token), "a token leaked into an event");
}

/// The stream's text up to the end of its first event.
async fn first_sse_event(response: &mut reqwest::Response) -> String {
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk()).await.unwrap().unwrap().unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    text
}

/// Opens the admin's event stream at `path` with `headers`.
async fn stream(site: &Site, path: &str, last_event_id: Option<&str>) -> reqwest::Response {
    let mut request = site.http.get(format!("{}{path}", site.url)).bearer_auth(&site.admin);
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    request.send().await.unwrap()
}

/// The `id:` of an SSE event's text.
fn sse_id(text: &str) -> i64 {
    text.lines().find_map(|l| l.strip_prefix("id: ")).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_stream_resumes_from_last_event_id_and_a_resume_past_retention_is_gone() {
    let site = Site::start_with(|c| c.event_retention = Duration::from_secs(3600)).await;
    for i in 0..3 {
        site.admin("POST", "/v1/nodes", Some(json!({"id": format!("n{i}")}))).await;
    }
    let (_, all) = site.admin("GET", "/v1/events?after=0", None).await;
    let seqs: Vec<i64> = all["events"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert!(seqs.len() >= 3, "{all}");

    // A client that saw the first event reconnects with its id: the next one comes first,
    // whatever `after` says (the browser keeps the URL it first opened).
    let mut response = stream(&site, "/v1/events/stream?after=0", Some(&seqs[0].to_string())).await;
    assert_eq!(sse_id(&first_sse_event(&mut response).await), seqs[1]);
    let response = stream(&site, "/v1/events/stream", Some("yesterday")).await;
    assert_eq!(response.status(), 422);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["field"], "Last-Event-ID", "{body}");

    // Two hours on, the periodic pass prunes what is past the hour of retention. A reader
    // at the first event has missed the others: 410, saying how to start over; a reader at
    // the newest (or at 0: from the oldest kept) goes on.
    site.clock.advance(Duration::from_secs(7200));
    site.admin("POST", "/v1/nodes", Some(json!({"id": "after-pruning"}))).await;
    let resume = format!("/v1/events?after={}", seqs[0]);
    assert_eq!(site.admin("GET", &resume, None).await.0, 200, "nothing pruned before the pass");
    metal_api::passes::once(&site.app).await;
    let (status, gone) = site.admin("GET", &resume, None).await;
    assert_eq!(status, 410, "{gone}");
    let message = error(&gone, "GONE");
    assert!(message.contains("past retention") && message.contains("tail=true"), "{message}");
    let response = stream(&site, "/v1/events/stream", Some(&seqs[1].to_string())).await;
    assert_eq!(response.status(), 410);
    let (status, kept) = site.admin("GET", "/v1/events?after=0", None).await;
    assert_eq!(status, 200);
    let kinds: Vec<&str> = kept["events"].as_array().unwrap().iter().map(|e| e["subject"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["node/after-pruning"], "only the event inside retention is kept: {kept}");
    let newest = kept["events"][0]["seq"].as_i64().unwrap();
    let (status, _) = site.admin("GET", &format!("/v1/events?after={newest}"), None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn events_long_poll_wakes_on_a_new_event_and_sse_streams_them() {
    let site = std::sync::Arc::new(Site::start().await);
    let (_, page) = site.admin("GET", "/v1/events", None).await;
    let after = page["next"].as_i64().unwrap();
    let waiter = {
        let site = site.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let (_, page) = site.admin("GET", &format!("/v1/events?after={after}&wait=30"), None).await;
            (started.elapsed(), page)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    let (waited, page) = waiter.await.unwrap();
    assert!(waited < Duration::from_secs(10), "the long-poll did not wake: {waited:?}");
    assert_eq!(page["events"][0]["kind"], "node.created");
    assert_eq!(page["next"].as_i64().unwrap(), after + 1);

    let (s, body) = site.admin("GET", "/v1/events?wait=61", None).await;
    assert_eq!(s, 422);
    assert_eq!(body["error"]["field"], "wait");

    let mut response = site
        .http
        .get(format!("{}/v1/events/stream?after={after}", site.url))
        .bearer_auth(&site.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = first_sse_event(&mut response).await;
    assert!(text.contains("event: node.created") && text.contains(&format!("id: {}", after + 1)), "{text}");

    // Only one subject's events, and the tail: where the log ends now, with nothing in it.
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n2"}))).await;
    site.admin("PATCH", "/v1/nodes/n1", Some(json!({"labels": {"rack": "r1"}}))).await;
    let (_, page) = site.admin("GET", "/v1/events?after=0&subject=node/n1", None).await;
    let subjects: Vec<&str> =
        page["events"].as_array().unwrap().iter().map(|e| e["subject"].as_str().unwrap()).collect();
    assert!(subjects.len() >= 2 && subjects.iter().all(|s| *s == "node/n1"), "{page}");
    let (_, tail) = site.admin("GET", "/v1/events?tail=true", None).await;
    let (_, all) = site.admin("GET", "/v1/events?after=0", None).await;
    assert_eq!(tail["events"], json!([]));
    assert_eq!(tail["next"], all["events"].as_array().unwrap().last().unwrap()["seq"], "{tail}");

    // A tenant's subject filter stays inside the tenant's own events.
    let acme = site.tenant("acme").await;
    let (_, mine) = site.call(Some(&acme), "GET", "/v1/events?after=0&subject=tenant/acme", None).await;
    let (_, theirs) = site.call(Some(&acme), "GET", "/v1/events?after=0&subject=node/n1", None).await;
    assert_eq!(theirs["events"], json!([]), "a tenant reads no node's events: {theirs}");
    let mine = mine["events"].as_array().unwrap();
    assert!(!mine.is_empty() && mine.iter().all(|e| e["tenantId"] == "acme" && e["subject"] == "tenant/acme"));

    // A stream from the tail sends only what happens after it opened.
    let mut response = site
        .http
        .get(format!("{}/v1/events/stream?tail=true&subject=node/n2", site.url))
        .bearer_auth(&site.admin)
        .send()
        .await
        .unwrap();
    site.admin("PATCH", "/v1/nodes/n1", Some(json!({"labels": {"rack": "r2"}}))).await;
    site.admin("PATCH", "/v1/nodes/n2", Some(json!({"labels": {"rack": "r2"}}))).await;
    let text = first_sse_event(&mut response).await;
    assert!(text.contains("node/n2") && !text.contains("node/n1") && !text.contains("node.created"), "{text}");
}

#[tokio::test]
async fn responses_are_gzipped_for_a_client_that_accepts_it_and_the_event_stream_is_not() {
    use std::io::Read as _;
    let site = Site::start().await;
    for i in 0..40 {
        site.admin("POST", "/v1/nodes", Some(json!({"id": format!("n{i:03}"), "labels": {"rack": "r1"}}))).await;
    }
    let (_, plain) = site.admin("GET", "/v1/nodes", None).await;
    let get = |path: &str| {
        site.http.get(format!("{}{path}", site.url)).bearer_auth(&site.admin).header("accept-encoding", "gzip").send()
    };
    let response = get("/v1/nodes").await.unwrap();
    assert_eq!(response.headers().get("content-encoding").map(|v| v.to_str().unwrap()), Some("gzip"));
    let gzipped = response.bytes().await.unwrap();
    let mut json = String::new();
    flate2::read::GzDecoder::new(&gzipped[..]).read_to_string(&mut json).unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&json).unwrap(), plain);
    assert!(gzipped.len() * 4 < json.len(), "{} bytes gzipped from {}", gzipped.len(), json.len());

    // Without the header: plain JSON, as before.
    let response = site.http.get(format!("{}/v1/nodes", site.url)).bearer_auth(&site.admin).send().await.unwrap();
    assert!(response.headers().get("content-encoding").is_none());

    // The stream is sent as it happens, never held back by a compressor.
    let mut stream = get("/v1/events/stream?tail=true&subject=node/n001").await.unwrap();
    assert!(stream.headers().get("content-encoding").is_none(), "{:?}", stream.headers());
    site.admin("PATCH", "/v1/nodes/n001", Some(json!({"labels": {"rack": "r2"}}))).await;
    let text = first_sse_event(&mut stream).await;
    assert!(text.contains("node/n001"), "{text}");
}

#[tokio::test]
async fn metrics_count_requests_and_nodes() {
    let site = Site::start().await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    site.admin("GET", "/v1/nodes/n1", None).await;
    let text = site.http.get(format!("{}/metrics", site.url)).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("metal_http_requests_total{method=\"POST\",route=\"/v1/nodes\",status=\"201\"} 1"), "{text}");
    assert!(text.contains("metal_nodes{state=\"new\"} 1"), "{text}");
}

#[tokio::test]
async fn revoked_credentials_stop_working_and_listings_never_show_tokens() {
    let site = Site::start().await;
    let acme = site.tenant("acme").await;
    let (s, list) = site.admin("GET", "/v1/credentials", None).await;
    assert_eq!(s, 200);
    assert!(!list.to_string().contains(&acme) && !list.to_string().contains(&site.admin), "a token leaked: {list}");
    let member =
        list.as_array().unwrap().iter().find(|c| c["tenantId"] == "acme").unwrap()["id"].as_str().unwrap().to_owned();
    let (s, _) = site.call(Some(&acme), "GET", "/v1/tenants/acme", None).await;
    assert_eq!(s, 200);
    let (s, _) = site.call(Some(&acme), "DELETE", &format!("/v1/credentials/{member}"), None).await;
    assert_eq!(s, 404, "tenants cannot revoke");
    let (s, _) = site.admin("DELETE", &format!("/v1/credentials/{member}"), None).await;
    assert_eq!(s, 204);
    let (s, body) = site.call(Some(&acme), "GET", "/v1/tenants/acme", None).await;
    assert_eq!(s, 401);
    error(&body, "UNAUTHENTICATED");
    let (s, _) = site.admin("DELETE", &format!("/v1/credentials/{member}"), None).await;
    assert_eq!(s, 404, "already revoked");
    let (_, list) = site.admin("GET", "/v1/credentials", None).await;
    let admin_id = list.as_array().unwrap().iter().find(|c| c["role"] == "platform-admin").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, _) = site.admin("DELETE", &format!("/v1/credentials/{admin_id}"), None).await;
    assert_eq!(s, 409, "the last way in is not thrown away by accident");
}

#[tokio::test]
async fn csv_imports_say_what_is_wrong_in_the_file_s_own_terms() {
    let site = Site::start().await;
    for (csv, field, says) in [
        ("id;bootMac\nn1;52:54:00:00:00:01\n", "csv", "separated by ';'"),
        ("n6,52:54:00:00:00:06\n", "csv", "the first line must be the header"),
        ("id,labels\nn1,\"rack=r1\n", "csv line 2", "quoted cell is not closed"),
        ("id,bootMac\nn1,52:54:00:00:00:01\nn2,nonsense\n", "csv line 3 bootMac", "not a MAC"),
    ] {
        let response = site.admin_csv("/v1/nodes/import", csv.into()).await;
        assert_eq!(response.status(), 422, "{csv}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["field"], field, "{csv}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(says), "{csv}: {body}");
    }
    // A quoted cell may hold a comma (and a doubled quote).
    let response = site.admin_csv("/v1/nodes/import", "id,labels\nq1,\"rack=r1;note=a,b\"\n".into()).await;
    assert_eq!(response.status(), 200);
    let (_, node) = site.admin("GET", "/v1/nodes/q1", None).await;
    assert_eq!(node["labels"]["note"], "a,b", "{node}");
}

#[tokio::test]
async fn the_console_is_served_with_a_strict_policy_and_routes_in_the_browser() {
    let site = Site::start().await;
    let get = |path: &str| site.http.get(format!("{}{path}", site.url)).send();
    for path in ["/console", "/console/", "/console/nodes/n1", "/console/nodes/n1/wipe-reports/w"] {
        let response = get(path).await.unwrap();
        assert_eq!(response.status(), 200, "{path} (scripts/setup builds console/dist)");
        let headers = response.headers().clone();
        assert_eq!(headers["content-type"], "text/html; charset=utf-8", "{path}");
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self';"), "{policy}");
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert!(response.text().await.unwrap().contains("/console/assets/app.js"), "{path}");
    }
    let script = get("/console/assets/app.js").await.unwrap();
    assert_eq!(script.headers()["content-type"], "text/javascript; charset=utf-8");
    assert_eq!(get("/console/assets/nope.js").await.unwrap().status(), 404);
    // Files are looked up by their exact name among the embedded ones.
    assert_eq!(get("/console/assets/index.html").await.unwrap().status(), 404);
}
