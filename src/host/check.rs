//! `executa check`: a conformance run of any plugin against what the Agent expects, one
//! line per check, catching each documented pitfall that is visible on the wire.
//!
//! The run starts the plugin, sends `initialize`, `describe`, `health`, an `invoke` of an
//! unknown tool, a smoke `invoke`, and a malformed line, watching stdout for anything that
//! is not a frame, then closes stdin and times the exit. Each step becomes a [`CheckLine`].

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::types::snippet;
use super::{
    ExitStage, Handlers, Handshake, HostOptions, InvokeOptions, MemoryStorage, PluginCommand,
    PluginProcess, ReverseCall, ScriptedSampling, Service, ShutdownReport,
};
use crate::error::{Error, RpcError, codes};
use crate::lint::{self, Area, Severity};
use crate::lock::lock;
use crate::manifest::Manifest;
use crate::protocol::ProtocolVersion;

/// The tool name used to probe unknown-tool handling.
pub const UNKNOWN_TOOL: &str = "__executa_check_no_such_tool__";
/// The line used to probe malformed-input handling.
pub const MALFORMED_LINE: &[u8] = b"{this is not JSON";

/// Which tool the smoke invoke calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Smoke {
    /// Every tool, with arguments synthesized from its declared parameters
    /// ([`sample_arguments`](crate::host::sample_arguments)).
    #[default]
    Auto,
    /// This tool with these arguments.
    Tool {
        /// The tool name.
        name: String,
        /// Its arguments.
        arguments: Value,
    },
    /// No smoke invoke.
    Off,
}

/// Settings of a conformance run.
#[derive(Clone)]
pub struct CheckOptions {
    /// Timeouts and the shutdown window. The default is the Agent's: 5 s for
    /// `initialize` and `describe`, 5 s for the plugin to exit after stdin closes.
    pub host: HostOptions,
    /// The smoke invoke.
    pub smoke: Smoke,
    /// Timeout of each `invoke` sent by the check.
    pub call_timeout: Duration,
    /// How long to wait for the answer to the malformed line.
    pub probe_timeout: Duration,
    /// What answers `sampling/createMessage`: `None` for the echoing
    /// [`ScriptedSampling`], or another backend such as
    /// [`CommandSampling`](crate::host::CommandSampling).
    pub sampling: Option<Arc<dyn Service>>,
    /// What answers `storage/*`: `None` for a [`MemoryStorage`] granting the scopes
    /// production grants (`user`, `tool`), or another backend such as
    /// [`DirStorage::with_scopes`](crate::host::DirStorage::with_scopes). Calls it refuses
    /// with -32021 are reported as scope mistakes either way.
    pub storage: Option<Arc<dyn Service>>,
}

impl fmt::Debug for CheckOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckOptions")
            .field("host", &self.host)
            .field("smoke", &self.smoke)
            .field("call_timeout", &self.call_timeout)
            .field("probe_timeout", &self.probe_timeout)
            .field("sampling", &self.sampling.as_ref().map(|_| "custom"))
            .field("storage", &self.storage.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            host: HostOptions::default(),
            smoke: Smoke::Auto,
            call_timeout: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(2),
            sampling: None,
            storage: None,
        }
    }
}

/// The verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// As the platform expects.
    Pass,
    /// Accepted, but worth fixing.
    Warn,
    /// The platform would reject or misread this.
    Fail,
    /// Not run (the plugin was gone, or nothing to check).
    Skip,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Pass => "PASS",
            Outcome::Warn => "WARN",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "SKIP",
        })
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckLine {
    /// What was checked.
    pub name: String,
    /// The verdict.
    pub outcome: Outcome,
    /// Why.
    pub detail: String,
}

impl fmt::Display for CheckLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}  {:<18} {}", self.outcome, self.name, self.detail)
    }
}

/// The whole report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Every line, in order.
    pub lines: Vec<CheckLine>,
}

impl Report {
    /// No line failed.
    pub fn passed(&self) -> bool {
        self.count(Outcome::Fail) == 0
    }

    /// How many lines have this outcome.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.lines.iter().filter(|l| l.outcome == outcome).count()
    }

    /// The line named `name`, if there is one.
    pub fn line(&self, name: &str) -> Option<&CheckLine> {
        self.lines.iter().find(|l| l.name == name)
    }

    /// The failed lines.
    pub fn failures(&self) -> impl Iterator<Item = &CheckLine> {
        self.lines.iter().filter(|l| l.outcome == Outcome::Fail)
    }
}

