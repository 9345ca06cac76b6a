//! Whole-node, time-windowed placement: pure logic over node snapshots, no I/O.
//!
//! Eligible: ready, not in maintenance, not cordoned, platform trust, of the asked
//! architecture, no live booking that overlaps the window, healthy devices covering the
//! request, and not tainted
//! `dedicated=<another tenant>` (other NoSchedule taints do not stop a node lease). A gang
//! takes N nodes sharing one value of its topology key, all or nothing, from the domain
//! already most booked (less fragmentation). The same `eligibility` check runs again on the
//! chosen nodes inside the committing transaction.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use metal_types::model::node::{Candidate, NodeState, Trust};
use metal_types::model::reservation::{DeviceRequest, Gang};

/// What is asked for.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The lessee.
    pub tenant: &'a str,
    /// Devices each node must have.
    pub devices: &'a [DeviceRequest],
    /// The window, [start, end) in milliseconds.
    pub window: (i64, i64),
    /// Gang constraint, if any.
    pub gang: Option<&'a Gang>,
    /// The machines' architecture, if asked.
    pub architecture: Option<&'a str>,
}

/// Why a node is not eligible. The order is the order checks run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ineligible {
    /// Not in state ready.
    NotReady,
    /// In maintenance.
    Maintenance,
    /// Cordoned.
    Cordoned,
    /// Under tenant-controlled trust.
    TenantControlled,
    /// Tainted dedicated to another tenant.
    DedicatedToOther,
    /// Of another architecture than asked.
    Architecture,
    /// Lacks healthy devices for the request.
    Devices,
    /// Booked in the window.
    Booked,
    /// Has no label for the gang's topology key.
    NoTopologyLabel,
}

impl Ineligible {
    fn describe(self, gang: Option<&Gang>) -> String {
        match self {
            Ineligible::NotReady => "not ready".into(),
            Ineligible::Maintenance => "in maintenance".into(),
            Ineligible::Cordoned => "cordoned".into(),
            Ineligible::TenantControlled => "under tenant control".into(),
            Ineligible::DedicatedToOther => "dedicated to another tenant".into(),
            Ineligible::Architecture => "of another architecture".into(),
            Ineligible::Devices => "without enough healthy devices".into(),
            Ineligible::Booked => "booked in the window".into(),
            Ineligible::NoTopologyLabel => {
                format!("without a {} label", gang.map_or("topology", |g| g.topology_key.as_str()))
            }
        }
    }
}

/// Whether one node can take the ask.
pub fn eligibility(node: &Candidate, ask: &Ask<'_>) -> Result<(), Ineligible> {
    if node.state != NodeState::Ready {
        return Err(Ineligible::NotReady);
    }
    if node.maintenance {
        return Err(Ineligible::Maintenance);
    }
    if node.cordoned {
        return Err(Ineligible::Cordoned);
    }
    if node.trust != Trust::Platform {
        return Err(Ineligible::TenantControlled);
    }
    if node.taints.iter().any(|t| t.key == "dedicated" && t.value != ask.tenant) {
        return Err(Ineligible::DedicatedToOther);
    }
    if ask.architecture.is_some_and(|arch| node.architecture.as_deref().unwrap_or("x86_64") != arch) {
        return Err(Ineligible::Architecture);
    }
    for want in ask.devices {
        let healthy = node.devices.iter().filter(|d| d.class == want.class && d.healthy).count();
        if healthy < usize::try_from(want.count).unwrap_or(usize::MAX) {
            return Err(Ineligible::Devices);
        }
    }
    if !free_in(node, ask.window) {
        return Err(Ineligible::Booked);
    }
    if let Some(gang) = ask.gang
        && !node.labels.contains_key(&gang.topology_key)
    {
        return Err(Ineligible::NoTopologyLabel);
    }
    Ok(())
}

/// Whether no live booking of the node overlaps the window.
fn free_in(node: &Candidate, (start, end): (i64, i64)) -> bool {
    !node.bookings.iter().any(|&(s, e)| s < end && start < e)
}

/// A placement that cannot be made, with per-constraint counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Nodes considered.
    pub considered: usize,
    /// How many nodes each constraint ruled out.
    pub counts: BTreeMap<Ineligible, usize>,
    /// The sentence for people.
    pub message: String,
}

