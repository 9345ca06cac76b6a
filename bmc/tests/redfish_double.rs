//! The Redfish client against a small Redfish test double for what sushy-tools does not
//! emulate: sessions, a transient 503, ETag/If-Match with a 412, reset types listed only in
//! an ActionInfo, actions answered 202 with a task monitor, the AccountService (a rotation
//! proved, one refused by password policy), and UpdateService tasks (one failing, a
//! multipart push).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metal_bmc::model::{BootPersistence, BootTarget, PowerAction, PowerState};
use metal_bmc::redfish::{RedfishBmc, RedfishConfig, Timing};
use metal_bmc::tls::TlsTrust;
use metal_bmc::{Bmc, BmcError, Credential, Secret};
use serde_json::{Value, json};

#[derive(Default)]
struct Double {
    passwords: HashMap<String, String>,
    /// Open sessions: token -> user.
    tokens: HashMap<String, String>,
    /// Sessions opened so far.
    opened: usize,
    power: &'static str,
    boot: String,
    etag: u32,
    /// The next PATCH of the system loses a race (412) once.
    race_next_patch: bool,
    root_busy_once: bool,
    /// Task monitor id -> polls left before it completes, and what completing does.
    tasks: HashMap<String, (u32, &'static str)>,
    pushed: usize,
    log: Vec<String>,
}

type Shared = Arc<Mutex<Double>>;

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn error(status: StatusCode, message: &str) -> Response {
    json_response(status, json!({"error": {"code": "Base.1.0.GeneralError", "message": message}}))
}

fn accepted(d: &mut Double, id: &str, polls: u32, effect: &'static str) -> Response {
    d.tasks.insert(id.to_owned(), (polls, effect));
    (StatusCode::ACCEPTED, [(header::LOCATION, format!("/redfish/v1/TaskService/TaskMonitors/{id}"))]).into_response()
}

async fn root(State(s): State<Shared>) -> Response {
    let mut d = s.lock().unwrap();
    if std::mem::take(&mut d.root_busy_once) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "starting up");
    }
    json_response(
        StatusCode::OK,
        json!({"Systems": {"@odata.id": "/redfish/v1/Systems"}, "AccountService": {"@odata.id": "/redfish/v1/AccountService"},
               "UpdateService": {"@odata.id": "/redfish/v1/UpdateService"},
               "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}}),
    )
}

async fn login(State(s): State<Shared>, body: axum::Json<Value>) -> Response {
    let mut d = s.lock().unwrap();
    let user = body["UserName"].as_str().unwrap_or_default().to_owned();
    if d.passwords.get(&user).map(String::as_str) != body["Password"].as_str() {
        return error(StatusCode::UNAUTHORIZED, "bad credentials");
    }
    let token = format!("tok-{}", d.opened);
    d.opened += 1;
    d.tokens.insert(token.clone(), user);
    (
        StatusCode::CREATED,
        [("x-auth-token", token.clone()), ("location", format!("/redfish/v1/SessionService/Sessions/{token}"))],
    )
        .into_response()
}

async fn logout(State(s): State<Shared>, Path(id): Path<String>) -> StatusCode {
    if s.lock().unwrap().tokens.remove(&id).is_some() { StatusCode::NO_CONTENT } else { StatusCode::NOT_FOUND }
}

async fn auth(State(s): State<Shared>, request: Request, next: axum::middleware::Next) -> Response {
    let token = request.headers().get("x-auth-token").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let known = s.lock().unwrap().tokens.contains_key(&token);
    if known { next.run(request).await } else { error(StatusCode::UNAUTHORIZED, "no session") }
}

fn system_body(d: &Double) -> Value {
    json!({"Id": "1", "PowerState": d.power, "Status": {"Health": "OK"},
           "Boot": {"BootSourceOverrideTarget": d.boot, "BootSourceOverrideEnabled": "Once"},
           "Actions": {"#ComputerSystem.Reset": {"target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                                                  "@Redfish.ActionInfo": "/redfish/v1/Systems/1/ResetActionInfo"}}})
}

async fn system(State(s): State<Shared>) -> Response {
    let d = s.lock().unwrap();
    let mut r = json_response(StatusCode::OK, system_body(&d));
    r.headers_mut().insert(header::ETAG, format!("W/\"{}\"", d.etag).parse().unwrap());
    r
}

async fn patch_system(State(s): State<Shared>, headers: HeaderMap, body: axum::Json<Value>) -> Response {
    let mut d = s.lock().unwrap();
    if std::mem::take(&mut d.race_next_patch) {
        d.etag += 1;
    }
    let expected = format!("W/\"{}\"", d.etag);
    if headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
        return error(StatusCode::PRECONDITION_FAILED, "the resource changed");
    }
    d.boot = body["Boot"]["BootSourceOverrideTarget"].as_str().unwrap_or_default().to_owned();
    d.etag += 1;
    let entry = format!("boot {}", d.boot);
    d.log.push(entry);
    StatusCode::NO_CONTENT.into_response()
}

async fn reset(State(s): State<Shared>, body: axum::Json<Value>) -> Response {
    let mut d = s.lock().unwrap();
    let kind = body["ResetType"].as_str().unwrap_or_default().to_owned();
    d.log.push(format!("reset {kind}"));
    let effect = match kind.as_str() {
        "On" | "PowerCycle" => "power-on",
        "ForceOff" => "power-off",
        _ => return error(StatusCode::BAD_REQUEST, "reset type not allowed"),
    };
    let id = format!("reset{}", d.log.len());
    accepted(&mut d, &id, 2, effect)
}

async fn monitor(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    let mut d = s.lock().unwrap();
    let Some((left, effect)) = d.tasks.get_mut(&id) else { return error(StatusCode::NOT_FOUND, "no task") };
    if *left > 0 {
        *left -= 1;
        return json_response(StatusCode::ACCEPTED, json!({"TaskState": "Running"}));
    }
    let effect = *effect;
    match effect {
        "power-on" => d.power = "On",
        "power-off" => d.power = "Off",
        "update-fails" => {
            return json_response(
                StatusCode::OK,
                json!({"TaskState": "Exception", "Messages": [{"Message": "image signature rejected"}]}),
            );
        }
        _ => {}
    }
    json_response(StatusCode::OK, json!({"TaskState": "Completed"}))
}

async fn account(State(s): State<Shared>, Path(id): Path<String>) -> Response {
    let user = if id == "1" { "admin" } else { "operator" };
    let _ = s;
    json_response(StatusCode::OK, json!({"Id": id, "UserName": user}))
}

async fn patch_account(State(s): State<Shared>, Path(id): Path<String>, body: axum::Json<Value>) -> Response {
    let user = if id == "1" { "admin" } else { "operator" };
    let password = body["Password"].as_str().unwrap_or_default();
    if password.len() < 8 {
        return json_response(
            StatusCode::BAD_REQUEST,
            json!({"error": {"code": "Base.1.8.GeneralError", "message": "A general error has occurred.",
                   "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.PropertyValueIncorrect",
                                               "Message": "The password does not meet the complexity policy."}]}}),
        );
    }
    s.lock().unwrap().passwords.insert(user.to_owned(), password.to_owned());
    StatusCode::NO_CONTENT.into_response()
}

async fn simple_update(State(s): State<Shared>, body: axum::Json<Value>) -> Response {
    let mut d = s.lock().unwrap();
    d.log.push(format!("simple-update {} {}", body["ImageURI"], body["TransferProtocol"]));
    accepted(&mut d, "update1", 1, "update-fails")
}

async fn upload(State(s): State<Shared>, mut form: axum::extract::Multipart) -> Response {
    let mut got = (false, 0);
    while let Some(field) = form.next_field().await.unwrap() {
        match field.name() {
            Some("UpdateParameters") => got.0 = field.text().await.unwrap().contains("Targets"),
            Some("UpdateFile") => got.1 = field.bytes().await.unwrap().len(),
            _ => {}
        }
    }
    let mut d = s.lock().unwrap();
    if !got.0 {
        return error(StatusCode::BAD_REQUEST, "no UpdateParameters");
    }
    d.pushed = got.1;
    accepted(&mut d, "push1", 1, "done")
}

async fn start() -> (String, Shared) {
    let mut double = Double { power: "On", boot: "Hdd".into(), root_busy_once: true, ..Double::default() };
    double.passwords.insert("admin".into(), "password".into());
    double.passwords.insert("operator".into(), "operator-pass".into());
    let state: Shared = Arc::new(Mutex::new(double));
    let collection = |path: &'static str, members: &'static [&'static str]| {
        let members: Vec<Value> = members.iter().map(|m| json!({"@odata.id": format!("{path}/{m}")})).collect();
        get(move || {
            let members = members.clone();
            async move { json_response(StatusCode::OK, json!({"Members": members})) }
        })
    };
    let protected = Router::new()
        .route("/redfish/v1/Systems", collection("/redfish/v1/Systems", &["1"]))
        .route("/redfish/v1/Systems/1", get(system).patch(patch_system))
        .route(
            "/redfish/v1/Systems/1/ResetActionInfo",
            get(|| async {
                json_response(StatusCode::OK, json!({"Parameters": [{"Name": "ResetType", "AllowableValues": ["On", "ForceOff", "PowerCycle"]}]}))
            }),
        )
        .route("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", post(reset))
        .route("/redfish/v1/TaskService/TaskMonitors/{id}", get(monitor))
        .route(
            "/redfish/v1/AccountService",
            get(|| async { json_response(StatusCode::OK, json!({"Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"}})) }),
        )
        .route("/redfish/v1/AccountService/Accounts", collection("/redfish/v1/AccountService/Accounts", &["1", "2"]))
        .route("/redfish/v1/AccountService/Accounts/{id}", get(account).patch(patch_account))
        .route(
            "/redfish/v1/UpdateService",
            get(|| async {
                json_response(StatusCode::OK, json!({
                    "Actions": {"#UpdateService.SimpleUpdate": {"target": "/redfish/v1/UpdateService/Actions/SimpleUpdate",
                                                                 "TransferProtocol@Redfish.AllowableValues": ["HTTP"]}},
                    "MultipartHttpPushUri": "/redfish/v1/UpdateService/upload"}))
            }),
        )
        .route("/redfish/v1/UpdateService/Actions/SimpleUpdate", post(simple_update))
        .route("/redfish/v1/UpdateService/upload", post(upload))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth));
    let router = Router::new()
        .route("/redfish/v1/", get(root))
        .route("/redfish/v1/SessionService/Sessions", post(login))
        .route("/redfish/v1/SessionService/Sessions/{id}", axum::routing::delete(logout))
        .merge(protected)
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (url, state)
}

