//! Lifecycle methods of the real `everything` plugin, driven over its stdio pipes.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use common::{Conn, everything_bin};
use serde_json::{Value, json};

const TOOLS: &[&str] = &[
    "echo",
    "sleep",
    "fail",
    "panic",
    "big",
    "print",
    "credentials",
    "sample",
    "remember",
    "recall",
    "progress",
    "noop",
];

#[test]
fn initialize_current_shape_negotiates_v2_and_the_used_subset() {
    let mut p = Conn::spawn();
    let caps = json!({
        "sampling": {
            "modalities": ["text"],
            "maxTokensPerCall": 8192,
            "maxCallsPerInvoke": 8,
            "responseFormat": ["json_object", "json_schema"]
        },
        "fileTransport": true,
        "image": {}
    });
    let r = p.initialize("2.0", caps);
    assert_eq!(r["protocolVersion"], "2.0");
    let info = json!({ "name": "everything", "version": "1.0.0" });
    assert_eq!(r["server_info"], info);
    assert_eq!(r["serverInfo"], info);
    // The plugin declares llm.sample and aps.kv: of what the host offered it uses only
    // sampling (storage was not offered, image is not declared, fileTransport is no
    // capability the plugin claims).
    assert_eq!(r["capabilities"], json!({ "sampling": {} }));
    assert_eq!(r["client_capabilities"], r["capabilities"]);
    p.finish();
}

#[test]
fn initialize_older_shape_and_version_choice() {
    let mut p = Conn::spawn();
    let params = json!({
        "protocolVersion": "2.0",
        "host_capabilities": { "llm.sample": true, "aps.kv": true, "llm.image": true, "aps.files": false }
    });
    p.request(1, "initialize", Some(params));
    let r = p.recv_until_id("1").0.result().clone();
    assert_eq!(r["protocolVersion"], "2.0");
    assert_eq!(
        r["serverInfo"],
        json!({ "name": "everything", "version": "1.0.0" })
    );
    assert_eq!(r["server_info"], r["serverInfo"]);
    assert_eq!(r["capabilities"], json!({ "sampling": {}, "storage": {} }));
    assert_eq!(r["client_capabilities"], r["capabilities"]);

    // A host offering 1.1 gets 1.1; an unknown offer gets 2.0.
    p.request(2, "initialize", Some(json!({ "protocolVersion": "1.1" })));
    assert_eq!(p.recv_until_id("2").0.result()["protocolVersion"], "1.1");
    p.request(3, "initialize", Some(json!({ "protocolVersion": "9.9" })));
    assert_eq!(p.recv_until_id("3").0.result()["protocolVersion"], "2.0");
    p.finish();
}

