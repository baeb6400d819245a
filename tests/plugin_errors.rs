//! Error paths and framing of the real `everything` plugin, driven over its stdio pipes.
// The unread-stderr test is Unix only; what only it uses is unused elsewhere.
#![cfg_attr(not(unix), allow(unused_imports, dead_code))]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Conn;
use serde_json::json;

/// Bound on one wait for the plugin in the tests below: only a failure waits this long.
const RECV: Duration = Duration::from_secs(30);

#[test]
fn unknown_method_is_32601() {
    let mut p = Conn::spawn();
    p.request(1, "frobnicate", Some(json!({})));
    let reply = p.recv_until_id("1").0;
    assert_eq!(reply.error_code(), -32601);
    assert!(
        reply.error_message().contains("frobnicate"),
        "{}",
        reply.raw
    );
    p.finish();
}

#[test]
fn unknown_tool_is_32601_naming_the_tool() {
    let mut p = Conn::spawn();
    p.invoke(1, "no_such_tool", json!({}));
    let reply = p.recv_until_id("1").0;
    assert_eq!(reply.error_code(), -32601);
    assert!(
        reply.error_message().contains("no_such_tool"),
        "{}",
        reply.raw
    );
    p.finish();
}

#[test]
fn bad_arguments_are_32602_naming_the_field() {
    let mut p = Conn::spawn();
    // Wrong type.
    p.invoke(1, "sleep", json!({ "ms": "soon" }));
    let reply = p.recv_until_id("1").0;
    assert_eq!(reply.error_code(), -32602, "{}", reply.raw);
    assert!(reply.error_message().contains("`ms`"), "{}", reply.raw);
    // Missing field.
    p.invoke(2, "fail", json!({}));
    let reply = p.recv_until_id("2").0;
    assert_eq!(reply.error_code(), -32602, "{}", reply.raw);
    assert!(reply.error_message().contains("`message`"), "{}", reply.raw);
    // Arguments that are not an object at all.
    p.invoke(3, "big", json!([1, 2]));
    let reply = p.recv_until_id("3").0;
    assert_eq!(reply.error_code(), -32602, "{}", reply.raw);
    // Invoke params without a tool.
    p.request(4, "invoke", Some(json!({ "arguments": {} })));
    let reply = p.recv_until_id("4").0;
    assert_eq!(reply.error_code(), -32602, "{}", reply.raw);
    p.finish();
}

#[test]
fn notifications_are_never_answered() {
    let mut p = Conn::spawn();
    p.send(&json!({ "jsonrpc": "2.0", "method": "health" }));
    p.send(&json!({ "jsonrpc": "2.0", "method": "describe" }));
    p.send(&json!({ "jsonrpc": "2.0", "method": "no_such_method" }));
    p.send(&json!({ "jsonrpc": "2.0", "method": "invoke", "params": { "tool": "echo", "arguments": { "n": 1 } } }));
    p.send(&json!({ "jsonrpc": "2.0", "method": "invoke", "params": { "tool": "no_such_tool" } }));
    p.request(7, "health", None);
    let first = p.recv();
    assert_eq!(
        first.raw_id().as_deref(),
        Some("7"),
        "the first reply must be the request's: {}",
        first.raw
    );
    // Nothing else is ever written for the notifications.
    let rest = p.finish();
    assert!(rest.is_empty(), "notifications were answered: {rest:?}");
}

#[test]
fn a_malformed_line_is_32700_with_a_null_id_and_serving_goes_on() {
    let mut p = Conn::spawn();
    for bad in [
        "this is not json",
        r#"{"jsonrpc":"2.0","id":4,"method":"health""#,
        r#"{"jsonrpc":"2.0","id":5,"method":"health"} trailing"#,
        "\u{7f}\u{1}",
    ] {
        p.send_line(bad);
        let reply = p.recv();
        assert_eq!(
            reply.raw_id().as_deref(),
            Some("null"),
            "for {bad:?}: {}",
            reply.raw
        );
        assert_eq!(reply.error_code(), -32700, "for {bad:?}: {}", reply.raw);
    }
    // Invalid UTF-8 is not a valid frame either.
    p.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"\xff\xfe\"}\n");
    let reply = p.recv();
    assert!(
        [-32700, -32600].contains(&reply.error_code()),
        "{}",
        reply.raw
    );
    p.request(8, "health", None);
    assert_eq!(p.recv_until_id("8").0.result()["status"], "ready");
    p.finish();
}

