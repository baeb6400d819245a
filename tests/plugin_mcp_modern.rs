//! MCP revision 2026-07-28 (stateless requests, input requests) on the plugin side: the
//! official Python SDK 2.3.0 client in each of its modes, and raw frames for what the SDK
//! does not show (forged, replayed, rebound and expired `requestState`, a client that
//! never retries, the unsupported-version error, Executa hosts unchanged).

mod common;
mod mcp;

use std::sync::mpsc;
use std::time::Duration;

use common::{Conn, example_bin};
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";

/// The `_meta` of a 2026-07-28 request; `sampling`: whether the client declares it.
fn meta(sampling: bool) -> Value {
    let caps = if sampling {
        json!({"sampling": {}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

fn call(conn: &mut Conn, id: Value, tool: &str, arguments: Value, extra: Value) {
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": meta(true)});
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    conn.request(id, "tools/call", Some(params));
}

/// Runs `tests/mcp/client_modes.py MODE` against `everything`; `None` without python3.
fn sdk_report(mode: &str) -> Option<Value> {
    let python = mcp::sdk_python()?;
    let plugin = example_bin("everything");
    let plugin = plugin.to_str().expect("a UTF-8 path");
    let (ok, out, err) = mcp::run_script(&python, "client_modes.py", &[mode, "--", plugin]);
    assert!(ok, "the SDK client failed in mode {mode}:\n{out}\n{err}");
    let line = out.lines().last().unwrap_or_default();
    Some(serde_json::from_str(line).unwrap_or_else(|e| panic!("report {line:?}: {e}\n{err}")))
}

#[test]
fn the_python_sdk_client_works_pinned_auto_and_legacy() {
    for (mode, revision) in [(MODERN, MODERN), ("auto", MODERN), ("legacy", "2025-11-25")] {
        let Some(r) = sdk_report(mode) else {
            return;
        };
        assert_eq!(r["protocol_version"], revision, "{mode}: {r}");
        assert_eq!(
            r["echo"]["structured"],
            json!({"text": "hi", "n": 3}),
            "{mode}"
        );
        assert_eq!(r["fail"]["is_error"], true, "{mode}");
        // Sampling: a server-to-client request before 2026-07-28, an input request and
        // a retry since; the handler's code is the same.
        assert_eq!(
            r["sample"]["structured"],
            json!({"model": "sdk-test-model", "text": "sampled[user:name a colour] max=16"}),
            "{mode}"
        );
        let seen = r["progress_seen"].as_array().expect("progress");
        assert_eq!(seen.len(), 3, "{mode}: {seen:?}");
        let in_flight = r["in_flight"].as_array().expect("in flight");
        assert_eq!(in_flight.len(), 10, "{mode}");
        assert!(in_flight.iter().all(|c| c["is_error"] == false), "{mode}");
        assert_eq!(r["unknown_tool"]["code"], -32602, "{mode}");
        if mode != MODERN {
            // A pinned client never asks: it has no server info to show.
            assert_eq!(r["server_name"], "everything", "{mode}");
            assert_eq!(r["has_tools_capability"], true, "{mode}");
        }
    }
}

#[test]
fn stateless_requests_are_served_without_a_handshake() {
    let mut conn = Conn::spawn_command(std::process::Command::new(example_bin("everything")));
    conn.request(1, "server/discover", Some(json!({"_meta": meta(false)})));
    let d = conn.recv_until_id("1").0.result().clone();
    assert_eq!(d["resultType"], "complete");
    let versions = d["supportedVersions"].as_array().expect("versions");
    assert!(versions.contains(&json!(MODERN)) && versions.contains(&json!("2025-11-25")));
    assert_eq!(d["capabilities"]["tools"], json!({"listChanged": false}));
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "everything"
    );
    assert!(
        d["ttlMs"].as_u64().is_some() && d["cacheScope"] == "private",
        "{d}"
    );

    conn.request(2, "tools/list", Some(json!({"_meta": meta(false)})));
    let list = conn.recv_until_id("2").0.result().clone();
    assert_eq!(list["resultType"], "complete");
    assert!(list["tools"].as_array().is_some_and(|t| !t.is_empty()));

    call(&mut conn, json!(3), "echo", json!({"x": 1}), json!({}));
    let r = conn.recv_until_id("3").0.result().clone();
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["structuredContent"], json!({"x": 1}));

    // A revision not spoken: -32022 with the list, for any method.
    let mut future = meta(false);
    future["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    for (id, method) in [(4, "server/discover"), (5, "tools/list"), (6, "tools/call")] {
        let params = json!({"name": "echo", "arguments": {}, "_meta": future});
        conn.request(id, method, Some(params));
        let e = conn.recv_until_id(&id.to_string()).0;
        assert_eq!(e.error_code(), -32022, "{method}");
        assert_eq!(e.error()["data"]["requested"], "2099-01-01");
        assert!(
            e.error()["data"]["supported"]
                .as_array()
                .is_some_and(|s| s.contains(&json!(MODERN)))
        );
    }
    // Without the envelope and without a handshake: not MCP, as for an Executa host.
    conn.request(7, "server/discover", Some(json!({})));
    assert_eq!(conn.recv_until_id("7").0.error_code(), -32601);
    conn.request(8, "tools/list", None);
    assert_eq!(conn.recv_until_id("8").0.error_code(), -32601);
    conn.invoke(9, "echo", json!({"y": 2}));
    let r = conn.recv_until_id("9").0.result().clone();
    assert_eq!(r, json!({"success": true, "data": {"y": 2}}));
    conn.close_stdin();
    assert!(conn.wait_exit().success());
}

/// Starts the `sample` tool as a 2026-07-28 call and returns its input request's key and
/// `requestState`.
fn start_sample(conn: &mut Conn, id: u64, prompt: &str) -> (String, String) {
    call(
        conn,
        json!(id),
        "sample",
        json!({"prompt": prompt}),
        json!({}),
    );
    let r = conn.recv_until_id(&id.to_string()).0.result().clone();
    assert_eq!(r["resultType"], "input_required", "{r}");
    let requests = r["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1);
    let (key, request) = requests.iter().next().expect("one");
    assert_eq!(request["method"], "sampling/createMessage");
    assert_eq!(
        request["params"]["messages"][0]["content"]["text"], prompt,
        "{request}"
    );
    let state = r["requestState"].as_str().expect("requestState").to_owned();
    (key.clone(), state)
}

fn sampled(text: &str) -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "m"})
}

