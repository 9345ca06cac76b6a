//! Images: what an import asks for (a URL with a checksum or a checksum-file URL, or a
//! catalog name), the stored image with its progress, and the pure parsers the import
//! needs (checksum files in GNU and BSD form, the site catalog).
//!
//! The one design decision: the checksum is what upstream publishes for the file as
//! downloaded; the controller keeps the file only when the streamed digest matches it, and
//! then stores the image in its served form with a deploy plan of its own.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use metal_protocol::deploy::{ChunkManifest, Digest, DigestAlgorithm, ImageSource};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;

/// Where an import is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ImageState {
    /// Downloading, verifying or converting.
    Importing,
    /// Verified and stored in its served form; deployable.
    Ready,
    /// The import ended without an image (the reason is in `error`).
    Failed,
}

impl ImageState {
    /// Name as in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageState::Importing => "importing",
            ImageState::Ready => "ready",
            ImageState::Failed => "failed",
        }
    }
}

impl fmt::Display for ImageState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ImageState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [ImageState::Importing, ImageState::Ready, ImageState::Failed]
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown image state {s:?}"))
    }
}

/// Imports an image: `url` with `checksum` or `checksumUrl`, or `catalog` (with an
/// architecture).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageImport {
    /// Name, unique in the tenant (defaults to the catalog name, or the URL's file name).
    #[serde(default)]
    pub name: Option<String>,
    /// Owning tenant (admins only; a tenant imports into its own).
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// `http(s)://` URL of the image file.
    #[serde(default)]
    pub url: Option<String>,
    /// SHA-256 (64 hex digits) or SHA-512 (128) of the file at `url`.
    #[serde(default)]
    pub checksum: Option<String>,
    /// URL of a checksum file (GNU `hex  name` or BSD `SHA256 (name) = hex` lines).
    #[serde(default)]
    pub checksum_url: Option<String>,
    /// A name of the site catalog, e.g. `ubuntu-24.04`.
    #[serde(default)]
    pub catalog: Option<String>,
    /// The architecture the image is for, as Debian names it: `amd64` (default) or `arm64`
    /// (for a catalog import, which of the catalog's images).
    #[serde(default)]
    pub architecture: Option<String>,
}

/// Where an image comes from, resolved at import (what is stored and shown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageOrigin {
    /// The image file's URL.
    pub url: String,
    /// The expected digest, when given directly (else read from `checksumUrl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub checksum: Option<Digest>,
    /// The checksum file's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_url: Option<String>,
    /// The catalog name it was imported by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog: Option<String>,
    /// The architecture the image is for (`amd64` or `arm64`; none on images imported before
    /// it was recorded, which are amd64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

impl ImageOrigin {
    /// The machine architecture the image runs on, as a node's inventory names it
    /// (`x86_64`, `aarch64`).
    pub fn machine_architecture(&self) -> &'static str {
        match self.architecture.as_deref() {
            Some("arm64") => "aarch64",
            _ => "x86_64",
        }
    }
}

/// Download progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageProgress {
    /// Bytes of the source file downloaded so far.
    pub bytes_done: u64,
    /// The source file's size, once the server said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_total: Option<u64>,
    /// Percent done, when the size is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// Current download rate in bytes per second.
    pub rate_bytes_per_second: u64,
}

/// The stored image's deploy plan parts: the served file and its chunk manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImagePlan {
    /// The served file (its URL is set when a plan is derived for a node).
    pub image: ImageSource,
    /// Per-chunk digests of the raw image.
    pub chunks: ChunkManifest,
}

/// An image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// Id.
    pub id: String,
    /// Row generation.
    pub generation: i64,
    /// Owning tenant.
    pub tenant_id: String,
    /// Name, unique in the tenant.
    pub name: String,
    /// Promoted by the platform: every tenant's profiles may name it.
    pub public: bool,
    /// Where the import is.
    pub state: ImageState,
    /// Where it comes from.
    pub origin: ImageOrigin,
    /// Download progress.
    pub progress: ImageProgress,
    /// Download attempts so far.
    pub attempts: u64,
    /// Why the import failed (or why the last attempt did, while it retries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The downloaded file's format (`raw`, `gzip`, `xz`, `zstd`, `qcow2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_format: Option<String>,
    /// Size of the served (seekable zstd) file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_size_bytes: Option<u64>,
    /// Size of the raw disk image (what lands on a disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_size_bytes: Option<u64>,
    /// SHA-256 of the served file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_sha256: Option<String>,
    /// When the import was asked for.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: time::OffsetDateTime,
    /// Last change.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: time::OffsetDateTime,
}