/// Runs the conformance check and returns the report. Blocks for the run: a few
/// milliseconds for a good plugin, up to the configured timeouts for a bad one.
pub fn run(cmd: &PluginCommand, opts: &CheckOptions) -> Report {
    run_with(cmd, opts, |_| {})
}

/// Like [`run`], calling `on_line` as each line is decided (to print progressively).
pub fn run_with(
    cmd: &PluginCommand,
    opts: &CheckOptions,
    on_line: impl FnMut(&CheckLine),
) -> Report {
    let mut run = Run {
        report: Report::default(),
        on_line: Box::new(on_line),
    };
    let mut host = opts.host.clone();
    // Reverse calls get the in-memory backends, behind the Agent's gates, so that a
    // missing capability shows up as it would in production (pitfall #8).
    host.dev_tokens = true;
    let events = Arc::new(Mutex::new(ProgressSeen::default()));
    let seen = events.clone();
    // Storage grants only the scopes production grants plugins (pitfall #12).
    let storage = Arc::new(ScopeWatch {
        inner: opts
            .storage
            .clone()
            .unwrap_or_else(|| Arc::new(MemoryStorage::with_scopes(&["user", "tool"]))),
        refused: Mutex::new(Vec::new()),
    });
    let sampling = opts
        .sampling
        .clone()
        .unwrap_or_else(|| Arc::new(ScriptedSampling::echo()));
    let handlers = Handlers::new().service(storage.clone()).service(sampling);
    let handlers = handlers.on_progress(move |p| {
        let mut s = lock(&seen);
        s.total += 1;
        if !p.active {
            s.uncorrelated += 1;
        }
    });
    let process = match PluginProcess::spawn(cmd, host, handlers) {
        Ok(p) => p,
        Err(e) => {
            run.push("start", Outcome::Fail, format!("cannot start `{cmd}`: {e}"));
            return run.report;
        }
    };
    let checker = Checker { p: &process, opts };
    let handshake = process.initialize();
    if let Some(why) = checker.refused_to_start(&handshake) {
        run.push("start", Outcome::Fail, why);
        process.shutdown_with(&opts.host.shutdown);
        return run.report;
    }
    run.push(
        "start",
        Outcome::Pass,
        format!("`{cmd}` running as pid {}", process.pid()),
    );
    checker.initialize(&mut run, handshake);
    let manifest = checker.describe(&mut run);
    checker.health(&mut run);
    checker.unknown_tool(&mut run);
    checker.smoke(&mut run, manifest.as_deref());
    checker.reverse_calls(&mut run);
    checker.storage_scopes(&mut run, &storage);
    checker.progress(&mut run, &events);
    checker.malformed(&mut run);
    let alive = checker.stays_alive(&mut run);
    checker.shutdown(&mut run, alive);
    // Judged last: what a plugin prints on its way out (after stdin closes) counts too,
    // and the shutdown has let the reader drain stdout to its end.
    checker.stdout(&mut run);
    run.report
}

/// The check's storage backend (by default [`MemoryStorage`] with production's scopes,
/// `user` and `tool`), remembering the calls refused for their scope.
struct ScopeWatch {
    inner: Arc<dyn Service>,
    refused: Mutex<Vec<String>>,
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
struct ProgressSeen {
    total: u64,
    uncorrelated: u64,
}

struct Run<'a> {
    report: Report,
    on_line: Box<dyn FnMut(&CheckLine) + 'a>,
}

impl Run<'_> {
    fn push(&mut self, name: &str, outcome: Outcome, detail: impl Into<String>) {
        let line = CheckLine {
            name: name.to_owned(),
            outcome,
            detail: detail.into(),
        };
        (self.on_line)(&line);
        self.report.lines.push(line);
    }
}