fn config(url: &str, user: &str, password: &str) -> RedfishConfig {
    RedfishConfig {
        endpoint: url.to_owned(),
        credential: Credential::new(user, password),
        trust: TlsTrust::InsecureSkipVerify,
        system: None,
        timing: Timing {
            poll: std::time::Duration::from_millis(20),
            backoff: std::time::Duration::from_millis(20),
            ..Timing::default()
        },
    }
}

#[tokio::test]
async fn sessions_retries_action_info_task_monitors_and_etags() {
    let (url, state) = start().await;
    // The first service root answer is a 503: retried.
    let bmc = RedfishBmc::connect(config(&url, "admin", "password")).await.unwrap();
    // Reset types only in an ActionInfo; PowerCycle listed there; answered 202 + task monitor.
    let cycle = bmc.power(PowerAction::Cycle).await.unwrap();
    assert_eq!((cycle.sent.as_slice(), cycle.after), (&["PowerCycle".to_owned()][..], PowerState::On));
    let off = bmc.power(PowerAction::Off).await.unwrap();
    assert_eq!((off.sent.as_slice(), off.after), (&["ForceOff".to_owned()][..], PowerState::Off));
    // The PATCH loses a race once (412): the client re-reads the ETag and wins the retry.
    state.lock().unwrap().race_next_patch = true;
    bmc.set_boot(BootTarget::Pxe, BootPersistence::Once).await.unwrap();
    assert_eq!(state.lock().unwrap().log, ["reset PowerCycle", "reset ForceOff", "boot Pxe"]);
    // Sessions: every call went with a token; a wrong password is Unauthorized.
    let e = RedfishBmc::connect(config(&url, "admin", "nope")).await.unwrap_err();
    assert!(matches!(e, BmcError::Unauthorized { .. }), "{e}");
}

