//! One `tools/call`: its reply in MCP's shape, its progress as `notifications/progress`,
//! and which calls back to the client it may make.

use serde_json::Value;

use crate::error::{RpcError, codes};
use crate::protocol::{family, gate};
use crate::wire;

use super::era::Meta;

/// The MCP side of one `tools/call`, carried by its invoke.
#[derive(Debug, Default)]
pub(crate) struct Call {
    /// `_meta.progressToken`, as raw JSON text: progress goes out only with one.
    pub progress_token: Option<Box<str>>,
    /// The call's place among those in flight (a cancellation may name it), set by the
    /// reader; taken out for the reply, which it decides on (`dispatch.rs`).
    pub seen: Option<super::Seen>,
    /// Set for a 2026-07-28 call (by the reader): served without a session, its calls to
    /// the client become input requests (`input.rs`).
    pub stateless: Option<super::input::Stateless>,
}

impl Call {
    /// The call whose params carried `meta` (`_meta`, read).
    #[cfg(test)]
    pub fn new(meta: &Meta<'_>) -> Call {
        let mut call = Call::default();
        call.read(meta);
        call
    }

    /// Fills an empty call (`Call::default()`) with what the params' `_meta` says.
    pub fn read(&mut self, meta: &Meta<'_>) {
        // The spec's token is a string or an integer: anything else sends no progress.
        // It is echoed byte for byte as received (a number past u64 read as a float
        // would come back as `1e+30`); a string's or a number's text is one line.
        self.progress_token = meta
            .progress_token
            .filter(|t| {
                t.starts_with('"')
                    || t.starts_with('-')
                    || t.starts_with(|c: char| c.is_ascii_digit())
            })
            .map(Into::into);
    }

    /// Whether the call is a 2026-07-28 one, whose results say `resultType`.
    pub fn is_stateless(&self) -> bool {
        self.stateless.is_some()
    }
}

/// What comes before a handler's data in a `tools/call` reply, after the id: the data is
/// `structuredContent` when it is an object, the common case, which then stays where the
/// handler wrote it ([`finish`]).
pub(crate) const RESULT_HEAD: &[u8] = br#","result":{"structuredContent":"#;
const STRUCTURED: usize = br#""structuredContent":"#.len();

/// Turns a handler's data, written in `frame` from `data_at` on, behind [`RESULT_HEAD`],
/// into a `CallToolResult` and ends the frame: the value itself as `structuredContent`
/// when it is an object, and a `text` block with the JSON (a string result: its text).
///
/// Built in the frame itself, with no second buffer (the hot path of `tools/call`): an
/// object stays in place and its text block is written after it; any other value is
/// replaced by its text block, moved down over it. Each piece is one constant.
pub(crate) fn finish(frame: &mut Vec<u8>, data_at: usize, stateless: bool) {
    let end = frame.len();
    let first = frame.get(data_at).copied();
    let structured = first == Some(b'{');
    frame.extend_from_slice(match structured {
        true => br#","content":[{"type":"text","text":"#,
        false => br#""content":[{"type":"text","text":"#,
    });
    if first == Some(b'"') {
        // Already a JSON string: its text is the block's text.
        frame.extend_from_within(data_at..end);
    } else {
        escape_in_place(frame, data_at..end);
    }
    frame.extend_from_slice(match stateless {
        true => b"}],\"resultType\":\"complete\"}}\n",
        false => b"}]}}\n",
    });
    if !structured {
        // `"structuredContent":` and the data give way to what was written after them.
        frame.drain(data_at - STRUCTURED..end);
    }
}

/// Appends the JSON text at `json` (a range of `frame`) to `frame` as a JSON string. Valid
/// JSON text holds control characters only as white space (its strings escape theirs) and
/// no invalid UTF-8; where there is white space, the general escaper writes it. Otherwise
/// only `"` and `\` need a backslash: the string is written in one pass into room made
/// for the worst case (every byte escaped), then cut to length.
fn escape_in_place(frame: &mut Vec<u8>, json: std::ops::Range<usize>) {
    let start = frame.len();
    frame.resize(start + 2 * json.len() + 2, b'"');
    let (head, tail) = frame.split_at_mut(start + 1);
    let mut len = 0;
    for &b in &head[json.clone()] {
        if b < 0x20 {
            frame.truncate(start);
            let text = String::from_utf8_lossy(&frame[json]).into_owned();
            return crate::json_text::write_str(frame, &text);
        }
        if b == b'"' || b == b'\\' {
            tail[len] = b'\\';
            len += 1;
        }
        tail[len] = b;
        len += 1;
    }
    // The closing quote is the room's first byte after the text.
    frame.truncate(start + len + 2);
}

/// A failed `tools/call` as MCP wants tool failures: a result with `isError: true` and the
/// message as text (the model reads it and may correct itself), `details` as a second
/// block of JSON.
pub(crate) fn tool_error(
    frame: &mut Vec<u8>,
    id: &[u8],
    message: &str,
    details: Option<&Value>,
    stateless: bool,
) {
    #[derive(serde::Serialize)]
    struct Block<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        text: &'a str,
    }
    #[derive(serde::Serialize)]
    struct Failed<'a> {
        #[serde(rename = "resultType", skip_serializing_if = "Option::is_none")]
        result_type: Option<&'static str>,
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
        result_type: stateless.then_some("complete"),
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
    use serde_json::value::RawValue;

    fn result_of(data: &str) -> Value {
        let mut frame = br#"{"jsonrpc":"2.0","id":1"#.to_vec();
        frame.extend_from_slice(RESULT_HEAD);
        let at = frame.len();
        frame.extend_from_slice(data.as_bytes());
        finish(&mut frame, at, false);
        assert_eq!(frame.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&frame).expect("one JSON frame");
        v["result"].clone()
    }

    #[test]
    fn the_text_block_is_the_data_escaped_as_serde_would() {
        for data in [
            r#"{"a":"x\"y\\z","b":[1,{"c":null}],"d":"\u0001é"}"#,
            "{ \"a\" :\t1 }",
            "[]",
            "12.5",
            "true",
        ] {
            let r = result_of(data);
            assert_eq!(r["content"][0]["text"], data, "{data}");
            let value: Value = serde_json::from_str(data).expect("data");
            match value.is_object() {
                true => assert_eq!(r["structuredContent"], value),
                false => assert!(r.get("structuredContent").is_none()),
            }
        }
        let mut frame = br#"{"jsonrpc":"2.0","id":1"#.to_vec();
        frame.extend_from_slice(RESULT_HEAD);
        let at = frame.len();
        frame.extend_from_slice(br#"{"k":1}"#);
        finish(&mut frame, at, true);
        let v: Value = serde_json::from_slice(&frame).expect("one frame");
        assert_eq!(v["result"]["resultType"], "complete");
        assert_eq!(v["result"]["structuredContent"], json!({"k": 1}));
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
            Call::new(&Meta::read(Some(raw.get())))
                .progress_token
                .map(String::from)
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
