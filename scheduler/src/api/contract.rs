//! The OpenAPI document as the server behaves, filled in where the generator leaves gaps:
//! every authenticated operation documents 401, every operation on `{id}` paths 404, and
//! every operation that takes a body or query parameters 422, each with the one error body;
//! and `allOf` schemas whose parts are closed objects (`additionalProperties: false`, which
//! `#[serde(flatten)]` with `deny_unknown_fields` produces, and which no body can satisfy)
//! are merged into the one closed object the server actually accepts.

use serde_json::{Map, Value, json};

/// Applies every fix to the document (its JSON form).
pub fn complete(document: &mut Value) {
    if let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, operations) in paths.iter_mut() {
            let Some(operations) = operations.as_object_mut() else { continue };
            for operation in operations.values_mut() {
                document_errors(path, operation);
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
    }
}

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}})
}

fn document_errors(path: &str, operation: &mut Value) {
    let unauthenticated =
        operation.get("security").and_then(Value::as_array).is_some_and(|s| s.iter().all(|r| r == &json!({})));
    let takes_input = operation.get("requestBody").is_some()
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
        responses
            .entry("422")
            .or_insert_with(|| error_response("the request breaks a validation rule (INVALID_INPUT)"));
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
}
