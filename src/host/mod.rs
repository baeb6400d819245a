//! The host side: drive any Executa plugin the way the Agent does.
//!
//! A [`Host`] spawns a plugin (any language) with piped stdio, negotiates v2 with
//! `initialize` (falling back silently to 1.1), reads and caches its manifest with
//! `describe`, calls its tools with `invoke` from any number of threads, probes `health`,
//! serves its reverse calls (sampling, storage, ...) through [`Handlers`], restarts it with
//! exponential backoff when it dies, and shuts it down with the Agent's sequence: close
//! stdin, wait, `SIGTERM`, wait, `SIGKILL`. [`PluginProcess`] is the same without
//! supervision, for tools that want to watch a plugin misbehave ([`check`] does).
//!
//! # MCP servers
//!
//! The same host drives an MCP stdio server (Model Context Protocol: the same framing,
//! line-delimited JSON-RPC 2.0) with [`HostOptions::protocol`] set to [`Protocol::Mcp`],
//! or to [`Protocol::Auto`], which sends the Executa `initialize` and goes on in MCP when
//! the answer names a dated MCP revision. Then `initialize` is MCP's (revision
//! 2025-11-25 proposed, 2024-11-05 to 2025-11-25 accepted; [`Handshake::mcp_revision`])
//! followed by `notifications/initialized`; the manifest is made from `tools/list`;
//! [`Host::invoke`] sends `tools/call` and reads its result into the same
//! [`InvokeResult`] (`isError` is `success: false`; `data` is `structuredContent`, else
//! the text content, parsed as JSON when it parses); `health` is `ping`. The server's
//! `sampling/createMessage` reaches the [`Handlers`]' sampling handler in the Executa
//! shape and its answer goes back in MCP's; its `notifications/progress` reach the
//! progress callback (the progress token is the invoke id). Timeouts, frame caps,
//! restarts and the shutdown sequence are the ones above. MCP has no invoke context:
//! credentials and tokens are refused, and the Executa reverse-call gates do not apply.
//!
//! Under [`Protocol::Mcp`] the host first asks `server/discover` at revision 2026-07-28,
//! MCP's stateless era, and adopts it when the result names it, as the official SDKs'
//! `auto` mode does ([`McpVersion`] pins an era or a revision instead). Then there is no
//! handshake: every request carries the revision, the client and its capabilities in
//! `params._meta`, `health` is `server/discover`, and a `tools/call` that needs the
//! model answers with the input it needs: its sampling requests go to the same sampling
//! handler, `roots/list` gets no roots, elicitation is declined, and the call is sent
//! again with the answers and the server's `requestState`, at most
//! [`MCP_MAX_INPUT_ROUNDS`] times. Any error from the probe (but -32022 from a server of
//! stateless revisions only), or a result naming no stateless revision, gives the
//! handshake above instead.
//!
//! ```no_run
//! use executa::host::{Handlers, Host, HostOptions, PluginCommand, Protocol};
//! let cmd = PluginCommand::new("python3").arg("mcp_server.py");
//! let opts = HostOptions { protocol: Protocol::Mcp, ..HostOptions::default() };
//! let host = Host::start(cmd, opts, Handlers::dev_backends())?;
//! let result = host.invoke("add", &serde_json::json!({"numbers": [1, 2]}))?;
//! println!("{} {}", result.success, result.data);
//! # Ok::<(), executa::error::Error>(())
//! ```
//!
//! # Threads
//!
//! Each plugin process has the plugin side's three-thread shape, seen from the other end:
//! a **reader** of its stdout (`executa-rd:<name>`), a **writer** to its stdin
//! (`executa-wr:<name>`: a frame goes straight into the pipe from the thread that made it
//! while nothing is queued, never waiting for room; otherwise the writer writes the bounded
//! queue's backlog, a burst at a time) and a **stderr drain** (`executa-err:<name>`) that relays
//! lines with a `[plugin:<name>] ` prefix and keeps the last few for error messages. A
//! fourth, a **watcher** (`executa-wait:<name>`), polls for the child's exit every 50 ms: a plugin that dies while
//! a helper process it started still holds its stdout would otherwise never be noticed.
//! Each host adds a pool of reverse-call workers, an event thread when a progress callback
//! is set, and a supervisor.
//!
//! Host request ids are 0 for `initialize` (as the Agent sends it), then 1, 2, 3, ...;
//! plugins use strings for their reverse
//! calls, so the two never mix. Each call waits on its own one-slot mailbox, which the
//! reader fills directly: a slow reverse-call handler never holds back a reply.
//!
//! # Defaults (the Agent's)
//!
//! `initialize` 5 s, `describe` 5 s (60 s with [`HostOptions::first_launch`]), `invoke`
//! 60 s or the manifest tool's `timeout` or the caller's, `health` 3 s, shutdown 5 s + 5 s,
//! restarts: 3 attempts from a 1 s base, frames up to 16 MiB. See [`HostOptions`].
//!
//! # Secrets
//!
//! Credentials and tokens ([`Secret`](crate::Secret)) reach the plugin in each invoke's `context` and
//! nowhere else: never a log line, never a `Debug` output, never the environment.

