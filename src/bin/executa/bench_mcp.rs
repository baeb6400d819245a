//! `executa bench` against an MCP stdio server: the handshake (`initialize` with a dated
//! revision, then `notifications/initialized`) or the stateless era's `server/discover`
//! and `_meta` envelope, `tools/list` made into the manifest the bench needs (tool names
//! and parameters for placeholder arguments), the `tools/call` frame (and its retry with
//! the input a stateless server asked for), the verdict on a result (`isError`), and the
//! answers to the server's own requests and input requests (`sampling/createMessage`
//! echoed in MCP's shape, `ping`, no roots, elicitation declined).

use std::borrow::Cow;

use executa::host::{
    MCP_PROPOSED, McpInputRequest, ReverseCall, Service, mcp_envelope, mcp_input_answer,
    mcp_input_required, mcp_sampling_params, mcp_sampling_result,
};
use executa::wire;
use executa::{Id, Manifest, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

/// The name the bench gives itself in `clientInfo`.
const CLIENT: &str = "executa-bench";

/// `initialize`'s params: `pinned`, else the revision the host proposes, and the sampling
/// capability (answered by echo).
pub fn initialize_params(pinned: Option<&str>) -> Value {
    json!({
        "protocolVersion": pinned.unwrap_or(MCP_PROPOSED),
        "capabilities": { "sampling": {} },
        "clientInfo": { "name": CLIENT, "version": env!("CARGO_PKG_VERSION") }
    })
}

/// The `_meta` envelope of the stateless era at `revision`: the bench declares sampling.
pub fn envelope(revision: &str) -> Value {
    mcp_envelope(revision, CLIENT, env!("CARGO_PKG_VERSION"), true)
}

/// The params of a request that carries nothing but the envelope (`server/discover`).
pub fn meta_params(revision: &str) -> Value {
    json!({ "_meta": envelope(revision) })
}

/// The notification that ends the handshake.
pub fn initialized_frame() -> Vec<u8> {
    let mut frame = Vec::with_capacity(64);
    wire::write_request(&mut frame, None, "notifications/initialized", &json!({}));
    frame
}

/// The manifest the bench reads (tool names, parameter lists for placeholder arguments),
/// made as the host makes it ([`executa::host::mcp_manifest`]) from the tools the pager
/// kept (each tool's text, within the host's caps on `tools/list`); the tools' text is
/// freed once the manifest is made.
pub fn manifest(init: &RawValue, tools: Vec<Box<RawValue>>) -> Result<Manifest, String> {
    executa::host::mcp_manifest(init, &tools).map_err(|e| e.to_string())
}

/// The `tools/call` frame after its id: `,"method":"tools/call","params":{...}}` and the
/// line end; `params` carries `meta` (the stateless era's envelope) as `_meta` when given.
pub fn call_tail(tool: &str, arguments: &Value, meta: Option<&Value>) -> Result<Vec<u8>, String> {
    let mut params = json!({ "name": tool, "arguments": arguments });
    if let Some(meta) = meta {
        params["_meta"] = meta.clone();
    }
    let params = serde_json::to_string(&params).map_err(|e| e.to_string())?;
    Ok(format!(",\"method\":\"tools/call\",\"params\":{params}}}\n").into_bytes())
}

/// A `tools/call` of the stateless era, sent again under `id` with the answers to the
/// input the server asked for (none when it asked only to wait) and its `requestState`,
/// byte for byte.
pub struct Retry<'a> {
    pub tool: &'a str,
    pub arguments: &'a Value,
    pub meta: &'a Value,
    pub answers: Option<Map<String, Value>>,
    pub state: Option<&'a RawValue>,
}

impl Retry<'_> {
    /// The whole frame, `{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{...}}`.
    pub fn frame(&self, id: u64) -> Result<Vec<u8>, String> {
        #[derive(Serialize)]
        struct Params<'a> {
            name: &'a str,
            arguments: &'a Value,
            #[serde(rename = "_meta")]
            meta: &'a Value,
            #[serde(rename = "inputResponses", skip_serializing_if = "Option::is_none")]
            answers: Option<&'a Map<String, Value>>,
            #[serde(rename = "requestState", skip_serializing_if = "Option::is_none")]
            state: Option<&'a RawValue>,
        }
        let params = Params {
            name: self.tool,
            arguments: self.arguments,
            meta: self.meta,
            answers: self.answers.as_ref(),
            state: self.state,
        };
        let params = serde_json::to_string(&params).map_err(|e| e.to_string())?;
        Ok(format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{params}}}\n"
        )
        .into_bytes())
    }
}

