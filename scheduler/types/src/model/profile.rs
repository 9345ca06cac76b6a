//! Profiles: what a machine of a kind gets (image, keys, admin user, minimum size, zone,
//! root-device hints, role, deploy mode, cloud-init extras), in immutable versions; and
//! `provision`, which allocates and deploys N machines by profile, all or nothing.
//!
//! The one design decision: a profile version is frozen when it is created, with its image
//! resolved to an id, so a deploy that names `profile:version` always gets the same thing.

use metal_protocol::cloudinit::SeedExtras;
use metal_protocol::deploy::RootDeviceHints;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;

/// How a profile puts an OS on the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DeployMode {
    /// Write the image, verified chunk by chunk, and seed cloud-init.
    #[default]
    Image,
    /// Boot the distribution's installer with a rendered autoinstall or kickstart.
    Installer,
}

/// What one version of a profile says. Validated when the version is created.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileSpec {
    /// The image (image deploys): an id, or a name in the profile's tenant (a public image
    /// of another tenant by id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// SSH public keys of the admin user (login is key-only).
    pub ssh_authorized_keys: Vec<String>,
    /// The admin user (passwordless sudo; root login stays disabled).
    #[serde(default = "default_admin")]
    pub admin_user: String,
    /// BIOS attributes the deploy runs with (`{"SriovGlobalEnable": "Enabled"}`), written
    /// through the BMC before a tenant-root lease's or a reinstall's deploy boot; only
    /// those the pool's `biosBaseline.tenantSettable` names (a lease is refused otherwise),
    /// and the teardown resets them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub bios: std::collections::BTreeMap<String, serde_json::Value>,
    /// Only nodes whose `zone` label has this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// At least this many CPU cores (commissioned inventory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_cores: Option<u32>,
    /// At least this much memory in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_memory_bytes: Option<u64>,
    /// A disk of at least this many bytes (besides fitting the image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_disk_bytes: Option<u64>,
    /// Which disk gets the image; none means the smallest suitable one.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub root_device_hints: RootDeviceHints,
    /// The role the node has once deployed (its `role` label), e.g. `dedicated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// `image` (default) or `installer`.
    #[serde(default)]
    pub deploy_mode: DeployMode,
    /// The distribution installer an `installer` deploy boots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installer: Option<InstallerSpec>,
    /// Added to the cloud-init user data: packages, time zone, NTP servers.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub cloud_init: SeedExtras,
    /// Keep this many machines deployed with this version as nodes become ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_deploy: Option<AutoDeploy>,
    /// What a deployed machine sets up when it joins as a host (networks as
    /// systemd-networkd files, storage pools); carried on its enrolment token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<metal_protocol::join::HostSetup>,
}

fn default_admin() -> String {
    "metal".into()
}

/// Which installer configuration is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InstallerKind {
    /// Ubuntu's subiquity with an autoinstall (cloud-init NoCloud over HTTP).
    Autoinstall,
    /// A RHEL-family Anaconda (Rocky, Alma) with a kickstart.
    Kickstart,
}

/// The installer an `installer` deploy network-boots (from the site's mirror).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstallerSpec {
    /// `autoinstall` (Ubuntu) or `kickstart` (Rocky, Alma).
    pub kind: InstallerKind,
    /// The installer's kernel (`casper/vmlinuz`, `images/pxeboot/vmlinuz`).
    pub kernel_url: String,
    /// The installer's initrd.
    pub initrd_url: String,
    /// Ubuntu: the live-server ISO (`url=`); RHEL family: the installation tree (`inst.repo=`).
    pub source_url: String,
}

/// What an installer deploy boots and is told, as stored for the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallerPlan {
    /// The installer.
    pub installer: InstallerSpec,
    /// The rendered configuration: the autoinstall user-data or the kickstart.
    pub config: String,
    /// The NoCloud meta-data (autoinstall).
    pub meta_data: String,
    /// The disk the installer writes: a by-id path or a kernel name.
    pub disk: String,
}

/// `autoDeploy: {desired: N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AutoDeploy {
    /// Machines to keep deployed.
    pub desired: u32,
}

/// Creates a profile (version 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileCreate {
    /// Profile id, e.g. `acme-root-os`.
    pub id: String,
    /// Owning tenant (admins only; a tenant creates in its own).
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// Every tenant may deploy it (platform only).
    #[serde(default)]
    pub public: bool,
    /// Version 1.
    #[serde(flatten)]
    pub spec: ProfileSpec,
}

/// One frozen version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileVersion {
    /// The profile.
    pub profile_id: String,
    /// Version number, from 1.
    pub version: i64,
    /// The image id it resolved to (image deploys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// What it says.
    pub spec: ProfileSpec,
    /// When it was made.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: time::OffsetDateTime,
}

/// A profile and its versions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    /// Id.
    pub id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Deployable by every tenant.
    pub public: bool,
    /// The newest version.
    pub latest_version: i64,
    /// Every version, oldest first.
    pub versions: Vec<ProfileVersion>,
}

