//! An MCP server's `tools/list` made into the crate's [`Manifest`], so that a host reads
//! an MCP server's tools where it reads an Executa plugin's: the name and version from
//! `serverInfo`, the description from `instructions`, and each tool's `inputSchema`
//! turned into the manifest's parameter list as far as the list can say it (the raw
//! schema is kept beside it, in the tool's `extra`).

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;
use serde_json::value::RawValue;

use serde::Deserialize;

use super::json_cost::{PARAM_COST, array_cost, string_cost, tree_cost, value_cost};
use super::mcp::{MAX_TOOLS_HEAP_BYTES, past_heap_cap};
use super::types::{Handshake, snippet};
use crate::error::{Error, Result};
use crate::manifest::{Manifest, Param, ParamType, ToolSpec};

/// How deep nested object parameters are described (and `$ref`s followed); deeper ones
/// stay plain `object`s, which also ends a schema that refers to itself.
const MAX_DEPTH: usize = 8;

/// Keys of an MCP tool that the manifest's own fields take (everything else goes to
/// `extra`, as received; `parameters` and `timeout` would be read as the manifest's).
const TAKEN: [&str; 4] = ["name", "description", "parameters", "timeout"];

/// The tools of a `{"tools": [...]}`, borrowed from its text.
#[derive(Deserialize)]
struct ToolList<'a> {
    #[serde(borrow)]
    tools: Option<&'a RawValue>,
}

/// The manifest of an MCP server: `tools` is the `{"tools": [...]}` the host read with
/// `tools/list`, `handshake` what its `initialize` said (absent when it was skipped).
/// A tool without a string `name`, or tools whose manifest would take more than
/// [`MAX_TOOLS_HEAP_BYTES`], are an [`Error::Protocol`].
pub(crate) fn manifest(handshake: Option<&Handshake>, tools: &RawValue) -> Result<Manifest> {
    let list = serde_json::from_str::<ToolList>(tools.get())
        .ok()
        .and_then(|l| l.tools)
        .and_then(|t| serde_json::from_str::<Vec<&RawValue>>(t.get()).ok())
        .unwrap_or_default();
    manifest_from(handshake, &list)
}

/// The manifest of an MCP server from its raw `initialize` result (or, in the stateless
/// era, its `server/discover` result) and the tools of every `tools/list` page
/// ([`ToolsPager::into_tools`](super::mcp::ToolsPager::into_tools)), as
/// [`PluginProcess::describe`](super::PluginProcess::describe) makes it: for drivers
/// that read the server's pipes themselves (`executa bench`). An `initialize` result
/// naming a revision outside [`REVISIONS`](super::mcp::REVISIONS), a discover result
/// naming no stateless revision the host speaks, a tool without a string `name`, or tools
/// whose manifest would take more than `MAX_TOOLS_HEAP_BYTES` (64 MiB, named in
/// `src/host/mcp.rs`) are an [`Error::Protocol`]. Never blocks.
pub fn manifest_of(initialize_result: &RawValue, tools: &[Box<RawValue>]) -> Result<Manifest> {
    let handshake = if is_discover_result(initialize_result) {
        super::mcp_modern::discover_handshake(initialize_result, Duration::ZERO)?
    } else {
        super::mcp::read_handshake(initialize_result, Duration::ZERO)?
    };
    let list: Vec<&RawValue> = tools.iter().map(AsRef::as_ref).collect();
    manifest_from(Some(&handshake), &list)
}

/// Whether a result is `server/discover`'s (it lists `supportedVersions`) rather than
/// `initialize`'s.
fn is_discover_result(result: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Versions<'a> {
        #[serde(borrow, rename = "supportedVersions")]
        versions: Option<&'a RawValue>,
    }
    serde_json::from_str::<Versions>(result.get()).is_ok_and(|v| v.versions.is_some())
}