#[test]
fn non_object_and_wrong_typed_envelopes_are_32600() {
    let mut p = Conn::spawn();
    // (line, raw id expected in the reply)
    let cases = [
        ("5", "null"),
        (r#""str""#, "null"),
        ("null", "null"),
        ("true", "null"),
        (r#"{"id":3,"method":7}"#, "3"),
        (r#"{"jsonrpc":"1.0","id":9,"method":"health"}"#, "9"),
        (
            r#"{"jsonrpc":"2.0","id":10,"method":"health","params":5}"#,
            "10",
        ),
        (
            r#"{"jsonrpc":"2.0","id":11,"method":"health","params":"x"}"#,
            "11",
        ),
        (r#"{"jsonrpc":"2.0","id":12}"#, "12"),
        (
            r#"{"jsonrpc":"2.0","id":13,"result":{},"error":{"code":1,"message":"m"}}"#,
            "13",
        ),
    ];
    for (line, id) in cases {
        p.send_line(line);
        let reply = p.recv();
        assert_eq!(reply.error_code(), -32600, "for {line}: {}", reply.raw);
        assert_eq!(
            reply.raw_id().as_deref(),
            Some(id),
            "for {line}: {}",
            reply.raw
        );
    }
    p.request(20, "health", None);
    assert_eq!(p.recv_until_id("20").0.result()["status"], "ready");
    p.finish();
}

/// A JSON array is not a JSON-RPC object (batches are not part of the protocol): it must
/// be refused with -32600 and a null id, never read positionally as `[id, method, ...]`.
#[test]
fn array_frames_are_32600_with_a_null_id() {
    let mut p = Conn::spawn();
    for line in [
        "[1]",
        r#"[7,"health"]"#,
        "[]",
        r#"[{"jsonrpc":"2.0","id":1,"method":"health"}]"#,
    ] {
        p.send_line(line);
        let reply = p.recv();
        assert!(
            reply.v.get("result").is_none(),
            "an array frame was served as a request: {line} -> {}",
            reply.raw
        );
        assert_eq!(reply.error_code(), -32600, "for {line}: {}", reply.raw);
        assert_eq!(
            reply.raw_id().as_deref(),
            Some("null"),
            "for {line}: {}",
            reply.raw
        );
    }
    p.finish();
}

/// JSON-RPC ids are strings, numbers or null: an object, array or boolean id makes the
/// request invalid (-32600), and is not echoed.
#[test]
fn structured_or_boolean_ids_are_32600() {
    let mut p = Conn::spawn();
    for id in [r#"{"a":1}"#, "[1]", "true"] {
        p.send_line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"health"}}"#
        ));
        let reply = p.recv();
        assert!(
            reply.v.get("result").is_none(),
            "a request with id {id} was served: {}",
            reply.raw
        );
        assert_eq!(reply.error_code(), -32600, "for id {id}: {}", reply.raw);
        assert_eq!(
            reply.raw_id().as_deref(),
            Some("null"),
            "for id {id}: {}",
            reply.raw
        );
    }
    p.finish();
}

