//! MCP serving (the `mcp` feature): the official MCP Python SDK's client drives the
//! reference plugin and the quickstart plugin, and raw frames check what the SDK does not
//! show (cancellation, revisions, the frame cap, batches, exit status).

mod common;
mod mcp;

use common::{Conn, example_bin};
use serde_json::{Value, json};

/// Runs `tests/mcp/client.py` against `plugin` and returns its report; `None` (skipped,
/// with a message) only when this machine has no python3.
fn sdk_report(extra: &[&str], plugin: &std::path::Path) -> Option<Value> {
    let python = mcp::sdk_python()?;
    let mut args: Vec<&str> = extra.to_vec();
    let plugin = plugin.to_str().expect("a UTF-8 path");
    args.extend(["--", plugin]);
    let (ok, out, err) = mcp::run_script(&python, "client.py", &args);
    assert!(ok, "the SDK client failed:\nstdout: {out}\nstderr: {err}");
    let line = out.lines().last().unwrap_or_default();
    Some(serde_json::from_str(line).unwrap_or_else(|e| panic!("report {line:?}: {e}\n{err}")))
}

fn everything() -> std::path::PathBuf {
    example_bin("everything")
}

#[test]
fn the_python_sdk_lists_and_calls_the_reference_plugins_tools() {
    let Some(r) = sdk_report(&[], &everything()) else {
        return;
    };
    assert_eq!(r["protocol_version"], "2025-11-25");
    assert_eq!(r["server_name"], "everything");
    assert_eq!(
        r["instructions"],
        "Reference plugin exercising every executa feature"
    );
    assert_eq!(r["has_tools_capability"], true);
    // JSON Schema from the parameter list, as the SDK parsed it.
    assert_eq!(
        r["tools"]["sample"],
        json!({"type": "object",
               "properties": {"prompt": {"type": "string", "description": "The prompt"},
                              "max_tokens": {"type": "integer", "description": "Token cap", "default": 256}},
               "required": ["prompt"]})
    );
    assert_eq!(r["tools"]["echo"], json!({"type": "object"}));
    // Structured output, with its JSON as text for older clients.
    assert_eq!(r["echo"]["is_error"], false);
    assert_eq!(r["echo"]["structured"], json!({"text": "hi", "n": 3}));
    let text: Value =
        serde_json::from_str(r["echo"]["text"].as_str().expect("text")).expect("JSON");
    assert_eq!(text, json!({"text": "hi", "n": 3}));
    // A tool error and bad arguments are results the model can read.
    assert_eq!(r["fail"]["is_error"], true);
    assert_eq!(r["fail"]["text"], "no luck");
    assert_eq!(r["invalid"]["is_error"], true);
    let invalid = r["invalid"]["text"].as_str().expect("text");
    assert!(
        invalid.contains("`ms`") && invalid.contains("\"path\":\"ms\""),
        "{invalid}"
    );
    // Twenty calls in flight, each answered once, correctly.
    let in_flight = r["in_flight"].as_array().expect("20 results");
    assert_eq!(in_flight.len(), 20);
    for one in in_flight {
        // The tool reports the time it really slept.
        let slept = one["structured"]["slept_ms"].as_u64().unwrap_or(0);
        assert!(one["is_error"] == false && slept >= 200, "{one}");
    }
    // Sampling through the client's callback.
    assert_eq!(
        r["sample"]["structured"],
        json!({"model": "sdk-test-model", "text": "sampled[user:name a colour] max=16"})
    );
    // Progress through the client's callback, increasing.
    assert_eq!(r["progress"]["structured"]["sent"], 3);
    let seen = r["progress_seen"].as_array().expect("progress events");
    let steps: Vec<f64> = seen
        .iter()
        .map(|p| p["progress"].as_f64().unwrap_or(-1.0))
        .collect();
    assert_eq!(steps, [1.0, 2.0, 3.0], "{seen:?}");
    assert_eq!(seen[0]["total"], 3.0);
    // Storage has no MCP counterpart: a clear tool error, not a hang.
    assert_eq!(r["storage"]["is_error"], true);
    let storage = r["storage"]["text"].as_str().expect("text");
    assert!(storage.contains("no counterpart in MCP"), "{storage}");
    // Protocol errors stay JSON-RPC errors.
    assert_eq!(r["panic"]["code"], -32603);
    assert_eq!(r["unknown_tool"]["code"], -32602);
    assert_eq!(r["ping"], true);
    assert_eq!(r["closed"], true);
}

