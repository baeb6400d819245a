//! `executa bench` against an MCP stdio server: the handshake (`initialize` with a dated
//! revision, then `notifications/initialized`), `tools/list` made into the manifest the
//! bench needs (tool names and parameters for placeholder arguments), the `tools/call`
//! frame, the verdict on a result (`isError`), and the answers to the server's own
//! requests (`sampling/createMessage` echoed in MCP's shape, `ping`).

use std::borrow::Cow;

use executa::manifest::ToolSpec;
use executa::wire;
use executa::{Manifest, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

/// The revision the bench asks for.
pub const REVISION: &str = "2025-11-25";
/// The revisions it speaks when a server answers with another one.
pub const ACCEPTED: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", REVISION];

/// `initialize`'s params: the revision, the sampling capability (answered by echo).
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": REVISION,
        "capabilities": { "sampling": {} },
        "clientInfo": { "name": "executa-bench", "version": env!("CARGO_PKG_VERSION") }
    })
}

/// Whether `version` is a dated MCP revision (`YYYY-MM-DD`); Executa's are `2.0`/`1.1`.
fn is_dated(version: &str) -> bool {
    let b = version.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

#[derive(Deserialize)]
struct InitializeResult {
    #[serde(default, rename = "protocolVersion")]
    protocol_version: Option<String>,
    #[serde(default, rename = "serverInfo")]
    server_info: Option<ServerInfo>,
}

#[derive(Deserialize, Default)]
struct ServerInfo {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
}

/// The MCP revision an `initialize` result names: `Ok(None)` when it names no dated one
/// (an Executa plugin's answer), an error when it is dated but not one the bench speaks.
pub fn revision(result: &RawValue) -> Result<Option<String>, String> {
    let r: InitializeResult = serde_json::from_str(result.get())
        .map_err(|e| format!("unreadable initialize result ({e}): {}", result.get()))?;
    match r.protocol_version {
        Some(v) if is_dated(&v) && ACCEPTED.contains(&v.as_str()) => Ok(Some(v)),
        Some(v) if is_dated(&v) => Err(format!(
            "the server answered MCP revision {v}; executa bench speaks {}",
            ACCEPTED.join(", ")
        )),
        _ => Ok(None),
    }
}

/// The notification that ends the handshake.
pub fn initialized_frame() -> Vec<u8> {
    let mut frame = Vec::with_capacity(64);
    wire::write_request(&mut frame, None, "notifications/initialized", &json!({}));
    frame
}

/// One page of `tools/list`.
#[derive(Deserialize)]
pub struct ToolsPage {
    #[serde(default)]
    pub tools: Vec<Value>,
    #[serde(default, rename = "nextCursor")]
    pub next_cursor: Option<String>,
}

/// The manifest the bench reads: the server's name and version, and per tool its name,
/// description and parameters (the `inputSchema` as Executa's parameter list, enough for
/// placeholder arguments).
pub fn manifest(init: &RawValue, tools: &[Value]) -> Manifest {
    let info = serde_json::from_str::<InitializeResult>(init.get())
        .ok()
        .and_then(|r| r.server_info)
        .unwrap_or_default();
    Manifest {
        name: info.name,
        version: info.version,
        tools: tools
            .iter()
            .map(|t| ToolSpec {
                name: text(t, "name"),
                description: text(t, "description"),
                parameters: t.get("inputSchema").map_or(json!([]), parameters),
                ..ToolSpec::default()
            })
            .collect(),
        ..Manifest::default()
    }
}

fn text(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_owned()
}

/// A JSON Schema object's `properties` as a parameter list: each with its name and
/// whether it is required, its schema otherwise kept (nested schemas resolved the same
/// way), which is what [`executa::host::sample_arguments`] reads.
fn parameters(schema: &Value) -> Value {
    let required = required_names(schema);
    let list = schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, prop)| {
            let mut p = match plain(prop, schema, 0) {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            p.insert("name".into(), json!(name));
            p.insert("required".into(), json!(required.contains(&name.as_str())));
            Value::Object(p)
        })
        .collect();
    Value::Array(list)
}

fn required_names(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `schema` with what the placeholder synthesis does not read made plain: a local `$ref`
/// (`#/$defs/X`, as Pydantic writes nested models) replaced by its target, a `type` list
/// or an `anyOf` reduced to its first non-null type; nested `properties` and `items` the
/// same. `root` is the document `$ref`s point into; past 16 levels a schema is left as
/// it is.
fn plain(schema: &Value, root: &Value, depth: usize) -> Value {
    if depth > 16 {
        return schema.clone();
    }
    if let Some(target) = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|pointer| root.pointer(pointer))
    {
        return plain(target, root, depth + 1);
    }
    let Some(map) = schema.as_object() else {
        return schema.clone();
    };
    if let Some(first) = map.get("anyOf").and_then(Value::as_array).and_then(|alts| {
        alts.iter()
            .find(|a| a.get("type").and_then(Value::as_str) != Some("null"))
    }) {
        let mut merged = plain(first, root, depth + 1);
        if let (Value::Object(m), Some(d)) = (&mut merged, map.get("default")) {
            m.insert("default".into(), d.clone());
        }
        return merged;
    }
    let mut out = map.clone();
    if let Some(Value::Array(types)) = map.get("type")
        && let Some(t) = types.iter().find(|t| t.as_str() != Some("null"))
    {
        out.insert("type".into(), t.clone());
    }
    if let Some(items) = map.get("items") {
        out.insert("items".into(), plain(items, root, depth + 1));
    }
    if let Some(Value::Object(props)) = map.get("properties") {
        let props = props
            .iter()
            .map(|(k, v)| (k.clone(), plain(v, root, depth + 1)))
            .collect();
        out.insert("properties".into(), Value::Object(props));
    }
    Value::Object(out)
}

