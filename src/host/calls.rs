//! The requests a host makes of a plugin process: `initialize`, `describe`, `invoke`,
//! `health`, any other request or notification, and the malformed-line probe.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::context::{Context, InvokeOptions, InvokeParams, SecretMap, deadline_ms, new_invoke_id};
use super::mcp::{self, Revision};
use super::mcp_manifest;
use super::options::Protocol;
use super::pending::Reply;
use super::process::PluginProcess;
use super::shared::{INITIALIZE_ID, Shared};
use super::types::{Handshake, HealthReport, InvokeResult, snippet};
use crate::Secret;
use crate::error::{Error, Result, RpcError, codes};
use crate::lock::lock;
use crate::manifest::Manifest;
use crate::protocol::{DEFAULT_MAX_SAMPLING_CALLS, DEFAULT_MAX_TOKENS_PER_CALL, ProtocolVersion};
use crate::wire;

impl PluginProcess {
    /// Runs the handshake of [`HostOptions::protocol`](super::HostOptions::protocol),
    /// waiting at most [`HostOptions::initialize_timeout`](super::HostOptions::initialize_timeout)
    /// for each request it sends (an MCP session may take a `server/discover` probe, the
    /// handshake and one more probe; [`Protocol::Auto`] sends the Executa `initialize`
    /// first).
    ///
    /// Executa (and Auto before it finds an MCP server): the v2 handshake with the
    /// Agent's request shape. A timeout, -32601, any other error frame or an unreadable
    /// answer silently gives a 1.1 session, with the reason recorded in
    /// [`Handshake::fallback`]; it fails only when the process is gone
    /// ([`Error::Disconnected`]) or the request cannot be written.
    ///
    /// MCP (chosen, or found by Auto): the era
    /// [`HostOptions::mcp_version`](super::HostOptions::mcp_version) settles: by default
    /// `server/discover` at 2026-07-28, adopted when its result names that revision (no
    /// handshake then), else the MCP `initialize` and `notifications/initialized`;
    /// [`Handshake::mcp_revision`] says which revision. Any failure, a revision the host
    /// does not speak included, is an error.
    pub fn initialize(&self) -> Result<Handshake> {
        // Id 0 as the Agent sends it; a second initialize (never sent by the host itself)
        // takes a fresh id so that ids stay unique.
        let id = if self.shared.initialize_sent.swap(true, Ordering::AcqRel) {
            self.shared.fresh_id()
        } else {
            INITIALIZE_ID
        };
        let start = Instant::now();
        let negotiated = match self.shared.opts.protocol {
            Protocol::Mcp => self.initialize_mcp(id, start)?,
            Protocol::Executa => self.initialize_executa(id, start, false)?,
            Protocol::Auto => self.initialize_executa(id, start, true)?,
        };
        if let Some(why) = &negotiated.fallback {
            log::debug!("[plugin:{}] protocol 1.1: {why}", self.shared.label);
        }
        *lock(&self.shared.negotiated) = Some(negotiated.clone());
        Ok(negotiated)
    }

    /// The Executa `initialize` under `id`; with `detect` ([`Protocol::Auto`]) an MCP
    /// server is recognised by its answer (a dated `protocolVersion`, or an error about
    /// the version, which earns one retry in MCP form).
    fn initialize_executa(&self, id: u64, start: Instant, detect: bool) -> Result<Handshake> {
        let opts = &self.shared.opts;
        let params = json!({
            "protocolVersion": "2.0",
            "clientInfo": { "name": opts.client_name, "version": opts.client_version },
            "capabilities": {
                "sampling": {
                    "modalities": ["text"],
                    "maxTokensPerCall": DEFAULT_MAX_TOKENS_PER_CALL,
                    "maxCallsPerInvoke": DEFAULT_MAX_SAMPLING_CALLS,
                    "responseFormat": ["json_object", "json_schema"]
                },
                "fileTransport": opts.file_transport
            }
        });
        let timeout = opts.initialize_timeout;
        let elapsed = || start.elapsed();
        Ok(
            match self
                .shared
                .request_as(id, "initialize", Some(&params), timeout)
            {
                Ok(raw) => match mcp::revision(&raw) {
                    Revision::None => Handshake::from_result(&raw, elapsed()),
                    _ if !detect => Handshake::from_result(&raw, elapsed()),
                    dated => self.switch_to_mcp(&raw, dated, start)?,
                },
                Err(Error::Remote(e)) if detect && mcp::suggests_version(&e) => {
                    match self.initialize_mcp(self.shared.fresh_id(), start) {
                        Ok(shake) => shake,
                        Err(e2 @ Error::Disconnected(_)) => return Err(e2),
                        Err(e2) => Handshake::fell_back(
                            format!("initialize answered with an error frame: {e}; as MCP: {e2}"),
                            elapsed(),
                        ),
                    }
                }
                Err(Error::Timeout { .. }) => Handshake::fell_back(
                    format!(
                        "no answer to initialize within {:.3}s",
                        timeout.as_secs_f64()
                    ),
                    elapsed(),
                ),
                Err(Error::Remote(e)) if e.code == codes::METHOD_NOT_FOUND => {
                    Handshake::fell_back(format!("initialize not implemented: {e}"), elapsed())
                }
                Err(Error::Remote(e)) => Handshake::fell_back(
                    format!("initialize answered with an error frame: {e}"),
                    elapsed(),
                ),
                Err(e @ (Error::Protocol(_) | Error::FrameTooLarge { .. } | Error::Json(_))) => {
                    Handshake::fell_back(format!("unreadable answer to initialize: {e}"), elapsed())
                }
                Err(e) => return Err(e),
            },
        )
    }

