//! MCP's `tools/list`: the manifest's tools as MCP describes them (`inputSchema` from
//! `parameters`, `outputSchema` from `returns`, `title` and `annotations` from
//! `display_name` and `hints`), with the caching hints of revision 2026-07-28. Made once
//! per process: the list never changes while it runs.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::schema;

/// How long a client may keep the `tools/list` result before asking again (`ttlMs`):
/// one hour. The tools never change while the process runs (`listChanged: false`), so
/// any time would be right for one process; the bound is for a client that keeps the list
/// across a restart of the server with a new build, which then sees the new tools within
/// the hour.
pub(crate) const TOOLS_TTL_MS: u64 = 3_600_000;

/// Who may share a cached `tools/list` result (`cacheScope`): `private`, only the client
/// that asked (within one authorization context). The list holds nothing about a user as
/// far as the runtime can tell, which would allow `public`; but a plugin may choose its
/// tools from its environment at start-up (a credential present or not), which the
/// runtime cannot see, and a shared cache serving that list to another user is the one
/// mistake a cache hint can cause. `private` still saves every repeat request of the
/// client itself.
pub(crate) const TOOLS_CACHE_SCOPE: &str = "private";

/// The manifest's keys for the hints, and MCP's names for them in `annotations`.
const HINTS: [(&str, &str); 4] = [
    ("read_only", "readOnlyHint"),
    ("destructive", "destructiveHint"),
    ("idempotent", "idempotentHint"),
    ("open_world", "openWorldHint"),
];

/// The `tools/list` result for the manifest (its JSON text): every tool, on one page,
/// and the caching hints, which revision 2026-07-28 requires and older clients ignore.
pub(super) fn list(manifest_json: &RawValue) -> Box<RawValue> {
    let manifest: Value = serde_json::from_str(manifest_json.get()).unwrap_or_default();
    let tools: Vec<Value> = manifest
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| tools.iter().map(tool_entry).collect())
        .unwrap_or_default();
    let mut result = Map::new();
    result.insert("tools".into(), Value::Array(tools));
    result.insert("ttlMs".into(), Value::from(TOOLS_TTL_MS));
    result.insert("cacheScope".into(), Value::from(TOOLS_CACHE_SCOPE));
    RawValue::from_string(Value::Object(result).to_string()).unwrap_or_else(|_| empty_list())
}

