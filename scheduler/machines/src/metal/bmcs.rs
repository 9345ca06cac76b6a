//! Driving nodes' BMCs: opens the right client (Redfish or IPMI) from the stored row and
//! the unsealed credential, carries out power, boot, virtual media, read-model and password
//! rotation requests, and records what the BMC reported (power, health) with events.

use futures::future::BoxFuture;
use metal_bmc::ipmi::{IpmiBmc, IpmiConfig};
use metal_bmc::redfish::{RedfishBmc, RedfishConfig, Timing};
use metal_bmc::{Bmc, BmcError, BmcResult, Credential, Secret};

use std::sync::Arc;

use crate::app::App;
use crate::metal::connections::Connection;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::bmc::{BmcInfo, BmcProtocol, BmcSpec, BootRequest, MediaInfo, PowerResult};

fn power_text(p: metal_bmc::PowerState) -> &'static str {
    match p {
        metal_bmc::PowerState::On => "on",
        metal_bmc::PowerState::Off => "off",
    }
}

/// Sets a node's BMC, sealing the password when a master key is configured.
pub async fn set(app: &App, node: String, spec: BmcSpec) -> ApiResult<BmcInfo> {
    spec.validate()?;
    let sealed = metal_types::secrets::seal(app.config.master_key.as_ref(), &node, &spec.login.password.0);
    if app.config.master_key.is_none() {
        tracing::warn!(%node, "BMC password stored unsealed: set METAL_MASTER_KEY to seal BMC passwords at rest");
    }
    let now = app.clock.now();
    app.store.change(move |tx| store::bmcs::put(tx, &node, &spec, &sealed, now)).await
}

/// A node's BMC as the API shows it.
pub async fn info(app: &App, node: String) -> ApiResult<BmcInfo> {
    let what = format!("BMC of node {node}");
    let stored = app.store.read(move |c| store::bmcs::get(c, &node)).await?;
    Ok(stored.ok_or(ApiError::NotFound(what))?.info)
}

/// A node's BMC row and its unsealed password. A node without one is INVALID_CONFIG, with
/// how to set one; a node that does not exist is NOT_FOUND.
async fn stored(app: &App, node: &str) -> ApiResult<(BmcInfo, Secret)> {
    let id = node.to_owned();
    let stored = app
        .store
        .read(move |c| {
            store::nodes::get(c, &id)?.ok_or_else(|| ApiError::NotFound(format!("node {id}")))?;
            Ok::<_, ApiError>(store::bmcs::get(c, &id)?)
        })
        .await?
        .ok_or_else(|| {
            ApiError::InvalidConfig(format!(
                "node {node} has no BMC yet: set one with `metalctl bmc set {node} --protocol redfish|ipmi \
                 --address ... --username ...` (PUT /v1/nodes/{node}/bmc)"
            ))
        })?;
    let password = metal_types::secrets::open(app.config.master_key.as_ref(), node, &stored.secret)?;
    Ok((stored.info, password))
}

/// The connection to a node's BMC, kept between calls ([`crate::metal::connections::Connections`]).
pub async fn client(app: &App, node: &str) -> ApiResult<Arc<Connection>> {
    let (info, password) = stored(app, node).await?;
    Ok(kept(app, node, &info, password).await??)
}

/// The kept connection to `node`'s BMC as `info` and `password` describe it, opened when
/// there is none: the outer error is the row's, the inner one the BMC's.
async fn kept(app: &App, node: &str, info: &BmcInfo, password: Secret) -> ApiResult<BmcResult<Arc<Connection>>> {
    if let Some(connection) = app.bmc_connections.get(node, info, &password) {
        return Ok(Ok(connection));
    }
    Ok(match open(info, password.clone()).await? {
        Ok(bmc) => Ok(app.bmc_connections.keep(node, info, &password, Connection::new(bmc))),
        Err(e) => Err(e),
    })
}

