//! What the host's calls return: the negotiated session, health, invoke results, how a
//! process ended, and what the plugin wrote on stdout that was not a frame.

use std::fmt;
use std::process::ExitStatus;
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::protocol::ProtocolVersion;

/// The outcome of the `initialize` handshake.
#[derive(Clone, Debug, PartialEq)]
pub struct Handshake {
    /// The version in force: [`ProtocolVersion::V2`] when `initialize` was answered
    /// (reverse RPC available), [`ProtocolVersion::V1`] after a fallback to 1.1 (no
    /// reverse RPC), `None` when `initialize` was skipped (dev-host mode: reverse calls
    /// are allowed, as there).
    pub protocol: Option<ProtocolVersion>,
    /// Why the session fell back to 1.1, when it did (recorded, never surfaced as an error).
    pub fallback: Option<String>,
    /// `serverInfo` / `server_info` from the plugin.
    pub server_info: Option<Value>,
    /// The host capabilities the plugin says it will use (`capabilities` merged with
    /// `client_capabilities`).
    pub capabilities: Map<String, Value>,
    /// The `protocolVersion` the plugin echoed, if any.
    pub echoed_version: Option<String>,
    /// The MCP revision in force (`2025-11-25`, ...) when the child is an MCP server
    /// ([`Protocol::Mcp`](super::Protocol::Mcp), or detected under
    /// [`Protocol::Auto`](super::Protocol::Auto)); `None` for an Executa plugin.
    pub mcp_revision: Option<String>,
    /// An MCP server's `instructions` (its description in the manifest made from
    /// `tools/list`).
    pub instructions: Option<String>,
    /// How long the handshake took.
    pub elapsed: Duration,
}

impl Handshake {
    pub(crate) fn fell_back(reason: String, elapsed: Duration) -> Self {
        Handshake {
            protocol: Some(ProtocolVersion::V1),
            fallback: Some(reason),
            server_info: None,
            capabilities: Map::new(),
            echoed_version: None,
            mcp_revision: None,
            instructions: None,
            elapsed,
        }
    }

    /// The version as text: `"2.0"`, `"1.1"`, `"mcp"` for an MCP server (its revision is
    /// [`Handshake::mcp_revision`]), or `"none"` when `initialize` was skipped.
    pub fn version_str(&self) -> &'static str {
        if self.mcp_revision.is_some() {
            return "mcp";
        }
        match self.protocol {
            Some(ProtocolVersion::V2) => "2.0",
            Some(ProtocolVersion::V1) => "1.1",
            None => "none",
        }
    }

    /// Whether reverse RPC is available (v2 negotiated, or `initialize` skipped).
    pub fn reverse_rpc(&self) -> bool {
        self.protocol != Some(ProtocolVersion::V1)
    }

    pub(crate) fn skipped() -> Self {
        Handshake {
            protocol: None,
            fallback: None,
            server_info: None,
            capabilities: Map::new(),
            echoed_version: None,
            mcp_revision: None,
            instructions: None,
            elapsed: Duration::ZERO,
        }
    }

    /// Reads a successful `initialize` result. A plugin that explicitly answers "1.x" gets
    /// a 1.1 session; anything else that answered is v2.
    pub(crate) fn from_result(raw: &RawValue, elapsed: Duration) -> Self {
        let v: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
        let echoed = v
            .get("protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut caps = Map::new();
        for key in ["client_capabilities", "capabilities"] {
            if let Some(Value::Object(m)) = v.get(key) {
                caps.extend(m.clone());
            }
        }
        let server_info = v
            .get("serverInfo")
            .or_else(|| v.get("server_info"))
            .cloned();
        let (protocol, fallback) = match echoed.as_deref() {
            Some(s) if s.starts_with("1.") => (
                ProtocolVersion::V1,
                Some(format!("plugin answered protocolVersion {s:?}")),
            ),
            _ => (ProtocolVersion::V2, None),
        };
        Handshake {
            protocol: Some(protocol),
            fallback,
            server_info,
            capabilities: caps,
            echoed_version: echoed,
            mcp_revision: None,
            instructions: None,
            elapsed,
        }
    }
}

/// The answer to `health`.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthReport {
    /// `ready`, `error` or `initializing` (some plugins say `healthy` or `ok`).
    pub status: String,
    /// Free text.
    pub message: String,
    /// Free-form details.
    pub details: Value,
    /// `false` when the plugin answered -32601, which the Agent counts as healthy.
    pub implemented: bool,
}

impl HealthReport {
    /// Whether the Agent would count the plugin healthy (`ready`, `healthy`, `ok`, or no
    /// `health` method at all).
    pub fn is_healthy(&self) -> bool {
        !self.implemented || matches!(self.status.as_str(), "ready" | "healthy" | "ok")
    }

    pub(crate) fn unimplemented() -> Self {
        HealthReport {
            status: "ready".to_owned(),
            message: String::new(),
            details: Value::Null,
            implemented: false,
        }
    }

