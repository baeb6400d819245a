//! The `health` probe's answer.

use serde::Serialize;
use serde_json::{Map, Value};

/// The state a plugin reports to `health`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Serving normally.
    Ready,
    /// Something is wrong; `message` says what.
    Error,
    /// Still starting (e.g. warming a cache).
    Initializing,
}

/// The `health` result: `{status, message, details}`.
#[derive(Clone, Debug, Serialize)]
pub struct Health {
    /// The state.
    pub status: HealthStatus,
    /// Human-readable detail, empty when ready.
    pub message: String,
    /// Free-form structured detail.
    pub details: Value,
}

impl Health {
    /// `{"status":"ready","message":"","details":{}}`.
    pub fn ready() -> Self {
        Health {
            status: HealthStatus::Ready,
            message: String::new(),
            details: Value::Object(Map::new()),
        }
    }

    /// An error status with a message.
    pub fn error(message: impl Into<String>) -> Self {
        Health {
            status: HealthStatus::Error,
            message: message.into(),
            details: Value::Object(Map::new()),
        }
    }

    /// An initializing status with a message.
    pub fn initializing(message: impl Into<String>) -> Self {
        Health {
            status: HealthStatus::Initializing,
            message: message.into(),
            details: Value::Object(Map::new()),
        }
    }
}
