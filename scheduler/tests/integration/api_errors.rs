//! Every error the API answers has the documented body `{"error": {"code", "message",
//! "field"}}`, the ones axum's extractors raise too: a bad query string, a path that is not
//! UTF-8, the console without a WebSocket upgrade, a method a route does not take. And the
//! request metrics cannot be grown without bound by made-up methods.

use crate::common;

use serde_json::Value;

async fn raw(site: &common::Site, method: &str, path: &str) -> (u16, String, Value) {
    let response = site
        .http
        .request(method.parse().unwrap(), format!("{}{path}", site.url))
        .bearer_auth(&site.admin)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let kind = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = response.text().await.unwrap();
    (status, kind, serde_json::from_str(&body).unwrap_or(Value::String(body)))
}

#[tokio::test]
async fn extractor_rejections_answer_in_the_api_error_shape() {
    let site = common::Site::start().await;
    for (method, path, status, code, field) in [
        ("GET", "/v1/events?after=abc", 422, "INVALID_INPUT", Some("query")),
        ("GET", "/v1/events?wait=-1", 422, "INVALID_INPUT", Some("query")),
        ("GET", "/v1/nodes/%ff%fe", 422, "INVALID_INPUT", Some("path")),
        ("GET", "/v1/nodes/n1/console", 422, "INVALID_INPUT", Some("upgrade")),
        ("DELETE", "/v1/nodes", 405, "METHOD_NOT_ALLOWED", None),
        ("PUT", "/v1/images", 405, "METHOD_NOT_ALLOWED", None),
    ] {
        let (got, kind, body) = raw(&site, method, path).await;
        assert_eq!(got, status, "{method} {path}: {body}");
        assert!(kind.starts_with("application/json"), "{method} {path}: {kind}");
        assert_eq!(body["error"]["code"], code, "{method} {path}: {body}");
        assert!(!body["error"]["message"].as_str().unwrap().is_empty());
        assert_eq!(body["error"]["field"].as_str(), field, "{method} {path}: {body}");
    }
}

#[tokio::test]
async fn made_up_methods_count_under_one_label() {
    let site = common::Site::start().await;
    for method in ["FOO", "BAR", "BAZ1"] {
        raw(&site, method, "/v1/nodes").await;
    }
    raw(&site, "GET", "/v1/nodes").await;
    for path in ["/nope", "/v1/made-up/1", "/wp-admin.php"] {
        raw(&site, "GET", path).await;
    }
    let (status, _, metrics) = raw(&site, "GET", "/metrics").await;
    assert_eq!(status, 200);
    let text = metrics.as_str().unwrap();
    assert!(!text.contains("FOO") && !text.contains("BAZ1"), "{text}");
    assert!(text.contains("method=\"other\",route=\"/v1/nodes\",status=\"405\"} 3"), "{text}");
    assert!(text.contains("method=\"GET\",route=\"/v1/nodes\",status=\"200\"} 1"), "{text}");
    assert!(text.contains("method=\"GET\",route=\"unmatched\",status=\"404\"} 3"), "{text}");
    assert!(!text.contains("wp-admin"), "{text}");
}

/// The schema says object; serde's structs would also take the fields as an array.
#[tokio::test]
async fn bodies_are_objects_where_the_schema_says_so_at_every_depth() {
    let site = common::Site::start().await;
    let (s, _) = site.call(Some(&site.admin), "POST", "/v1/nodes", Some(serde_json::json!({"id": "n1"}))).await;
    assert_eq!(s, 201);
    for (path, method, body, says) in [
        ("/v1/nodes/n1", "PATCH", serde_json::json!([null, null]), "invalid type: sequence, expected struct NodePatch"),
        ("/v1/nodes", "POST", serde_json::json!(["n2"]), "invalid type: sequence"),
        (
            "/v1/pools",
            "POST",
            serde_json::json!({"tenantId": "root", "siteId": "s", "class": "c", "policy": [true]}),
            "policy: invalid type: sequence",
        ),
    ] {
        let (status, answer) = site.call(Some(&site.admin), method, path, Some(body)).await;
        assert_eq!(status, 422, "{method} {path}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{method} {path}: {message}");
    }
    let (_, node) = site.call(Some(&site.admin), "GET", "/v1/nodes/n1", None).await;
    assert_eq!(node["generation"], 1, "the array patch changed nothing: {node}");
}