/// The answer to one input request of the stateless era, as `executa::host` answers it:
/// sampling as [`answer`] answers the handshake era's request, no roots, elicitation
/// declined.
pub fn input_answer(
    request: &McpInputRequest,
    sampler: Option<&dyn Service>,
) -> Result<Value, RpcError> {
    mcp_input_answer(request, |params| {
        let raw = serde_json::value::to_raw_value(params)
            .map_err(|e| RpcError::new(-32603, e.to_string()))?;
        let id = Id::string(&request.key);
        let answer = sampling_value(&raw, id.as_raw(), sampler)?;
        serde_json::from_str(answer.get()).map_err(|e| RpcError::new(-32603, e.to_string()))
    })
}

#[derive(Deserialize)]
struct CallResult<'a> {
    #[serde(default, rename = "isError")]
    is_error: bool,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// Why a `tools/call` result is a failure (`isError: true`, with its content), or `None`;
/// in the stateless era (`stateless`) also a result that still asks for input (its rounds
/// ran out) or that cannot be read as final.
pub fn failure(result: &RawValue, stateless: bool) -> Option<String> {
    if stateless {
        match mcp_input_required(result) {
            Ok(None) => {}
            Ok(Some(_)) => {
                return Some(format!(
                    "the server still asked for input after {} rounds (MCP_MAX_INPUT_ROUNDS)",
                    executa::host::MCP_MAX_INPUT_ROUNDS
                ));
            }
            Err(e) => return Some(e.to_string()),
        }
    }
    match serde_json::from_str::<CallResult>(result.get()) {
        Ok(r) if !r.is_error => None,
        Ok(r) => Some(format!(
            "isError: true: {}",
            r.content.map_or("", RawValue::get)
        )),
        Err(e) => Some(format!("not a tools/call result ({e}): {}", result.get())),
    }
}

/// The answer frame to one request from the server: `sampling/createMessage` echoes the
/// last user message's text in MCP's result shape (or, given `sampler`, is answered with
/// that service's text and model), `ping` gets `{}`, anything else -32601.
pub fn answer(
    id: &RawValue,
    method: &str,
    params: Option<&RawValue>,
    sampler: Option<&dyn Service>,
) -> Vec<u8> {
    let mut frame = Vec::with_capacity(256);
    let result = match method {
        "sampling/createMessage" => match params {
            Some(params) => sampling_value(params, id, sampler),
            None => Err(RpcError::new(
                -32602,
                "sampling/createMessage without params",
            )),
        },
        "ping" => serde_json::value::to_raw_value(&json!({}))
            .map_err(|e| RpcError::new(-32603, e.to_string())),
        _ => Err(RpcError::new(
            -32601,
            format!("executa bench answers no `{method}`"),
        )),
    };
    match result {
        Ok(raw) => wire::write_response(&mut frame, id, &raw),
        Err(e) => wire::write_error(&mut frame, id, &e),
    }
    frame
}

/// A sampling call's MCP result: the last user message's text echoed, or, given
/// `sampler`, that service's answer.
fn sampling_value(
    params: &RawValue,
    id: &RawValue,
    sampler: Option<&dyn Service>,
) -> Result<Box<RawValue>, RpcError> {
    match sampler {
        None => echo(Some(params)).and_then(|text| sampled(&text, "executa-bench-echo")),
        Some(service) => sample_with(service, id, params),
    }
}

/// MCP's sampling result: `{role: assistant, content: {type: text, text}, model,
/// stopReason: endTurn}`.
fn sampled(text: &str, model: &str) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(&Sampled {
        role: "assistant",
        content: Text { kind: "text", text },
        model,
        stop_reason: "endTurn",
    })
    .map_err(|e| RpcError::new(-32603, e.to_string()))
}

/// A sampling call answered by `service` (`--sampling-cmd`), its params and answer mapped
/// as `executa::host` maps them (a message's list of text blocks becomes one block). MCP
/// has no invoke: each call is its own for the service's per-invoke budgets.
fn sample_with(
    service: &dyn Service,
    id: &RawValue,
    params: &RawValue,
) -> Result<Box<RawValue>, RpcError> {
    let params: Value = serde_json::from_str(params.get()).unwrap_or_else(|_| json!({}));
    let call = ReverseCall {
        method: "sampling/createMessage".to_owned(),
        params: mcp_sampling_params(params),
        invoke_id: Some(format!("mcp-{}", id.get())),
        client_timeout: None,
        id: Id::from_raw(id),
    };
    let answer = mcp_sampling_result(&service.call(&call)?)?;
    serde_json::value::to_raw_value(&answer).map_err(|e| RpcError::new(-32603, e.to_string()))
}