    /// Records a session without `initialize` (what the dev hosts do).
    pub(crate) fn skip_initialize(&self) -> Handshake {
        let n = Handshake::skipped();
        *lock(&self.shared.negotiated) = Some(n.clone());
        n
    }

    /// Sends `describe` with the configured timeout (the first-launch allowance when
    /// [`HostOptions::first_launch`](super::HostOptions::first_launch) is set), parses the manifest and caches it for
    /// [`PluginProcess::invoke`]'s per-tool timeouts and reverse-call gating. A wrapped
    /// `{"manifest":{...}}` or a non-object answer is an [`Error::Protocol`].
    ///
    /// From an MCP server: `tools/list` (every page) made into a manifest: name, title
    /// and version from `serverInfo`, the description from `instructions`, each tool's
    /// parameter list from its `inputSchema` (top-level properties with their type,
    /// description, `required`, `default` and `enum`; nested objects as nested lists,
    /// array elements as their `items` schema) and the raw `inputSchema` (with the
    /// tool's other fields) in [`ToolSpec::extra`](crate::ToolSpec::extra).
    pub fn describe(&self) -> Result<Arc<Manifest>> {
        self.describe_within(self.shared.opts.effective_describe_timeout())
    }

    /// [`PluginProcess::describe`] with an explicit timeout (the supervisor allows the
    /// first-launch timeout on the first launch only).
    pub(crate) fn describe_within(&self, timeout: Duration) -> Result<Arc<Manifest>> {
        let raw = self.describe_raw(timeout)?;
        let manifest = Arc::new(if self.shared.is_mcp() {
            mcp_manifest::manifest(lock(&self.shared.negotiated).as_ref(), &raw)?
        } else {
            parse_manifest(&raw)?
        });
        *lock(&self.shared.manifest) = Some(manifest.clone());
        Ok(manifest)
    }

    /// Caches a manifest read by other means (the check lints the raw answer itself).
    pub(crate) fn remember_manifest(&self, manifest: Arc<Manifest>) {
        *lock(&self.shared.manifest) = Some(manifest);
    }

    /// Sends `describe` and returns the answer unparsed, for linting. From an MCP server:
    /// `tools/list`, every page (at most 100) within `timeout`, as one `{"tools": [...]}`.
    pub fn describe_raw(&self, timeout: Duration) -> Result<Box<RawValue>> {
        if self.shared.is_mcp() {
            return self.list_tools(timeout);
        }
        self.shared.request::<()>("describe", None, timeout)
    }

    /// The session negotiated by [`PluginProcess::initialize`], if it ran.
    pub fn handshake(&self) -> Option<Handshake> {
        lock(&self.shared.negotiated).clone()
    }

    /// The manifest cached by [`PluginProcess::describe`], if it ran.
    pub fn manifest(&self) -> Option<Arc<Manifest>> {
        self.shared.manifest()
    }

