//! The workflow engine: claims due runs, runs their current step, and commits each step's
//! verdict (with the step's own database changes) fenced by the claim.
//!
//! Every step is observe -> act if needed -> verify, so running a step again is always
//! safe and resuming after a crash is "run the current step again". A step that has to act
//! on something it cannot read back records its intent in the run's context first. Steps are
//! bounded: attempts with backoff and a deadline per step; when they run out the run fails
//! and its definition's failure hook (quarantine) runs in the same transaction.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tracing::{debug, info, warn};

use crate::app::AppState;
use metal_store::workflows::{Standing, Verdict};
use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::workflow::{StepSpec, WorkflowRun};

/// One step of a definition: its name and bounds.
#[derive(Debug, Clone, Copy)]
pub struct StepDef {
    /// Name, as recorded.
    pub name: &'static str,
    /// Attempts before the step fails.
    pub attempts: i64,
    /// How long the step may take in all.
    pub deadline: Duration,
    /// Wait between a failed attempt and the next.
    pub backoff: Duration,
    /// How often a waiting step looks again.
    pub poll: Duration,
}

/// A workflow definition: its versioned name and its steps.
#[derive(Debug)]
pub struct Definition {
    /// `name@version`.
    pub name: &'static str,
    /// The steps, in order.
    pub steps: &'static [StepDef],
}

impl Definition {
    /// The step list a new run freezes.
    pub fn specs(&self) -> Vec<StepSpec> {
        self.steps
            .iter()
            .map(|s| StepSpec {
                name: s.name.to_owned(),
                attempts: s.attempts,
                deadline_ms: i64::try_from(s.deadline.as_millis()).unwrap_or(i64::MAX),
            })
            .collect()
    }

    fn step(&self, name: &str) -> Option<&StepDef> {
        self.steps.iter().find(|s| s.name == name)
    }
}

/// Database changes a step commits together with its verdict (and only with it).
pub type Effects = Box<dyn FnOnce(&mut dyn Conn, &WorkflowRun) -> ApiResult<()> + Send>;

/// What one attempt at a step came to.
pub enum Outcome {
    /// Done and verified, with the raw outcome and the changes to commit with it.
    Done(Value, Option<Effects>),
    /// Not yet: something outside is under way (a ramdisk erasing, a deploy).
    Waiting(String),
    /// This attempt failed; the engine retries within the step's bounds.
    Retry(String, Value),
    /// The step failed for good.
    Failed(String, Value),
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Done(detail, effects) => write!(f, "Done({detail}, effects: {})", effects.is_some()),
            Outcome::Waiting(note) => write!(f, "Waiting({note})"),
            Outcome::Retry(error, _) => write!(f, "Retry({error})"),
            Outcome::Failed(error, _) => write!(f, "Failed({error})"),
        }
    }
}

impl Outcome {
    /// Done, with nothing to commit but the verdict.
    pub fn done(detail: Value) -> Outcome {
        Outcome::Done(detail, None)
    }
}

/// What a definition does besides its steps: the changes made when a run ends.
pub trait Hooks: Send + Sync {
    /// Runs a step of `run`.
    fn step<'a>(
        &'a self,
        app: &'a AppState,
        run: &'a WorkflowRun,
        step: &'a str,
    ) -> futures::future::BoxFuture<'a, Outcome>;
    /// Commits with the last step's verdict.
    fn succeeded(&self, conn: &mut dyn Conn, run: &WorkflowRun, now: time::OffsetDateTime) -> ApiResult<()>;
    /// Commits with the failing verdict (quarantine).
    fn failed(&self, conn: &mut dyn Conn, run: &WorkflowRun, reason: &str, now: time::OffsetDateTime) -> ApiResult<()>;
}

fn definition(name: &str) -> Option<(&'static Definition, &'static dyn Hooks)> {
    super::definitions().into_iter().find(|(d, _)| d.name == name)
}