/// The manifest from the handshake and each tool's text, made one tool at a time within
/// [`MAX_TOOLS_HEAP_BYTES`].
fn manifest_from(handshake: Option<&Handshake>, list: &[&RawValue]) -> Result<Manifest> {
    let info = handshake.and_then(|h| h.server_info.as_ref());
    let text = |key: &str| info.and_then(|i| i.get(key)).and_then(Value::as_str);
    let mut budget = Budget::default();
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
            .iter()
            .map(|t| tool(t, &mut budget))
            .collect::<Result<Vec<_>>>()?,
        ..Manifest::default()
    })
}

/// One MCP tool: its description (else its title), its parameters from `inputSchema`,
/// and every other field (`inputSchema` itself, `title`, `outputSchema`, `annotations`,
/// ...) kept in `extra`. Its tree is paid for from `budget` before it is parsed.
fn tool(raw: &RawValue, budget: &mut Budget) -> Result<ToolSpec> {
    budget.spend(tree_cost(raw)?.saturating_add(size_of::<ToolSpec>()))?;
    let no_name = || {
        Error::Protocol(format!(
            "a tools/list entry has no string `name`: {}",
            snippet(raw.get())
        ))
    };
    let Value::Object(mut t) = serde_json::from_str(raw.get())? else {
        return Err(no_name());
    };
    let Some(Value::String(name)) = t.remove("name") else {
        return Err(no_name());
    };
    let text = |key: &str| t.get(key).and_then(Value::as_str);
    let description = text("description")
        .or_else(|| text("title"))
        .unwrap_or_default()
        .to_owned();
    let schema = t.get("inputSchema").unwrap_or(&Value::Null);
    let params = parameters(schema, schema, 0, budget)?;
    // The tool's own fields move into `extra`: the tree is never copied.
    t.retain(|k, _| !TAKEN.contains(&k.as_str()));
    Ok(ToolSpec {
        name,
        description,
        parameters: serde_json::to_value(params)?,
        timeout: None,
        extra: t,
    })
}

/// The estimated heap of a manifest being made, which may not pass
/// [`MAX_TOOLS_HEAP_BYTES`].
#[derive(Default)]
struct Budget {
    spent: usize,
}

impl Budget {
    /// Counts `bytes` more; past the cap, an [`Error::Protocol`] naming it.
    fn spend(&mut self, bytes: usize) -> Result<()> {
        self.spent = self.spent.saturating_add(bytes);
        if self.spent > MAX_TOOLS_HEAP_BYTES {
            return Err(past_heap_cap(self.spent));
        }
        Ok(())
    }

    /// Clones `v` once it is paid for: twice, since the parameter list is turned into a
    /// `Value` (a second copy) while it still lives.
    fn copy(&mut self, v: &Value) -> Result<Value> {
        self.spend(value_cost(v).saturating_mul(2))?;
        Ok(v.clone())
    }
}

/// The top-level properties of an object schema as parameters (none for a schema
/// without `properties`). Each parameter, and each value copied into one, is paid for
/// from `budget` (a `$ref` used many times is copied as many times).
fn parameters(
    schema: &Value,
    root: &Value,
    depth: usize,
    budget: &mut Budget,
) -> Result<Vec<Param>> {
    let schema = resolve(schema, root);
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let required: HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    budget.spend(array_cost(props.len()))?;
    props
        .iter()
        .map(|(name, s)| {
            let required = required.contains(name.as_str());
            param(name, s, required, root, depth, budget)
        })
        .collect()
}

