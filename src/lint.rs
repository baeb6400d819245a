//! Static checks of a `describe` answer against what the platform accepts: the bare
//! manifest object, required fields, a SemVer version, a non-empty tool list with unique
//! names, parameters in the documented LIST form with valid types, and capability strings
//! from the platform's allow-list. Used by `executa check`, and by every plugin at
//! start-up and in `--describe`: an error refuses to start, a warning is logged.

use std::fmt;

use serde_json::{Map, Value};

use crate::manifest::CAPABILITY_ALLOW_LIST;

/// Which part of the manifest a finding is about (one `check` line each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Area {
    /// The answer's shape (bare object, not wrapped).
    Shape,
    /// `name`, `version`, `description` and the other top-level fields.
    Fields,
    /// `tools`: present, non-empty, unique names.
    Tools,
    /// Each tool's `parameters` list.
    Parameters,
    /// `host_capabilities`.
    Capabilities,
    /// `credentials`.
    Credentials,
}

impl Area {
    /// Every area, in report order.
    pub const ALL: [Area; 6] = [
        Area::Shape,
        Area::Fields,
        Area::Tools,
        Area::Parameters,
        Area::Capabilities,
        Area::Credentials,
    ];

    /// A short name for report lines.
    pub fn name(self) -> &'static str {
        match self {
            Area::Shape => "manifest shape",
            Area::Fields => "manifest fields",
            Area::Tools => "tools",
            Area::Parameters => "parameters",
            Area::Capabilities => "host_capabilities",
            Area::Credentials => "credentials",
        }
    }
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Worth fixing; the platform still accepts it.
    Warning,
    /// The platform rejects or misreads it.
    Error,
}

/// One problem found in a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What it is about.
    pub area: Area,
    /// How bad.
    pub severity: Severity,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

struct Lint {
    out: Vec<Finding>,
}

impl Lint {
    fn error(&mut self, area: Area, message: impl Into<String>) {
        self.push(area, Severity::Error, message.into());
    }

    fn warn(&mut self, area: Area, message: impl Into<String>) {
        self.push(area, Severity::Warning, message.into());
    }

    fn push(&mut self, area: Area, severity: Severity, message: String) {
        self.out.push(Finding {
            area,
            severity,
            message,
        });
    }
}

/// Lints a raw `describe` result. An empty list means the manifest is clean.
pub fn lint_manifest(raw: &Value) -> Vec<Finding> {
    let mut l = Lint { out: Vec::new() };
    let Some(m) = raw.as_object() else {
        l.error(
            Area::Shape,
            format!(
                "describe must return the manifest object itself, got a JSON {}",
                kind(raw)
            ),
        );
        return l.out;
    };
    if let Some(Value::Object(inner)) = m.get("manifest")
        && !m.contains_key("tools")
    {
        l.error(
            Area::Shape,
            "describe returned a wrapped {\"manifest\": {...}}: return the bare manifest object; the Agent reads \
             `name` at the top level and drops the plugin (pitfall #5)",
        );
        // Lint what is inside too, so the author sees every problem at once.
        lint_object(&mut l, inner);
        return l.out;
    }
    lint_object(&mut l, m);
    l.out
}

fn lint_object(l: &mut Lint, m: &Map<String, Value>) {
    lint_fields(l, m);
    lint_tools(l, m.get("tools"));
    lint_capabilities(l, m.get("host_capabilities"));
    lint_credentials(l, m.get("credentials"));
}

