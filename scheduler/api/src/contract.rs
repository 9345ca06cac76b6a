//! The OpenAPI document as the server behaves, filled in where the generator leaves gaps:
//! every authenticated operation documents 401, every operation on `{id}` paths 404, and
//! every operation that takes a body or query parameters, or drives a BMC (which may not
//! offer what is asked), 422, each with the one error body; ids and the names the server
//! checks with `validate_name` carry its pattern, and the strings it refuses empty a
//! minimum length; every paged list (one taking `cursor`) documents its `Link` header;
//! and `allOf` schemas whose parts are closed objects (`additionalProperties: false`, which
//! `#[serde(flatten)]` with `deny_unknown_fields` produces, and which no body can satisfy)
//! are merged into the one closed object the server actually accepts.

use metal_types::model::{bmc, tenant};
use serde_json::{Map, Value, json};

/// What `metal_protocol::identity::validate_name` accepts: 1 to 64 of A-Z a-z 0-9 . _ -,
/// not starting with `.` or `-`. Every id the server makes matches it too.
pub const NAME_PATTERN: &str = "^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$";

/// The body properties the server checks with `validate_name`.
const NAMES: &[(&str, &str)] = &[
    ("NodeCreate", "id"),
    ("NodeCreate", "poolId"),
    ("TenantCreate", "id"),
    ("PoolCreate", "id"),
    ("PoolCreate", "tenantId"),
    ("PoolCreate", "siteId"),
    ("PoolCreate", "class"),
    ("PoolOffer", "tenantId"),
    ("ReservationCreate", "tenantId"),
    ("ReservationCreate", "poolId"),
    ("ProfileCreate", "id"),
    ("ProvisionRequest", "profileId"),
];

/// The body properties the server refuses empty, with their greatest length where it
/// has one (the validators' own bounds).
const NON_EMPTY: &[(&str, &str, Option<usize>)] = &[
    ("TenantCreate", "name", Some(tenant::NAME_MAX)),
    ("CredentialCreate", "name", Some(tenant::NAME_MAX)),
    ("BmcSpec", "username", Some(bmc::USERNAME_MAX)),
    ("BmcSpec", "address", None),
    ("BmcSpec", "password", Some(bmc::Password::MAX_LEN)),
    ("RotateRequest", "password", Some(bmc::Password::MAX_LEN)),
    ("MediaRequest", "url", None),
];

/// Applies every fix to the document (its JSON form).
pub fn complete(document: &mut Value) {
    if let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, operations) in paths.iter_mut() {
            let Some(operations) = operations.as_object_mut() else { continue };
            for operation in operations.values_mut() {
                document_errors(path, operation);
                pattern_ids(operation);
                link_pages(operation);
            }
        }
    }
    if let Some(schemas) = document.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        let names: Vec<String> = schemas.keys().cloned().collect();
        for name in names {
            let merged = merge_closed_all_of(schemas, &name);
            if let Some(merged) = merged {
                schemas.insert(name, merged);
            }
        }
        constrain(schemas);
    }
}

/// A paged list (one taking `cursor`) answers the next page's link in a `Link` header.
fn link_pages(operation: &mut Value) {
    let paged = operation["parameters"]
        .as_array()
        .is_some_and(|parameters| parameters.iter().any(|p| p["name"] == "cursor" && p["in"] == "query"));
    if let Some(ok) = operation.pointer_mut("/responses/200").filter(|_| paged).and_then(Value::as_object_mut) {
        ok.insert(
            "headers".into(),
            json!({"Link": {"description": crate::paging::LINK_HEADER, "schema": {"type": "string"}}}),
        );
    }
}

/// The string schema of a property (`"type": "string"` or `["string", "null"]`), if the
/// document has it; a test checks that every listed one is there.
fn string_property<'a>(schemas: &'a mut Map<String, Value>, schema: &str, property: &str) -> Option<&'a mut Value> {
    let found = schemas.get_mut(schema)?.pointer_mut(&format!("/properties/{property}"))?;
    let kind = &found["type"];
    (kind == "string" || kind == &json!(["string", "null"])).then_some(found)
}

fn constrain(schemas: &mut Map<String, Value>) {
    for (schema, property) in NAMES {
        if let Some(found) = string_property(schemas, schema, property) {
            found["pattern"] = json!(NAME_PATTERN);
        }
    }
    for (schema, property, longest) in NON_EMPTY {
        if let Some(found) = string_property(schemas, schema, property) {
            found["minLength"] = json!(1);
            if let Some(longest) = longest {
                found["maxLength"] = json!(longest);
            }
        }
    }
}

/// Path parameters named `id` take only names.
fn pattern_ids(operation: &mut Value) {
    for parameter in operation.get_mut("parameters").and_then(Value::as_array_mut).into_iter().flatten() {
        if parameter["in"] == "path" && parameter["name"] == "id" {
            parameter["schema"]["pattern"] = json!(NAME_PATTERN);
        }
    }
}

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}})
}

