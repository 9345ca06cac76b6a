//! The tenant-root teardown (seed 000), driven from the control plane:
//! `metal-tenant-root-release@1` powers the machine off, moves its switch ports to the
//! cleaning VLAN (in a pool that isolates tenants), fences it, rotates the BMC
//! credential, ejects media, checks firmware against the pool's baseline, boots the
//! ramdisk to erase every disk (only an accepted wipe report of the current generation
//! lets it go on), proves with the erase boot's TPM quote that the firmware it booted
//! is the node's baseline (a pool with `measuredBoot`), writes the pool's BIOS settings back
//! before that boot and checks them after it (a pool with `biosBaseline`), cleans the lease's boot state up,
//! moves the ports back to the
//! provisioning VLAN and hands the node back to the platform
//! under a new identity generation. `metal-tenant-root-release-oob@1` is the agentless
//! variant: no wipe, so `ready` only with `allowUnverifiedRelease`.
//!
//! Every step observes first, acts only when needed and verifies; the BMC rotation records
//! its new secret before asking the BMC, so after a crash it finds out which one works.

use std::time::Duration;

use futures::FutureExt as _;
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::bmcs::{Taken, logs_in};
use super::workflow::{Definition, Effects, Hooks, Outcome, StepDef};
use crate::app::AppState;
use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::node::{Deadlines, Node, NodeState, NodeTransition};
use metal_types::model::pool::{AgentMode, MeasuredBootMode, Pool};
use metal_types::model::workflow::WorkflowRun;

const fn bmc_step(name: &'static str) -> StepDef {
    StepDef {
        name,
        attempts: 5,
        deadline: Duration::from_secs(900),
        backoff: Duration::from_secs(10),
        poll: Duration::from_secs(5),
    }
}

const ERASE: StepDef = StepDef {
    name: "erase",
    attempts: 3,
    deadline: Duration::from_secs(12 * 3600),
    backoff: Duration::from_secs(30),
    poll: Duration::from_secs(10),
};

/// How often the erase step boots the ramdisk before it gives up (the in-band firmware
/// check takes a boot of its own).
const MAX_ERASE_BOOTS: i64 = 3;

/// The teardown of an agent pool's node.
pub static RELEASE: Definition = Definition {
    name: "metal-tenant-root-release@1",
    steps: &[
        bmc_step("power-off"),
        bmc_step("network-cleaning"),
        bmc_step("fence"),
        bmc_step("rotate-credential"),
        bmc_step("eject-media"),
        StepDef { deadline: Duration::from_secs(3600), ..bmc_step("firmware") },
        bmc_step("bios-reset"),
        ERASE,
        bmc_step("attest"),
        bmc_step("bios-verify"),
        bmc_step("clean-up"),
        bmc_step("network-provisioning"),
        bmc_step("exit-tenant-root"),
    ],
};

/// The teardown of an agentless pool's node: no wipe.
pub static RELEASE_OOB: Definition = Definition {
    name: "metal-tenant-root-release-oob@1",
    steps: &[
        bmc_step("power-off"),
        bmc_step("network-cleaning"),
        bmc_step("fence"),
        bmc_step("rotate-credential"),
        bmc_step("eject-media"),
        StepDef { deadline: Duration::from_secs(3600), ..bmc_step("firmware") },
        bmc_step("network-provisioning"),
        bmc_step("exit-tenant-root"),
    ],
};

/// Every teardown definition's name starts with this.
pub const PREFIX: &str = "metal-tenant-root-release";

