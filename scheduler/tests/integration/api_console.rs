//! The serial console over a WebSocket against ipmi_sim's Serial-over-LAN, whose serial
//! line is a TCP socket this test plays the machine on: bytes go both ways, only admins get
//! in, and every session is recorded.

use crate::common;

use std::time::{Duration, Instant};

use common::Site;
use futures::{SinkExt as _, StreamExt as _};
use metal_tests::emulators::{IpmiSim, answer_on_serial_line};
use serde_json::json;
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest as _};

#[tokio::test]
async fn the_console_bridges_both_ways_for_admins_and_every_session_is_recorded() {
    let sim = IpmiSim::start();
    answer_on_serial_line(sim.serial_port, b"hello", b"hi there\r\n").await;
    let site = Site::start().await;
    site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    let spec = json!({"protocol": "ipmi", "address": format!("127.0.0.1:{}", sim.port), "username": "admin", "password": "password"});
    let (s, body) = site.admin("PUT", "/v1/nodes/n1/bmc", Some(spec)).await;
    assert_eq!(s, 200, "{body}");

    let url = format!("{}/v1/nodes/n1/console", site.url.replace("http://", "ws://"));
    // No token, or a tenant's: no console.
    let e = tokio_tungstenite::connect_async(url.as_str()).await.unwrap_err().to_string();
    assert!(e.contains("401"), "{e}");
    let tenant = site.tenant("acme").await;
    let mut request = url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {tenant}").parse().unwrap());
    let e = tokio_tungstenite::connect_async(request).await.unwrap_err().to_string();
    assert!(e.contains("404"), "{e}");

    // A browser offers its token as a subprotocol (it cannot set Authorization on a
    // WebSocket): a tenant's gets no console, garbage is unauthenticated, and the admin's
    // opens it with `metal.console` answered back.
    let offer = |token: &str| {
        use base64::Engine as _;
        let mut request = url.as_str().into_client_request().unwrap();
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token);
        let protocols = format!("metal.console, metal.bearer.{encoded}");
        request.headers_mut().insert("sec-websocket-protocol", protocols.parse().unwrap());
        request
    };
    let e = tokio_tungstenite::connect_async(offer(&tenant)).await.unwrap_err().to_string();
    assert!(e.contains("404"), "{e}");
    let mut garbage = url.as_str().into_client_request().unwrap();
    garbage.headers_mut().insert("sec-websocket-protocol", "metal.console, metal.bearer.%%%".parse().unwrap());
    let e = tokio_tungstenite::connect_async(garbage).await.unwrap_err().to_string();
    assert!(e.contains("401"), "{e}");
    // No other route takes a token that way, whatever the request claims to be.
    let smuggled = site
        .http
        .get(format!("{}/v1/nodes", site.url))
        .header("upgrade", "websocket")
        .header("connection", "upgrade")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-protocol", offer(&site.admin).headers()["sec-websocket-protocol"].clone())
        .send()
        .await
        .unwrap();
    assert_eq!(smuggled.status(), 401);
    let (mut socket, response) = tokio_tungstenite::connect_async(offer(&site.admin)).await.unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "metal.console");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut received = Vec::new();
    while !String::from_utf8_lossy(&received).contains("hi there") {
        assert!(Instant::now() < deadline, "no answer through the console: {:?}", String::from_utf8_lossy(&received));
        socket.send(Message::Text("hello\r".into())).await.unwrap();
        while let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_millis(500), socket.next()).await {
            received.extend_from_slice(&message.into_data());
        }
    }
    socket.close(None).await.unwrap();

    // The session is recorded: who, which node, when, bytes each way.
    let (_, credentials) = site.admin("GET", "/v1/credentials", None).await;
    let admin_id =
        credentials.as_array().unwrap().iter().find(|c| c["role"] == "platform-admin").unwrap()["id"].clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    let session = loop {
        let (_, sessions) = site.admin("GET", "/v1/nodes/n1/console/sessions", None).await;
        assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
        if !sessions[0]["endedAt"].is_null() {
            break sessions[0].clone();
        }
        assert!(Instant::now() < deadline, "the session never ended: {sessions}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(session["credentialId"], admin_id);
    assert!(session["bytesIn"].as_i64().unwrap() >= 6 && session["bytesOut"].as_i64().unwrap() >= 8, "{session}");
    let (_, events) = site.admin("GET", "/v1/events?after=0", None).await;
    let kinds: Vec<&str> = events["events"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(kinds.contains(&"node.console.opened") && kinds.contains(&"node.console.closed"), "{kinds:?}");

    // A second session: the sessions page one a page, each once.
    let (socket, _) = tokio_tungstenite::connect_async(offer(&site.admin)).await.unwrap();
    drop(socket);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, sessions) = site.admin("GET", "/v1/nodes/n1/console/sessions", None).await;
        if sessions.as_array().unwrap().iter().filter(|s| !s["endedAt"].is_null()).count() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the second session never ended: {sessions}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (ids, pages) = crate::api_paging::follow(&site, "/v1/nodes/n1/console/sessions?limit=1").await;
    assert_eq!((ids.len(), pages), (2, 2), "{ids:?}");
    assert!(ids[0] != ids[1] && ids.iter().any(|id| id == session["id"].as_str().unwrap()), "{ids:?}");
}
