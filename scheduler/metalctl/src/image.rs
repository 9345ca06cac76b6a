//! `metalctl image` and `metalctl profile`, and `metalctl provision`: import images (with a
//! progress bar on a terminal while the controller downloads), promote and delete them;
//! create and version profiles; deploy machines by profile version.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use metalctl::client::{Client, ClientError, RequestBody};
use serde_json::{Value, json};

use metalctl::output::{Output, print, read_input};

const IMAGE_COLUMNS: [(&str, &str); 7] = [
    ("ID", "id"),
    ("NAME", "name"),
    ("TENANT", "tenantId"),
    ("PUBLIC", "public"),
    ("STATE", "state"),
    ("RAW BYTES", "rawSizeBytes"),
    ("ERROR", "error"),
];

const PROFILE_COLUMNS: [(&str, &str); 4] =
    [("ID", "id"), ("TENANT", "tenantId"), ("PUBLIC", "public"), ("LATEST VERSION", "latestVersion")];

#[derive(Subcommand, Debug)]
pub enum ImageCommand {
    /// Import an image: by --image-url with --checksum or --checksum-url, or by --catalog name. The
    /// controller downloads it (resuming dropped transfers), keeps it only when the digest
    /// matches, and converts it to its served form; this waits and shows progress unless
    /// --no-wait.
    Import {
        /// http(s):// URL of the image (raw, .gz, .xz, .zst or qcow2). (--url is the scheduler's.)
        #[arg(long, conflicts_with = "catalog")]
        image_url: Option<String>,
        /// SHA-256 or SHA-512 of the file at --image-url, in hex.
        #[arg(long, conflicts_with = "checksum_url")]
        checksum: Option<String>,
        /// URL of a checksum file (GNU or BSD form) that lists the image's file name.
        #[arg(long)]
        checksum_url: Option<String>,
        /// A name from the site catalog: ubuntu-26.04, ubuntu-24.04, ubuntu-22.04, debian-12,
        /// debian-13, rocky-9, almalinux-9.
        #[arg(long)]
        catalog: Option<String>,
        /// The architecture the image is for: amd64 (default) or arm64 (Grace-class machines);
        /// for --catalog, which of the catalog's images. A lease refuses an image whose
        /// architecture is not its machine's.
        #[arg(long)]
        arch: Option<String>,
        /// Image name (default: the catalog name or the URL's file name).
        #[arg(long)]
        name: Option<String>,
        /// Owning tenant (admins; default the platform's).
        #[arg(long)]
        tenant: Option<String>,
        /// Return as soon as the import is accepted.
        #[arg(long)]
        no_wait: bool,
    },
    /// List images (yours and the public ones).
    List,
    /// Show one image with its import progress.
    Show { id: String },
    /// Make an image public so every tenant's profiles may name it (platform only).
    Promote { id: String },
    /// Delete an image (refused while a profile version names it).
    Delete { id: String },
}

#[derive(Subcommand, Debug)]
pub enum ProfileCommand {
    /// Create a profile from a JSON file (- is stdin): {"id", "image", "sshAuthorizedKeys",
    /// "adminUser", "zone", "minCores", "minMemoryBytes", "minDiskBytes", "rootDeviceHints",
    /// "role", "deployMode", "cloudInit": {"packages", "timezone", "ntpServers"}}; it is
    /// version 1.
    Create { file: PathBuf },
    /// Add the next version of a profile from a JSON file (the same fields, without "id").
    Version { id: String, file: PathBuf },
    /// List profiles (yours and the public ones).
    List,
    /// Show a profile and every version.
    Show { id: String },
}

fn image_path(id: &str) -> String {
    format!("/v1/images/{id}")
}

