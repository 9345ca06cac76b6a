//! Canonical JSON (RFC 8785, "JCS"): the exact bytes a signature covers.
//!
//! Signed payloads are serialized through here, never through `serde_json::to_vec`, so a
//! signer and a verifier on different machines, versions or languages agree on the bytes.
//! The one decision a reader needs: integers must fit an IEEE double exactly (|n| <= 2^53),
//! because JCS numbers are doubles; larger values (seeds, hashes) travel as strings.

use serde::Serialize;
use serde_json::Value;

/// Largest integer a JSON number carries exactly in every implementation (I-JSON, RFC 7493).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a value has no canonical form.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CanonicalError {
    /// An integer outside ±(2^53 - 1) cannot be represented exactly as a JSON number.
    #[error("integer {0} is outside the exactly representable range of ±(2^53-1)")]
    UnsafeInteger(String),
    /// NaN and infinities have no JSON representation.
    #[error("non-finite number has no JSON representation")]
    NonFinite,
    /// The value could not be serialized to JSON at all.
    #[error("value does not serialize to JSON: {0}")]
    Serialize(String),
}

/// Serializes `value` to canonical JSON bytes.
pub fn to_canonical_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let value = serde_json::to_value(value).map_err(|e| CanonicalError::Serialize(e.to_string()))?;
    let mut out = Vec::new();
    write_value(&value, &mut out)?;
    Ok(out)
}

/// Writes the canonical form of an already parsed JSON value.
pub fn write_value(value: &Value, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            // JCS orders members by the UTF-16 code units of their names.
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push(b'{');
            for (i, (name, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(name, out);
                out.push(b':');
                write_value(item, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn write_number(n: &serde_json::Number, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return Err(CanonicalError::UnsafeInteger(u.to_string()));
        }
        out.extend_from_slice(u.to_string().as_bytes());
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(CanonicalError::UnsafeInteger(i.to_string()));
        }
        out.extend_from_slice(i.to_string().as_bytes());
    } else {
        let f = n.as_f64().ok_or(CanonicalError::NonFinite)?;
        if !f.is_finite() {
            return Err(CanonicalError::NonFinite);
        }
        // ECMAScript Number.prototype.toString, as JCS requires (-0 prints as 0).
        let mut buffer = ryu_js::Buffer::new();
        out.extend_from_slice(buffer.format_finite(f).as_bytes());
    }
    Ok(())
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{08}' => out.extend_from_slice(b"\\b"),
            '\u{0c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if u32::from(c) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", u32::from(c)).as_bytes());
            }
            c => {
                let mut utf8 = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(json: &str) -> String {
        let value: Value = serde_json::from_str(json).unwrap();
        let mut out = Vec::new();
        write_value(&value, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn rfc8785_section_3_2_2_example() {
        let input = r#"{
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        assert_eq!(
            canonical(input),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn rfc8785_sorting_uses_utf16_code_units() {
        // From RFC 8785 section 3.2.3: U+1F600 (surrogates D83D DE00) sorts before U+FB33.
        let input = r#"{"\ufb33":"Hebrew","\ud83d\ude00":"Emoji","\r":"CR","1":"One","\u0080":"Control","ö":"Latin"}"#;
        assert_eq!(
            canonical(input),
            "{\"\\r\":\"CR\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"Latin\",\"😀\":\"Emoji\",\"\u{fb33}\":\"Hebrew\"}"
        );
    }

    #[test]
    fn numbers_follow_ecmascript() {
        assert_eq!(canonical("[-0.0, 1.0, 100, 1e21, 1e-7, 0.1]"), "[0,1,100,1e+21,1e-7,0.1]");
    }

    #[test]
    fn unsafe_integers_are_refused() {
        let err = to_canonical_vec(&(1u64 << 53)).unwrap_err();
        assert!(matches!(err, CanonicalError::UnsafeInteger(_)), "{err}");
        assert!(to_canonical_vec(&((1u64 << 53) - 1)).is_ok());
        assert!(to_canonical_vec(&-(1i64 << 53)).is_err());
    }
}