/// Claims the runs that are due, for this process.
pub async fn claim(app: &AppState) -> ApiResult<Vec<WorkflowRun>> {
    let (owner, now, claim) = (app.worker.clone(), app.clock.now(), app.config.workflow_claim);
    Ok(app.store.write(move |tx| store::workflows::claim_due(tx, &owner, now, now + claim, 32)).await?)
}

/// Claims every due run and works each until it waits or ends; returns how many it worked.
/// The service calls this on every pass; tests call it to drive runs step by step.
pub async fn drive_once(app: &AppState) -> ApiResult<usize> {
    let runs = claim(app).await?;
    let n = runs.len();
    futures::future::join_all(runs.into_iter().map(|run| work(app.clone(), run))).await;
    Ok(n)
}

/// Works a claimed run: its current step, then the next while they are done at once, and
/// gives the claim up when the run waits, backs off or ends. The claim is renewed meanwhile.
pub async fn work(app: AppState, mut run: WorkflowRun) {
    let Some((def, hooks)) = definition(&run.definition) else {
        warn!(run = %run.id, definition = %run.definition, "a workflow of an unknown definition is left alone");
        return;
    };
    let renewer = {
        let (app, id, fence) = (app.clone(), run.id.clone(), run.fence);
        tokio::spawn(async move {
            let claim = app.config.workflow_claim;
            let every = app.config.workflow_renew.unwrap_or(claim / 3);
            loop {
                tokio::time::sleep(every).await;
                let (id, until) = (id.clone(), app.clock.now() + claim);
                match app.store.write(move |tx| store::workflows::renew(tx, &id, fence, until)).await {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => warn!(error = %e, "renewing a workflow claim"),
                }
            }
        })
    };
    while let Some(step) = run.current().cloned() {
        crash_point(&app, &step.name, "before");
        let outcome = match contested(&app, &run).await {
            Some(failed) => failed,
            None => hooks.step(&app, &run, &step.name).await,
        };
        match commit(&app, def, hooks, &run, &step, outcome).await {
            Ok((Standing::Running, next, advanced)) => {
                crash_point(&app, &step.name, "after");
                run = next;
                if !advanced {
                    let r = run.clone();
                    if let Err(e) = app.store.write(move |tx| store::workflows::release(tx, &r)).await {
                        warn!(run = %run.id, error = %e, "giving a workflow claim up");
                    }
                    break;
                }
            }
            Ok((standing, _, _)) => {
                crash_point(&app, &step.name, "after");
                info!(run = %run.id, node = %run.node_id, definition = def.name, ?standing, "workflow ended");
                break;
            }
            Err(e) => {
                warn!(run = %run.id, step = %step.name, error = %e, "a step's verdict was not committed");
                break;
            }
        }
    }
    renewer.abort();
}

/// The failure of a run whose node's boot was contested while it ran (two hosts claimed
/// one ramdisk identity): the run's current step fails with the contest, whatever it is.
async fn contested(app: &AppState, run: &WorkflowRun) -> Option<Outcome> {
    let id = run.id.clone();
    match app.store.read(move |tx| store::boots::contest_of_run(tx, &id)).await {
        Ok(Some(boot)) => Some(Outcome::Failed(
            crate::metal::boot::claims::contest_reason(&boot),
            serde_json::json!({"boot": boot.id, "first": boot.handed_to, "second": boot.contested_by}),
        )),
        Ok(None) => None,
        Err(e) => Some(Outcome::Retry(format!("reading the node's boots: {e}"), Value::Null)),
    }
}