#[test]
fn ids_of_every_json_type_are_echoed_byte_exactly() {
    let mut p = Conn::spawn();
    let ids = [
        "0",
        "-1",
        "18446744073709551615",
        "-9223372036854775808",
        "1.5",
        "1e3",
        "\"7\"",
        "\"x\\\"y\"",
        "\"\"",
        "\"\\u00e9t\\u00e9\"",
        "null",
    ];
    // One request at a time (a null id cannot be told apart otherwise), through the
    // three reply paths: a lifecycle result, an invoke result and an error.
    for id in ids {
        for (method, params) in [
            ("health", "null"),
            ("invoke", r#"{"tool":"echo","arguments":{"k":1}}"#),
            ("no_such_method", "{}"),
        ] {
            p.send_line(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
            ));
            let reply = p.recv();
            assert_eq!(
                reply.raw_id().as_deref(),
                Some(id),
                "{method} with id {id}: {}",
                reply.raw
            );
            let prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"#);
            assert!(
                reply.raw.starts_with(&prefix),
                "{method} with id {id}: {}",
                reply.raw
            );
            match method {
                "no_such_method" => assert_eq!(reply.error_code(), -32601),
                "invoke" => assert_eq!(reply.data(), &json!({ "k": 1 })),
                _ => assert_eq!(reply.result()["status"], "ready"),
            }
        }
    }
    p.finish();
}

#[test]
fn crlf_bom_and_blank_lines_are_tolerated() {
    let mut p = Conn::spawn();
    let mut input = Vec::new();
    input
        .extend_from_slice(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"health\"}\r\n");
    input.extend_from_slice(b"\n\r\n   \r\n\t\n");
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"describe\"}\r\n");
    input.extend_from_slice(b"\r\n\n");
    input.extend_from_slice(
        b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"invoke\",\"params\":{\"tool\":\"echo\",\"arguments\":{\"crlf\":true}}}\r\n",
    );
    p.send_raw(&input);
    let mut replies = BTreeMap::new();
    for _ in 0..3 {
        let m = p.recv();
        replies.insert(m.raw_id().unwrap(), m);
    }
    assert_eq!(replies["1"].result()["status"], "ready");
    assert_eq!(replies["2"].result()["name"], "everything");
    assert_eq!(replies["3"].data(), &json!({ "crlf": true }));
    // A last line without any line ending is still served at end of input.
    p.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"health\"}");
    let rest = p.finish();
    assert_eq!(rest.len(), 1, "blank lines must not be answered: {rest:?}");
    assert_eq!(rest[0].raw_id().as_deref(), Some("4"));
    assert_eq!(rest[0].result()["status"], "ready");
}

#[test]
fn a_17_mib_line_is_refused_and_the_next_request_is_served() {
    let mut p = Conn::spawn();
    let bulk = "x".repeat(17 * 1024 * 1024);
    // The id comes before the bulk: the refusal carries it.
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":"big-1","method":"invoke","params":{{"tool":"echo","arguments":{{"blob":"{bulk}"}}}}}}"#
    );
    p.send_line(&line);
    p.request(2, "health", None);
    // Replies need not come in order: the refusal goes to a dispatch thread, and a worker
    // or the reader may answer the next request first.
    let (refused, health) = recv_pair(&mut p, "\"big-1\"", "2");
    assert_eq!(refused.error_code(), -32600, "{}", refused.raw);
    assert_eq!(refused.error()["data"]["errorCode"], "frame_too_large");
    assert_eq!(
        refused.error()["data"]["size"].as_u64(),
        Some(line.len() as u64)
    );
    assert!(
        refused.raw.len() < 4096,
        "the refusal must not echo the frame"
    );
    assert_eq!(health.result()["status"], "ready");

    // The id comes after the bulk: the tail still shows it, and serving goes on.
    let line = format!(
        r#"{{"jsonrpc":"2.0","method":"invoke","params":{{"tool":"echo","arguments":{{"blob":"{bulk}"}}}},"id":"big-3"}}"#
    );
    drop(bulk);
    p.send_line(&line);
    p.invoke(4, "echo", json!({ "after": "big" }));
    let (refused, echo) = recv_pair(&mut p, "\"big-3\"", "4");
    assert_eq!(refused.error_code(), -32600, "{}", refused.raw);
    assert_eq!(echo.data(), &json!({ "after": "big" }));
    p.finish();
}