/// A connection of its own to a BMC described by `info` with `password` (for proving a
/// credential: never a kept one); it logs out when dropped.
pub async fn connect(info: &BmcInfo, password: Secret) -> ApiResult<Connection> {
    Ok(Connection::new(open(info, password).await??))
}

/// Connects to a BMC: the outer error is the row's (a TLS pin or an address that cannot be
/// used), the inner one the BMC's.
async fn open(info: &BmcInfo, password: Secret) -> ApiResult<BmcResult<Box<dyn Bmc>>> {
    let credential = Credential { user: info.username.clone(), password };
    Ok(match info.protocol {
        BmcProtocol::Redfish => {
            let trust = match &info.tls {
                Some(tls) => tls.trust()?,
                None => metal_bmc::tls::TlsTrust::InsecureSkipVerify, // http:// on loopback only
            };
            let config = RedfishConfig {
                endpoint: info.address.clone(),
                credential,
                trust,
                system: info.system_id.clone(),
                timing: Timing::default(),
            };
            RedfishBmc::connect(config).await.map(|bmc| Box::new(bmc) as Box<dyn Bmc>)
        }
        BmcProtocol::Ipmi => Ok(Box::new(ipmi(info, credential)?)),
    })
}

/// Runs `op` on the node's BMC, over its kept connection. When the BMC refuses the stored
/// credential because a rotation changed it meanwhile (the new secret is pending, or already
/// current), `op` runs once more with the new one: a call that meets a rotation half way is
/// not failed by it.
async fn on_bmc<T>(
    app: &App,
    node: &str,
    op: impl for<'b> Fn(&'b dyn Bmc) -> BoxFuture<'b, BmcResult<T>>,
) -> ApiResult<T> {
    Ok(try_on_bmc(app, node, op).await??)
}

/// [`on_bmc`], with the BMC's own error kept apart from the row's.
async fn try_on_bmc<T>(
    app: &App,
    node: &str,
    op: impl for<'b> Fn(&'b dyn Bmc) -> BoxFuture<'b, BmcResult<T>>,
) -> ApiResult<BmcResult<T>> {
    let attempt = async |info: &BmcInfo, password: Secret| -> ApiResult<BmcResult<T>> {
        let connection = match kept(app, node, info, password).await? {
            Ok(connection) => connection,
            Err(e) => return Ok(Err(e)),
        };
        let result = op(&**connection).await;
        if result.is_err() {
            app.bmc_connections.forget(node, &connection);
        }
        Ok(result)
    };
    let (info, password) = stored(app, node).await?;
    let refused = match attempt(&info, password.clone()).await? {
        Err(refused @ BmcError::Unauthorized { .. }) => refused,
        other => return Ok(other),
    };
    for newer in rotated(app, node, &password).await? {
        match attempt(&info, newer).await? {
            Err(BmcError::Unauthorized { .. }) => {}
            other => return Ok(other),
        }
    }
    Ok(Err(refused))
}

/// The secrets a rotation may have put in place of `used`, freshly read: the pending one,
/// then the current one, each when it differs.
async fn rotated(app: &App, node: &str, used: &Secret) -> ApiResult<Vec<Secret>> {
    let id = node.to_owned();
    let Some(row) = app.store.read(move |c| store::bmcs::get(c, &id)).await? else { return Ok(Vec::new()) };
    let mut newer = Vec::new();
    for sealed in row.pending.iter().chain([&row.secret]) {
        let secret = metal_types::secrets::open(app.config.master_key.as_ref(), node, sealed)?;
        if secret != *used && !newer.contains(&secret) {
            newer.push(secret);
        }
    }
    Ok(newer)
}

fn ipmi(info: &BmcInfo, credential: Credential) -> ApiResult<IpmiBmc> {
    let (host, port) = metal_types::model::bmc::ipmi_address(&info.address)?;
    let mut config = IpmiConfig::new(host, port, credential);
    if let Some(privilege) = info.privilege {
        config.privilege = privilege.as_str().to_owned();
    }
    Ok(IpmiBmc::new(config))
}