impl ProfileSpec {
    /// The cloud-init values of this profile for one machine.
    pub fn seed_input(&self, instance_id: String, hostname: String) -> metal_protocol::cloudinit::SeedInput {
        metal_protocol::cloudinit::SeedInput {
            instance_id,
            hostname,
            admin_user: self.admin_user.clone(),
            ssh_authorized_keys: self.ssh_authorized_keys.clone(),
            join: None,
            network: vec![],
            volume: Default::default(),
            extras: self.cloud_init.clone(),
        }
    }

    /// Checks everything that needs no database: the seed values (keys, user, extras), the
    /// zone and role labels, the size and hint ranges.
    pub fn validate(&self) -> Result<(), ApiError> {
        for (name, value) in &self.bios {
            if let Some(problem) = metal_firmware::bios::name_problem(name) {
                return Err(ApiError::invalid("bios", problem));
            }
            if let Some(problem) = metal_firmware::bios::value_problem(value) {
                return Err(ApiError::invalid(format!("bios.{name}"), problem));
            }
        }
        match (&self.image, self.deploy_mode) {
            (Some(image), DeployMode::Image) => {
                crate::model::image::check_name("image", &image.to_ascii_lowercase())
                    .map_err(|_| ApiError::invalid("image", format!("{image:?} is not an image id or name")))?
            }
            (None, DeployMode::Image) => return Err(ApiError::invalid("image", "an image deploy names its image")),
            (Some(_), DeployMode::Installer) => {
                return Err(ApiError::invalid(
                    "image",
                    "an installer deploy installs from its installer, not an image",
                ));
            }
            (None, DeployMode::Installer) => {}
        }
        // The seed checks, with a placeholder for what the deploy fills in.
        self.seed_input("probe".into(), "probe".into()).validate().map_err(|e| {
            let field = match e.field.as_str() {
                f @ ("adminUser" | "sshAuthorizedKeys") => f.to_owned(),
                f if f.starts_with("sshAuthorizedKeys") => f.to_owned(),
                f => format!("cloudInit.{f}"),
            };
            ApiError::invalid(field, e.message)
        })?;
        for (field, value) in [("zone", &self.zone), ("role", &self.role)] {
            if let Some(value) = value {
                crate::model::node::validate_label_part(field, value)
                    .map_err(|message| ApiError::invalid(field, message))?;
            }
        }
        if let Some(host) = &self.host {
            host.validate().map_err(|e| ApiError::invalid(format!("host.{}", e.field), e.message))?;
        }
        if self.min_cores == Some(0) {
            return Err(ApiError::invalid("minCores", "must be at least 1 (or left out)"));
        }
        let hints = &self.root_device_hints;
        if let (Some(min), Some(max)) = (hints.min_size_bytes, hints.max_size_bytes)
            && min > max
        {
            return Err(ApiError::invalid("rootDeviceHints.minSizeBytes", "is larger than maxSizeBytes"));
        }
        match (self.deploy_mode, &self.installer) {
            (DeployMode::Installer, None) => {
                return Err(ApiError::invalid(
                    "installer",
                    "an installer deploy names its installer (kind, kernelUrl, initrdUrl, sourceUrl)",
                ));
            }
            (DeployMode::Image, Some(_)) => {
                return Err(ApiError::invalid("installer", "only deployMode installer takes an installer"));
            }
            (DeployMode::Installer, Some(installer)) => {
                for (field, url) in [
                    ("installer.kernelUrl", &installer.kernel_url),
                    ("installer.initrdUrl", &installer.initrd_url),
                    ("installer.sourceUrl", &installer.source_url),
                ] {
                    crate::model::image::check_url(field, url)?;
                    // The URL goes on a kernel command line: nothing that splits or quotes it.
                    if url.bytes().any(|b| b.is_ascii_whitespace() || b"\"';`$\\".contains(&b)) {
                        return Err(ApiError::invalid(field, "must not contain spaces, quotes, ';', '`', '$' or '\\'"));
                    }
                }
            }
            (DeployMode::Image, None) => {}
        }
        Ok(())
    }
}

/// `POST /v1/provision`: deploy `count` machines with one profile version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvisionRequest {
    /// The profile.
    pub profile_id: String,
    /// Its version (always named).
    pub profile_version: i64,
    /// How many machines (default 1).
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// How the machine was started after its plan was set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootStart {
    /// The node.
    pub node: String,
    /// What happened: `network boot + power cycle`, `no BMC: ...`, or the BMC's error.
    pub outcome: String,
    /// Whether the BMC did what was asked.
    pub ok: bool,
}

/// What `provision` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionOutcome {
    /// The profile.
    pub profile_id: String,
    /// Its version.
    pub profile_version: i64,
    /// The nodes now deploying, smallest first.
    pub nodes: Vec<String>,
    /// How each was started.
    pub boots: Vec<BootStart>,
}