mod affinity;
mod backends;
mod calls;
pub mod check;
mod client;
mod command;
mod context;
mod core;
mod dispatch;
mod exit;
mod file_transport;
mod interrupts;
mod json_cost;
mod live;
mod mcp;
mod mcp_input;
mod mcp_manifest;
mod mcp_modern;
mod mcp_reverse;
mod options;
mod pending;
mod process;
mod reader;
mod sample_args;
mod service;
mod shared;
mod shutdown;
mod signal;
mod stderr;
mod supervisor;
pub mod testing;
mod types;
mod writer;

pub use self::core::{HostState, HostStatus};
/// The manifest lint, shared with the plugin runtime (which runs it at start-up).
pub use crate::lint;
/// MCP pieces for drivers that speak to an MCP server over pipes they own (`executa
/// bench`): the revisions spoken and proposed, how an `initialize` answer is read, and the
/// manifest made from `tools/list`, the same as [`Host`]'s.
pub use crate::protocol::{
    MCP_ALL_REVISIONS, MCP_META_CLIENT_CAPABILITIES, MCP_META_CLIENT_INFO, MCP_META_SERVER_INFO,
    MCP_META_VERSION, MCP_MODERN_REVISIONS, MCP_REVISIONS, MCP_UNSUPPORTED_VERSION,
    is_mcp_revision,
};
pub use affinity::{cpu_affinity, process_cpu_time, set_cpu_affinity};
pub use backends::{
    CommandSampling, DEFAULT_COMMAND_TIMEOUT, DEFAULT_MAX_OUTPUT, DirStorage, MAX_ENTRIES,
    MAX_STORAGE_FILE_BYTES, MAX_STORE_BYTES, MAX_VALUE_BYTES, MemoryStorage, STORAGE_FILE,
    ScriptedSampling,
};
pub use client::Host;
pub use command::PluginCommand;
pub use context::{InvokeOptions, new_invoke_id};
pub use dispatch::Handlers;
pub use interrupts::{Interrupt, Interrupts};
pub use live::{kill_all, shutdown_all};
pub use mcp::{
    MAX_PAGES as MCP_MAX_PAGES, MAX_TOOLS as MCP_MAX_TOOLS,
    MAX_TOOLS_HEAP_BYTES as MCP_MAX_TOOLS_HEAP_BYTES,
    MAX_TOOLS_LIST_BYTES as MCP_MAX_TOOLS_LIST_BYTES, PROPOSED as MCP_PROPOSED,
    Revision as McpRevision, ToolsPager as McpToolsPager, revision as mcp_revision,
    suggests_version as suggests_mcp,
};
pub use mcp_input::{
    InputRequest as McpInputRequest, InputRequired as McpInputRequired,
    MAX_INPUT_ROUNDS as MCP_MAX_INPUT_ROUNDS, STATE_ONLY_WAIT as MCP_STATE_ONLY_WAIT,
    STATE_ONLY_WAIT_CAP as MCP_STATE_ONLY_WAIT_CAP, input_answer as mcp_input_answer,
    input_required as mcp_input_required, state_only_wait as mcp_state_only_wait,
};
pub use mcp_manifest::manifest_of as mcp_manifest;
pub use mcp_modern::{
    PROBED as MCP_PROBED, Probe as McpProbe, envelope as mcp_envelope,
    probe_verdict as mcp_probe_verdict,
};
pub use mcp_reverse::{sampling_result as mcp_sampling_result, to_executa as mcp_sampling_params};
pub use options::{HostOptions, McpVersion, Protocol, RestartPolicy, ShutdownPolicy, StderrRelay};
pub use process::PluginProcess;
pub use sample_args::sample_arguments;
pub use service::{HandlerFn, Progress, ProgressFn, ResultWriter, ReverseCall, Service, Written};
pub use shutdown::{ProcessTree, shutdown_child};
pub use types::{ExitStage, Handshake, HealthReport, InvokeResult, ShutdownReport, StdoutNoise};
