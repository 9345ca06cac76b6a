//! The reflash flow against a Redfish test double, for what sushy-tools cannot show: a
//! firmware inventory with BMC, BIOS and GPU items, a multipart push whose image decides the
//! new version, updates that apply only after a reset, drift that survives an update, and
//! a failing update task. Also: nothing reaches the BMC when an image is missing or fails
//! its checksum, or when the policy is `quarantine`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metal_bmc::redfish::{RedfishBmc, RedfishConfig, Timing};
use metal_bmc::tls::TlsTrust;
use metal_bmc::{Credential, PowerState};
use metal_firmware::image::FetchOptions;
use metal_firmware::reflash::{Code, FirmwareImage, FirmwarePolicy, FirmwareRemediation, Outcome, remediate};
use serde_json::{Value, json};
use sha2::Digest as _;

/// What an accepted push does.
#[derive(Clone, Copy, PartialEq)]
enum Apply {
    /// The new version shows at once.
    Immediate,
    /// The new version shows after the next power-on; the task says a reset is required.
    OnReset,
    /// The task completes but the version never changes.
    Sticky,
    /// The task ends in Exception.
    Fails,
}

struct Double {
    apply: Apply,
    power: PowerState,
    /// Inventory id -> version.
    versions: BTreeMap<&'static str, String>,
    pending: Vec<(&'static str, String)>,
    /// Every push: (targets, image bytes).
    pushes: Vec<(Vec<String>, Vec<u8>)>,
    resets: Vec<String>,
    tasks: HashMap<String, Value>,
}

type Shared = Arc<Mutex<Double>>;

const INVENTORY: &str = "/redfish/v1/UpdateService/FirmwareInventory";

fn ok(body: Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn item_name(id: &str) -> &'static str {
    match id {
        "BMC" => "BMC Firmware",
        "BIOS" => "System BIOS",
        _ => "NVIDIA H100 VBIOS",
    }
}

async fn system(State(s): State<Shared>) -> Response {
    let d = s.lock().unwrap();
    ok(json!({"Id": "1", "PowerState": if d.power == PowerState::On { "On" } else { "Off" },
              "BiosVersion": d.versions["BIOS"],
              "Actions": {"#ComputerSystem.Reset": {"target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                          "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "PowerCycle"]}}}))
}

async fn reset(State(s): State<Shared>, body: axum::Json<Value>) -> Response {
    let mut d = s.lock().unwrap();
    let kind = body["ResetType"].as_str().unwrap_or_default().to_owned();
    if matches!(kind.as_str(), "On" | "PowerCycle") {
        d.power = PowerState::On;
        for (id, version) in std::mem::take(&mut d.pending) {
            d.versions.insert(id, version);
        }
    } else {
        d.power = PowerState::Off;
    }
    d.resets.push(kind);
    StatusCode::NO_CONTENT.into_response()
}

async fn inventory(State(s): State<Shared>) -> Response {
    let d = s.lock().unwrap();
    let members: Vec<Value> = d.versions.keys().map(|id| json!({"@odata.id": format!("{INVENTORY}/{id}")})).collect();
    ok(json!({"Members": members}))
}

async fn inventory_item(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    let d = s.lock().unwrap();
    let Some(version) = d.versions.get(id.as_str()) else { return StatusCode::NOT_FOUND.into_response() };
    ok(
        json!({"@odata.id": format!("{INVENTORY}/{id}"), "Id": id, "Name": item_name(&id), "Version": version, "Updateable": true}),
    )
}