/// Commits an outcome. A step whose changes cannot commit (the node moved meanwhile) has
/// that recorded as a failed attempt instead; a fenced-out owner commits nothing.
async fn commit(
    app: &AppState,
    def: &'static Definition,
    hooks: &'static dyn Hooks,
    run: &WorkflowRun,
    step: &StepSpec,
    outcome: Outcome,
) -> ApiResult<(Standing, WorkflowRun, bool)> {
    let now = app.clock.now();
    let bounds = def.step(&step.name).copied();
    let later = |d: fn(&StepDef) -> Duration| now + bounds.map(|b| d(&b)).unwrap_or(Duration::from_secs(10));
    let (verdict, effects) = match outcome {
        Outcome::Done(detail, effects) => (Verdict::Done(detail), effects),
        Outcome::Waiting(note) => (Verdict::Waiting { note, again: later(|b| b.poll) }, None),
        Outcome::Retry(error, detail) => (Verdict::Retry { error, detail, again: later(|b| b.backoff) }, None),
        Outcome::Failed(error, detail) => (Verdict::Failed { error, detail }, None),
    };
    let advanced = matches!(verdict, Verdict::Done(_));
    let (id, node, name) = (&run.id, &run.node_id, &step.name);
    match &verdict {
        Verdict::Done(_) => info!(run = %id, %node, step = %name, "workflow step done"),
        Verdict::Waiting { note, .. } => debug!(run = %id, %node, step = %name, note, "workflow step waiting"),
        Verdict::Retry { error, .. } => warn!(run = %id, %node, step = %name, error, "workflow step to be retried"),
        Verdict::Failed { error, .. } => warn!(run = %id, %node, step = %name, error, "workflow step failed"),
    }
    let first = {
        let (run, verdict) = (run.clone(), verdict.clone());
        app.store
            .change(move |tx| {
                if let Some(effects) = effects {
                    effects(tx, &run)?;
                }
                finish(tx, hooks, &run, &verdict, now)
            })
            .await
    };
    let result = match first {
        Err(e) if advanced && !is_fenced(&e) => {
            let verdict = Verdict::Retry {
                error: format!("committing {}: {e}", step.name),
                detail: Value::Null,
                again: later(|b| b.backoff),
            };
            let run = run.clone();
            app.store.change(move |tx| finish(tx, hooks, &run, &verdict, now)).await.map(|(s, r)| (s, r, false))
        }
        other => other.map(|(s, r)| (s, r, advanced)),
    };
    app.store.events_committed();
    result
}

fn is_fenced(e: &ApiError) -> bool {
    matches!(e, ApiError::Conflict(m) if m.contains("was taken over"))
}

fn finish(
    tx: &mut dyn Conn,
    hooks: &dyn Hooks,
    run: &WorkflowRun,
    verdict: &Verdict,
    now: time::OffsetDateTime,
) -> ApiResult<(Standing, WorkflowRun)> {
    let standing = store::workflows::record(tx, run, verdict, now)?;
    let after = store::workflows::get(tx, &run.id)?.ok_or_else(|| ApiError::Internal("run vanished".into()))?;
    match standing {
        Standing::Running => {}
        Standing::Succeeded => hooks.succeeded(tx, &after, now)?,
        Standing::Failed => {
            let reason = after.last_error.clone().unwrap_or_else(|| "failed".into());
            hooks.failed(tx, &after, &format!("{}: {reason}", step_name(run)), now)?;
        }
    }
    Ok((standing, after))
}

fn step_name(run: &WorkflowRun) -> String {
    run.current().map(|s| s.name.clone()).unwrap_or_default()
}

/// The crash hook for the crash-safety tests: with `METAL_TEST_CRASH_AT` set to
/// `STEP:before`, `STEP:after` or a step's own point inside it (`rotate-credential:acted`)
/// the process aborts there, as `kill -9` would. Unset in production.
pub fn crash_point(app: &crate::app::App, step: &str, when: &str) {
    if let Some(at) = &app.config.test_crash_at
        && at.split(',').any(|a| a == format!("{step}:{when}"))
    {
        warn!(step, when, "test-crash-at: aborting");
        std::process::abort();
    }
}

/// Runs the engine until the process ends: a pass every `interval`, each claimed run
/// worked in its own task.
pub fn spawn(app: AppState, interval: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        loop {
            tick.tick().await;
            if let Err(e) = super::work::drain_once(&app).await {
                warn!(error = %e, "metal work pass failed");
            }
            match claim(&app).await {
                Ok(runs) => {
                    for run in runs {
                        tokio::spawn(work(Arc::clone(&app), run));
                    }
                }
                Err(e) => warn!(error = %e, "claiming workflows failed"),
            }
        }
    });
}
