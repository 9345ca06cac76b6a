//! Tenant isolation on the switch: the steps that move a node's ports between its pool's
//! VLANs (`policy.network`). The lease start moves them to the lease's tenant VLAN after the
//! image is written and before the deployed OS boots; the teardown moves them to the
//! cleaning VLAN right after power-off and back to provisioning before `ready`.
//!
//! Every move is observe, act, read back: the intent goes into the run's context first, a
//! port already on the VLAN is not touched, every port moved is read back from the switch
//! and must be on that access VLAN, and what was read is recorded on the port with the
//! step's verdict. After a crash between a move and its record the step runs again, finds
//! the port on the VLAN, and records it then.

use serde_json::{Value, json};

use super::workflow::{Effects, Outcome};
use crate::app::App;
use metal_store::{self as store, switches::StoredSwitch};
use metal_types::error::ApiError;
use metal_types::model::pool::{NetworkPolicy, Pool};
use metal_types::model::switch::{NodePort, NodePortSpec, PortSource, SwitchAddress, SwitchDriver};
use metal_types::model::workflow::WorkflowRun;

/// The networks a port moves between, by name.
pub const PROVISIONING: &str = "provisioning";
/// The teardown's network.
pub const CLEANING: &str = "cleaning";
/// The lease's network.
pub const TENANT: &str = "tenant";

/// The pool's network policy, when it isolates its tenants on the switch.
pub fn policy(pool: Option<&Pool>) -> Option<&NetworkPolicy> {
    pool.and_then(|p| p.policy.network.as_ref())
}

/// A client of the stored switch.
pub fn client(app: &App, stored: &StoredSwitch) -> Result<Box<dyn metal_switch::Switch>, ApiError> {
    let info = &stored.info;
    let transport = match SwitchAddress::parse(&info.address)? {
        SwitchAddress::Local(db) => metal_switch::ovs::Transport::Local { db },
        SwitchAddress::Ssh { destination, port } => {
            let sealed = stored.secret.as_deref().ok_or_else(|| {
                ApiError::InvalidConfig(format!("switch {} is reached over SSH and has no key", info.id))
            })?;
            let key =
                metal_types::secrets::open(app.config.master_key.as_ref(), &format!("switch/{}", info.id), sealed)
                    .map_err(|_| {
                        ApiError::InvalidConfig(format!(
                            "switch {}'s SSH key does not open (METAL_MASTER_KEY unset, or another key)",
                            info.id
                        ))
                    })?;
            let host_key = info.host_key.clone().unwrap_or_default();
            metal_switch::ovs::Transport::Ssh {
                destination,
                port,
                key: zeroize::Zeroizing::new(key.expose().to_owned()),
                host_key,
            }
        }
    };
    match info.driver {
        SwitchDriver::Ovs => {
            let switch = metal_switch::ovs::OvsSwitch::new(&info.id, transport);
            Ok(Box::new(match &info.command {
                Some(command) => switch.with_program(command),
                None => switch,
            }))
        }
    }
}

fn vlan_text(state: &metal_switch::PortState) -> Value {
    json!({"vlan": state.vlan, "mode": state.mode})
}

