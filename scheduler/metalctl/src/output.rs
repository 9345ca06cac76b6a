//! What every command prints and reads: a table for people or JSON for scripts, and input
//! from a file or stdin (`-`).

use std::io::Read as _;

use clap::ValueEnum;
use serde_json::Value;

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