fn check_manifest(m: &Value) {
    assert!(
        m.get("manifest").is_none(),
        "describe must not wrap the manifest: {m}"
    );
    assert_eq!(m["name"], "everything");
    assert_eq!(m["version"], "1.0.0");
    assert!(m["description"].as_str().is_some_and(|d| !d.is_empty()));
    assert_eq!(m["host_capabilities"], json!(["llm.sample", "aps.kv"]));
    let creds = m["credentials"].as_array().expect("credentials list");
    assert_eq!(creds.len(), 1);
    assert_eq!(creds[0]["name"], "DEMO_API_KEY");
    assert_eq!(creds[0]["required"], false);

    let tools = m["tools"].as_array().expect("tools list");
    let names: BTreeSet<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for t in TOOLS {
        assert!(names.contains(t), "tool {t} missing from {names:?}");
    }
    for t in tools {
        assert!(
            t["description"].is_string(),
            "tool without description: {t}"
        );
        assert!(t.get("input_schema").is_none());
        let params = t["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("parameters must be a LIST: {t}"));
        for p in params {
            for key in ["name", "type", "description", "required"] {
                assert!(p.get(key).is_some(), "parameter without {key}: {p}");
            }
            let ty = p["type"].as_str().unwrap();
            assert!(
                ["string", "integer", "number", "boolean", "array", "object"].contains(&ty),
                "bad type {ty}"
            );
        }
    }
    let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();
    assert_eq!(
        tool("sleep")["parameters"],
        json!([{ "name": "ms", "type": "integer", "description": "Milliseconds", "required": true }])
    );
    let sample = tool("sample")["parameters"].as_array().unwrap().clone();
    assert_eq!(sample[0]["name"], "prompt");
    assert_eq!(sample[0]["required"], true);
    assert_eq!(sample[1]["name"], "max_tokens");
    assert_eq!(sample[1]["required"], false);
    assert_eq!(sample[1]["default"], 256);
    let demo = tool("_schema_demo")["parameters"]
        .as_array()
        .unwrap()
        .clone();
    let tags = demo
        .iter()
        .find(|p| p["name"] == "tags")
        .expect("tags param");
    assert_eq!(tags["type"], "array");
    assert_eq!(tags["items"], json!({ "type": "string" }));
    assert_eq!(tool("echo")["parameters"], json!([]));
}

#[test]
fn describe_returns_the_bare_manifest_without_initialize() {
    let mut p = Conn::spawn();
    p.request(1, "describe", None);
    let m = p.recv_until_id("1").0.result().clone();
    check_manifest(&m);
    // The manifest is stable across calls.
    p.request(2, "describe", None);
    assert_eq!(p.recv_until_id("2").0.result(), &m);
    p.finish();
}

#[test]
fn describe_flag_prints_the_manifest_and_exits_0() {
    let out = Command::new(everything_bin())
        .arg("--describe")
        .stdin(Stdio::null())
        .output()
        .expect("run everything --describe");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("--describe prints JSON");
    check_manifest(&printed);

    // The same manifest the protocol serves.
    let mut p = Conn::spawn();
    p.request(1, "describe", None);
    assert_eq!(p.recv_until_id("1").0.result(), &printed);
    p.finish();
}

#[test]
fn invoke_returns_the_success_envelope() {
    let mut p = Conn::spawn();
    let args = json!({ "text": "hi", "n": 3, "nested": { "ok": true }, "list": [1, "two"] });
    p.invoke(1, "echo", args.clone());
    let (reply, skipped) = p.recv_until_id("1");
    assert!(skipped.is_empty());
    let r = reply.result();
    assert_eq!(r["success"], true);
    assert_eq!(r["data"], args);
    assert!(r.get("error").is_none());

    // Missing or null arguments are an empty object.
    p.request(2, "invoke", Some(json!({ "tool": "echo" })));
    assert_eq!(p.recv_until_id("2").0.data(), &json!({}));
    p.invoke(3, "echo", Value::Null);
    assert_eq!(p.recv_until_id("3").0.data(), &json!({}));
    // The older top-level invoke_id shape is accepted.
    p.request(
        4,
        "invoke",
        Some(json!({ "tool": "echo", "arguments": { "a": 1 }, "invoke_id": "old-1" })),
    );
    assert_eq!(p.recv_until_id("4").0.data(), &json!({ "a": 1 }));
    p.finish();
}

#[test]
fn a_failing_tool_returns_success_false_with_its_message() {
    let mut p = Conn::spawn();
    p.invoke(
        1,
        "fail",
        json!({ "message": "the widget is out of stock" }),
    );
    let reply = p.recv_until_id("1").0;
    assert_eq!(reply.failure(), "the widget is out of stock");
    assert!(
        reply.v.get("error").is_none(),
        "an expected failure is not a JSON-RPC error"
    );
    p.finish();
}

#[test]
fn health_reports_ready() {
    let mut p = Conn::spawn();
    p.request(1, "health", None);
    let r = p.recv_until_id("1").0.result().clone();
    assert_eq!(
        r,
        json!({ "status": "ready", "message": "", "details": {} })
    );
    p.finish();
}

#[test]
fn the_shutdown_method_stops_new_invokes_but_describe_and_health_are_served() {
    let mut p = Conn::spawn();
    p.invoke(1, "echo", json!({ "before": true }));
    assert_eq!(p.recv_until_id("1").0.data(), &json!({ "before": true }));

    p.request(2, "shutdown", None);
    assert_eq!(p.recv_until_id("2").0.result(), &json!({}));

    p.invoke(3, "echo", json!({ "after": true }));
    let refused = p.recv_until_id("3").0;
    assert!(
        refused.v.get("result").is_none(),
        "an invoke after shutdown must be refused: {}",
        refused.raw
    );
    assert!(
        refused.error_message().contains("shutting down"),
        "{}",
        refused.raw
    );

    p.request(4, "describe", None);
    assert_eq!(p.recv_until_id("4").0.result()["name"], "everything");
    p.request(5, "health", None);
    assert!(p.recv_until_id("5").0.result()["status"].is_string());
    // The process stays up until stdin closes, then exits 0.
    assert!(p.finish().is_empty());
}

#[test]
fn credentials_are_named_never_echoed() {
    let mut p = Conn::spawn();
    let secret = "sk-very-secret-value-1234";
    p.invoke_ctx(
        1,
        "credentials",
        json!({}),
        json!({ "invoke_id": "inv-c", "credentials": { "DEMO_API_KEY": secret } }),
    );
    let reply = p.recv_until_id("1").0;
    assert_eq!(reply.data(), &json!({ "names": ["DEMO_API_KEY"] }));
    assert!(!reply.raw.contains(secret));
    p.finish();
    assert!(!p.stderr().contains(secret));
}

#[test]
fn a_long_invoke_does_not_delay_health_or_describe() {
    let mut p = Conn::spawn();
    p.invoke(1, "sleep", json!({ "ms": 2000 }));
    p.request(2, "health", None);
    p.request(3, "describe", None);
    // Both quick replies arrive before the sleep's reply.
    let first = p.recv();
    let second = p.recv();
    let ids: BTreeSet<String> = [&first, &second]
        .iter()
        .map(|m| m.raw_id().unwrap())
        .collect();
    assert_eq!(
        ids,
        BTreeSet::from(["2".to_owned(), "3".to_owned()]),
        "got {} then {}",
        first.raw,
        second.raw
    );
    let slept = p.recv();
    assert_eq!(slept.raw_id().as_deref(), Some("1"));
    assert!(slept.data()["slept_ms"].as_u64().unwrap() >= 2000);
    p.finish();
}

#[test]
fn concurrent_invokes_overlap() {
    // Two sleeps and a quick echo: the echo sent last finishes first, and the shorter
    // sleep sent second finishes before the longer one sent first.
    let mut p = Conn::spawn();
    p.invoke(1, "sleep", json!({ "ms": 1500 }));
    p.invoke(2, "sleep", json!({ "ms": 300 }));
    p.invoke(3, "echo", json!({ "quick": true }));
    let order: Vec<String> = (0..3).map(|_| p.recv().raw_id().unwrap()).collect();
    assert_eq!(order, ["3", "2", "1"]);
    p.finish();
}

#[test]
fn println_in_a_handler_lands_on_stderr_not_stdout() {
    let mut p = Conn::spawn();
    let text = "BANNER-this-is-not-json-7f3a";
    p.invoke(1, "print", json!({ "text": text }));
    let (reply, skipped) = p.recv_until_id("1");
    assert!(skipped.is_empty(), "unexpected lines: {skipped:?}");
    assert_eq!(reply.data(), &json!({ "printed": true }));
    p.request(2, "health", None);
    p.recv_until_id("2");
    // The driver checks every stdout line is a JSON-RPC object; none carries the text.
    let rest = p.finish();
    assert!(rest.is_empty());
    assert!(!reply.raw.contains(text));
    assert!(
        p.stderr().contains(text),
        "the printed text should be on stderr: {}",
        p.stderr()
    );
}

#[test]
fn a_flood_of_requests_is_answered_exactly_once_each() {
    let mut p = Conn::spawn();
    let n = 3000u64;
    let mut burst = String::new();
    for id in 1..=n {
        let line = match id % 3 {
            0 => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"health"}}"#),
            1 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{"tool":"noop"}}}}"#
            ),
            _ => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{"tool":"echo","arguments":{{"i":{id}}}}}}}"#
            ),
        };
        burst.push_str(&line);
        burst.push('\n');
    }
    p.send_raw(burst.as_bytes());
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..n {
        let m = p.recv();
        let id: u64 = m.raw_id().unwrap().parse().unwrap();
        // Each is served, or refused as busy: never dropped silently.
        if let Some(e) = m.v.get("error") {
            assert_eq!(e["code"], -32000, "{}", m.raw);
        } else if id % 3 == 2 {
            assert_eq!(m.data(), &json!({ "i": id }));
        }
        assert!(seen.insert(id, ()).is_none(), "id {id} answered twice");
    }
    assert_eq!(seen.len() as u64, n);
    assert!(p.finish().is_empty());
}