/// Architectures the catalog knows.
pub const ARCHITECTURES: [&str; 2] = ["amd64", "arm64"];

/// Checks a resource name: 1 to 63 of `a-z 0-9 . _ -`, starting with a letter or digit.
pub fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!("{name:?}: use 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit"),
        ))
    }
}

/// Checks an `http(s)://` URL with a host.
pub fn check_url(field: &str, url: &str) -> Result<url::Url, ApiError> {
    let parsed = url::Url::parse(url).map_err(|e| ApiError::invalid(field, format!("{url:?}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(ApiError::invalid(field, format!("{url:?}: must be an http:// or https:// URL with a host")));
    }
    Ok(parsed)
}

/// A hex digest whose algorithm its length tells: 64 digits SHA-256, 128 SHA-512.
pub fn parse_digest(hex: &str) -> Result<Digest, String> {
    let hex = hex.trim().to_ascii_lowercase();
    let algorithm = match hex.len() {
        64 => DigestAlgorithm::Sha256,
        128 => DigestAlgorithm::Sha512,
        n => return Err(format!("a checksum is 64 (SHA-256) or 128 (SHA-512) hex digits, this one has {n}")),
    };
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("a checksum is hex digits only".into());
    }
    Ok(Digest { algorithm, hex })
}

/// The file name at the end of a URL's path.
pub fn file_name(url: &url::Url) -> String {
    url.path_segments().and_then(|mut s| s.next_back()).unwrap_or_default().to_owned()
}

/// The digest of `name` in a checksum file: GNU `hex  name` / `hex *name` lines or BSD
/// `SHA256 (name) = hex` lines; comments and PGP armour are skipped. A file with a single
/// entry that names no file (`hex` alone) is that file's digest.
pub fn parse_checksum_file(text: &str, name: &str) -> Result<Digest, String> {
    let mut entries = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with("-----") || line.contains(": ") {
            continue;
        }
        if let Some((left, hex)) = line.rsplit_once(" = ") {
            // BSD: ALGO (name) = hex
            let Some((_, rest)) = left.split_once(" (") else { continue };
            let Some(file) = rest.strip_suffix(')') else { continue };
            entries.push((Some(file.to_owned()), hex.to_owned()));
        } else {
            let mut parts = line.splitn(2, char::is_whitespace);
            let hex = parts.next().unwrap_or_default();
            let file = parts.next().map(|f| f.trim_start().trim_start_matches('*').to_owned());
            if hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                entries.push((file, hex.to_owned()));
            }
        }
    }
    let found = match entries.iter().find(|(file, _)| file.as_deref() == Some(name)) {
        Some((_, hex)) => hex,
        None if entries.len() == 1 && entries[0].0.is_none() => &entries[0].1,
        None => return Err(format!("the checksum file has no line for {name:?} ({} other entries)", entries.len())),
    };
    parse_digest(found).map_err(|e| format!("the checksum file's line for {name:?}: {e}"))
}

/// One catalog image for one architecture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct CatalogEntry {
    /// The image file.
    pub url: String,
    /// The checksum file that lists it.
    pub checksum_url: String,
}

/// The site catalog: name -> architecture -> where to fetch. A site points it at its mirror
/// (`image-catalog` in the configuration, a TOML file of `[name.arch]` tables).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Catalog(pub BTreeMap<String, BTreeMap<String, CatalogEntry>>);

/// The catalog shipped with metal: the upstream cloud images.
pub const DEFAULT_CATALOG: &str = include_str!("../../catalog.toml");

impl Catalog {
    /// Parses a catalog file.
    pub fn parse(text: &str) -> Result<Catalog, String> {
        let catalog: Catalog = toml::from_str(text).map_err(|e| e.to_string())?;
        for (name, arches) in &catalog.0 {
            check_name("catalog", name).map_err(|e| e.to_string())?;
            for (arch, entry) in arches {
                check_url("url", &entry.url).map_err(|e| format!("{name}.{arch}: {e}"))?;
                check_url("checksum-url", &entry.checksum_url).map_err(|e| format!("{name}.{arch}: {e}"))?;
            }
        }
        Ok(catalog)
    }

