//! What every command prints and reads: a table for people or JSON for scripts, and input
//! from a file or stdin (`-`).

use std::io::Read as _;

use clap::ValueEnum;
use serde_json::{Value, json};

use crate::client::{ClientError, table};

/// How results are printed (`-o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// An aligned table of the command's columns.
    Table,
    /// The API's JSON, pretty-printed.
    Json,
}

/// Reads `file`, or stdin when it is `-`.
pub fn read_input(file: &std::path::Path) -> Result<String, ClientError> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|e| ClientError::Config(format!("stdin: {e}")))?;
        Ok(text)
    } else {
        std::fs::read_to_string(file).map_err(|e| ClientError::Config(format!("{}: {e}", file.display())))
    }
}

/// Prints `value` as `output` says: a table of `columns`, or the JSON whole.
pub fn print(output: Output, value: &Value, columns: &[(&str, &str)]) {
    match (output, value) {
        (Output::Json, v) => println!("{}", serde_json::to_string_pretty(v).unwrap_or_default()),
        (Output::Table, Value::Array(rows)) => print!("{}", table(rows, columns)),
        (Output::Table, row) => print!("{}", table(std::slice::from_ref(row), columns)),
    }
}

/// The columns of [`reading_rows`].
pub const READING_COLUMNS: [(&str, &str); 3] = [("SECTION", "section"), ("NAME", "name"), ("VALUE", "value")];

/// A BMC's read model (`GET /v1/nodes/ID/bmc/readings`) as table rows: one per reading
/// (section, name, value), and one per section the BMC did not report, saying why.
pub fn reading_rows(model: &Value) -> Vec<Value> {
    let row = |section: &str, name: &str, value: String| json!({"section": section, "name": name, "value": value});
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    let mut rows = Vec::new();
    let sections = ["identity", "health", "power", "temperatures", "powerWatts", "firmware", "logs"];
    for section in sections {
        let part = &model[section];
        let value = &part["value"];
        if part["status"] != "present" {
            rows.push(row(section, "", format!("not reported: {}", text(value))));
            continue;
        }
        match section {
            "identity" => {
                for (name, v) in value.as_object().into_iter().flatten().filter(|(_, v)| !v.is_null()) {
                    rows.push(row(section, name, text(v)));
                }
            }
            "temperatures" => {
                for t in value.as_array().into_iter().flatten() {
                    let critical =
                        t["upperCritical"].as_f64().map(|c| format!(" (critical {c:.1} C)")).unwrap_or_default();
                    let celsius = t["celsius"].as_f64().unwrap_or(f64::NAN);
                    rows.push(row(section, &text(&t["name"]), format!("{celsius:.1} C{critical}")));
                }
            }
            "powerWatts" => rows.push(row(section, "", format!("{} W", text(value)))),
            "firmware" => {
                for f in value.as_array().into_iter().flatten() {
                    rows.push(row(section, &text(&f["name"]), text(&f["version"])));
                }
            }
            "logs" => {
                for entry in value.as_array().into_iter().flatten() {
                    let when = entry["created"].as_str().unwrap_or("-");
                    let severity = entry["severity"].as_str().map(|s| format!("{s}: ")).unwrap_or_default();
                    rows.push(row(section, when, format!("{severity}{}", text(&entry["message"]))));
                }
            }
            _ => rows.push(row(section, "", text(value))),
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_model_is_one_row_per_reading_and_one_per_section_not_reported() {
        let model = json!({
            "identity": {"status": "present", "value": {"manufacturer": "QEMU", "serial": null}},
            "health": {"status": "present", "value": "OK"},
            "power": {"status": "present", "value": "on"},
            "temperatures": {"status": "present", "value": [{"name": "CPU1", "celsius": 45.0, "upperCritical": 90.0}]},
            "powerWatts": {"status": "absent", "value": "no Power resource"},
            "firmware": {"status": "present", "value": [{"id": "bios", "name": "BIOS", "version": "1.0.0"}]},
            "logs": {"status": "present", "value": [{"created": "2026-12-06T00:00:00Z", "severity": "Warning", "message": "fan"}]}
        });
        let shown = crate::client::table(&reading_rows(&model), &READING_COLUMNS);
        let lines: Vec<Vec<&str>> = shown.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], ["SECTION", "NAME", "VALUE"]);
        assert_eq!(lines[1], ["identity", "manufacturer", "QEMU"], "a null field is left out:\n{shown}");
        assert_eq!(lines[2], ["health", "OK"]);
        assert_eq!(lines[3], ["power", "on"]);
        assert_eq!(lines[4], ["temperatures", "CPU1", "45.0", "C", "(critical", "90.0", "C)"]);
        assert_eq!(lines[5], ["powerWatts", "not", "reported:", "no", "Power", "resource"]);
        assert_eq!(lines[6], ["firmware", "BIOS", "1.0.0"]);
        assert_eq!(lines[7], ["logs", "2026-12-06T00:00:00Z", "Warning:", "fan"]);
        assert_eq!(lines.len(), 8, "{shown}");
    }
}