/// One property: its type (that of the one non-null branch of an `anyOf`/`oneOf`, as
/// `Optional[T]` is written), description (else title), `required`, `default`, `enum`
/// (or `const`); an array's `items` schema as given; an object's own properties, nested.
fn param(
    name: &str,
    s: &Value,
    required: bool,
    root: &Value,
    depth: usize,
    budget: &mut Budget,
) -> Result<Param> {
    let s = resolve(s, root);
    let branch = sole_branch(s, root).unwrap_or(s);
    let text = |key: &str| {
        [s, branch]
            .iter()
            .find_map(|v| v.get(key).and_then(Value::as_str))
    };
    let kind = kind_of(branch);
    let description = text("description").or_else(|| text("title")).unwrap_or("");
    // Twice: the `Param` and the `Value` made of the list live at once.
    let cost = PARAM_COST + size_of::<Param>() + string_cost(name.len());
    budget.spend(
        cost.saturating_add(string_cost(description.len()))
            .saturating_mul(2),
    )?;
    let mut p = Param::new(name, kind, description);
    p.required = required;
    p.default = s.get("default").map(|d| budget.copy(d)).transpose()?;
    let allowed = [s, branch]
        .iter()
        .find_map(|v| match (v.get("enum"), v.get("const")) {
            (Some(values @ Value::Array(_)), _) => Some(values),
            (_, Some(value)) => Some(value),
            _ => None,
        });
    p.allowed = match allowed.map(|a| budget.copy(a)).transpose()? {
        Some(Value::Array(values)) => Some(values),
        Some(value) => Some(vec![value]),
        None => None,
    };
    if kind == ParamType::Array {
        let items = branch.get("items").map(|i| resolve(i, root));
        p.items = items.map(|i| budget.copy(i)).transpose()?;
    }
    if kind == ParamType::Object && depth < MAX_DEPTH {
        let nested = parameters(branch, root, depth + 1, budget)?;
        p.properties = (!nested.is_empty()).then_some(nested);
    }
    Ok(p)
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

    fn raw(v: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&v).expect("JSON")
    }

    fn params_of(schema: Value) -> Vec<Value> {
        let t = tool(
            &raw(json!({"name": "t", "inputSchema": schema})),
            &mut Budget::default(),
        )
        .expect("a tool");
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

    /// A 300-byte schema whose object refers to itself ten times would expand into 10^8
    /// parameters: it is refused once the expansion passes the heap cap, by name.
    #[test]
    fn a_self_referring_schema_that_would_expand_without_bound_is_refused() {
        let node = json!({"type": "object", "properties":
            ("abcdefghij".chars().map(|c| (c.to_string(), json!({"$ref": "#/$defs/N"}))))
                .collect::<serde_json::Map<String, Value>>()});
        let tool = raw(json!({"name": "t", "inputSchema": {"type": "object",
            "$defs": {"N": node}, "properties": {"root": {"$ref": "#/$defs/N"}}}}));
        assert!(tool.get().len() < 400);
        match tool_of(&tool) {
            Err(Error::Protocol(why)) => assert!(why.contains("MAX_TOOLS_HEAP_BYTES"), "{why}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
        let items = json!({"type": "array", "items": {"$ref": "#/$defs/Big"}});
        let props: serde_json::Map<String, Value> = (0..5000)
            .map(|i| (format!("p{i}"), items.clone()))
            .collect();
        let big: Vec<Value> = (0..5000).map(|i| json!({"const": i})).collect();
        let tool = raw(json!({"name": "t", "inputSchema": {"type": "object",
            "$defs": {"Big": {"anyOf": big}}, "properties": props}}));
        assert!(
            matches!(tool_of(&tool), Err(Error::Protocol(_))),
            "each copy counts"
        );
    }

    fn tool_of(raw: &RawValue) -> Result<ToolSpec> {
        tool(raw, &mut Budget::default())
    }

    /// The estimate counts a tree, not its text: small objects cost a B-tree node each,
    /// a long string about its length; a parsed value is estimated as its text is.
    #[test]
    fn the_heap_estimate_counts_nodes_not_text() {
        let cost = |v: &Value| tree_cost(&raw(v.clone())).expect("JSON");
        let small: Vec<Value> = (0..1000).map(|i| json!({"a": i})).collect();
        let small = Value::from(small);
        // Each `{"a":i}` is a node of its own: far more than its ten bytes of text (47
        // times on a 32-bit target, 87 on a 64-bit one).
        assert!(
            cost(&small) > 20 * small.to_string().len(),
            "{}",
            cost(&small)
        );
        let long = Value::from("x".repeat(100_000));
        assert!((100_000..110_000).contains(&cost(&long)), "{}", cost(&long));
        let mixed = json!({"tools": [{"name": "t", "n": [1, 2.5, null, true], "s": {"k": "v"}}]});
        assert_eq!(cost(&mixed), value_cost(&mixed));
        assert_eq!(cost(&small), value_cost(&small));
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