#[test]
#[cfg(unix)] // O_NONBLOCK descriptors, handed over by exec: Unix by nature
fn a_non_blocking_stdin_and_stdout_are_served_as_blocking_ones() {
    // Whoever starts a plugin may hand it descriptors made non-blocking (event-loop runtimes
    // do that to their own stdio, and children inherit it). A read with nothing to read, and
    // a write into a full pipe, then fail with EAGAIN; neither may end the plugin.
    let mut cmd = Command::new("python3");
    cmd.arg("-c")
        .arg(
            "import os, sys; os.set_blocking(0, False); os.set_blocking(1, False); \
             os.execv(sys.argv[1], sys.argv[1:])",
        )
        .arg(everything_bin());
    let mut p = Conn::spawn_command(cmd);
    // Each request goes out only after the previous reply came back, so the plugin has
    // read everything each time and its next read finds nothing.
    for id in 1..=3 {
        p.invoke(id, "echo", json!({ "n": id }));
        assert_eq!(
            p.recv_until_id(&id.to_string()).0.data(),
            &json!({ "n": id })
        );
    }
    // A reply many times a pipe's capacity: its writes meet a full pipe.
    let bytes = 3 * 1024 * 1024;
    p.invoke(4, "big", json!({ "bytes": bytes }));
    let (reply, _) = p.recv_until_id("4");
    assert_eq!(reply.data()["blob"].as_str().map(str::len), Some(bytes));
    p.invoke(5, "echo", json!({ "after": "big" }));
    assert_eq!(p.recv_until_id("5").0.data(), &json!({ "after": "big" }));
    p.finish();
}