/// Puts nodes in preference order: best fit first (fewest devices, so big nodes stay free for
/// big asks), then by id. `place` relies on this order.
pub fn sort_for_placement(nodes: &mut [Candidate]) {
    nodes.sort_by(|a, b| a.devices.len().cmp(&b.devices.len()).then_with(|| a.id.cmp(&b.id)));
}

/// Chooses nodes for the ask, or explains why it cannot. `nodes` must be in the order of
/// [`sort_for_placement`]: a single node is then the first eligible one, found without
/// scanning the rest.
pub fn place(nodes: &[Candidate], ask: &Ask<'_>) -> Result<Vec<String>, Refusal> {
    // Most nodes a busy pool passes over are booked in the window: test that first (it does
    // not change the answer, only how fast a packed prefix of the order is skipped).
    if ask.gang.is_none()
        && let Some(first) = nodes.iter().find(|n| free_in(n, ask.window) && eligibility(n, ask).is_ok())
    {
        return Ok(vec![first.id.clone()]);
    }
    let want = ask.gang.map_or(1, |g| usize::try_from(g.count).unwrap_or(usize::MAX));
    let mut eligible: Vec<&Candidate> = Vec::new();
    let mut counts: BTreeMap<Ineligible, usize> = BTreeMap::new();
    for node in nodes {
        match eligibility(node, ask) {
            Ok(()) => eligible.push(node),
            Err(why) => *counts.entry(why).or_default() += 1,
        }
    }
    let chosen: Option<Vec<&Candidate>> = match ask.gang {
        None => eligible.first().map(|n| vec![*n]),
        Some(gang) => {
            let mut domains: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
            for n in &eligible {
                if let Some(value) = n.labels.get(&gang.topology_key) {
                    domains.entry(value).or_default().push(n);
                }
            }
            let booked_in = |domain: &str| {
                nodes
                    .iter()
                    .filter(|n| {
                        n.labels.get(&gang.topology_key).map(String::as_str) == Some(domain) && !n.bookings.is_empty()
                    })
                    .count()
            };
            domains
                .into_iter()
                .filter(|(_, members)| members.len() >= want)
                .max_by(|(a, _), (b, _)| booked_in(a).cmp(&booked_in(b)).then(b.cmp(a)))
                .map(|(_, mut members)| {
                    // Members keep the preference order of `nodes`.
                    members.truncate(want);
                    members
                })
        }
    };
    match chosen {
        Some(chosen) => Ok(chosen.into_iter().map(|n| n.id.clone()).collect()),
        None => {
            let most = counts.contains_key(&Ineligible::Devices).then(|| most_devices(nodes, ask));
            Err(refusal(nodes.len(), counts, eligible.len(), want, ask.gang, most))
        }
    }
}