#[tokio::test]
async fn calls_at_once_share_one_session_and_closing_logs_it_out() {
    let (url, state) = start().await;
    let bmc = RedfishBmc::connect(config(&url, "admin", "password")).await.unwrap();
    let reads = tokio::join!(bmc.power_state(), bmc.power_state(), bmc.power_state(), bmc.power_state());
    for read in [reads.0, reads.1, reads.2, reads.3] {
        read.unwrap();
    }
    bmc.read_model().await.unwrap();
    assert_eq!(state.lock().unwrap().opened, 1, "one session for every call");
    // The BMC forgets it (a restart): the next call logs in again, once.
    state.lock().unwrap().tokens.clear();
    bmc.power_state().await.unwrap();
    assert_eq!(state.lock().unwrap().opened, 2);
    bmc.close().await;
    assert!(state.lock().unwrap().tokens.is_empty(), "closing logged the session out");
}

#[tokio::test]
async fn rotations_are_proved_and_refusals_keep_the_old_password() {
    let (url, _) = start().await;
    let bmc = RedfishBmc::connect(config(&url, "admin", "password")).await.unwrap();
    let e = bmc.rotate_password("admin", &Secret::new("short")).await.unwrap_err();
    assert!(matches!(e, BmcError::Refused { .. }), "{e}");
    assert!(e.to_string().contains("does not meet the complexity policy"), "{e}");
    assert!(!e.to_string().contains("short\""));
    RedfishBmc::connect(config(&url, "admin", "password")).await.unwrap();
    // Another user's rotation leaves our own credential alone.
    bmc.rotate_password("operator", &Secret::new("operator-new-pass")).await.unwrap();
    RedfishBmc::connect(config(&url, "operator", "operator-new-pass")).await.unwrap();
    bmc.rotate_password("admin", &Secret::new("a-much-longer-one")).await.unwrap();
    bmc.power_state().await.unwrap();
    let e = RedfishBmc::connect(config(&url, "admin", "password")).await.unwrap_err();
    assert!(matches!(e, BmcError::Unauthorized { .. }), "{e}");
    let e = bmc.rotate_password("ghost", &Secret::new("whatever-long")).await.unwrap_err();
    assert!(e.to_string().contains("no account named ghost"), "{e}");
}

