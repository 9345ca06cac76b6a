//! Workflow rows: one run per workflow with its frozen step list, and the append-only
//! history of every attempt.
//!
//! A run is worked on by one owner at a time. Claiming is a compare-and-set on the run's
//! `fence` that bumps it, and every later write of the owner (a step's result, a renewal, a
//! release) is conditional on that fence: an owner whose claim lapsed and was taken over
//! finds its write matching no row, and its whole transaction (the step's own database
//! changes included) rolls back.

use serde_json::Value;
use time::OffsetDateTime;

use crate::db::to_json;
use crate::page::{Keyset, Order};
use crate::{Conn, DbResult, Row};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::workflow::{StepRecord, StepSpec, WorkflowRun};
use metal_types::page::{Page, Paged};

const COLUMNS: &str = "id, node_id, definition, steps, step_index, attempt, status, context, owner, lease_until, \
                       fence, not_before, step_started, step_deadline, last_error, created_at, updated_at, finished_at";

fn from_row(row: &Row) -> DbResult<WorkflowRun> {
    let lease_until: Option<i64> = row.get("lease_until")?;
    let finished: Option<i64> = row.get("finished_at")?;
    Ok(WorkflowRun {
        id: row.get("id")?,
        node_id: row.get("node_id")?,
        definition: row.get("definition")?,
        steps: row.json("steps")?,
        step_index: row.get("step_index")?,
        attempt: row.get("attempt")?,
        status: row.enum_text("status")?,
        context: row.json("context")?,
        owner: row.get("owner")?,
        lease_until: lease_until.map(from_millis),
        fence: row.get("fence")?,
        not_before: from_millis(row.get("not_before")?),
        step_started: from_millis(row.get("step_started")?),
        step_deadline: from_millis(row.get("step_deadline")?),
        last_error: row.get("last_error")?,
        created_at: from_millis(row.get("created_at")?),
        updated_at: from_millis(row.get("updated_at")?),
        finished_at: finished.map(from_millis),
        history: Vec::new(),
    })
}

/// Starts a run at its first step; CONFLICT when the node already has a running workflow.
pub fn create(
    conn: &mut dyn Conn,
    id: &str,
    node: &str,
    definition: &str,
    steps: &[StepSpec],
    context: &Value,
    now: OffsetDateTime,
) -> Result<WorkflowRun, ApiError> {
    let first = steps.first().ok_or_else(|| ApiError::Internal(format!("workflow {definition} has no steps")))?;
    let at = to_millis(now);
    let inserted = crate::db::insert_unique(
        conn,
        "INSERT INTO workflow_runs (id, node_id, definition, steps, step_index, attempt, status, context, fence, \
         not_before, step_started, step_deadline, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, 0, 0, 'running', $5, 0, $6, $6, $7, $6, $6)",
        &[&id, &node, &definition, &to_json(&steps)?, &to_json(context)?, &at, &(at + first.deadline_ms)],
    )?;
    if !inserted {
        let running = running_for(conn, node)?.map(|r| format!(" ({} {})", r.definition, r.id)).unwrap_or_default();
        return Err(ApiError::Conflict(format!("node {node} already runs a workflow{running}")));
    }
    get(conn, id)?.ok_or_else(|| ApiError::Internal("workflow run vanished".into()))
}

/// One run, without its history.
pub fn get(conn: &mut dyn Conn, id: &str) -> DbResult<Option<WorkflowRun>> {
    conn.query_opt(&format!("SELECT {COLUMNS} FROM workflow_runs WHERE id = $1"), &[&id])?
        .as_ref()
        .map(from_row)
        .transpose()
}

/// The node's running workflow, if any.
pub fn running_for(conn: &mut dyn Conn, node: &str) -> DbResult<Option<WorkflowRun>> {
    conn.query_opt(&format!("SELECT {COLUMNS} FROM workflow_runs WHERE node_id = $1 AND status = 'running'"), &[&node])?
        .as_ref()
        .map(from_row)
        .transpose()
}