/// For a devices refusal: what was asked of each class, and the most healthy ones of it on
/// one of the nodes that had too few (`16 gpu asked, the most on one node is 8`).
fn most_devices(nodes: &[Candidate], ask: &Ask<'_>) -> String {
    let short: Vec<&Candidate> = nodes.iter().filter(|n| eligibility(n, ask) == Err(Ineligible::Devices)).collect();
    ask.devices
        .iter()
        .map(|want| {
            let most = short
                .iter()
                .map(|n| n.devices.iter().filter(|d| d.class == want.class && d.healthy).count())
                .max()
                .unwrap_or(0);
            format!("{} {} asked, the most on one node is {most}", want.count, want.class)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn refusal(
    considered: usize,
    counts: BTreeMap<Ineligible, usize>,
    eligible: usize,
    want: usize,
    gang: Option<&Gang>,
    most_devices: Option<String>,
) -> Refusal {
    let nodes = if considered == 1 { "node" } else { "nodes" };
    let mut message = format!("no placement: {considered} {nodes} in the pool");
    let parts: Vec<String> = counts
        .iter()
        .map(|(why, n)| match (why, &most_devices) {
            (Ineligible::Devices, Some(most)) => format!("{n} {} ({most})", why.describe(gang)),
            _ => format!("{n} {}", why.describe(gang)),
        })
        .collect();
    if !parts.is_empty() {
        let _ = write!(message, ": {}", parts.join(", "));
    }
    let _ = write!(message, "; {eligible} eligible");
    if let Some(g) = gang {
        let _ = write!(message, ", but no {} has {want} of them", g.topology_key);
    }
    Refusal { considered, counts, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metal_types::model::node::{Device, Taint, TaintEffect};
    use proptest::prelude::*;

    fn node(id: &str, rack: &str, gpus: usize) -> Candidate {
        Candidate {
            id: id.into(),
            state: NodeState::Ready,
            maintenance: false,
            cordoned: false,
            trust: Trust::Platform,
            taints: vec![],
            labels: [("rack".to_string(), rack.to_string())].into(),
            devices: (0..gpus).map(|i| Device { id: format!("gpu{i}"), class: "gpu".into(), healthy: true }).collect(),
            architecture: None,
            bookings: vec![],
        }
    }

    fn gpus(n: u32) -> Vec<DeviceRequest> {
        vec![DeviceRequest { class: "gpu".into(), count: n }]
    }

    #[test]
    fn refusals_count_every_constraint() {
        let mut nodes: Vec<Candidate> = (0..8).map(|i| node(&format!("n{i}"), "r1", 8)).collect();
        nodes[0].maintenance = true;
        nodes[1].cordoned = true;
        nodes[2].state = NodeState::Deployed;
        nodes[3].trust = Trust::TenantControlled;
        nodes[4].taints =
            vec![Taint { key: "dedicated".into(), value: "globex".into(), effect: TaintEffect::NoSchedule }];
        nodes[5].devices[3].healthy = false;
        nodes[6].bookings = vec![(0, 100)];
        nodes[7].bookings = vec![(50, 60)];
        let devices = gpus(8);
        let ask = Ask { tenant: "acme", devices: &devices, window: (10, 90), gang: None, architecture: None };
        let refusal = place(&nodes, &ask).unwrap_err();
        assert_eq!(
            refusal.message,
            "no placement: 8 nodes in the pool: 1 not ready, 1 in maintenance, 1 cordoned, 1 under tenant control, \
             1 dedicated to another tenant, 1 without enough healthy devices (8 gpu asked, the most on one node is 7), \
             2 booked in the window; 0 eligible"
        );
    }

    #[test]
    fn dedicated_taints_admit_their_tenant_and_other_taints_do_not_stop_a_lease() {
        let mut n = node("n1", "r1", 0);
        n.taints = vec![
            Taint { key: "dedicated".into(), value: "acme".into(), effect: TaintEffect::NoSchedule },
            Taint { key: "gpu-burnin".into(), value: "pending".into(), effect: TaintEffect::NoSchedule },
        ];
        let ask = Ask { tenant: "acme", devices: &[], window: (0, 10), gang: None, architecture: None };
        assert_eq!(place(&[n.clone()], &ask).unwrap(), vec!["n1"]);
        let other = Ask { tenant: "globex", ..ask };
        assert!(place(&[n], &other).is_err());
    }

    #[test]
    fn an_architecture_asked_for_takes_only_its_machines_and_unrecorded_ones_are_x86_64() {
        let mut grace = node("grace", "ra", 4);
        grace.architecture = Some("aarch64".into());
        let (old, epyc) =
            (node("old", "ra", 4), Candidate { architecture: Some("x86_64".into()), ..node("epyc", "ra", 4) });
        let nodes = [grace, old, epyc];
        let ask = |architecture| Ask { tenant: "acme", devices: &[], window: (0, 10), gang: None, architecture };
        assert_eq!(place(&nodes, &ask(Some("aarch64"))).unwrap(), vec!["grace"]);
        let x86 = place(&nodes, &ask(Some("x86_64"))).unwrap();
        assert!(x86 == ["epyc"] || x86 == ["old"], "{x86:?}");
        assert_eq!(place(&nodes, &ask(None)).unwrap().len(), 1);
        let refusal = place(&nodes[1..], &ask(Some("aarch64"))).unwrap_err();
        assert_eq!(refusal.counts.get(&Ineligible::Architecture), Some(&2), "{}", refusal.message);
        assert!(refusal.message.contains("2 of another architecture"), "{}", refusal.message);
    }

    #[test]
    fn gangs_prefer_the_most_booked_domain_and_are_all_or_nothing() {
        let mut nodes = vec![
            node("a1", "ra", 8),
            node("a2", "ra", 8),
            node("a3", "ra", 8),
            node("b1", "rb", 8),
            node("b2", "rb", 8),
            node("b3", "rb", 8),
        ];
        nodes[3].bookings = vec![(0, 5)]; // rb already has a lease outside the window
        let gang = Gang { count: 2, topology_key: "rack".into() };
        let devices = gpus(8);
        let ask = Ask { tenant: "t", devices: &devices, window: (10, 20), gang: Some(&gang), architecture: None };
        assert_eq!(place(&nodes, &ask).unwrap(), vec!["b1", "b2"]);
        let big = Gang { count: 4, topology_key: "rack".into() };
        let refusal = place(&nodes, &Ask { gang: Some(&big), ..ask }).unwrap_err();
        assert!(refusal.message.ends_with("6 eligible, but no rack has 4 of them"), "{}", refusal.message);
    }

    fn sorted(mut nodes: Vec<Candidate>) -> Vec<Candidate> {
        sort_for_placement(&mut nodes);
        nodes
    }

    #[test]
    fn a_single_node_is_the_best_fit() {
        let nodes = sorted(vec![node("big", "r1", 8), node("small", "r1", 2), node("mid", "r1", 4)]);
        let devices = gpus(2);
        let ask = Ask { tenant: "t", devices: &devices, window: (0, 1), gang: None, architecture: None };
        assert_eq!(place(&nodes, &ask).unwrap(), vec!["small"]);
        let devices = gpus(3);
        assert_eq!(place(&nodes, &Ask { devices: &devices, ..ask }).unwrap(), vec!["mid"]);
    }

    fn arb_nodes() -> impl Strategy<Value = Vec<Candidate>> {
        proptest::collection::vec((0u8..4, any::<bool>(), any::<bool>(), 0usize..9, 0u8..3, any::<bool>()), 1..24)
            .prop_map(|specs| {
                specs
                    .into_iter()
                    .enumerate()
                    .map(|(i, (rack, maintenance, cordoned, gpus, state, dedicated))| {
                        let mut n = node(&format!("n{i:02}"), &format!("r{rack}"), gpus);
                        n.maintenance = maintenance && i % 3 == 0;
                        n.cordoned = cordoned && i % 4 == 0;
                        n.state = [NodeState::Ready, NodeState::Ready, NodeState::Deployed][usize::from(state)];
                        if dedicated && i % 5 == 0 {
                            n.taints.push(Taint {
                                key: "dedicated".into(),
                                value: "other".into(),
                                effect: TaintEffect::NoSchedule,
                            });
                        }
                        n
                    })
                    .collect()
            })
    }

    proptest! {
        /// Applying a stream of asks and booking what is placed never double-books a node,
        /// never books an ineligible one, and every gang sits in one domain.
        #[test]
        fn placement_never_double_books_or_picks_ineligible_nodes(
            mut nodes in arb_nodes(),
            asks in proptest::collection::vec((0i64..50, 1i64..30, 0u32..9, 1u32..4, any::<bool>()), 1..40),
        ) {
            for (start, len, want_gpus, gang_size, use_gang) in asks {
                let devices = gpus(want_gpus.max(1));
                let gang = Gang { count: gang_size, topology_key: "rack".into() };
                let ask = Ask { tenant: "acme", devices: &devices, window: (start, start + len), gang: use_gang.then_some(&gang), architecture: None };
                if let Ok(chosen) = place(&nodes, &ask) {
                    prop_assert_eq!(chosen.len(), if use_gang { gang_size as usize } else { 1 });
                    let racks: std::collections::BTreeSet<_> = chosen.iter().map(|id| nodes.iter().find(|n| &n.id == id).unwrap().labels["rack"].clone()).collect();
                    prop_assert_eq!(racks.len(), 1, "a gang spans domains");
                    for id in &chosen {
                        let n = nodes.iter_mut().find(|n| &n.id == id).unwrap();
                        prop_assert!(eligibility(n, &ask).is_ok(), "ineligible node {} chosen", id);
                        prop_assert!(!n.bookings.iter().any(|&(s, e)| s < ask.window.1 && ask.window.0 < e), "double-booked {}", id);
                        n.bookings.push(ask.window);
                    }
                }
            }
        }
    }
}