/// The list without tools, should the made one fail to be JSON (it cannot).
fn empty_list() -> Box<RawValue> {
    let text =
        format!(r#"{{"tools":[],"ttlMs":{TOOLS_TTL_MS},"cacheScope":"{TOOLS_CACHE_SCOPE}"}}"#);
    RawValue::from_string(text).unwrap_or_else(|_| Box::default())
}

/// One manifest tool as MCP lists it: `name`, `description`, `inputSchema`, and what was
/// declared of `title`, `outputSchema` and `annotations`.
fn tool_entry(tool: &Value) -> Value {
    let mut m = Map::new();
    for key in ["name", "description"] {
        if let Some(v) = tool.get(key) {
            m.insert(key.into(), v.clone());
        }
    }
    let title = tool.get("display_name").filter(|t| t.is_string());
    if let Some(title) = title {
        m.insert("title".into(), title.clone());
    }
    let parameters = tool.get("parameters").unwrap_or(&Value::Null);
    m.insert("inputSchema".into(), schema::input_schema(parameters));
    if let Some(returns) = tool.get("returns").filter(|r| !r.is_null()) {
        m.insert("outputSchema".into(), schema::output_schema(returns));
    }
    if let Some(annotations) = annotations(title, tool.get("hints")) {
        m.insert("annotations".into(), annotations);
    }
    Value::Object(m)
}

/// MCP's `annotations` from the title and the manifest's `hints`: only what was declared
/// (an undeclared hint keeps MCP's default), and none at all when nothing was.
fn annotations(title: Option<&Value>, hints: Option<&Value>) -> Option<Value> {
    let mut a = Map::new();
    if let Some(title) = title {
        a.insert("title".into(), title.clone());
    }
    for (ours, mcp) in HINTS {
        if let Some(hint) = hints.and_then(|h| h.get(ours)).filter(|h| h.is_boolean()) {
            a.insert(mcp.into(), hint.clone());
        }
    }
    (!a.is_empty()).then_some(Value::Object(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Param, Plugin, Tool, ToolError};
    use serde_json::json;

    crate::args! {
        struct AddArgs {
            /// Numbers
            numbers: Vec<f64>,
        }

        #[derive(serde::Serialize)]
        struct Added {
            /// The total
            total: f64,
            /// A note, if any
            note: Option<String>,
        }
    }

    fn add(a: AddArgs, _: &crate::Invocation) -> Result<Added, ToolError> {
        Ok(Added {
            total: a.numbers.iter().sum(),
            note: None,
        })
    }

    fn listed(plugin: Plugin) -> Value {
        let text = serde_json::to_string(&plugin.manifest()).expect("a manifest");
        let raw = RawValue::from_string(text).expect("JSON");
        serde_json::from_str(list(&raw).get()).expect("a JSON list")
    }

    fn plugin() -> Plugin {
        Plugin::new("p", "1.0.0")
            .tool(
                Tool::typed("add", "Adds", add)
                    .returns::<Added>()
                    .display_name("Add numbers")
                    .read_only()
                    .idempotent()
                    .destructive(false)
                    .open_world(false),
            )
            .tool(Tool::typed("plain", "No declarations", add))
            .tool(Tool::typed("hinted", "Hints only", add).open_world(true))
            .tool(
                Tool::new(
                    "titled",
                    "A title only",
                    |_: Value, _: &crate::Invocation| Ok::<_, ToolError>(json!({})),
                )
                .param(Param::string("x", "X").optional())
                .display_name("Titled"),
            )
    }

    #[test]
    fn a_declared_result_type_and_annotations_are_listed() {
        let list = listed(plugin());
        let add = &list["tools"][0];
        assert_eq!(add["title"], "Add numbers");
        assert_eq!(
            add["outputSchema"],
            json!({"type": "object",
                   "properties": {"total": {"type": "number", "description": "The total"},
                                  "note": {"type": ["string", "null"], "description": "A note, if any"}},
                   "required": ["total"]})
        );
        assert_eq!(
            add["annotations"],
            json!({"title": "Add numbers", "readOnlyHint": true, "destructiveHint": false,
                   "idempotentHint": true, "openWorldHint": false})
        );
        assert_eq!(add["inputSchema"]["required"], json!(["numbers"]));
    }

    #[test]
    fn only_what_was_declared_is_listed() {
        let list = listed(plugin());
        let plain = list["tools"][1].as_object().expect("a tool");
        let mut keys: Vec<&str> = plain.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["description", "inputSchema", "name"]);
        assert_eq!(
            list["tools"][2]["annotations"],
            json!({"openWorldHint": true})
        );
        assert!(list["tools"][2].get("title").is_none());
        assert_eq!(list["tools"][3]["title"], "Titled");
        assert_eq!(list["tools"][3]["annotations"], json!({"title": "Titled"}));
        assert!(list["tools"][3].get("outputSchema").is_none());
    }

    #[test]
    fn every_list_carries_the_caching_hints() {
        let list = listed(plugin());
        assert_eq!(list["ttlMs"], TOOLS_TTL_MS);
        assert_eq!(list["cacheScope"], "private");
        let empty: Value = serde_json::from_str(empty_list().get()).expect("JSON");
        assert_eq!(
            empty,
            json!({"tools": [], "ttlMs": TOOLS_TTL_MS, "cacheScope": "private"})
        );
        let none = RawValue::from_string("{}".into()).expect("JSON");
        let listed: Value = serde_json::from_str(super::list(&none).get()).expect("JSON");
        assert_eq!(listed, empty);
    }
}
