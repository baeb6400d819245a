//! An MCP server's `tools/list` made into the crate's [`Manifest`], so that a host reads
//! an MCP server's tools where it reads an Executa plugin's: the name and version from
//! `serverInfo`, the description from `instructions`, and each tool's `inputSchema`
//! turned into the manifest's parameter list as far as the list can say it (the raw
//! schema is kept beside it, in the tool's `extra`).

use std::collections::HashSet;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::types::{Handshake, snippet};
use crate::error::{Error, Result};
use crate::manifest::{Manifest, Param, ParamType, ToolSpec};

/// How deep nested object parameters are described (and `$ref`s followed); deeper ones
/// stay plain `object`s, which also ends a schema that refers to itself.
const MAX_DEPTH: usize = 8;

/// Keys of an MCP tool that the manifest's own fields take (everything else goes to
/// `extra`, as received; `parameters` and `timeout` would be read as the manifest's).
const TAKEN: [&str; 4] = ["name", "description", "parameters", "timeout"];

/// The manifest of an MCP server: `tools` is the `{"tools": [...]}` the host read with
/// `tools/list`, `handshake` what its `initialize` said (absent when it was skipped).
/// A tool without a string `name` is an [`Error::Protocol`].
pub(crate) fn manifest(handshake: Option<&Handshake>, tools: &RawValue) -> Result<Manifest> {
    let v: Value = serde_json::from_str(tools.get())?;
    let list = v.get("tools").and_then(Value::as_array);
    let info = handshake.and_then(|h| h.server_info.as_ref());
    let text = |key: &str| info.and_then(|i| i.get(key)).and_then(Value::as_str);
    Ok(Manifest {
        name: text("name").unwrap_or_default().to_owned(),
        display_name: text("title").map(str::to_owned),
        version: text("version").unwrap_or_default().to_owned(),
        description: handshake
            .and_then(|h| h.instructions.as_deref())
            .or_else(|| text("description"))
            .unwrap_or_default()
            .to_owned(),
        homepage: text("websiteUrl").map(str::to_owned),
        tools: list
            .map(|l| l.iter().map(tool).collect::<Result<Vec<_>>>())
            .transpose()?
            .unwrap_or_default(),
        ..Manifest::default()
    })
}

/// The manifest of an MCP server from its raw `initialize` result and the tools of every
/// `tools/list` page, as [`PluginProcess::describe`](super::PluginProcess::describe) makes it: for drivers
/// that read the server's pipes themselves (`executa bench`). An `initialize` result
/// naming a revision outside [`REVISIONS`](super::mcp::REVISIONS), or a tool without a
/// string `name`, is an [`Error::Protocol`]. Never blocks.
pub fn manifest_of(initialize_result: &RawValue, tools: Vec<Value>) -> Result<Manifest> {
    let handshake = super::mcp::read_handshake(initialize_result, Duration::ZERO)?;
    let tools = serde_json::value::to_raw_value(&serde_json::json!({ "tools": tools }))?;
    manifest(Some(&handshake), &tools)
}

/// One MCP tool: its description (else its title), its parameters from `inputSchema`,
/// and every other field (`inputSchema` itself, `title`, `outputSchema`, `annotations`,
/// ...) kept in `extra`.
fn tool(t: &Value) -> Result<ToolSpec> {
    let Some(name) = t.get("name").and_then(Value::as_str) else {
        return Err(Error::Protocol(format!(
            "a tools/list entry has no string `name`: {}",
            snippet(&t.to_string())
        )));
    };
    let text = |key: &str| t.get(key).and_then(Value::as_str);
    let schema = t.get("inputSchema").unwrap_or(&Value::Null);
    let params = parameters(schema, schema, 0);
    let extra: Map<String, Value> = t
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !TAKEN.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(ToolSpec {
        name: name.to_owned(),
        description: text("description")
            .or_else(|| text("title"))
            .unwrap_or_default()
            .to_owned(),
        parameters: serde_json::to_value(params)?,
        timeout: None,
        extra,
    })
}

/// The top-level properties of an object schema as parameters (none for a schema
/// without `properties`).
fn parameters(schema: &Value, root: &Value, depth: usize) -> Vec<Param> {
    let schema = resolve(schema, root);
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let required: HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    props
        .iter()
        .map(|(name, s)| param(name, s, required.contains(name.as_str()), root, depth))
        .collect()
}

/// One property: its type (that of the one non-null branch of an `anyOf`/`oneOf`, as
/// `Optional[T]` is written), description (else title), `required`, `default`, `enum`
/// (or `const`); an array's `items` schema as given; an object's own properties, nested.
fn param(name: &str, s: &Value, required: bool, root: &Value, depth: usize) -> Param {
    let s = resolve(s, root);
    let branch = sole_branch(s, root).unwrap_or(s);
    let text = |key: &str| {
        [s, branch]
            .iter()
            .find_map(|v| v.get(key).and_then(Value::as_str))
    };
    let kind = kind_of(branch);
    let mut p = Param::new(
        name,
        kind,
        text("description").or_else(|| text("title")).unwrap_or(""),
    );
    p.required = required;
    p.default = s.get("default").cloned();
    p.allowed = [s, branch]
        .iter()
        .find_map(|v| match (v.get("enum"), v.get("const")) {
            (Some(Value::Array(values)), _) => Some(values.clone()),
            (_, Some(value)) => Some(vec![value.clone()]),
            _ => None,
        });
    if kind == ParamType::Array {
        p.items = branch.get("items").map(|i| resolve(i, root).clone());
    }
    if kind == ParamType::Object && depth < MAX_DEPTH {
        let nested = parameters(branch, root, depth + 1);
        p.properties = (!nested.is_empty()).then_some(nested);
    }
    p
}

