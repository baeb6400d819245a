//! The host side against MCP stdio servers: a server written with the official MCP Python
//! SDK (`tests/mcp/server_fastmcp.py`) driven through `executa::host` and through the
//! `executa call` / `describe` binaries, and a hand-written one
//! (`tests/mcp/scripted_server.py`) for the handshake corners, paging and the server's own
//! requests. Skipped, with a message, only where python3 is missing.
// Unix only: drives Python MCP servers (installed by a bash script), which a Windows test
// process under Wine cannot start.
#![cfg(unix)]

mod host_common;
mod mcp;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use executa::host::{
    Handlers, Host, HostOptions, InvokeOptions, McpVersion, PluginCommand, PluginProcess, Progress,
    Protocol,
};
use executa::{Error, ProtocolVersion};
use host_common::{EVENT_WAIT, opts};
use serde_json::{Value, json};

fn sdk_server(python: &PathBuf) -> PluginCommand {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/server_fastmcp.py");
    // The SDK warns that sampling is deprecated as of 2026-07-28; not our business here.
    PluginCommand::new(python).args(["-W", "ignore", script])
}

/// A supervised host on the SDK server.
fn sdk_host(python: &PathBuf, protocol: Protocol, handlers: Handlers) -> Host {
    Host::start(sdk_server(python), with(protocol), handlers).expect("the SDK server starts")
}

fn scripted_server(python: &PathBuf, mode: &str) -> PluginCommand {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/scripted_server.py");
    PluginCommand::new(python).args([script, mode])
}

/// The handshake era, which this file is about (its servers sample with requests to the
/// client, which the stateless era has not got); `tests/host_mcp_modern.rs` drives
/// 2026-07-28 and the choice between the two.
fn with(protocol: Protocol) -> HostOptions {
    HostOptions {
        protocol,
        mcp_version: McpVersion::Legacy,
        ..opts()
    }
}

fn param<'a>(params: &'a Value, name: &str) -> &'a Value {
    params
        .as_array()
        .and_then(|l| l.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no parameter {name} in {params}"))
}

#[test]
fn the_sdk_servers_tools_become_the_manifest() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let host = sdk_host(&python, Protocol::Mcp, Handlers::new());
    let shake = host.handshake().expect("up");
    assert_eq!(shake.mcp_revision.as_deref(), Some("2025-11-25"));
    assert_eq!(shake.version_str(), "mcp");
    let m = host.manifest().expect("up");
    assert_eq!(
        (m.name.as_str(), m.version.as_str()),
        ("pyfixture", "0.3.1")
    );
    assert_eq!(
        m.description,
        "An MCP fixture server for executa's host tests."
    );
    let names: Vec<&str> = m.tools.iter().map(|t| t.name.as_str()).collect();
    for tool in ["add", "echo", "fail", "ask", "slow"] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }
    let add = m.tools.iter().find(|t| t.name == "add").expect("add");
    assert_eq!(add.description, "Adds integers; answers structured output.");
    let numbers = param(&add.parameters, "numbers");
    assert_eq!(
        (&numbers["type"], &numbers["required"], &numbers["items"]),
        (&json!("array"), &json!(true), &json!({"type": "integer"}))
    );
    let offset = param(&add.parameters, "offset");
    assert_eq!(
        (&offset["type"], &offset["required"], &offset["default"]),
        (&json!("integer"), &json!(false), &json!(0))
    );
    assert_eq!(add.extra["inputSchema"]["required"], json!(["numbers"]));
    assert!(add.extra.contains_key("outputSchema"));
    let echo = m.tools.iter().find(|t| t.name == "echo").expect("echo");
    assert_eq!(param(&echo.parameters, "shout")["type"], "boolean");
    assert_eq!(param(&echo.parameters, "shout")["required"], false);
    assert!(host.health().expect("ping").is_healthy());
    let report = host.shutdown().expect("a process");
    assert!(report.is_clean(), "{report}");
}