async fn push(State(s): State<Shared>, mut form: axum::extract::Multipart) -> Response {
    let (mut targets, mut image) = (Vec::new(), Vec::new());
    while let Some(field) = form.next_field().await.unwrap() {
        match field.name() {
            Some("UpdateParameters") => {
                let parameters: Value = serde_json::from_str(&field.text().await.unwrap()).unwrap();
                targets =
                    parameters["Targets"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_owned()).collect();
            }
            Some("UpdateFile") => image = field.bytes().await.unwrap().to_vec(),
            _ => {}
        }
    }
    let mut d = s.lock().unwrap();
    d.pushes.push((targets.clone(), image.clone()));
    // The image says which version it carries: "METAL-FW <version>\n...".
    let text = String::from_utf8_lossy(&image);
    let version = text.strip_prefix("METAL-FW ").and_then(|t| t.lines().next()).unwrap_or("garbage").to_owned();
    let ids: Vec<&'static str> = targets
        .iter()
        .filter_map(|t| t.strip_prefix(&format!("{INVENTORY}/")))
        .filter_map(|id| d.versions.keys().find(|k| **k == id).copied())
        .collect();
    let task = match d.apply {
        Apply::Immediate => {
            ids.iter().for_each(|id| _ = d.versions.insert(id, version.clone()));
            json!({"TaskState": "Completed", "Messages": [{"MessageId": "Update.1.0.UpdateSuccessful"}]})
        }
        Apply::OnReset => {
            ids.iter().for_each(|id| d.pending.push((id, version.clone())));
            json!({"TaskState": "Completed", "Messages": [{"MessageId": "Base.1.0.ResetRequired", "Message": "reset to apply"}]})
        }
        Apply::Sticky => json!({"TaskState": "Completed"}),
        Apply::Fails => json!({"TaskState": "Exception", "Messages": [{"Message": "the image failed verification"}]}),
    };
    let id = format!("{}", d.tasks.len() + 1);
    d.tasks.insert(id.clone(), task);
    (StatusCode::ACCEPTED, [(header::LOCATION, format!("/redfish/v1/TaskService/Tasks/{id}"))]).into_response()
}

async fn task(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    ok(s.lock().unwrap().tasks[&id].clone())
}