    /// Calls a tool and parses the `{success, data, error}` envelope. Blocks until the
    /// reply or the timeout: `opts.timeout`, else the manifest tool's `timeout`, else
    /// [`HostOptions::invoke_timeout`](super::HostOptions::invoke_timeout). A JSON-RPC error frame is [`Error::Remote`]; a
    /// result without a boolean `success` is [`Error::Protocol`].
    ///
    /// On an MCP server: `tools/call {name, arguments}` (with `_meta.progressToken`, the
    /// invoke id, when a progress callback is set), its result read into the same
    /// envelope: `isError: true` is `success: false` with the text content as the error;
    /// otherwise `data` is `structuredContent`, else the text content parsed as JSON,
    /// else that text as a string. Credentials or tokens in `opts` are refused
    /// ([`Error::Refused`]): MCP has no invoke context to carry them.
    pub fn invoke<A: Serialize + ?Sized>(
        &self,
        tool: &str,
        arguments: &A,
        opts: &InvokeOptions,
    ) -> Result<InvokeResult> {
        let start = Instant::now();
        let (invoke_id, raw) = self.invoke_raw(tool, arguments, opts)?;
        if self.shared.is_mcp() {
            return InvokeResult::from_mcp(raw, invoke_id, start.elapsed());
        }
        InvokeResult::parse(raw, invoke_id, start.elapsed())
    }

    /// Like [`PluginProcess::invoke`] but returns the minted invoke id and the result
    /// exactly as sent, without checking its shape (from an MCP server, the `tools/call`
    /// result).
    pub fn invoke_raw<A: Serialize + ?Sized>(
        &self,
        tool: &str,
        arguments: &A,
        opts: &InvokeOptions,
    ) -> Result<(String, Box<RawValue>)> {
        let manifest = self.shared.manifest();
        let timeout = opts.timeout.unwrap_or_else(|| {
            manifest
                .as_ref()
                .and_then(|m| m.tools.iter().find(|t| t.name == tool))
                .and_then(|t| t.timeout)
                .filter(|&s| s > 0)
                .map_or(self.shared.opts.invoke_timeout, Duration::from_secs)
        });
        let invoke_id = opts.invoke_id.clone().unwrap_or_else(new_invoke_id);
        if self.shared.is_mcp() {
            let _active = ActiveInvoke::register(&self.shared, &invoke_id);
            let raw = self.call_tool(tool, arguments, opts, &invoke_id, timeout)?;
            return Ok((invoke_id, raw));
        }
        let minted = self.dev_tokens(&invoke_id, manifest.as_deref(), opts);
        let mut tokens = SecretMap(minted.iter().map(|(k, v)| (*k, v)).collect());
        tokens
            .0
            .extend(opts.tokens.iter().map(|(k, v)| (k.as_str(), v)));
        let params = InvokeParams {
            tool,
            arguments,
            context: Context {
                invoke_id: &invoke_id,
                deadline_ms: deadline_ms(timeout),
                credentials: SecretMap::of(&opts.credentials),
                tokens,
            },
        };
        let _active = ActiveInvoke::register(&self.shared, &invoke_id);
        let raw = self.shared.request("invoke", Some(&params), timeout)?;
        Ok((invoke_id, raw))
    }

    /// Placeholder tokens for local runs ([`HostOptions::dev_tokens`](super::HostOptions::dev_tokens)).
    fn dev_tokens(
        &self,
        invoke_id: &str,
        manifest: Option<&Manifest>,
        opts: &InvokeOptions,
    ) -> Vec<(&'static str, Secret)> {
        let protocol = self.shared.protocol();
        if !self.shared.opts.dev_tokens || protocol == Some(ProtocolVersion::V1) {
            return Vec::new();
        }
        let caps = manifest
            .map(|m| m.host_capabilities.as_slice())
            .unwrap_or_default();
        let mut out = Vec::new();
        if caps.iter().any(|c| c == "llm.sample") && !opts.tokens.contains_key("sampling_token") {
            out.push((
                "sampling_token",
                Secret::new(format!("dev-sampling-{invoke_id}")),
            ));
        }
        if caps.iter().any(|c| super::dispatch::grants_storage(c))
            && !opts.tokens.contains_key("storage_token")
        {
            out.push((
                "storage_token",
                Secret::new(format!("dev-storage-{invoke_id}")),
            ));
        }
        out
    }

