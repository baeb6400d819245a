//! Tools complete (issue 38, item 3): a tool's declared result type is its `outputSchema`
//! and its structured results match it, its declared annotations and title are listed,
//! and `tools/list` carries the caching hints of revision 2026-07-28. The official MCP
//! Python SDK's client reads them from the reference plugin (`everything`, tool `stats`),
//! at a handshake revision and at 2026-07-28; raw frames check the older revisions.

mod common;
mod mcp;

use common::{Conn, example_bin};
use serde_json::{Value, json};

/// Runs `tests/mcp/tools_client.py` in `mode` against the reference plugin and returns its
/// report; `None` (skipped, with a message) only when this machine has no python3.
fn sdk_report(mode: &str) -> Option<Value> {
    let python = mcp::sdk_python()?;
    let plugin = example_bin("everything");
    let plugin = plugin.to_str().expect("a UTF-8 path");
    let (ok, out, err) =
        mcp::run_script(&python, "tools_client.py", &[mode, "stats", "--", plugin]);
    assert!(ok, "the SDK client failed:\nstdout: {out}\nstderr: {err}");
    let line = out.lines().last().unwrap_or_default();
    Some(serde_json::from_str(line).unwrap_or_else(|e| panic!("report {line:?}: {e}\n{err}")))
}

/// The `outputSchema` the `Stats` result type declares: every field required but the
/// `Option`s, which may be `null` (serde writes `None` as `null`).
fn stats_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "count": {"type": "integer", "description": "How many numbers there are"},
            "sum": {"type": "number", "description": "Their sum"},
            "mean": {"type": ["number", "null"], "description": "Their mean; null when there are none"},
            "range": {
                "type": ["object", "null"],
                "description": "The smallest and the largest; null when there are none",
                "properties": {
                    "min": {"type": "number", "description": "The smallest"},
                    "max": {"type": "number", "description": "The largest"}
                },
                "required": ["min", "max"]
            }
        },
        "required": ["count", "sum"]
    })
}

/// What both sessions must show of the `stats` tool and its calls.
fn check_stats(r: &Value) {
    let stats = &r["tools"]["stats"];
    assert_eq!(stats["title"], "Number statistics", "{stats}");
    assert_eq!(stats["output_schema"], stats_schema());
    assert_eq!(
        stats["annotations"],
        json!({"title": "Number statistics", "readOnlyHint": true, "destructiveHint": false,
               "idempotentHint": true, "openWorldHint": false})
    );
    // The SDK validated both structured results against the schema and accepted them,
    // the one with nulls too.
    assert_eq!(
        r["some"],
        json!({"is_error": false,
               "structured": {"count": 3, "sum": 7.5, "mean": 2.5, "range": {"min": 1.0, "max": 4.5}}})
    );
    assert_eq!(
        r["none"],
        json!({"is_error": false,
               "structured": {"count": 0, "sum": 0.0, "mean": null, "range": null}})
    );
    // And its validator does refuse what does not match that schema.
    let refused = r["validator_rejects"].as_str().unwrap_or_default();
    assert!(
        refused.starts_with("Invalid structured content returned by tool stats"),
        "{}",
        r["validator_rejects"]
    );
    // A tool that declares none of it lists none of it.
    assert_eq!(
        r["tools"]["echo"],
        json!({"title": null, "description": "Returns its arguments object as data",
               "output_schema": null, "annotations": null})
    );
    assert_eq!(r["closed"], true);
}

#[test]
fn the_sdk_client_reads_the_output_schema_and_annotations_and_accepts_the_results() {
    let Some(r) = sdk_report("legacy") else {
        return;
    };
    assert_eq!(r["protocol_version"], "2025-11-25");
    check_stats(&r);
}

#[test]
fn a_2026_07_28_sdk_client_reads_the_caching_hints_of_tools_list() {
    let Some(r) = sdk_report("2026-07-28") else {
        return;
    };
    assert_eq!(r["protocol_version"], "2026-07-28");
    assert_eq!(r["ttl_ms"], 3_600_000);
    assert_eq!(r["cache_scope"], "private");
    check_stats(&r);
}

#[test]
fn every_revisions_tools_list_carries_the_caching_hints() {
    for revision in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let mut conn = Conn::spawn();
        let params = json!({"protocolVersion": revision, "capabilities": {},
                            "clientInfo": {"name": "raw-test", "version": "0"}});
        conn.request(0, "initialize", Some(params));
        conn.recv_until_id("0");
        conn.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        conn.request(1, "tools/list", None);
        let list = conn.recv_until_id("1").0.result().clone();
        assert_eq!(list["ttlMs"], 3_600_000, "{revision}: {list}");
        assert_eq!(list["cacheScope"], "private", "{revision}: {list}");
        let stats = list["tools"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["name"] == "stats"))
            .unwrap_or_else(|| panic!("no stats tool: {list}"));
        assert_eq!(stats["outputSchema"], stats_schema());
        assert!(conn.finish().is_empty());
    }
}
