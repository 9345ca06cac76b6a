//! What a network-booting machine is told: `GET /boot/ipxe?mac=` (or `/boot/grub?mac=` for
//! GRUB) answers the script for the node's next step (a ramdisk task with a fresh one-time
//! token and the CA fingerprint on its kernel command line, or "boot the next device"), and
//! `GET /boot/files/NAME?token=` serves the ramdisk's kernel and initrd to holders of a live
//! token (a rescue's token: the kernel, the rescue ramdisk and the lessee's keys, which spend
//! it; the rescue's script puts its token on no kernel command line). Both are
//! unauthenticated, so both are rate-limited per client address; neither logs the token.
//! An arm64 machine's ramdisk is served from `FILES_DIR/aarch64` (`&arch=aarch64` on its
//! file URLs), chosen by the CPU its boot loader names (`&arch=` on the script request) or
//! else by the node's commissioned architecture.

use std::net::IpAddr;

use serde::Deserialize;
use serde_json::json;
use time::OffsetDateTime;
use tracing::{info, warn};

use crate::app::App;
use crate::metal::boot::BootService;
use crate::metal::boot::claims::{self, Claim};
use metal_store::{self as store, Conn};
use metal_types::config::BootConfig;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::boot::{BootStep, BootTask, boot_step};
use metal_types::model::node::{Deadlines, Node, NodeState, NodeTransition, normalize_mac};
use metal_types::model::reservation::MACHINE_ARCHITECTURES;

/// The files a ramdisk boot fetches, by the names the script uses.
pub const FILES: [&str; 2] = ["vmlinuz", "initrd"];

/// The files a rescue boot fetches: the kernel, the rescue ramdisk (`FILES_DIR/rescue`,
/// `scripts/build-ramdisk` writes it) and the lessee's keys, made for the boot.
pub const RESCUE_FILES: [&str; 3] = ["vmlinuz", "rescue", "rescue-keys"];

/// Who drives a node the boot service moved to commissioning.
const OWNER: &str = "boot-service";

/// What the script tells one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The node.
    pub node_id: String,
    /// Its state when it asked.
    pub state: NodeState,
    /// The step, with the token when it is a ramdisk task.
    pub step: BootStep,
    /// The one-time token for a ramdisk task.
    pub token: Option<String>,
    /// The MAC it booted with (normalised).
    pub boot_mac: String,
    /// The installer plan, when the step is the installer.
    pub installer: Option<metal_types::model::profile::InstallerPlan>,
    /// Why a node whose step is a ramdisk task is sent to its next device instead: no boot
    /// was started for it, or its boot was claimed already (contested).
    pub refusal: Option<String>,
    /// The ramdisk powers off after its task (`metal.end=poweroff`): a deploy in a pool that
    /// isolates tenants, whose ports move to the tenant VLAN before the deployed OS boots.
    pub power_off_after: bool,
    /// A deploy's or a rescue's node is in a pool that isolates its tenants on the switch
    /// (its ports move); false for every other step.
    pub isolated: bool,
    /// Seconds a commissioning ramdisk listens for LLDP (`metal.lldp`, `boot-lldp-wait`).
    pub lldp_wait: Option<u64>,
    /// The architecture whose ramdisk it boots (`x86_64`, `aarch64`).
    pub arch: &'static str,
}

/// The architecture of the arm64 ramdisk, served from `FILES_DIR/aarch64`.
pub const AARCH64: &str = "aarch64";

/// The machine architecture (as a node's inventory names it) of the CPU a boot loader
/// names: GRUB's `$grub_cpu`, iPXE's `${buildarch}` (`i386` for the BIOS builds that start
/// 64-bit kernels); None when it named none.
pub fn loader_architecture(cpu: &str) -> ApiResult<Option<&'static str>> {
    match cpu {
        "" => Ok(None),
        "x86_64" | "i386" => Ok(Some("x86_64")),
        "arm64" | "aarch64" => Ok(Some(AARCH64)),
        other => Err(ApiError::invalid(
            "arch",
            format!(
                "{:?}: a boot loader's CPU is x86_64, i386, arm64 or aarch64",
                other.chars().take(32).collect::<String>()
            ),
        )),
    }
}