#[test]
fn tool_results_map_to_the_invoke_envelope() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let host = sdk_host(&python, Protocol::Mcp, Handlers::new());
    let sum = host
        .invoke("add", &json!({"numbers": [1, 2, 3], "offset": 4}))
        .expect("an answer");
    assert!(sum.success, "{:?}", sum.error);
    assert_eq!(
        sum.data,
        json!({"total": 10, "count": 3}),
        "structuredContent"
    );
    assert!(sum.extra.contains_key("content"));
    let text = host
        .invoke("echo", &json!({"text": "hi", "times": 2}))
        .expect("an answer");
    assert_eq!(
        text.data,
        json!("hi hi"),
        "text that is not JSON stays text"
    );
    let number = host
        .invoke("echo", &json!({"text": "42"}))
        .expect("an answer");
    assert_eq!(number.data, json!(42), "text that is JSON is parsed");
    let failed = host
        .invoke("fail", &json!({"reason": "no"}))
        .expect("an answer");
    assert!(!failed.success && failed.data.is_null());
    let error = failed.error.expect("the tool's message");
    assert!(error.contains("refused: no"), "{error}");
    // Arguments that are not an object: the SDK answers a JSON-RPC error, which stays one.
    match host.invoke("add", &json!([1])) {
        Err(Error::Remote(e)) => assert_eq!(e.code, -32602, "{e}"),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
    // MCP has no invoke context: credentials are refused, not silently dropped.
    let creds = InvokeOptions::new().credential("API_KEY", "s3cret");
    match host.invoke_with("echo", &json!({"text": "x"}), &creds) {
        Err(Error::Refused(e)) => assert!(e.message.contains("MCP"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(host.shutdown().expect("a process").is_clean());
}

#[test]
fn many_calls_in_flight_get_one_answer_each() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let host = Arc::new(sdk_host(&python, Protocol::Mcp, Handlers::new()));
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let host = host.clone();
            std::thread::spawn(move || {
                (0..5)
                    .map(|j| {
                        let n = i * 100 + j;
                        let r = host
                            .invoke("add", &json!({"numbers": [n, 1]}))
                            .expect("an answer");
                        (n, r.data["total"].clone())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for w in workers {
        for (n, total) in w.join().expect("no panic") {
            assert_eq!(total, json!(n + 1), "each caller got its own answer");
        }
    }
    assert!(host.shutdown().expect("a process").is_clean());
}

#[test]
fn sampling_from_the_server_is_answered_by_the_hosts_handler() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let (handlers, seen) = host_common::recording_sampler();
    let host = sdk_host(&python, Protocol::Mcp, handlers);
    let r = host
        .invoke("ask", &json!({"question": "why?"}))
        .expect("an answer");
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.data, json!({"result": "m-test|endTurn|answer to why?"}));
    let seen = seen.lock().expect("not poisoned");
    let [(params, invoke_id)] = seen.as_slice() else {
        panic!("one sampling call expected: {seen:?}");
    };
    assert_eq!(invoke_id.as_deref(), Some(r.invoke_id.as_str()));
    assert_eq!(params["messages"][0]["role"], "user");
    assert_eq!(params["maxTokens"], 64);
    assert_eq!(params["systemPrompt"], "Answer briefly.");
    assert_eq!(params["temperature"], 0.2);
    assert_eq!(params["stopSequences"], json!(["STOP"]));
    assert!(host.shutdown().expect("a process").is_clean());
}

#[test]
fn progress_notifications_reach_the_progress_callback() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let events: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let sink = events.clone();
    let handlers = Handlers::new().on_progress(move |p| {
        if let Ok(mut events) = sink.lock() {
            events.push(p.clone());
        }
    });
    let host = sdk_host(&python, Protocol::Mcp, handlers);
    let r = host
        .invoke("slow", &json!({"steps": 3}))
        .expect("an answer");
    assert_eq!(r.data, json!({"steps": 3}));
    assert!(host.sync_progress(EVENT_WAIT), "events delivered");
    let events = events.lock().expect("not poisoned");
    assert_eq!(events.len(), 3, "{events:?}");
    for (i, e) in events.iter().enumerate() {
        let step = i + 1;
        assert_eq!(e.invoke_id.as_deref(), Some(r.invoke_id.as_str()));
        assert!(e.active, "sent while the call ran");
        assert_eq!(e.kind, "progress");
        assert_eq!(
            e.data,
            json!({"progress": step, "total": 3, "message": format!("step {step}")})
        );
    }
    drop(events);
    assert!(host.shutdown().expect("a process").is_clean());
}

#[test]
fn auto_finds_the_sdk_server_and_still_drives_executa_plugins() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let host = sdk_host(&python, Protocol::Auto, Handlers::new());
    let shake = host.handshake().expect("up");
    assert_eq!(
        shake.mcp_revision.as_deref(),
        Some("2025-11-25"),
        "{shake:?}"
    );
    let r = host
        .invoke("add", &json!({"numbers": [2]}))
        .expect("answer");
    assert_eq!(r.data["total"], 2);
    assert!(host.shutdown().expect("a process").is_clean());

    let plugin = host_common::py("tools_plugin.py", &[]);
    let host = Host::start(plugin, with(Protocol::Auto), Handlers::new()).expect("starts");
    let shake = host.handshake().expect("up");
    assert_eq!(shake.protocol, Some(ProtocolVersion::V2));
    assert_eq!((shake.mcp_revision, shake.fallback), (None, None));
    let r = host.invoke("echo", &json!({"text": "hi"})).expect("answer");
    assert!(r.success && r.data["text"] == "hi", "{:?}", r.data);
    host.shutdown();
}

#[test]
fn auto_asks_again_in_mcp_form_when_the_server_refuses_or_names_another_revision() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    for (mode, revision) in [("refuses", "2025-11-25"), ("newer", "2025-11-25")] {
        let host = Host::start(
            scripted_server(&python, mode),
            with(Protocol::Auto),
            Handlers::new(),
        )
        .unwrap_or_else(|e| panic!("{mode}: {e}"));
        let shake = host.handshake().expect("up");
        assert_eq!(shake.mcp_revision.as_deref(), Some(revision), "{mode}");
        // Both pages of tools/list, after notifications/initialized (it insists).
        let names: Vec<String> = host
            .manifest()
            .expect("up")
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect();
        assert_eq!(names, ["hello", "probe"], "{mode}");
        let sent = host.invoke("hello", &json!({})).expect("answer").data;
        assert_eq!(sent["protocolVersion"], "2025-11-25", "{mode}: {sent}");
        assert_eq!(sent["clientInfo"]["name"], "executa-host", "{mode}");
        // No sampling handler, so no sampling capability.
        assert_eq!(sent["capabilities"], json!({}), "{mode}");
        host.shutdown();
    }
}

#[test]
fn the_servers_ping_is_answered_and_other_requests_refused() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let process = PluginProcess::spawn(
        &scripted_server(&python, "refuses"),
        with(Protocol::Mcp),
        Handlers::dev_backends(),
    )
    .expect("spawns");
    let shake = process.initialize().expect("initialized");
    assert_eq!(shake.mcp_revision.as_deref(), Some("2025-11-25"));
    process.describe().expect("tools/list");
    let r = process
        .invoke("hello", &json!({}), &InvokeOptions::new())
        .expect("answer");
    assert_eq!(
        r.data["capabilities"],
        json!({"sampling": {}}),
        "a handler is set"
    );
    let r = process
        .invoke("probe", &json!({}), &InvokeOptions::new())
        .expect("answer");
    assert_eq!(r.data["ping"], json!({}));
    assert_eq!(r.data["roots"]["error"]["code"], -32601, "{}", r.data);
    assert!(process.shutdown().is_clean());
}

