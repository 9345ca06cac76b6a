//! One erase run as a library call: select the disks, open and probe each, erase them all in
//! parallel, and build the (unsigned) report. `metal-erase run` and the ramdisk's erase task
//! both go through here, so the two can never differ in what they erase or report.

use metal_protocol::DiskIdentity;
use metal_protocol::wipe::{DiskWipe, WipeReport, WipeResult};
use tracing::{error, info};

use crate::device::{self, BlockDevice, DeviceError, Selection, SystemPaths};
use crate::engine::{self, DiskJob, EraseOptions};
use crate::firmware;
use crate::io::{BlockTarget, Target};
use crate::progress::ProgressSink;
use crate::report::{self, SigningIdentity};

/// How a disk is opened for writing: [`open_block_device`] on a real machine; a simulated
/// machine opens its disk's backing file.
pub type Opener<'a> = &'a (dyn Fn(&BlockDevice) -> std::io::Result<Box<dyn Target>> + Sync);

/// Opens a block device for direct, exclusive writing ([`BlockTarget::open`]).
pub fn open_block_device(device: &BlockDevice) -> std::io::Result<Box<dyn Target>> {
    Ok(Box::new(BlockTarget::open(&device.path, true)?))
}

/// Erases the disks `selection` picks under `paths` and returns the report for `identity`.
/// `inventory` is the platform's list of the node's disks (default: the selected ones). A
/// disk that cannot be opened is in the report as failed; only a bad selection is an error,
/// and then nothing was written.
pub fn erase(
    paths: &SystemPaths,
    selection: &Selection,
    options: &EraseOptions,
    identity: &SigningIdentity,
    inventory: Option<Vec<DiskIdentity>>,
    progress: &dyn ProgressSink,
) -> Result<WipeReport, DeviceError> {
    erase_with(paths, &open_block_device, selection, options, identity, inventory, progress)
}

/// [`erase`], opening each disk with `open`.
pub fn erase_with(
    paths: &SystemPaths,
    open: Opener<'_>,
    selection: &Selection,
    options: &EraseOptions,
    identity: &SigningIdentity,
    inventory: Option<Vec<DiskIdentity>>,
    progress: &dyn ProgressSink,
) -> Result<WipeReport, DeviceError> {
    let devices = device::discover(paths)?;
    let (chosen, skipped) = device::select(&devices, selection, &paths.sys)?;
    for s in &skipped {
        info!(disk = %s.name, reason = %s.reason, "skipped");
    }
    let started_at = metal_clock::now_utc();
    let inventory_disks = inventory.unwrap_or_else(|| chosen.iter().map(|d| d.disk.identity.clone()).collect());
    let mut jobs = Vec::new();
    let mut unopened = Vec::new();
    for device in chosen {
        match open(&device) {
            Ok(target) => {
                let capabilities = firmware::probe(target.as_ref(), device.disk.transport);
                jobs.push(DiskJob { device, target, capabilities })
            }
            Err(e) => {
                error!(disk = %device.path.display(), error = %e, "cannot open for erase");
                unopened.push(failed_to_open(&device, &e));
            }
        }
    }
    info!(disks = jobs.len(), policy = ?options.policy, "erasing");
    let mut wipes = engine::erase_disks(jobs, options, progress);
    wipes.extend(unopened);
    Ok(report::build(identity, inventory_disks, options.policy, wipes, started_at))
}

fn failed_to_open(device: &BlockDevice, e: &std::io::Error) -> DiskWipe {
    let now = metal_clock::now_utc();
    DiskWipe {
        device: device.path.display().to_string(),
        identity: device.disk.identity.clone(),
        method: None,
        method_reason: String::new(),
        rejected_methods: Vec::new(),
        commands: Vec::new(),
        started_at: now,
        finished_at: now,
        verification: None,
        result: WipeResult::Fail,
        first_bad_offset: None,
        failure: Some(format!("could not open the device: {e}")),
        nist_category: None,
    }
}