/// The one non-`null` member of an `anyOf` or `oneOf`, if there is exactly one.
fn sole_branch<'a>(s: &'a Value, root: &'a Value) -> Option<&'a Value> {
    let members = s
        .get("anyOf")
        .or_else(|| s.get("oneOf"))
        .and_then(Value::as_array)?;
    let mut rest = members
        .iter()
        .map(|m| resolve(m, root))
        .filter(|m| m.get("type").and_then(Value::as_str) != Some("null"));
    let one = rest.next()?;
    rest.next().is_none().then_some(one)
}

/// The parameter type of a schema: its `type` (the first non-null one of a list), else
/// what its keywords imply; a schema that says nothing (any value) is a `string`.
fn kind_of(s: &Value) -> ParamType {
    let named = match s.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    };
    match named {
        Some("integer") => ParamType::Integer,
        Some("number") => ParamType::Number,
        Some("boolean") => ParamType::Boolean,
        Some("array") => ParamType::Array,
        Some("object") => ParamType::Object,
        Some(_) => ParamType::String,
        None if s.get("properties").is_some() => ParamType::Object,
        None if s.get("items").is_some() => ParamType::Array,
        None => ParamType::String,
    }
}

/// Follows a local `$ref` (`#/$defs/X`, `#/definitions/X`) to what it names, at most
/// [`MAX_DEPTH`] times; anything else is returned as it is.
fn resolve<'a>(mut s: &'a Value, root: &'a Value) -> &'a Value {
    for _ in 0..MAX_DEPTH {
        let Some(target) = s
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|pointer| root.pointer(pointer))
        else {
            break;
        };
        s = target;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params_of(schema: Value) -> Vec<Value> {
        let t = tool(&json!({"name": "t", "inputSchema": schema})).expect("a tool");
        assert!(
            t.extra.contains_key("inputSchema"),
            "the raw schema is kept"
        );
        t.parameters.as_array().cloned().expect("a list")
    }

    #[test]
    fn top_level_properties_become_the_parameter_list() {
        let list = params_of(json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "what to say"},
                "times": {"type": "integer", "default": 1},
                "mode": {"enum": ["a", "b"], "type": "string"},
                "shout": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": null},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["text"],
        }));
        let by_name = |n: &str| list.iter().find(|p| p["name"] == n).cloned().expect(n);
        assert_eq!(
            by_name("text"),
            json!({"name":"text","type":"string","description":"what to say","required":true})
        );
        assert_eq!(by_name("times")["default"], 1);
        assert_eq!(by_name("times")["required"], false);
        assert_eq!(by_name("mode")["enum"], json!(["a", "b"]));
        assert_eq!(by_name("shout")["type"], "boolean");
        assert_eq!(by_name("shout")["default"], Value::Null);
        assert_eq!(by_name("tags")["items"], json!({"type": "string"}));
    }

    #[test]
    fn nested_objects_and_refs_are_described_and_cycles_end() {
        let list = params_of(json!({
            "type": "object",
            "$defs": {
                "Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
                "Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}},
            },
            "properties": {
                "at": {"$ref": "#/$defs/Point"},
                "list": {"$ref": "#/$defs/Node"},
                "anything": {},
            },
        }));
        let at = list.iter().find(|p| p["name"] == "at").expect("at");
        assert_eq!(at["type"], "object");
        assert_eq!(at["properties"][0]["name"], "x");
        assert_eq!(at["properties"][0]["type"], "number");
        let anything = list.iter().find(|p| p["name"] == "anything").expect("any");
        assert_eq!(anything["type"], "string");
        let mut depth = 0;
        let mut node = list.iter().find(|p| p["name"] == "list").cloned();
        while let Some(n) = node {
            depth += 1;
            node = n["properties"][0]
                .as_object()
                .map(|_| n["properties"][0].clone());
        }
        assert_eq!(depth, MAX_DEPTH + 1, "a self-referring schema ends");
    }

    #[test]
    fn the_manifest_takes_server_info_and_instructions() {
        let mut h = Handshake::fell_back(String::new(), std::time::Duration::ZERO);
        h.server_info = Some(json!({"name": "srv", "version": "1.2.3", "title": "Server"}));
        h.instructions = Some("Use me.".into());
        let tools = RawValue::from_string(
            json!({"tools": [{"name": "a", "title": "A", "inputSchema": {"type": "object"}}]})
                .to_string(),
        )
        .expect("JSON");
        let m = manifest(Some(&h), &tools).expect("a manifest");
        assert_eq!((m.name.as_str(), m.version.as_str()), ("srv", "1.2.3"));
        assert_eq!(m.display_name.as_deref(), Some("Server"));
        assert_eq!(m.description, "Use me.");
        assert_eq!(m.tools[0].description, "A");
        assert_eq!(m.tools[0].parameters, json!([]));
        assert_eq!(m.tools[0].extra["title"], "A");
        let bad = RawValue::from_string(r#"{"tools":[{"title":"x"}]}"#.to_owned()).expect("JSON");
        assert!(manifest(None, &bad).is_err());
    }
}