#[test]
fn a_revision_the_host_does_not_speak_fails_the_start() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let err = Host::start(
        scripted_server(&python, "future"),
        with(Protocol::Mcp),
        Handlers::new(),
    )
    .expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("2030-01-01") && text.contains("2025-11-25"),
        "{text}"
    );
}

fn executa(python: &PathBuf, args: &[&str]) -> Output {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/server_fastmcp.py");
    Command::new(env!("CARGO_BIN_EXE_executa"))
        .args(args)
        .args([
            "--init-timeout",
            "30",
            "--describe-timeout",
            "30",
            "--quiet",
        ])
        .arg("--")
        .arg(python)
        .args(["-W", "ignore", script])
        .output()
        .expect("run executa")
}

fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

#[test]
fn executa_describe_prints_the_manifest_or_the_raw_tool_list() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    // The default protocol, auto, finds the server.
    let o = executa(&python, &["describe"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = stdout_json(&o);
    assert_eq!(m["name"], "pyfixture");
    let add = m["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "add"))
        .expect("add");
    assert_eq!(param(&add["parameters"], "numbers")["type"], "array");
    let o = executa(&python, &["describe", "--raw", "--protocol", "mcp"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let raw = stdout_json(&o);
    assert!(raw["tools"][0]["inputSchema"].is_object(), "{raw}");
    assert!(
        raw.get("name").is_none(),
        "the tools/list result, not a manifest"
    );
    let o = executa(&python, &["describe", "--protocol", "mcq"]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
}

#[test]
fn executa_call_drives_the_sdk_server() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let o = executa(&python, &["call", "add", "--args", r#"{"numbers":[5,6]}"#]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The envelope `executa call` prints for both protocols: `data` is `structuredContent`.
    assert_eq!(stdout_json(&o)["data"]["total"], 11);
    let o = executa(
        &python,
        &[
            "call",
            "--protocol",
            "mcp",
            "fail",
            "--args",
            r#"{"reason":"x"}"#,
        ],
    );
    assert_eq!(o.status.code(), Some(1), "isError is a failure");
    assert_eq!(stdout_json(&o)["success"], false);
    // Sampling answered by the in-memory echo, progress printed on stderr.
    let o = executa(
        &python,
        &["call", "ask", "--args", r#"{"question":"hello?"}"#],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let answer = &stdout_json(&o)["data"]["result"];
    assert_eq!(answer, "executa-echo|endTurn|hello?");
    let o = executa(&python, &["call", "slow", "--args", r#"{"steps":2}"#]);
    assert!(o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(stderr.matches("progress [progress]").count(), 2, "{stderr}");
    assert!(stderr.contains(r#""message":"step 2""#), "{stderr}");
}