#[test]
fn an_input_request_resumes_the_waiting_handler_and_refuses_forged_replayed_and_rebound_state() {
    let mut conn = Conn::spawn_command(std::process::Command::new(example_bin("everything")));
    let (key, state) = start_sample(&mut conn, 1, "colour?");
    let retry =
        |state: &str, responses: Value| json!({"requestState": state, "inputResponses": responses});
    // Refused as the SDKs refuse it: the reason is the server's log's, not the client's.
    let refused = |conn: &mut Conn, id: &str| {
        let e = conn.recv_until_id(id).0;
        assert_eq!(e.error_code(), -32602, "{id}");
        assert_eq!(
            e.error()["data"],
            json!({"reason": "invalid_request_state"})
        );
    };
    // Forged: one character changed.
    let mut forged = state.clone().into_bytes();
    forged[5] = if forged[5] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).expect("ASCII");
    let answer = json!({ key.as_str(): sampled("forged") });
    call(
        &mut conn,
        json!(2),
        "sample",
        json!({"prompt": "colour?"}),
        retry(&forged, answer),
    );
    refused(&mut conn, "2");
    // Rebound: another tool's arguments.
    let answer = json!({ key.as_str(): sampled("rebound") });
    call(
        &mut conn,
        json!(3),
        "sample",
        json!({"prompt": "other"}),
        retry(&state, answer),
    );
    refused(&mut conn, "3");
    // Not a string: refused too.
    call(
        &mut conn,
        json!(4),
        "sample",
        json!({"prompt": "colour?"}),
        json!({"requestState": 7}),
    );
    refused(&mut conn, "4");
    // The handler still waits: the real retry resumes it, and its reply goes to the retry.
    let answer = json!({ key.as_str(): sampled("teal") });
    call(
        &mut conn,
        json!("r"),
        "sample",
        json!({"prompt": "colour?"}),
        retry(&state, answer.clone()),
    );
    let (done, skipped) = conn.recv_until_id("\"r\"");
    assert!(
        skipped.iter().all(|m| m.raw_id().as_deref() != Some("1")),
        "{skipped:?}"
    );
    let r = done.result();
    assert_eq!(r["resultType"], "complete");
    assert_eq!(
        r["structuredContent"],
        json!({"text": "teal", "model": "m"})
    );
    // Replayed: the call it named is over.
    call(
        &mut conn,
        json!(5),
        "sample",
        json!({"prompt": "colour?"}),
        retry(&state, answer),
    );
    refused(&mut conn, "5");
    // A retry without the response the handler waits for: the handler's error is the
    // retry's answer, as a tool error the model can read.
    let (_, state) = start_sample(&mut conn, 6, "shape?");
    call(
        &mut conn,
        json!(7),
        "sample",
        json!({"prompt": "shape?"}),
        retry(&state, json!({})),
    );
    let r = conn.recv_until_id("7").0.result().clone();
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("no response"))
    );
    conn.close_stdin();
    assert!(conn.wait_exit().success());
}

