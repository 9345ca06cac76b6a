//! The API's extractors, whose rejections answer in its error shape (`ApiJson`, `ApiPath`,
//! `ApiQuery`; behind the `axum` feature), and JSON request bodies read the way the OpenAPI
//! document describes them. serde's derived
//! structs also accept a JSON array (the fields in order), so `[null, null]` would pass as
//! a node patch although the schema says object: [`ApiJson`] parses the body, then
//! deserializes it through [`Strict`], which lets a struct come only from an object, at
//! every depth. Errors name the field path (`policy.fencing: ...`) without the JSON parser's
//! framing, in the API's error shape.

use axum::extract::{FromRequest, Request};
use serde::de::{self, DeserializeOwned, IntoDeserializer as _, Visitor};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// A JSON body whose rejections use the API's error shape.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: serde::Serialize> axum::response::IntoResponse for ApiJson<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

/// Query strings whose rejections use the API's error shape (INVALID_INPUT naming the query).
#[derive(Debug, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// Path parameters whose rejections use the API's error shape (a segment that is not UTF-8,
/// or not of the parameter's type).
#[derive(Debug, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let axum::Json(value) = axum::Json::<Value>::from_request(request, state).await?;
        from_value(value).map(ApiJson)
    }
}

/// Deserializes `value` as the API reads bodies: structs only from objects.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(Strict(value)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        ApiError::BadBody(if path == "." {
            format!("the request body: {inner}")
        } else {
            format!("the request body: {path}: {inner}")
        })
    })
}

/// A JSON value that deserializes a struct only from an object.
struct Strict(Value);

fn unexpected(value: &Value) -> de::Unexpected<'_> {
    match value {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(_) => de::Unexpected::Other("number"),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

struct Seq(std::vec::IntoIter<Value>);

impl<'de> de::SeqAccess<'de> for Seq {
    type Error = serde_json::Error;

    fn next_element_seed<E: de::DeserializeSeed<'de>>(&mut self, seed: E) -> Result<Option<E::Value>, Self::Error> {
        self.0.next().map(|v| seed.deserialize(Strict(v))).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Fields {
    entries: serde_json::map::IntoIter,
    value: Option<Value>,
}

impl<'de> de::MapAccess<'de> for Fields {
    type Error = serde_json::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Self::Error> {
        match self.entries.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(key.into_deserializer()).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Self::Error> {
        let value = self.value.take().ok_or_else(|| de::Error::custom("a value without its key"))?;
        seed.deserialize(Strict(value))
    }
}

fn fields(map: Map<String, Value>) -> Fields {
    Fields { entries: map.into_iter(), value: None }
}

impl<'de> de::Deserializer<'de> for Strict {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(Seq(items.into_iter())),
            Value::Object(map) => visitor.visit_map(fields(map)),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Object(map) => visitor.visit_map(fields(map)),
            other => Err(de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            other => visitor.visit_some(Strict(other)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Inner {
        a: u32,
        #[serde(default)]
        b: Option<String>,
    }

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Outer {
        inner: Inner,
        #[serde(default)]
        list: Vec<Inner>,
        #[serde(default)]
        maybe: Option<Inner>,
    }

    fn read(value: Value) -> Result<Outer, String> {
        from_value::<Outer>(value).map_err(|e| e.to_string())
    }

    #[test]
    fn structs_come_only_from_objects_at_every_depth() {
        let ok = read(serde_json::json!({"inner": {"a": 1}, "list": [{"a": 2, "b": "x"}], "maybe": null})).unwrap();
        assert_eq!(ok.list[0], Inner { a: 2, b: Some("x".into()) });
        assert!(read(serde_json::json!([{"a": 1}, [], null])).unwrap_err().contains("invalid type: sequence"));
        let nested = read(serde_json::json!({"inner": [1, null]})).unwrap_err();
        assert!(nested.contains("inner: invalid type: sequence, expected struct Inner"), "{nested}");
        let deep = read(serde_json::json!({"inner": {"a": 1}, "list": [{"a": 1}, [3]]})).unwrap_err();
        assert!(deep.contains("list[1]: invalid type: sequence"), "{deep}");
        let some = read(serde_json::json!({"inner": {"a": 1}, "maybe": [1]})).unwrap_err();
        assert!(some.contains("maybe: invalid type: sequence"), "{some}");
        let unknown = read(serde_json::json!({"inner": {"a": 1, "c": 2}})).unwrap_err();
        assert!(
            unknown.contains("inner.c: unknown field `c`") || unknown.contains("inner: unknown field `c`"),
            "{unknown}"
        );
    }
}
