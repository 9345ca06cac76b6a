//! Node routes: enrol, import (CSV or JSON), read, patch placement attributes, and
//! lifecycle transitions, all admin-only but reading a node, which a lessee may do for the
//! node of its live lease; and the lessee's listing of its leased nodes.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;

use crate::{ApiPath, ApiQuery};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;

use super::{ApiJson, Caller};
use crate::AppState;
use crate::paging::Paging;
use metal_machines::metal::rescue::Ask;
use metal_store::{self as store, Conn, nodes::NewNode};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::bmc::BmcSpec;
use metal_types::model::lessee::{LeasedNode, NodeView, ReinstallRequest, ReinstallStarted, RescueStarted};
use metal_types::model::node::{CSV_COLUMNS, Device, Node, NodeCreate, NodeFilter, NodePatch, NodeTransition};
use metal_types::model::node::{ImportResult, Skipped};
use metal_types::page::PageQuery;

fn validated(create: &NodeCreate, prefix: &str) -> ApiResult<NewNode> {
    let (taints, boot_mac) = create.validate(prefix)?;
    Ok(NewNode {
        id: create.id.clone(),
        boot_mac,
        pool_id: create.pool_id.clone(),
        labels: create.labels.clone(),
        taints,
        devices: create.devices.clone(),
    })
}

fn ensure_pools_exist(conn: &mut dyn Conn, nodes: &[NewNode], prefix: &str) -> ApiResult<()> {
    let pools: std::collections::BTreeSet<&str> = nodes.iter().filter_map(|n| n.pool_id.as_deref()).collect();
    for pool in pools {
        if store::capacity::get_pool(conn, pool)?.is_none() {
            return Err(ApiError::invalid(format!("{prefix}poolId"), format!("no pool {pool}")));
        }
    }
    Ok(())
}

/// Enrol one node (state `new`).
#[utoipa::path(post, path = "/v1/nodes", request_body = NodeCreate,
    responses((status = 201, body = Node), (status = 409, description = "id or boot MAC already enrolled", body = metal_types::error::ErrorBody)))]
pub async fn create_node(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(create): ApiJson<NodeCreate>,
) -> ApiResult<(StatusCode, ApiJson<Node>)> {
    caller.admin("nodes")?;
    let node = validated(&create, "")?;
    let now = app.clock.now();
    let created = app
        .store
        .change(move |tx| {
            ensure_pools_exist(tx, std::slice::from_ref(&node), "")?;
            store::nodes::insert(tx, &node, now)?
                .ok_or_else(|| ApiError::Conflict(format!("node {} (or its boot MAC) is already enrolled", node.id)))
        })
        .await?;
    Ok((StatusCode::CREATED, ApiJson(created)))
}

/// A BMC from a CSV row's bmc* cells (`bmcTls` is `insecure` or `fingerprint=HEX`).
fn csv_bmc(cells: &serde_json::Map<String, serde_json::Value>, line_no: usize) -> ApiResult<Option<BmcSpec>> {
    let Some(protocol) = cells.get("bmcProtocol").and_then(|v| v.as_str()).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let field = |k: &str| cells.get(k).cloned().unwrap_or(serde_json::Value::Null);
    let mut spec = serde_json::json!({"protocol": protocol, "address": field("bmcAddress"),
        "username": field("bmcUsername"), "password": field("bmcPassword")});
    match cells.get("bmcTls").and_then(|v| v.as_str()).unwrap_or("") {
        "" => {}
        "insecure" => spec["tls"] = serde_json::json!({"mode": "insecure"}),
        other => match other.strip_prefix("fingerprint=") {
            Some(f) => spec["tls"] = serde_json::json!({"mode": "fingerprint", "value": f}),
            None => {
                return Err(ApiError::invalid(
                    format!("csv line {line_no} bmcTls"),
                    "must be insecure or fingerprint=HEX (use the JSON import for a CA)",
                ));
            }
        },
    }
    if let Some(p) = cells.get("bmcPrivilege").and_then(|v| v.as_str()).filter(|p| !p.is_empty()) {
        spec["privilege"] = serde_json::json!(p);
    }
    serde_json::from_value(spec)
        .map(Some)
        .map_err(|e| ApiError::invalid(format!("csv line {line_no} bmc"), e.to_string()))
}

/// One import entry: the node, its BMC, and where it came from (the prefix its fields are
/// named with: `nodes[3].` in JSON, `csv line 4 ` in CSV).
type Entry = (NodeCreate, Option<BmcSpec>, String);

