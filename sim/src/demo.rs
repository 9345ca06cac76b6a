//! The README's first run: a simulated site runs two dedicated-root leases of a week each
//! from reservation to a clean, re-identified return, with no hand on a machine. One BMC
//! refuses the teardown's password rotation, so its machine is quarantined; the fault is
//! cleared and `recover` runs the teardown again. At the end: the timeline of the clean
//! machine, the meter records, and its wipe report read as a certificate and verified
//! offline against the site CA.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;

use crate::fault::Fault;
use crate::lease::{PROFILE, TENANT, lease, prepare, reaches, recover};
use crate::site::Site;

/// What the demo saw, for its caller (and the tests) to check.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The node that went through the lease and back cleanly.
    pub clean: String,
    /// The node that was quarantined and recovered.
    pub recovered: String,
    /// Identity generations of the clean node: before, leased, returned.
    pub generations: Vec<i64>,
    /// node.metal.hours billed to the tenant.
    pub metal_hours: f64,
    /// The clean node's accepted wipe report, verified offline: the disks it names.
    pub wiped_disks: usize,
    /// What was printed.
    pub text: String,
}

/// How long each lease runs.
pub const LEASE: Duration = Duration::from_secs(7 * 86_400);

/// Runs the demo on a started site whose machines are commissioned; prints as it goes.
pub async fn run(site: &Site) -> anyhow::Result<Outcome> {
    let mut out = Outcome::default();
    let admin = &site.admin;
    let mut text = String::new();
    let say = |text: &mut String, line: String| {
        println!("{line}");
        text.push_str(&line);
        text.push('\n');
    };

    say(&mut text, "== the tenant, the public image and the lessee's profile".into());
    let (image_id, digest) = prepare(site).await?;
    say(&mut text, format!("image {image_id} (sha256 {}) imported, promoted; profile {PROFILE}:1", &digest[..16]));

    say(&mut text, "== two dedicated-root leases of 7 days".into());
    let mut before = std::collections::BTreeMap::new();
    for n in admin.list("/v1/nodes").await? {
        before.insert(n["id"].as_str().unwrap_or_default().to_owned(), n["identityGeneration"].as_i64().unwrap_or(0));
    }
    let nodes: Vec<String> = lease(site, 2, "7d").await?.into_iter().map(|(_, node)| node).collect();
    out.clean = nodes[0].clone();
    out.recovered = nodes[1].clone();
    for node in &nodes {
        let n = admin.get(&format!("/v1/nodes/{node}")).await?;
        let machine = site.machine(node).context("a node without a machine")?;
        let role = n["labels"]["role"].as_str().unwrap_or("-");
        say(&mut text, format!("{}, role {role}; the machine runs {:?}", standing(&n), machine.state().activity));
    }
    out.generations.push(before.get(&nodes[0]).copied().unwrap_or(0));
    out.generations
        .push(admin.get(&format!("/v1/nodes/{}", out.clean)).await?["identityGeneration"].as_i64().unwrap_or(0));

    let faulty = site.machine(&out.recovered).context("no machine")?;
    faulty.faults.set(Fault::RefuseRotation, true);
    say(&mut text, format!("{}: its BMC will now refuse a password change (fault refuse-rotation)", out.recovered));

    say(&mut text, "== a week later: the leases end and the teardowns run".into());
    site.clock.advance(LEASE);
    let clean = out.clean.clone();
    reaches(site, &clean, "ready").await?;
    let recovered = out.recovered.clone();
    reaches(site, &recovered, "failed").await?;
    let quarantined = admin.get(&format!("/v1/nodes/{recovered}")).await?;
    say(
        &mut text,
        format!(
            "{recovered}: quarantined ({}; maintenance {})",
            quarantined["stateReason"].as_str().unwrap_or("?"),
            quarantined["maintenance"]
        ),
    );
    faulty.faults.set(Fault::RefuseRotation, false);
    say(&mut text, format!("{recovered}: fault cleared, recover runs the teardown again"));
    recover(site, &recovered).await?;
    let clean_node = admin.get(&format!("/v1/nodes/{clean}")).await?;
    out.generations.push(clean_node["identityGeneration"].as_i64().unwrap_or(0));
    for node in &nodes {
        let n = admin.get(&format!("/v1/nodes/{node}")).await?;
        say(&mut text, format!("{}, tenant-root {}", standing(&n), n["tenantRoot"]));
    }

    say(&mut text, format!("== timeline of {clean} (simulated time)"));
    let timeline = timeline(site, &clean).await?;
    say(&mut text, timeline);

    say(&mut text, format!("== teardown evidence of {clean}"));
    let runs = admin.get(&format!("/v1/nodes/{clean}/teardowns")).await?;
    let run = runs.as_array().and_then(|r| r.first()).context("no teardown run")?;
    let mut steps = String::new();
    for h in run["history"].as_array().into_iter().flatten() {
        let _ = writeln!(steps, "  {:<20} {}", h["step"].as_str().unwrap_or("?"), h["result"].as_str().unwrap_or("?"));
    }
    say(&mut text, format!("{} {}:\n{}", run["definition"].as_str().unwrap_or("?"), run["status"], steps.trim_end()));

    say(&mut text, format!("== meter records of {TENANT}"));
    site.bill().await?;
    let usage = admin.get(&format!("/v1/usage?tenantId={TENANT}")).await?;
    out.metal_hours = usage["totals"]["node.metal.hours"].as_f64().unwrap_or(0.0);
    let records = usage["records"].as_array().map_or(0, Vec::len);
    say(
        &mut text,
        format!(
            "{records} records; node.metal.hours {:.3}, gpu.hours {:.3}",
            out.metal_hours,
            usage["totals"]["gpu.hours"].as_f64().unwrap_or(0.0)
        ),
    );

    say(&mut text, format!("== wipe certificate of {clean}"));
    let (certificate, disks) = crate::certificate::for_node(site, &clean).await?;
    out.wiped_disks = disks;
    say(&mut text, certificate);
    out.text = text;
    Ok(out)
}