#[derive(Deserialize)]
struct CreateMessage<'a> {
    #[serde(borrow)]
    messages: Vec<Message<'a>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow)]
    content: Content<'a>,
}

/// A message's content: one block, or (from the 2025-11-25 revision on) a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum Content<'a> {
    One(#[serde(borrow)] Block<'a>),
    Many(#[serde(borrow)] Vec<Block<'a>>),
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// The text of the last user message (its text blocks joined).
fn echo(params: Option<&RawValue>) -> Result<String, RpcError> {
    let p: CreateMessage = params
        .ok_or_else(|| RpcError::new(-32602, "sampling/createMessage without params"))
        .and_then(|p| {
            serde_json::from_str(p.get()).map_err(|e| RpcError::new(-32602, e.to_string()))
        })?;
    let last = p
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .ok_or_else(|| RpcError::new(-32602, "no user message to answer"))?;
    Ok(match &last.content {
        Content::One(b) => b.text.as_deref().unwrap_or("").to_owned(),
        Content::Many(blocks) => blocks.iter().filter_map(|b| b.text.as_deref()).collect(),
    })
}

#[derive(Serialize)]
struct Sampled<'a> {
    role: &'a str,
    content: Text<'a>,
    model: &'a str,
    #[serde(rename = "stopReason")]
    stop_reason: &'a str,
}

#[derive(Serialize)]
struct Text<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    text: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).unwrap()
    }

    /// The host's manifest of an MCP server gives the placeholder synthesis what it reads:
    /// required properties, `$ref`s, `Optional` types and defaults.
    #[test]
    fn placeholders_come_from_input_schemas() {
        let tools = vec![raw(json!({
            "name": "order",
            "inputSchema": {
                "type": "object",
                "$defs": {"Item": {"type": "object", "properties": {
                    "qty": {"type": "integer"}, "note": {"type": "string"}},
                    "required": ["qty"]}},
                "properties": {
                    "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                    "speed": {"type": "string", "enum": ["normal", "express"]},
                    "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 3},
                    "note": {"type": "string"}
                },
                "required": ["items", "speed"]
            }
        }))];
        let init = raw(json!({"protocolVersion": MCP_PROPOSED, "serverInfo": {"name": "py"}}));
        let m = manifest(&init, tools).unwrap();
        assert_eq!((m.name.as_str(), m.tools[0].name.as_str()), ("py", "order"));
        assert_eq!(
            executa::host::sample_arguments(&m.tools[0]),
            json!({"items": [{"qty": 1}], "speed": "normal", "limit": 3})
        );
    }

    #[test]
    fn sampling_is_echoed_in_mcp_shape_and_ping_answered() {
        let id = raw(json!(7));
        let params = raw(json!({"messages": [
            {"role": "user", "content": {"type": "text", "text": "first"}},
            {"role": "assistant", "content": {"type": "text", "text": "no"}},
            {"role": "user", "content": [{"type": "text", "text": "la"}, {"type": "text", "text": "st"}]}
        ], "maxTokens": 5}));
        let frame = answer(&id, "sampling/createMessage", Some(&params), None);
        let v: Value = serde_json::from_slice(&frame).unwrap();
        assert_eq!(
            v["result"],
            json!({"role": "assistant", "content": {"type": "text", "text": "last"},
                   "model": "executa-bench-echo", "stopReason": "endTurn"})
        );
        assert_eq!(v["id"], 7);
        let v: Value = serde_json::from_slice(&answer(&id, "ping", None, None)).unwrap();
        assert_eq!(v["result"], json!({}));
        let v: Value = serde_json::from_slice(&answer(&id, "roots/list", None, None)).unwrap();
        assert_eq!(v["error"]["code"], -32601);
    }

    #[test]
    fn is_error_results_are_failures() {
        assert_eq!(
            failure(&raw(json!({"content": [], "isError": false})), false),
            None
        );
        assert_eq!(failure(&raw(json!({"content": []})), false), None);
        let why = failure(
            &raw(json!({"content": [{"type": "text", "text": "boom"}], "isError": true})),
            true,
        );
        assert!(why.is_some_and(|w| w.contains("boom")));
        let asking = raw(json!({"resultType": "input_required", "requestState": "s"}));
        assert_eq!(failure(&asking, false), None, "the handshake era's rule");
        let why = failure(&asking, true);
        assert!(why.is_some_and(|w| w.contains("MCP_MAX_INPUT_ROUNDS")));
    }
}
