//! The steps of a conformance run: each sends what the Agent sends (or watches what the
//! plugin did) and adds its line to the report.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::judge::{area_summary, gone_text, judge_exit, judge_result};
use super::report::{CheckOptions, MALFORMED_LINE, Outcome, Run, Smoke, UNKNOWN_TOOL};
use crate::error::{Error, RpcError, codes};
use crate::host::sample_args::sample_arguments;
use crate::host::types::snippet;
use crate::host::{ExitStage, Handshake, InvokeOptions, PluginProcess, ReverseCall, Service};
use crate::lint::{self, Area, Severity};
use crate::lock::lock;
use crate::manifest::Manifest;
use crate::protocol::ProtocolVersion;

/// The check's storage backend (by default [`MemoryStorage`](crate::host::MemoryStorage)
/// with production's scopes, `user` and `tool`), remembering the calls refused for their
/// scope.
pub(super) struct ScopeWatch {
    pub(super) inner: Arc<dyn Service>,
    pub(super) refused: Mutex<Vec<String>>,
}

impl ScopeWatch {
    fn refused(&self) -> Vec<String> {
        lock(&self.refused).clone()
    }
}

impl Service for ScopeWatch {
    fn handles(&self, method: &str) -> bool {
        self.inner.handles(method)
    }

    fn call(&self, call: &ReverseCall) -> Result<Value, RpcError> {
        let out = self.inner.call(call);
        if let Err(e) = &out
            && e.code == STORAGE_NOT_GRANTED
        {
            let scope = call.params.get("scope").map_or_else(
                || "no scope (the default is \"app\")".to_owned(),
                |s| format!("scope {s}"),
            );
            let mut refused = lock(&self.refused);
            if refused.len() < 8 {
                refused.push(format!("{} with {scope}", call.method));
            }
        }
        out
    }
}

/// The code the storage backend refuses an ungranted scope with.
const STORAGE_NOT_GRANTED: i64 = -32021;

/// Progress events seen during the run.
#[derive(Clone, Copy, Default)]
pub(super) struct ProgressSeen {
    pub(super) total: u64,
    pub(super) uncorrelated: u64,
}

/// The steps, run in order on one plugin process.
pub(super) struct Checker<'a> {
    pub(super) p: &'a PluginProcess,
    pub(super) opts: &'a CheckOptions,
}