fn lint_fields(l: &mut Lint, m: &Map<String, Value>) {
    match m.get("name") {
        Some(Value::String(s)) if !s.trim().is_empty() => {}
        Some(Value::String(_)) => l.error(Area::Fields, "`name` is empty"),
        Some(_) => l.error(Area::Fields, "`name` must be a string"),
        None => l.error(
            Area::Fields,
            "`name` is missing: the Agent still reads it (pitfall #5)",
        ),
    }
    match m.get("version") {
        Some(Value::String(v)) if is_semver(v) => {}
        Some(Value::String(v)) => l.error(
            Area::Fields,
            format!("`version` {v:?} is not SemVer (MAJOR.MINOR.PATCH, e.g. \"1.2.0\")"),
        ),
        Some(_) => l.error(Area::Fields, "`version` must be a SemVer string"),
        None => l.error(Area::Fields, "`version` is missing"),
    }
    match m.get("description") {
        Some(Value::String(s)) if !s.trim().is_empty() => {}
        Some(Value::String(_)) => l.warn(Area::Fields, "`description` is empty"),
        Some(_) => l.error(Area::Fields, "`description` must be a string"),
        None => l.error(Area::Fields, "`description` is missing"),
    }
    for key in [
        "display_name",
        "author",
        "homepage",
        "icon",
        "category",
        "license",
    ] {
        if m.get(key).is_some_and(|v| !v.is_string() && !v.is_null()) {
            l.error(Area::Fields, format!("`{key}` must be a string"));
        }
    }
    if m.get("runtime")
        .is_some_and(|v| !v.is_object() && !v.is_null())
    {
        l.error(Area::Fields, "`runtime` must be an object");
    }
}

fn lint_tools(l: &mut Lint, tools: Option<&Value>) {
    let tools = match tools {
        Some(Value::Array(t)) if !t.is_empty() => t,
        Some(Value::Array(_)) => {
            return l.error(
                Area::Tools,
                "`tools` is empty: a plugin needs at least one tool",
            );
        }
        Some(_) => return l.error(Area::Tools, "`tools` must be an array of tool objects"),
        None => return l.error(Area::Tools, "`tools` is missing"),
    };
    let mut seen: Vec<String> = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let Some(t) = tool.as_object() else {
            l.error(Area::Tools, format!("tools[{i}] must be an object"));
            continue;
        };
        let name = match t.get("name") {
            Some(Value::String(n)) if !n.is_empty() => n.clone(),
            _ => {
                l.error(Area::Tools, format!("tools[{i}] has no `name`"));
                format!("tools[{i}]")
            }
        };
        if seen.contains(&name) {
            l.error(
                Area::Tools,
                format!("tool name {name:?} appears more than once: names must be unique"),
            );
        } else {
            seen.push(name.clone());
        }
        let described = t
            .get("description")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.trim().is_empty());
        if !described {
            l.warn(
                Area::Tools,
                format!("tool {name:?} has no `description` (it is the prompt the LLM sees)"),
            );
        }
        if let Some(timeout) = t.get("timeout")
            && timeout.as_u64().is_none_or(|s| s == 0)
        {
            l.error(
                Area::Tools,
                format!("tool {name:?}: `timeout` must be a positive integer of seconds"),
            );
        }
        lint_parameters(l, &name, t);
    }
}

fn lint_parameters(l: &mut Lint, tool: &str, t: &Map<String, Value>) {
    for key in ["input_schema", "inputSchema"] {
        if t.contains_key(key) {
            l.error(
                Area::Parameters,
                format!(
                    "tool {tool:?} uses MCP-style `{key}`, which the Agent ignores: declare a `parameters` LIST \
                     (pitfall #4)"
                ),
            );
        }
    }
    let params = match t.get("parameters") {
        None | Some(Value::Null) => return,
        Some(Value::Array(p)) => p,
        Some(Value::Object(o)) if o.contains_key("properties") || o.contains_key("type") => {
            return l.error(
                Area::Parameters,
                format!(
                    "tool {tool:?}: `parameters` is a JSON-Schema object; the Agent reads only the LIST form \
                     [{{name, type, description, required}}] (pitfall #4)"
                ),
            );
        }
        Some(_) => {
            return l.error(
                Area::Parameters,
                format!("tool {tool:?}: `parameters` must be a list"),
            );
        }
    };
    let mut seen: Vec<String> = Vec::new();
    for (i, p) in params.iter().enumerate() {
        let Some(p) = p.as_object() else {
            l.error(
                Area::Parameters,
                format!("tool {tool:?}: parameters[{i}] must be an object"),
            );
            continue;
        };
        let pname = match p.get("name") {
            Some(Value::String(n)) if !n.is_empty() => n.as_str(),
            _ => {
                l.error(
                    Area::Parameters,
                    format!("tool {tool:?}: parameters[{i}] has no `name`"),
                );
                continue;
            }
        };
        // One message builder for every finding about this parameter (one formatting
        // call in the binary rather than one per message).
        let mut found = |severity, what: &str| {
            l.push(
                Area::Parameters,
                severity,
                format!("tool {tool:?}: parameter {pname:?}{what}"),
            )
        };
        if seen.iter().any(|s| s == pname) {
            found(Severity::Error, " is declared twice");
        } else {
            seen.push(pname.to_owned());
        }
        match p.get("type").and_then(Value::as_str) {
            Some("string" | "integer" | "number" | "boolean" | "array" | "object") => {}
            Some(other) => found(
                Severity::Error,
                &format!(
                    " has type {other:?}; use string, integer, number, boolean, array or object"
                ),
            ),
            None => found(Severity::Error, " has no `type`"),
        }
        if p.get("required").is_some_and(|r| !r.is_boolean()) {
            found(Severity::Error, ": `required` must be a boolean");
        }
        if p.get("enum").is_some_and(|e| !e.is_array()) {
            found(Severity::Error, ": `enum` must be a list");
        }
        if undescribed(p) {
            found(Severity::Warning, UNDESCRIBED);
        }
        lint_nested_descriptions(l, tool, pname, p);
    }
}