/// The replies with raw ids `a` and `b`, in whichever order they come.
fn recv_pair(p: &mut Conn, a: &str, b: &str) -> (common::Msg, common::Msg) {
    let (mut first, mut second) = (None, None);
    while first.is_none() || second.is_none() {
        let m = p.recv();
        match m.raw_id().as_deref() {
            Some(id) if id == a => first = Some(m),
            Some(id) if id == b => second = Some(m),
            _ => {}
        }
    }
    (first.unwrap(), second.unwrap())
}

#[test]
fn a_line_just_under_the_cap_is_served() {
    let mut p = Conn::spawn();
    let overhead = r#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"tool":"noop","arguments":{"blob":""}}}"#.len();
    let bulk = "y".repeat(16 * 1024 * 1024 - overhead);
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"invoke","params":{{"tool":"noop","arguments":{{"blob":"{bulk}"}}}}}}"#
    );
    assert_eq!(line.len(), 16 * 1024 * 1024);
    p.send_line(&line);
    assert_eq!(p.recv_until_id("1").0.data(), &json!({}));
    p.finish();
}

#[test]
fn a_handler_panic_is_32603_and_the_plugin_keeps_serving() {
    let mut p = Conn::spawn();
    p.invoke(1, "panic", json!({}));
    let reply = p.recv_until_id("1").0;
    assert_eq!(reply.error_code(), -32603, "{}", reply.raw);
    assert!(
        !reply.raw.contains("on purpose"),
        "the panic text belongs on stderr: {}",
        reply.raw
    );
    // Again, concurrently with other work: nothing is stranded.
    p.invoke(2, "panic", json!({}));
    p.invoke(3, "echo", json!({ "still": "alive" }));
    p.request(4, "health", None);
    let mut replies = BTreeMap::new();
    for _ in 0..3 {
        let m = p.recv();
        replies.insert(m.raw_id().unwrap(), m);
    }
    assert_eq!(replies["2"].error_code(), -32603);
    assert_eq!(replies["3"].data(), &json!({ "still": "alive" }));
    assert_eq!(replies["4"].result()["status"], "ready");
    p.finish();
    assert!(
        p.stderr().contains("panicked on purpose"),
        "stderr: {}",
        p.stderr()
    );
}

#[test]
fn a_result_above_4_mib_becomes_a_failure_with_both_sizes() {
    let mut p = Conn::spawn();
    p.invoke(1, "big", json!({ "bytes": 5_000_000 }));
    let reply = p.recv_until_id("1").0;
    assert!(reply.raw.len() < 4 * 1024 * 1024);
    let error = reply.failure().to_owned();
    let data = &reply.result()["data"];
    assert_eq!(data["errorCode"], "RESULT_TOO_LARGE", "{}", reply.raw);
    let size = data["result_size_bytes"]
        .as_u64()
        .expect("result_size_bytes");
    let max = data["max_payload_bytes"]
        .as_u64()
        .expect("max_payload_bytes");
    assert!(size > 5_000_000, "size {size}");
    assert_eq!(max, 4 * 1024 * 1024);
    assert!(error.contains(&size.to_string()), "{error}");
    assert!(error.contains(&max.to_string()), "{error}");

    // A result under the limit is sent whole.
    p.invoke(2, "big", json!({ "bytes": 1_000_000 }));
    let reply = p.recv_until_id("2").0;
    assert_eq!(reply.data()["blob"].as_str().map(str::len), Some(1_000_000));
    p.finish();
}

#[test]
fn an_oversized_failure_is_guarded_too() {
    let mut p = Conn::spawn();
    let message = "m".repeat(5 * 1024 * 1024);
    p.invoke(1, "fail", json!({ "message": message }));
    let reply = p.recv_until_id("1").0;
    assert!(
        reply.raw.len() < 4096,
        "the oversized failure must be replaced"
    );
    assert_eq!(reply.result()["success"], false);
    assert_eq!(reply.result()["data"]["errorCode"], "RESULT_TOO_LARGE");
    p.finish();
}