    /// Probes `health` with [`HostOptions::health_timeout`](super::HostOptions::health_timeout). A plugin answering -32601 is
    /// healthy with [`HealthReport::implemented`] `false`, as the Agent treats it. An MCP
    /// server is sent `ping`: its answer is status `ready`.
    pub fn health(&self) -> Result<HealthReport> {
        if self.shared.is_mcp() {
            return self.ping();
        }
        match self
            .shared
            .request::<()>("health", None, self.shared.opts.health_timeout)
        {
            Ok(raw) => HealthReport::from_result(&raw),
            Err(Error::Remote(e)) if e.code == codes::METHOD_NOT_FOUND => {
                Ok(HealthReport::unimplemented())
            }
            Err(e) => Err(e),
        }
    }

    /// Sends any request and blocks until its raw result, an error frame
    /// ([`Error::Remote`]), the timeout, or the process's end.
    pub fn request<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<Box<RawValue>> {
        self.shared.request(method, Some(params), timeout)
    }

    /// Sends a notification (no id, no answer). Blocks only while the write queue is full,
    /// at most `timeout`.
    pub fn notify<P: Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<()> {
        self.shared.refuse_if_closing()?;
        let mut frame = Vec::with_capacity(128);
        wire::write_request(&mut frame, None, method, params);
        self.shared
            .send_frame(frame, Instant::now() + timeout, method, timeout)
    }

    /// A conformance probe: writes `line` as is (a newline is added) and waits up to
    /// `timeout` for an `id: null` error frame, the JSON-RPC answer to a line that cannot
    /// be parsed. Returns that error object; [`Error::Timeout`] if nothing came,
    /// [`Error::Protocol`] if a result came instead, [`Error::Disconnected`] if the plugin
    /// died.
    pub fn probe_malformed(&self, line: &[u8], timeout: Duration) -> Result<RpcError> {
        self.shared.refuse_if_closing()?;
        let deadline = Instant::now() + timeout;
        let rx = self.shared.pending.register_null()?;
        let mut frame = line.to_vec();
        frame.push(b'\n');
        if let Err(e) = self
            .shared
            .send_frame(frame, deadline, "<malformed line>", timeout)
        {
            self.shared.pending.cancel_null();
            return Err(e);
        }
        let reply: Reply = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                self.shared.pending.cancel_null();
                return Err(Error::Timeout {
                    method: "<malformed line>".to_owned(),
                    after: timeout,
                });
            }
            Err(RecvTimeoutError::Disconnected) => return Err(self.shared.gone()),
        };
        match reply {
            Err(Error::Remote(e)) => Ok(e),
            Ok(raw) => Err(Error::Protocol(format!(
                "a malformed line was answered with a result: {}",
                snippet(raw.get())
            ))),
            Err(e) => Err(e),
        }
    }
}

/// Marks an invoke id active for reverse-call routing while the invoke is in flight.
struct ActiveInvoke<'a> {
    shared: &'a Shared,
    id: String,
}

impl<'a> ActiveInvoke<'a> {
    fn register(shared: &'a Shared, id: &str) -> Self {
        // Two calls with the same caller-chosen id share the entry (and its budget), as
        // one invoke does on the Agent; the last to end removes it.
        lock(&shared.invokes)
            .entry(id.to_owned())
            .or_default()
            .calls += 1;
        ActiveInvoke {
            shared,
            id: id.to_owned(),
        }
    }
}

impl Drop for ActiveInvoke<'_> {
    fn drop(&mut self) {
        let mut invokes = lock(&self.shared.invokes);
        if let Some(usage) = invokes.get_mut(&self.id) {
            usage.calls -= 1;
            if usage.calls == 0 {
                invokes.remove(&self.id);
            }
        }
    }
}

/// Parses a `describe` answer, refusing the wrapped form the Agent cannot read.
fn parse_manifest(raw: &RawValue) -> Result<Manifest> {
    let value: serde_json::Value = serde_json::from_str(raw.get())?;
    let Some(map) = value.as_object() else {
        return Err(Error::Protocol(format!(
            "describe must return the manifest object, got {}",
            snippet(raw.get())
        )));
    };
    if map
        .get("manifest")
        .is_some_and(serde_json::Value::is_object)
        && !map.contains_key("tools")
    {
        return Err(Error::Protocol(
            "describe returned a wrapped {\"manifest\": {...}}; the Agent needs the bare manifest object (pitfall #5)"
                .to_owned(),
        ));
    }
    Ok(serde_json::from_value(value)?)
}