#[tokio::test]
async fn updates_follow_their_tasks_to_the_end() {
    let (url, state) = start().await;
    let bmc = RedfishBmc::connect(config(&url, "admin", "password")).await.unwrap();
    assert_eq!(bmc.update_methods().await.unwrap(), (true, true));
    let e = bmc.simple_update("http://files/bios.bin", &["/redfish/v1/Systems/1".into()]).await.unwrap_err();
    match &e {
        BmcError::TaskFailed { state, message, .. } => {
            assert_eq!(state, "Exception");
            assert_eq!(message, "image signature rejected");
        }
        other => panic!("{other}"),
    }
    assert!(state.lock().unwrap().log.contains(&"simple-update \"http://files/bios.bin\" \"HTTP\"".to_owned()));
    let e = bmc.simple_update("ftp://files/bios.bin", &[]).await.unwrap_err();
    assert!(matches!(e, BmcError::Unsupported { .. }) && e.to_string().contains("FTP"), "{e}");
    let outcome = bmc.push_update("bios.bin", vec![7; 4096], &["/redfish/v1/Systems/1".into()]).await.unwrap();
    assert_eq!((outcome.method, outcome.task_state.as_deref()), ("MultipartPush", Some("Completed")));
    assert_eq!(state.lock().unwrap().pushed, 4096);
}
