#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

#[cfg(not(any(unix, windows)))]
compile_error!("executa supports Unix and Windows: it relies on pipes and their handles");

// Shared by both sides: the wire format, ids, errors, the output writer, the manifest,
// the parameter declarations and the manifest lint, the protocol's rules, secrets, and
// the one libc module.
mod arg_path;
pub mod args;
pub mod error;
pub mod id;
mod json_scan;
mod json_text;
pub mod lint;
mod lock;
mod log_limit;
mod logger;
pub mod manifest;
mod oneshot;
mod protocol;
mod secret;
mod spin;
mod sys;
mod threads;
pub mod wire;
mod writer;

// The plugin side: the builder and the runtime.
mod plugin;

/// The guide's pages (`docs/`), compiled as doctests so every Rust block in them builds
/// (and runs unless marked `no_run`) like the front page's; `tests/docs.rs` checks that
/// every page is listed here.
#[cfg(doctest)]
mod guide {
    macro_rules! pages {
        ($($name:ident = $file:literal),* $(,)?) => {
            $(#[doc = include_str!(concat!("../docs/", $file))] mod $name {})*
        };
    }
    pages! {
        index = "README.md",
        testing = "testing.md",
        parameters = "parameters.md",
        command_line = "command-line.md",
        reverse_calls = "reverse-calls.md",
        host_and_cli = "host-and-cli.md",
        mcp = "mcp.md",
        threading = "threading.md",
        logging = "logging.md",
        protocol_choices = "protocol-choices.md",
        upgrading = "upgrading.md",
        size_and_static = "size-and-static.md",
        platforms = "platforms.md",
        fuzzing = "fuzzing.md",
        benchmarks = "benchmarks.md",
    }
}

// The host side: drive any plugin the way the Agent does.
#[cfg(feature = "host")]
pub mod host;

// Testing a plugin in-process with the host side's backends.
#[cfg(feature = "host")]
pub use host::testing;

pub use args::{Args, ParamSchema};
pub use error::{Error, Result, RpcError};
pub use id::Id;
pub use logger::{LOG_ENV, init_logger};
pub use manifest::{CredentialSpec, Manifest, Param, ParamType, ToolSpec};
pub use plugin::Served;
pub use plugin::reverse::sampling::{
    CreateMessage, ResponseFormat, SamplingMessage, SamplingResult,
};
pub use plugin::reverse::storage::Scope;
pub use plugin::reverse::{self, files, sampling, storage};
pub use plugin::{
    Health, HealthStatus, Invocation, InvokeHandle, Negotiated, Options, Plugin, StopReason,
    Stopped, Tool, ToolError,
};
pub use protocol::ProtocolVersion;
pub use secret::Secret;
