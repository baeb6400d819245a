//! One `tools/call`: its reply in MCP's shape, its progress as `notifications/progress`,
//! and which calls back to the client it may make.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::{RpcError, codes};
use crate::protocol::{family, gate};
use crate::wire;

/// The MCP side of one `tools/call`, carried by its invoke.
#[derive(Debug, Default)]
pub(crate) struct Call {
    /// `_meta.progressToken`, as raw JSON text: progress goes out only with one.
    pub progress_token: Option<Box<str>>,
    /// The call's place among those in flight (a cancellation may name it), set by the
    /// reader; taken out for the reply, which it decides on (`dispatch.rs`).
    pub seen: Option<super::Seen>,
}

impl Call {
    /// The call whose params carried `meta` (`_meta`, raw), if any.
    pub fn new(meta: Option<&str>) -> Call {
        #[derive(Deserialize)]
        struct Meta<'a> {
            #[serde(rename = "progressToken", borrow)]
            progress_token: Option<&'a RawValue>,
        }
        // The spec's token is a string or an integer: anything else sends no progress.
        // It is echoed byte for byte as received (a number past u64 read as a float
        // would come back as `1e+30`); a string's or a number's text is one line.
        let token = meta
            .and_then(|m| serde_json::from_str::<Meta<'_>>(m).ok())
            .and_then(|m| m.progress_token)
            .map(RawValue::get)
            .filter(|t| {
                t.starts_with('"')
                    || t.starts_with('-')
                    || t.starts_with(|c: char| c.is_ascii_digit())
            })
            .map(Into::into);
        Call {
            progress_token: token,
            seen: None,
        }
    }
}

/// Turns a handler's data, written in `frame` from `data_at` on, into a `CallToolResult`
/// and ends the frame: a `text` block with the JSON (a string result: its text), and the
/// value itself as `structuredContent` when it is an object.
pub(crate) fn finish(frame: &mut Vec<u8>, data_at: usize) {
    let data = frame.split_off(data_at);
    frame.extend_from_slice(br#"{"content":[{"type":"text","text":"#);
    if data.first() == Some(&b'"') {
        // Already a JSON string: its text is the block's text.
        frame.extend_from_slice(&data);
    } else {
        let text = std::str::from_utf8(&data).unwrap_or("null");
        wire::serialize_into(frame, text);
    }
    frame.extend_from_slice(b"}]");
    if data.first() == Some(&b'{') {
        frame.extend_from_slice(br#","structuredContent":"#);
        frame.extend_from_slice(&data);
    }
    frame.extend_from_slice(b"}}\n");
}

/// A failed `tools/call` as MCP wants tool failures: a result with `isError: true` and the
/// message as text (the model reads it and may correct itself), `details` as a second
/// block of JSON.
pub(crate) fn tool_error(frame: &mut Vec<u8>, id: &[u8], message: &str, details: Option<&Value>) {
    #[derive(serde::Serialize)]
    struct Block<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        text: &'a str,
    }
    #[derive(serde::Serialize)]
    struct Failed<'a> {
        content: Vec<Block<'a>>,
        #[serde(rename = "isError")]
        is_error: bool,
    }
    let details = details.map(wire::json_text);
    let mut content = vec![Block {
        kind: "text",
        text: message,
    }];
    if let Some(d) = &details {
        content.push(Block {
            kind: "text",
            text: d,
        });
    }
    let body = Failed {
        content,
        is_error: true,
    };
    wire::write_result(frame, id, &body);
}