    /// The entry for `name` on `arch`, or an error listing what the catalog has.
    pub fn lookup(&self, name: &str, arch: &str) -> Result<&CatalogEntry, ApiError> {
        let Some(arches) = self.0.get(name) else {
            let known: Vec<&str> = self.0.keys().map(String::as_str).collect();
            return Err(ApiError::invalid(
                "catalog",
                format!("no catalog image {name:?}; the catalog has {}", known.join(", ")),
            ));
        };
        arches.get(arch).ok_or_else(|| {
            let known: Vec<&str> = arches.keys().map(String::as_str).collect();
            ApiError::invalid("architecture", format!("{name} has no {arch:?} image; it has {}", known.join(", ")))
        })
    }
}

impl ImageImport {
    /// The architecture the image is for: `amd64` unless the request says `arm64`.
    fn architecture(&self) -> Result<&str, ApiError> {
        let arch = self.architecture.as_deref().unwrap_or("amd64");
        if !ARCHITECTURES.contains(&arch) {
            return Err(ApiError::invalid("architecture", format!("{arch:?}: use amd64 or arm64")));
        }
        Ok(arch)
    }

    /// Checks the request and resolves it against the catalog: the origin and the name.
    pub fn resolve(&self, catalog: &Catalog) -> Result<(ImageOrigin, String), ApiError> {
        match (&self.url, &self.catalog) {
            (Some(_), Some(_)) => Err(ApiError::invalid("catalog", "give either url or catalog, not both")),
            (None, None) => Err(ApiError::invalid("url", "give url (with checksum or checksumUrl) or catalog")),
            (None, Some(name)) => {
                if self.checksum.is_some() || self.checksum_url.is_some() {
                    return Err(ApiError::invalid("checksum", "a catalog image's checksum comes from the catalog"));
                }
                let arch = self.architecture()?;
                let entry = catalog.lookup(name, arch)?;
                let default_name = if arch == "amd64" { name.clone() } else { format!("{name}-{arch}") };
                let origin = ImageOrigin {
                    url: entry.url.clone(),
                    checksum: None,
                    checksum_url: Some(entry.checksum_url.clone()),
                    catalog: Some(name.clone()),
                    architecture: Some(arch.to_owned()),
                };
                Ok((origin, self.name.clone().unwrap_or(default_name)))
            }
            (Some(url), None) => {
                let arch = self.architecture()?;
                let parsed = check_url("url", url)?;
                let checksum = match (&self.checksum, &self.checksum_url) {
                    (Some(_), Some(_)) => {
                        return Err(ApiError::invalid("checksumUrl", "give either checksum or checksumUrl, not both"));
                    }
                    (None, None) => {
                        return Err(ApiError::invalid(
                            "checksum",
                            "an image imported by URL needs checksum or checksumUrl",
                        ));
                    }
                    (Some(hex), None) => Some(parse_digest(hex).map_err(|e| ApiError::invalid("checksum", e))?),
                    (None, Some(checksum_url)) => {
                        check_url("checksumUrl", checksum_url)?;
                        None
                    }
                };
                let name = match &self.name {
                    Some(name) => name.clone(),
                    None => default_name_of(&file_name(&parsed)),
                };
                let origin = ImageOrigin {
                    url: url.clone(),
                    checksum,
                    checksum_url: self.checksum_url.clone(),
                    catalog: None,
                    architecture: Some(arch.to_owned()),
                };
                Ok((origin, name))
            }
        }
        .and_then(|(origin, name)| {
            check_name("name", &name)?;
            Ok((origin, name))
        })
    }
}

