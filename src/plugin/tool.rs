//! A tool: its manifest entry and its handler.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::context::Invocation;
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

/// Serializes the handler's data into the frame buffer, or says why not.
pub(crate) type Handler = Box<
    dyn Fn(&RawValue, &[Param], &Invocation, &mut Vec<u8>) -> Result<(), ToolError> + Send + Sync,
>;

/// A tool: name, description, parameter list and handler.
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
    pub(crate) handler: Handler,
}

impl Tool {
    /// A tool whose handler takes typed arguments `A` (any `Deserialize`; use
    /// `serde_json::Value` for free-form, `serde::de::IgnoredAny` for none) and returns data
    /// `R` (any `Serialize`; a non-object is wrapped as `{"value": ...}`).
    ///
    /// The handler runs on a runtime thread while other requests are served; it may block
    /// (for example on a reverse call to the host).
    pub fn new<A, R, F>(name: impl Into<String>, description: impl Into<String>, handler: F) -> Self
    where
        A: DeserializeOwned,
        R: Serialize,
        F: Fn(A, &Invocation) -> Result<R, ToolError> + Send + Sync + 'static,
    {
        let erased: Handler = Box::new(move |raw, params, ctx, out| {
            let args: A = serde_json::from_str(raw.get())
                .map_err(|e| ToolError::invalid_arguments(describe_args_error(raw, params, &e)))?;
            let data = handler(args, ctx)?;
            serde_json::to_writer(&mut *out, &data)
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
            handler: erased,
        }
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

    /// The manifest entry as it will be published.
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.spec.name.clone(),
            description: self.spec.description.clone(),
            parameters: serde_json::to_value(&self.params).unwrap_or(Value::Array(Vec::new())),
            timeout: self.spec.timeout,
            extra: Map::new(),
        }
    }
}

/// Builds a -32602 message that names the offending field. serde names a missing field
/// itself but not the field of a type error, so the declared parameter list is checked
/// first, and serde's own message (with its position) is kept as the detail.
fn describe_args_error(raw: &RawValue, params: &[Param], err: &serde_json::Error) -> String {
    let found = serde_json::from_str::<Map<String, Value>>(raw.get())
        .ok()
        .and_then(|args| first_mismatch(&args, params));
    match found {
        Some(what) => format!("invalid arguments: {what} ({err})"),
        None => format!("invalid arguments: {err}"),
    }
}

fn first_mismatch(args: &Map<String, Value>, params: &[Param]) -> Option<String> {
    params.iter().find_map(|p| match args.get(&p.name) {
        None | Some(Value::Null) if p.required => Some(format!("field `{}` is required", p.name)),
        Some(v) if !v.is_null() && !p.kind.matches(v) => Some(format!(
            "field `{}` must be {}, got {}",
            p.name,
            p.kind.as_str(),
            json_type(v)
        )),
        _ => None,
    })
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
