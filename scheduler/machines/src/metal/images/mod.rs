//! The image store: where imported images live on disk, the site catalog and the background
//! import (`import`). `metal-api`'s `files` serves them, ranged, to deploying ramdisks.
//!
//! Files in the image directory: `ID.part` while downloading (resumed from its length),
//! `ID.raw` while a qcow2 is converted, `ID.zst.tmp` while the served form is written, and
//! `ID.zst`, the served form, only once everything checked out (renamed into place).

pub mod import;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::app::StartError;
use metal_types::config::Config;
use metal_types::model::image::{Catalog, DEFAULT_CATALOG};

/// Chunk size of the served form and of the plans derived from it (one zstd frame each).
pub const CHUNK_SIZE: u64 = 4 << 20;
/// zstd level of the served form.
pub const LEVEL: i32 = 3;
/// Imports running at once; the rest wait.
const PARALLEL_IMPORTS: usize = 2;

/// The image store's state.
#[derive(Debug)]
pub struct ImageService {
    /// Where image files live.
    pub dir: PathBuf,
    /// The site catalog.
    pub catalog: Catalog,
    /// Downloads: the public web roots plus `image-ca-file`.
    pub client: reqwest::Client,
    /// This process's name as an import owner.
    pub owner: String,
    /// Bounds the imports running at once.
    pub slots: Arc<tokio::sync::Semaphore>,
}

impl ImageService {
    /// Opens the store: creates the directory, reads the catalog and the extra CAs.
    pub fn open(config: &Config) -> Result<ImageService, StartError> {
        let dir = config.images.dir.clone().unwrap_or_else(|| config.data_dir.join("images"));
        std::fs::create_dir_all(&dir)
            .map_err(|source| StartError::DataDir { path: dir.display().to_string(), source })?;
        let catalog = match &config.images.catalog {
            None => Catalog::parse(DEFAULT_CATALOG),
            Some(path) => {
                std::fs::read_to_string(path).map_err(|e| e.to_string()).and_then(|text| Catalog::parse(&text))
            }
        }
        .map_err(|e| StartError::Images(format!("image catalog: {e}")))?;
        let mut builder = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(30))
            .read_timeout(std::time::Duration::from_secs(60))
            .user_agent(concat!("metal-scheduler/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &config.images.ca_file {
            let pem = std::fs::read(path).map_err(|e| StartError::Images(format!("{}: {e}", path.display())))?;
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| StartError::Images(format!("{}: {e}", path.display())))?;
            if certificates.is_empty() {
                return Err(StartError::Images(format!("{}: no PEM certificate in it", path.display())));
            }
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let client = builder.build().map_err(|e| StartError::Images(format!("HTTP client: {e}")))?;
        Ok(ImageService {
            dir,
            catalog,
            client,
            owner: format!("import-{}", uuid::Uuid::new_v4().simple()),
            slots: Arc::new(tokio::sync::Semaphore::new(PARALLEL_IMPORTS)),
        })
    }

    /// A file of image `id` with `suffix` (`part`, `raw`, `zst.tmp`, `zst`).
    pub fn file(&self, id: &str, suffix: &str) -> PathBuf {
        self.dir.join(format!("{id}.{suffix}"))
    }

    /// The served file of image `id`.
    pub fn served(&self, id: &str) -> PathBuf {
        self.file(id, "zst")
    }

    /// Removes every file of image `id`.
    pub fn remove_files(&self, id: &str) {
        for suffix in ["part", "raw", "zst.tmp", "zst"] {
            remove_quietly(&self.file(id, suffix));
        }
    }
}

/// Removes a file that may not exist.
pub fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "could not remove an image file");
    }
}