/// Starts a teardown of a tenant-root node that is deployed or failed: the node moves to
/// releasing (`node.tenant-root.ending`) and a new run of the pool's variant begins.
pub fn begin(
    tx: &mut dyn Conn,
    node: &Node,
    reason: &str,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<String> {
    let pool = store::capacity::pool_of(tx, node)?;
    let definition = match pool.as_ref().and_then(|p| p.policy.agent) {
        Some(AgentMode::None) => &RELEASE_OOB,
        None => &RELEASE,
    };
    let run = format!("run-{}", uuid::Uuid::new_v4().simple());
    let request = NodeTransition {
        from: node.state,
        to: NodeState::Releasing,
        generation: Some(node.generation),
        owner: Some(format!("workflow/{run}")),
        reason: Some(reason.to_owned()),
    };
    store::nodes::transition(tx, &node.id, &request, deadlines, now)?;
    let context = json!({"lease": node.lease_id, "pool": node.pool_id, "reason": reason});
    store::workflows::create(tx, &run, &node.id, definition.name, &definition.specs(), &context, now)?;
    store::events::append(
        tx,
        "node.tenant-root.ending",
        &format!("node/{}", node.id),
        None,
        &json!({"node": node.id, "lease": node.lease_id, "workflow": run, "definition": definition.name, "reason": reason}),
        now,
    )?;
    Ok(run)
}

/// A fresh BMC password: 16 characters (96 random bits), which every IPMI BMC takes.
fn new_password() -> metal_bmc::Secret {
    use base64::Engine as _;
    use rand::RngCore as _;
    let mut bytes = [0u8; 12];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    metal_bmc::Secret::new(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// The teardown's steps and end hooks.
#[derive(Debug)]
pub struct Teardown;

impl Hooks for Teardown {
    fn step<'a>(
        &'a self,
        app: &'a AppState,
        run: &'a WorkflowRun,
        step: &'a str,
    ) -> futures::future::BoxFuture<'a, Outcome> {
        async move {
            let id = run.node_id.clone();
            let loaded = app
                .store
                .read(move |tx| {
                    let node = store::nodes::get(tx, &id)?.ok_or_else(|| ApiError::NotFound(format!("node {id}")))?;
                    let pool = store::capacity::pool_of(tx, &node)?;
                    Ok::<_, ApiError>((node, pool))
                })
                .await;
            let (node, pool) = match loaded {
                Ok(found) => found,
                Err(e) => return Outcome::Retry(e.to_string(), Value::Null),
            };
            if node.state != NodeState::Releasing {
                // The boot service fails a node whose in-band firmware check found drift.
                let why = node.state_reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
                return Outcome::Failed(format!("node {} is {}, not releasing{why}", node.id, node.state), Value::Null);
            }
            let steps = Steps { app, run, node: &node, pool: pool.as_ref() };
            match step {
                "power-off" => power_off(app, &run.node_id).await,
                "network-cleaning" => steps.network(super::network::CLEANING).await,
                "network-provisioning" => steps.network(super::network::PROVISIONING).await,
                "fence" => steps.fence().await,
                "rotate-credential" => steps.rotate().await,
                "eject-media" => steps.eject().await,
                "firmware" => steps.firmware().await,
                "erase" => steps.erase().await,
                "attest" => steps.attest().await,
                "bios-reset" => steps.bios_reset().await,
                "bios-verify" => steps.bios_verify().await,
                "clean-up" => steps.clean_up().await,
                "exit-tenant-root" => steps.exit(),
                other => Outcome::Failed(format!("{} has no step {other}", run.definition), Value::Null),
            }
        }
        .boxed()
    }

    fn succeeded(&self, _: &mut dyn Conn, _: &WorkflowRun, _: OffsetDateTime) -> ApiResult<()> {
        // The last step (exit-tenant-root) handed the node back in its own commit.
        Ok(())
    }

    fn failed(&self, tx: &mut dyn Conn, run: &WorkflowRun, reason: &str, now: OffsetDateTime) -> ApiResult<()> {
        super::quarantine(tx, &run.node_id, reason, now)
    }
}

struct Steps<'a> {
    app: &'a AppState,
    run: &'a WorkflowRun,
    node: &'a Node,
    pool: Option<&'a Pool>,
}

fn bmc_retry(what: &str, e: impl std::fmt::Display) -> Outcome {
    Outcome::Retry(format!("{what}: {e}"), Value::Null)
}

