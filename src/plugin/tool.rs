//! A tool: its manifest entry and its handler.

use std::any::TypeId;
use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::context::Invocation;
use crate::arg_path;
use crate::args::{self, Args};
use crate::manifest::{Param, ToolSpec};

/// Why a tool handler did not produce data.
#[derive(Debug)]
pub struct ToolError {
    kind: ToolErrorKind,
    message: String,
    details: Option<Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ToolErrorKind {
    /// An expected failure: `{success:false, error}`.
    Failed,
    /// Bad arguments: JSON-RPC -32602.
    InvalidArguments,
}

impl ToolError {
    /// An expected, recoverable failure, sent as `{"success":false,"error":message}`.
    pub fn new(message: impl fmt::Display) -> Self {
        ToolError {
            kind: ToolErrorKind::Failed,
            message: message.to_string(),
            details: None,
        }
    }

    /// Bad arguments the handler detected itself, sent as JSON-RPC error -32602.
    pub fn invalid_arguments(message: impl fmt::Display) -> Self {
        ToolError {
            kind: ToolErrorKind::InvalidArguments,
            message: message.to_string(),
            details: None,
        }
    }

    /// Attaches a `details` object to a failure envelope.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn is_invalid_arguments(&self) -> bool {
        self.kind == ToolErrorKind::InvalidArguments
    }

