//! The workflow engine's store on the real database, with two replicas at once (SQLite,
//! or PostgreSQL when METAL_TEST_POSTGRES is set): a claim is exclusive, a lapsed owner is
//! fenced out of every commit, attempts and deadlines are bounded, and at most one workflow
//! runs per node.

use crate::common;

use std::time::Duration;

use common::Site;
use metal_store::workflows::{self, Standing, Verdict};
use metal_types::clock::Clock as _;
use metal_types::error::ApiError;
use metal_types::model::workflow::{StepSpec, WorkflowRun};
use serde_json::json;

fn steps() -> Vec<StepSpec> {
    ["observe", "act"].iter().map(|n| StepSpec { name: (*n).into(), attempts: 2, deadline_ms: 600_000 }).collect()
}

async fn claim(site: &Site, owner: &str) -> Vec<WorkflowRun> {
    let (owner, now) = (owner.to_owned(), site.clock.now());
    site.app
        .store
        .write(move |tx| workflows::claim_due(tx, &owner, now, now + Duration::from_secs(60), 8))
        .await
        .unwrap()
}

/// Starts run `id` of a test definition on n1.
async fn start_run(site: &Site, id: &'static str) -> Result<WorkflowRun, ApiError> {
    let now = site.clock.now();
    site.app.store.write(move |tx| workflows::create(tx, id, "n1", "test@1", &steps(), &json!({}), now)).await
}

async fn record(site: &Site, run: &WorkflowRun, verdict: Verdict) -> Result<Standing, ApiError> {
    let (run, now) = (run.clone(), site.clock.now());
    site.app.store.write(move |tx| workflows::record(tx, &run, &verdict, now)).await
}

#[tokio::test]
async fn a_claim_is_exclusive_and_an_owner_whose_claim_lapsed_commits_nothing() {
    let site = Site::start().await;
    let other = site.replica().await;
    let (s, _) = site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    assert_eq!(s, 201);
    start_run(&site, "run-1").await.unwrap();
    let again = start_run(&site, "run-2").await;
    assert!(
        matches!(&again, Err(ApiError::Conflict(m)) if m.contains("run-1")),
        "one running workflow per node: {again:?}"
    );

    // Both replicas claim at once: exactly one wins.
    let (a, b) = tokio::join!(claim(&site, "A"), claim(&other, "B"));
    assert_eq!(a.len() + b.len(), 1, "{a:?} {b:?}");
    let first = a.into_iter().chain(b).next().unwrap();
    assert_eq!(first.fence, 1);
    assert!(claim(&site, "C").await.is_empty(), "a held claim is not claimed again");

    // The claim lapses (its owner stalled); another worker takes the run over.
    site.clock.advance(Duration::from_secs(61));
    let taken = claim(&other, "B2").await;
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].fence, 2, "every claim bumps the fence");

    // The stalled owner wakes up: its verdict, renewal and release all miss.
    let stale = record(&site, &first, Verdict::Done(json!({"by": "stale"}))).await;
    assert!(matches!(&stale, Err(ApiError::Conflict(m)) if m.contains("taken over")), "{stale:?}");
    let renewed = {
        let (id, until) = (first.id.clone(), site.clock.now() + Duration::from_secs(60));
        site.app.store.write(move |tx| workflows::renew(tx, &id, 1, until)).await.unwrap()
    };
    assert!(!renewed);
    let history = site.app.store.read(|tx| workflows::history(tx, "run-1")).await.unwrap();
    assert!(history.is_empty(), "nothing of the stale owner is kept: {history:?}");

    // The new owner commits; a retry counts an attempt; the second fails the run.
    assert_eq!(record(&other, &taken[0], Verdict::Done(json!({"by": "B2"}))).await.unwrap(), Standing::Running);
    let current = other.app.store.read(|tx| workflows::get(tx, "run-1")).await.unwrap().unwrap();
    assert_eq!((current.step_index, current.attempt), (1, 0));
    let again = site.clock.now() + Duration::from_secs(5);
    let retry = Verdict::Retry { error: "BMC busy".into(), detail: json!({}), again };
    assert_eq!(record(&other, &current, retry.clone()).await.unwrap(), Standing::Running);
    let current = other.app.store.read(|tx| workflows::get(tx, "run-1")).await.unwrap().unwrap();
    assert_eq!((current.attempt, current.not_before), (1, again));
    assert_eq!(record(&other, &current, retry).await.unwrap(), Standing::Failed);
    let done = other.app.store.read(|tx| workflows::get(tx, "run-1")).await.unwrap().unwrap();
    assert_eq!(done.last_error.as_deref(), Some("BMC busy (2 attempts, no attempts left)"));
    let history = other.app.store.read(|tx| workflows::history(tx, "run-1")).await.unwrap();
    let results: Vec<String> = history.iter().map(|h| format!("{}:{}:{}", h.step, h.result, h.fence)).collect();
    assert_eq!(results, ["observe:done:2", "act:retry:2", "act:failed:2"]);
    assert_eq!(history[1].detail, json!({"error": "BMC busy"}), "a retry is on record with its error");

    // The node is free for a new workflow once the old one ended.
    start_run(&site, "run-3").await.unwrap();
}

#[tokio::test]
async fn a_waiting_step_fails_at_its_deadline() {
    let site = Site::start().await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    start_run(&site, "run-1").await.unwrap();
    let run = claim(&site, "A").await.remove(0);
    let wait = |again| Verdict::Waiting { note: "the ramdisk is erasing".into(), again };
    let later = site.clock.now() + Duration::from_secs(10);
    assert_eq!(record(&site, &run, wait(later)).await.unwrap(), Standing::Running);
    site.clock.advance(Duration::from_secs(601));
    let later = site.clock.now() + Duration::from_secs(10);
    assert_eq!(record(&site, &run, wait(later)).await.unwrap(), Standing::Failed);
    let done = site.app.store.read(|tx| workflows::get(tx, "run-1")).await.unwrap().unwrap();
    assert_eq!(
        done.last_error.as_deref(),
        Some("the ramdisk is erasing: still waiting after the step's 600s deadline")
    );
}
