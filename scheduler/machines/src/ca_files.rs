//! The site CA on disk: `ca.crt` (PEM, public) and `ca.key` (PKCS#8 PEM, mode 0600) in one
//! directory, and role identities issued from it as `PREFIX.key` + `PREFIX.crt`.
//!
//! Files are written to a temporary name and renamed, keys are created with mode 0600 from
//! the start (never chmod'ed after the fact), and an existing CA is never overwritten.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ed25519_dalek::SigningKey;
use metal_protocol::identity::{pem_encode, signing_key_pem};
use metal_protocol::{IdentityError, Role, SiteCa};

/// File name of the CA certificate inside the CA directory.
pub const CA_CERT_FILE: &str = "ca.crt";
/// File name of the CA private key inside the CA directory.
pub const CA_KEY_FILE: &str = "ca.key";

/// Why a CA file operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CaFileError {
    /// A CA already exists where a new one was to be created.
    #[error("a site CA already exists in {0} (refusing to overwrite it)")]
    Exists(PathBuf),
    /// The directory holds no CA.
    #[error("no site CA in {0}: create one with `metal-scheduler ca init --dir {0}`")]
    Missing(PathBuf),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Key or certificate material was invalid.
    #[error(transparent)]
    Identity(#[from] IdentityError),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> CaFileError + '_ {
    move |source| CaFileError::Io { path: path.to_owned(), source }
}

/// Writes `contents` to `path` atomically (temp file + rename) with the given mode.
fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), CaFileError> {
    let tmp = path.with_extension("tmp");
    let mut file: File =
        OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(io_error(&tmp))?;
    file.write_all(contents).and_then(|()| file.sync_all()).map_err(io_error(&tmp))?;
    fs::rename(&tmp, path).map_err(io_error(path))
}

/// Creates a new site CA in `dir` (created if needed). Refuses when a CA is already there.
pub fn init(dir: &Path, site: &str, validity: Duration) -> Result<SiteCa, CaFileError> {
    let (cert_path, key_path) = (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE));
    if cert_path.exists() || key_path.exists() {
        return Err(CaFileError::Exists(dir.to_owned()));
    }
    fs::create_dir_all(dir).map_err(io_error(dir))?;
    let ca = SiteCa::create(site, metal_clock::now(), validity)?;
    write_file(&key_path, ca.key_pem()?.as_bytes(), 0o600)?;
    write_file(&cert_path, ca.certificate().pem().as_bytes(), 0o644)?;
    Ok(ca)
}

/// Loads the site CA from `dir`.
pub fn load(dir: &Path) -> Result<SiteCa, CaFileError> {
    let (cert_path, key_path) = (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE));
    if !cert_path.exists() || !key_path.exists() {
        return Err(CaFileError::Missing(dir.to_owned()));
    }
    let cert = fs::read_to_string(&cert_path).map_err(io_error(&cert_path))?;
    let key = zeroize::Zeroizing::new(fs::read_to_string(&key_path).map_err(io_error(&key_path))?);
    Ok(SiteCa::from_pem(&cert, &key)?)
}

/// Loads the site CA from `dir`, creating it (valid ten years) on first start; true when
/// it was created.
pub fn open_or_init(dir: &Path, site: &str) -> Result<(SiteCa, bool), CaFileError> {
    match load(dir) {
        Ok(ca) => Ok((ca, false)),
        Err(CaFileError::Missing(_)) => Ok((init(dir, site, Duration::from_secs(3650 * 86400))?, true)),
        Err(e) => Err(e),
    }
}

/// What to issue.
#[derive(Debug, Clone)]
pub struct IssueRequest<'a> {
    /// The holder's role.
    pub role: Role,
    /// The node id.
    pub node: &'a str,
    /// The node's identity generation.
    pub generation: u64,
    /// How long the certificate is valid from now.
    pub validity: Duration,
}

/// Paths written by [`issue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedFiles {
    /// The new private key (mode 0600).
    pub key: PathBuf,
    /// The certificate chain: the role certificate, then the CA certificate.
    pub cert: PathBuf,
}

/// Generates a key pair and issues a role certificate for it, writing `PREFIX.key` and
/// `PREFIX.crt` (the chain, leaf first). Refuses to overwrite either file.
pub fn issue(ca: &SiteCa, request: &IssueRequest<'_>, prefix: &Path) -> Result<IssuedFiles, CaFileError> {
    let files = IssuedFiles { key: suffixed(prefix, "key"), cert: suffixed(prefix, "crt") };
    for path in [&files.key, &files.cert] {
        if path.exists() {
            return Err(CaFileError::Io {
                path: path.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "file exists (refusing to overwrite it)",
                ),
            });
        }
    }
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let der = ca.issue(
        &key.verifying_key(),
        request.node,
        request.generation,
        request.role,
        metal_clock::now(),
        request.validity,
    )?;
    let chain = format!("{}{}", pem_encode("CERTIFICATE", &der), ca.certificate().pem());
    write_file(&files.key, signing_key_pem(&key)?.as_bytes(), 0o600)?;
    write_file(&files.cert, chain.as_bytes(), 0o644)?;
    Ok(files)
}

fn suffixed(prefix: &Path, extension: &str) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(".");
    name.push(extension);
    PathBuf::from(name)
}