/// Polls the image until its import ends; a progress bar on a terminal, a line per 10%
/// otherwise. Returns the final image.
fn wait_for(client: &Client, id: &str) -> Result<Value, ClientError> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let mut decile = None;
    loop {
        let image = client.request("GET", &image_path(id), None)?;
        let progress = &image["progress"];
        let (done, total) = (progress["bytesDone"].as_u64().unwrap_or(0), progress["bytesTotal"].as_u64());
        match &bar {
            Some(bar) => {
                bar.set_message(format!("importing {}", image["name"].as_str().unwrap_or(id)));
                bar.set_length(total.unwrap_or(done));
                bar.set_position(done);
            }
            None => {
                let now = total.filter(|t| *t > 0).map(|t| done * 10 / t);
                if now > decile {
                    decile = now;
                    eprintln!("{id}: {done} of {} bytes", total.map_or("?".into(), |t| t.to_string()));
                }
            }
        }
        if image["state"] != "importing" {
            if let Some(bar) = bar {
                bar.finish_and_clear();
            }
            return Ok(image);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

pub fn run_image(client: &Client, out: Output, command: ImageCommand) -> Result<(), ClientError> {
    match command {
        ImageCommand::Import { image_url, checksum, checksum_url, catalog, arch, name, tenant, no_wait } => {
            let body = json!({"url": image_url, "checksum": checksum, "checksumUrl": checksum_url, "catalog": catalog,
                              "architecture": arch, "name": name, "tenantId": tenant});
            let started = client.request("POST", "/v1/images", Some(RequestBody::Json(body)))?;
            let id = started["id"].as_str().unwrap_or_default().to_owned();
            if no_wait {
                print(out, &started, &IMAGE_COLUMNS);
                return Ok(());
            }
            let image = wait_for(client, &id)?;
            print(out, &image, &IMAGE_COLUMNS);
            if image["state"] != "ready" {
                return Err(ClientError::Config(format!(
                    "image {id} failed: {}",
                    image["error"].as_str().unwrap_or("no reason given")
                )));
            }
        }
        ImageCommand::List => print(out, &client.list("/v1/images", &[], None)?, &IMAGE_COLUMNS),
        ImageCommand::Show { id } => {
            let image = client.request("GET", &image_path(&id), None)?;
            match out {
                Output::Json => print(out, &image, &[]),
                Output::Table => {
                    print(out, &image, &IMAGE_COLUMNS);
                    let p = &image["progress"];
                    println!(
                        "origin {}\nprogress {} of {} bytes ({}%), {} B/s, {} attempts",
                        image["origin"]["url"].as_str().unwrap_or(""),
                        p["bytesDone"],
                        p["bytesTotal"],
                        p["percent"],
                        p["rateBytesPerSecond"],
                        image["attempts"]
                    );
                }
            }
        }
        ImageCommand::Promote { id } => {
            print(out, &client.request("POST", &format!("/v1/images/{id}/promote"), None)?, &IMAGE_COLUMNS)
        }
        ImageCommand::Delete { id } => {
            client.request("DELETE", &image_path(&id), None)?;
            println!("deleted image {id}");
        }
    }
    Ok(())
}

fn json_file(file: &std::path::Path) -> Result<Value, ClientError> {
    serde_json::from_str(&read_input(file)?)
        .map_err(|e| ClientError::Config(format!("{}: not JSON: {e}", file.display())))
}

pub fn run_profile(client: &Client, out: Output, command: ProfileCommand) -> Result<(), ClientError> {
    match command {
        ProfileCommand::Create { file } => {
            let body = json_file(&file)?;
            print(out, &client.request("POST", "/v1/profiles", Some(RequestBody::Json(body)))?, &PROFILE_COLUMNS);
        }
        ProfileCommand::Version { id, file } => {
            let body = json_file(&file)?;
            let path = format!("/v1/profiles/{id}/versions");
            print(out, &client.request("POST", &path, Some(RequestBody::Json(body)))?, &PROFILE_COLUMNS);
        }
        ProfileCommand::List => print(out, &client.list("/v1/profiles", &[], None)?, &PROFILE_COLUMNS),
        ProfileCommand::Show { id } => {
            let profile = client.request("GET", &format!("/v1/profiles/{id}"), None)?;
            match out {
                Output::Json => print(out, &profile, &[]),
                Output::Table => {
                    print(out, &profile, &PROFILE_COLUMNS);
                    print(
                        out,
                        &profile["versions"],
                        &[("VERSION", "version"), ("IMAGE", "imageId"), ("CREATED", "createdAt")],
                    );
                }
            }
        }
    }
    Ok(())
}

/// A `PROFILE:VERSION` argument: the profile and its version.
pub fn profile_version(profile: &str) -> Result<(&str, u32), ClientError> {
    let (id, version) =
        profile.split_once(':').ok_or_else(|| ClientError::Config("the profile is PROFILE:VERSION".into()))?;
    let version =
        version.parse().map_err(|_| ClientError::Config(format!("profile version {version:?} is not a number")))?;
    Ok((id, version))
}

/// `metalctl provision PROFILE:VERSION --count N`.
pub fn run_provision(client: &Client, out: Output, profile: &str, count: u32) -> Result<(), ClientError> {
    let (id, version) = profile_version(profile)?;
    let body = json!({"profileId": id, "profileVersion": version, "count": count});
    let outcome = client.request("POST", "/v1/provision", Some(RequestBody::Json(body)))?;
    match out {
        Output::Json => print(out, &outcome, &[]),
        Output::Table => print(out, &outcome["boots"], &[("NODE", "node"), ("OK", "ok"), ("BOOT", "outcome")]),
    }
    Ok(())
}