/// Makes a node's running workflow due now (a report it waits for has come): the next pass
/// claims it instead of waiting out its poll (or a retry's backoff). Its claim and fence are
/// untouched, so a run being worked at that moment keeps the `not_before` its verdict
/// writes: that wake is lost and the run waits one poll, as it did before wakes. Whether
/// one was woken.
pub fn wake(conn: &mut dyn Conn, node: &str, now: OffsetDateTime) -> DbResult<bool> {
    let at = to_millis(now);
    let woken = conn.execute(
        "UPDATE workflow_runs SET not_before = $1 WHERE node_id = $2 AND status = 'running' AND not_before > $1",
        &[&at, &node],
    )?;
    Ok(woken > 0)
}

/// A node's runs of definitions starting with `prefix`, oldest first, each with its history.
pub fn for_node(conn: &mut dyn Conn, node: &str, prefix: &str) -> DbResult<Vec<WorkflowRun>> {
    runs_of(node, prefix).all(conn, RUN_KEY, run_with_history)
}

/// A page of [`for_node`].
pub fn page_for_node(
    conn: &mut dyn Conn,
    node: &str,
    prefix: &str,
    page: &Page,
) -> Result<Paged<WorkflowRun>, ApiError> {
    runs_of(node, prefix).read(conn, RUN_KEY, page, run_with_history)
}

const RUN_KEY: &[(&str, Order)] = &[("created_at", Order::Asc), ("id", Order::Asc)];

fn runs_of(node: &str, prefix: &str) -> Keyset {
    let mut select = Keyset::new(COLUMNS, "workflow_runs");
    select.and("node_id = {}", &node).and("definition LIKE {}", &format!("{prefix}%"));
    select
}

fn run_with_history(conn: &mut dyn Conn, row: &Row) -> DbResult<WorkflowRun> {
    let mut run = from_row(row)?;
    run.history = history(conn, &run.id)?;
    Ok(run)
}

/// Every recorded attempt of a run, in order.
pub fn history(conn: &mut dyn Conn, run: &str) -> DbResult<Vec<StepRecord>> {
    conn.query(
        "SELECT step, attempt, result, detail, fence, started_at, finished_at FROM workflow_history \
         WHERE run_id = $1 ORDER BY seq",
        &[&run],
    )?
    .iter()
    .map(|row| {
        Ok(StepRecord {
            step: row.get("step")?,
            attempt: row.get("attempt")?,
            result: row.get("result")?,
            detail: row.json("detail")?,
            fence: row.get("fence")?,
            started_at: from_millis(row.get("started_at")?),
            finished_at: from_millis(row.get("finished_at")?),
        })
    })
    .collect()
}

/// Claims up to `limit` running runs that are due and whose claim is free or lapsed, for
/// `owner` until `until`. Each claim bumps the run's fence; a run another worker claimed
/// first is skipped.
pub fn claim_due(
    conn: &mut dyn Conn,
    owner: &str,
    now: OffsetDateTime,
    until: OffsetDateTime,
    limit: i64,
) -> DbResult<Vec<WorkflowRun>> {
    let at = to_millis(now);
    let candidates = conn.query(
        "SELECT id, fence FROM workflow_runs WHERE status = 'running' AND not_before <= $1 \
         AND (owner IS NULL OR lease_until < $1) ORDER BY not_before, id LIMIT $2",
        &[&at, &limit],
    )?;
    let mut claimed = Vec::new();
    for row in candidates {
        let (id, fence): (String, i64) = (row.get("id")?, row.get("fence")?);
        let won = conn.execute(
            "UPDATE workflow_runs SET owner = $1, lease_until = $2, fence = fence + 1, updated_at = $3 \
             WHERE id = $4 AND fence = $5 AND status = 'running' AND (owner IS NULL OR lease_until < $3)",
            &[&owner, &to_millis(until), &at, &id, &fence],
        )?;
        if won == 1
            && let Some(run) = get(conn, &id)?
        {
            claimed.push(run);
        }
    }
    Ok(claimed)
}

/// Extends the claim; false when the run was taken over (or ended) meanwhile.
pub fn renew(conn: &mut dyn Conn, id: &str, fence: i64, until: OffsetDateTime) -> DbResult<bool> {
    let n = conn.execute(
        "UPDATE workflow_runs SET lease_until = $1 WHERE id = $2 AND fence = $3 AND status = 'running'",
        &[&to_millis(until), &id, &fence],
    )?;
    Ok(n == 1)
}

