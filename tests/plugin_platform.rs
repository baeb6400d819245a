//! The `everything` example's whole life on every platform the crate runs on, as one host
//! would drive it: `initialize`, `describe`, an invoke, `health`, a panicking tool, an
//! oversized frame, 3,000 pipelined invokes, and end of input. `.ci/run` runs it on Linux,
//! and under Wine on the Windows build, where the same replies must come back.

mod common;

use std::collections::BTreeSet;

use common::Conn;
use serde_json::json;

/// Pipelined invokes written before the first reply is read.
const PIPELINED: usize = 3_000;

#[test]
fn the_everything_example_lives_its_whole_life_as_on_linux() {
    let mut p = Conn::spawn();

    let init = p.initialize("2.0", json!({}));
    assert_eq!(init["protocolVersion"], "2.0", "{init}");

    p.request("d", "describe", None);
    let manifest = p.recv_until_id("\"d\"").0;
    let tools = manifest.result()["tools"].as_array().expect("tools");
    assert!(
        tools.iter().any(|t| t["name"] == "echo"),
        "{}",
        manifest.raw
    );

    p.invoke(1, "echo", json!({ "text": "hi" }));
    let echoed = p.recv_until_id("1").0;
    assert_eq!(echoed.data(), &json!({ "text": "hi" }), "{}", echoed.raw);

    p.request("h", "health", None);
    assert_eq!(p.recv_until_id("\"h\"").0.result()["status"], "ready");

    p.invoke(2, "panic", json!({}));
    let panicked = p.recv_until_id("2").0;
    assert_eq!(panicked.error_code(), -32603, "{}", panicked.raw);

    // 17 MiB: past the 16 MiB frame cap. The id comes first, so the refusal carries it.
    let bulk = "x".repeat(17 * 1024 * 1024);
    p.send_line(&format!(
        r#"{{"jsonrpc":"2.0","id":"big","method":"invoke","params":{{"tool":"echo","arguments":{{"blob":"{bulk}"}}}}}}"#
    ));
    let refused = p.recv_until_id("\"big\"").0;
    assert_eq!(refused.error_code(), -32600, "{}", refused.raw);
    assert_eq!(refused.error()["data"]["errorCode"], "frame_too_large");

    // All written at once (one write), then every reply read: each id exactly once.
    let mut burst = String::new();
    for i in 0..PIPELINED {
        let frame = json!({"jsonrpc":"2.0","id":format!("p{i}"),"method":"invoke",
            "params":{"tool":"echo","arguments":{"i":i}}});
        burst.push_str(&frame.to_string());
        burst.push('\n');
    }
    p.send_raw(burst.as_bytes());
    let mut seen = BTreeSet::new();
    while seen.len() < PIPELINED {
        let m = p.recv();
        let id = m.raw_id().expect("a reply");
        let i: usize = id.trim_matches('"')[1..].parse().expect("a pipelined id");
        assert_eq!(m.data(), &json!({ "i": i }), "{}", m.raw);
        assert!(seen.insert(i), "id {id} answered twice");
    }

    // End of input: nothing more, and exit 0.
    p.close_stdin();
    assert!(p.drain_to_eof().is_empty());
    let status = p.wait_exit();
    assert_eq!(status.code(), Some(0), "stderr: {}", p.stderr());
}