/// What follows `parameter "path"` in the warning about a missing description, with the
/// fix: `args!` publishes a field without a doc comment as `"description": ""`.
const UNDESCRIBED: &str = " has no `description` (the model reads it to fill the argument \
                           in): add a `///` doc comment to the field, or give its `Param` one \
                           (`Param::string(name, description)`)";

fn undescribed(p: &Map<String, Value>) -> bool {
    p.get("description")
        .and_then(Value::as_str)
        .is_none_or(|d| d.trim().is_empty())
}

/// Warns about each parameter below `p` without a description: the properties of an
/// object (`path.name`) and of an array's object items (`path[].name`), at every depth.
/// Only descriptions: the platform reads the nested lists, so their types are left to it.
fn lint_nested_descriptions(l: &mut Lint, tool: &str, path: &str, p: &Map<String, Value>) {
    let items = p.get("items").and_then(|i| i.get("properties"));
    for (props, sep) in [(p.get("properties"), "."), (items, "[].")] {
        let Some(Value::Array(props)) = props else {
            continue;
        };
        for q in props.iter().filter_map(Value::as_object) {
            let Some(name) = q.get("name").and_then(Value::as_str) else {
                continue;
            };
            let path = format!("{path}{sep}{name}");
            if undescribed(q) {
                l.warn(
                    Area::Parameters,
                    format!("tool {tool:?}: parameter {path:?}{UNDESCRIBED}"),
                );
            }
            lint_nested_descriptions(l, tool, &path, q);
        }
    }
}

fn lint_capabilities(l: &mut Lint, caps: Option<&Value>) {
    let caps = match caps {
        None | Some(Value::Null) => return,
        Some(Value::Array(c)) => c,
        Some(_) => {
            return l.error(
                Area::Capabilities,
                "`host_capabilities` must be a list of strings",
            );
        }
    };
    for cap in caps {
        let Some(cap) = cap.as_str() else {
            l.error(
                Area::Capabilities,
                "`host_capabilities` must hold only strings",
            );
            continue;
        };
        if CAPABILITY_ALLOW_LIST.contains(&cap) {
            continue;
        }
        let hint = if cap.starts_with("storage") {
            ": storage is declared as `aps.kv` / `aps.files`"
        } else if cap == "sampling" {
            ": sampling is declared as `llm.sample`"
        } else {
            ""
        };
        // A near miss (`llm.samples`, `aps.KV`) gets the allow-list's spelling (one
        // formatting call for both cases: each costs every plugin binary its own code).
        let (open, near, close) = match CAPABILITY_ALLOW_LIST.iter().find(|k| near_miss(cap, k)) {
            Some(known) => ("; did you mean `", *known, "`?"),
            None => ("", "", ""),
        };
        l.error(
            Area::Capabilities,
            format!("unknown capability {cap:?}{hint}{open}{near}{close}; the platform rejects manifests with it (pitfall #9a)"),
        );
    }
}

