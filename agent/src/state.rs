//! The agent's files in the configuration directory (`protocol::join::CONFIG_DIR`): what the
//! seed left (controller URL, site CA and its pin, the enrolment token) and what the join
//! made (the host's key, mode 0600, and its certificate chain). Every write goes to a
//! temporary file first and is renamed into place, so a crash leaves the old file or the new.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use metal_protocol::identity::{certificates_from_pem, signing_key_from_pem, signing_key_pem};
use metal_protocol::join::{CA_FILE, CA_SHA256_FILE, CONTROLLER_URL_FILE, TOKEN_FILE};
use metal_protocol::{CaCertificate, SigningKey};

/// The host's private key, under the configuration directory.
pub const KEY_FILE: &str = "agent/key.pem";
/// The host's certificate chain (leaf, then the site CA), under the configuration directory.
pub const CERT_FILE: &str = "agent/cert.pem";
/// A setup report the controller has not acknowledged yet, under the configuration directory.
pub const PENDING_REPORT_FILE: &str = "agent/setup-report.json";

/// Why the agent's files are unusable.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file could not be read or written.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// A file holds something it must not.
    #[error("{0}")]
    Invalid(String),
}

/// The configuration directory.
#[derive(Debug, Clone)]
pub struct ConfigDir(pub PathBuf);

fn file_error(path: &Path, e: impl std::fmt::Display) -> StateError {
    StateError::File { path: path.display().to_string(), message: e.to_string() }
}

impl ConfigDir {
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn read(&self, name: &str) -> Result<String, StateError> {
        let path = self.path(name);
        std::fs::read_to_string(&path).map_err(|e| file_error(&path, e))
    }

    /// The controller's base URL (`https://...`, no trailing slash).
    pub fn controller_url(&self) -> Result<String, StateError> {
        let url = self.read(CONTROLLER_URL_FILE)?.trim().trim_end_matches('/').to_owned();
        if !url.starts_with("https://") {
            return Err(StateError::Invalid(format!("{CONTROLLER_URL_FILE}: {url:?} is not an https:// URL")));
        }
        Ok(url)
    }

    /// The pinned site CA: `ca.pem`, checked against the fingerprint in `ca.sha256`.
    pub fn site_ca(&self) -> Result<(CaCertificate, [u8; 32]), StateError> {
        let pin_text = self.read(CA_SHA256_FILE)?;
        let pin = metal_bmc::tls::parse_fingerprint(pin_text.trim())
            .map_err(|e| StateError::Invalid(format!("{CA_SHA256_FILE}: {e}")))?;
        let ca = CaCertificate::from_pem(&self.read(CA_FILE)?)
            .map_err(|e| StateError::Invalid(format!("{CA_FILE}: {e}")))?;
        if metal_bmc::tls::fingerprint(ca.der()) != pin {
            return Err(StateError::Invalid(format!(
                "{CA_FILE} is not the CA pinned in {CA_SHA256_FILE}; not trusting it"
            )));
        }
        Ok((ca, pin))
    }

    /// The enrolment token, when the host has not joined yet.
    pub fn token(&self) -> Result<Option<String>, StateError> {
        Ok(self.read_optional(TOKEN_FILE)?.map(|text| text.trim().to_owned()))
    }

    /// Removes the used token.
    pub fn remove_token(&self) -> Result<(), StateError> {
        self.remove(TOKEN_FILE)
    }

    /// Removes a file, if it is there.
    pub fn remove(&self, name: &str) -> Result<(), StateError> {
        let path = self.path(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(file_error(&path, e)),
            _ => Ok(()),
        }
    }

    /// A file's text, if it is there.
    pub fn read_optional(&self, name: &str) -> Result<Option<String>, StateError> {
        let path = self.path(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(file_error(&path, e)),
        }
    }

    /// Writes `bytes` to `name` with `mode`, through a temporary file renamed into place.
    pub fn write(&self, name: &str, bytes: &[u8], mode: u32) -> Result<(), StateError> {
        let path = self.path(name);
        let dir = path.parent().unwrap_or(&self.0);
        std::fs::create_dir_all(dir).map_err(|e| file_error(dir, e))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| file_error(dir, e))?;
        let temporary = path.with_extension("part");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temporary)
            .map_err(|e| file_error(&temporary, e))?;
        file.write_all(bytes).and_then(|()| file.sync_all()).map_err(|e| file_error(&temporary, e))?;
        std::fs::rename(&temporary, &path).map_err(|e| file_error(&path, e))?;
        // The rename is durable only once the directory is.
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| file_error(dir, e))
    }

    /// Writes the join's inputs the agent keeps using (controller URL, site CA, its pin)
    /// again, durably: the seed's copies were written without a flush, and a machine that
    /// loses power after its first boot must still know its controller.
    pub fn persist_inputs(&self) -> Result<(), StateError> {
        for name in [CONTROLLER_URL_FILE, CA_FILE, CA_SHA256_FILE] {
            let bytes = self.read(name)?;
            self.write(name, bytes.as_bytes(), 0o644)?;
        }
        Ok(())
    }

    /// The host's key, if it has one.
    pub fn key(&self) -> Result<Option<SigningKey>, StateError> {
        let path = self.path(KEY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(pem) => {
                let key = zeroize::Zeroizing::new(pem);
                signing_key_from_pem(&key).map(Some).map_err(|e| StateError::Invalid(format!("{KEY_FILE}: {e}")))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(file_error(&path, e)),
        }
    }

    /// Saves the host's key (mode 0600).
    pub fn save_key(&self, key: &SigningKey) -> Result<(), StateError> {
        let pem = signing_key_pem(key).map_err(|e| StateError::Invalid(format!("encoding the key: {e}")))?;
        self.write(KEY_FILE, pem.as_bytes(), 0o600)
    }

    /// The host's certificate chain (PEM), if it has one.
    pub fn chain_pem(&self) -> Result<Option<String>, StateError> {
        let path = self.path(CERT_FILE);
        match std::fs::read_to_string(&path) {
            Ok(pem) => {
                certificates_from_pem(&pem).map_err(|e| StateError::Invalid(format!("{CERT_FILE}: {e}")))?;
                Ok(Some(pem))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(file_error(&path, e)),
        }
    }

    /// Saves the host's certificate chain.
    pub fn save_chain(&self, pem: &str) -> Result<(), StateError> {
        self.write(CERT_FILE, pem.as_bytes(), 0o644)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_written_0600_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let config = ConfigDir(dir.path().to_path_buf());
        assert!(config.key().unwrap().is_none());
        let key = SigningKey::generate(&mut rand::rngs::OsRng);
        config.save_key(&key).unwrap();
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(config.key().unwrap().unwrap().to_bytes(), key.to_bytes());
        assert!(!dir.path().join("agent/key.part").exists());
    }

    #[test]
    fn a_ca_that_is_not_the_pinned_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = ConfigDir(dir.path().to_path_buf());
        let year = std::time::Duration::from_secs(365 * 86400);
        let ca = metal_protocol::SiteCa::create("site-a", std::time::SystemTime::now(), year).unwrap();
        std::fs::write(dir.path().join(CA_FILE), ca.certificate().pem()).unwrap();
        std::fs::write(dir.path().join(CA_SHA256_FILE), format!("{}\n", ca.certificate().fingerprint_sha256()))
            .unwrap();
        config.site_ca().unwrap();
        std::fs::write(dir.path().join(CA_SHA256_FILE), "ab".repeat(32)).unwrap();
        let e = config.site_ca().unwrap_err().to_string();
        assert!(e.contains("not the CA pinned"), "{e}");
    }
}
