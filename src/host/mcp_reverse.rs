//! What an MCP server sends its host unasked, read into the host's own vocabulary: its
//! `sampling/createMessage` as the [`ReverseCall`] the host's sampling handler reads and
//! the handler's answer as the MCP result, and its `notifications/progress` as the host's
//! [`Progress`] events. The requests arrive and are answered exactly as an Executa
//! plugin's reverse calls are (`reader.rs`, `dispatch.rs`: bounded queue, worker pool, one
//! answer each); only the method table (`dispatch.rs`) and the shapes (here) differ.

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::service::{Progress, ReverseCall};
use super::shared::Shared;
use crate::error::{RpcError, codes};
use crate::id::Id;
use crate::lock::lock;

/// The one reverse method the two protocols share.
pub(crate) const SAMPLING: &str = "sampling/createMessage";

/// The handler's view of an MCP `sampling/createMessage`: the params in the Executa
/// shape (see [`to_executa`]) and the invoke it belongs to, when only one is in flight.
pub(super) fn sampling_call(shared: &Shared, params: Option<&RawValue>, id: &Id) -> ReverseCall {
    let params: Value = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null);
    ReverseCall {
        method: SAMPLING.to_owned(),
        params: to_executa(params),
        invoke_id: sole_invoke(shared),
        client_timeout: None,
        id: id.clone(),
    }
}

/// The answer to an MCP request the host does not serve (-32601).
pub(super) fn not_served(method: &str) -> RpcError {
    RpcError::with_code(
        codes::METHOD_NOT_FOUND,
        "METHOD_NOT_FOUND",
        format!("the host does not serve the MCP method `{method}`"),
    )
}

/// The invoke a request belongs to, when only one is in flight (an MCP request does not
/// say; with several in flight it is `None`).
fn sole_invoke(shared: &Shared) -> Option<String> {
    let active = lock(&shared.invokes);
    match active.len() {
        1 => active.keys().next().cloned(),
        _ => None,
    }
}

/// MCP `sampling/createMessage` params in the Executa shape the sampling handlers read
/// (public as `executa::host::mcp_sampling_params`, for drivers that own the pipes).
/// The two are the same (`messages`, `maxTokens`, `systemPrompt`, `temperature`,
/// `stopSequences`, `modelPreferences`, `includeContext`, `metadata`) except that MCP
/// lets a message's `content` be a list of blocks: a list of text blocks becomes one
/// text block (any other list is left for the handler to refuse), and `_meta` goes.
pub fn to_executa(params: Value) -> Value {
    let Value::Object(mut map) = params else {
        return params;
    };
    map.remove("_meta");
    if let Some(Value::Array(messages)) = map.get_mut("messages") {
        for content in messages.iter_mut().filter_map(|m| m.get_mut("content")) {
            if let Some(text) = content.as_array().and_then(|blocks| joined_text(blocks)) {
                *content = json!({ "type": "text", "text": text });
            }
        }
    }
    Value::Object(map)
}

/// The text of a list of blocks, when every one is a text block.
fn joined_text(blocks: &[Value]) -> Option<String> {
    let texts = blocks
        .iter()
        .map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => b.get("text").and_then(Value::as_str),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some(texts.join("\n"))
}

/// A sampling handler's answer (the Executa result shape) as the MCP result:
/// `{role, content: {type: "text", text}, model, stopReason?}`; the Executa extras
/// (`usage`, `_meta`) stay home. An answer without text is -32603. (Public as
/// `executa::host::mcp_sampling_result`.)
pub fn sampling_result(answer: &Value) -> Result<Value, RpcError> {
    let content = answer.get("content");
    let text = content
        .and_then(|c| c.get("text"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            content
                .and_then(Value::as_array)
                .and_then(|b| joined_text(b))
        });
    let Some(text) = text else {
        return Err(RpcError::new(
            codes::INTERNAL_ERROR,
            "the host's sampling handler answered without text content",
        ));
    };
    let role = answer
        .get("role")
        .and_then(Value::as_str)
        .filter(|r| matches!(*r, "user" | "assistant"))
        .unwrap_or("assistant");
    let mut out = Map::new();
    out.insert("role".into(), role.into());
    out.insert("content".into(), json!({ "type": "text", "text": text }));
    let model = answer.get("model").and_then(Value::as_str);
    out.insert("model".into(), model.unwrap_or("unknown").into());
    if let Some(reason) = answer.get("stopReason").filter(|r| r.is_string()) {
        out.insert("stopReason".into(), reason.clone());
    }
    Ok(Value::Object(out))
}

/// An MCP `notifications/progress` as a [`Progress`] event: the `progressToken` (the
/// host sends the invoke id) is its `invoke_id`, and `data` holds `progress`, `total`
/// and `message` as the server sent them.
pub(super) fn progress_event(shared: &Shared, params: Option<&RawValue>) -> Progress {
    let mut params: Value = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or(Value::Null);
    let token = match params.get("progressToken") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    if let Value::Object(map) = &mut params {
        map.remove("progressToken");
        map.remove("_meta");
    }
    let active = token.as_ref().is_some_and(|id| shared.invoke_active(id));
    Progress {
        invoke_id: token,
        kind: "progress".to_owned(),
        data: params,
        active,
        plugin: shared.label.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_sampling_params_reach_the_handler_in_the_executa_shape() {
        let p = to_executa(json!({
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "a"}},
                {"role": "user", "content": [{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]},
                {"role": "user", "content": [{"type": "image", "data": "AA=="}]},
            ],
            "maxTokens": 5,
            "_meta": {"x": 1},
        }));
        assert_eq!(p["messages"][0]["content"]["text"], "a");
        assert_eq!(
            p["messages"][1]["content"],
            json!({"type": "text", "text": "b\nc"})
        );
        assert!(
            p["messages"][2]["content"].is_array(),
            "left for the handler"
        );
        assert_eq!(p["maxTokens"], 5);
        assert!(p.get("_meta").is_none());
    }

    #[test]
    fn a_handler_answer_becomes_the_mcp_result() {
        let answer = json!({
            "role": "assistant", "content": {"type": "text", "text": "hi"},
            "model": "m", "stopReason": "endTurn", "usage": {"totalTokens": 3},
        });
        assert_eq!(
            sampling_result(&answer).expect("text"),
            json!({"role": "assistant", "content": {"type": "text", "text": "hi"},
                   "model": "m", "stopReason": "endTurn"})
        );
        let bare = sampling_result(&json!({"content": [{"type": "text", "text": "x"}]}));
        assert_eq!(
            bare.expect("text"),
            json!({"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "unknown"})
        );
        let e = sampling_result(&json!({"content": {"type": "image"}})).expect_err("no text");
        assert_eq!(e.code, codes::INTERNAL_ERROR);
    }
}
