//! The simulator's own HTTP endpoint, beside the scheduler's: the files the site serves (OS
//! and firmware images), and control of the simulation: the machines (power, what they do,
//! their faults, their consoles), faults switched on and off, and the clock moved forward.
//!
//! - `GET /files/NAME`
//! - `GET /sim/machines`, `GET /sim/machines/ID/console`
//! - `PUT /sim/machines/ID/faults/FAULT`, `DELETE /sim/machines/ID/faults/FAULT`
//! - `GET /sim/clock`, `POST /sim/clock/advance {"seconds": N}`
//! - `GET /sim/switch/ports`, `GET /sim/switch/ports/PORT`, `PUT /sim/switch/ports/PORT {"tag": V}`
//!   (the simulated switch, which its `ovs-vsctl` drives; 409 when the port's machine has the
//!   `switch-refuses` fault)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use serde_json::{Value, json};

use crate::clock::SimClock;
use crate::fault::Fault;
use crate::machine::Machine;
use crate::switch::{Port, SimSwitch};

/// What the control endpoint serves.
#[derive(Debug)]
pub struct Control {
    /// Where `/files/NAME` comes from.
    pub files: PathBuf,
    /// The machines.
    pub machines: Vec<Arc<Machine>>,
    /// The clock.
    pub clock: Arc<SimClock>,
    /// The switch, when the site has one.
    pub switch: Option<Arc<SimSwitch>>,
}

type Shared = State<Arc<Control>>;
type Answer = Result<Json<Value>, (StatusCode, String)>;

fn machine(control: &Control, id: &str) -> Result<Arc<Machine>, (StatusCode, String)> {
    control.machines.iter().find(|m| m.id == id).cloned().ok_or((StatusCode::NOT_FOUND, format!("no machine {id}")))
}

fn fault(name: &str) -> Result<Fault, (StatusCode, String)> {
    name.parse().map_err(|e| (StatusCode::UNPROCESSABLE_ENTITY, e))
}

async fn file(State(control): Shared, Path(name): Path<String>) -> Result<Vec<u8>, StatusCode> {
    if name.contains('/') || name.starts_with('.') {
        return Err(StatusCode::NOT_FOUND);
    }
    tokio::fs::read(control.files.join(name)).await.map_err(|_| StatusCode::NOT_FOUND)
}

fn describe(m: &Machine) -> Value {
    let state = m.state().clone();
    json!({
        "id": m.id, "mac": m.hardware.mac, "cores": m.hardware.cores, "memoryBytes": m.hardware.memory_bytes,
        "disks": m.hardware.disks, "power": if state.power_on { "on" } else { "off" }, "activity": state.activity,
        "boots": state.boots, "faults": m.faults.active()
    })
}

async fn machines(State(control): Shared) -> Json<Value> {
    Json(Value::Array(control.machines.iter().map(|m| describe(m)).collect()))
}

async fn console(State(control): Shared, Path(id): Path<String>) -> Answer {
    Ok(Json(json!(machine(&control, &id)?.console())))
}

fn switch_fault(control: &Control, id: &str, name: &str, on: bool) -> Answer {
    let m = machine(control, id)?;
    m.faults.set(fault(name)?, on);
    Ok(Json(describe(&m)))
}

async fn set_fault(State(control): Shared, Path((id, name)): Path<(String, String)>) -> Answer {
    switch_fault(&control, &id, &name, true)
}

async fn clear_fault(State(control): Shared, Path((id, name)): Path<(String, String)>) -> Answer {
    switch_fault(&control, &id, &name, false)
}

fn clock_view(clock: &SimClock) -> Value {
    let now = time::OffsetDateTime::from(metal_clock::Source::now(clock));
    json!({"now": crate::clock::rfc3339(now), "speed": clock.speed()})
}

async fn clock(State(control): Shared) -> Json<Value> {
    Json(clock_view(&control.clock))
}

async fn advance(State(control): Shared, Json(body): Json<Value>) -> Answer {
    let seconds = body["seconds"]
        .as_u64()
        .filter(|s| *s <= 366 * 86_400)
        .ok_or((StatusCode::UNPROCESSABLE_ENTITY, "seconds: a whole number from 0 to 31622400 (a year)".to_owned()))?;
    control.clock.advance(Duration::from_secs(seconds));
    Ok(Json(clock_view(&control.clock)))
}

fn switch(control: &Control) -> Result<&SimSwitch, (StatusCode, String)> {
    control.switch.as_deref().ok_or((StatusCode::NOT_FOUND, "this site has no switch".to_owned()))
}

async fn switch_ports(State(control): Shared) -> Answer {
    Ok(Json(json!(switch(&control)?.ports())))
}

async fn switch_port(State(control): Shared, Path(port): Path<String>) -> Answer {
    let found = switch(&control)?.port(&port).ok_or((StatusCode::NOT_FOUND, format!("no port {port}")))?;
    Ok(Json(json!(found)))
}

async fn move_port(State(control): Shared, Path(port): Path<String>, Json(to): Json<Port>) -> Answer {
    let refuses = crate::switch::node_of(&port)
        .and_then(|node| control.machines.iter().find(|m| m.id == node))
        .is_some_and(|m| m.faults.has(Fault::SwitchRefuses));
    if refuses {
        return Err((StatusCode::CONFLICT, format!("port {port} is locked by another session (simulated refusal)")));
    }
    if !(1..=metal_switch::MAX_VLAN).contains(&to.tag) {
        return Err((StatusCode::UNPROCESSABLE_ENTITY, format!("tag {}: not a VLAN", to.tag)));
    }
    if !switch(&control)?.set(&port, to.tag) {
        return Err((StatusCode::NOT_FOUND, format!("no port {port}")));
    }
    Ok(Json(json!(to)))
}

/// Serves `control` on `listener` until the runtime ends.
pub async fn serve(control: Arc<Control>, listener: tokio::net::TcpListener) {
    let router = axum::Router::new()
        .route("/files/{name}", get(file))
        .route("/sim/machines", get(machines))
        .route("/sim/machines/{id}/console", get(console))
        .route("/sim/machines/{id}/faults/{fault}", put(set_fault).delete(clear_fault))
        .route("/sim/clock", get(clock))
        .route("/sim/clock/advance", post(advance))
        .route("/sim/switch/ports", get(switch_ports))
        .route("/sim/switch/ports/{port}", get(switch_port).put(move_port))
        .with_state(control);
    if let Err(e) = axum::serve(listener, router).await {
        tracing::error!(error = %e, "the simulator's control endpoint stopped");
    }
}
