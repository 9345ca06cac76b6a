//! BMC discovery: probe every address of a small private IPv4 range for a Redfish service
//! root, try at most three credentials on each (BMCs lock accounts after a few failures),
//! and optionally enrol each BMC a credential opened as a node with that BMC.

use std::net::Ipv4Addr;
use std::time::Duration;

use futures::StreamExt as _;
use metal_bmc::redfish::{RedfishBmc, RedfishConfig, Timing, parse};
use metal_bmc::{BmcError, Credential};

use crate::app::App;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::bmc::{BmcProtocol, BmcSpec, DiscoverRequest, DiscoverResult, DiscoveredBmc};

/// Most addresses one scan probes.
pub const MAX_ADDRESSES: u32 = 512;
/// Most credentials tried per BMC.
pub const MAX_CREDENTIALS: usize = 3;
/// Probes in flight at once.
const PARALLEL: usize = 32;

/// Private (RFC 1918) or loopback.
fn allowed(ip: Ipv4Addr) -> bool {
    ip.is_private() || ip.is_loopback()
}

/// The addresses of `a.b.c.d/n`: at most [`MAX_ADDRESSES`], all private or loopback.
pub fn addresses(range: &str) -> Result<Vec<Ipv4Addr>, ApiError> {
    let (base, bits) = range.split_once('/').unwrap_or((range, "32"));
    let base: Ipv4Addr =
        base.parse().map_err(|_| ApiError::invalid("range", "must be IPv4 CIDR such as 10.0.0.0/24"))?;
    let bits: u32 =
        bits.parse().ok().filter(|b| *b <= 32).ok_or_else(|| ApiError::invalid("range", "prefix must be 0 to 32"))?;
    let count = 1u64 << (32 - bits);
    if count > u64::from(MAX_ADDRESSES) {
        return Err(ApiError::invalid(
            "range",
            format!("{count} addresses; a scan covers at most {MAX_ADDRESSES} (/23)"),
        ));
    }
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    let first = u32::from(base) & mask;
    let ips: Vec<Ipv4Addr> = (0..count).map(|i| Ipv4Addr::from(first + u32::try_from(i).unwrap_or(0))).collect();
    if let Some(bad) = ips.iter().find(|ip| !allowed(**ip)) {
        return Err(ApiError::invalid("range", format!("{bad} is not a private (RFC 1918) or loopback address")));
    }
    Ok(ips)
}

fn login(c: &metal_types::model::bmc::BmcLogin) -> Credential {
    Credential { user: c.username.clone(), password: c.password.0.clone() }
}

/// A BMC found and, when one opened it, the index of the credential that did.
type Probed = (DiscoveredBmc, Option<usize>);

async fn probe(request: std::sync::Arc<DiscoverRequest>, endpoint: String, timing: Timing) -> Option<Probed> {
    let trust = request.tls.trust().ok()?;
    let http = metal_bmc::tls::http_client(&trust, timing.request).ok()?;
    let root: serde_json::Value = http.get(format!("{endpoint}/redfish/v1/")).send().await.ok()?.json().await.ok()?;
    root.get("RedfishVersion").or_else(|| root.get("Systems"))?;
    let mut found = DiscoveredBmc {
        address: endpoint.clone(),
        redfish_version: parse::text(&root["RedfishVersion"]),
        authenticated_as: None,
        manufacturer: None,
        model: None,
        serial: None,
        uuid: None,
        registered_node: None,
        note: None,
    };
    for (index, credential) in request.credentials.iter().enumerate().take(MAX_CREDENTIALS) {
        let config = RedfishConfig {
            endpoint: endpoint.clone(),
            credential: login(credential),
            trust: trust.clone(),
            system: None,
            timing: timing.clone(),
        };
        match RedfishBmc::connect(config).await {
            Ok(bmc) => {
                found.authenticated_as = Some(credential.username.clone());
                if let Ok(system) = bmc.transport().get(bmc.system_path()).await {
                    let identity = parse::identity(&system.body, None);
                    (found.manufacturer, found.model, found.serial, found.uuid) =
                        (identity.manufacturer, identity.model, identity.serial, identity.uuid);
                }
                bmc.transport().logout().await;
                return Some((found, Some(index)));
            }
            Err(BmcError::Unauthorized { .. }) => {}
            Err(e) => {
                found.note = Some(e.to_string());
                return Some((found, None));
            }
        }
    }
    found.note =
        Some(format!("none of the {} credentials authenticated", request.credentials.len().min(MAX_CREDENTIALS)));
    Some((found, None))
}

