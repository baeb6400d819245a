//! Every knob of the host side, with the Agent's documented values as defaults.

use std::time::Duration;

use crate::wire::DEFAULT_MAX_FRAME_BYTES;

/// Timeouts, limits and policies for driving one plugin.
///
/// The defaults are the Agent's (lifecycle page): `initialize` 5 s, `describe` 5 s (60 s on
/// a first launch), `invoke` 60 s, `health` 3 s, shutdown 5 s + 5 s, restart 3 attempts from
/// a 1 s base. Build one with struct-update syntax:
///
/// ```
/// use std::time::Duration;
/// use executa::host::HostOptions;
/// let opts = HostOptions { invoke_timeout: Duration::from_secs(10), ..HostOptions::default() };
/// assert_eq!(opts.initialize_timeout, Duration::from_secs(5));
/// ```
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Label used in thread names, log prefixes and errors; defaults to the plugin's file stem.
    pub name: Option<String>,
    /// Which protocol the child speaks: an Executa plugin (the default), an MCP stdio
    /// server, or whichever answers `initialize` (see [`Protocol`]).
    pub protocol: Protocol,
    /// Which MCP revision to speak to an MCP server (see [`McpVersion`]): by default
    /// 2026-07-28 when the server's `server/discover` names it, else the `initialize`
    /// handshake. Ignored for an Executa plugin.
    pub mcp_version: McpVersion,
    /// How long `initialize` may take before the session silently falls back to 1.1.
    pub initialize_timeout: Duration,
    /// Skip `initialize` altogether (what the local dev hosts do); the session's
    /// [`Handshake::protocol`](crate::host::Handshake::protocol) is then `None` and reverse
    /// calls are allowed, as under `anna-app dev`.
    pub skip_initialize: bool,
    /// How long `describe` may take on an ordinary start.
    pub describe_timeout: Duration,
    /// Whether this is the first launch of a onefile binary (post-install scan), which
    /// allows [`HostOptions::first_launch_describe_timeout`] for `describe`.
    pub first_launch: bool,
    /// The `describe` allowance on a first launch.
    pub first_launch_describe_timeout: Duration,
    /// Default `invoke` timeout when neither the caller nor the manifest's tool says otherwise.
    pub invoke_timeout: Duration,
    /// How long `health` may take.
    pub health_timeout: Duration,
    /// Default timeout of [`Host::request`](crate::host::Host::request) (any other method)
    /// and the bound on queueing a [`Host::notify`](crate::host::Host::notify).
    pub request_timeout: Duration,
    /// The shutdown sequence.
    pub shutdown: ShutdownPolicy,
    /// What to do when the plugin exits on its own.
    pub restart: RestartPolicy,
    /// Cap on one frame read from the plugin's stdout (the Agent's 16 MiB by default).
    pub max_frame_bytes: usize,
    /// `clientInfo` sent in `initialize`.
    pub client_name: String,
    /// `clientInfo.version` sent in `initialize`.
    pub client_version: String,
    /// Advertise and accept `__file_transport` responses (the plugin writes a big response
    /// to a file and sends its path). Only a regular file directly in the temp directory,
    /// opened once without following symlinks and no larger than
    /// [`HostOptions::max_frame_bytes`], is read; it is deleted only when it held a reply.
    pub file_transport: bool,
    /// Threads serving reverse calls from the plugin (at least one).
    pub reverse_workers: usize,
    /// Reverse calls waiting for a worker before new ones are refused with -32000.
    pub reverse_queue: usize,
    /// Frames waiting for the writer thread; a caller blocks (within its timeout) when full.
    pub write_queue: usize,
    /// Progress events waiting for the callback; more are dropped (progress is best-effort).
    pub progress_queue: usize,
    /// Where the plugin's stderr lines go.
    pub stderr: StderrRelay,
    /// How many recent stderr lines to keep for error messages.
    pub stderr_tail_lines: usize,
    /// Refuse reverse calls as the Agent does: everything in a 1.1 session, `sampling/*`
    /// without `llm.sample` (-32008), `storage/*`/`files/*` without `aps.*` (-32021).
    /// Not applied to an MCP server, whose requests are those of [`Protocol::Mcp`].
    pub gate_reverse_calls: bool,
    /// Route reverse calls by `params.context.invoke_id` as the Agent does: an unknown or
    /// finished id, or a missing one while several invokes run, is refused with -32602.
    /// Not applied to an MCP server: its requests carry no invoke id, so a sampling call
    /// is given the invoke in flight when there is only one, else none.
    pub strict_invoke_context: bool,
    /// Mint placeholder `sampling_token` / `storage_token` values for v2 invokes whose
    /// manifest declares the matching capability and whose caller gave none (for local
    /// runs against the in-memory backends; never use real tokens here).
    pub dev_tokens: bool,
    /// The longest a caller waiting for a reply, and the writer waiting for a frame, poll
    /// before they sleep, as on the plugin side ([`crate::Options::spin`]): it saves the
    /// 20-25 µs cross-vCPU wake-up per hop on a VM, and only pays while messages come
    /// quickly. So a caller polls only while replies have recently come back within this
    /// time (a moving average), for at most twice that average, and one caller at a time;
    /// the writer only while frames have recently come this close together, within a
    /// quarter of the wall time. A host calling slow tools never polls. Ignored where only
    /// one CPU is usable. Default 100 µs; `Duration::ZERO` never polls. (Either way a
    /// caller yields the CPU a few times before it sleeps: where the plugin shares its CPU,
    /// that lets the reply in without a sleep and a wake-up.)
    pub spin: Duration,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            name: None,
            protocol: Protocol::Executa,
            mcp_version: McpVersion::Auto,
            initialize_timeout: Duration::from_secs(5),
            skip_initialize: false,
            describe_timeout: Duration::from_secs(5),
            first_launch: false,
            first_launch_describe_timeout: Duration::from_secs(60),
            invoke_timeout: Duration::from_secs(60),
            health_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(30),
            shutdown: ShutdownPolicy::default(),
            restart: RestartPolicy::default(),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            client_name: "executa-host".to_owned(),
            client_version: env!("CARGO_PKG_VERSION").to_owned(),
            file_transport: true,
            reverse_workers: 4,
            reverse_queue: 64,
            write_queue: 1024,
            progress_queue: 1024,
            stderr: StderrRelay::Auto,
            stderr_tail_lines: 20,
            gate_reverse_calls: true,
            strict_invoke_context: true,
            dev_tokens: false,
            spin: Duration::from_micros(100),
        }
    }
}