#[test]
fn a_client_without_sampling_gets_a_tool_error_not_an_input_request() {
    let mut conn = Conn::spawn_command(std::process::Command::new(example_bin("everything")));
    let params = json!({"name": "sample", "arguments": {"prompt": "p"}, "_meta": meta(false)});
    conn.request(1, "tools/call", Some(params));
    let r = conn.recv_until_id("1").0.result().clone();
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["resultType"], "complete");
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("sampling"), "{text}");
    conn.close_stdin();
    assert!(conn.wait_exit().success());
}

#[test]
fn a_handler_whose_client_never_retries_is_released_at_its_deadline() {
    let (ended_tx, ended_rx) = mpsc::channel::<String>();
    let plugin = executa::Plugin::new("asks", "1.0.0")
        .capability("llm.sample")
        .tool(executa::Tool::new(
            "ask",
            "Asks the model",
            move |_args: Value, ctx| {
                let request = executa::CreateMessage::new("anyone?", 8);
                let outcome = ctx
                    .sampling()
                    .create_message_with_timeout(&request, Duration::from_secs(1));
                let _ = ended_tx.send(format!("{outcome:?}"));
                Ok::<_, executa::ToolError>(json!({"asked": true}))
            },
        ));
    let mut conn = Conn::serve(plugin);
    call(&mut conn, json!(1), "ask", json!({}), json!({}));
    let r = conn.recv_until_id("1").0.result().clone();
    assert_eq!(r["resultType"], "input_required");
    let state = r["requestState"].as_str().expect("state").to_owned();
    // No retry: the handler's wait ends with a timeout, bounded by the call's own.
    let ended = ended_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the handler was released");
    assert!(ended.contains("Timeout"), "{ended}");
    // Its request was answered already: nothing more is sent for it, and its state is
    // refused now (expired, or no call waits for it).
    let params = json!({"name": "ask", "arguments": {}, "_meta": meta(true),
                        "requestState": state, "inputResponses": {}});
    conn.request(2, "tools/call", Some(params));
    let (e, skipped) = conn.recv_until_id("2");
    assert_eq!(e.error_code(), -32602);
    assert!(skipped.is_empty(), "{skipped:?}");
    // Still serving.
    conn.request(3, "tools/list", Some(json!({"_meta": meta(true)})));
    assert_eq!(
        conn.recv_until_id("3").0.result()["tools"][0]["name"],
        "ask"
    );
    conn.close_stdin();
    let _ = conn.wait_stopped();
}