/// Opens a node's serial console (IPMI Serial-over-LAN) for `credential_id` and records
/// the session, unless another session holds it (CONFLICT: one writer at a time); returns
/// the running `ipmitool sol activate` and the session id.
pub async fn open_console(app: &App, node: &str, credential_id: &str) -> ApiResult<(tokio::process::Child, String)> {
    let (info, password) = stored(app, node).await?;
    if info.protocol != BmcProtocol::Ipmi {
        return Err(ApiError::Bmc(format!("node {node}: the serial console needs an IPMI BMC (Serial-over-LAN)")));
    }
    let bmc = ipmi(&info, Credential { user: info.username.clone(), password })?;
    // The record comes first: it is what keeps a second writer out.
    let session = format!("console-{}", uuid::Uuid::new_v4().simple());
    let (id, node, who, now) = (session.clone(), node.to_owned(), credential_id.to_owned(), app.clock.now());
    app.store.change(move |tx| store::bmcs::open_console(tx, &id, &node, &who, now)).await?;
    match bmc.console().await {
        Ok(child) => Ok((child, session)),
        Err(e) => {
            let (id, now) = (session, app.clock.now());
            app.store.change(move |tx| Ok(store::bmcs::close_console(tx, &id, (0, 0), now)?)).await?;
            Err(e.into())
        }
    }
}

/// Records what a BMC read: the power and (`Some`) the health. Only news is written: what
/// is recorded is read first, and a write (which waits in the store's one write queue,
/// behind whatever a thousand teardowns are writing) happens only when something changed,
/// so a reading is answered as soon as the BMC answered.
async fn record_reading(
    app: &App,
    node: &str,
    power: Option<metal_bmc::PowerState>,
    health: Option<Option<String>>,
) -> ApiResult<()> {
    let id = node.to_owned();
    let (recorded_power, recorded_health) = app.store.read(move |tx| store::bmcs::recorded(tx, &id)).await?;
    let power = power.map(power_text).filter(|p| recorded_power.as_deref() != Some(*p));
    let health = health.filter(|h| *h != recorded_health);
    if power.is_none() && health.is_none() {
        return Ok(());
    }
    let (id, now) = (node.to_owned(), app.clock.now());
    app.store
        .write(move |tx| {
            if let Some(power) = power {
                store::bmcs::record_power(tx, &id, power, now)?;
            }
            if let Some(health) = health {
                store::bmcs::record_health(tx, &id, health.as_deref(), now)?;
            }
            Ok::<_, ApiError>(())
        })
        .await?;
    app.store.events_committed();
    Ok(())
}

async fn record_power(app: &App, node: &str, power: metal_bmc::PowerState) -> ApiResult<()> {
    record_reading(app, node, Some(power), None).await
}

/// The node's power as its BMC reports it now (and recorded on the node).
pub async fn power_status(app: &App, node: &str) -> ApiResult<String> {
    let state = on_bmc(app, node, |bmc| bmc.power_state()).await?;
    record_power(app, node, state).await?;
    Ok(power_text(state).to_owned())
}

/// Carries out a power action, read back, and records the result.
pub async fn power(app: &App, node: &str, action: metal_bmc::PowerAction) -> ApiResult<PowerResult> {
    let outcome = on_bmc(app, node, |bmc| bmc.power(action)).await?;
    record_power(app, node, outcome.after).await?;
    Ok(PowerResult {
        before: power_text(outcome.before).into(),
        after: power_text(outcome.after).into(),
        sent: outcome.sent,
    })
}

/// Sets the boot override.
pub async fn boot(app: &App, node: &str, request: &BootRequest) -> ApiResult<()> {
    let persistence =
        if request.persistent { metal_bmc::BootPersistence::Persistent } else { metal_bmc::BootPersistence::Once };
    on_bmc(app, node, |bmc| bmc.set_boot(request.target, persistence)).await
}