/// A node's state, trust and identity generation, as the API shows them.
fn standing(node: &Value) -> String {
    format!(
        "{}: {} under {} trust, identity generation {}",
        node["id"].as_str().unwrap_or("?"),
        node["state"].as_str().unwrap_or("?"),
        node["trust"].as_str().unwrap_or("?"),
        node["identityGeneration"]
    )
}

/// The node's events, one line each, timed from the first; a run of one kind at one time
/// (an hour's meter records of a week) is one line with its count.
async fn timeline(site: &Site, node: &str) -> anyhow::Result<String> {
    let subject = format!("node/{node}");
    let mut after = 0;
    let mut lines: Vec<(String, usize)> = Vec::new();
    let mut first = None;
    loop {
        let page = site.admin.get(&format!("/v1/events?after={after}")).await?;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if events.is_empty() {
            break;
        }
        after = page["next"].as_i64().unwrap_or(after);
        for e in events.iter().filter(|e| e["subject"] == subject.as_str() || e["data"]["node"] == node) {
            let Some(at) = e["at"].as_str().and_then(|t| crate::clock::parse(t).ok()) else {
                continue;
            };
            let offset = (at - *first.get_or_insert(at)).whole_seconds();
            let data = &e["data"];
            let detail = ["to", "step", "reason"]
                .iter()
                .find_map(|k| data[*k].as_str().map(|v| format!("  {k} {v}")))
                .unwrap_or_default();
            let line = format!(
                "  +{}d {:02}:{:02}:{:02}  {}{detail}",
                offset / 86_400,
                offset % 86_400 / 3600,
                offset % 3600 / 60,
                offset % 60,
                e["kind"].as_str().unwrap_or("?")
            );
            match lines.last_mut() {
                Some((last, count)) if *last == line => *count += 1,
                _ => lines.push((line, 1)),
            }
        }
    }
    let text: Vec<String> =
        lines.into_iter().map(|(line, count)| if count > 1 { format!("{line}  (x{count})") } else { line }).collect();
    Ok(text.join("\n"))
}