impl Checker<'_> {
    /// Skips a step when the plugin is gone; `true` when it is.
    fn skip_if_gone(&self, run: &mut Run<'_>, name: &str) -> bool {
        let Some(status) = self.p.exit_status() else {
            return false;
        };
        run.push(
            name,
            Outcome::Skip,
            format!("the plugin is not running ({status})"),
        );
        true
    }

    /// One verdict for a plugin that exited with a failure before answering `initialize`
    /// (a definition its runtime refuses, a crash at start-up), quoting its own reason
    /// from stderr, instead of a failed line for every check that follows.
    pub(super) fn refused_to_start(&self, handshake: &crate::Result<Handshake>) -> Option<String> {
        if handshake.is_ok() || self.p.replies_received() > 0 {
            return None;
        }
        let status = self.p.wait_exit(Duration::from_millis(100))?;
        if status.success() {
            return None;
        }
        // The runtime's own refusal says its prefix on every line: once is enough.
        const REFUSED: &str = "executa: invalid plugin definition: ";
        let lines = self.p.stderr_tail();
        let reasons: Option<Vec<&str>> = lines.iter().map(|l| l.strip_prefix(REFUSED)).collect();
        let why = match reasons {
            _ if lines.is_empty() => "no stderr output".to_owned(),
            Some(reasons) => format!("invalid plugin definition: {}", reasons.join("; ")),
            None => lines.join("; "),
        };
        Some(format!("refused to start ({status}): {why}"))
    }

    pub(super) fn initialize(&self, run: &mut Run<'_>, handshake: crate::Result<Handshake>) {
        let h = match handshake {
            Ok(h) => h,
            Err(e) => return run.push("initialize", Outcome::Fail, gone_text(&e)),
        };
        let took = format!("{:.0} ms", h.elapsed.as_secs_f64() * 1000.0);
        match (h.protocol, &h.fallback) {
            (Some(ProtocolVersion::V2), _) if h.echoed_version.is_none() => run.push(
                "initialize",
                Outcome::Warn,
                format!("answered in {took} but without `protocolVersion`; echo \"2.0\""),
            ),
            (Some(ProtocolVersion::V2), _) => {
                run.push(
                    "initialize",
                    Outcome::Pass,
                    format!("v2 negotiated in {took}"),
                );
            }
            // Silence is not a v1 answer: every start of such a plugin stalls for the whole
            // initialize timeout before the Agent falls back. A -32601 is the v1 answer.
            (_, Some(why)) if why.starts_with("no answer") => {
                let detail = match self.buffering() {
                    Some(n) => format!(
                        "no reply until stdin closed, then {n} at once: the plugin buffers its \
                         stdout: flush stdout after each reply (Python: print(..., flush=True); \
                         C: fflush(stdout); Node: no buffering needed; Rust: flush the writer)"
                    ),
                    None => format!(
                        "never answered ({why}): every start stalls this long before the Agent falls \
                         back to v1. Answer initialize, or reply -32601 to say v1 at once (v1 has no \
                         sampling, storage or progress). The Agent sends initialize with id 0: a plugin \
                         that takes a falsy id for a notification never answers it"
                    ),
                };
                run.push("initialize", Outcome::Fail, detail)
            }
            (_, why) => run.push(
                "initialize",
                Outcome::Pass,
                format!(
                    "v1-only ({}); no reverse RPC",
                    why.as_deref().unwrap_or("1.1")
                ),
            ),
        }
    }

    /// After a silent `initialize`: whether the plugin buffers its stdout. When `describe`
    /// is not answered either, stdin is closed; replies that arrive only then were sitting
    /// in a buffer. Returns how many, or `None` when the plugin answers (it only ignores
    /// `initialize`) or stays silent. Bounded by the describe timeout and the shutdown
    /// policy; the plugin is gone afterwards, so the remaining checks are skipped.
    fn buffering(&self) -> Option<u64> {
        let timeout = self.opts.host.effective_describe_timeout();
        if !matches!(self.p.describe_raw(timeout), Err(Error::Timeout { .. })) {
            return None;
        }
        let before = self.p.replies_received();
        let policy = &self.opts.host.shutdown;
        self.p.shutdown_with(policy);
        // The reader sees the end of stdout shortly after the exit: wait for it, bounded.
        let deadline = Instant::now() + policy.stdin_grace;
        while self.p.disconnect_reason().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let late = self.p.replies_received().saturating_sub(before);
        (late > 0).then_some(late)
    }

    pub(super) fn describe(&self, run: &mut Run<'_>) -> Option<Arc<Manifest>> {
        if self.skip_if_gone(run, "describe") {
            return None;
        }
        let timeout = self.opts.host.effective_describe_timeout();
        let start = Instant::now();
        let raw = match self.p.describe_raw(timeout) {
            Ok(raw) => raw,
            Err(e @ Error::Timeout { .. }) => {
                run.push(
                    "describe",
                    Outcome::Fail,
                    format!("{e}: the Agent gives up and the plugin fails to load; keep describe cheap (pitfall #7)"),
                );
                return None;
            }
            Err(e) => {
                run.push("describe", Outcome::Fail, gone_text(&e));
                return None;
            }
        };
        let took = format!("{:.0} ms", start.elapsed().as_secs_f64() * 1000.0);
        let value: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
        run.push("describe", Outcome::Pass, format!("answered in {took}"));
        let findings = lint::lint_manifest(&value);
        for area in Area::ALL {
            let (errors, warnings): (Vec<_>, Vec<_>) = findings
                .iter()
                .filter(|f| f.area == area)
                .partition(|f| f.severity == Severity::Error);
            let join = |v: &[&lint::Finding]| {
                v.iter()
                    .map(|f| f.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            if !errors.is_empty() {
                run.push(area.name(), Outcome::Fail, join(&errors));
            } else if !warnings.is_empty() {
                run.push(area.name(), Outcome::Warn, join(&warnings));
            } else {
                run.push(area.name(), Outcome::Pass, area_summary(area, &value));
            }
        }
        let manifest: Manifest = serde_json::from_value(value).ok()?;
        let manifest = Arc::new(manifest);
        self.p.remember_manifest(manifest.clone());
        Some(manifest)
    }

    pub(super) fn health(&self, run: &mut Run<'_>) {
        if self.skip_if_gone(run, "health") {
            return;
        }
        match self.p.health() {
            Ok(h) if !h.implemented => {
                run.push(
                    "health",
                    Outcome::Pass,
                    "not implemented (-32601): the Agent treats that as healthy",
                );
            }
            Ok(h) if matches!(h.status.as_str(), "ready" | "error" | "initializing") => {
                run.push("health", Outcome::Pass, format!("status {:?}", h.status));
            }
            Ok(h) => run.push(
                "health",
                Outcome::Warn,
                format!(
                    "status {:?} is not one of \"ready\", \"error\", \"initializing\"",
                    h.status
                ),
            ),
            Err(e) => run.push("health", Outcome::Fail, gone_text(&e)),
        }
    }

    fn invoke_opts(&self) -> InvokeOptions {
        InvokeOptions::new().timeout(self.opts.call_timeout)
    }

    /// The options for invoking `tool`: its manifest `timeout` when it declares one (as
    /// the Agent allows it), else [`CheckOptions::call_timeout`].
    fn invoke_opts_for(&self, tool: &str, manifest: Option<&Manifest>) -> InvokeOptions {
        let declared = manifest
            .and_then(|m| m.tools.iter().find(|t| t.name == tool))
            .and_then(|t| t.timeout)
            .filter(|&s| s > 0)
            .map(Duration::from_secs);
        InvokeOptions::new().timeout(declared.unwrap_or(self.opts.call_timeout))
    }

    pub(super) fn storage_scopes(&self, run: &mut Run<'_>, storage: &ScopeWatch) {
        const NAME: &str = "storage scopes";
        let refused = storage.refused();
        if let Some(first) = refused.first() {
            run.push(
                NAME,
                Outcome::Fail,
                format!(
                    "{} storage call(s) refused, first: {first}; production grants plugins only the \
                     \"user\" and \"tool\" scopes and a missing scope means \"app\": pass \
                     scope explicitly (pitfall #12)",
                    refused.len()
                ),
            );
        }
    }

    pub(super) fn unknown_tool(&self, run: &mut Run<'_>) {
        const NAME: &str = "unknown tool";
        if self.skip_if_gone(run, NAME) {
            return;
        }
        match self
            .p
            .invoke_raw(UNKNOWN_TOOL, &json!({}), &self.invoke_opts())
        {
            Err(Error::Remote(e)) if e.code == codes::METHOD_NOT_FOUND => {
                run.push(NAME, Outcome::Pass, "rejected with -32601");
            }
            Err(Error::Remote(e)) => {
                run.push(
                    NAME,
                    Outcome::Fail,
                    format!("rejected with {e}; an unknown tool is -32601"),
                );
            }
            Ok((_, raw)) => run.push(
                NAME,
                Outcome::Fail,
                format!(
                    "answered with a result instead of a -32601 error: {}",
                    snippet(raw.get())
                ),
            ),
            Err(e) => run.push(NAME, Outcome::Fail, gone_text(&e)),
        }
    }

    pub(super) fn smoke(&self, run: &mut Run<'_>, manifest: Option<&Manifest>) {
        const NAME: &str = "invoke result";
        if self.skip_if_gone(run, NAME) {
            return;
        }
        let calls: Vec<(String, Value)> = match &self.opts.smoke {
            Smoke::Off => return run.push(NAME, Outcome::Skip, "smoke invoke disabled"),
            Smoke::Tool { name, arguments } => vec![(name.clone(), arguments.clone())],
            Smoke::Auto => manifest
                .map(|m| {
                    m.tools
                        .iter()
                        .map(|t| (t.name.clone(), sample_arguments(t)))
                        .collect()
                })
                .unwrap_or_default(),
        };
        if calls.is_empty() {
            return run.push(NAME, Outcome::Skip, "no manifest, no tools to invoke");
        }
        let mut worst = Outcome::Pass;
        let mut details = Vec::new();
        for (tool, args) in &calls {
            if self.p.exit_status().is_some() {
                break;
            }
            let (outcome, detail) = self.invoke_one(tool, args, manifest);
            worst = match (worst, outcome) {
                (Outcome::Fail, _) | (_, Outcome::Fail) => Outcome::Fail,
                (Outcome::Warn, _) | (_, Outcome::Warn) => Outcome::Warn,
                _ => worst,
            };
            // A long list stays readable: every non-pass, and passes only for one tool.
            if outcome != Outcome::Pass || calls.len() == 1 {
                details.push(match self.opts.smoke {
                    Smoke::Auto => format!("`{tool}` {args}: {detail}"),
                    _ => format!("`{tool}`: {detail}"),
                });
            }
        }
        if details.is_empty() {
            let names: Vec<String> = calls.iter().map(|(t, _)| format!("`{t}`")).collect();
            details.push(format!(
                "{} answered with the {{success, data}} / {{success: false, error}} envelope \
                 (arguments synthesized from the declared parameters)",
                names.join(", ")
            ));
        }
        run.push(NAME, worst, details.join("; "));
    }

    fn invoke_one(
        &self,
        tool: &str,
        args: &Value,
        manifest: Option<&Manifest>,
    ) -> (Outcome, String) {
        let opts = self.invoke_opts_for(tool, manifest);
        match self.p.invoke_raw(tool, args, &opts) {
            Ok((_, raw)) => judge_result(&serde_json::from_str(raw.get()).unwrap_or(Value::Null)),
            Err(Error::Remote(e)) => (
                Outcome::Warn,
                format!("answered with a JSON-RPC error {e} (fine for a programmer error)"),
            ),
            Err(e) => (Outcome::Fail, gone_text(&e)),
        }
    }

    pub(super) fn reverse_calls(&self, run: &mut Run<'_>) {
        const NAME: &str = "reverse calls";
        let calls = self.p.reverse_calls();
        let refused = self.p.refused_reverse_calls();
        if let Some(first) = refused.first() {
            let hint = if first.contains("-32008") || first.contains("-32021") {
                "declare the capability in host_capabilities (pitfall #8)"
            } else if first.contains("INVOKE_CONTEXT") {
                "stamp params.context.invoke_id with the parent invoke's id"
            } else {
                "reverse RPC needs a v2 session: answer initialize"
            };
            return run.push(
                NAME,
                Outcome::Fail,
                format!("{} refused, first: {first}; {hint}", refused.len()),
            );
        }
        match calls {
            0 => run.push(NAME, Outcome::Skip, "the check's invokes made none"),
            n => run.push(
                NAME,
                Outcome::Pass,
                format!("{n} served by the in-memory backends"),
            ),
        }
    }

    pub(super) fn progress(&self, run: &mut Run<'_>, events: &Mutex<ProgressSeen>) {
        const NAME: &str = "progress";
        // Events are delivered on their own thread; let the last ones land.
        self.p.sync_progress(Duration::from_secs(1));
        let seen = *lock(events);
        match seen {
            ProgressSeen { total: 0, .. } => run.push(NAME, Outcome::Skip, "the check's invokes sent none"),
            ProgressSeen { total, uncorrelated: 0 } => {
                run.push(NAME, Outcome::Pass, format!("{total} event(s), each with its invoke's id"))
            }
            ProgressSeen { total, uncorrelated } => run.push(
                NAME,
                Outcome::Fail,
                format!(
                    "{uncorrelated} of {total} event(s) lack the invoke's params.context.invoke_id (or came after \
                     its reply): the platform drops them (pitfall #13)"
                ),
            ),
        }
    }

    pub(super) fn malformed(&self, run: &mut Run<'_>) {
        const NAME: &str = "malformed line";
        if self.skip_if_gone(run, NAME) {
            return;
        }
        let answered = self
            .p
            .probe_malformed(MALFORMED_LINE, self.opts.probe_timeout);
        // Whatever the answer, the plugin must still serve afterwards.
        let follow_up = if self.p.is_running() {
            self.p.health().err()
        } else {
            None
        };
        if let Some(status) = self.p.wait_exit(Duration::from_millis(50)) {
            return run.push(
                NAME,
                Outcome::Fail,
                format!("the plugin died on a malformed line ({status})"),
            );
        }
        if let Some(e) = follow_up {
            return run.push(
                NAME,
                Outcome::Fail,
                format!("stopped serving after a malformed line: {e}"),
            );
        }
        match answered {
            Ok(e) if e.code == codes::PARSE_ERROR => run.push(NAME, Outcome::Pass, "answered -32700 and kept serving"),
            Ok(e) => run.push(NAME, Outcome::Warn, format!("answered {e}; JSON-RPC says -32700 parse error")),
            Err(Error::Timeout { .. }) => run.push(
                NAME,
                Outcome::Fail,
                format!(
                    "no answer within {:.1}s: reply {{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32700,...}}}}",
                    self.opts.probe_timeout.as_secs_f64()
                ),
            ),
            Err(e) => run.push(NAME, Outcome::Fail, e.to_string()),
        }
    }

    pub(super) fn stdout(&self, run: &mut Run<'_>) {
        let noise = self.p.stdout_noise();
        if noise.is_clean() {
            return run.push("stdout", Outcome::Pass, "only JSON-RPC frames");
        }
        let first = noise
            .samples
            .first()
            .map(String::as_str)
            .unwrap_or_default();
        let what = match (noise.non_json, noise.invalid) {
            (n, 0) => format!("{n} non-JSON line(s)"),
            (0, j) => format!("{j} JSON line(s) that are not JSON-RPC frames"),
            (n, j) => format!("{n} non-JSON and {j} non-frame JSON line(s)"),
        };
        run.push(
            "stdout",
            Outcome::Fail,
            format!("{what} on stdout, first: {first:?}; stdout is for frames only, log to stderr (pitfall #3)"),
        );
    }

    pub(super) fn stays_alive(&self, run: &mut Run<'_>) -> bool {
        let replies = self.p.replies_received();
        match self.p.exit_status() {
            None => {
                run.push(
                    "stays alive",
                    Outcome::Pass,
                    format!("served {replies} replies in one process"),
                );
                true
            }
            Some(status) => {
                let replies = format!(
                    "{replies} {}",
                    if replies == 1 { "reply" } else { "replies" }
                );
                let stderr = self
                    .p
                    .stderr_tail()
                    .last()
                    .map_or("no stderr output".to_owned(), |l| {
                        format!("last stderr: {l}")
                    });
                let detail = if status.success() {
                    format!(
                        "exited ({status}) after {replies} while stdin was open: keep reading stdin until EOF, \
                         never exit after one request (pitfall #1); {stderr}"
                    )
                } else {
                    format!("crashed ({status}) after {replies}; {stderr}")
                };
                run.push("stays alive", Outcome::Fail, detail);
                false
            }
        }
    }

    pub(super) fn shutdown(&self, run: &mut Run<'_>, alive: bool) {
        const NAME: &str = "exit on EOF";
        let policy = &self.opts.host.shutdown;
        let report = self.p.shutdown_with(policy);
        let grace = policy.stdin_grace.as_secs_f64();
        let (outcome, detail) = judge_exit(&report, grace);
        if !alive && report.stage == ExitStage::AlreadyExited {
            return run.push(NAME, Outcome::Skip, "the plugin had already exited");
        }
        run.push(NAME, outcome, detail);
    }
}