    pub(crate) fn details(&self) -> Option<&Value> {
        self.details.as_ref()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<crate::Error> for ToolError {
    fn from(e: crate::Error) -> Self {
        ToolError::new(e)
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(e: serde_json::Error) -> Self {
        ToolError::new(e)
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        ToolError::new(e)
    }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::new(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        ToolError::new(message)
    }
}

/// Serializes the handler's data into the frame buffer, or says why not. Takes the
/// arguments as JSON text already checked by the reader's parse.
pub(crate) type Handler =
    Box<dyn Fn(&str, &[Param], &Invocation, &mut Vec<u8>) -> Result<(), ToolError> + Send + Sync>;

/// A tool: name, description, parameter list and handler.
///
/// Declare the arguments once with [`args!`](crate::args!) and use [`Tool::typed`]; or
/// write the list by hand with [`Tool::new`] and [`Tool::param`]. Declare the result type
/// the same way and name it with [`Tool::returns`] (MCP clients then get an
/// `outputSchema`), and what the tool does to its environment with [`Tool::read_only`],
/// [`Tool::destructive`], [`Tool::idempotent`] and [`Tool::open_world`].
///
/// ```
/// use executa::{Param, Tool, ToolError};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Args { text: String }
///
/// let tool = Tool::new("shout", "Upper-cases text", |args: Args, _ctx| {
///     Ok::<_, ToolError>(serde_json::json!({ "text": args.text.to_uppercase() }))
/// })
/// .param(Param::string("text", "The text to shout"));
/// assert_eq!(tool.spec().name, "shout");
/// ```
pub struct Tool {
    /// The name, shared with every invocation of the tool (no copy per invoke).
    pub(crate) name: Arc<str>,
    pub(crate) spec: ToolSpec,
    pub(crate) params: Vec<Param>,
    /// The list the args type declares ([`Tool::typed`]), checked against `params`.
    pub(crate) declared: Option<Vec<Param>>,
    /// The fields the handler's type reads ([`Tool::new`] only), for the start-up check
    /// of unpublished fields.
    fields: Option<args::Unpublished>,
    /// The type the handler returns, which [`Tool::returns`] must name.
    result: TypeId,
    /// Why the [`Tool::returns`] declaration cannot describe the handler's data, if it
    /// cannot: the plugin refuses to start with it (taken by the builder's check).
    pub(crate) returns_problem: Option<String>,
    pub(crate) handler: Handler,
}

impl Tool {
    /// A tool whose handler takes typed arguments `A` (any `Deserialize`; use
    /// `serde_json::Value` for free-form, `serde::de::IgnoredAny` for none) and returns data
    /// `R` (any `Serialize`; a non-object is wrapped as `{"value": ...}`).
    ///
    /// The handler runs on a runtime thread while other requests are served; it may block
    /// (for example on a reverse call to the host). It may run on the reader thread itself
    /// (see [`Options::inline`](super::Options::inline)): that changes nothing for the
    /// handler, since a call to the host is then read by the same thread, and reading moves
    /// to another thread once the handler has run for that long.
    pub fn new<A, R, F>(name: impl Into<String>, description: impl Into<String>, handler: F) -> Self
    where
        A: DeserializeOwned,
        R: Serialize + 'static,
        F: Fn(A, &Invocation) -> Result<R, ToolError> + Send + Sync + 'static,
    {
        let mut tool = Tool::erased(name, description, handler);
        tool.fields = Some(|tool, published, problems| {
            args::unpublished(tool, args::field_names::<A>(), published, problems)
        });
        tool
    }

    /// The tool without its field names: [`Tool::typed`] needs none (its list is complete
    /// by construction).
    fn erased<A, R, F>(name: impl Into<String>, description: impl Into<String>, handler: F) -> Self
    where
        A: DeserializeOwned,
        R: Serialize + 'static,
        F: Fn(A, &Invocation) -> Result<R, ToolError> + Send + Sync + 'static,
    {
        // The list is fixed once the plugin runs: its defaults are looked up once.
        let defaults = OnceLock::new();
        let erased: Handler = Box::new(move |raw, params, ctx, out| {
            let args: A = parse_args(raw, defaults_of(&defaults, params))?;
            let data = handler(args, ctx)?;
            if crate::json_text::write_result(out, &data) {
                return Ok(());
            }
            crate::wire::write_json(out, &data)
                .map_err(|e| ToolError::new(format!("tool result failed to serialize: {e}")))
        });
        let name: String = name.into();
        Tool {
            name: Arc::from(name.as_str()),
            spec: ToolSpec {
                name,
                description: description.into(),
                parameters: Value::Array(Vec::new()),
                timeout: None,
                extra: Map::new(),
            },
            params: Vec::new(),
            declared: None,
            fields: None,
            result: TypeId::of::<R>(),
            returns_problem: None,
            handler: erased,
        }
    }

    /// A tool whose parameter list comes from its argument type, declared once with
    /// [`args!`](crate::args!): names, types, descriptions, required, defaults (filled in
    /// before `A` is deserialized), nested properties, item types and enums.
    ///
    /// A `.param(...)` list added as well replaces the derived one in the manifest, and
    /// must agree with it (names, `required`, defaults): the plugin refuses to start,
    /// naming each difference, when it does not.
    ///
    /// ```
    /// use executa::{Tool, ToolError};
    ///
    /// executa::args! {
    ///     struct Args {
    ///         /// The text to shout
    ///         text: String,
    ///         /// How many exclamation marks
    ///         marks: usize = 1,
    ///     }
    /// }
    ///
    /// let tool = Tool::typed("shout", "Upper-cases text", |a: Args, _ctx| {
    ///     Ok::<_, ToolError>(format!("{}{}", a.text.to_uppercase(), "!".repeat(a.marks)))
    /// });
    /// assert_eq!(tool.spec().parameters[1]["default"], 1);
    /// ```
    pub fn typed<A, R, F>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Self
    where
        A: DeserializeOwned + Args,
        R: Serialize + 'static,
        F: Fn(A, &Invocation) -> Result<R, ToolError> + Send + Sync + 'static,
    {
        let mut tool = Tool::erased(name, description, handler);
        tool.declared = Some(A::params());
        tool
    }

    /// Adds a parameter to the tool's `parameters` list.
    pub fn param(mut self, param: Param) -> Self {
        self.params.push(param);
        self
    }

    /// Sets the per-tool timeout the host applies, in seconds (platform default 60).
    pub fn timeout_secs(mut self, seconds: u64) -> Self {
        self.spec.timeout = Some(seconds);
        self
    }

    /// Declares the handler's result type `T`: an [`args!`](crate::args!) struct that also
    /// derives `serde::Serialize`. Its fields, from the same lines that declare the type,
    /// become the manifest's `returns` list (the same LIST form as `parameters`) and the
    /// tool's `outputSchema` for MCP clients, which check each result's
    /// `structuredContent` against it. An `Option` field may be `null` there; every other
    /// field is required.
    ///
    /// `T` must be the type the handler returns, and the struct may not rename its fields
    /// (`#[serde(rename_all = ...)]`): the plugin refuses to start, naming the tool, when
    /// the schema would not describe the data.
    ///
    /// ```
    /// use executa::{Tool, ToolError};
    ///
    /// executa::args! {
    ///     struct SumArgs {
    ///         /// The numbers to add
    ///         numbers: Vec<f64>,
    ///     }
    ///
    ///     #[derive(serde::Serialize)]
    ///     struct Sum {
    ///         /// The total
    ///         total: f64,
    ///         /// How many numbers were added
    ///         count: usize,
    ///     }
    /// }
    ///
    /// let tool = Tool::typed("sum", "Adds numbers", |a: SumArgs, _ctx| {
    ///     Ok::<_, ToolError>(Sum { total: a.numbers.iter().sum(), count: a.numbers.len() })
    /// })
    /// .returns::<Sum>()
    /// .read_only()
    /// .open_world(false);
    /// let spec = tool.spec();
    /// assert_eq!(spec.extra["returns"][0]["name"], "total");
    /// assert_eq!(spec.extra["returns"][1]["type"], "integer");
    /// assert_eq!(spec.extra["hints"]["read_only"], true);
    /// ```
    pub fn returns<T>(mut self) -> Self
    where
        T: Args + Serialize + DeserializeOwned + 'static,
    {
        let params = T::params();
        self.returns_problem = returns_problem::<T>(&self.spec.name, self.result, &params);
        self.spec
            .extra
            .insert("returns".into(), args::params_json(&params));
        self
    }

    /// Sets a name for people to read, shown by clients that list tools (MCP's `title`);
    /// the model still calls the tool by its name. Published as the tool's `display_name`.
    #[doc(alias = "title")]
    pub fn display_name(mut self, text: impl Into<String>) -> Self {
        self.spec
            .extra
            .insert("display_name".into(), Value::String(text.into()));
        self
    }

    /// Declares that the tool does not modify its environment (MCP's `readOnlyHint`): a
    /// client may call it without asking first.
    pub fn read_only(self) -> Self {
        self.hint("read_only", true)
    }

    /// Declares whether the tool may destroy or overwrite (`true`) or only adds to its
    /// environment (`false`) (MCP's `destructiveHint`, assumed `true` when undeclared).
    /// Meaningful only for a tool that is not [read-only](Tool::read_only).
    pub fn destructive(self, destructive: bool) -> Self {
        self.hint("destructive", destructive)
    }

    /// Declares that calling the tool again with the same arguments has no further effect
    /// (MCP's `idempotentHint`): a client may retry it. Meaningful only for a tool that is
    /// not [read-only](Tool::read_only).
    pub fn idempotent(self) -> Self {
        self.hint("idempotent", true)
    }

    /// Declares whether the tool reaches an open world of outside entities, such as the
    /// web (`true`), or only a closed domain, such as its own store (`false`) (MCP's
    /// `openWorldHint`, assumed `true` when undeclared).
    pub fn open_world(self, open: bool) -> Self {
        self.hint("open_world", open)
    }

    fn hint(mut self, key: &str, value: bool) -> Self {
        let hints = self
            .spec
            .extra
            .entry("hints")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(hints) = hints {
            hints.insert(key.into(), Value::Bool(value));
        }
        self
    }

    /// The parameter list the manifest publishes: the `.param(...)` list when there is
    /// one, else the one the args type declares.
    pub(crate) fn effective_params(&self) -> &[Param] {
        match &self.declared {
            Some(declared) if self.params.is_empty() => declared,
            _ => &self.params,
        }
    }

    /// Where the `.param(...)` list and the args type disagree, one line each.
    pub(crate) fn disagreements(&self) -> Vec<String> {
        match &self.declared {
            Some(declared) if !self.params.is_empty() => {
                args::disagreements(&self.spec.name, &self.params, declared)
            }
            _ => Vec::new(),
        }
    }

    /// Adds to `problems` a line for each field the args type reads that the published list
    /// leaves out: the model would never be told about it. A [`Tool::typed`] list is
    /// complete by construction (and a `.param` list beside it is compared by
    /// `disagreements`).
    pub(crate) fn unpublished(&self, problems: &mut Vec<String>) {
        if let Some(fields) = self.fields {
            fields(&self.spec.name, &self.params, problems);
        }
    }

    /// The manifest entry as it will be published.
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.spec.name.clone(),
            description: self.spec.description.clone(),
            parameters: args::params_json(self.effective_params()),
            timeout: self.spec.timeout,
            extra: self.spec.extra.clone(),
        }
    }
}

/// Why `T`'s fields (`params`) would not describe what a handler returning the type
/// `result` sends: `T` is another type, or serde writes its fields under other names than
/// the declared ones. Made once per `.returns`, at build time.
fn returns_problem<T: DeserializeOwned + 'static>(
    tool: &str,
    result: TypeId,
    params: &[Param],
) -> Option<String> {
    let name = std::any::type_name::<T>();
    if TypeId::of::<T>() != result {
        return Some(format!(
            "tool `{tool}`: `.returns::<{name}>()` names a type its handler does not return"
        ));
    }
    let serde_names = args::field_names::<T>();
    let same = serde_names.len() == params.len()
        && params.iter().zip(serde_names).all(|(p, s)| p.name == *s);
    (!same).then(|| {
        format!(
            "tool `{tool}`: `{name}` renames its fields for serde ({serde_names:?}), so its \
             declared fields would not describe the result: drop the `rename` attribute"
        )
    })
}

