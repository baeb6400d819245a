//! The host side in MCP's stateless era (revision 2026-07-28): `server/discover` first,
//! adopted when it names 2026-07-28, the `_meta` envelope on every request, no
//! `notifications/initialized`, a `tools/call` that asks for input fulfilled and sent
//! again; the fallback to the `initialize` handshake by the Python SDK's `auto` rule;
//! `--mcp-version` pins on the `executa` commands; `executa bench` in both eras.
//! Servers: the official Python SDK's (`tests/mcp/server_stateless_sdk.py`, which speaks
//! both eras and samples through a resolver) and a hand-written one for the corners
//! (`tests/mcp/stateless_server.py MODE`, which reports what it read). Skipped, with a
//! message, only where python3 is missing.
// Unix only: drives Python MCP servers (installed by a bash script), which a Windows test
// process under Wine cannot start.
#![cfg(unix)]

mod host_common;
mod mcp;

use std::path::PathBuf;
use std::process::{Command, Output};

use executa::Error;
use executa::host::{Handlers, Host, HostOptions, PluginCommand, Protocol};
use host_common::{opts, recording_sampler};
use serde_json::{Value, json};

const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_KEY: &str = "io.modelcontextprotocol/clientInfo";
const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

fn sdk_server(python: &PathBuf) -> PluginCommand {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/mcp/server_stateless_sdk.py"
    );
    PluginCommand::new(python).arg(script)
}

fn stateless_server(python: &PathBuf, mode: &str) -> PluginCommand {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/stateless_server.py");
    PluginCommand::new(python).args([script, mode])
}

fn mcp_opts() -> HostOptions {
    HostOptions {
        protocol: Protocol::Mcp,
        ..opts()
    }
}

/// A host started on `stateless_server.py MODE` with the default options and no handlers.
fn start_on(python: &PathBuf, mode: &str) -> executa::Result<Host> {
    Host::start(stateless_server(python, mode), mcp_opts(), Handlers::new())
}

/// Every message the hand-written server read so far (its `log` tool's answer).
fn seen_by(host: &Host) -> Vec<Value> {
    let r = host.invoke("log", &json!({})).expect("the log");
    assert!(r.success, "{:?}", r.error);
    r.data.as_array().cloned().expect("a list of messages")
}

fn methods(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(|m| m["method"].as_str())
        .collect()
}

#[test]
fn a_server_of_both_eras_is_spoken_to_in_2026_07_28() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let host = Host::start(
        stateless_server(&python, "both"),
        mcp_opts(),
        Handlers::dev_backends(),
    )
    .expect("starts");
    let shake = host.handshake().expect("up");
    assert_eq!(
        shake.mcp_revision.as_deref(),
        Some("2026-07-28"),
        "{shake:?}"
    );
    let m = host.manifest().expect("up");
    assert_eq!(
        (m.name.as_str(), m.version.as_str(), m.description.as_str()),
        ("stateless-both", "1.2.3", "stateless-both instructions")
    );
    assert!(host.health().expect("health").is_healthy());
    let r = host.invoke("echo", &json!({"x": 1})).expect("an answer");
    assert_eq!(r.data, json!({"x": 1}));
    let seen = seen_by(&host);
    assert_eq!(
        methods(&seen),
        [
            "server/discover",
            "tools/list",
            "server/discover",
            "tools/call"
        ],
        "a probe, the tools, health as server/discover, the call; no handshake: {seen:?}"
    );
    for m in &seen {
        let meta = &m["params"]["_meta"];
        assert_eq!(meta[VERSION_KEY], "2026-07-28", "{m}");
        assert_eq!(meta[CLIENT_KEY]["name"], "executa-host", "{m}");
        assert_eq!(
            meta[CAPABILITIES_KEY],
            json!({"sampling": {}}),
            "the host has a sampling handler: {m}"
        );
    }
    assert!(host.shutdown().expect("a process").is_clean());
}