/// A CSV line's cells: comma-separated, a cell may be double-quoted (`""` inside is a quote).
fn csv_cells(line: &str, line_no: usize) -> ApiResult<Vec<String>> {
    let (mut cells, mut cell, mut quoted, mut chars) = (Vec::new(), String::new(), false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', false) if cell.trim().is_empty() => {
                cell.clear();
                quoted = true;
            }
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            ('"', true) => quoted = false,
            (',', false) => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            (c, _) => cell.push(c),
        }
    }
    if quoted {
        return Err(ApiError::invalid(
            format!("csv line {line_no}"),
            "a quoted cell is not closed (a '\"' is missing)",
        ));
    }
    cells.push(cell.trim().to_owned());
    Ok(cells)
}

/// Parses a CSV import: a header row naming columns from [`CSV_COLUMNS`], then one node
/// (and optionally its BMC) per row.
pub fn parse_csv(text: &str) -> ApiResult<Vec<Entry>> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let (_, header) = lines.next().ok_or_else(|| {
        ApiError::invalid("csv", "empty: expected a header row such as id,bootMac,labels,taints,devices")
    })?;
    let header_cells = csv_cells(header, 1)?;
    let columns: Vec<&str> = header_cells.iter().map(String::as_str).collect();
    if columns.len() == 1
        && let Some(separator) = [';', '\t', '|'].into_iter().find(|s| header.contains(*s))
    {
        return Err(ApiError::invalid(
            "csv",
            format!(
                "the file is separated by {separator:?}: separate cells with commas (lists inside a cell, \
                 such as labels, use ';')"
            ),
        ));
    }
    if !columns.iter().any(|c| CSV_COLUMNS.contains(c)) {
        return Err(ApiError::invalid(
            "csv",
            format!(
                "the first line must be the header naming the columns (from: {}), not {header:?}",
                CSV_COLUMNS.join(", ")
            ),
        ));
    }
    for c in &columns {
        if !CSV_COLUMNS.contains(c) {
            return Err(ApiError::invalid(
                "csv",
                format!("unknown column {c:?} (columns: {})", CSV_COLUMNS.join(", ")),
            ));
        }
    }
    if !columns.contains(&"id") {
        return Err(ApiError::invalid("csv", "the header has no id column"));
    }
    let mut nodes = Vec::new();
    for (number, line) in lines {
        let line_no = number + 1;
        let cells = csv_cells(line, line_no)?;
        if cells.len() != columns.len() {
            return Err(ApiError::invalid(
                format!("csv line {line_no}"),
                format!("has {} cells, the header has {}", cells.len(), columns.len()),
            ));
        }
        let mut node = NodeCreate {
            id: String::new(),
            boot_mac: None,
            pool_id: None,
            labels: BTreeMap::new(),
            taints: Vec::new(),
            devices: Vec::new(),
        };
        let mut bmc = serde_json::Map::new();
        for (column, cell) in columns.iter().zip(cells.iter().map(String::as_str)) {
            let list = || cell.split(';').map(str::trim).filter(|s| !s.is_empty());
            match *column {
                c if c.starts_with("bmc") => {
                    bmc.insert(c.to_owned(), serde_json::Value::String(cell.to_owned()));
                }
                "id" => node.id = cell.to_owned(),
                "bootMac" if !cell.is_empty() => node.boot_mac = Some(cell.to_owned()),
                "poolId" if !cell.is_empty() => node.pool_id = Some(cell.to_owned()),
                "labels" => {
                    for kv in list() {
                        let (k, v) = kv.split_once('=').ok_or_else(|| {
                            ApiError::invalid(format!("csv line {line_no} labels"), format!("{kv:?} is not key=value"))
                        })?;
                        node.labels.insert(k.to_owned(), v.to_owned());
                    }
                }
                "taints" => node.taints = list().map(str::to_owned).collect(),
                "devices" => {
                    for kv in list() {
                        let bad = || {
                            ApiError::invalid(
                                format!("csv line {line_no} devices"),
                                format!("{kv:?} is not class=count"),
                            )
                        };
                        let (class, count) = kv.split_once('=').ok_or_else(bad)?;
                        let count: u32 = count.parse().map_err(|_| bad())?;
                        node.devices.extend((0..count).map(|i| Device {
                            id: format!("{class}{i}"),
                            class: class.to_owned(),
                            healthy: true,
                        }));
                    }
                }
                _ => {}
            }
        }
        nodes.push((node, csv_bmc(&bmc, line_no)?, format!("csv line {line_no} ")));
    }
    Ok(nodes)
}