async fn start(apply: Apply) -> (String, Shared) {
    let versions =
        BTreeMap::from([("BIOS", "2.3.0".to_owned()), ("BMC", "1.11.0".to_owned()), ("GPU0", "96.00.4a".to_owned())]);
    let state: Shared = Arc::new(Mutex::new(Double {
        apply,
        power: PowerState::Off,
        versions,
        pending: Vec::new(),
        pushes: Vec::new(),
        resets: Vec::new(),
        tasks: HashMap::new(),
    }));
    let router = Router::new()
        .route(
            "/redfish/v1/",
            get(|| async {
                ok(json!({"Systems": {"@odata.id": "/redfish/v1/Systems"}, "UpdateService": {"@odata.id": "/redfish/v1/UpdateService"}}))
            }),
        )
        .route("/redfish/v1/Systems", get(|| async { ok(json!({"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]})) }))
        .route("/redfish/v1/Systems/1", get(system))
        .route("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", post(reset))
        .route(
            "/redfish/v1/UpdateService",
            get(|| async {
                ok(json!({"FirmwareInventory": {"@odata.id": INVENTORY}, "MultipartHttpPushUri": "/redfish/v1/UpdateService/upload"}))
            }),
        )
        .route(INVENTORY, get(inventory))
        .route(&format!("{INVENTORY}/{{id}}"), get(inventory_item))
        .route("/redfish/v1/UpdateService/upload", post(push))
        .route("/redfish/v1/TaskService/Tasks/{id}", get(task))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (url, state)
}

async fn connect(url: &str) -> RedfishBmc {
    let timing = Timing {
        poll: std::time::Duration::from_millis(20),
        backoff: std::time::Duration::from_millis(20),
        ..Timing::default()
    };
    let config = RedfishConfig {
        endpoint: url.to_owned(),
        credential: Credential::new("admin", "password"),
        trust: TlsTrust::InsecureSkipVerify,
        system: None,
        timing,
    };
    RedfishBmc::connect(config).await.unwrap()
}

/// Firmware images served over loopback HTTP.
struct Images {
    url: String,
}

impl Images {
    async fn start(files: Vec<(&'static str, Vec<u8>)>) -> Images {
        let files: Arc<HashMap<String, Vec<u8>>> =
            Arc::new(files.into_iter().map(|(n, b)| (n.to_owned(), b)).collect());
        let router = Router::new().route(
            "/{name}",
            get(move |Path(name): Path<String>| {
                let files = files.clone();
                async move {
                    match files.get(&name) {
                        Some(bytes) => bytes.clone().into_response(),
                        None => StatusCode::NOT_FOUND.into_response(),
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Images { url }
    }

    fn image(&self, name: &str, bytes: &[u8]) -> FirmwareImage {
        FirmwareImage { url: format!("{}/{name}", self.url), sha256: hex::encode(sha2::Sha256::digest(bytes)) }
    }
}

fn firmware_image(version: &str) -> Vec<u8> {
    let mut image = format!("METAL-FW {version}\n").into_bytes();
    image.resize(64 << 10, 0x5a);
    image
}

/// A double, an image server holding good BIOS and VBIOS images, and policies naming them.
struct Setup {
    bmc: RedfishBmc,
    state: Shared,
    images: Images,
    bios: Vec<u8>,
    gpu: Vec<u8>,
}

impl Setup {
    async fn start(apply: Apply) -> Setup {
        let (url, state) = start(apply).await;
        let (bios, gpu) = (firmware_image("2.4.1"), firmware_image("96.00.5f"));
        let images = Images::start(vec![("bios.bin", bios.clone()), ("vbios.rom", gpu.clone())]).await;
        Setup { bmc: connect(&url).await, state, images, bios, gpu }
    }

    fn bios_image(&self) -> FirmwareImage {
        self.images.image("bios.bin", &self.bios)
    }

    fn gpu_image(&self) -> FirmwareImage {
        self.images.image("vbios.rom", &self.gpu)
    }

    /// bios 2.4.1, bmc 1.11.0 (as found) and gpu-vbios 96.00.5f, with these images.
    fn policy(&self, remediation: FirmwareRemediation, images: Vec<(&str, FirmwareImage)>) -> FirmwarePolicy {
        FirmwarePolicy {
            firmware_baseline: Some(BTreeMap::from([
                ("bios".to_owned(), "2.4.1".to_owned()),
                ("bmc".to_owned(), "1.11.0".to_owned()),
                ("gpu-vbios".to_owned(), "96.00.5f".to_owned()),
            ])),
            firmware_remediation: remediation,
            firmware_images: images.into_iter().map(|(c, i)| (c.to_owned(), i)).collect(),
        }
    }

    /// Reflash with both images.
    fn both(&self) -> FirmwarePolicy {
        self.policy(FirmwareRemediation::Reflash, vec![("bios", self.bios_image()), ("gpu-vbios", self.gpu_image())])
    }

    /// Reflash of the BIOS alone (the baseline leaves the GPU out).
    fn bios_only(&self) -> FirmwarePolicy {
        let mut policy = self.policy(FirmwareRemediation::Reflash, vec![("bios", self.bios_image())]);
        policy.firmware_baseline.as_mut().unwrap().remove("gpu-vbios");
        policy
    }

    async fn run(&self, policy: &FirmwarePolicy, fetch: &FetchOptions) -> Outcome {
        remediate(&self.bmc, "n1", policy, fetch).await.unwrap()
    }
}

fn lenient() -> FetchOptions {
    FetchOptions { allow_http: true, ..FetchOptions::default() }
}

fn actions(outcome: &Outcome) -> Vec<String> {
    outcome
        .steps
        .iter()
        .map(|s| format!("{}{}", s.action, s.component.as_deref().map(|c| format!(" {c}")).unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn a_push_reflash_fixes_bios_and_gpu_drift() {
    let setup = Setup::start(Apply::Immediate).await;
    let outcome = setup.run(&setup.both(), &lenient()).await;
    assert_eq!(outcome.code, Code::Reflashed, "{outcome:#?}");
    assert_eq!(
        metal_firmware::baseline::drift_lines(&outcome.before),
        ["bios: expected 2.4.1, found 2.3.0", "gpu-vbios: expected 96.00.5f, found 96.00.4a"]
    );
    assert!(outcome.after.as_ref().unwrap().compliant);
    assert_eq!(
        actions(&outcome),
        [
            "inventory",
            "check",
            "download bios",
            "download gpu-vbios",
            "update bios",
            "update gpu-vbios",
            "inventory",
            "check"
        ]
    );
    let d = setup.state.lock().unwrap();
    // The verified bytes themselves went to the inventory items that carry each component.
    assert_eq!(d.pushes.len(), 2);
    assert_eq!(d.pushes[0], (vec![format!("{INVENTORY}/BIOS")], setup.bios.clone()));
    assert_eq!(d.pushes[1], (vec![format!("{INVENTORY}/GPU0")], setup.gpu.clone()));
    assert!(d.resets.is_empty(), "no reset was asked for");
}

#[tokio::test]
async fn an_update_that_needs_a_reset_is_power_cycled_then_checked() {
    let setup = Setup::start(Apply::OnReset).await;
    let outcome = setup.run(&setup.bios_only(), &lenient()).await;
    assert_eq!(outcome.code, Code::Reflashed, "{outcome:#?}");
    assert_eq!(
        actions(&outcome),
        ["inventory", "check", "download bios", "update bios", "power-cycle", "inventory", "check"]
    );
    assert!(outcome.steps[3].detail.contains("wants a reset"), "{:?}", outcome.steps[3]);
    // The machine was off: a cycle of a stopped machine powers it on.
    assert_eq!(setup.state.lock().unwrap().resets, ["On"]);
}

#[tokio::test]
async fn drift_that_survives_the_reflash_quarantines() {
    let setup = Setup::start(Apply::Sticky).await;
    let outcome = setup.run(&setup.bios_only(), &lenient()).await;
    assert_eq!(outcome.code, Code::DriftSurvivedReflash);
    assert_eq!(outcome.reason.as_deref(), Some("drift survived the reflash: bios: expected 2.4.1, found 2.3.0"));
    assert_eq!(setup.state.lock().unwrap().pushes.len(), 1, "it was written once");
}

#[tokio::test]
async fn a_failed_update_task_quarantines_with_the_bmc_message() {
    let setup = Setup::start(Apply::Fails).await;
    let outcome = setup.run(&setup.both(), &lenient()).await;
    assert_eq!(outcome.code, Code::UpdateFailed);
    let reason = outcome.reason.unwrap();
    assert!(reason.starts_with("bios: ") && reason.contains("the image failed verification"), "{reason}");
    assert!(outcome.after.is_none());
    assert_eq!(setup.state.lock().unwrap().pushes.len(), 1, "it stopped at the first failure");
}

#[tokio::test]
async fn nothing_reaches_the_bmc_without_a_checked_image_for_every_drift() {
    let setup = Setup::start(Apply::Immediate).await;

    // One drifted component has no image.
    let missing = setup.policy(FirmwareRemediation::Reflash, vec![("bios", setup.bios_image())]);
    let outcome = setup.run(&missing, &lenient()).await;
    assert_eq!(
        (outcome.code, outcome.reason.as_deref()),
        (Code::NoImage, Some("no firmware image for gpu-vbios: nothing was written"))
    );

    // The second image fails its checksum: the first, good one is not pushed either.
    let mut tampered = setup.both();
    tampered.firmware_images.get_mut("gpu-vbios").unwrap().sha256 = hex::encode(sha2::Sha256::digest(b"other"));
    let outcome = setup.run(&tampered, &lenient()).await;
    assert_eq!(outcome.code, Code::ImageChecksumMismatch);
    assert!(outcome.reason.as_deref().unwrap().contains("SHA-256 mismatch"), "{:?}", outcome.reason);
    assert_eq!(actions(&outcome), ["inventory", "check", "download bios", "download gpu-vbios"]);

    // An image that is not there.
    let mut gone = setup.both();
    gone.firmware_images.get_mut("gpu-vbios").unwrap().url = format!("{}/nope.rom", setup.images.url);
    assert_eq!(setup.run(&gone, &lenient()).await.code, Code::ImageDownloadFailed);

    // http:// without leave.
    let outcome = setup.run(&setup.both(), &FetchOptions::default()).await;
    assert_eq!(outcome.code, Code::ImageDownloadFailed);
    assert!(outcome.reason.unwrap().contains("plain http:// is refused"));

    // The quarantine policy never writes, even with every image at hand.
    let quarantine = setup
        .policy(FirmwareRemediation::Quarantine, vec![("bios", setup.bios_image()), ("gpu-vbios", setup.gpu_image())]);
    let outcome = setup.run(&quarantine, &lenient()).await;
    assert_eq!(outcome.code, Code::FirmwareDrift);
    assert_eq!(actions(&outcome), ["inventory", "check"]);

    let d = setup.state.lock().unwrap();
    assert!(d.pushes.is_empty() && d.resets.is_empty());
    assert_eq!(d.versions["BIOS"], "2.3.0");
}

#[tokio::test]
async fn compliant_writes_nothing_and_no_baseline_is_invalid_config() {
    let setup = Setup::start(Apply::Immediate).await;
    let mut compliant = setup.policy(FirmwareRemediation::Reflash, vec![]);
    compliant.firmware_baseline =
        Some(BTreeMap::from([("bios".to_owned(), "2.3.0".to_owned()), ("bmc".to_owned(), "1.11.0".to_owned())]));
    let outcome = setup.run(&compliant, &lenient()).await;
    assert_eq!((outcome.code, outcome.reason), (Code::Compliant, None));
    let e = remediate(&setup.bmc, "n1", &FirmwarePolicy::default(), &lenient()).await.unwrap_err();
    assert!(e.to_string().starts_with("INVALID_CONFIG"), "{e}");
    assert!(setup.state.lock().unwrap().pushes.is_empty());
}