/// Deserializes the arguments, with declared defaults filled in first. A rejection is a
/// -32602 naming the path of the offending value, also given as `data.path`.
fn parse_args<A: DeserializeOwned>(raw: &str, defaults: Option<&Value>) -> Result<A, ToolError> {
    let text = with_defaults(raw, defaults)?;
    serde_json::from_str(&text).map_err(|e| invalid(&text, &e))
}

/// The argument text with missing defaults filled in; borrowed when there are none.
/// Not generic, so one copy serves every tool.
fn with_defaults<'a>(raw: &'a str, defaults: Option<&Value>) -> Result<Cow<'a, str>, ToolError> {
    let Some(params) = defaults else {
        return Ok(Cow::Borrowed(raw));
    };
    if let Some(text) = top_level_defaults(raw, params) {
        return Ok(text);
    }
    let mut value: Value = serde_json::from_str(raw).map_err(|e| invalid(raw, &e))?;
    if let Some(map) = value.as_object_mut() {
        args::apply_defaults(map, params);
    }
    Ok(Cow::Owned(serde_json::to_string(&value)?))
}

/// The common case of [`with_defaults`] without a `Value` tree: only top-level defaults
/// are missing, so they are appended after the last member (or none is, and the text is
/// borrowed). `None` (the general path decides) when the text is not an object with plain
/// keys, when a default would replace a `null`, or when a given object or array may need
/// nested defaults.
fn top_level_defaults<'a>(raw: &'a str, params: &Value) -> Option<Cow<'a, str>> {
    let list = params.as_array()?;
    let Members(given) = serde_json::from_str(raw).ok()?;
    let mut added: Vec<u8> = Vec::new();
    for p in list {
        let Some(name) = p.get("name").and_then(Value::as_str) else {
            continue;
        };
        let default = p.get("default");
        match given.iter().find(|(key, _)| *key == name).map(|(_, v)| v) {
            None => {
                if let Some(d) = default {
                    if !added.is_empty() || !given.is_empty() {
                        added.push(b',');
                    }
                    crate::wire::serialize_into(&mut added, name);
                    added.push(b':');
                    crate::wire::serialize_into(&mut added, d);
                }
            }
            Some(v) if v.get() == "null" && default.is_some() => return None,
            Some(_) if args::has_nested_defaults(p) => return None,
            Some(_) => {}
        }
    }
    if added.is_empty() {
        return Some(Cow::Borrowed(raw));
    }
    let open = raw.trim_end().strip_suffix('}')?;
    let mut text = String::with_capacity(open.len() + added.len() + 1);
    text.push_str(open);
    text.push_str(std::str::from_utf8(&added).ok()?);
    text.push('}');
    Some(Cow::Owned(text))
}