/// The query that sends a file request to `arch`'s ramdisk (empty for x86_64's).
fn arch_query(arch: &str) -> &'static str {
    if arch == AARCH64 { "&arch=aarch64" } else { "" }
}

/// The boot loader a script is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// iPXE (`GET /boot/ipxe`): the PXE chain and the BIOS virtual-media ISO.
    Ipxe,
    /// GRUB (`GET /boot/grub`): the UEFI side of the hybrid virtual-media ISO, which fetches
    /// over its own HTTP stack; `${metal}` is the `(http,HOST:PORT)` device its grub.cfg set.
    Grub,
}

/// "Boot the next device" in GRUB on UEFI. GRUB's `exit` returns success to the firmware,
/// and UEFI's boot manager stops at its menu after a boot option that returns success
/// (seen with AAVMF), so GRUB starts the disk's loader itself, as MAAS's local boot does:
/// the first of the usual ESP paths for its CPU (shim, then GRUB, of Debian, Ubuntu and Red
/// Hat, then the removable-media path) that some disk holds. `exit` when none does.
const GRUB_NEXT_DEVICE: &str = "\
if [ \"$grub_cpu\" = arm64 ]; then efi=aa64; else efi=x64; fi
for loader in /efi/debian/shim$efi.efi /efi/ubuntu/shim$efi.efi /efi/redhat/shim$efi.efi /efi/debian/grub$efi.efi \
    /efi/ubuntu/grub$efi.efi /efi/redhat/grub$efi.efi /efi/boot/boot$efi.efi; do
  if search --no-floppy --set=root --file $loader; then
    chainloader $loader
    boot
  fi
done
exit
";

/// The ramdisk's kernel command line for `task` (the token is on it: the ramdisk joins
/// with it).
fn kernel_line(decision: &Decision, task: BootTask, token: &str, service: &BootService, kernel_args: &str) -> String {
    format!(
        "metal.controller={url} metal.token={token} metal.ca={fingerprint} metal.task={task} metal.node={node} \
         metal.bootif={mac} {kernel_args}{lldp}{end}",
        url = service.controller_url,
        fingerprint = service.ca_fingerprint,
        node = decision.node_id,
        mac = decision.boot_mac,
        // Last, so that it wins over the site's kernel arguments.
        end = if decision.power_off_after { " metal.end=poweroff" } else { "" },
        lldp = match (task, decision.lldp_wait) {
            (BootTask::Commission, Some(seconds)) => format!(" metal.lldp={seconds}"),
            _ => String::new(),
        },
    )
}

