//! Every reply within the cap: an error message quotes at most a few hundred bytes of the
//! request, with the quoted text's full length, whatever the request's size, and keeps its
//! code; an id too long to echo is refused; no reply of any kind passes `max_result_bytes`.

mod common;

use common::{Conn, Msg};
use executa::{Health, Invocation, Options, Plugin, Tool, ToolError};
use serde::de::IgnoredAny;
use serde_json::{Value, json};

/// The size of the request text each case sends: under the 16 MiB frame cap, over the
/// 4 MiB result cap.
const TEN_MB: usize = 10 * 1024 * 1024;

/// The longest run of `b` in `text`.
fn longest_run(text: &str, b: u8) -> usize {
    text.as_bytes()
        .split(|&c| c != b)
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0)
}

/// Checks an error reply to a request holding `TEN_MB` bytes of `x`: its code, its size,
/// and that its message quotes at most 256 of them and says how long the quoted text was
/// (`len`, when known exactly).
fn assert_quoted(reply: &Msg, code: i64, len: Option<usize>) {
    assert!(
        reply.raw.len() < 1024,
        "a reply of {} bytes: {}",
        reply.raw.len(),
        &reply.raw[..300]
    );
    assert_eq!(reply.error_code(), code, "{}", reply.raw);
    let message = reply.error_message();
    assert!(longest_run(message, b'x') <= 256, "{message}");
    match len {
        Some(len) => assert!(message.contains(&format!("… ({len} bytes)")), "{message}"),
        None => assert!(message.contains(" bytes)"), "{message}"),
    }
}

#[test]
fn an_unknown_method_of_10_mb_is_quoted_short() {
    let mut p = Conn::spawn();
    let name = "x".repeat(TEN_MB);
    p.send_line(&format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{name}"}}"#));
    assert_quoted(&p.recv_until_id("1").0, -32601, Some(TEN_MB));
    p.finish();
}

#[test]
fn a_jsonrpc_version_of_10_mb_is_quoted_short() {
    let mut p = Conn::spawn();
    let version = "x".repeat(TEN_MB);
    p.send_line(&format!(
        r#"{{"jsonrpc":"{version}","id":2,"method":"health"}}"#
    ));
    assert_quoted(&p.recv_until_id("2").0, -32600, Some(TEN_MB));
    p.finish();
}

/// An unknown tool is answered as one (-32601), not as a result too large.
#[test]
fn an_unknown_tool_of_10_mb_is_an_unknown_tool() {
    let mut p = Conn::spawn();
    p.invoke(3, &"x".repeat(TEN_MB), json!({}));
    let reply = p.recv_until_id("3").0;
    assert_quoted(&reply, -32601, Some(TEN_MB));
    assert_eq!(
        reply.error()["data"]["errorCode"],
        "TOOL_NOT_FOUND",
        "{}",
        reply.raw
    );
    p.finish();
}

/// serde's message for a rejected argument quotes the value: the reply quotes 256 bytes of
/// that message, still -32602 and still naming the argument.
#[test]
fn a_bad_argument_of_10_mb_is_quoted_short() {
    let mut p = Conn::spawn();
    p.invoke(4, "sleep", json!({ "ms": "x".repeat(TEN_MB) }));
    let reply = p.recv_until_id("4").0;
    assert_quoted(&reply, -32602, None);
    assert!(reply.error_message().contains("`ms`"), "{}", reply.raw);
    p.finish();
}

/// An id is echoed in its reply, so one too long to fit is refused (-32600, id null) rather
/// than echoed past the cap; 1 KiB ids are still echoed, in both request layouts.
#[test]
fn an_id_too_long_to_echo_is_refused() {
    let mut p = Conn::spawn();
    let long = format!("\"{}\"", "i".repeat(TEN_MB));
    for line in [
        format!(r#"{{"jsonrpc":"2.0","id":{long},"method":"health"}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":{long},"method":"invoke","params":{{"tool":"echo"}}}}"#),
    ] {
        p.send_line(&line);
        let reply = p.recv();
        assert_eq!(
            reply.raw_id().as_deref(),
            Some("null"),
            "{}",
            &reply.raw[..200]
        );
        assert_eq!(reply.error_code(), -32600);
        assert!(reply.raw.len() < 1024);
    }
    let id = format!("\"{}\"", "i".repeat(1022));
    p.send_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{"tool":"echo","arguments":{{"k":1}}}}}}"#
    ));
    assert_eq!(p.recv_until_id(&id).0.data(), &json!({ "k": 1 }));
    p.finish();
}

/// `describe`, `health` and a method not found are bounded too: a reply that would pass
/// the cap is replaced by a -32603 `RESULT_TOO_LARGE` error within it (here a 400-byte cap,
/// passed by a long description and a long health message).
#[test]
fn no_reply_of_any_kind_passes_the_cap() {
    let max = 400;
    let plugin = Plugin::new("bounds", "0.0.1")
        .description("d".repeat(1000))
        .options(Options {
            max_result_bytes: max,
            ..Options::default()
        })
        .health(|| Health::initializing("h".repeat(1000)))
        .tool(Tool::new("noop", "", |_: IgnoredAny, _: &Invocation| {
            Ok::<_, ToolError>(json!({}))
        }));
    let mut p = Conn::serve(plugin);
    p.request(1, "describe", None);
    p.request(2, "health", None);
    p.request(3, &"m".repeat(1000), None);
    p.invoke(4, "noop", json!({}));
    // Replies come in any order (requests run on several threads).
    let mut replies = std::collections::BTreeMap::new();
    for _ in 0..4 {
        let reply = p.recv();
        replies.insert(reply.raw_id().expect("a reply"), reply);
    }
    for (id, reply) in &replies {
        let size = reply.raw.len();
        assert!(size <= max, "{size} bytes: {}", reply.raw);
        match id.as_str() {
            "1" | "2" => {
                assert_eq!(reply.error_code(), -32603, "{}", reply.raw);
                assert_eq!(reply.error()["data"]["errorCode"], "RESULT_TOO_LARGE");
            }
            // The unknown name is quoted short enough to fit even this cap.
            "3" => assert_eq!(reply.error_code(), -32601, "{}", reply.raw),
            _ => assert_eq!(reply.data(), &json!({})),
        }
    }
    assert_eq!(replies.len(), 4, "{replies:?}");
    p.close_stdin();
    p.wait_stopped();
}

/// A quoted name is cut at a character boundary, never inside a multi-byte character.
#[test]
fn quoting_cuts_at_a_character_boundary() {
    let mut p = Conn::spawn();
    // 255 ASCII bytes, then 3-byte characters: byte 256 falls inside one.
    let name = format!("{}{}", "a".repeat(255), "€".repeat(100));
    p.request(5, &name, Some(Value::Null));
    let reply = p.recv_until_id("5").0;
    let message = reply.error_message();
    assert!(
        message.contains(&format!("{}… ({} bytes)", "a".repeat(255), name.len())),
        "{message}"
    );
    p.finish();
}