    pub(crate) fn from_result(raw: &RawValue) -> Result<Self> {
        let v: Value = serde_json::from_str(raw.get())?;
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let status = text("status").ok_or_else(|| {
            Error::Protocol(format!(
                "health result has no string `status`: {}",
                raw.get()
            ))
        })?;
        Ok(HealthReport {
            status,
            message: text("message").unwrap_or_default(),
            details: v.get("details").cloned().unwrap_or(Value::Null),
            implemented: true,
        })
    }
}

/// The `{success, data, error}` envelope of an `invoke` result, as the Agent decodes it.
/// Unknown fields are kept in [`InvokeResult::extra`].
#[derive(Clone, Debug)]
pub struct InvokeResult {
    /// Whether the tool succeeded.
    pub success: bool,
    /// What the LLM or App sees (`null` when absent).
    pub data: Value,
    /// The failure text of a `success: false` result (an object error is kept as its
    /// `message` field or its JSON text).
    pub error: Option<String>,
    /// Optional `details` of a failure.
    pub details: Option<Value>,
    /// The plugin's own timing, when it reports one.
    pub duration_ms: Option<u64>,
    /// Every other field.
    pub extra: Map<String, Value>,
    /// The invoke id the host minted for this call.
    pub invoke_id: String,
    /// Wall time from sending the request to reading the reply.
    pub elapsed: Duration,
    /// The whole result exactly as the plugin sent it.
    pub raw: Box<RawValue>,
}

impl InvokeResult {
    /// Parses a result. A result that is not an object, or lacks a boolean `success` (the
    /// Agent then counts it as a failure with no message, pitfall #5), is a
    /// [`Error::Protocol`].
    pub(crate) fn parse(raw: Box<RawValue>, invoke_id: String, elapsed: Duration) -> Result<Self> {
        let Value::Object(mut map) = serde_json::from_str(raw.get())? else {
            return Err(Error::Protocol(format!(
                "invoke result must be an object {{success, data, ...}}, got {}",
                snippet(raw.get())
            )));
        };
        let Some(success) = map.remove("success").as_ref().and_then(Value::as_bool) else {
            return Err(Error::Protocol(format!(
                "invoke result has no boolean `success` field (the Agent treats it as a failure): {}",
                snippet(raw.get())
            )));
        };
        let error = map.remove("error").and_then(|e| match e {
            Value::Null => None,
            Value::String(s) => Some(s),
            Value::Object(ref o) => Some(
                o.get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| e.to_string(), str::to_owned),
            ),
            other => Some(other.to_string()),
        });
        Ok(InvokeResult {
            success,
            data: map.remove("data").unwrap_or(Value::Null),
            error,
            details: map.remove("details"),
            duration_ms: map.remove("duration_ms").and_then(|d| d.as_u64()),
            extra: map,
            invoke_id,
            elapsed,
            raw,
        })
    }
}

/// The first 200 characters of some JSON text, for error messages.
pub(crate) fn snippet(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// Which step of the shutdown sequence ended the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStage {
    /// It had already exited before shutdown began.
    AlreadyExited,
    /// It exited after stdin was closed, within the grace period (the polite way).
    StdinClosed,
    /// It needed `SIGTERM`.
    Terminated,
    /// It needed `SIGKILL`.
    Killed,
}

impl fmt::Display for ExitStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExitStage::AlreadyExited => "had already exited",
            ExitStage::StdinClosed => "exited after stdin closed",
            ExitStage::Terminated => "needed SIGTERM",
            ExitStage::Killed => "needed SIGKILL",
        })
    }
}

/// How a plugin process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// The step that ended it.
    pub stage: ExitStage,
    /// Its exit status; `None` only if it could not be reaped even after `SIGKILL`.
    pub status: Option<ExitStatus>,
    /// How long the shutdown took.
    pub elapsed: Duration,
}

impl ShutdownReport {
    /// Exited by itself after stdin closed, with status 0: what the platform expects.
    pub fn is_clean(&self) -> bool {
        self.stage == ExitStage::StdinClosed && self.status.is_some_and(|s| s.success())
    }
}

impl fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {:.3}s", self.stage, self.elapsed.as_secs_f64())?;
        match self.status {
            Some(s) => write!(f, " ({s})"),
            None => f.write_str(" (not reaped)"),
        }
    }
}

/// What the plugin wrote on stdout that was not a JSON-RPC frame (it was skipped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StdoutNoise {
    /// Lines that were not JSON at all (banners, prints).
    pub non_json: u64,
    /// JSON lines that were not valid JSON-RPC envelopes.
    pub invalid: u64,
    /// The first few such lines, shortened.
    pub samples: Vec<String>,
}

impl StdoutNoise {
    /// Whether stdout carried nothing but frames.
    pub fn is_clean(&self) -> bool {
        self.non_json == 0 && self.invalid == 0
    }
}