/// The script for `decision` in `dialect`, with `kernel_args` (the site's for the decision's
/// architecture). iPXE paths are relative: iPXE resolves them
/// against the URL the script came from. `initrd=initrd` on iPXE's kernel line is what
/// Debian's iPXE needs under UEFI to hand the kernel its initrd; GRUB hands it over itself
/// (and the EFI stub would look for a file named by `initrd=`). "Boot the next device" is
/// iPXE's `exit` (back to the firmware's boot order) and GRUB's `GRUB_NEXT_DEVICE`.
pub fn render(decision: &Decision, service: &BootService, kernel_args: &str, dialect: Dialect, base: &str) -> String {
    let (node, state) = (&decision.node_id, decision.state);
    let why = decision.refusal.as_ref().map(|r| format!(" ({r})")).unwrap_or_default();
    let arch = arch_query(decision.arch);
    match (&decision.step, &decision.token, dialect) {
        (BootStep::Installer, Some(token), Dialect::Ipxe) => match &decision.installer {
            Some(plan) => format!(
                "#!ipxe\n\
                 echo metal: node {node} ({state}): booting the {kind:?} installer\n\
                 kernel --name vmlinuz {kernel} initrd=initrd {args} {kernel_args}\n\
                 initrd --name initrd {initrd}\n\
                 boot\n",
                kind = plan.installer.kind,
                kernel = plan.installer.kernel_url,
                initrd = plan.installer.initrd_url,
                args = crate::metal::installer::kernel_args(plan, base, token),
            ),
            None => format!("#!ipxe\necho metal: node {node}: its installer plan is missing\nexit\n"),
        },
        (BootStep::Installer, _, Dialect::Grub) => format!(
            "echo \"metal: node {node} ({state}): installer deploys boot through iPXE (the BIOS chain), not GRUB\"\nexit\n"
        ),
        (BootStep::Ramdisk(BootTask::Rescue), Some(token), Dialect::Ipxe) => format!(
            "#!ipxe\n\
             echo metal: node {node} ({state}): booting the rescue environment\n\
             kernel --name vmlinuz /boot/files/vmlinuz?token={token}{arch} initrd=rescue initrd=keys {kernel_args} \
             rdinit=/init metal.bootif={mac}{avoid}\n\
             initrd --name rescue /boot/files/rescue?token={token}{arch}\n\
             initrd --name keys /boot/files/rescue-keys?token={token}\n\
             boot\n",
            mac = decision.boot_mac,
            // Where its ports move to the tenant VLAN, the rescue takes no address from the
            // DHCP server it booted from (option 54, as iPXE saw it).
            avoid = if decision.isolated { " metal.rescue.dhcp-avoid=${54:ipv4}" } else { "" },
        ),
        (BootStep::Ramdisk(BootTask::Rescue), _, Dialect::Grub) => format!(
            "echo \"metal: node {node} ({state}): a rescue boots through iPXE (the BIOS chain), not GRUB\"\nexit\n"
        ),
        (BootStep::Ramdisk(task), Some(token), Dialect::Ipxe) => format!(
            "#!ipxe\n\
             echo metal: node {node} ({state}): booting the ramdisk to {task}\n\
             kernel --name vmlinuz /boot/files/vmlinuz?token={token}{arch} initrd=initrd {line}\n\
             initrd --name initrd /boot/files/initrd?token={token}{arch}\n\
             boot\n",
            line = kernel_line(decision, *task, token, service, kernel_args),
        ),
        (BootStep::Ramdisk(task), Some(token), Dialect::Grub) => format!(
            "echo \"metal: node {node} ({state}): booting the ramdisk to {task}\"\n\
             linux \"${{metal}}/boot/files/vmlinuz?token={token}{arch}\" {line}\n\
             initrd \"${{metal}}/boot/files/initrd?token={token}{arch}\"\n\
             boot\n",
            line = kernel_line(decision, *task, token, service, kernel_args),
        ),
        (_, _, Dialect::Ipxe) => {
            format!("#!ipxe\necho metal: node {node} ({state}): nothing to run{why}, booting the next device\nexit\n")
        }
        (_, _, Dialect::Grub) => {
            format!(
                "echo \"metal: node {node} ({state}): nothing to run{why}, booting the next device\"\n{GRUB_NEXT_DEVICE}"
            )
        }
    }
}

/// The node with this boot MAC, enrolled as a new node when auto-enrol is on.
fn node_by_mac(tx: &mut dyn Conn, mac: &str, config: &BootConfig, now: OffsetDateTime) -> ApiResult<Node> {
    if let Some(node) = store::nodes::by_boot_mac(tx, mac)? {
        return Ok(node);
    }
    if !config.auto_enrol {
        return Err(ApiError::NotFound(format!("node with boot MAC {mac}")));
    }
    let new = store::nodes::NewNode {
        id: format!("node-{}", mac.replace(':', "")),
        boot_mac: Some(mac.to_owned()),
        pool_id: None,
        labels: Default::default(),
        taints: Vec::new(),
        devices: Vec::new(),
    };
    let node = store::nodes::insert(tx, &new, now)?
        .ok_or_else(|| ApiError::Conflict(format!("node {} exists with another boot MAC", new.id)))?;
    store::events::append(
        tx,
        "node.enrolled",
        &format!("node/{}", node.id),
        None,
        &json!({"node": node.id, "bootMac": mac, "by": "network boot"}),
        now,
    )?;
    Ok(node)
}

/// What a script request names: the booting MAC, the claim when it comes from a
/// virtual-media boot's ISO (`media`), and the boot loader's CPU.
#[derive(Debug, Clone, Default)]
pub struct Asking {
    /// The booting interface's MAC (normalised); optional with a claim.
    pub mac: Option<String>,
    /// The claim the ISO carries.
    pub claim: Option<String>,
    /// The machine architecture of the CPU the boot loader names ([`loader_architecture`]).
    pub arch: Option<&'static str>,
}