impl HostOptions {
    /// The `describe` timeout in force (the first-launch allowance when
    /// [`HostOptions::first_launch`] is set).
    pub fn effective_describe_timeout(&self) -> Duration {
        if self.first_launch {
            self.first_launch_describe_timeout
        } else {
            self.describe_timeout
        }
    }
}

/// The protocol a host speaks to its child. Both are line-delimited JSON-RPC 2.0 over
/// stdio, so everything below the request shapes (framing, the frame cap, timeouts, one
/// reply per request, the shutdown sequence) is the same code for both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// An Executa plugin: `initialize` v2 (silently falling back to 1.1), `describe`,
    /// `invoke`, `health`. The default.
    #[default]
    Executa,
    /// An MCP stdio server (Model Context Protocol), in the era [`HostOptions::mcp_version`]
    /// chooses (by default: `server/discover` at 2026-07-28 first, adopted when its result
    /// names that revision, else the handshake). The 2026-07-28 era has no handshake:
    /// every request carries the revision, the client's name and its capabilities in
    /// `params._meta`, `health` is `server/discover`, and a `tools/call` that needs the
    /// model answers with the input it needs, which the host fulfils (sampling through the
    /// host's sampling handler) before it retries the call. The handshake era: `initialize`
    /// proposing revision 2025-11-25 (2024-11-05, 2025-03-26 and 2025-06-18 are accepted
    /// in the answer), then `notifications/initialized`; `health` is `ping`; the server's
    /// `sampling/createMessage` goes to the host's sampling handler, its `ping` is
    /// answered `{}`, anything else -32601. In both, `describe` is `tools/list` made into
    /// a [`Manifest`](crate::Manifest) and `invoke` is `tools/call`. There is no fallback
    /// to Executa: a server that neither era finds fails the start.
    Mcp,
    /// Sends the Executa `initialize` (protocol "2.0") and decides from the answer: a dated
    /// `protocolVersion` (`YYYY-MM-DD`) is an MCP server, and the session continues in MCP
    /// (re-initializing once in MCP form when that revision is not one the host speaks);
    /// an error whose message speaks of the version gets one retry as MCP; anything else
    /// is an Executa plugin, handled exactly as under [`Protocol::Executa`] (a timeout
    /// still falls back to 1.1, so allow a slow-starting server enough
    /// [`HostOptions::initialize_timeout`]). The Executa `initialize` declares sampling, so
    /// an MCP server met this way may ask for it even when no handler is set; it is then
    /// answered -32601. A server that answered that `initialize` is in the handshake era:
    /// it stays there, unless [`HostOptions::mcp_version`] pins another revision (then it
    /// is asked again in that revision's way).
    Auto,
}