/// A BMC error in a BIOS step: refusals (and a BMC without BIOS settings) quarantine with
/// `code`, anything else (unreachable, a timeout) is tried again.
fn bios_bmc_error(code: &str, e: metal_bmc::BmcError) -> Outcome {
    match e {
        metal_bmc::BmcError::Refused { .. } | metal_bmc::BmcError::Unsupported { .. } => {
            Outcome::Failed(format!("{code}: {e}"), Value::Null)
        }
        e => bmc_retry("the BIOS settings", e),
    }
}

/// The node off, read back (the teardown's first step, and a reinstall's).
pub(super) async fn power_off(app: &AppState, node: &str) -> Outcome {
    match crate::metal::bmcs::power(app, node, metal_bmc::PowerAction::Off).await {
        Ok(result) if result.after == "off" => Outcome::done(json!({"power": result})),
        Ok(result) => Outcome::Retry("the BMC still reads power on".into(), json!({"power": result})),
        Err(e) => bmc_retry("powering off", e),
    }
}

impl Steps<'_> {
    async fn bmc(&self) -> Result<std::sync::Arc<crate::metal::connections::Connection>, Outcome> {
        crate::metal::bmcs::client(self.app, &self.node.id).await.map_err(|e| bmc_retry("connecting to the BMC", e))
    }

    /// The node's ports to the pool's cleaning VLAN (right after power-off, before any
    /// ramdisk boots) or back to its provisioning VLAN (before `ready`, leaving the lease's
    /// tenant VLAN, which is free once its last node left); nothing in a pool that does not
    /// isolate.
    async fn network(&self, network: &str) -> Outcome {
        let Some(policy) = super::network::policy(self.pool) else { return super::network::not_isolated() };
        let vlan = if network == super::network::CLEANING { policy.cleaning() } else { policy.provisioning_vlan };
        match super::network::move_ports(self.app, self.run, network, vlan).await {
            Outcome::Done(detail, effects) if network == super::network::PROVISIONING => {
                let effects: Effects = Box::new(move |tx, run| {
                    if let Some(effects) = effects {
                        effects(tx, run)?;
                    }
                    store::switches::leave_tenant_vlan(tx, &run.node_id)?;
                    Ok(())
                });
                Outcome::Done(detail, Some(effects))
            }
            other => other,
        }
    }

    async fn fence(&self) -> Outcome {
        let id = self.node.id.clone();
        let found = self
            .app
            .store
            .read(move |tx| {
                let bmc = store::bmcs::get(tx, &id)?;
                let inventory = store::boot::get_inventory(tx, &id)?;
                Ok::<_, ApiError>((bmc, inventory))
            })
            .await;
        let (bmc, inventory) = match found {
            Ok((Some(bmc), inventory)) => (bmc, inventory),
            Ok((None, _)) => return Outcome::Failed(format!("node {} has no BMC", self.node.id), Value::Null),
            Err(e) => return Outcome::Retry(e.to_string(), Value::Null),
        };
        let macs: Vec<String> = inventory
            .and_then(|i| serde_json::from_value::<metal_protocol::inventory::InventoryReport>(i.inventory).ok())
            .map(|r| r.nics.into_iter().map(|n| n.mac).collect())
            .unwrap_or_default();
        let password = match metal_types::secrets::open(self.app.config.master_key.as_ref(), &self.node.id, &bmc.secret)
        {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(format!("the BMC credential cannot be opened: {e}"), Value::Null),
        };
        let target = super::fencing::Target { node: &self.node.id, macs: &macs, bmc: &bmc.info, password: &password };
        match super::fencing::fence(self.pool.and_then(|p| p.policy.fencing.as_ref()), &target).await {
            Ok(evidence) => Outcome::done(evidence),
            Err(e) => Outcome::Retry(format!("fencing: {e}"), Value::Null),
        }
    }

    /// Makes `sealed`, the pending secret the BMC took, current.
    fn promote(&self, sealed: String, detail: Value) -> Outcome {
        let now = self.app.clock.now();
        let effects: Effects = Box::new(move |tx, run| {
            if !store::bmcs::promote_pending(tx, &run.node_id, &sealed, now)? {
                return Err(ApiError::Conflict("the rotation's pending secret was replaced".into()));
            }
            Ok(())
        });
        Outcome::Done(detail, Some(effects))
    }

    /// Record the new secret, change it on the BMC, prove it by logging in, promote it.
    /// A pending secret from before a crash is tried first, then the current one.
    async fn rotate(&self) -> Outcome {
        let (id, key) = (self.node.id.clone(), self.app.config.master_key.clone());
        let stored = match self.app.store.read(move |tx| store::bmcs::get(tx, &id)).await {
            Ok(Some(stored)) => stored,
            Ok(None) => return Outcome::Failed(format!("node {} has no BMC", self.node.id), Value::Null),
            Err(e) => return Outcome::Retry(e.to_string(), Value::Null),
        };
        let open = |sealed: &str| metal_types::secrets::open(key.as_ref(), &self.node.id, sealed);
        let current = match open(&stored.secret) {
            Ok(p) => p,
            Err(e) => return Outcome::Failed(format!("the BMC credential cannot be opened: {e}"), Value::Null),
        };
        if let Some(sealed) = &stored.pending {
            // An operator's rotation that began before this run ends first; one that died is
            // settled below once its lease is over, within this step's deadline. (Another run's
            // pending secret is settled at once: runs on a node never overlap, so it died.)
            let operators = stored.pending_by.as_deref() == Some(store::bmcs::API_ROTATION);
            let began = stored.pending_at.filter(|t| self.app.clock.now() - *t < crate::metal::bmcs::ROTATION_LEASE);
            if let (true, Some(began)) = (operators, began) {
                let since = metal_types::clock::to_rfc3339(began);
                return Outcome::Waiting(format!(
                    "an operator's rotation of the BMC credential is in flight (since {since})"
                ));
            }
            let Ok(pending) = open(sealed) else {
                return Outcome::Failed("the pending BMC credential cannot be opened".into(), Value::Null);
            };
            match super::bmcs::taken(&stored.info, pending, current.clone()).await {
                Taken::Pending => {
                    let detail = json!({"recovered": "a rotation was in flight; the new credential logs in"});
                    return self.promote(sealed.clone(), detail);
                }
                Taken::Neither(e) => {
                    return Outcome::Retry(
                        format!("neither the pending nor the current BMC credential logs in: {e}"),
                        Value::Null,
                    );
                }
                Taken::Current => {
                    if let Err(outcome) = self.set_pending(None).await {
                        return outcome;
                    }
                }
            }
        }
        let new = new_password();
        let sealed = metal_types::secrets::seal(key.as_ref(), &self.node.id, &new);
        if let Err(outcome) = self.set_pending(Some(sealed.clone())).await {
            return outcome;
        }
        let bmc = match crate::metal::bmcs::connect(&stored.info, current.clone()).await {
            Ok(bmc) => bmc,
            Err(e) => return bmc_retry("connecting to the BMC", e),
        };
        if let Err(e) = bmc.rotate_password(&stored.info.username, &new).await {
            // Refused: the old credential stays current when it still logs in.
            if logs_in(&stored.info, current).await.is_ok() {
                let _ = self.set_pending(None).await;
            }
            return Outcome::Failed(
                format!("the BMC refused the new credential: {e}; the old credential stays current"),
                Value::Null,
            );
        }
        super::workflow::crash_point(self.app, "rotate-credential", "acted");
        match logs_in(&stored.info, new).await {
            Ok(()) => self.promote(sealed, json!({"rotated": true, "user": stored.info.username, "provedBy": "login"})),
            Err(e) => Outcome::Retry(format!("the new BMC credential does not log in: {e}"), Value::Null),
        }
    }

    /// Records (or drops) the rotation's new secret, fenced by the run's claim.
    async fn set_pending(&self, sealed: Option<String>) -> Result<(), Outcome> {
        let (run, now) = (self.run.clone(), self.app.clock.now());
        self.app
            .store
            .write(move |tx| {
                store::workflows::fence_check(tx, &run)?;
                store::bmcs::set_pending(tx, &run.node_id, &run.id, sealed.as_deref(), now)?;
                Ok::<_, ApiError>(())
            })
            .await
            .map_err(|e| Outcome::Retry(format!("recording the rotation: {e}"), Value::Null))
    }

    /// Eject virtual media (read back) and point the next boot at the disk.
    async fn eject(&self) -> Outcome {
        let bmc = match self.bmc().await {
            Ok(bmc) => bmc,
            Err(outcome) => return outcome,
        };
        let media = match bmc.media_status().await {
            Ok(status) if status.inserted => match bmc.eject_media().await.and(bmc.media_status().await) {
                Ok(after) if !after.inserted => json!({"ejected": status.image}),
                Ok(_) => return Outcome::Retry("the virtual media is still inserted".into(), Value::Null),
                Err(e) => return bmc_retry("ejecting the virtual media", e),
            },
            Ok(_) => json!({"ejected": null}),
            Err(metal_bmc::BmcError::Unsupported { message, .. }) => json!({"virtualMedia": message}),
            Err(e) => return bmc_retry("reading the virtual media", e),
        };
        match bmc.set_boot(metal_bmc::BootTarget::Disk, metal_bmc::BootPersistence::Once).await {
            Ok(()) => {
                Outcome::done(json!({"media": media, "bootOverride": "disk (once): the tenant's overrides are gone"}))
            }
            Err(e) => bmc_retry("clearing the boot override", e),
        }
    }

    /// Out of band, against the pool's baseline; with `reflash` and images, drift is
    /// written and checked again.
    async fn firmware(&self) -> Outcome {
        let Some(pool) = self.pool else {
            return Outcome::Failed(format!("INVALID_CONFIG: node {} is in no pool", self.node.id), Value::Null);
        };
        let policy = metal_firmware::reflash::FirmwarePolicy {
            firmware_baseline: pool.policy.firmware_baseline.clone(),
            firmware_remediation: pool.policy.firmware_remediation,
            firmware_images: pool.policy.firmware_images.clone(),
        };
        if policy.firmware_baseline.as_ref().is_none_or(|b| b.is_empty()) {
            return Outcome::Failed(
                format!("INVALID_CONFIG: pool {} has no firmwareBaseline to check the machine against", pool.id),
                Value::Null,
            );
        }
        let bmc = match self.bmc().await {
            Ok(bmc) => bmc,
            Err(outcome) => return outcome,
        };
        let fetch = metal_firmware::image::FetchOptions::default();
        match metal_firmware::reflash::remediate(&**bmc, &self.node.id, &policy, &fetch).await {
            Ok(outcome) => {
                let detail = serde_json::to_value(&outcome).unwrap_or(Value::Null);
                if outcome.code.passed() {
                    Outcome::done(detail)
                } else {
                    let reason = outcome.reason.clone().unwrap_or_default();
                    Outcome::Failed(format!("{}: {reason}", outcome.code.as_str()), detail)
                }
            }
            Err(metal_firmware::reflash::RemediationError::Config(e)) => {
                Outcome::Failed(format!("INVALID_CONFIG: {e}"), Value::Null)
            }
            Err(e) => bmc_retry("the firmware check", e),
        }
    }

    /// Boots the ramdisk to erase every disk and waits for its wipe report: only a report
    /// the boot service accepted (signed by a ramdisk identity of the current generation,
    /// every disk passing read-back) after this step began lets the run go on; an in-band
    /// firmware check from its ramdisk that found drift quarantines.
    async fn erase(&self) -> Outcome {
        // Booted before: power is read before the reports. A ramdisk posts its report and
        // waits for the answer before it powers off, so a machine seen off here has its
        // report, if it sent one, in the rows read next (read the other way round, a report
        // landing between the two reads looked like a boot that ended without one, and the
        // machine was booted into the ramdisk again after its erase).
        // A power read that fails is only an error when no report settles the step (the
        // read races the ramdisk powering off after its report).
        let boots = self.run.context.get("eraseBoots").and_then(Value::as_i64).unwrap_or(0);
        let power = match boots {
            0 => None,
            _ => Some(crate::metal::bmcs::power_status(self.app, &self.node.id).await),
        };
        let id = self.node.id.clone();
        let read = self.app.store.read(move |tx| {
            Ok::<_, store::DbError>((
                store::boot::WIPE_REPORTS.all(tx, &id)?,
                store::boot::FIRMWARE_CHECKS.all(tx, &id)?,
            ))
        });
        let (reports, checks) = match read.await {
            Ok(read) => read,
            Err(e) => return Outcome::Retry(e.to_string(), Value::Null),
        };
        let since = self.run.step_started;
        // The ramdisk this step booted checks the firmware in band before it erases.
        if let Some(drifted) = checks.iter().find(|c| !c.compliant && c.received_at >= since) {
            let drift = serde_json::from_value(drifted.report.clone())
                .map(|report| metal_firmware::baseline::drift_lines(&report).join("; "))
                .unwrap_or_else(|e| format!("check {} unreadable: {e}", drifted.id));
            return Outcome::Failed(format!("FIRMWARE_DRIFT: {drift}"), json!({"firmwareCheck": drifted.id}));
        }
        if let Some(report) = reports.iter().find(|r| r.accepted && r.received_at >= since) {
            return Outcome::done(json!({"wipeReport": report.id, "signer": report.signer,
                                        "receivedAt": report.received_at.unix_timestamp(),
                                        "bootPath": self.run.context.get("eraseBootPath")}));
        }
        if let Some(refused) = reports.iter().find(|r| !r.accepted && r.received_at >= since) {
            return Outcome::Failed(
                format!(
                    "wipe report {} refused: {}: {}",
                    refused.id,
                    refused.code.as_deref().unwrap_or("refused"),
                    refused.reason.as_deref().unwrap_or_default()
                ),
                json!({"wipeReport": refused.id, "signer": refused.signer}),
            );
        }
        // A machine still on is erasing; one that is off ended its boot without a report
        // (the in-band firmware check runs first, or it rebooted), so it is booted again, a
        // bounded number of times.
        let power = match power.transpose() {
            Ok(power) => power,
            Err(e) => return bmc_retry("reading power", e),
        };
        match power.as_deref() {
            Some("on") => {
                return Outcome::Waiting(format!("the ramdisk is erasing (boot {boots}); waiting for its wipe report"));
            }
            Some(_) if boots >= MAX_ERASE_BOOTS => {
                return Outcome::Failed(
                    format!("the machine powered off after {boots} ramdisk boots without a wipe report"),
                    Value::Null,
                );
            }
            _ => {}
        }
        // Intent first: after a crash the step knows how often it booted the ramdisk.
        let mut context = self.run.context.clone();
        context["eraseBoots"] = json!(boots + 1);
        if let Err(e) = self.put_context(&context).await {
            return Outcome::Retry(format!("recording the erase boot: {e}"), Value::Null);
        }
        let by = format!("{} {} (boot {})", self.run.definition, "erase", boots + 1);
        let path = match crate::metal::bmcs::ramdisk_boot(self.app, &self.node.id, &by, Some(&self.run.id)).await {
            Ok(path) => path.as_str(),
            Err(e) => return Outcome::Retry(format!("booting the ramdisk: {e}"), Value::Null),
        };
        // The evidence names how the last boot went (the report's step record carries it).
        context["eraseBootPath"] = json!(path);
        if let Err(e) = self.put_context(&context).await {
            return Outcome::Retry(format!("recording the erase boot's path: {e}"), Value::Null);
        }
        Outcome::Waiting(format!("booted the ramdisk to erase every disk (boot {}, from {path})", boots + 1))
    }

    /// The erase boot's TPM quote (the attestation from the ramdisk key that signed the wipe
    /// report the erase step accepted) against the node's baseline, in a pool that measures
    /// boots: the same PCRs pass; a difference, no quote, a refused one or no baseline
    /// quarantines in `enforce`; in `learn` the quote becomes the baseline.
    async fn attest(&self) -> Outcome {
        use super::measured_boot::{self, Verdict};
        let measuring =
            self.pool.and_then(|p| p.policy.measured_boot.clone()).filter(|p| p.mode != MeasuredBootMode::Off);
        let Some(policy) = measuring else { return Outcome::done(json!({"measuredBoot": "off"})) };
        let (run, node, pool, mode) = (self.run.id.clone(), self.node.clone(), self.pool.cloned(), policy.mode);
        let judged = self.app.store.read(move |tx| {
            let history = store::workflows::history(tx, &run)?;
            let erased = history.iter().rev().find(|h| h.step == ERASE.name && h.result == "done");
            let wipe = erased.and_then(|h| h.detail.get("wipeReport")).and_then(Value::as_str).unwrap_or_default();
            let reports = store::boot::WIPE_REPORTS.all(tx, &node.id)?;
            let Some(key) = reports.into_iter().find(|r| r.id == wipe).and_then(|r| r.signer_key) else {
                return Ok(Verdict::Refused(format!(
                    "measured-boot: the erase step accepted no wipe report ({wipe:?})"
                )));
            };
            measured_boot::judge(tx, &node, pool.as_ref(), &policy, &key)
        });
        match judged.await {
            Ok(Verdict::Matches { attestation, baselines }) => {
                Outcome::done(json!({"mode": mode, "attestation": attestation, "baselines": baselines}))
            }
            Ok(Verdict::Learn { attestation, parts }) => {
                let learned: Vec<_> =
                    parts.iter().map(|(key, why)| json!({"for": key.to_string(), "difference": why})).collect();
                let detail = json!({"mode": mode, "attestation": attestation.id, "learned": learned});
                let now = self.app.clock.now();
                let effects: Effects = Box::new(move |tx, _| {
                    for (key, why) in &parts {
                        measured_boot::learn(tx, &attestation, key, measured_boot::LEARN, why.as_deref(), now)?;
                    }
                    Ok(())
                });
                Outcome::Done(detail, Some(effects))
            }
            Ok(Verdict::Refused(reason)) => Outcome::Failed(reason, json!({"mode": mode})),
            Err(e) => Outcome::Retry(e.to_string(), Value::Null),
        }
    }

    /// The pool's BIOS baseline and the node's BMC (a pool without one: the step is done).
    async fn bios_baseline(
        &self,
    ) -> Result<(&metal_types::model::pool::BiosBaseline, std::sync::Arc<crate::metal::connections::Connection>), Outcome>
    {
        let Some(baseline) = self.pool.and_then(|p| p.policy.bios_baseline.as_ref()) else {
            return Err(Outcome::done(json!({"biosBaseline": "none"})));
        };
        Ok((baseline, self.bmc().await?))
    }

    /// The pool's BIOS baseline written back for the erase boot to apply: the attributes
    /// found, those that drifted and what was written are the evidence. A BMC that refuses
    /// (a BIOS password the tenant set, no BIOS resource) or a baseline naming attributes the
    /// machine lacks quarantines.
    async fn bios_reset(&self) -> Outcome {
        let (baseline, bmc) = match self.bios_baseline().await {
            Ok(found) => found,
            Err(outcome) => return outcome,
        };
        match metal_firmware::bios::reset(&**bmc, baseline).await {
            Ok(reset) => Outcome::done(serde_json::to_value(&reset).unwrap_or(Value::Null)),
            Err(e @ metal_firmware::bios::BiosError::Unknown { .. }) => {
                Outcome::Failed(format!("INVALID_CONFIG: {e}"), Value::Null)
            }
            Err(metal_firmware::bios::BiosError::Bmc(e)) => bios_bmc_error("BIOS_RESET_REFUSED", e),
        }
    }

    /// After the erase boot applied them: every baseline attribute holds, or the node is
    /// quarantined with each that does not.
    async fn bios_verify(&self) -> Outcome {
        let (baseline, bmc) = match self.bios_baseline().await {
            Ok(found) => found,
            Err(outcome) => return outcome,
        };
        match metal_firmware::bios::verify(&**bmc, baseline).await {
            Ok(check) if check.drifted.is_empty() => Outcome::done(serde_json::to_value(&check).unwrap_or(Value::Null)),
            Ok(check) => {
                let drift: Vec<String> = check.drifted.iter().map(ToString::to_string).collect();
                let detail = serde_json::to_value(&check).unwrap_or(Value::Null);
                Outcome::Failed(format!("BIOS_DRIFT: after the boot that applies them, {}", drift.join("; ")), detail)
            }
            Err(e) => bios_bmc_error("BIOS_UNREADABLE", e),
        }
    }

    /// Replaces the run's context (fenced by the run's claim, as every write of the run).
    async fn put_context(&self, context: &Value) -> ApiResult<()> {
        let (run, context, now) = (self.run.clone(), context.clone(), self.app.clock.now());
        self.app.store.write(move |tx| store::workflows::put_context(tx, &run, &context, now)).await?;
        Ok(())
    }

    /// `boot.cleanUp`: the erase's per-boot ISO is ejected (read back), and the lease's boot
    /// tokens, deploy plan, host record and enrolment tokens go (the join log stays).
    async fn clean_up(&self) -> Outcome {
        let ejected = match crate::metal::bmcs::eject_boot_media(self.app, &self.node.id).await {
            Ok(ejected) => ejected,
            Err(e) => return bmc_retry("ejecting the per-boot ISO", e),
        };
        let effects: Effects = Box::new(|tx, run| {
            store::boot::clean_up(tx, &run.node_id)?;
            store::hosts::forget(tx, &run.node_id)?;
            Ok(())
        });
        Outcome::Done(
            json!({"removed": ["boot tokens", "deploy plan", "host", "enrolment tokens"], "bootMediaEjected": ejected}),
            Some(effects),
        )
    }

    /// A new identity generation, trust platform, tenant root off, `ready`, only with
    /// complete evidence (every earlier step done); agentless only with allowUnverifiedRelease.
    fn exit(&self) -> Outcome {
        let agentless = self.run.definition == RELEASE_OOB.name;
        if agentless && !self.pool.is_some_and(|p| p.policy.allow_unverified_release) {
            return Outcome::Failed(
                "the agentless teardown erases nothing, and the pool does not set allowUnverifiedRelease".into(),
                Value::Null,
            );
        }
        let now = self.app.clock.now();
        let effects: Effects = Box::new(move |tx, run| {
            let history = store::workflows::history(tx, &run.id)?;
            let earlier = &run.steps[..usize::try_from(run.step_index).unwrap_or_default()];
            if let Some(missing) =
                earlier.iter().find(|s| !history.iter().any(|h| h.step == s.name && h.result == "done"))
            {
                return Err(ApiError::Internal(format!("evidence incomplete: no done record of {}", missing.name)));
            }
            let node = store::nodes::get(tx, &run.node_id)?.ok_or_else(|| ApiError::NotFound(run.node_id.clone()))?;
            let tenancy = store::nodes::Tenancy { lease: None, release_wipe: None };
            let node = store::nodes::set_tenancy(tx, &node, &tenancy, now)?;
            let reason = format!("teardown {} complete ({})", run.id, run.definition);
            let request = NodeTransition {
                from: NodeState::Releasing,
                to: NodeState::Ready,
                generation: Some(node.generation),
                owner: None,
                reason: Some(reason),
            };
            store::nodes::transition(tx, &node.id, &request, &Deadlines::default(), now)?;
            store::events::append(
                tx,
                "node.ready",
                &format!("node/{}", node.id),
                None,
                &json!({"node": node.id, "evidence": run.id, "identityGeneration": node.identity_generation,
                        "unverified": agentless}),
                now,
            )?;
            Ok(())
        });
        Outcome::Done(json!({"trust": "platform", "unverifiedRelease": agentless}), Some(effects))
    }
}
