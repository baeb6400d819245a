//! The two error layers: [`RpcError`] is what travels on the wire (`code`, `message`, `data`);
//! [`Error`] is what this crate's functions return.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Standard and Executa-specific JSON-RPC error codes used by this crate.
pub mod codes {
    /// The line was not valid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The frame was JSON but not a valid JSON-RPC envelope, or it was too large.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Unknown method, or unknown tool on `invoke`.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Bad params or tool arguments.
    pub const INVALID_PARAMS: i64 = -32602;
    /// A handler panicked or the runtime failed internally.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Implementation-defined: the plugin is shutting down or its queues are full.
    pub const SERVER_BUSY: i64 = -32000;
    /// Sampling: too many calls in one invoke.
    pub const SAMPLING_MAX_CALLS_EXCEEDED: i64 = -32006;
    /// Sampling: token budget of the invoke exceeded, or `maxTokens` above the per-call cap.
    pub const SAMPLING_MAX_TOKENS_EXCEEDED: i64 = -32007;
    /// Sampling: `llm.sample` not declared, or the session is v1.
    pub const SAMPLING_NOT_NEGOTIATED: i64 = -32008;
    /// Storage and files: capability not declared, token missing, or session is v1.
    pub const STORAGE_NOT_GRANTED: i64 = -32021;
    /// Storage and files: a per-invoke quota is exhausted.
    pub const STORAGE_QUOTA_EXCEEDED: i64 = -32024;
}

/// A JSON-RPC error object exactly as it travels on the wire.
///
/// Numeric codes collide between Executa families (-32004 is both sampling's
/// `INVALID_REQUEST` and the dev host's `not_implemented`), so prefer
/// [`RpcError::error_code`], the symbolic `data.errorCode`, when it is present.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// The numeric code.
    pub code: i64,
    /// A human-readable message.
    pub message: String,
    /// Optional structured detail; Executa hosts put `errorCode` here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a code and message and no data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// An error carrying `data: {"errorCode": <symbol>}`.
    pub fn with_code(code: i64, symbol: &str, message: impl Into<String>) -> Self {
        Self::coded(code, symbol, message.into())
    }

    /// [`RpcError::with_code`] without the generic: one copy in a binary, not one per
    /// message type.
    fn coded(code: i64, symbol: &str, message: String) -> Self {
        // Not `json!`: it goes through `serde_json::to_value` and a panic path for its unwrap.
        let mut data = serde_json::Map::new();
        data.insert("errorCode".to_owned(), Value::from(symbol));
        RpcError {
            code,
            message,
            data: Some(Value::Object(data)),
        }
    }

    /// The symbolic `data.errorCode`, when the peer sent one.
    pub fn error_code(&self) -> Option<&str> {
        self.data.as_ref()?.get("errorCode")?.as_str()
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)?;
        if let Some(sym) = self.error_code() {
            write!(f, " [{sym}]")?;
        }
        Ok(())
    }
}

impl std::error::Error for RpcError {}

/// The crate's own error type.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing a stream, or spawning a process, failed.
    Io(std::io::Error),
    /// A value could not be serialized, or a peer's JSON did not have the expected shape.
    Json(serde_json::Error),
    /// The peer answered with a JSON-RPC error.
    Remote(RpcError),
    /// Refused locally before anything was sent (capability gating, budgets, v1 session),
    /// carrying the code the peer would have used.
    Refused(RpcError),
    /// No answer arrived in time; a late answer is dropped.
    Timeout {
        /// The method that was called.
        method: String,
        /// How long the call waited.
        after: Duration,
    },
    /// The peer went away (stdin closed, process exited, shutdown); the text says how.
    Disconnected(String),
    /// A reverse call or progress event was attempted after its invoke ended.
    InvokeEnded,
    /// A frame exceeded the configured cap.
    FrameTooLarge {
        /// Bytes in the frame (at least this many).
        size: usize,
        /// The cap in force.
        max: usize,
    },
    /// The peer broke the protocol (an answer of the wrong shape, a banner on stdout, ...).
    Protocol(String),
    /// The plugin's own definition is refused at start-up: one line per problem (manifest
    /// lint errors, a `.param(...)` list that disagrees with its args type).
    InvalidPlugin(Vec<String>),
}

impl Error {
    /// The JSON-RPC code of a remote or locally refused error.
    pub fn code(&self) -> Option<i64> {
        match self {
            Error::Remote(e) | Error::Refused(e) => Some(e.code),
            _ => None,
        }
    }

    /// The symbolic `data.errorCode` of a remote or locally refused error.
    pub fn error_code(&self) -> Option<&str> {
        match self {
            Error::Remote(e) | Error::Refused(e) => e.error_code(),
            _ => None,
        }
    }

    /// The wire error object, when this error carries one.
    pub fn rpc(&self) -> Option<&RpcError> {
        match self {
            Error::Remote(e) | Error::Refused(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o error: {e}"),
            Error::Json(e) => write!(f, "json error: {e}"),
            Error::Remote(e) => write!(f, "peer error: {e}"),
            Error::Refused(e) => write!(f, "refused locally: {e}"),
            Error::Timeout { method, after } => {
                // Integer parts, not `{:.3}` of an f64: float formatting would add about
                // 12 KB to every plugin binary for this one message.
                let (secs, millis) = (after.as_secs(), after.subsec_millis());
                write!(f, "`{method}` timed out after {secs}.{millis:03}s")
            }
            Error::Disconnected(why) => write!(f, "disconnected: {why}"),
            Error::InvokeEnded => f.write_str("the invoke this call belongs to has already ended"),
            Error::FrameTooLarge { size, max } => {
                write!(
                    f,
                    "frame of at least {size} bytes exceeds the {max}-byte cap"
                )
            }
            Error::Protocol(why) => write!(f, "protocol violation: {why}"),
            Error::InvalidPlugin(problems) => {
                f.write_str("invalid plugin definition")?;
                for (i, p) in problems.iter().enumerate() {
                    f.write_str(if i == 0 { ": " } else { "; " })?;
                    f.write_str(p)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Json(e) => Some(e),
            Error::Remote(e) | Error::Refused(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Json(e)
    }
}

/// Shorthand for `Result<T, executa::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