#[test]
fn without_the_clients_sampling_capability_sampling_is_a_clear_tool_error() {
    let Some(r) = sdk_report(&["--no-sampling"], &everything()) else {
        return;
    };
    assert_eq!(r["sample"]["is_error"], true);
    let text = r["sample"]["text"].as_str().expect("text");
    assert!(
        text.contains("did not declare the `sampling` capability"),
        "{text}"
    );
}

#[test]
fn the_quickstart_plugin_serves_the_python_sdk() {
    let Some(r) = sdk_report(&[], &example_bin("hello")) else {
        return;
    };
    assert_eq!(r["greet"]["structured"], json!({"greeting": "Hello, Ada."}));
    assert_eq!(r["tools"]["greet"]["required"], json!(["name"]));
}

fn mcp_init(conn: &mut Conn, revision: &str) -> Value {
    let params = json!({"protocolVersion": revision, "capabilities": {},
                        "clientInfo": {"name": "raw-test", "version": "0"}});
    conn.request(0, "initialize", Some(params));
    let reply = conn.recv_until_id("0").0.result().clone();
    conn.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    reply
}

#[test]
fn revisions_are_negotiated_and_executa_hosts_see_no_change() {
    for (offered, answered) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("2023-01-01", "2025-11-25"),
    ] {
        let mut conn = Conn::spawn();
        let reply = mcp_init(&mut conn, offered);
        assert_eq!(reply["protocolVersion"], answered, "{reply}");
        assert_eq!(
            reply["capabilities"],
            json!({"tools": {"listChanged": false}})
        );
        assert_eq!(reply["serverInfo"]["name"], "everything");
        conn.finish();
    }
    let mut conn = Conn::spawn();
    let reply = conn.initialize("2.0", json!({}));
    assert_eq!(reply["protocolVersion"], "2.0");
    assert!(reply.get("serverInfo").is_some() && reply.get("server_info").is_some());
    conn.invoke(1, "echo", json!({"a": 1}));
    let m = conn.recv_until_id("1").0;
    assert_eq!(m.result(), &json!({"success": true, "data": {"a": 1}}));
    // MCP's own methods are unknown to an Executa host, as without the feature.
    for (id, method) in [(2, "ping"), (3, "tools/list"), (4, "tools/call")] {
        conn.request(id, method, Some(json!({"name": "echo", "arguments": {}})));
        let m = conn.recv_until_id(&id.to_string()).0;
        assert_eq!(m.error_code(), -32601, "{}", m.raw);
    }
    conn.finish();
}

#[test]
fn a_cancelled_call_gets_no_reply_and_the_plugin_goes_on() {
    let mut conn = Conn::spawn();
    mcp_init(&mut conn, "2025-06-18");
    let call = |id: u64, ms: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "sleep", "arguments": {"ms": ms}}})
    };
    conn.send(&call(5, 300));
    conn.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 5, "reason": "the user gave up"}}),
    );
    // Started later and longer: its reply comes after the one 5 would have had.
    conn.send(&call(6, 1500));
    let (six, before) = conn.recv_until_id("6");
    assert!(
        six.result()["structuredContent"]["slept_ms"].as_u64() >= Some(1500),
        "{}",
        six.raw
    );
    assert!(
        before.iter().all(|m| m.raw_id().as_deref() != Some("5")),
        "a cancelled call was answered: {:?}",
        before.iter().map(|m| &m.raw).collect::<Vec<_>>()
    );
    conn.send(&call(7, 0));
    assert!(conn.recv_until_id("7").0.result().get("content").is_some());
    assert!(conn.finish().is_empty());
}

#[test]
fn the_same_limits_hold_in_mcp_mode() {
    let mut conn = Conn::spawn();
    mcp_init(&mut conn, "2025-11-25");
    // A frame over the 16 MiB cap is answered, and the plugin goes on.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"echo","arguments":{{"x":"{}"}}}}}}"#,
        "y".repeat(17 << 20)
    );
    conn.send_line(&big);
    let m = conn.recv_until_id("8").0;
    assert!(
        m.error_message()
            .contains("exceeds the 16777216-byte limit"),
        "{}",
        m.raw
    );
    // A result over the 4 MiB cap is an error result, not a 5 MiB frame.
    conn.send(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "big", "arguments": {"bytes": 5 << 20}}}));
    let m = conn.recv_until_id("9").0;
    assert!(m.raw.len() < 4096, "{} bytes", m.raw.len());
    assert_eq!(m.result()["isError"], true);
    assert!(
        m.result()["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("too large")
    );
    // A batch (2025-03-26 only) is refused with a clear error, never left hanging.
    conn.send_line(r#"[{"jsonrpc":"2.0","id":10,"method":"ping"}]"#);
    let m = conn.recv();
    assert_eq!(m.error_code(), -32600, "{}", m.raw);
    // Bad tools/call params are -32602.
    conn.send(
        &json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"arguments": {}}}),
    );
    let m = conn.recv_until_id("11").0;
    assert_eq!(m.error_code(), -32602, "{}", m.raw);
    assert!(m.error_message().contains("tools/call"), "{}", m.raw);
    // Methods MCP has and the plugin does not serve are -32601.
    conn.request(12, "resources/list", Some(json!({})));
    assert_eq!(conn.recv_until_id("12").0.error_code(), -32601);
    // stdin closed: exit 0, nothing more written.
    assert!(conn.finish().is_empty());
}