/// What became of one attempt at the current step.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The step is done (verified); go on to the next, or finish.
    Done(Value),
    /// Not yet (something outside is still under way); look again at `again`.
    Waiting { note: String, again: OffsetDateTime },
    /// This attempt failed; try again at `again` unless attempts or the deadline ran out.
    Retry { error: String, detail: Value, again: OffsetDateTime },
    /// The step failed for good.
    Failed { error: String, detail: Value },
}

/// How a run stands after [`record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Still running (at the same or the next step).
    Running,
    /// Every step done.
    Succeeded,
    /// A step failed for good (the caller quarantines).
    Failed,
}

/// The error a fenced-out owner gets: its claim was taken over, nothing it did is kept.
pub fn fenced(run: &WorkflowRun) -> ApiError {
    ApiError::Conflict(format!("workflow run {} was taken over (fence {} is stale)", run.id, run.fence))
}

fn append_history(
    conn: &mut dyn Conn,
    run: &WorkflowRun,
    result: &str,
    detail: &Value,
    now: OffsetDateTime,
) -> DbResult<()> {
    let seq: i64 = conn
        .query_opt("SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM workflow_history WHERE run_id = $1", &[&run.id])?
        .map(|r| r.get("next"))
        .transpose()?
        .unwrap_or(1);
    let step = run.current().map(|s| s.name.clone()).unwrap_or_default();
    conn.execute(
        "INSERT INTO workflow_history (run_id, seq, step, attempt, result, detail, fence, started_at, finished_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        &[
            &run.id,
            &seq,
            &step,
            &run.attempt,
            &result,
            &to_json(detail)?,
            &run.fence,
            &to_millis(run.step_started),
            &to_millis(now),
        ],
    )?;
    Ok(())
}

/// Records the verdict of an attempt at `run`'s current step, fenced by `run.fence`: a
/// stale owner gets CONFLICT and its transaction must roll back. Attempts past the step's
/// bound and a passed deadline turn a retry or a wait into a failure.
pub fn record(
    conn: &mut dyn Conn,
    run: &WorkflowRun,
    verdict: &Verdict,
    now: OffsetDateTime,
) -> Result<Standing, ApiError> {
    let at = to_millis(now);
    let step = run.current().ok_or_else(|| ApiError::Internal(format!("run {} has no current step", run.id)))?;
    let overdue = now >= run.step_deadline;
    let attempts_left = run.attempt + 1 < step.attempts;
    let failure = match verdict {
        Verdict::Failed { error, detail } => Some((error.clone(), detail.clone())),
        Verdict::Retry { error, detail, .. } if !attempts_left || overdue => {
            let why = if overdue { "its deadline passed" } else { "no attempts left" };
            Some((format!("{error} ({} attempts, {why})", run.attempt + 1), detail.clone()))
        }
        Verdict::Waiting { note, .. } if overdue => {
            Some((format!("{note}: still waiting after the step's {}s deadline", step.deadline_ms / 1000), Value::Null))
        }
        _ => None,
    };
    let (id, fence) = (&run.id, &run.fence);
    let (standing, updated) = match (verdict, failure) {
        (_, Some((error, detail))) => {
            append_history(conn, run, "failed", &detail, now)?;
            let n = conn.execute(
                "UPDATE workflow_runs SET status = 'failed', last_error = $1, owner = NULL, lease_until = NULL, \
                 finished_at = $2, updated_at = $2 WHERE id = $3 AND fence = $4 AND status = 'running'",
                &[&error, &at, id, fence],
            )?;
            (Standing::Failed, n)
        }
        (Verdict::Done(detail), None) => {
            append_history(conn, run, "done", detail, now)?;
            match run.steps.get(usize::try_from(run.step_index + 1).unwrap_or(usize::MAX)) {
                Some(next) => {
                    let n = conn.execute(
                        "UPDATE workflow_runs SET step_index = step_index + 1, attempt = 0, not_before = $1, \
                         step_started = $1, step_deadline = $2, last_error = NULL, updated_at = $1 \
                         WHERE id = $3 AND fence = $4 AND status = 'running'",
                        &[&at, &(at + next.deadline_ms), id, fence],
                    )?;
                    (Standing::Running, n)
                }
                None => {
                    let n = conn.execute(
                        "UPDATE workflow_runs SET status = 'succeeded', step_index = step_index + 1, owner = NULL, \
                         lease_until = NULL, last_error = NULL, finished_at = $1, updated_at = $1 \
                         WHERE id = $2 AND fence = $3 AND status = 'running'",
                        &[&at, id, fence],
                    )?;
                    (Standing::Succeeded, n)
                }
            }
        }
        (Verdict::Retry { error, detail, again }, None) => {
            append_history(conn, run, "retry", &retry_detail(error, detail), now)?;
            let n = conn.execute(
                "UPDATE workflow_runs SET attempt = attempt + 1, not_before = $1, last_error = $2, updated_at = $3 \
                 WHERE id = $4 AND fence = $5 AND status = 'running'",
                &[&to_millis(*again), error, &at, id, fence],
            )?;
            (Standing::Running, n)
        }
        (Verdict::Waiting { note, again }, None) => {
            let n = conn.execute(
                "UPDATE workflow_runs SET not_before = $1, last_error = $2, updated_at = $3 \
                 WHERE id = $4 AND fence = $5 AND status = 'running'",
                &[&to_millis(*again), note, &at, id, fence],
            )?;
            (Standing::Running, n)
        }
        (Verdict::Failed { .. }, None) => unreachable!("a failed verdict always fails"),
    };
    if updated != 1 {
        return Err(fenced(run));
    }
    Ok(standing)
}

