//! Virtual-media boots that only the machine can take: the teardown mounts a per-boot ISO
//! on the node's BMC, at a URL holding a fresh claim (256 random bits; the database keeps
//! only its SHA-256, on the boot, `store::boots::arm_claimed`). The ISO's embedded script
//! asks `/boot/ipxe?claim=` (or `/boot/grub?claim=`), so the boot is taken by its claim and
//! a request naming the node's MAC gets nothing for it (`claims::Asked`): no host on the
//! provisioning network is in the race at all, only the BMC, which fetched the ISO.
//!
//! The ISO is the operator's template (`FILES_DIR/media.iso`, built by
//! `ipxe/build-ipxe-iso.sh --claim-template`) with [`PLACEHOLDER`] written over by the
//! claim wherever it occurs (ISO 9660 stores file contents as they are): no ISO is built
//! per boot. The template is read once, at start.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use tracing::{info, warn};

use crate::app::App;
use crate::metal::boot::BootService;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};

/// What the template's script holds where each boot's claim goes: as long as a claim (64
/// hex digits), so the ISO's layout does not move. `ipxe/build-ipxe-iso.sh` writes the same.
pub const PLACEHOLDER: &str = "metal-media-claim-placeholder-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";

/// The template's file name in the boot files directory.
pub const TEMPLATE: &str = "media.iso";

/// The ISO's name in its URL (some BMCs mount only URLs that end in `.iso`).
const ISO_NAME: &str = "metal.iso";

/// Where the per-boot ISOs are served, under the media URL.
const PATH: &str = "/boot/media/";

/// The loaded template and the URL its per-boot copies are served at.
#[derive(Debug)]
pub struct MediaTemplate {
    bytes: Arc<[u8]>,
    at: Vec<usize>,
    base_url: String,
}

impl MediaTemplate {
    /// Reads the template at `path`: an ISO 9660 image that holds [`PLACEHOLDER`].
    pub fn load(path: &Path, base_url: &str) -> Result<MediaTemplate, String> {
        let bytes = std::fs::read(path).map_err(|e| {
            format!(
                "boot-media-url is set but the virtual-media template {} cannot be read ({e}): build it with \
                 ipxe/build-ipxe-iso.sh --claim-template",
                path.display()
            )
        })?;
        Self::from_bytes(bytes, base_url).map_err(|e| format!("the virtual-media template {}: {e}", path.display()))
    }

    fn from_bytes(bytes: Vec<u8>, base_url: &str) -> Result<MediaTemplate, String> {
        // The primary volume descriptor of ISO 9660: sector 16, "\x01CD001".
        if bytes.get(0x8001..0x8006) != Some(b"CD001".as_slice()) {
            return Err("not an ISO 9660 image".into());
        }
        let at: Vec<usize> = bytes
            .windows(PLACEHOLDER.len())
            .enumerate()
            .filter(|(_, w)| *w == PLACEHOLDER.as_bytes())
            .map(|(i, _)| i)
            .collect();
        if at.is_empty() {
            return Err(format!(
                "it holds no claim placeholder ({PLACEHOLDER}): build it with ipxe/build-ipxe-iso.sh --claim-template"
            ));
        }
        Ok(MediaTemplate { bytes: bytes.into(), at, base_url: base_url.trim_end_matches('/').to_owned() })
    }

    /// The ISO's size.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// Bytes `[start, end)` of the ISO for the boot that `claim` takes (a BMC reads it in
    /// ranges: only the range asked for is copied).
    pub fn part(&self, claim: &str, start: usize, end: usize) -> Vec<u8> {
        let mut part = self.bytes[start..end].to_vec();
        for at in &self.at {
            // The placeholder's bytes [at, at + len) that fall inside [start, end).
            let (from, to) = ((*at).max(start), (*at + PLACEHOLDER.len()).min(end));
            if from < to {
                part[from - start..to - start].copy_from_slice(&claim.as_bytes()[from - at..to - at]);
            }
        }
        part
    }

    /// The whole ISO for the boot that `claim` takes.
    pub fn iso(&self, claim: &str) -> Vec<u8> {
        self.part(claim, 0, self.size())
    }

    /// The URL the BMC mounts for the boot that `claim` takes (a secret: never logged, never
    /// in an answer; see [`redact`]).
    pub fn url(&self, claim: &str) -> String {
        format!("{}{PATH}{claim}/{ISO_NAME}", self.base_url)
    }
}