fn document_errors(path: &str, operation: &mut Value) {
    let unauthenticated =
        operation.get("security").and_then(Value::as_array).is_some_and(|s| s.iter().all(|r| r == &json!({})));
    let drives_a_bmc = operation.pointer("/responses/502").is_some();
    let takes_input = operation.get("requestBody").is_some()
        || drives_a_bmc
        || operation.get("parameters").and_then(Value::as_array).is_some_and(|p| p.iter().any(|p| p["in"] == "query"));
    let Some(responses) = operation.get_mut("responses").and_then(Value::as_object_mut) else { return };
    if !unauthenticated {
        responses.entry("401").or_insert_with(|| error_response("no valid bearer token (UNAUTHENTICATED)"));
    }
    if path.contains('{') {
        responses
            .entry("404")
            .or_insert_with(|| error_response("no such resource, or not visible to the caller (NOT_FOUND)"));
    }
    if takes_input {
        responses.entry("422").or_insert_with(|| {
            error_response("the request breaks a validation rule, or asks what the BMC does not offer (INVALID_INPUT)")
        });
    }
}

/// The one closed object an `allOf` of objects stands for, when a part is closed.
fn merge_closed_all_of(schemas: &Map<String, Value>, name: &str) -> Option<Value> {
    let parts = schemas.get(name)?.get("allOf")?.as_array()?;
    let resolved: Vec<&Value> = parts
        .iter()
        .map(|part| match part.get("$ref").and_then(Value::as_str) {
            Some(reference) => schemas.get(reference.trim_start_matches("#/components/schemas/")),
            None => Some(part),
        })
        .collect::<Option<_>>()?;
    if !resolved.iter().any(|part| part.get("additionalProperties") == Some(&Value::Bool(false))) {
        return None;
    }
    let (mut properties, mut required) = (Map::new(), Vec::new());
    for part in resolved {
        if part.get("type").is_some_and(|t| t != "object") {
            return None;
        }
        for (key, value) in part.get("properties").and_then(Value::as_object).into_iter().flatten() {
            properties.insert(key.clone(), value.clone());
        }
        for key in part.get("required").and_then(Value::as_array).into_iter().flatten() {
            if !required.contains(key) {
                required.push(key.clone());
            }
        }
    }
    let mut merged = json!({"type": "object", "properties": properties, "additionalProperties": false});
    if !required.is_empty() {
        merged["required"] = Value::Array(required);
    }
    if let Some(description) = schemas.get(name).and_then(|s| s.get("description")) {
        merged["description"] = description.clone();
    }
    Some(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_all_of_parts_merge_into_one_closed_object() {
        let mut document = json!({"components": {"schemas": {
            "Login": {"type": "object", "properties": {"username": {"type": "string"}}, "required": ["username"], "additionalProperties": false},
            "Spec": {"allOf": [{"$ref": "#/components/schemas/Login"}, {"type": "object", "properties": {"address": {"type": "string"}}, "required": ["address"]}]},
            "Open": {"allOf": [{"type": "object", "properties": {"a": {}}}, {"type": "object", "properties": {"b": {}}}]},
        }}, "paths": {"/v1/x/{id}": {"post": {"requestBody": {}, "responses": {"200": {}}}}, "/healthz": {"get": {"security": [{}], "responses": {"200": {}}}}}});
        complete(&mut document);
        let spec = &document["components"]["schemas"]["Spec"];
        assert_eq!(spec["additionalProperties"], false);
        assert_eq!(spec["required"], json!(["username", "address"]));
        assert!(spec["properties"]["username"].is_object() && spec["properties"]["address"].is_object());
        assert!(document["components"]["schemas"]["Open"]["allOf"].is_array(), "open parts stay as they are");
        let responses = &document["paths"]["/v1/x/{id}"]["post"]["responses"];
        for code in ["401", "404", "422"] {
            assert!(responses[code].is_object(), "{code}");
        }
        assert!(document["paths"]["/healthz"]["get"]["responses"].get("401").is_none());
    }

    #[test]
    fn every_listed_name_and_non_empty_string_is_constrained_in_the_real_document() {
        let document: Value = serde_json::from_str(&crate::openapi_json()).unwrap();
        let schemas = &document["components"]["schemas"];
        for (schema, property) in NAMES {
            assert_eq!(schemas[schema]["properties"][property]["pattern"], NAME_PATTERN, "{schema}.{property}");
        }
        for (schema, property, _) in NON_EMPTY {
            assert_eq!(schemas[schema]["properties"][property]["minLength"], 1, "{schema}.{property}");
        }
        let node = &document["paths"]["/v1/nodes/{id}"]["get"]["parameters"][0];
        assert_eq!(node["schema"]["pattern"], NAME_PATTERN, "{node}");
        let pattern = name_rule(NAME_PATTERN);
        for (name, valid) in [("n1", true), ("_a", true), ("a.b-c_d", true), (".a", false), ("-a", false), ("", false)]
        {
            assert_eq!(pattern(name), valid, "{name}");
            assert_eq!(metal_protocol::identity::validate_name("x", name).is_ok(), valid, "{name}");
        }
        assert!(!pattern(&"a".repeat(65)) && metal_protocol::identity::validate_name("x", &"a".repeat(65)).is_err());
    }

    /// NAME_PATTERN, evaluated by hand (no regex engine here): the same rule as the regex.
    fn name_rule(pattern: &str) -> impl Fn(&str) -> bool {
        assert_eq!(pattern, "^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$", "update this check with the pattern");
        |name: &str| {
            let ok =
                |b: u8, first: bool| b.is_ascii_alphanumeric() || b == b'_' || (!first && (b == b'.' || b == b'-'));
            (1..=64).contains(&name.len()) && name.bytes().enumerate().all(|(i, b)| ok(b, i == 0))
        }
    }
}
