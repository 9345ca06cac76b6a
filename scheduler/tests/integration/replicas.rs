//! Two replicas on one database at once (the PostgreSQL pass of scripts/test runs this on
//! PostgreSQL; here on one SQLite file): every check-then-insert is a race, and each race
//! must end as the sequential case does, never as a 500. The same reservation create with
//! the same idempotency key on both answers the same reservation; the same node enrolled on
//! both is one node and one clean conflict; two replicas bootstrapping an empty database at
//! the same moment both start, with one admin credential between them.

use crate::common;

use std::sync::Arc;

use common::Site;
use metal_machines::app;
use metal_types::clock::ManualClock;
use metal_types::config::Config;
use serde_json::{Value, json};
use time::macros::datetime;

/// A pool offered to acme with `nodes` ready nodes of 8 GPUs; acme's token.
async fn pool_with_nodes(site: &Site, nodes: usize) -> String {
    let acme = site.tenant("acme").await;
    let pool = json!({"id": "p1", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated", "policy": {}});
    assert_eq!(site.admin("POST", "/v1/pools", Some(pool)).await.0, 201);
    assert_eq!(site.admin("POST", "/v1/pools/p1/offers", Some(json!({"tenantId": "acme"}))).await.0, 200);
    for i in 0..nodes {
        let gpus: Vec<Value> =
            (0..8).map(|g| json!({"id": format!("gpu{g}"), "class": "gpu", "healthy": true})).collect();
        let id = format!("n{i}");
        assert_eq!(
            site.admin("POST", "/v1/nodes", Some(json!({"id": id, "poolId": "p1", "devices": gpus}))).await.0,
            201
        );
        for (from, to) in [("new", "commissioning"), ("commissioning", "ready")] {
            let body = json!({"from": from, "to": to, "owner": "t"});
            assert_eq!(site.admin("POST", &format!("/v1/nodes/{id}/transitions"), Some(body)).await.0, 200);
        }
    }
    acme
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_idempotent_create_on_both_replicas_answers_one_reservation() {
    let a = Site::start().await;
    let acme = pool_with_nodes(&a, 12).await;
    let b = a.replica().await;
    for round in 0..10 {
        let body = json!({"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 8}],
                          "duration": "1d", "idempotencyKey": format!("key-{round}")});
        let (one, two) = tokio::join!(
            a.call(Some(&acme), "POST", "/v1/reservations", Some(body.clone())),
            b.call(Some(&acme), "POST", "/v1/reservations", Some(body.clone())),
        );
        assert_eq!((one.0, two.0), (201, 201), "round {round}: {one:?} {two:?}");
        assert_eq!(one.1["id"], two.1["id"], "round {round}: one reservation");
    }
    let (_, listed) = a.call(Some(&acme), "GET", "/v1/reservations", None).await;
    assert_eq!(listed.as_array().unwrap().len(), 10, "no double booking");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_node_enrolled_on_both_replicas_is_one_node_and_one_clean_conflict() {
    let a = Site::start().await;
    let b = a.replica().await;
    let sequential = {
        assert_eq!(a.admin("POST", "/v1/nodes", Some(json!({"id": "first"}))).await.0, 201);
        a.admin("POST", "/v1/nodes", Some(json!({"id": "first"}))).await
    };
    for round in 0..10 {
        let body = json!({"id": format!("node-{round}"), "bootMac": format!("52:54:00:00:10:{round:02x}")});
        let (one, two) = tokio::join!(
            a.admin("POST", "/v1/nodes", Some(body.clone())),
            b.admin("POST", "/v1/nodes", Some(body.clone()))
        );
        let mut statuses = [one.0, two.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [201, sequential.0], "round {round}: {one:?} {two:?}");
        let loser = if one.0 == 201 { &two.1 } else { &one.1 };
        assert_eq!(loser["error"]["code"], sequential.1["error"]["code"], "{loser}");
    }
    for round in 0..5 {
        let body = json!({"id": format!("t{round}")});
        let (one, two) = tokio::join!(
            a.admin("POST", "/v1/tenants", Some(body.clone())),
            b.admin("POST", "/v1/tenants", Some(body.clone()))
        );
        let mut statuses = [one.0, two.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [201, 409], "tenants, round {round}: {one:?} {two:?}");
        let pool = json!({"id": format!("pool-{round}"), "tenantId": "root", "siteId": "s", "class": "c"});
        let (one, two) = tokio::join!(
            a.admin("POST", "/v1/pools", Some(pool.clone())),
            b.admin("POST", "/v1/pools", Some(pool.clone()))
        );
        let mut statuses = [one.0, two.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [201, 409], "pools, round {round}: {one:?} {two:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_bootstrapping_one_empty_database_both_start_with_one_admin() {
    for _ in 0..3 {
        let shared = tempfile::tempdir().unwrap();
        let database = match common::database_url().await {
            Some(url) => url,
            None => metal_store::Store::sqlite_url(shared.path()),
        };
        let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let start = |dir: &tempfile::TempDir| {
            let config = Config {
                data_dir: dir.path().to_path_buf(),
                database_url: Some(database.clone()),
                ..Config::default()
            };
            metal_api::start(config, Arc::new(ManualClock::new(datetime!(2026-12-01 10:00:00 UTC))))
        };
        let (a, b) = tokio::join!(start(&dir_a), start(&dir_b));
        let (a, b) = (a.expect("replica a starts"), b.expect("replica b starts"));
        let tokens: Vec<bool> =
            [&dir_a, &dir_b].iter().map(|d| d.path().join(app::ADMIN_TOKEN_FILE).exists()).collect();
        assert_eq!(tokens.iter().filter(|t| **t).count(), 1, "one admin token file: {tokens:?}");
        let admins = a
            .store
            .read(|tx| {
                let row = tx.query_one("SELECT COUNT(*) AS n FROM credentials WHERE role = 'platform-admin'", &[])?;
                row.get::<i64>("n")
            })
            .await
            .unwrap();
        assert_eq!(admins, 1);
        drop(b);
    }
}