/// A JSON import: an array of node enrolments, each with an optional `bmc` (as `PUT
/// /v1/nodes/{id}/bmc` takes it).
fn parse_json(body: &[u8]) -> ApiResult<Vec<Entry>> {
    let entries: Vec<serde_json::Value> = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadBody(format!("expected a JSON array of nodes or text/csv: {e}")))?;
    entries
        .into_iter()
        .enumerate()
        .map(|(i, mut entry)| {
            let bmc = entry.as_object_mut().and_then(|o| o.remove("bmc"));
            let node: NodeCreate =
                serde_json::from_value(entry).map_err(|e| ApiError::invalid(format!("nodes[{i}]"), e.to_string()))?;
            let bmc = bmc
                .map(serde_json::from_value::<BmcSpec>)
                .transpose()
                .map_err(|e| ApiError::invalid(format!("nodes[{i}].bmc"), e.to_string()))?;
            Ok((node, bmc, format!("nodes[{i}].")))
        })
        .collect()
}

/// A BMC's validation error with the field named within the import.
fn validate_bmc(spec: &BmcSpec, prefix: &str) -> ApiResult<()> {
    spec.validate().map_err(|e| match e {
        ApiError::InvalidInput { field, message } => {
            ApiError::InvalidInput { field: format!("{prefix}{field}"), message }
        }
        other => other,
    })
}

/// Enrol many nodes from CSV (`Content-Type: text/csv`) or a JSON array of node enrolments.
/// Existing nodes are skipped and reported; any invalid entry rejects the whole import.
#[utoipa::path(post, path = "/v1/nodes/import",
    request_body(content = Vec<NodeCreate>, description = "JSON array (each entry may carry a `bmc` as PUT /v1/nodes/{id}/bmc takes it), or text/csv with columns id,bootMac,poolId,labels,taints,devices,bmcProtocol,bmcAddress,bmcUsername,bmcPassword,bmcTls,bmcPrivilege"),
    responses((status = 200, body = ImportResult)))]
pub async fn import_nodes(
    State(app): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> ApiResult<ApiJson<ImportResult>> {
    caller.admin("nodes")?;
    let body = body?;
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let entries = if content_type.starts_with("text/csv") {
        parse_csv(std::str::from_utf8(&body).map_err(|_| ApiError::invalid("csv", "is not UTF-8"))?)?
    } else {
        parse_json(&body)?
    };
    let mut checked: Vec<(NewNode, Option<(BmcSpec, String)>)> = Vec::with_capacity(entries.len());
    for (node, bmc, at) in entries {
        let node = validated(&node, &at)?;
        let bmc = match bmc {
            Some(spec) => {
                validate_bmc(&spec, &format!("{at}bmc."))?;
                let sealed =
                    metal_types::secrets::seal(app.config.master_key.as_ref(), &node.id, &spec.login.password.0);
                Some((spec, sealed))
            }
            None => None,
        };
        checked.push((node, bmc));
    }
    let now = app.clock.now();
    let result = app
        .store
        .change(move |tx| {
            let nodes: Vec<NewNode> = checked.iter().map(|(n, _)| n.clone()).collect();
            ensure_pools_exist(tx, &nodes, "nodes[].")?;
            let mut result = ImportResult { created: Vec::new(), skipped: Vec::new() };
            for (node, bmc) in &checked {
                match store::nodes::insert(tx, node, now)? {
                    Some(created) => {
                        if let Some((spec, sealed)) = bmc {
                            store::bmcs::put(tx, &created.id, spec, sealed, now)?;
                        }
                        result.created.push(created.id)
                    }
                    None => result
                        .skipped
                        .push(Skipped { id: node.id.clone(), reason: "already enrolled (id or boot MAC)".into() }),
                }
            }
            Ok(result)
        })
        .await?;
    Ok(ApiJson(result))
}

/// List nodes, a page at a time (by id), keeping those the filter names.
#[utoipa::path(get, path = "/v1/nodes", params(NodeFilter, PageQuery),
    responses((status = 200, body = Vec<Node>)))]
pub async fn list_nodes(
    State(app): State<AppState>,
    caller: Caller,
    ApiQuery(filter): ApiQuery<NodeFilter>,
    paging: Paging,
) -> ApiResult<Response> {
    caller.admin("nodes")?;
    let page = paging.page.clone();
    let nodes = app.store.read(move |conn| store::nodes::page(conn, &filter, &page)).await?;
    Ok(paging.answer(nodes))
}