/// Network-boots the node: arms the boot its ramdisk may take (`store::boots`, for `armed_by`
/// and `run`), sets the boot override to PXE once and power-cycles (which powers on a
/// machine that is off). The arming commits first, so a script request the boot makes
/// always finds it.
pub async fn network_boot(app: &App, node: &str, armed_by: &str, run: Option<&str>) -> ApiResult<PowerResult> {
    arm(app, node, armed_by, run).await?;
    let request = BootRequest { target: metal_bmc::BootTarget::Pxe, persistent: false };
    boot(app, node, &request).await?;
    power(app, node, metal_bmc::PowerAction::Cycle).await
}

/// Arms a boot of the node for `armed_by` (and `run`), valid for the boot token's time.
pub async fn arm(app: &App, node: &str, armed_by: &str, run: Option<&str>) -> ApiResult<String> {
    let (node, armed_by, run) = (node.to_owned(), armed_by.to_owned(), run.map(str::to_owned));
    let (ttl, now) = (app.config.boot.token_ttl, app.clock.now());
    Ok(app.store.write(move |tx| store::boots::arm(tx, &node, &armed_by, run.as_deref(), now, ttl)).await?)
}

/// Inserts (`Some(url)`) or ejects (`None`) the virtual CD, then reports what it holds.
pub async fn media(app: &App, node: &str, insert: Option<&str>) -> ApiResult<MediaInfo> {
    if let Some(url) = insert {
        let parsed = reqwest::Url::parse(url).map_err(|_| ApiError::invalid("url", "must be an http(s) URL"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ApiError::invalid("url", "must be an http(s) URL"));
        }
    }
    on_bmc(app, node, |bmc| {
        let insert = insert.map(str::to_owned);
        Box::pin(async move {
            match insert.as_deref() {
                Some(url) => bmc.insert_media(url).await?,
                None => bmc.eject_media().await?,
            }
            bmc.media_status().await
        })
    })
    .await
    .map(media_info)
}

/// What the node's virtual CD holds.
pub async fn media_status(app: &App, node: &str) -> ApiResult<MediaInfo> {
    on_bmc(app, node, |bmc| bmc.media_status()).await.map(media_info)
}

/// What an answer shows of the virtual CD: a per-boot ISO's claim is hidden.
fn media_info(status: metal_bmc::MediaStatus) -> MediaInfo {
    MediaInfo { inserted: status.inserted, image: status.image.map(crate::metal::boot::media::redact) }
}

/// How a workflow step booted the node's ramdisk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootPath {
    /// From the network (PXE): the boot is taken by the first request naming its MAC.
    Network,
    /// From a per-boot ISO mounted now on the BMC's virtual CD.
    Media,
    /// From the per-boot ISO still mounted for the boot its ramdisk's report armed.
    MediaMounted,
}

impl BootPath {
    /// How the evidence names it.
    pub fn as_str(self) -> &'static str {
        match self {
            BootPath::Network => "network",
            BootPath::Media => "virtual media (a per-boot ISO mounted)",
            BootPath::MediaMounted => "virtual media (the per-boot ISO still mounted)",
        }
    }
}