#[test]
fn the_sdk_server_samples_through_the_hosts_handler_with_input_required() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let (handlers, seen) = recording_sampler();
    let host = Host::start(sdk_server(&python), mcp_opts(), handlers).expect("starts");
    let shake = host.handshake().expect("up");
    assert_eq!(shake.mcp_revision.as_deref(), Some("2026-07-28"));
    let m = host.manifest().expect("up");
    assert_eq!(
        (m.name.as_str(), m.version.as_str()),
        ("pystateless", "2.6.0")
    );
    let names: Vec<&str> = m.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"ask") && names.contains(&"add"),
        "{names:?}"
    );
    let sum = host
        .invoke("add", &json!({"numbers": [2, 3]}))
        .expect("an answer");
    assert_eq!(sum.data, json!({"result": 5}));
    let r = host
        .invoke("ask", &json!({"question": "why?"}))
        .expect("an answer");
    assert!(r.success, "{:?}", r.error);
    assert_eq!(r.data, json!({"result": "m-test|answer to why?"}));
    let seen = seen.lock().expect("not poisoned");
    let [(params, invoke_id)] = seen.as_slice() else {
        panic!("one sampling call expected: {seen:?}");
    };
    assert_eq!(invoke_id.as_deref(), Some(r.invoke_id.as_str()));
    assert_eq!(params["maxTokens"], 64);
    assert_eq!(params["systemPrompt"], "Answer briefly.");
    drop(seen);
    assert!(host.health().expect("server/discover").is_healthy());
    assert!(host.shutdown().expect("a process").is_clean());
}

#[test]
fn input_goes_back_under_its_keys_with_the_state_byte_for_byte() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let (handlers, sampled) = recording_sampler();
    let host =
        Host::start(stateless_server(&python, "both"), mcp_opts(), handlers).expect("starts");
    let r = host
        .invoke("ask", &json!({"question": "q?"}))
        .expect("an answer");
    assert!(r.success, "{:?}", r.error);
    assert_eq!(
        r.data["responses"],
        json!({
            "llm": {"role": "assistant", "content": {"type": "text", "text": "answer to q?"},
                    "model": "m-test", "stopReason": "endTurn"},
            "dirs": {"roots": []},
            "who": {"action": "decline"},
        })
    );
    assert_eq!(r.data["state_bytes_kept"], true, "{}", r.data);
    let sampled = sampled.lock().expect("not poisoned");
    assert_eq!(sampled.len(), 1, "{sampled:?}");
    assert_eq!(sampled[0].0["systemPrompt"], "Be brief.");
    assert_eq!(sampled[0].1.as_deref(), Some(r.invoke_id.as_str()));
    drop(sampled);
    let calls: Vec<Value> = seen_by(&host)
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .collect();
    assert_eq!(calls.len(), 2, "the call and its retry: {calls:?}");
    assert_ne!(calls[0]["id"], calls[1]["id"], "a new id for the retry");
    assert!(calls[0]["params"].get("inputResponses").is_none());
    assert_eq!(calls[1]["params"]["arguments"], json!({"question": "q?"}));
    assert_eq!(calls[1]["params"]["_meta"][VERSION_KEY], "2026-07-28");
    host.shutdown();
}

#[test]
fn input_rounds_are_capped_and_state_only_results_wait_and_retry() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let host = start_on(&python, "both").expect("starts");
    let err = host
        .invoke("forever", &json!({}))
        .expect_err("past the rounds");
    let text = err.to_string();
    assert!(
        matches!(err, Error::Protocol(_))
            && text.contains("more than 10")
            && text.contains("MAX_INPUT_ROUNDS"),
        "{text}"
    );
    let calls: Vec<Value> = seen_by(&host)
        .into_iter()
        .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "forever")
        .collect();
    assert_eq!(calls.len(), 11, "the call and 10 retries");
    for (i, call) in calls.iter().enumerate().skip(1) {
        assert_eq!(call["params"]["requestState"], format!("round-{i}"));
        assert_eq!(
            call["params"]["inputResponses"],
            json!({"r": {"roots": []}})
        );
    }
    // The server is still served: state only, twice, then the answer.
    let r = host.invoke("patience", &json!({})).expect("an answer");
    assert_eq!(
        r.data,
        json!({"waited": 2, "states": [null, "wait-1", "wait-2"]})
    );
    // Without a sampling handler, a sampling request fails the call, saying why; no
    // capability was declared either.
    let err = host
        .invoke("ask", &json!({"question": "q?"}))
        .expect_err("nobody samples");
    assert!(
        err.to_string().contains("\"llm\"") && err.to_string().contains("no sampling handler"),
        "{err}"
    );
    let meta = &seen_by(&host)[0]["params"]["_meta"];
    assert_eq!(meta[CAPABILITIES_KEY], json!({}), "{meta}");
    host.shutdown();
}

