//! The plugin side: the author-facing builder and the runtime that serves a plugin over
//! stdio. See `ARCHITECTURE.md` for the threads and the path of one invoke.

mod builder;
mod context;
mod dispatch;
pub(crate) mod events;
mod health;
mod intake;
mod job;
#[cfg(feature = "mcp")]
mod mcp;
mod options;
mod output;
mod pool;
mod reader;
mod relay;
pub mod reverse;
mod runtime;
mod service;
mod session;
mod timer;
mod tool;

pub use builder::Plugin;
pub use context::{Invocation, Served};
pub use health::{Health, HealthStatus};
pub use options::Options;
pub use reverse::InvokeHandle;
pub use runtime::{StopReason, Stopped};
pub use session::Negotiated;
pub use tool::{Tool, ToolError};
