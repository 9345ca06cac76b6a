//! Workflow runs as the API shows them (a teardown's evidence record is its run with its
//! history), and the frozen step list a run carries.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Steps are left.
    Running,
    /// Every step done and verified.
    Succeeded,
    /// A step failed for good; the node was quarantined (a reinstall's: failed, not quarantined).
    Failed,
}

/// One step of a run, with its bounds, as resolved when the run was created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepSpec {
    /// Step name, e.g. `power-off`.
    pub name: String,
    /// Attempts before the step fails.
    pub attempts: i64,
    /// How long the step may take from its first attempt, in milliseconds.
    pub deadline_ms: i64,
}

/// One recorded attempt at a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// The step.
    pub step: String,
    /// Which attempt (0 is the first).
    pub attempt: i64,
    /// `done`, `retry` or `failed`.
    pub result: String,
    /// The raw outcome: what was observed, what was done, what was read back.
    #[schema(value_type = Object)]
    pub detail: Value,
    /// The claim's fencing generation the result was committed under.
    pub fence: i64,
    /// When the step started.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub started_at: time::OffsetDateTime,
    /// When this attempt ended.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub finished_at: time::OffsetDateTime,
}

/// A workflow run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRun {
    /// Run id.
    pub id: String,
    /// The node it works on.
    pub node_id: String,
    /// Definition and version, e.g. `metal-tenant-root-release@1`.
    pub definition: String,
    /// The steps, frozen at creation.
    pub steps: Vec<StepSpec>,
    /// Index of the current step (the step count once succeeded).
    pub step_index: i64,
    /// Attempt at the current step (0 is the first).
    pub attempt: i64,
    /// Status.
    pub status: RunStatus,
    /// What the run was started for and the intents its steps recorded.
    #[schema(value_type = Object)]
    pub context: Value,
    /// The worker holding the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When the claim lapses unless renewed.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>)]
    pub lease_until: Option<time::OffsetDateTime>,
    /// Fencing generation: bumps on every claim.
    pub fence: i64,
    /// Not worked on before this time (backoff, polling).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub not_before: time::OffsetDateTime,
    /// When the current step started.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub step_started: time::OffsetDateTime,
    /// When the current step fails unless done.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub step_deadline: time::OffsetDateTime,
    /// The last error or what it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Created.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub created_at: time::OffsetDateTime,
    /// Last change.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub updated_at: time::OffsetDateTime,
    /// When it succeeded or failed.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>)]
    pub finished_at: Option<time::OffsetDateTime>,
    /// Every attempt, in order (the evidence record).
    pub history: Vec<StepRecord>,
}

impl WorkflowRun {
    /// The step it is at (none once succeeded).
    pub fn current(&self) -> Option<&StepSpec> {
        usize::try_from(self.step_index).ok().and_then(|i| self.steps.get(i))
    }
}