/// The params of a `notifications/progress` for `ctx.progress(kind, data)`: `progress` is
/// `data.progress` (or `data.step`) when it is a number above the last one sent, else one
/// more than the last (MCP wants it to increase); `total` is `data.total` (or `data.of`)
/// when a number; `message` is `data.message` when a string, else `kind`.
pub(crate) fn progress_params(token: &str, kind: &str, data: &Value, last: &mut f64) -> Vec<u8> {
    let number = |keys: [&str; 2]| {
        keys.iter()
            .find_map(|k| data.get(*k).filter(|v| v.is_number()))
    };
    let given = number(["progress", "step"]).and_then(Value::as_f64);
    let progress = match given {
        Some(p) if p > *last => p,
        _ => *last + 1.0,
    };
    *last = progress;
    let mut body = Vec::with_capacity(128);
    body.extend_from_slice(br#"{"progressToken":"#);
    body.extend_from_slice(token.as_bytes());
    body.extend_from_slice(br#","progress":"#);
    wire::serialize_into(&mut body, &progress);
    if let Some(total) = number(["total", "of"]) {
        body.extend_from_slice(br#","total":"#);
        wire::serialize_into(&mut body, total);
    }
    body.extend_from_slice(br#","message":"#);
    let message = data.get("message").and_then(Value::as_str).unwrap_or(kind);
    wire::serialize_into(&mut body, message);
    body.push(b'}');
    body
}

/// Whether a handler serving an MCP client may call `method` on it. Sampling needs the
/// manifest's `llm.sample` (as for Executa) and the client's `sampling` capability; the
/// Executa-only families (storage, files, agents) have no MCP counterpart and are refused
/// with their usual codes and a message that says so. Other methods go to the client,
/// which answers them or says it does not know them.
pub(crate) fn reverse_gate(
    method: &str,
    declared: &[String],
    client_samples: bool,
) -> Result<(), RpcError> {
    let Some((prefix, code, symbol)) = family(method) else {
        return Ok(());
    };
    if prefix != "sampling/" {
        let family = prefix.trim_end_matches('/');
        let msg = format!(
            "`{method}` has no counterpart in MCP: this plugin is serving an MCP client, \
             which offers sampling but no Executa `{family}` calls"
        );
        return Err(RpcError::with_code(code, symbol, msg));
    }
    gate(method, declared, true)?;
    if !client_samples {
        let msg = format!(
            "`{method}` is unavailable: the MCP client did not declare the `sampling` \
             capability in `initialize`"
        );
        return Err(RpcError::with_code(
            codes::SAMPLING_NOT_NEGOTIATED,
            "NOT_NEGOTIATED",
            msg,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result_of(data: &str) -> Value {
        let mut frame = br#"{"jsonrpc":"2.0","id":1,"result":"#.to_vec();
        let at = frame.len();
        frame.extend_from_slice(data.as_bytes());
        finish(&mut frame, at);
        assert_eq!(frame.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&frame).expect("one JSON frame");
        v["result"].clone()
    }

    #[test]
    fn results_become_text_and_structured_content() {
        assert_eq!(
            result_of(r#"{"a":1,"s":"x\"y"}"#),
            json!({"content": [{"type": "text", "text": r#"{"a":1,"s":"x\"y"}"#}],
                   "structuredContent": {"a": 1, "s": "x\"y"}})
        );
        assert_eq!(
            result_of(r#""Hello, \"Ada\"""#),
            json!({"content": [{"type": "text", "text": "Hello, \"Ada\""}]})
        );
        assert_eq!(
            result_of("[1,2]"),
            json!({"content": [{"type": "text", "text": "[1,2]"}]})
        );
    }

    #[test]
    fn a_progress_token_is_a_string_or_a_number_echoed_byte_for_byte() {
        let token = |meta: &str| {
            let raw = serde_json::from_str::<&RawValue>(meta).expect("raw");
            Call::new(Some(raw.get())).progress_token.map(String::from)
        };
        assert_eq!(
            token(r#"{"progressToken": "ab"}"#).as_deref(),
            Some("\"ab\"")
        );
        assert_eq!(token(r#"{"progressToken": 7}"#).as_deref(), Some("7"));
        // Past u64, and escapes, as received (issue 38: `1e+30` came back).
        let big = "1000000000000000000000000000000";
        assert_eq!(
            token(&format!(r#"{{"progressToken": {big}}}"#)).as_deref(),
            Some(big)
        );
        assert_eq!(
            token(r#"{"progressToken": "ab"}"#).as_deref(),
            Some(r#""ab""#)
        );
        assert_eq!(token("{\"progressToken\": [1,\r\t2]}"), None);
        assert_eq!(token(r#"{"progressToken": null}"#), None);
        assert_eq!(token(r#"{"other": 1}"#), None);
    }

    #[test]
    fn progress_always_increases() {
        let mut last = 0.0;
        let p = |data: Value, last: &mut f64| -> Value {
            serde_json::from_slice(&progress_params("\"t\"", "step", &data, last)).expect("json")
        };
        assert_eq!(
            p(
                json!({"progress": 5, "total": 10, "message": "half"}),
                &mut last
            ),
            json!({"progressToken": "t", "progress": 5.0, "total": 10, "message": "half"})
        );
        assert_eq!(p(json!({"progress": 3}), &mut last)["progress"], 6.0);
        assert_eq!(
            p(json!({"step": 9, "of": 12}), &mut last),
            json!({"progressToken": "t", "progress": 9.0, "total": 12, "message": "step"})
        );
        assert_eq!(
            p(json!("anything"), &mut last),
            json!({"progressToken": "t", "progress": 10.0, "message": "step"})
        );
    }

    #[test]
    fn only_sampling_reaches_an_mcp_client_and_only_when_it_samples() {
        let caps = vec!["llm.sample".to_owned(), "aps.kv".to_owned()];
        assert!(reverse_gate("sampling/createMessage", &caps, true).is_ok());
        let e = reverse_gate("sampling/createMessage", &caps, false).expect_err("refused");
        assert!(
            e.message
                .contains("did not declare the `sampling` capability"),
            "{}",
            e.message
        );
        let e = reverse_gate("sampling/createMessage", &[], true).expect_err("refused");
        assert!(e.message.contains("llm.sample"), "{}", e.message);
        let e = reverse_gate("storage/get", &caps, true).expect_err("refused");
        assert_eq!(e.code, codes::STORAGE_NOT_GRANTED);
        assert!(e.message.contains("no counterpart in MCP"), "{}", e.message);
        assert!(reverse_gate("roots/list", &caps, true).is_ok());
    }
}