/// One node: the whole record for a platform admin; for a member of the tenant leasing it
/// (a live dedicated-root lease), the lessee's view (state, power, the lease and its window,
/// the profile deployed, the lessee's events; nothing of the platform). Any other node is
/// 404 to a tenant member, and an ended lease's node under teardown is 409.
#[utoipa::path(get, path = "/v1/nodes/{id}", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = NodeView), (status = 404, body = metal_types::error::ErrorBody),
        (status = 409, body = metal_types::error::ErrorBody)))]
pub async fn get_node(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<NodeView>> {
    if let Some(lessee) = caller.lessee() {
        return Ok(ApiJson(NodeView::Lessee(Box::new(lessee.view(&app, &id).await?))));
    }
    let what = format!("node {id}");
    let node = app.store.read(move |conn| store::nodes::get(conn, &id)).await?;
    Ok(ApiJson(NodeView::Admin(Box::new(node.ok_or(ApiError::NotFound(what))?))))
}

/// The nodes of the caller's live dedicated-root leases as their lessee sees them (a
/// platform admin: every tenant's).
#[utoipa::path(get, path = "/v1/leases", responses((status = 200, body = Vec<LeasedNode>)))]
pub async fn list_leases(State(app): State<AppState>, caller: Caller) -> ApiResult<ApiJson<Vec<LeasedNode>>> {
    let tenant = caller.tenant_scope().map(str::to_owned);
    Ok(ApiJson(metal_machines::lessee::leased_nodes(&app, tenant).await?))
}

/// Redeploy the node of a live dedicated-root lease with a version of one of the lease
/// tenant's profiles (or a public one; the same version again reinstalls it as it was): the
/// same node, lease and billing, a new identity generation. The node goes off, its ports to
/// the pool's cleaning VLAN for the deploy, then back to the lease's tenant VLAN and the disk
/// boots. Answers once the reinstall started (202); the node's state shows how it goes. A
/// failed reinstall leaves the node `failed` under the running lease, to reinstall again.
/// A lessee may for the deployed (or failed-reinstall) node of its live lease, rate-limited
/// per lease and recorded as `lessee.reinstall`; an admin for any leased node.
#[utoipa::path(post, path = "/v1/nodes/{id}/reinstall", params(("id" = String, Path, description = "node id")),
    request_body = ReinstallRequest,
    responses((status = 202, body = ReinstallStarted), (status = 422, body = metal_types::error::ErrorBody),
        (status = 404, body = metal_types::error::ErrorBody), (status = 409, body = metal_types::error::ErrorBody),
        (status = 429, body = metal_types::error::ErrorBody)))]
pub async fn reinstall_node(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<ReinstallRequest>,
) -> ApiResult<(StatusCode, ApiJson<ReinstallStarted>)> {
    if request.profile_id.is_empty() {
        return Err(ApiError::invalid("profileId", "names no profile"));
    }
    let started = match caller.lessee() {
        Some(lessee) => lessee.reinstall(&app, &id, request).await?,
        None => metal_machines::lessee::reinstall_by_admin(&app, &id, request, &caller.0.id).await?,
    };
    Ok((StatusCode::ACCEPTED, ApiJson(started)))
}

/// Boot the node of a live dedicated-root lease into the rescue environment: the lessee's
/// SSH keys (its deployed profile version's and those its tenant registered) for root in a
/// ramdisk with sshd and the usual repair tools (`lsblk`, `mount`, `chroot`, `fsck`,
/// `mdadm`, `cryptsetup`), on the lease's tenant network, the disks untouched. The node is
/// `rescue` from now on; the ramdisk holds no platform token, key or certificate. Answers
/// once the rescue started (202). A failed rescue leaves the node `failed` under the
/// running lease, to rescue, unrescue or reinstall. A lessee may for the deployed (or
/// failed) node of its live lease, rate-limited per lease and recorded as `lessee.rescue`;
/// an admin for any leased node.
#[utoipa::path(post, path = "/v1/nodes/{id}/rescue", params(("id" = String, Path, description = "node id")),
    responses((status = 202, body = RescueStarted), (status = 404, body = metal_types::error::ErrorBody),
        (status = 409, body = metal_types::error::ErrorBody), (status = 429, body = metal_types::error::ErrorBody)))]