/// Boots the node's ramdisk for a workflow step: from virtual media when the boot service
/// has a media template and the BMC has virtual media, else from the network
/// ([`network_boot`]). A media boot is armed with a fresh claim (committed before the BMC is
/// asked), its ISO mounted and read back, the boot override set to the CD once and the
/// machine power-cycled. When the open boot is an untaken one that carries the claim of the
/// ISO still mounted (the erase armed by the in-band firmware check's report), the ISO stays
/// and only the override and power are set.
pub async fn ramdisk_boot(app: &App, node: &str, armed_by: &str, run: Option<&str>) -> ApiResult<BootPath> {
    let Some(template) = app.boot.as_ref().and_then(|b| b.media.as_ref()) else {
        network_boot(app, node, armed_by, run).await?;
        return Ok(BootPath::Network);
    };
    let mounted = match try_on_bmc(app, node, |bmc| bmc.media_status()).await? {
        Err(BmcError::Unsupported { .. }) => {
            network_boot(app, node, armed_by, run).await?;
            return Ok(BootPath::Network);
        }
        other => other?,
    };
    let (id, now) = (node.to_owned(), app.clock.now());
    let open = app.store.read(move |tx| store::boots::open(tx, &id, now)).await?;
    let mounted_claim = mounted.image.as_deref().and_then(crate::metal::boot::media::claim_in).map(store::auth::hash);
    let path = match open {
        Some(boot) if !boot.taken() && boot.claim_hash.is_some() && boot.claim_hash == mounted_claim => {
            BootPath::MediaMounted
        }
        _ => {
            let claim = store::auth::new_secret();
            let (id, by, run, hash, ttl) = (
                node.to_owned(),
                armed_by.to_owned(),
                run.map(str::to_owned),
                store::auth::hash(&claim),
                app.config.boot.token_ttl,
            );
            app.store
                .write(move |tx| store::boots::arm_claimed(tx, &id, &by, run.as_deref(), Some(&hash), now, ttl))
                .await?;
            let url = template.url(&claim);
            let status = on_bmc(app, node, |bmc| {
                let (url, inserted) = (url.clone(), mounted.inserted);
                Box::pin(async move {
                    // Some BMCs refuse to insert over an inserted image.
                    if inserted {
                        bmc.eject_media().await?;
                    }
                    bmc.insert_media(&url).await?;
                    bmc.media_status().await
                })
            })
            .await?;
            if status.image.as_deref() != Some(url.as_str()) {
                let holds = status.image.map(crate::metal::boot::media::redact);
                return Err(ApiError::Bmc(format!(
                    "the BMC's virtual CD holds {holds:?} after the per-boot ISO was inserted"
                )));
            }
            BootPath::Media
        }
    };
    let request = BootRequest { target: metal_bmc::BootTarget::Cd, persistent: false };
    boot(app, node, &request).await?;
    power(app, node, metal_bmc::PowerAction::Cycle).await?;
    Ok(path)
}

/// Ejects the node's virtual CD when it holds a per-boot ISO (read back); true when it did.
/// A BMC without virtual media has nothing to eject.
pub async fn eject_boot_media(app: &App, node: &str) -> ApiResult<bool> {
    let status = match try_on_bmc(app, node, |bmc| bmc.media_status()).await? {
        Err(BmcError::Unsupported { .. }) => return Ok(false),
        other => other?,
    };
    if status.image.as_deref().is_none_or(|image| crate::metal::boot::media::claim_in(image).is_none()) {
        return Ok(false);
    }
    let after = media(app, node, None).await?;
    if after.inserted {
        return Err(ApiError::Bmc("the BMC's virtual CD still holds the per-boot ISO after the eject".into()));
    }
    Ok(true)
}

/// Everything the BMC reports; power and health are recorded on the node (a health other
/// than OK raises an event).
pub async fn read_model(app: &App, node: &str) -> ApiResult<serde_json::Value> {
    let started = std::time::Instant::now();
    let model = on_bmc(app, node, |bmc| bmc.read_model()).await?;
    let read = started.elapsed();
    record_reading(app, node, model.power.present().copied(), Some(model.health.present().cloned())).await?;
    let total = started.elapsed();
    if total > SLOW_READING {
        let (bmc_ms, record_ms) = (read.as_millis(), (total - read).as_millis());
        tracing::warn!(node, bmc_ms, record_ms, "a BMC reading took {} ms", total.as_millis());
    }
    serde_json::to_value(&model).map_err(|e| ApiError::Internal(e.to_string()))
}

/// A reading slower than this is logged with where its time went (the BMC, or recording).
const SLOW_READING: std::time::Duration = std::time::Duration::from_secs(1);

/// How long an operator's rotation holds the pending slot: longer than any BMC call it makes
/// (a Redfish session and a password change, each bounded by its timeouts). A slot held
/// longer was left by a rotation that died; the next one settles it first.
pub const ROTATION_LEASE: time::Duration = time::Duration::minutes(5);