/// The claim in a per-boot ISO's URL, if `url` is one.
pub fn claim_in(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once(PATH)?;
    let (claim, name) = rest.split_once('/')?;
    (name == ISO_NAME && claim.len() == PLACEHOLDER.len() && claim.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(claim)
}

/// `url` with a per-boot ISO's claim hidden: what a BMC's media status shows in answers.
pub fn redact(url: String) -> String {
    match claim_in(&url) {
        Some(claim) => url.replace(claim, "(claim)"),
        None => url,
    }
}

/// `GET /boot/media/{claim}/metal.iso`: the template of the per-boot ISO (its bytes are
/// `template.part(claim, ..)`), while the boot its claim was made for is open. Rate-limited
/// per address like the other unauthenticated routes; the claim is never logged.
pub async fn iso_file<'a>(app: &'a App, address: IpAddr, claim: &str, name: &str) -> ApiResult<&'a MediaTemplate> {
    let service = BootService::of(app)?;
    service.limiter.check(address)?;
    let template = service
        .media
        .as_ref()
        .ok_or_else(|| ApiError::NotFound("virtual-media boots (boot-media-url is not set)".into()))?;
    let now = app.clock.now();
    let hash = store::auth::hash(claim);
    let boot = app.store.read(move |tx| store::boots::open_by_claim(tx, &hash, now)).await?;
    let (Some(boot), true) = (boot, name == ISO_NAME) else {
        warn!(client = %address, "an ISO asked for with a claim no open boot carries");
        return Err(ApiError::NotFound("an open boot with this claim".into()));
    };
    info!(node = %boot.node_id, boot = %boot.id, client = %address, "per-boot ISO served");
    Ok(template)
}

#[cfg(test)]
mod tests {
    use super::{MediaTemplate, PLACEHOLDER, claim_in, redact};

    fn iso(body: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0u8; 0x9000];
        bytes[0x8000..0x8006].copy_from_slice(b"\x01CD001");
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn every_placeholder_takes_the_claim_and_nothing_moves() {
        let body =
            format!("chain http://c/boot/ipxe?claim={PLACEHOLDER}&mac=x\nsource (http)/boot/grub?claim={PLACEHOLDER}");
        let template = MediaTemplate::from_bytes(iso(body.as_bytes()), "http://10.0.0.1:7451/").unwrap();
        let claim = "ab".repeat(32);
        let served = template.iso(&claim);
        assert_eq!(served.len(), iso(body.as_bytes()).len());
        let text = String::from_utf8_lossy(&served[0x9000..]).into_owned();
        assert_eq!(text, body.replace(PLACEHOLDER, &claim));
        let url = template.url(&claim);
        assert_eq!(url, format!("http://10.0.0.1:7451/boot/media/{claim}/metal.iso"));
        assert_eq!(claim_in(&url), Some(claim.as_str()));
        assert_eq!(redact(url), "http://10.0.0.1:7451/boot/media/(claim)/metal.iso");
        // Any range, cut through a placeholder or not, is that range of the whole.
        for (start, end) in [(0, served.len()), (0x9000 + 40, 0x9000 + 60), (0x9010, served.len() - 5), (5, 6)] {
            assert_eq!(template.part(&claim, start, end), served[start..end], "{start}..{end}");
        }
    }

    #[test]
    fn a_template_that_is_no_iso_or_has_no_placeholder_is_refused_with_why() {
        let e = MediaTemplate::from_bytes(PLACEHOLDER.as_bytes().to_vec(), "http://c").unwrap_err();
        assert!(e.contains("not an ISO 9660 image"), "{e}");
        let e = MediaTemplate::from_bytes(iso(b"chain http://c/boot/ipxe?mac=${netX/mac}"), "http://c").unwrap_err();
        assert!(e.contains("no claim placeholder"), "{e}");
    }

    #[test]
    fn only_a_per_boot_iso_url_has_a_claim() {
        assert_eq!(claim_in("http://c/boot/media/zz/metal.iso"), None);
        assert_eq!(claim_in("http://tenant.example/their.iso"), None);
        assert_eq!(redact("http://tenant.example/their.iso".into()), "http://tenant.example/their.iso");
    }
}