/// Moves every port of the run's node to access VLAN `vlan` of network `network`.
pub async fn move_ports(app: &App, run: &WorkflowRun, network: &str, vlan: u16) -> Outcome {
    let node = run.node_id.clone();
    let loaded = app
        .store
        .read(move |tx| {
            let ports = store::switches::ports(tx, &node)?;
            let mut switches = Vec::new();
            for port in &ports {
                let switch = store::switches::get(tx, &port.switch_id)?
                    .ok_or_else(|| ApiError::NotFound(format!("switch {}", port.switch_id)))?;
                switches.push(switch);
            }
            Ok::<_, ApiError>(ports.into_iter().zip(switches).collect::<Vec<(NodePort, StoredSwitch)>>())
        })
        .await;
    let ports = match loaded {
        Ok(ports) => ports,
        Err(e) => return Outcome::Retry(format!("reading the node's ports: {e}"), Value::Null),
    };
    if ports.is_empty() {
        return Outcome::Failed(
            format!(
                "node {} has no known switch port, and its pool isolates tenants on the switch \
                 (set them with PUT /v1/nodes/{}/ports)",
                run.node_id, run.node_id
            ),
            Value::Null,
        );
    }
    // The intent first: a crash after a move finds what it was for.
    let intent = json!({"network": network, "vlan": vlan});
    if run.context.get("portMove") != Some(&intent) {
        let mut context = run.context.clone();
        context["portMove"] = intent;
        let (run, now) = (run.clone(), app.clock.now());
        if let Err(e) = app.store.write(move |tx| store::workflows::put_context(tx, &run, &context, now)).await {
            return Outcome::Retry(format!("recording the port move: {e}"), Value::Null);
        }
    }
    let mut evidence = Vec::new();
    for (port, stored) in &ports {
        let switch = match client(app, stored) {
            Ok(switch) => switch,
            Err(e) => return Outcome::Retry(e.to_string(), json!({"ports": evidence})),
        };
        let before = match switch.port(&port.port).await {
            Ok(state) => state,
            Err(e) => return Outcome::Retry(e.to_string(), json!({"ports": evidence})),
        };
        let moved = !before.is_access(vlan);
        let after = if moved {
            if let Err(e) = switch.set_access_vlan(&port.port, vlan).await {
                return Outcome::Retry(e.to_string(), json!({"ports": evidence}));
            }
            match switch.port(&port.port).await {
                Ok(state) => state,
                Err(e) => return Outcome::Retry(e.to_string(), json!({"ports": evidence})),
            }
        } else {
            before.clone()
        };
        let record = json!({"mac": port.mac, "switch": stored.info.id, "port": port.port, "before": vlan_text(&before),
                            "after": vlan_text(&after), "moved": moved});
        if !after.is_access(vlan) {
            evidence.push(record);
            return Outcome::Retry(
                format!(
                    "switch {} reads port {} back on VLAN {} ({}) after it was set to access VLAN {vlan}",
                    stored.info.id,
                    port.port,
                    after.vlan.map_or("none".into(), |v| v.to_string()),
                    after.mode.as_deref().unwrap_or("no mode"),
                ),
                json!({"ports": evidence}),
            );
        }
        evidence.push(record);
    }
    // The crash-safety tests' point between the switch's move and the step's record of it.
    super::workflow::crash_point(app, run.current().map_or("", |s| s.name.as_str()), "moved");
    let (network, now) = (network.to_owned(), app.clock.now());
    let macs: Vec<String> = ports.iter().map(|(p, _)| p.mac.clone()).collect();
    let record_network = network.clone();
    let effects: Effects = Box::new(move |tx, run| {
        for mac in &macs {
            store::switches::record_move(tx, &run.node_id, mac, &record_network, vlan, now)?;
        }
        Ok(())
    });
    Outcome::Done(json!({"network": network, "vlan": vlan, "ports": evidence}), Some(effects))
}

/// The step when the pool does not isolate: done, and the evidence says why nothing moved.
pub fn not_isolated() -> Outcome {
    Outcome::done(json!({"skipped": "the pool does not isolate its tenants on the switch (no policy.network)"}))
}

/// Commissioning's LLDP: each NIC whose neighbour names a registered switch (its chassis id,
/// or a system name equal to the switch's id) and a port gets that port, unless an operator
/// set the node's ports (theirs stand). Returns the ports learned (none: nothing changed).
pub fn learn_ports(
    tx: &mut dyn metal_store::Conn,
    node_id: &str,
    report: &metal_protocol::InventoryReport,
    now: time::OffsetDateTime,
) -> Result<Vec<NodePortSpec>, ApiError> {
    let known = store::switches::ports(tx, node_id)?;
    if known.iter().any(|p| p.source == PortSource::Operator) {
        return Ok(Vec::new());
    }
    let switches = store::switches::list(tx)?;
    let learned: Vec<NodePortSpec> = report
        .nics
        .iter()
        .filter_map(|nic| {
            let neighbour = nic.lldp.as_ref()?;
            let switch = switches.iter().find(|s| {
                s.chassis_id.as_deref() == Some(neighbour.chassis_id.to_lowercase().as_str())
                    || neighbour.system_name.as_deref() == Some(s.id.as_str())
            })?;
            let port = neighbour.port_name().filter(|p| metal_switch::check_port(p).is_ok())?;
            Some(NodePortSpec { mac: nic.mac.to_lowercase(), switch_id: switch.id.clone(), port: port.to_owned() })
        })
        .collect();
    if learned.is_empty() {
        return Ok(learned);
    }
    store::switches::set_ports(tx, node_id, &learned, PortSource::Lldp)?;
    let ports: Vec<Value> =
        learned.iter().map(|p| json!({"mac": p.mac, "switch": p.switch_id, "port": p.port})).collect();
    store::events::append(
        tx,
        "node.ports.learned",
        &format!("node/{node_id}"),
        None,
        &json!({"node": node_id, "source": "lldp", "ports": ports}),
        now,
    )?;
    Ok(learned)
}