/// The members of a JSON object, keys borrowed (an escaped key fails the parse), values
/// raw. A hand-written visitor: a map type here would cost plugin binaries 7 KB.
struct Members<'a>(Vec<(&'a str, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Members<'de>, M::Error> {
                let mut members = Vec::new();
                while let Some(key) = m.next_key::<&'de str>()? {
                    members.push((key, m.next_value::<&'de RawValue>()?));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// The parameter list as JSON when it declares defaults, worked out at the first invoke.
fn defaults_of<'a>(cell: &'a OnceLock<Option<Value>>, params: &[Param]) -> Option<&'a Value> {
    cell.get_or_init(|| {
        let list = args::params_json(params);
        args::has_defaults(&list).then_some(list)
    })
    .as_ref()
}

fn invalid(text: &str, err: &serde_json::Error) -> ToolError {
    let what = arg_path::message(err);
    let path = arg_path::error_path(text, err, &what);
    // serde's text quotes the value it rejected, which may be most of a 16 MiB frame.
    let what = crate::wire::elide(&what, crate::wire::QUOTE_BYTES);
    match path {
        Some(path) => {
            let message = format!("invalid arguments: `{path}`: {what}");
            // Not `json!`: it goes through `serde_json::to_value` and a panic path.
            let mut details = Map::new();
            details.insert("path".to_owned(), Value::String(path));
            ToolError::invalid_arguments(message).with_details(Value::Object(details))
        }
        None => ToolError::invalid_arguments(format!("invalid arguments: {what}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params() -> Value {
        json!([
            { "name": "prompt" },
            { "name": "max_tokens", "default": 256 },
            { "name": "style", "default": "plain \"quoted\"" },
            { "name": "opts", "properties": [{ "name": "depth", "default": 2 }] },
            {
                "name": "rows",
                "properties": [{ "name": "unused" }],
                "items": { "properties": [{ "name": "width", "default": 1 }] },
            },
        ])
    }

    fn filled(raw: &str) -> Value {
        let text = with_defaults(raw, Some(&params())).expect("valid arguments");
        serde_json::from_str(&text).expect("filled arguments are JSON")
    }

    #[test]
    fn missing_top_level_defaults_are_appended_and_present_ones_kept() {
        let p = params();
        let text = top_level_defaults(r#"{"prompt":"hi"}"#, &p).expect("the fast path");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({ "prompt": "hi", "max_tokens": 256, "style": "plain \"quoted\"" })
        );
        let all = r#"{ "prompt":"hi", "max_tokens":1, "style":"x" }"#;
        assert!(matches!(top_level_defaults(all, &p), Some(Cow::Borrowed(t)) if t == all));
        let empty = top_level_defaults("{ }", &p).expect("the fast path");
        assert_eq!(
            serde_json::from_str::<Value>(&empty).unwrap(),
            json!({ "max_tokens": 256, "style": "plain \"quoted\"" })
        );
    }

    #[test]
    fn nulls_nested_defaults_and_escaped_keys_take_the_general_path_with_the_same_result() {
        let p = params();
        for raw in [
            r#"{"prompt":"hi","max_tokens":null}"#,
            r#"{"prompt":"hi","opts":{}}"#,
            r#"{"prompt":"hi","rows":[{}]}"#,
            r#"{"pro\u006dpt":"hi"}"#,
        ] {
            assert!(top_level_defaults(raw, &p).is_none(), "{raw}");
        }
        assert_eq!(
            filled(r#"{"prompt":"hi","max_tokens":null}"#)["max_tokens"],
            256
        );
        assert_eq!(filled(r#"{"opts":{}}"#)["opts"], json!({ "depth": 2 }));
        assert_eq!(filled(r#"{"rows":[{}]}"#)["rows"], json!([{ "width": 1 }]));
        assert_eq!(filled(r#"{"pro\u006dpt":"hi"}"#)["prompt"], "hi");
        assert_eq!(filled(r#"{"pro\u006dpt":"hi"}"#)["max_tokens"], 256);
    }

    crate::args! {
        #[derive(serde::Serialize)]
        struct Out {
            /// Total
            total: u32,
            /// Note
            note: Option<String>,
        }

        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Renamed {
            /// Total
            total_count: u32,
        }
    }

    fn out(_: Value, _: &Invocation) -> Result<Out, ToolError> {
        Ok(Out {
            total: 1,
            note: None,
        })
    }

    #[test]
    fn a_declared_result_type_is_published_as_a_returns_list() {
        let tool = Tool::new("t", "T", out).returns::<Out>();
        assert!(tool.returns_problem.is_none());
        assert_eq!(
            tool.spec().extra.get("returns").cloned(),
            Some(json!([
                {"name": "total", "type": "integer", "description": "Total", "required": true},
                {"name": "note", "type": "string", "description": "Note", "required": false}
            ]))
        );
    }

    #[test]
    fn a_result_type_that_does_not_describe_the_data_refuses_to_start() {
        let other = Tool::new("t", "T", |_: Value, _: &Invocation| {
            Ok::<_, ToolError>(json!({}))
        })
        .returns::<Out>();
        let found: Vec<String> = other.returns_problem.clone().into_iter().collect();
        assert_eq!(found.len(), 1);
        assert!(
            found[0].starts_with("tool `t`: `.returns::<")
                && found[0].ends_with("Out>()` names a type its handler does not return"),
            "{found:?}"
        );
        let renamed = Tool::new("r", "R", |_: Value, _: &Invocation| {
            Ok::<_, ToolError>(Renamed { total_count: 1 })
        })
        .returns::<Renamed>();
        let found: Vec<String> = renamed.returns_problem.into_iter().collect();
        assert_eq!(found.len(), 1);
        assert!(found[0].contains("renames its fields"), "{found:?}");
        let refused = crate::Plugin::new("p", "1.0.0")
            .description("d")
            .tool(other)
            .serve(std::io::empty(), std::io::sink());
        assert!(
            matches!(&refused, Err(crate::Error::InvalidPlugin(p)) if p.len() == 1),
            "{refused:?}"
        );
    }

    #[test]
    fn a_tool_that_declares_nothing_more_publishes_the_same_entry() {
        let plain = Tool::new("t", "T", out).timeout_secs(5);
        assert_eq!(
            serde_json::to_string(&plain.spec()).unwrap_or_default(),
            r#"{"name":"t","description":"T","parameters":[],"timeout":5}"#
        );
        let declared = Tool::new("t", "T", out)
            .display_name("The T")
            .read_only()
            .destructive(false)
            .idempotent()
            .open_world(false);
        assert_eq!(
            serde_json::to_value(declared.spec()).unwrap_or_default(),
            json!({"name": "t", "description": "T", "parameters": [], "display_name": "The T",
                   "hints": {"read_only": true, "destructive": false, "idempotent": true,
                             "open_world": false}})
        );
    }

    #[test]
    fn arguments_that_are_not_an_object_are_left_to_the_typed_parse() {
        assert!(top_level_defaults("[1]", &params()).is_none());
        assert_eq!(filled("[1]"), json!([1]));
    }
}