#[test]
#[cfg(unix)]
fn sigterm_in_mcp_mode_exits_zero() {
    let mut conn = Conn::spawn();
    mcp_init(&mut conn, "2025-06-18");
    conn.request(1, "ping", None);
    assert_eq!(conn.recv_until_id("1").0.result(), &json!({}));
    conn.sigterm();
    assert_eq!(conn.wait_exit().code(), Some(0), "{}", conn.stderr());
}

executa::args! {
    struct Order {
        /// Order id
        id: String,
        /// Lines
        items: Vec<Line>,
        /// How fast
        speed: String = "normal",
    }
}

executa::args! {
    struct Line {
        /// How many
        qty: u32,
    }
}

/// `Plugin::serve` (in-process) serves MCP too, and an `args!` type with nested objects,
/// arrays and defaults reaches `tools/list` as JSON Schema.
#[test]
fn an_in_process_plugin_serves_mcp_with_nested_schemas() {
    let plugin = executa::Plugin::new("orders", "1.2.3")
        .description("Takes orders")
        .tool(executa::Tool::typed(
            "order",
            "Places an order",
            |o: Order, _ctx| {
                let total: u32 = o.items.iter().map(|l| l.qty).sum();
                Ok::<_, executa::ToolError>(json!({"id": o.id, "total": total, "speed": o.speed}))
            },
        ));
    let mut conn = Conn::serve(plugin);
    let reply = mcp_init(&mut conn, "2025-03-26");
    assert_eq!(reply["protocolVersion"], "2025-03-26");
    assert_eq!(
        reply["serverInfo"],
        json!({"name": "orders", "version": "1.2.3"})
    );
    assert_eq!(reply["instructions"], "Takes orders");
    conn.request(1, "tools/list", Some(json!({})));
    let list = conn.recv_until_id("1").0.result().clone();
    let schema = &list["tools"][0]["inputSchema"];
    assert_eq!(schema["required"], json!(["id", "items"]), "{schema}");
    assert_eq!(schema["properties"]["speed"]["default"], "normal");
    assert_eq!(
        schema["properties"]["items"]["items"]["properties"]["qty"]["type"], "integer",
        "{schema}"
    );
    assert_eq!(
        schema["properties"]["items"]["items"]["required"],
        json!(["qty"])
    );
    conn.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "order", "arguments": {"id": "A1", "items": [{"qty": 2}, {"qty": "x"}]}}}),
    );
    let bad = conn.recv_until_id("2").0;
    assert_eq!(bad.result()["isError"], true);
    let text = bad.result()["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(text.contains("items[1].qty"), "{text}");
    conn.send(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "order", "arguments": {"id": "A1", "items": [{"qty": 2}, {"qty": 3}]}}}),
    );
    let ok = conn.recv_until_id("3").0;
    assert_eq!(
        ok.result()["structuredContent"],
        json!({"id": "A1", "total": 5, "speed": "normal"})
    );
    conn.close_stdin();
    conn.drain_to_eof();
    conn.wait_stopped();
}

/// Both sides ours: `executa call --protocol mcp` drives `everything` served as MCP, its
/// sampling answered by the host's development backend in MCP's shape, storage refused.
#[test]
fn the_executa_host_drives_the_plugin_served_as_mcp() {
    let call = |tool: &str, args: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_executa"))
            .args(["call", "--protocol", "mcp", "--args", args, tool, "--"])
            .arg(everything())
            .output()
            .expect("run executa call");
        let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (
            out.status.code(),
            stdout,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The envelope `executa call` prints for both protocols.
    let (code, out, err) = call("sample", r#"{"prompt":"hi"}"#);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out["success"], true, "{out}");
    assert_eq!(out["data"]["text"], "hi", "{out}");
    let (code, out, err) = call("remember", r#"{"key":"k","value":{"v":1}}"#);
    assert_eq!(code, Some(1), "{out} {err}");
    assert_eq!(out["success"], false, "{out}");
    assert!(
        out["error"]
            .as_str()
            .unwrap_or_default()
            .contains("no counterpart in MCP"),
        "{out}"
    );
}
