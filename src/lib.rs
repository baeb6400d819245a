#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

#[cfg(not(unix))]
compile_error!("executa supports Unix only: it relies on pipes, signals and file descriptors");

mod context;
mod dispatch;
pub mod error;
mod events;
pub mod files;
mod health;
pub mod host;
pub mod id;
mod lock;
mod logger;
pub mod manifest;
mod options;
mod pending;
mod plugin;
mod pool;
mod reader;
pub mod reverse;
mod runtime;
pub mod sampling;
mod secret;
mod session;
mod spin;
pub mod storage;
mod sys;
mod tool;
pub mod wire;
mod writer;

pub use context::Invocation;
pub use error::{Error, Result, RpcError};
pub use health::{Health, HealthStatus};
pub use id::Id;
pub use logger::{LOG_ENV, init_logger};
pub use manifest::{CredentialSpec, Manifest, Param, ParamType, ToolSpec};
pub use options::Options;
pub use plugin::Plugin;
pub use reverse::InvokeHandle;
pub use runtime::{StopReason, Stopped};
pub use sampling::{CreateMessage, ResponseFormat, SamplingMessage, SamplingResult};
pub use secret::Secret;
pub use session::{Negotiated, ProtocolVersion};
pub use storage::Scope;
pub use tool::{Tool, ToolError};