/// An invoke in the compact layout (`{"jsonrpc":"2.0","id":..,"method":"invoke","params":`)
/// is read by prefix after a quick check of its params; one with anything unusual after
/// that prefix must still be answered exactly as the full parse answers it. Each frame is
/// compared with the same JSON laid out otherwise (a space after the opening brace), which
/// only the full parse reads. Error texts are compared without their positions, which the
/// space shifts.
#[test]
fn compact_invokes_are_answered_as_the_full_parse_answers_them() {
    let head = r#"{"jsonrpc":"2.0","id":"#;
    let frames = [
        r#"7,"method":"invoke","params":{"tool":"echo","arguments":{"text":"a"}}}"#,
        r#"0,"method":"invoke","params":{"tool":"echo","arguments":{"text":"b"}}}"#,
        r#""s-1","method":"invoke","params":{"tool":"echo","arguments":{"text":"c"}}}"#,
        // Members after the params: ignored, or duplicates.
        r#"8,"method":"invoke","params":{"tool":"echo","arguments":{"text":"d"}},"extra":[1,{"a":"}"}]}"#,
        r#"9,"method":"invoke","params":{"tool":"echo","arguments":{"text":"e"}},"result":1}"#,
        r#"10,"method":"invoke","params":{"tool":"echo","arguments":{"text":"f"}},"id":11}"#,
        r#"12,"method":"invoke","params":{"tool":"echo"},"params":{"tool":"echo"}}"#,
        r#"13,"method":"invoke","params":{"tool":"echo"},"method":"health"}"#,
        r#"14,"method":"invoke","params":{"tool":"echo"},"jsonrpc":"1.0"}"#,
        // Not JSON after the prefix.
        r#"15,"method":"invoke","params":{"tool":"echo","arguments":{"text":"g"}}}}"#,
        r#"16,"method":"invoke","params":{"tool":"echo","arguments":{"text":"h"},}}"#,
        r#"17,"method":"invoke","params":{"tool":"echo"} x}"#,
        r#"18,"method":"invoke","params":{"tool":"echo","arguments":{"text":"\q"}}}"#,
        // Wrong params, unknown tools, bad arguments.
        r#"19,"method":"invoke","params":{"tool":5}}"#,
        r#"20,"method":"invoke","params":{"tool":"no-such-tool"}}"#,
        r#"21,"method":"invoke","params":{"tool":"echo","arguments":{"text":5}}}"#,
        r#"22,"method":"invoke","params":{}}"#,
    ];
    let strip = |s: &str| match s.find(" at line ") {
        Some(i) => s[..i].to_owned(),
        None => s.to_owned(),
    };
    let mut p = Conn::spawn();
    for rest in frames {
        let compact = format!("{head}{rest}");
        let spaced = format!("{{ {}", &compact[1..]);
        let mut replies = Vec::new();
        for line in [&compact, &spaced] {
            p.send_line(line);
            replies.push(p.recv());
        }
        let (a, b) = (&replies[0], &replies[1]);
        assert_eq!(a.raw_id(), b.raw_id(), "{compact}\n{}\n{}", a.raw, b.raw);
        match (a.v.get("error"), b.v.get("error")) {
            (Some(ea), Some(eb)) => {
                assert_eq!(ea["code"], eb["code"], "{compact}\n{}\n{}", a.raw, b.raw);
                assert_eq!(
                    strip(a.error_message()),
                    strip(b.error_message()),
                    "{compact}"
                );
            }
            (None, None) => assert_eq!(a.result(), b.result(), "{compact}"),
            _ => panic!("one answered, one failed:\n{compact}\n{}\n{}", a.raw, b.raw),
        }
    }
    // White space after an id is not echoed (the reply's id is the id as JSON reads it).
    for (line, head) in [
        (
            "{\"jsonrpc\":\"2.0\",\"id\":7 ,\"method\":\"invoke\",\"params\":{\"tool\":\"echo\"}}",
            "{\"jsonrpc\":\"2.0\",\"id\":7,",
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":\"x\"\t,\"method\":\"invoke\",\"params\":{\"tool\":\"echo\"}}",
            "{\"jsonrpc\":\"2.0\",\"id\":\"x\",",
        ),
    ] {
        p.send_line(line);
        let reply = p.recv();
        assert!(reply.raw.starts_with(head), "{line:?}: {}", reply.raw);
    }
    // The plain ones were served, and the rest failed as they should.
    p.send_line(&format!("{head}{}", frames[0]));
    assert_eq!(p.recv().data()["text"], "a");
    p.send_line(&format!("{head}{}", frames[9]));
    assert_eq!(p.recv().error_code(), -32700);
    p.finish();
}