/// The `tools/call` frame after its id: `,"method":"tools/call","params":{...}}` and the
/// line end.
pub fn call_tail(tool: &str, arguments: &Value) -> Result<Vec<u8>, String> {
    let params = json!({ "name": tool, "arguments": arguments });
    let params = serde_json::to_string(&params).map_err(|e| e.to_string())?;
    Ok(format!(",\"method\":\"tools/call\",\"params\":{params}}}\n").into_bytes())
}

#[derive(Deserialize)]
struct CallResult<'a> {
    #[serde(default, rename = "isError")]
    is_error: bool,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// Why a `tools/call` result is a failure (`isError: true`, with its content), or `None`.
pub fn failure(result: &RawValue) -> Option<String> {
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
/// last user message's text in MCP's result shape, `ping` gets `{}`, anything else -32601.
pub fn answer(id: &RawValue, method: &str, params: Option<&RawValue>) -> Vec<u8> {
    let mut frame = Vec::with_capacity(256);
    let result = match method {
        "sampling/createMessage" => echo(params).and_then(|text| {
            serde_json::value::to_raw_value(&Sampled {
                role: "assistant",
                content: Text {
                    kind: "text",
                    text: &text,
                },
                model: "executa-bench-echo",
                stop_reason: "endTurn",
            })
            .map_err(|e| RpcError::new(-32603, e.to_string()))
        }),
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

    #[test]
    fn dated_revisions_are_mcp_and_only_known_ones_are_spoken() {
        for v in ACCEPTED {
            assert_eq!(
                revision(&raw(json!({"protocolVersion": v}))).unwrap(),
                Some(v.to_owned())
            );
        }
        assert!(revision(&raw(json!({"protocolVersion": "2099-01-01"}))).is_err());
        for executa in [json!({"protocolVersion": "2.0"}), json!({})] {
            assert_eq!(revision(&raw(executa)).unwrap(), None);
        }
    }

    #[test]
    fn input_schemas_become_parameter_lists_for_placeholders() {
        let tools = [json!({
            "name": "order",
            "description": "places one",
            "inputSchema": {
                "type": "object",
                "$defs": {"Item": {"type": "object", "properties": {
                    "qty": {"type": "integer"}, "note": {"type": "string"}},
                    "required": ["qty"]}},
                "properties": {
                    "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
                    "speed": {"type": "string", "enum": ["normal", "express"]},
                    "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 3},
                    "tag": {"type": ["string", "null"]},
                    "note": {"type": "string"}
                },
                "required": ["items", "speed", "tag"]
            }
        })];
        let init = raw(json!({"serverInfo": {"name": "py", "version": "1.0"}}));
        let m = manifest(&init, &tools);
        assert_eq!((m.name.as_str(), m.version.as_str()), ("py", "1.0"));
        assert_eq!(m.tools[0].name, "order");
        assert_eq!(
            executa::host::sample_arguments(&m.tools[0]),
            json!({"items": [{"qty": 1}], "speed": "normal", "limit": 3, "tag": "ping"})
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
        let frame = answer(&id, "sampling/createMessage", Some(&params));
        let v: Value = serde_json::from_slice(&frame).unwrap();
        assert_eq!(
            v["result"],
            json!({"role": "assistant", "content": {"type": "text", "text": "last"},
                   "model": "executa-bench-echo", "stopReason": "endTurn"})
        );
        assert_eq!(v["id"], 7);
        let v: Value = serde_json::from_slice(&answer(&id, "ping", None)).unwrap();
        assert_eq!(v["result"], json!({}));
        let v: Value = serde_json::from_slice(&answer(&id, "roots/list", None)).unwrap();
        assert_eq!(v["error"]["code"], -32601);
    }

    #[test]
    fn is_error_results_are_failures() {
        assert_eq!(
            failure(&raw(json!({"content": [], "isError": false}))),
            None
        );
        assert_eq!(failure(&raw(json!({"content": []}))), None);
        let why = failure(&raw(
            json!({"content": [{"type": "text", "text": "boom"}], "isError": true}),
        ));
        assert!(why.is_some_and(|w| w.contains("boom")));
    }
}