/// The node id a discovered BMC is enrolled as: from its system UUID, else its address.
fn node_id(found: &DiscoveredBmc) -> String {
    match &found.uuid {
        Some(uuid) => format!("node-{}", uuid.to_lowercase()),
        None => format!("node-{}", found.address.rsplit('/').next().unwrap_or("bmc").replace(['.', ':'], "-")),
    }
}

/// Runs a scan.
pub async fn discover(app: &App, request: DiscoverRequest) -> ApiResult<DiscoverResult> {
    if request.credentials.is_empty() || request.credentials.len() > MAX_CREDENTIALS {
        return Err(ApiError::invalid("credentials", format!("give 1 to {MAX_CREDENTIALS} credentials")));
    }
    request.tls.trust()?;
    let ips = addresses(&request.range)?;
    let scheme = request.scheme.clone().unwrap_or_else(|| "https".into());
    match scheme.as_str() {
        "https" => {}
        "http" if ips.iter().all(Ipv4Addr::is_loopback) => {}
        _ => return Err(ApiError::invalid("scheme", "must be https (http only for loopback emulators)")),
    }
    let port = request.port.unwrap_or(443);
    let timing = Timing { request: Duration::from_secs(3), attempts: 1, ..Timing::default() };
    let shared = std::sync::Arc::new(request);
    let probes: Vec<_> =
        ips.iter().map(|ip| probe(shared.clone(), format!("{scheme}://{ip}:{port}"), timing.clone())).collect();
    let mut found: Vec<Probed> =
        futures::stream::iter(probes).buffer_unordered(PARALLEL).filter_map(std::future::ready).collect().await;
    let request = std::sync::Arc::try_unwrap(shared).map_err(|_| ApiError::Internal("probe still running".into()))?;
    found.sort_by(|a, b| a.0.address.cmp(&b.0.address));
    tracing::info!(range = %request.range, scanned = ips.len(), found = found.len(), "BMC discovery");
    if request.register {
        for (bmc, opened_with) in &mut found {
            if let Some(index) = opened_with {
                register(app, &request, bmc, *index).await?;
            }
        }
    }
    Ok(DiscoverResult { scanned: ips.len(), found: found.into_iter().map(|(bmc, _)| bmc).collect() })
}

async fn register(app: &App, request: &DiscoverRequest, found: &mut DiscoveredBmc, credential: usize) -> ApiResult<()> {
    let id = node_id(found);
    let login = request.credentials[credential].clone();
    let spec = BmcSpec {
        protocol: BmcProtocol::Redfish,
        address: found.address.clone(),
        login,
        tls: Some(request.tls.clone()),
        system_id: found.uuid.clone(),
        privilege: None,
    };
    let node = store::nodes::NewNode {
        id: id.clone(),
        boot_mac: None,
        pool_id: request.pool_id.clone(),
        labels: Default::default(),
        taints: Vec::new(),
        devices: Vec::new(),
    };
    let sealed = metal_types::secrets::seal(app.config.master_key.as_ref(), &id, &spec.login.password.0);
    let now = app.clock.now();
    let created = app
        .store
        .change(move |tx| {
            if store::nodes::insert(tx, &node, now)?.is_none() {
                return Ok(false);
            }
            store::bmcs::put(tx, &node.id, &spec, &sealed, now)?;
            Ok(true)
        })
        .await?;
    if created {
        found.registered_node = Some(id);
    } else {
        found.note = Some(format!("node {id} is already enrolled"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_small_and_private() {
        assert_eq!(addresses("10.1.2.0/30").unwrap().len(), 4);
        assert_eq!(addresses("192.168.7.9").unwrap(), vec![Ipv4Addr::new(192, 168, 7, 9)]);
        assert_eq!(addresses("172.16.0.0/23").unwrap().len(), 512);
        assert_eq!(addresses("127.0.0.1/32").unwrap().len(), 1);
        assert!(addresses("10.0.0.0/22").unwrap_err().to_string().contains("at most 512"));
        assert!(addresses("8.8.8.0/24").unwrap_err().to_string().contains("8.8.8.0 is not a private"));
        assert!(addresses("172.15.255.0/24").is_err());
        assert!(addresses("nope/24").is_err());
        assert!(addresses("10.0.0.0/33").is_err());
        // The base is masked to the network.
        assert_eq!(addresses("10.0.0.77/30").unwrap()[0], Ipv4Addr::new(10, 0, 0, 76));
    }
}