/// A default image name from a file name: lower case, unknown characters as '-'.
fn default_name_of(file: &str) -> String {
    let name: String = file
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' })
        .take(63)
        .collect();
    if name.is_empty() { "image".into() } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";

    #[test]
    fn checksum_files_in_gnu_and_bsd_form() {
        let gnu = format!("{}  other.img\n{A} *noble.img\n", "0".repeat(64));
        assert_eq!(parse_checksum_file(&gnu, "noble.img").unwrap().hex, A);
        let bsd = format!(
            "# Rocky-9-GenericCloud\nSHA256 (Rocky-9-GenericCloud.qcow2) = {A}\nSHA256 (other) = {}\n",
            "1".repeat(64)
        );
        let digest = parse_checksum_file(&bsd, "Rocky-9-GenericCloud.qcow2").unwrap();
        assert_eq!((digest.algorithm, digest.hex.as_str()), (DigestAlgorithm::Sha256, A));
        let sha512 = format!("{}  debian-12.qcow2\n", "ab".repeat(64));
        assert_eq!(parse_checksum_file(&sha512, "debian-12.qcow2").unwrap().algorithm, DigestAlgorithm::Sha512);
        let armoured =
            format!("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n{A}  x.img\n-----BEGIN PGP SIGNATURE-----\n");
        assert_eq!(parse_checksum_file(&armoured, "x.img").unwrap().hex, A);
        assert_eq!(parse_checksum_file(&format!("{A}\n"), "any").unwrap().hex, A, "a bare digest");
        let missing = parse_checksum_file(&gnu, "nope.img").unwrap_err();
        assert!(missing.contains("\"nope.img\"") && missing.contains("2 other"), "{missing}");
        let short = parse_checksum_file("abc  x.img\n", "x.img").unwrap_err();
        assert!(short.contains("64 (SHA-256)"), "{short}");
    }

    #[test]
    fn digests_by_length() {
        assert_eq!(parse_digest(&A.to_uppercase()).unwrap().hex, A);
        assert!(parse_digest("zz").is_err());
        assert!(parse_digest(&"g".repeat(64)).unwrap_err().contains("hex"));
    }

    #[test]
    fn the_default_catalog_has_every_image_of_the_seed() {
        let catalog = Catalog::parse(DEFAULT_CATALOG).unwrap();
        for name in ["ubuntu-26.04", "ubuntu-24.04", "ubuntu-22.04", "debian-12", "debian-13", "rocky-9", "almalinux-9"]
        {
            for arch in ARCHITECTURES {
                catalog.lookup(name, arch).unwrap_or_else(|e| panic!("{name} {arch}: {e}"));
            }
        }
        let e = catalog.lookup("windows-11", "amd64").unwrap_err().to_string();
        assert!(e.contains("ubuntu-24.04"), "{e}");
    }

    #[test]
    fn imports_resolve_or_name_the_problem() {
        let catalog = Catalog::parse(DEFAULT_CATALOG).unwrap();
        let by_name = ImageImport { catalog: Some("debian-12".into()), ..Default::default() };
        let (origin, name) = by_name.resolve(&catalog).unwrap();
        assert_eq!(name, "debian-12");
        assert!(origin.checksum_url.is_some());
        let arm = ImageImport { architecture: Some("arm64".into()), ..by_name.clone() };
        assert_eq!(arm.resolve(&catalog).unwrap().1, "debian-12-arm64");
        let by_url = ImageImport {
            url: Some("https://mirror.example/img/Noble-Server.IMG".into()),
            checksum: Some(A.into()),
            ..Default::default()
        };
        let (origin, name) = by_url.resolve(&catalog).unwrap();
        assert_eq!((name.as_str(), origin.machine_architecture()), ("noble-server.img", "x86_64"));
        // An image by URL says what it is for; arm64 runs on aarch64 machines.
        let arm_url = ImageImport { architecture: Some("arm64".into()), ..by_url.clone() };
        let (origin, _) = arm_url.resolve(&catalog).unwrap();
        assert_eq!((origin.architecture.as_deref(), origin.machine_architecture()), (Some("arm64"), "aarch64"));
        let before = ImageOrigin { architecture: None, ..origin };
        assert_eq!(before.machine_architecture(), "x86_64", "images from before the field are amd64");
        for (request, field) in [
            (ImageImport::default(), "url"),
            (ImageImport { checksum: None, ..by_url.clone() }, "checksum"),
            (ImageImport { checksum: Some("12".into()), ..by_url.clone() }, "checksum"),
            (ImageImport { url: Some("ftp://x/y".into()), ..by_url.clone() }, "url"),
            (ImageImport { checksum_url: Some("https://x/SUMS".into()), ..by_url.clone() }, "checksumUrl"),
            (ImageImport { catalog: Some("debian-12".into()), ..by_url.clone() }, "catalog"),
            (ImageImport { architecture: Some("riscv".into()), ..by_name.clone() }, "architecture"),
            (ImageImport { architecture: Some("aarch64".into()), ..by_url.clone() }, "architecture"),
            (ImageImport { name: Some("Bad Name".into()), ..by_name.clone() }, "name"),
        ] {
            match request.resolve(&catalog) {
                Err(ApiError::InvalidInput { field: f, .. }) => assert_eq!(f, field, "{request:?}"),
                other => panic!("{request:?}: {other:?}"),
            }
        }
    }
}