pub async fn rescue_node(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<(StatusCode, ApiJson<RescueStarted>)> {
    rescue_or_unrescue(&app, &caller, &id, Ask::Rescue).await
}

/// Boot the disk of a node in a rescue again: off, its ports on the lease's tenant VLAN,
/// the disk booted; the node is `deployed` again. Answers once it started (202). A lessee
/// may for the node of its live lease that is in a rescue (or whose rescue failed),
/// recorded as `lessee.unrescue`; an admin for any leased node.
#[utoipa::path(post, path = "/v1/nodes/{id}/unrescue", params(("id" = String, Path, description = "node id")),
    responses((status = 202, body = RescueStarted), (status = 404, body = metal_types::error::ErrorBody),
        (status = 409, body = metal_types::error::ErrorBody), (status = 429, body = metal_types::error::ErrorBody)))]
pub async fn unrescue_node(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<(StatusCode, ApiJson<RescueStarted>)> {
    rescue_or_unrescue(&app, &caller, &id, Ask::Unrescue).await
}

async fn rescue_or_unrescue(
    app: &AppState,
    caller: &Caller,
    id: &str,
    ask: Ask,
) -> ApiResult<(StatusCode, ApiJson<RescueStarted>)> {
    let started = match caller.lessee() {
        Some(lessee) => lessee.rescue(app, id, ask).await?,
        None => metal_machines::lessee::rescue_by_admin(app, id, ask, &caller.0.id).await?,
    };
    Ok((StatusCode::ACCEPTED, ApiJson(started)))
}

/// Change maintenance, cordon, labels, taints or devices.
#[utoipa::path(patch, path = "/v1/nodes/{id}", params(("id" = String, Path, description = "node id")), request_body = NodePatch,
    responses((status = 200, body = Node), (status = 409, body = metal_types::error::ErrorBody)))]
pub async fn patch_node(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(patch): ApiJson<NodePatch>,
) -> ApiResult<ApiJson<Node>> {
    caller.admin(&format!("node {id}"))?;
    let now = app.clock.now();
    let node = app.store.change(move |tx| patch_node_in(tx, &id, &patch, now)).await?;
    Ok(ApiJson(node))
}

fn patch_node_in(tx: &mut dyn Conn, id: &str, patch: &NodePatch, now: time::OffsetDateTime) -> ApiResult<Node> {
    let mut node = store::nodes::get(tx, id)?.ok_or_else(|| ApiError::NotFound(format!("node {id}")))?;
    // Validate the replacement values with the enrolment rules.
    let check = NodeCreate {
        id: id.to_owned(),
        boot_mac: None,
        pool_id: patch.pool_id.clone().filter(|p| !p.is_empty()),
        labels: patch.labels.clone().unwrap_or_else(|| node.labels.clone()),
        taints: patch.taints.clone().unwrap_or_default(),
        devices: patch.devices.clone().unwrap_or_else(|| node.devices.clone()),
    };
    let (taints, _) = check.validate("")?;
    if let Some(v) = patch.maintenance {
        node.maintenance = v;
    }
    if let Some(v) = patch.cordoned {
        node.cordoned = v;
    }
    node.labels = check.labels;
    node.devices = check.devices;
    if patch.taints.is_some() {
        node.taints = taints;
    }
    if let Some(pool) = &patch.pool_id {
        if !pool.is_empty() && store::capacity::get_pool(tx, pool)?.is_none() {
            return Err(ApiError::invalid("poolId", format!("no pool {pool}")));
        }
        node.pool_id = (!pool.is_empty()).then(|| pool.clone());
    }
    store::nodes::update_attributes(tx, &node, patch.generation, now)
}

/// Move a node along its lifecycle (compare-and-set on `from`, and `generation` if given).
#[utoipa::path(post, path = "/v1/nodes/{id}/transitions", params(("id" = String, Path, description = "node id")), request_body = NodeTransition,
    responses((status = 200, body = Node), (status = 409, description = "illegal move or lost race", body = metal_types::error::ErrorBody)))]
pub async fn transition_node(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request): ApiJson<NodeTransition>,
) -> ApiResult<ApiJson<Node>> {
    caller.admin(&format!("node {id}"))?;
    if request.to.in_progress() && request.owner.is_none() {
        return Err(ApiError::invalid("owner", format!("moving to {} needs an owner (who drives it)", request.to)));
    }
    let (deadlines, now) = (app.config.deadlines, app.clock.now());
    let node = app
        .store
        .change(move |tx| {
            if store::nodes::get(tx, &id)?.is_some_and(|n| n.tenant_root) {
                return Err(ApiError::Conflict(format!(
                    "node {id} is under a tenant-root lease: it leaves only through its teardown \
                     (POST /v1/nodes/{id}/recover runs it again when quarantined)"
                )));
            }
            store::nodes::transition(tx, &id, &request, &deadlines, now)
        })
        .await?;
    Ok(ApiJson(node))
}