/// Rotates the password of the BMC user the service logs in as. The new secret is recorded
/// as pending before the BMC is asked (a crash, or a call made meanwhile, still finds it) and
/// made current only after the BMC took it, and only if it is still the pending one; a
/// refusal drops it, and an answer that leaves it unknown whether the BMC took it is settled
/// by logging in. One rotation at a time: the pending slot is claimed, so a second rotation
/// while one is in flight is refused (two at once could leave the BMC with one password and
/// the store with the other), and a slot left by a rotation that died is settled before it
/// is claimed again. Refused too while a teardown runs on the node: its rotation owns the
/// credential until the run ends.
pub async fn rotate(app: &App, node: &str, new: Secret) -> ApiResult<BmcInfo> {
    let user = info(app, node.to_owned()).await?.username;
    refuse_while_running(app, node).await?;
    settle_abandoned(app, node).await?;
    let sealed = metal_types::secrets::seal(app.config.master_key.as_ref(), node, &new);
    let (id, now, ours) = (node.to_owned(), app.clock.now(), sealed.clone());
    app.store
        .write(move |tx| {
            // A run starts in a transaction that moves the node: with its row locked, one
            // starting meanwhile is either seen here or starts after this secret is pending.
            store::nodes::lock(tx, &id)?;
            running_conflict(tx, &id)?;
            if store::bmcs::claim_pending(tx, &id, &ours, now)? {
                return Ok(());
            }
            let began = store::bmcs::get(tx, &id)?.and_then(|b| b.pending_at).map(metal_types::clock::to_rfc3339);
            Err(ApiError::Conflict(format!(
                "node {id}: another rotation of its BMC credential is in flight (since {}); try again when it \
                 ends (one that died is settled after {} minutes)",
                began.as_deref().unwrap_or("an unknown time"),
                ROTATION_LEASE.whole_minutes()
            )))
        })
        .await?;
    let rotation = try_on_bmc(app, node, |bmc| {
        let (user, new) = (user.clone(), new.clone());
        Box::pin(async move { bmc.rotate_password(&user, &new).await })
    });
    match rotation.await? {
        Ok(()) => {}
        Err(refused @ BmcError::Refused { .. }) => {
            // The BMC works and refused it (its password policy, or the account's privilege):
            // the caller's to change, not a failed gateway; the old secret stays current.
            let (id, now) = (node.to_owned(), app.clock.now());
            app.store.write(move |tx| store::bmcs::drop_pending(tx, &id, &sealed, now)).await?;
            return Err(ApiError::invalid("bmc", refused.to_string()));
        }
        // Whether the BMC took it is unknown: logging in tells.
        Err(other) => match settle(app, node, &sealed).await? {
            Settled::Promoted => return info(app, node.to_owned()).await,
            Settled::Dropped | Settled::Replaced => return Err(other.into()),
            Settled::Unknown(why) => {
                return Err(ApiError::Bmc(format!(
                    "{other}; whether the BMC took the new password is unknown ({why}): it stays pending, and \
                     calls try it when the current one is refused"
                )));
            }
        },
    }
    let (id, now) = (node.to_owned(), app.clock.now());
    let promoted = app.store.change(move |tx| Ok(store::bmcs::promote_pending(tx, &id, &sealed, now)?)).await?;
    if !promoted {
        return Err(ApiError::Conflict(format!(
            "node {node}: the rotation's pending secret was replaced while it ran (the BMC was set again meanwhile)"
        )));
    }
    info(app, node.to_owned()).await
}

/// CONFLICT when a workflow runs on `node`.
fn running_conflict(conn: &mut dyn store::Conn, node: &str) -> ApiResult<()> {
    match store::workflows::running_for(conn, node)? {
        Some(run) => Err(ApiError::Conflict(format!(
            "node {node}: run {} ({}) is running and may rotate the BMC credential itself; rotate it after the run ends",
            run.id, run.definition
        ))),
        None => Ok(()),
    }
}