/// Whether `a` is within two edits (insertions, deletions, substitutions; ASCII case
/// ignored) of `b`, a short allow-list entry. One row of the edit-distance table in a
/// fixed array: no allocation, and no bounds checks for the compiler to keep.
fn near_miss(a: &str, b: &str) -> bool {
    const MAX: usize = 32;
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if b.len() >= MAX || a.len() > b.len() + 2 {
        return false;
    }
    let mut row = [0u8; MAX];
    for (j, cell) in row.iter_mut().enumerate() {
        *cell = j as u8;
    }
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i as u8 + 1;
        for j in 0..b.len() {
            let cost = u8::from(!ca.eq_ignore_ascii_case(&b[j]));
            let next = (diagonal + cost).min(row[j] + 1).min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()] <= 2
}

fn lint_credentials(l: &mut Lint, creds: Option<&Value>) {
    let creds = match creds {
        None | Some(Value::Null) => return,
        Some(Value::Array(c)) => c,
        Some(_) => return l.error(Area::Credentials, "`credentials` must be a list"),
    };
    for (i, c) in creds.iter().enumerate() {
        let Some(name) = c.get("name").and_then(Value::as_str) else {
            l.error(Area::Credentials, format!("credentials[{i}] has no `name`"));
            continue;
        };
        let upper_snake = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            && name.as_bytes()[0].is_ascii_uppercase();
        if !upper_snake {
            l.warn(
                Area::Credentials,
                format!("credential {name:?} should be UPPER_SNAKE_CASE"),
            );
        }
        let sensitive = c.get("sensitive").and_then(Value::as_bool).unwrap_or(true);
        if sensitive && c.get("default").is_some_and(|d| !d.is_null()) {
            l.error(
                Area::Credentials,
                format!("credential {name:?} is sensitive but has a `default`"),
            );
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `v` is a SemVer 2.0.0 version: `MAJOR.MINOR.PATCH`, numbers without leading
/// zeros, optional `-pre.release` and `+build` parts.
pub fn is_semver(v: &str) -> bool {
    let (rest, build) = match v.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (v, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numeric = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    let ident =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| numeric(p))
        && pre.is_none_or(|p| {
            p.split('.')
                .all(|i| ident(i) && (!i.bytes().all(|b| b.is_ascii_digit()) || numeric(i)))
        })
        && build.is_none_or(|b| b.split('.').all(ident))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn areas(v: Value) -> Vec<(Area, Severity)> {
        lint_manifest(&v)
            .into_iter()
            .map(|f| (f.area, f.severity))
            .collect()
    }

    fn good() -> Value {
        json!({
            "name": "t", "version": "1.0.0", "description": "d",
            "tools": [{"name": "echo", "description": "e",
                       "parameters": [{"name": "text", "type": "string", "description": "x"}]}],
            "host_capabilities": ["llm.sample", "aps.kv"],
            "credentials": [{"name": "API_KEY", "description": "k"}]
        })
    }

    #[test]
    fn clean_manifest() {
        assert_eq!(lint_manifest(&good()), vec![]);
    }

    #[test]
    fn pitfalls() {
        assert_eq!(
            areas(json!({"manifest": good()})),
            vec![(Area::Shape, Severity::Error)]
        );
        let mut m = good();
        m["tools"][0]["parameters"] =
            json!({"type": "object", "properties": {"text": {"type": "string"}}});
        assert_eq!(areas(m), vec![(Area::Parameters, Severity::Error)]);
        let mut m = good();
        m["tools"][0]["input_schema"] = json!({"type": "object"});
        assert_eq!(areas(m), vec![(Area::Parameters, Severity::Error)]);
        let mut m = good();
        m["host_capabilities"] = json!(["storage.user"]);
        let f = lint_manifest(&m);
        assert!(f[0].message.contains("aps.kv"), "{}", f[0]);
        m["host_capabilities"] = json!(["llm.samples", "LLM.sample", "aps.kvv", "web.anything"]);
        let f: Vec<String> = lint_manifest(&m).into_iter().map(|f| f.message).collect();
        assert!(f[0].contains("did you mean `llm.sample`?"), "{}", f[0]);
        assert!(f[1].contains("did you mean `llm.sample`?"), "{}", f[1]);
        assert!(f[2].contains("did you mean `aps.kv`?"), "{}", f[2]);
        assert!(!f[3].contains("did you mean"), "{}", f[3]);
        let mut m = good();
        m["version"] = json!("1.0");
        assert_eq!(areas(m), vec![(Area::Fields, Severity::Error)]);
        let mut m = good();
        m["tools"] = json!([{"name": "a", "description": "x"}, {"name": "a", "description": "y"}]);
        assert_eq!(areas(m), vec![(Area::Tools, Severity::Error)]);
        let mut m = good();
        m["tools"][0]["parameters"][0]["type"] = json!("str");
        assert_eq!(areas(m), vec![(Area::Parameters, Severity::Error)]);
        let mut m = good();
        m["tools"] = json!([]);
        assert_eq!(areas(m), vec![(Area::Tools, Severity::Error)]);
    }

    #[test]
    fn parameter_findings_name_the_tool_and_the_parameter() {
        let mut m = good();
        m["tools"][0]["parameters"] = json!([
            {"name": "a", "type": "str", "required": "yes", "enum": 1},
            {"name": "a", "description": "x"}
        ]);
        let found: Vec<(Severity, String)> = lint_manifest(&m)
            .into_iter()
            .map(|f| (f.severity, f.message))
            .collect();
        let error = |m: &str| (Severity::Error, m.to_owned());
        assert_eq!(
            found,
            [
                error(
                    "tool \"echo\": parameter \"a\" has type \"str\"; use string, integer, \
                     number, boolean, array or object"
                ),
                error("tool \"echo\": parameter \"a\": `required` must be a boolean"),
                error("tool \"echo\": parameter \"a\": `enum` must be a list"),
                (
                    Severity::Warning,
                    format!("tool \"echo\": parameter \"a\"{UNDESCRIBED}")
                ),
                error("tool \"echo\": parameter \"a\" is declared twice"),
                error("tool \"echo\": parameter \"a\" has no `type`"),
            ]
        );
    }

    #[test]
    fn a_parameter_without_a_description_is_warned_at_every_depth() {
        let mut m = good();
        m["tools"][0]["parameters"] = json!([
            {"name": "address", "type": "object", "description": "Where",
             "properties": [
                {"name": "city", "type": "string", "description": ""},
                {"name": "geo", "type": "object", "description": "Position",
                 "properties": [{"name": "lat", "type": "number"}]}
             ]},
            {"name": "lines", "type": "array", "description": "  ",
             "items": {"type": "object", "properties": [
                {"name": "sku", "type": "string", "description": "Article"},
                {"name": "qty", "type": "integer", "description": ""}
             ]}}
        ]);
        let found: Vec<(Area, Severity, String)> = lint_manifest(&m)
            .into_iter()
            .map(|f| (f.area, f.severity, f.message))
            .collect();
        let warning = |path: &str| {
            (
                Area::Parameters,
                Severity::Warning,
                format!(
                    "tool \"echo\": parameter \"{path}\" has no `description` (the model reads \
                     it to fill the argument in): add a `///` doc comment to the field, or give \
                     its `Param` one (`Param::string(name, description)`)"
                ),
            )
        };
        assert_eq!(
            found,
            [
                warning("address.city"),
                warning("address.geo.lat"),
                warning("lines"),
                warning("lines[].qty"),
            ]
        );
    }

    #[test]
    fn semver() {
        for ok in [
            "0.1.0",
            "1.2.3",
            "10.20.30",
            "1.0.0-alpha.1",
            "1.0.0+build.5",
            "1.0.0-rc.1+x",
        ] {
            assert!(is_semver(ok), "{ok}");
        }
        for bad in [
            "1.0", "v1.0.0", "01.0.0", "1.0.0-", "1.0.0-01", "1.0.0.0", "", "1..0",
        ] {
            assert!(!is_semver(bad), "{bad}");
        }
    }
}