/// `tools/call` frames laid out as `executa`'s host writes them take the prefix reader (the
/// hot path); each is answered as the full parse answers it.
#[test]
fn compact_tools_calls_are_answered_as_any_other() {
    let meta = meta(true).to_string();
    let line = |id: &str, params: String| {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
    };
    let mut conn = Conn::spawn_command(std::process::Command::new(example_bin("everything")));
    // No session, no envelope: not MCP.
    conn.send_line(&line("1", r#"{"name":"echo","arguments":{}}"#.into()));
    assert_eq!(conn.recv_until_id("1").0.error_code(), -32601);
    // Stateless.
    conn.send_line(&line(
        "2",
        format!(r#"{{"name":"echo","arguments":{{"a":1}},"_meta":{meta}}}"#),
    ));
    let r = conn.recv_until_id("2").0.result().clone();
    assert_eq!(
        (&r["resultType"], &r["structuredContent"]),
        (&json!("complete"), &json!({"a": 1}))
    );
    conn.send_line(&line("3", format!(r#"{{"name":"nope","_meta":{meta}}}"#)));
    assert_eq!(conn.recv_until_id("3").0.error_code(), -32602);
    conn.send_line(&line("4", format!(r#"{{"name":5,"_meta":{meta}}}"#)));
    assert_eq!(conn.recv_until_id("4").0.error_code(), -32602);
    // An input request and its retry.
    conn.send_line(&line(
        "5",
        format!(r#"{{"name":"sample","arguments":{{"prompt":"p"}},"_meta":{meta}}}"#),
    ));
    let r = conn.recv_until_id("5").0.result().clone();
    let state = r["requestState"].as_str().expect("state");
    let key = r["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .expect("key");
    let responses = json!({ key: sampled("ok") });
    let retry = format!(
        r#"{{"name":"sample","arguments":{{"prompt":"p"}},"_meta":{meta},"requestState":"{state}","inputResponses":{responses}}}"#
    );
    conn.send_line(&line("\"6\"", retry));
    let r = conn.recv_until_id("\"6\"").0.result().clone();
    assert_eq!(r["structuredContent"]["text"], "ok", "{r}");
    // A handshake session.
    conn.initialize("2025-11-25", json!({}));
    conn.send_line(&line("7", r#"{"name":"echo","arguments":{"b":2}}"#.into()));
    let r = conn.recv_until_id("7").0.result().clone();
    assert_eq!(r["structuredContent"], json!({"b": 2}));
    assert!(r.get("resultType").is_none(), "{r}");
    conn.close_stdin();
    assert!(conn.wait_exit().success());
}

/// An input request is answered only by a retry with its sealed state: a response naming
/// its number (`"ex-N"`, which the key `rN` tells) is not its answer, nor is a malformed one.
#[test]
fn a_response_cannot_answer_an_input_request() {
    let mut conn = Conn::spawn_command(std::process::Command::new(example_bin("everything")));
    let (key, state) = start_sample(&mut conn, 1, "colour?");
    let number = key.trim_start_matches('r');
    let forged = json!({"id": {"not": "an id"}, "response": sampled("forged")});
    conn.send(&json!({"jsonrpc": "2.0", "id": format!("ex-{number}"), "result": forged}));
    conn.send_line(&format!(r#"{{"jsonrpc":"2.0","id":"ex-{number}"}}"#));
    let answer = json!({ key.as_str(): sampled("real") });
    let retry = json!({"requestState": state, "inputResponses": answer});
    call(
        &mut conn,
        json!(2),
        "sample",
        json!({"prompt": "colour?"}),
        retry,
    );
    let (done, skipped) = conn.recv_until_id("2");
    assert!(skipped.iter().all(|m| !m.is_response()), "{skipped:?}");
    assert_eq!(done.result()["structuredContent"]["text"], "real");
    conn.close_stdin();
    assert!(conn.wait_exit().success());
}

/// After a retry, the call's request is the retry: its progress goes with the retry's
/// token (none between the two: that request was answered), and a cancellation of the
/// retry holds back the reply.
#[test]
fn the_retry_is_the_request_in_flight() {
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let done_tx = std::sync::Mutex::new(done_tx);
    let plugin = executa::Plugin::new("asks", "1.0.0")
        .capability("llm.sample")
        .tool(executa::Tool::new(
            "ask",
            "Asks the model",
            move |_args: Value, ctx| {
                ctx.progress("before", &json!({"step": 1}));
                let answer = ctx.sampling().complete("anyone?", 8);
                ctx.progress("after", &json!({"step": 2}));
                let _ = release_rx
                    .lock()
                    .map(|rx| rx.recv_timeout(Duration::from_secs(60)));
                let _ = done_tx.lock().map(|tx| tx.send(()));
                Ok::<_, executa::ToolError>(json!({"answer": answer.ok()}))
            },
        ));
    let mut conn = Conn::serve(plugin);
    let mut first = meta(true);
    first["progressToken"] = json!("first");
    let params = json!({"name": "ask", "arguments": {}, "_meta": first});
    conn.request(1, "tools/call", Some(params));
    let (r, before) = conn.recv_until_id("1");
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].method(), Some("notifications/progress"));
    let r = r.result().clone();
    let key = r["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned());
    let mut second = meta(true);
    second["progressToken"] = json!("second");
    let params = json!({"name": "ask", "arguments": {}, "_meta": second,
                        "requestState": r["requestState"],
                        "inputResponses": { key.expect("key"): sampled("yes") }});
    conn.request(2, "tools/call", Some(params));
    let progress = conn.recv();
    assert_eq!(
        progress.method(),
        Some("notifications/progress"),
        "{progress:?}"
    );
    assert_eq!(progress.v["params"]["progressToken"], "second");
    conn.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 2}}),
    );
    // The cancellation is read before the handler is let go: a request behind it is
    // answered only after the reader passed it.
    conn.request(3, "tools/list", Some(json!({"_meta": meta(true)})));
    let (_, skipped) = conn.recv_until_id("3");
    assert!(skipped.is_empty(), "{skipped:?}");
    release_tx.send(()).expect("release");
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the handler ended");
    conn.request(4, "tools/list", Some(json!({"_meta": meta(true)})));
    let (_, skipped) = conn.recv_until_id("4");
    assert!(
        skipped.is_empty(),
        "the cancelled retry was answered: {skipped:?}"
    );
    conn.close_stdin();
    let _ = conn.wait_stopped();
}
