//! Prometheus metrics: request counters by route and status, plus gauges read from the
//! database at scrape time (nodes by state, newest event).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// Counters kept in memory.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
}

impl Metrics {
    /// Counts one request.
    pub fn count_request(&self, method: &'static str, route: &str, status: u16) {
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *requests.entry((method.to_owned(), route.to_owned(), status)).or_default() += 1;
    }

    /// Renders the text exposition format.
    pub fn render(&self, nodes_by_state: &[(String, i64)], last_event: i64) -> String {
        let mut out = String::new();
        out.push_str("# HELP metal_http_requests_total HTTP requests by method, route and status.\n");
        out.push_str("# TYPE metal_http_requests_total counter\n");
        for ((method, route, status), n) in self.requests.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(
                out,
                "metal_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP metal_nodes Nodes by lifecycle state.\n# TYPE metal_nodes gauge\n");
        for (state, n) in nodes_by_state {
            let _ = writeln!(out, "metal_nodes{{state=\"{state}\"}} {n}");
        }
        out.push_str(
            "# HELP metal_events_last_seq Sequence number of the newest event.\n# TYPE metal_events_last_seq gauge\n",
        );
        let _ = writeln!(out, "metal_events_last_seq {last_event}");
        out
    }
}