struct Checker<'a> {
    p: &'a PluginProcess,
    opts: &'a CheckOptions,
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
    fn refused_to_start(&self, handshake: &crate::Result<Handshake>) -> Option<String> {
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

    fn initialize(&self, run: &mut Run<'_>, handshake: crate::Result<Handshake>) {
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

    fn describe(&self, run: &mut Run<'_>) -> Option<Arc<Manifest>> {
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

    fn health(&self, run: &mut Run<'_>) {
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

    fn storage_scopes(&self, run: &mut Run<'_>, storage: &ScopeWatch) {
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

    fn unknown_tool(&self, run: &mut Run<'_>) {
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

    fn smoke(&self, run: &mut Run<'_>, manifest: Option<&Manifest>) {
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
                        .map(|t| (t.name.clone(), super::sample_args::sample_arguments(t)))
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

    fn reverse_calls(&self, run: &mut Run<'_>) {
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

    fn progress(&self, run: &mut Run<'_>, events: &Mutex<ProgressSeen>) {
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

    fn malformed(&self, run: &mut Run<'_>) {
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

    fn stdout(&self, run: &mut Run<'_>) {
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

    fn stays_alive(&self, run: &mut Run<'_>) -> bool {
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

    fn shutdown(&self, run: &mut Run<'_>, alive: bool) {
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

fn judge_exit(r: &ShutdownReport, grace: f64) -> (Outcome, String) {
    let status = r.status.map_or("not reaped".to_owned(), |s| s.to_string());
    match r.stage {
        ExitStage::StdinClosed if r.is_clean() => (
            Outcome::Pass,
            format!(
                "exited 0 {:.0} ms after stdin closed",
                r.elapsed.as_secs_f64() * 1000.0
            ),
        ),
        ExitStage::StdinClosed => (
            Outcome::Fail,
            format!(
                "exited with {status} after stdin closed: exit 0 unless it crashed (non-zero counts against the restart budget)"
            ),
        ),
        ExitStage::Terminated => (
            Outcome::Fail,
            format!(
                "still running {grace:.1}s after stdin closed; needed SIGTERM ({status}). Exit when stdin reaches EOF"
            ),
        ),
        ExitStage::Killed => (
            Outcome::Fail,
            format!(
                "ignored stdin EOF and SIGTERM; needed SIGKILL ({status}). Exit when stdin reaches EOF"
            ),
        ),
        ExitStage::AlreadyExited => (
            Outcome::Fail,
            format!("exited ({status}) before stdin was closed"),
        ),
    }
}

/// Judges an invoke result against the envelope the Agent decodes.
fn judge_result(v: &Value) -> (Outcome, String) {
    let Some(m) = v.as_object() else {
        return (
            Outcome::Fail,
            format!(
                "the result must be an object {{success, data}}, got {}",
                snippet(&v.to_string())
            ),
        );
    };
    let fail = |why: &str| (Outcome::Fail, format!("{why} (pitfall #5)"));
    match m.get("success") {
        None => fail(
            "the result has no `success` field: the Agent counts it as a failure with no message",
        ),
        Some(Value::Bool(true)) => match m.get("data") {
            None => fail("`success: true` without `data`"),
            Some(Value::Object(_)) => {
                (Outcome::Pass, "success: true with a data object".to_owned())
            }
            Some(_) => (
                Outcome::Warn,
                "`data` is not an object; Apps see {} for non-object data".to_owned(),
            ),
        },
        Some(Value::Bool(false)) => match m.get("error") {
            Some(e) if !e.is_null() => (
                Outcome::Pass,
                format!("success: false with error {}", snippet(&e.to_string())),
            ),
            _ => fail("`success: false` without an `error` message"),
        },
        Some(_) => fail("`success` must be a boolean"),
    }
}

fn area_summary(area: Area, v: &Value) -> String {
    let count = |k: &str| v.get(k).and_then(Value::as_array).map_or(0, Vec::len);
    match area {
        Area::Shape => "the bare manifest object".to_owned(),
        Area::Fields => format!(
            "name {}, version {}",
            v.get("name").map_or("?".into(), Value::to_string),
            v.get("version").map_or("?".into(), Value::to_string)
        ),
        Area::Tools => format!("{} tool(s), unique names", count("tools")),
        Area::Parameters => "list form, valid types".to_owned(),
        Area::Capabilities => format!(
            "{} declared, all on the allow-list",
            count("host_capabilities")
        ),
        Area::Credentials => format!("{} declared", count("credentials")),
    }
}

/// Explains an error in terms of the plugin's conduct.
fn gone_text(e: &Error) -> String {
    match e {
        Error::Disconnected(why) => why.clone(),
        other => other.to_string(),
    }
}
