//! The `describe` manifest: typed, serialized once at start-up by the plugin and parsed by
//! the host. Unknown fields are kept in `extra` so nothing a newer platform adds is lost.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The manifest a plugin returns from `describe`, as the bare object (never wrapped).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Plugin name. No longer the platform identity, but hosts still read it: always emitted.
    #[serde(default)]
    pub name: String,
    /// Display name; defaults to `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// SemVer version.
    #[serde(default)]
    pub version: String,
    /// What the plugin does.
    #[serde(default)]
    pub description: String,
    /// Author.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Homepage URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homepage: Option<String>,
    /// Emoji or URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    /// Category, `general` by default on the platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// SPDX license id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// The tools, at least one.
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// Credentials the plugin reads from `context.credentials`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<CredentialSpec>,
    /// Host capabilities the plugin uses (`llm.sample`, `aps.kv`, ...); gates reverse RPC.
    #[serde(default)]
    pub host_capabilities: Vec<String>,
    /// Free-form runtime hints, e.g. `{"type":"binary"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Value>,
    /// Fields this crate does not model, kept as received.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One tool in the manifest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique within the plugin; the `tool` of `invoke`.
    #[serde(default)]
    pub name: String,
    /// The prompt the LLM sees.
    #[serde(default)]
    pub description: String,
    /// The parameter LIST (not JSON Schema). Hosts read only this.
    #[serde(default)]
    pub parameters: Value,
    /// Per-tool invoke timeout in seconds (platform default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Fields without a typed field here, as received. Among them, three that a plugin
    /// built with this crate writes, each only when the tool declares it, for MCP clients
    /// (the Executa Agent reads none of them): `display_name` ([`Tool::display_name`](crate::Tool::display_name), MCP's
    /// `title`), `returns` (the fields of the success `data` in the same LIST form as
    /// `parameters`, from [`Tool::returns`](crate::Tool::returns); MCP's `outputSchema`)
    /// and `hints` (`{"read_only", "destructive", "idempotent", "open_world"}` booleans,
    /// from [`Tool::read_only`](crate::Tool::read_only) and its siblings; MCP's
    /// `annotations`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ToolSpec {
    /// The parameters as typed entries, when `parameters` is the documented list form.
    pub fn param_list(&self) -> Option<Vec<Param>> {
        serde_json::from_value(self.parameters.clone()).ok()
    }
}

/// The JSON type of a tool parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    /// A JSON string.
    String,
    /// A JSON integer.
    Integer,
    /// Any JSON number.
    Number,
    /// `true` or `false`.
    Boolean,
    /// A JSON array; see [`Param::items`].
    Array,
    /// A JSON object.
    Object,
}

impl ParamType {
    /// The name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Number => "number",
            ParamType::Boolean => "boolean",
            ParamType::Array => "array",
            ParamType::Object => "object",
        }
    }

    /// Whether a JSON value has this type.
    pub fn matches(self, v: &Value) -> bool {
        match self {
            ParamType::String => v.is_string(),
            ParamType::Integer => v.is_i64() || v.is_u64(),
            ParamType::Number => v.is_number(),
            ParamType::Boolean => v.is_boolean(),
            ParamType::Array => v.is_array(),
            ParamType::Object => v.is_object(),
        }
    }
}

/// One entry of a tool's `parameters` list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Param {
    /// Argument name.
    pub name: String,
    /// JSON type.
    #[serde(rename = "type")]
    pub kind: ParamType,
    /// What the LLM should put here.
    #[serde(default)]
    pub description: String,
    /// Required unless said otherwise (the platform's default is `true`).
    #[serde(default = "yes")]
    pub required: bool,
    /// Default value for an optional parameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// Allowed values.
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<Value>>,
    /// Element schema for arrays, e.g. `{"type":"string"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Value>,
    /// The fields of an object parameter, in the same LIST form as a tool's `parameters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<Vec<Param>>,
}

fn yes() -> bool {
    true
}

impl Param {
    /// A required parameter.
    pub fn new(name: impl Into<String>, kind: ParamType, description: impl Into<String>) -> Self {
        Param {
            name: name.into(),
            kind,
            description: description.into(),
            required: true,
            default: None,
            allowed: None,
            items: None,
            properties: None,
        }
    }

    /// A required string parameter.
    pub fn string(name: impl Into<String>, description: impl Into<String>) -> Self {
        Param::new(name, ParamType::String, description)
    }

    /// A required integer parameter.
    pub fn integer(name: impl Into<String>, description: impl Into<String>) -> Self {
        Param::new(name, ParamType::Integer, description)
    }

    /// A required number parameter.
    pub fn number(name: impl Into<String>, description: impl Into<String>) -> Self {
        Param::new(name, ParamType::Number, description)
    }

    /// A required boolean parameter.
    pub fn boolean(name: impl Into<String>, description: impl Into<String>) -> Self {
        Param::new(name, ParamType::Boolean, description)
    }

    /// A required array parameter whose elements have type `items`.
    pub fn array(
        name: impl Into<String>,
        items: ParamType,
        description: impl Into<String>,
    ) -> Self {
        let mut p = Param::new(name, ParamType::Array, description);
        p.items = Some(serde_json::json!({ "type": items.as_str() }));
        p
    }

    /// A required object parameter. Describe its fields with [`Param::property`].
    pub fn object(name: impl Into<String>, description: impl Into<String>) -> Self {
        Param::new(name, ParamType::Object, description)
    }

    /// Adds a field to an object parameter's `properties` (a nested parameter list).
    pub fn property(mut self, field: Param) -> Self {
        self.properties.get_or_insert_with(Vec::new).push(field);
        self
    }

    /// Marks the parameter optional.
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }

    /// Sets a default value (and makes the parameter optional).
    pub fn default_value(mut self, value: impl Into<Value>) -> Self {
        self.default = Some(value.into());
        self.required = false;
        self
    }

    /// Restricts the parameter to these values.
    pub fn one_of<V: Into<Value>>(mut self, values: impl IntoIterator<Item = V>) -> Self {
        self.allowed = Some(values.into_iter().map(Into::into).collect());
        self
    }
}

/// A credential the plugin reads from `context.credentials`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CredentialSpec {
    /// UPPER_SNAKE key.
    pub name: String,
    /// Display name; defaults to `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// What it is for.
    #[serde(default)]
    pub description: String,
    /// The plugin is not enabled until required keys are set.
    #[serde(default = "yes")]
    pub required: bool,
    /// Encrypted and shown as a password field.
    #[serde(default = "yes")]
    pub sensitive: bool,
    /// Default, only for non-sensitive values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

impl CredentialSpec {
    /// A required, sensitive credential.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        CredentialSpec {
            name: name.into(),
            display_name: None,
            description: description.into(),
            required: true,
            sensitive: true,
            default: None,
        }
    }

    /// Marks the credential optional.
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }
}

/// Every `host_capabilities` string the platform's validator accepts.
pub const CAPABILITY_ALLOW_LIST: &[&str] = &[
    "aps.kv",
    "aps.files",
    "aps.scope.admin",
    "aps.scope.app.read",
    "aps.scope.app.write",
    "aps.scope.tool.read",
    "aps.scope.tool.write",
    "aps.scope.user.read",
    "aps.scope.user.write",
    "host.upload",
    "llm.sample",
    "llm.complete",
    "llm.embed",
    "llm.agent.auto",
    "llm.agent.fixed",
    "llm.image",
    "llm.image.edit",
    "llm.video",
    "llm.music",
    "llm.audio.speak",
    "llm.audio.transcribe",
    "web.search",
    "web.fetch",
    "web.image_search",
    "web.image_fetch",
];