/// A compact frame that is not a valid request is refused as one at once, also where an
/// invoke would not run: after `shutdown` (an invoke is refused as shutting down), and
/// while every invoke slot is taken (an invoke waits for one). (A first version of the
/// prefix reader took such frames for invokes and answered them as invokes.)
#[test]
fn a_broken_compact_frame_is_refused_at_once_even_where_invokes_wait_or_are_refused() {
    let broken = [
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"invoke","params":{"tool":"echo"}}}"#,
            -32700,
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"invoke","params":{"tool":"echo"},"id":4}"#,
            -32600,
        ),
    ];
    let mut p = Conn::spawn();
    for n in 1..=4 {
        p.invoke(100 + n, "sleep", json!({ "ms": 60_000 }));
    }
    for (line, code) in broken {
        p.send_line(line);
        let reply = p.recv();
        assert_eq!(reply.error_code(), code, "{line}: {}", reply.raw);
        assert_eq!(reply.raw_id().as_deref(), Some("null"), "{}", reply.raw);
    }
    let mut p = Conn::spawn();
    p.request(1, "shutdown", None);
    assert_eq!(p.recv_until_id("1").0.result(), &json!({}));
    for (line, code) in broken {
        p.send_line(line);
        let reply = p.recv();
        assert_eq!(reply.error_code(), code, "{line}: {}", reply.raw);
    }
    p.finish();
}