#[test]
fn a_server_without_server_discover_gets_the_handshake_as_before() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let host = Host::start(
        stateless_server(&python, "legacy"),
        mcp_opts(),
        Handlers::dev_backends(),
    )
    .expect("starts");
    let shake = host.handshake().expect("up");
    assert_eq!(shake.mcp_revision.as_deref(), Some("2025-11-25"));
    assert!(host.health().expect("ping").is_healthy());
    let r = host.invoke("echo", &json!({"x": 1})).expect("an answer");
    assert_eq!(r.data, json!({"x": 1}));
    let seen = seen_by(&host);
    assert_eq!(
        methods(&seen),
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/list",
            "ping",
            "tools/call"
        ],
        "{seen:?}"
    );
    assert_eq!(seen[1]["params"]["protocolVersion"], "2025-11-25");
    assert_eq!(seen[1]["params"]["capabilities"], json!({"sampling": {}}));
    for m in &seen[1..] {
        let meta = &m["params"]["_meta"];
        assert!(meta.get(VERSION_KEY).is_none(), "no envelope: {m}");
    }
    assert!(host.shutdown().expect("a process").is_clean());
}

#[test]
fn unsupported_version_refusals_follow_the_sdks_rule() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    // -32022 listing only stateless revisions, none of them ours: no session at all.
    let err = start_on(&python, "disjoint").expect_err("incompatible");
    let text = err.to_string();
    assert!(
        text.contains("speaks only 2099-01-01") && text.contains("2026-07-28"),
        "{text}"
    );
    // -32022 listing a handshake revision: the handshake.
    let host = start_on(&python, "mixed").expect("starts");
    let shake = host.handshake().expect("up");
    assert_eq!(shake.mcp_revision.as_deref(), Some("2025-11-25"));
    assert_eq!(
        methods(&seen_by(&host))[..2],
        ["server/discover", "initialize"]
    );
    host.shutdown();
    // -32022 naming 2026-07-28: probed once more, and adopted.
    let host = start_on(&python, "once").expect("starts");
    let shake = host.handshake().expect("up");
    assert_eq!(shake.mcp_revision.as_deref(), Some("2026-07-28"));
    assert_eq!(
        methods(&seen_by(&host))[..3],
        ["server/discover", "server/discover", "tools/list"]
    );
    host.shutdown();
}

/// The caps on `tools/list` hold in the stateless era as in the handshake's: pages that
/// never end are refused at `MCP_MAX_PAGES`, by the host and by `executa bench`.
#[test]
fn tools_list_caps_hold_in_the_stateless_era() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let err = start_on(&python, "endless").expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("more than 100 pages") && text.contains("MAX_PAGES"),
        "{text}"
    );
    let py = python.to_string_lossy().into_owned();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/stateless_server.py");
    let o = executa(
        &["bench", "--protocol", "mcp", "--no-progress"],
        &[&py, script, "endless"],
    );
    assert_eq!(o.status.code(), Some(2), "a start failure");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("MAX_PAGES"), "{err}");
}