/// [`running_conflict`], read before anything is settled: a running teardown's pending
/// secret is its own.
async fn refuse_while_running(app: &App, node: &str) -> ApiResult<()> {
    let id = node.to_owned();
    app.store.read(move |c| running_conflict(c, &id)).await
}

/// Settles a pending secret whose rotation began more than [`ROTATION_LEASE`] ago (it died).
async fn settle_abandoned(app: &App, node: &str) -> ApiResult<()> {
    let id = node.to_owned();
    let Some(row) = app.store.read(move |c| store::bmcs::get(c, &id)).await? else { return Ok(()) };
    let Some(sealed) = row.pending else { return Ok(()) };
    if row.pending_at.is_some_and(|began| app.clock.now() - began < ROTATION_LEASE) {
        return Ok(()); // in flight: the claim refuses
    }
    match settle(app, node, &sealed).await? {
        Settled::Promoted | Settled::Dropped | Settled::Replaced => Ok(()),
        Settled::Unknown(why) => Err(ApiError::Bmc(format!(
            "node {node}: a rotation that did not finish left a new password pending, and {why}; \
             set the BMC's credential again (PUT /v1/nodes/{node}/bmc)"
        ))),
    }
}

/// What logging in said about a pending secret.
enum Settled {
    /// The BMC has it: it is current now.
    Promoted,
    /// The BMC still has the current one: the pending secret is gone.
    Dropped,
    /// Another call settled or replaced it first.
    Replaced,
    /// Neither logs in (why).
    Unknown(String),
}

/// Settles the pending secret `sealed` by logging in: made current if the BMC takes it,
/// dropped if the BMC still takes the current one.
async fn settle(app: &App, node: &str, sealed: &str) -> ApiResult<Settled> {
    let id = node.to_owned();
    let row = app.store.read(move |c| store::bmcs::get(c, &id)).await?;
    let Some(row) = row.filter(|r| r.pending.as_deref() == Some(sealed)) else { return Ok(Settled::Replaced) };
    let key = app.config.master_key.as_ref();
    let (pending, current) =
        (metal_types::secrets::open(key, node, sealed)?, metal_types::secrets::open(key, node, &row.secret)?);
    let (id, now, sealed) = (node.to_owned(), app.clock.now(), sealed.to_owned());
    match taken(&row.info, pending, current).await {
        Taken::Pending => {
            let promoted = app.store.change(move |tx| Ok(store::bmcs::promote_pending(tx, &id, &sealed, now)?)).await?;
            Ok(if promoted { Settled::Promoted } else { Settled::Replaced })
        }
        Taken::Current => {
            let dropped = app.store.write(move |tx| store::bmcs::drop_pending(tx, &id, &sealed, now)).await?;
            Ok(if dropped { Settled::Dropped } else { Settled::Replaced })
        }
        Taken::Neither(e) => Ok(Settled::Unknown(format!("neither the pending nor the current password logs in: {e}"))),
    }
}

/// Which of a rotation's two passwords the BMC takes.
#[derive(Debug)]
pub enum Taken {
    /// The pending one: the rotation reached the BMC.
    Pending,
    /// The current one: it did not.
    Current,
    /// Neither (the current one's login error).
    Neither(String),
}

/// Tries the pending password, then the current one.
pub async fn taken(info: &BmcInfo, pending: Secret, current: Secret) -> Taken {
    if logs_in(info, pending).await.is_ok() {
        return Taken::Pending;
    }
    match logs_in(info, current).await {
        Ok(()) => Taken::Current,
        Err(e) => Taken::Neither(e),
    }
}

/// Whether `password` logs in to the BMC `info` describes (a power read needs a valid
/// credential).
pub async fn logs_in(info: &BmcInfo, password: Secret) -> Result<(), String> {
    let bmc = connect(info, password).await.map_err(|e| e.to_string())?;
    bmc.power_state().await.map(|_| ()).map_err(|e| e.to_string())
}