/// With its stderr a pipe nobody reads, a plugin whose every frame logs a line keeps
/// answering: the logger never waits for room (a line that finds none is dropped and
/// counted, the count written once there is room again), and answers to ids that wait for
/// nothing are logged a few a second. Before, 2,000 answers to unknown ids filled the pipe
/// and the logger blocked the reader: `health` went unanswered.
// Unix only: on Windows the logger reads the pipe's free quota (NtQueryInformationFile),
// which Wine, the only Windows here, does not report, so a full stderr cannot be seen here.
#[cfg(unix)]
#[test]
fn a_plugin_whose_stderr_nobody_reads_keeps_answering() {
    let mut child = Command::new(common::everything_bin())
        .env("EXECUTA_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn everything");
    // Killed when the test ends, even when it fails.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let child = Kill(child);
    let (lines_tx, lines) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    // Each frame logs one warning: an answer to an id that is not ours, an answer to an
    // id of our shape that no call waits for, an invalid notification. About 1 MB of
    // lines, 16 times the pipe's room.
    let mut flood = String::new();
    for i in 0..4000 {
        flood.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"zz-{i}\",\"result\":1}}\n"
        ));
        flood.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"ex-{}\",\"result\":1}}\n",
            1_000_000 + i
        ));
        flood.push_str("{\"method\":\"note\",\"params\":3}\n");
    }
    flood.push_str("{\"jsonrpc\":\"2.0\",\"id\":\"h\",\"method\":\"health\"}\n");
    // From a thread: a plugin that stops reading would leave the write waiting.
    let start = Instant::now();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(flood.as_bytes());
        stdin
    });
    let deadline = start + Duration::from_secs(30);
    let reply = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains("\"id\":\"h\"") => break line,
            Ok(_) => {}
            Err(_) => panic!(
                "`health` unanswered {:?} after 12,000 frames that log, with stderr unread",
                start.elapsed()
            ),
        }
    };
    let elapsed = start.elapsed();
    assert!(reply.contains("\"status\":\"ready\""), "{reply}");
    // The lines above are each within their limit, so they no longer fill the pipe: a
    // tool's own log lines (2 KB each, 200 of them, six times the pipe's room) do, and
    // every invoke is still answered.
    let mut stdin = writer.join().expect("writer");
    let text = "y".repeat(2000);
    let mut logs = String::new();
    for i in 0..200 {
        logs.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"log{i}\",\"method\":\"invoke\",\"params\":{{\"tool\":\"log\",\"arguments\":{{\"text\":\"{text}\"}}}}}}\n"
        ));
    }
    stdin
        .write_all(logs.as_bytes())
        .expect("write the log invokes");
    let mut answered = 0;
    while answered < 200 {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains("\"id\":\"log") => answered += 1,
            Ok(_) => {}
            Err(_) => panic!("{answered} of 200 `log` invokes answered with stderr full"),
        }
    }
    // Now read stderr: what fitted, then the count of what did not, written with the
    // next line that finds room. A line logged before the pipe is drained is dropped too,
    // so each round logs one more (an invalid notification) and asks `health`, until the
    // count shows.
    let (chunks_tx, chunks) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = stderr.read(&mut buf) {
            if chunks_tx
                .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                .is_err()
            {
                return;
            }
        }
    });
    let mut text = String::new();
    let counted = "more `log (stderr was full)` lines suppressed";
    for round in 0..20 {
        let frames = format!(
            "{{\"method\":\"note\",\"params\":4}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":\"r{round}\",\"method\":\"health\"}}\n"
        );
        stdin.write_all(frames.as_bytes()).expect("write a round");
        let id = format!("\"id\":\"r{round}\"");
        while !lines
            .recv_timeout(RECV)
            .expect("a round's health")
            .contains(&id)
        {}
        // The round's line (and the count) are in the pipe before its `health` reply.
        while let Ok(chunk) = chunks.recv_timeout(Duration::from_millis(100)) {
            text.push_str(&chunk);
        }
        if text.contains(counted) {
            break;
        }
    }
    drop(stdin);
    while let Ok(chunk) = chunks.recv_timeout(RECV) {
        text.push_str(&chunk);
    }
    drop(child);
    assert!(
        text.contains(counted),
        "no count of the dropped lines; {} bytes, stderr ends with: {}",
        text.len(),
        &text[text.len().saturating_sub(2000)..]
    );
    // A few a second of each limited kind (the window is a second of the clock).
    let windows = elapsed.as_secs() as usize + 2;
    for kind in ["with unknown id", "timed out or already settled"] {
        let n = text.lines().filter(|l| l.contains(kind)).count();
        assert!(
            (1..=4 * windows).contains(&n),
            "{n} lines `{kind}` in {elapsed:?}"
        );
    }
}

/// Invoke params are an object: an array is refused -32602, never read positionally as
/// `[tool, arguments, context, ...]` (the derived reader used to take it that way).
#[test]
fn array_invoke_params_are_32602() {
    let mut p = Conn::spawn();
    p.send_line(r#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":["echo",{"k":1}]}"#);
    let reply = p.recv_until_id("1").0;
    assert_eq!(reply.error_code(), -32602, "{}", reply.raw);
    // The object form, with the older `name` spelling, is still read; a duplicate is not.
    p.send_line(r#"{"jsonrpc":"2.0","id":2,"method":"invoke","params":{"name":"echo","arguments":{"k":2}}}"#);
    assert_eq!(p.recv_until_id("2").0.data(), &json!({ "k": 2 }));
    p.send_line(
        r#"{"jsonrpc":"2.0","id":3,"method":"invoke","params":{"tool":"echo","name":"echo"}}"#,
    );
    let reply = p.recv_until_id("3").0;
    assert_eq!(reply.error_code(), -32602, "{}", reply.raw);
    assert!(
        reply.error_message().contains("duplicate field `tool`"),
        "{}",
        reply.raw
    );
    p.finish();
}