fn executa(args: &[&str], server: &[&str]) -> Output {
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
        .args(server)
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

/// The messages a `log` call's printed result lists (`executa call` prints the envelope:
/// the tool's text block is its `data`, parsed as JSON when it parses).
fn logged(o: &Output) -> Vec<Value> {
    let result = stdout_json(o);
    match &result["data"] {
        Value::String(text) => serde_json::from_str(text).expect("the log"),
        data => serde_json::from_value(data.clone()).expect("the log"),
    }
}

#[test]
fn executa_commands_pin_the_revision() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let py = python.to_string_lossy().into_owned();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/stateless_server.py");
    let both = [py.as_str(), script, "both"];
    let legacy = [py.as_str(), script, "legacy"];
    // A handshake revision pinned: proposed, no probe (a pin implies --protocol mcp).
    let o = executa(&["call", "--mcp-version", "2025-06-18", "log"], &both);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let seen = logged(&o);
    assert_eq!(methods(&seen)[0], "initialize", "{seen:?}");
    assert_eq!(seen[0]["params"]["protocolVersion"], "2025-06-18");
    // 2026-07-28 pinned: no probe needed to learn it, but the server must name it.
    let o = executa(
        &[
            "call",
            "--protocol",
            "mcp",
            "--mcp-version",
            "2026-07-28",
            "log",
        ],
        &both,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(methods(&logged(&o))[..2], ["server/discover", "tools/list"]);
    // ... and a server of the handshake alone is told so, clearly.
    let o = executa(&["call", "--mcp-version", "2026-07-28", "echo"], &legacy);
    assert_eq!(o.status.code(), Some(2), "a start failure");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("MCP 2026-07-28 was asked for")
            && err.contains("server/discover")
            && err.contains("initialize handshake"),
        "{err}"
    );
    // `legacy`: the handshake without a probe.
    let o = executa(
        &[
            "call",
            "--protocol",
            "mcp",
            "--mcp-version",
            "legacy",
            "log",
        ],
        &both,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        methods(&logged(&o))[..2],
        ["initialize", "notifications/initialized"]
    );
    // `auto` (the default) with --protocol mcp: the probe.
    let o = executa(&["call", "--protocol", "mcp", "log"], &both);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(methods(&logged(&o))[0], "server/discover");
    // describe: the manifest from server/discover's serverInfo and instructions.
    let o = executa(&["describe", "--protocol", "mcp"], &both);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = stdout_json(&o);
    assert_eq!(
        (&m["name"], &m["version"]),
        (&json!("stateless-both"), &json!("1.2.3"))
    );
    // A revision nobody speaks is a usage error naming the choices.
    let o = executa(&["call", "--mcp-version", "2099-01-01", "echo"], &both);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("auto, legacy") && err.contains("2026-07-28"),
        "{err}"
    );
}

/// One section of a bench report: from `against `LABEL`` to the next plugin's.
fn section<'a>(out: &'a str, label: &str) -> &'a str {
    let start = out
        .find(&format!("against `{label}`"))
        .unwrap_or_else(|| panic!("no section for {label}:\n{out}"));
    let rest = &out[start..];
    let end = rest[1..].find("\nagainst `").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

#[test]
fn executa_bench_measures_both_eras_and_says_which() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let py = python.to_string_lossy().into_owned();
    let sdk = format!(
        "{py} {}",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/mcp/server_stateless_sdk.py"
        )
    );
    let hand = format!(
        "{py} {}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/stateless_server.py")
    );
    let o = Command::new(env!("CARGO_BIN_EXE_executa"))
        .args([
            "bench",
            "--requests",
            "12",
            "--concurrency",
            "3",
            "--rounds",
            "1",
        ])
        .args([
            "--no-progress",
            "--quiet",
            "--init-timeout",
            "30",
            "--describe-timeout",
            "30",
        ])
        .args(["--protocol", "mcp", "--args", r#"{"question":"hi"}"#])
        .args(["--plugin", &format!("new={sdk}"), "--tool", "ask"])
        .args([
            "--plugin",
            &format!("old={sdk}"),
            "--tool",
            "ask",
            "--mcp-version",
            "legacy",
        ])
        .args([
            "--plugin",
            &format!("waits={hand} both"),
            "--tool",
            "patience",
        ])
        .output()
        .expect("run executa bench");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for (label, head) in [
        ("new", "mcp 2026-07-28, `ask`"),
        ("old", "mcp 2025-11-25, `ask`"),
        ("waits", "mcp 2026-07-28, `patience`"),
    ] {
        let s = section(&out, label);
        assert!(s.lines().next().is_some_and(|l| l.ends_with(head)), "{s}");
        assert!(s.contains("errors      0"), "{s}");
    }
    // A call that asks for input forever counts as an error, named.
    let o = Command::new(env!("CARGO_BIN_EXE_executa"))
        .args([
            "bench",
            "--requests",
            "2",
            "--warmup",
            "0",
            "--no-progress",
            "--quiet",
        ])
        .args([
            "--init-timeout",
            "30",
            "--protocol",
            "mcp",
            "--tool",
            "forever",
        ])
        .arg("--")
        .args([
            py.as_str(),
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/stateless_server.py"),
            "both",
        ])
        .output()
        .expect("run executa bench");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("errors      2") && out.contains("MCP_MAX_INPUT_ROUNDS"),
        "{out}"
    );
}