/// Finds the node the request names (by its claim's boot, or by MAC, enrolling an unknown
/// MAC with auto-enrol), moves a new node to commissioning (which arms its first boot), and,
/// when its step is a ramdisk task, hands `client` the token of the boot the scheduler
/// started, once (`claims::claim`). A claim no open boot carries is NOT_FOUND.
pub fn decide(
    tx: &mut dyn Conn,
    asking: &Asking,
    client: &str,
    config: &BootConfig,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<Decision> {
    let claim_hash = asking.claim.as_deref().map(store::auth::hash);
    let mut node = match (&claim_hash, &asking.mac) {
        (Some(hash), _) => {
            let over = || ApiError::NotFound("an open boot with this claim".into());
            let boot = store::boots::open_by_claim(tx, hash, now)?.ok_or_else(over)?;
            store::nodes::get(tx, &boot.node_id)?.ok_or_else(over)?
        }
        (None, Some(mac)) => node_by_mac(tx, mac, config, now)?,
        (None, None) => return Err(ApiError::invalid("mac", "a script request names its MAC or its claim")),
    };
    let asked = claim_hash.as_deref().map_or(claims::Asked::Mac, claims::Asked::Claim);
    let mac = asking.mac.clone().or_else(|| node.boot_mac.clone()).unwrap_or_default();
    // The boot loader knows what it runs on; before commissioning that is all there is.
    let commissioned = node.architecture.as_deref().and_then(|a| MACHINE_ARCHITECTURES.into_iter().find(|m| *m == a));
    let arch = asking.arch.or(commissioned).unwrap_or("x86_64");
    if let (Some(loader), Some(inventory)) = (asking.arch, commissioned)
        && loader != inventory
    {
        warn!(node = %node.id, loader, inventory, "the boot loader's CPU is not the node's commissioned architecture");
    }
    let step = boot_step(node.state, store::boot::due(tx, &node)?);
    if node.state == NodeState::New {
        let request = NodeTransition {
            from: NodeState::New,
            to: NodeState::Commissioning,
            generation: Some(node.generation),
            owner: Some(OWNER.into()),
            reason: Some("network boot of a new node".into()),
        };
        node = store::nodes::transition(tx, &node.id, &request, deadlines, now)?;
    }
    let installer = match node.state {
        NodeState::Deploying => store::boot::installer_plan(tx, &node.id)?,
        _ => None,
    };
    let step = if installer.is_some() { BootStep::Installer } else { step };
    // Only a deploy (it powers off for its ports to move) and a rescue (it avoids the DHCP
    // server it booted from) ask whether the pool isolates: every other script skips the read.
    let isolated = matches!(step, BootStep::Ramdisk(BootTask::Deploy | BootTask::Rescue))
        && store::capacity::pool_of(tx, &node)?.is_some_and(|p| p.policy.network.is_some());
    let power_off_after = step == BootStep::Ramdisk(BootTask::Deploy) && isolated;
    if step == BootStep::LocalDisk {
        return Ok(Decision {
            node_id: node.id,
            state: node.state,
            step,
            token: None,
            boot_mac: mac.clone(),
            installer,
            refusal: None,
            power_off_after: false,
            isolated,
            lldp_wait: None,
            arch,
        });
    }
    let (boot, again) = match claims::claim(tx, &node, asked, client, now)? {
        Claim::Take(boot) => (boot, false),
        Claim::Retake(boot) => (boot, true),
        Claim::Refused(refusal) => {
            return Ok(Decision {
                node_id: node.id,
                state: node.state,
                step: BootStep::LocalDisk,
                token: None,
                boot_mac: mac.clone(),
                installer: None,
                refusal: Some(refusal),
                power_off_after: false,
                isolated,
                lldp_wait: None,
                arch,
            });
        }
    };
    // The installer fetches its configuration and reports done with it, for as long as the
    // deploy may take; a ramdisk joins within the token's time.
    let (task, ttl, kind) = match step {
        BootStep::Ramdisk(BootTask::Rescue) => (BootTask::Rescue, config.token_ttl, "node.boot.rescue"),
        BootStep::Ramdisk(task) => (task, config.token_ttl, "node.boot.ramdisk"),
        _ => (BootTask::Install, deadlines.deploying, "node.boot.installer"),
    };
    let token = store::boot::issue_token(tx, &node.id, task, node.identity_generation, now, ttl)?;
    let hash = store::auth::hash(&token);
    let handed = if again {
        store::boots::retake(tx, &boot, &hash, now)?
    } else {
        store::boots::take(tx, &boot.id, task, &hash, client, now)?
    };
    if !handed {
        return Err(ApiError::Conflict(format!("boot {} of node {} was taken meanwhile", boot.id, node.id)));
    }
    store::events::append(
        tx,
        kind,
        &format!("node/{}", node.id),
        None,
        &json!({"node": node.id, "task": task, "identityGeneration": node.identity_generation, "boot": boot.id,
                "armedBy": boot.armed_by, "client": client, "again": again, "byMedia": boot.by_media(), "arch": arch}),
        now,
    )?;
    let token = Some(token);
    Ok(Decision {
        node_id: node.id,
        state: node.state,
        step,
        token,
        boot_mac: mac,
        installer,
        refusal: None,
        power_off_after,
        isolated,
        lldp_wait: Some(config.lldp_wait.as_secs()).filter(|s| *s > 0),
        arch,
    })
}

/// Query of `/boot/ipxe`.
#[derive(Debug, Deserialize)]
pub struct ScriptQuery {
    /// The booting interface's MAC (`${netX/mac}` in iPXE); optional with a claim.
    pub mac: Option<String>,
    /// The claim a virtual-media boot's ISO carries (`media`).
    pub claim: Option<String>,
    /// The boot loader's CPU: GRUB's `$grub_cpu`, iPXE's `${buildarch}` (`x86_64`, `i386`,
    /// `arm64`); empty or absent, the node's commissioned architecture decides.
    pub arch: Option<String>,
}

/// `GET /boot/ipxe?mac=` (or `?claim=&mac=` from a per-boot ISO; `/boot/grub` for GRUB):
/// the script for the node's next step in `dialect`; `base` is the URL the client reached
/// this service at, what an installer fetches its configuration from.
pub async fn script(app: &App, address: IpAddr, base: &str, query: ScriptQuery, dialect: Dialect) -> ApiResult<String> {
    let service = BootService::of(app)?;
    service.limiter.check(address)?;
    let mac = query.mac.as_deref().map(normalize_mac).transpose().map_err(|m| ApiError::invalid("mac", m))?;
    let by_claim = query.claim.is_some();
    let arch = loader_architecture(query.arch.as_deref().unwrap_or_default())?;
    let asking = Asking { mac, claim: query.claim, arch };
    let (config, deadlines, now) = (app.config.boot.clone(), app.config.deadlines, app.clock.now());
    let client = address.to_string();
    let decision = match app.store.change(move |tx| decide(tx, &asking, &client, &config, &deadlines, now)).await {
        Ok(decision) => decision,
        // An ISO left mounted after its boot ended boots on to the next device rather than
        // asking forever; whoever guesses at claims learns nothing from the answer.
        Err(ApiError::NotFound(_)) if by_claim => {
            warn!(client = %address, "a script request with a claim no open boot carries");
            return Ok(render_over(dialect));
        }
        Err(e) => return Err(e),
    };
    match decision.step {
        BootStep::LocalDisk if decision.refusal.is_some() => {
            warn!(node = %decision.node_id, client = %address, refusal = ?decision.refusal, "no ramdisk token handed out")
        }
        BootStep::Ramdisk(task) => info!(node = %decision.node_id, %task, client = %address, "ramdisk boot"),
        BootStep::Installer => info!(node = %decision.node_id, client = %address, "installer boot"),
        BootStep::LocalDisk => info!(node = %decision.node_id, state = %decision.state, "boot the next device"),
    }
    let boot = &app.config.boot;
    let kernel_args = if decision.arch == AARCH64 { &boot.kernel_args_aarch64 } else { &boot.kernel_args };
    Ok(render(&decision, service, kernel_args, dialect, base))
}

/// The script for a claim whose boot is over (or never was): boot the next device.
fn render_over(dialect: Dialect) -> String {
    const WHY: &str = "metal: the boot this ISO was made for is over, booting the next device";
    match dialect {
        Dialect::Ipxe => format!("#!ipxe\necho {WHY}\nexit\n"),
        Dialect::Grub => format!("echo \"{WHY}\"\n{GRUB_NEXT_DEVICE}"),
    }
}

/// The install token's node and its installer plan, when the token is live and the node is
/// still deploying that plan.
async fn installer_of(
    app: &App,
    token: String,
) -> ApiResult<(metal_store::boot::BootToken, metal_types::model::profile::InstallerPlan)> {
    let now = app.clock.now();
    app.store
        .read(move |tx| {
            let forbidden =
                || ApiError::Forbidden("installer files need a live install token (unknown, used or expired)".into());
            let found = store::boot::live_token(tx, &token, now)?
                .filter(|t| t.task == BootTask::Install)
                .ok_or_else(forbidden)?;
            let node = store::nodes::get(tx, &found.node_id)?.ok_or_else(forbidden)?;
            if node.state != NodeState::Deploying || node.identity_generation != found.identity_generation {
                return Err(ApiError::Conflict(format!(
                    "node {} is {}, not deploying with this token",
                    node.id, node.state
                )));
            }
            let plan = store::boot::installer_plan(tx, &node.id)?.ok_or_else(forbidden)?;
            Ok((found, plan))
        })
        .await
}

/// `GET /boot/installer/{token}/{user-data|meta-data|vendor-data|ks.cfg}`: the installer's
/// rendered configuration, for the holder of the node's live install token (`base`: the
/// URL the client reached this service at).
pub async fn installer_file(app: &App, address: IpAddr, base: &str, token: String, name: String) -> ApiResult<String> {
    let service = BootService::of(app)?;
    service.limiter.check(address)?;
    let (found, plan) = installer_of(app, token.clone()).await?;
    use metal_types::model::profile::InstallerKind::{Autoinstall, Kickstart};
    let body = match (name.as_str(), plan.installer.kind) {
        ("user-data", Autoinstall) | ("ks.cfg", Kickstart) => {
            crate::metal::installer::served_config(&plan, base, &token)
        }
        ("meta-data", Autoinstall) => plan.meta_data.clone(),
        ("vendor-data", Autoinstall) => String::new(),
        _ => return Err(ApiError::NotFound(format!("installer file {name:?}"))),
    };
    info!(node = %found.node_id, file = %name, client = %address, "installer file served");
    Ok(body)
}

/// `POST /boot/installer/{token}/done`: the installed system reports the install finished;
/// the deploy ends (deployed, with the profile's role) and the token is used up.
pub async fn installer_done(app: &App, address: IpAddr, token: String) -> ApiResult<()> {
    let service = BootService::of(app)?;
    service.limiter.check(address)?;
    installer_of(app, token.clone()).await?;
    let (deadlines, now) = (app.config.deadlines, app.clock.now());
    let node = app
        .store
        .change(move |tx| {
            let found = store::boot::redeem_token(tx, &token, now)?;
            let node = store::nodes::get(tx, &found.node_id)?
                .ok_or_else(|| ApiError::NotFound(format!("node {}", found.node_id)))?;
            crate::metal::provision::deploy_done(
                tx,
                &node,
                "install done (reported by the installer)".into(),
                &deadlines,
                now,
            )
        })
        .await?;
    info!(node = %node.id, client = %address, "installer reported the install done");
    Ok(())
}

/// Query of `/boot/files/NAME`.
#[derive(Debug, Deserialize)]
pub struct FileQuery {
    /// A live one-time token (issued by the script, not used yet).
    pub token: String,
    /// `aarch64` for the arm64 ramdisk (`FILES_DIR/aarch64`); absent for x86_64's.
    pub arch: Option<String>,
}

/// `GET /boot/files/{vmlinuz|initrd}?token=[&arch=aarch64]`: the ramdisk, for holders of a
/// live token.
pub async fn file(app: &App, address: IpAddr, name: String, query: FileQuery) -> ApiResult<Vec<u8>> {
    let service = BootService::of(app)?;
    service.limiter.check(address)?;
    if !FILES.contains(&name.as_str()) && !RESCUE_FILES.contains(&name.as_str()) {
        return Err(ApiError::NotFound(format!("boot file {name:?}")));
    }
    let now = app.clock.now();
    let secret = query.token.clone();
    let token = app.store.read(move |tx| store::boot::live_token(tx, &secret, now)).await?;
    let Some(token) = token else {
        return Err(ApiError::Forbidden("boot files need a live boot token (unknown, used or expired)".into()));
    };
    let files: &[&str] = if token.task == BootTask::Rescue { &RESCUE_FILES } else { &FILES };
    if !files.contains(&name.as_str()) {
        return Err(ApiError::Forbidden(format!(
            "a {} boot's token fetches {}, not {name}",
            token.task,
            files.join(", ")
        )));
    }
    if name == "rescue-keys" {
        let keys = rescue_keys(app, query.token, address.to_string(), now).await?;
        info!(node = %token.node_id, file = %name, keys = keys.1, "served: the rescue's token is spent");
        return Ok(keys.0);
    }
    let (path, built_by) = match query.arch.as_deref() {
        None => (service.files_dir.join(&name), "scripts/build-ramdisk"),
        Some(AARCH64) => (service.files_dir.join(AARCH64).join(&name), "scripts/build-ramdisk --arch aarch64"),
        Some(other) => {
            let other = other.chars().take(32).collect::<String>();
            return Err(ApiError::invalid(
                "arch",
                format!("{other:?}: the ramdisks are x86_64's (no arch) and aarch64"),
            ));
        }
    };
    let bytes = tokio::fs::read(&path).await.map_err(|e| {
        ApiError::InvalidConfig(format!(
            "the ramdisk's {name} cannot be read from {} ({built_by} writes it): {e}",
            path.display()
        ))
    })?;
    let arch = query.arch.as_deref().unwrap_or("x86_64");
    info!(node = %token.node_id, task = %token.task, file = %name, arch, bytes = bytes.len(), "served");
    Ok(bytes)
}

/// The rescue's last file: the lease's SSH keys (the deployed profile version's and those
/// its tenant registered) as a cpio archive for `/etc/metal-rescue/authorized_keys`, and the
/// number of keys. Spends the token and records the fetch on its boot (what the rescue's
/// `await-rescue` step waits for), in one transaction; the node must still be in a rescue
/// of the token's identity generation.
async fn rescue_keys(app: &App, token: String, client: String, now: OffsetDateTime) -> ApiResult<(Vec<u8>, usize)> {
    let keys = app
        .store
        .change(move |tx| {
            let boot = claims::boot_of_token(tx, &token)?
                .ok_or_else(|| ApiError::Forbidden("the rescue token has no boot".into()))?;
            let spent = store::boot::redeem_token(tx, &token, now)?;
            let node = store::nodes::get(tx, &spent.node_id)?
                .ok_or_else(|| ApiError::NotFound(format!("node {}", spent.node_id)))?;
            if node.state != NodeState::Rescue || node.identity_generation != spent.identity_generation {
                return Err(ApiError::Forbidden(format!(
                    "node {} is {} (identity generation {}): its rescue token is void",
                    node.id, node.state, node.identity_generation
                )));
            }
            let (_, lease) = store::lessee::held(tx, &node.id)?;
            let lease =
                lease.ok_or_else(|| ApiError::Forbidden(format!("node {} is under no lease: no rescue", node.id)))?;
            let keys = store::lessee::console_keys(tx, &node.id, &lease)?;
            store::boots::joined(tx, &boot.id, &client, "rescue-keys", now)?;
            store::events::append(
                tx,
                "node.boot.rescue-fetched",
                &format!("node/{}", node.id),
                None,
                &json!({"node": node.id, "boot": boot.id, "client": client, "keys": keys.len()}),
                now,
            )?;
            Ok(keys)
        })
        .await?;
    let mut authorized = keys.join("\n");
    authorized.push('\n');
    let archive = super::cpio::newc(&[
        super::cpio::Entry { path: "etc", mode: 0o040755, data: b"" },
        super::cpio::Entry { path: "etc/metal-rescue", mode: 0o040700, data: b"" },
        super::cpio::Entry { path: "etc/metal-rescue/authorized_keys", mode: 0o100600, data: authorized.as_bytes() },
    ]);
    Ok((archive, keys.len()))
}
