//! metal-bmc: out-of-band control of a machine through its BMC, Redfish or IPMI, behind one
//! [`Bmc`] trait: power (idempotent, read back), boot override, virtual media, a read model
//! (identity, health, temperatures, power draw, firmware, logs; what a BMC does not report
//! is absent, not an error), password rotation and firmware updates.
//!
//! Secrets ([`Secret`]) never reach a log, an error message or a child process's argv.

pub mod cli;
pub mod error;
pub mod http_error;
pub mod ipmi;
pub mod model;
pub mod redfish;
pub mod secret;
pub mod tls;

pub use error::{BmcError, BmcResult};
pub use model::{
    BiosSettings, BiosValue, BootPersistence, BootTarget, FirmwareUpdate, MediaStatus, PowerAction, PowerOutcome,
    PowerState, ReadModel, SecureBootState, UpdateOutcome, UpdateTarget,
};
pub use secret::{Credential, Secret};

/// Polls `bmc` until it reports `want`, or fails after `settle` naming the last state seen.
/// The reads back off: the first comes an eighth of `poll` after the one before, each wait
/// doubles up to `poll`, so a BMC that is quick is read back quickly and a slow one is not
/// asked every moment.
pub(crate) async fn wait_for_power<B: Bmc + ?Sized>(
    bmc: &B,
    name: &str,
    want: PowerState,
    operation: &str,
    settle: std::time::Duration,
    poll: std::time::Duration,
) -> BmcResult<()> {
    let deadline = tokio::time::Instant::now() + settle;
    let mut wait = poll / 8;
    loop {
        let now = bmc.power_state().await?;
        if now == want {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(BmcError::Timeout {
                bmc: name.to_owned(),
                operation: operation.to_owned(),
                seconds: settle.as_secs(),
                message: format!("power is still {now:?}"),
            });
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(poll);
    }
}

/// One machine's BMC.
#[async_trait::async_trait]
pub trait Bmc: Send + Sync {
    /// What speaks to the BMC (`redfish` or `ipmi`), for logs and errors.
    fn protocol(&self) -> &'static str;

    /// The current power state.
    async fn power_state(&self) -> BmcResult<PowerState>;

    /// Performs a power action and waits until the BMC reports its result. On for a
    /// running machine and off for a stopped one do nothing; reset or cycle of a stopped
    /// machine powers it on. The outcome says what was sent.
    async fn power(&self, action: PowerAction) -> BmcResult<PowerOutcome>;

    /// Sets the boot override and reads it back.
    async fn set_boot(&self, target: BootTarget, persistence: BootPersistence) -> BmcResult<()>;

    /// Inserts an ISO by URL as a virtual CD.
    async fn insert_media(&self, url: &str) -> BmcResult<()>;

    /// Ejects the virtual CD (nothing to do when none is inserted).
    async fn eject_media(&self) -> BmcResult<()>;

    /// What the virtual CD holds.
    async fn media_status(&self) -> BmcResult<MediaStatus>;

    /// Identity, health, temperatures, power draw, firmware and newest log entries.
    async fn read_model(&self) -> BmcResult<ReadModel>;

    /// Sets `user`'s password to `new` and proves it by logging in with it. A rotation the
    /// BMC refuses is an error, and the old credential stays the current one.
    async fn rotate_password(&self, user: &str, new: &Secret) -> BmcResult<()>;

    /// The BIOS attributes, current and pending.
    async fn bios(&self) -> BmcResult<BiosSettings>;

    /// Writes BIOS attributes for the next boot (most BMCs apply them only then).
    async fn set_bios(&self, attributes: &std::collections::BTreeMap<String, BiosValue>) -> BmcResult<()>;

    /// Resets every BIOS attribute to the vendor's defaults (at the next boot, on most BMCs).
    async fn reset_bios(&self) -> BmcResult<()>;

    /// UEFI Secure Boot's state.
    async fn secure_boot(&self) -> BmcResult<SecureBootState>;

    /// Turns UEFI Secure Boot on or off (at the next boot, on most BMCs).
    async fn set_secure_boot(&self, enabled: bool) -> BmcResult<()>;

    /// Writes a firmware image through the BMC's update service and follows it to its end.
    async fn update_firmware(&self, update: &FirmwareUpdate) -> BmcResult<UpdateOutcome>;

    /// Gives back what this connection holds at the BMC (a Redfish session: BMCs have few
    /// session slots). Nothing to give back by default.
    async fn close(&self) {}
}