/// Which MCP revision a host speaks to an MCP server, as the official SDKs' client modes
/// name them: `auto`, `legacy`, or a revision pinned.
///
/// ```
/// use executa::host::McpVersion;
/// assert_eq!("auto".parse::<McpVersion>(), Ok(McpVersion::Auto));
/// assert_eq!("2026-07-28".parse::<McpVersion>(), Ok(McpVersion::Pinned("2026-07-28".into())));
/// assert!("2099-01-01".parse::<McpVersion>().is_err());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum McpVersion {
    /// `server/discover` at 2026-07-28 first, adopted when its result names that revision;
    /// otherwise the `initialize` handshake, as the Python SDK's `auto` mode does: every
    /// error falls back (a timeout too), except -32022 from a server that lists only
    /// stateless revisions, none of them this host's, which fails the start. The default.
    #[default]
    Auto,
    /// The `initialize` handshake only, proposing 2025-11-25 and accepting any handshake
    /// revision in the answer: the host as it was before 2026-07-28.
    Legacy,
    /// This revision and no other. A stateless one (2026-07-28) is checked with
    /// `server/discover` at that revision, which must name it (a server that answers
    /// -32601 speaks only the handshake); a handshake one is proposed in `initialize`,
    /// whose answer must be it. Anything else fails the start with an error that says so.
    Pinned(String),
}

impl McpVersion {
    /// The revision pinned, if one is.
    pub fn pinned(&self) -> Option<&str> {
        match self {
            McpVersion::Pinned(v) => Some(v),
            _ => None,
        }
    }
}

impl std::str::FromStr for McpVersion {
    type Err = String;

    /// `auto`, `legacy`, or one of the revisions spoken
    /// ([`MCP_ALL_REVISIONS`](crate::host::MCP_ALL_REVISIONS)); anything else is an error
    /// naming them.
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(McpVersion::Auto),
            "legacy" => Ok(McpVersion::Legacy),
            v if crate::protocol::MCP_ALL_REVISIONS.contains(&v) => {
                Ok(McpVersion::Pinned(v.to_owned()))
            }
            other => Err(format!(
                "{other:?} is not an MCP revision this host speaks: auto, legacy, {}",
                crate::protocol::MCP_ALL_REVISIONS.join(", ")
            )),
        }
    }
}

impl std::fmt::Display for McpVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            McpVersion::Auto => "auto",
            McpVersion::Legacy => "legacy",
            McpVersion::Pinned(v) => v,
        })
    }
}

/// The Agent's shutdown sequence: close stdin, wait, `SIGTERM`, wait, `SIGKILL`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownPolicy {
    /// How long to wait for an exit after closing stdin.
    pub stdin_grace: Duration,
    /// How long to wait after `SIGTERM`.
    pub term_grace: Duration,
    /// How long to wait for the kernel to reap the process after `SIGKILL` (it cannot be
    /// ignored, but a process stuck in uninterruptible I/O takes a while).
    pub kill_wait: Duration,
}

impl Default for ShutdownPolicy {
    fn default() -> Self {
        ShutdownPolicy {
            stdin_grace: Duration::from_secs(5),
            term_grace: Duration::from_secs(5),
            kill_wait: Duration::from_secs(5),
        }
    }
}

/// Restart with exponential backoff after an unexpected exit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Restart at all.
    pub enabled: bool,
    /// Attempts before giving up (the Agent's 3).
    pub max_attempts: u32,
    /// Delay before the first attempt; it doubles on each following one (the Agent's 1 s).
    pub base_delay: Duration,
    /// Upper bound on one delay.
    pub max_delay: Duration,
    /// A process that stayed up this long before exiting gets a fresh attempt budget.
    pub reset_after: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            enabled: true,
            max_attempts: 3,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
            reset_after: Duration::from_secs(60),
        }
    }
}

impl RestartPolicy {
    /// The delay before attempt `n` (1-based): `base * 2^(n-1)`, capped at `max_delay`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(20);
        self.base_delay
            .saturating_mul(1u32 << shift)
            .min(self.max_delay)
    }
}

/// Where the lines a plugin writes on stderr go. Each line is prefixed `[plugin:<name>] `.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StderrRelay {
    /// To the `log` facade (target `executa::relay`, level info) when a logger accepts it,
    /// otherwise to this process's stderr.
    #[default]
    Auto,
    /// Always to the `log` facade.
    Log,
    /// Always to this process's stderr.
    Stderr,
    /// Nowhere (the recent lines are still kept for error messages).
    Quiet,
}
