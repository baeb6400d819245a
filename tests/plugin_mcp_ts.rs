//! MCP serving (the `mcp` feature) against the official MCP TypeScript SDK 1.x client
//! (`tests/mcp/ts_client.mjs`, the SDK installed by `tests/mcp/node.sh` into
//! `target/mcp-node`). That client drops a progress notification that reaches it in the same
//! read as its call's reply (typescript-sdk #2580), so every progress event arriving here
//! shows the plugin writes progress when it is made, apart from the reply.

mod common;
mod mcp;

use std::process::Command;
use std::sync::OnceLock;

use common::everything_bin;
use serde_json::{Value, json};

/// Sequential `progress` calls the client makes, and the events each sends.
const CALLS: usize = 20;
const STEPS: u64 = 3;

/// One run of the client against `everything`, shared by the tests of this binary; `None`
/// when Node is missing. The script bounds every wait itself.
fn report() -> Option<&'static Value> {
    static REPORT: OnceLock<Option<Value>> = OnceLock::new();
    REPORT
        .get_or_init(|| {
            let sdk = mcp::sdk_node()?;
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/ts_client.mjs");
            let out = Command::new("node")
                .arg(script)
                .arg("--sdk")
                .arg(&sdk)
                .args(["--calls", &CALLS.to_string(), "--steps", &STEPS.to_string()])
                .arg("--")
                .arg(everything_bin())
                .output()
                .unwrap_or_else(|e| panic!("cannot run node {script}: {e}"));
            let (stdout, stderr) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            assert!(
                out.status.success(),
                "the TypeScript SDK client failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
                out.status
            );
            let line = stdout.lines().last().unwrap_or_default();
            Some(
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("report {line:?}: {e}\nstderr: {stderr}")),
            )
        })
        .as_ref()
}

#[test]
fn the_typescript_sdk_lists_and_calls_the_reference_plugins_tools() {
    let Some(r) = report() else {
        return;
    };
    assert_eq!(r["server_name"], "everything");
    assert_eq!(r["has_tools_capability"], true);
    let tools = r["tools"].as_array().expect("tool names");
    for name in ["echo", "fail", "sleep", "sample", "progress"] {
        assert!(tools.contains(&json!(name)), "{name} listed: {tools:?}");
    }
    assert_eq!(r["echo"]["is_error"], false);
    assert_eq!(r["echo"]["structured"], json!({"text": "hi", "n": 3}));
    assert_eq!(r["fail"]["is_error"], true);
    assert_eq!(r["fail"]["text"], "no luck");
    assert_eq!(r["sleep"]["is_error"], false);
    assert!(
        r["sleep"]["structured"]["slept_ms"].as_u64().unwrap_or(0) >= 20,
        "{r}"
    );
    assert_eq!(
        r["sample"]["structured"],
        json!({"model": "ts-sdk-test-model", "text": "sampled[user:name a colour] max=16"})
    );
    assert_eq!(r["unknown_tool"]["code"], -32602);
    assert_eq!(r["closed"], true);
}

#[test]
fn the_typescript_sdk_receives_every_progress_notification() {
    let Some(r) = report() else {
        return;
    };
    let calls = r["progress"].as_array().expect("progress calls");
    assert_eq!(calls.len(), CALLS);
    let expected: Vec<u64> = (1..=STEPS).collect();
    // Each call's progress values as received, e.g. [1,2,3] or [] when all were dropped.
    let received: Vec<String> = calls.iter().map(|c| c["received"].to_string()).collect();
    let short = calls
        .iter()
        .filter(|c| c["received"] != json!(expected))
        .count();
    let errors = r["errors"].as_array().map_or(&[][..], Vec::as_slice);
    assert!(
        short == 0,
        "{short} of {CALLS} calls lost progress ({}); received per call: {}; \
         the client's first errors: {:?}",
        r["progress_summary"],
        received.join(" "),
        &errors[..errors.len().min(3)]
    );
    for call in calls {
        assert_eq!(
            call["result"],
            json!({"steps": STEPS, "sent": STEPS, "dropped": 0}),
            "{call}"
        );
    }
    assert_eq!(
        r["errors"],
        json!([]),
        "the SDK reported no dropped message"
    );
}