/// A retry's record: its error, with what the step saw (an object's fields, or `detail`).
fn retry_detail(error: &str, detail: &Value) -> Value {
    match detail {
        Value::Object(fields) => {
            let mut fields = fields.clone();
            fields.insert("error".into(), error.into());
            Value::Object(fields)
        }
        Value::Null => serde_json::json!({"error": error}),
        other => serde_json::json!({"error": error, "detail": other}),
    }
}

/// Gives the claim up (the run stays where it is, for whoever is due next), fenced.
pub fn release(conn: &mut dyn Conn, run: &WorkflowRun) -> DbResult<bool> {
    let n = conn.execute(
        "UPDATE workflow_runs SET owner = NULL, lease_until = NULL WHERE id = $1 AND fence = $2",
        &[&run.id, &run.fence],
    )?;
    Ok(n == 1)
}

/// Merges `patch` into the run's context (an intent recorded before acting), fenced.
pub fn put_context(
    conn: &mut dyn Conn,
    run: &WorkflowRun,
    context: &Value,
    now: OffsetDateTime,
) -> Result<(), ApiError> {
    let n = conn.execute(
        "UPDATE workflow_runs SET context = $1, updated_at = $2 WHERE id = $3 AND fence = $4 AND status = 'running'",
        &[&to_json(context)?, &to_millis(now), &run.id, &run.fence],
    )?;
    if n != 1 {
        return Err(fenced(run));
    }
    Ok(())
}

/// Ends a running run from outside (its lease ended before it finished): failed with
/// `reason`, whoever holds it. The holder's next commit finds it ended and is fenced out.
pub fn cancel(conn: &mut dyn Conn, run: &WorkflowRun, reason: &str, now: OffsetDateTime) -> DbResult<bool> {
    append_history(conn, run, "cancelled", &serde_json::json!({"reason": reason}), now)?;
    let n = conn.execute(
        "UPDATE workflow_runs SET status = 'failed', last_error = $1, owner = NULL, lease_until = NULL, \
         finished_at = $2, updated_at = $2 WHERE id = $3 AND status = 'running'",
        &[&reason, &to_millis(now), &run.id],
    )?;
    Ok(n == 1)
}

/// Fails unless `run`'s claim is still this owner's (a row lock on PostgreSQL until the
/// transaction ends), so a write that is not a step's verdict is fenced too.
pub fn fence_check(conn: &mut dyn Conn, run: &WorkflowRun) -> Result<(), ApiError> {
    let n = conn.execute(
        "UPDATE workflow_runs SET updated_at = updated_at WHERE id = $1 AND fence = $2 AND status = 'running'",
        &[&run.id, &run.fence],
    )?;
    if n != 1 {
        return Err(fenced(run));
    }
    Ok(())
}
