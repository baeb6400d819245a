//! `executa call`: one invoke, with in-memory backends answering reverse calls.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use executa::host::{
    Handlers, Host, InvokeOptions, InvokeResult, MemoryStorage, Protocol, ReverseCall,
    ScriptedSampling, Service, new_invoke_id,
};
use executa::{Error, RpcError};
use serde_json::{Map, Value, json};

use crate::cli::{
    Args, Common, Local, Usage, json_arg, mcp_version, protocol, secs, unknown, with_pin,
};
use crate::describe::pretty;

pub const HELP: &str = concat!(
    "\
executa call: invoke one tool and print the result

USAGE:
    executa call [OPTIONS] <TOOL> -- <PLUGIN COMMAND...>

Starts the plugin (initialize, describe), invokes TOOL once with a fresh context
(invoke_id, deadline_ms, credentials), prints the result on stdout and its progress
events on stderr (at most 4 lines a second, each cut to 300 bytes, then a count of the
rest), then shuts the plugin down. Reverse calls are answered
in memory unless told otherwise: storage/* by a key/value store (scopes, etags, paging),
sampling/createMessage by echoing the last user message (or from --sampling-fixture, or
a local command with --sampling-cmd). Placeholder sampling and storage tokens are sent
when the manifest declares llm.sample / aps.*.

The result is printed as one envelope, whatever the protocol:
    {\"success\": true, \"data\": ...}        the tool's result
    {\"success\": false, \"error\": \"TEXT\"}   its failure (\"details\" too when it gives them)
    {\"success\": false, \"error\": {\"code\": N, \"message\": \"TEXT\", \"data\": ...}}
                                        a JSON-RPC error (unknown tool, bad arguments)
An Executa plugin's result is printed as it sent it (other fields kept). When no answer
comes (a timeout, a plugin that exits, a result without `success`), nothing is printed
on stdout and stderr says why. Whatever the outcome, stderr ends with the time taken:
    invoke <INVOKE ID> took <MS> ms
An MCP stdio server gets tools/call (with a progress token); its result is read into
the envelope as the host library reads it: isError:true is success:false with the text
content as the error; else data is structuredContent, else the text content parsed as
JSON, else that text. --raw prints the result as it came. Sampling answers it the same
way; it has no invoke context, so credentials cannot be sent to it (refused). In MCP's
stateless era (2026-07-28, see --mcp-version) a call that needs input is answered with
what it asks for (sampling as above, no roots, elicitation declined) and sent again, at
most 10 rounds; the final result is printed.

OPTIONS:
    --args JSON                  the tool's arguments [{}]
    --credential NAME            a credential for context.credentials, its value read
                                 from the environment variable NAME (repeatable); NAME
                                 is removed from the plugin's environment
    --credential NAME=VALUE      the same with the value inline; it is then visible to
                                 other local users in the process list (argv), so prefer
                                 the NAME form. Values are never printed
    --timeout SECS               invoke timeout [the manifest tool's timeout, else 60]
    --raw                        an MCP server's tools/call result as it came
                                 (content, structuredContent, isError, _meta), not
                                 the envelope; an Executa result is the envelope
    --sampling-fixture FILE      answer sampling from a JSONL fixture: lines like
                                 {\"match\":{\"contains\":\"hi\"},\"result\":{\"text\":\"hello\"}}
",
    local_help!(),
    "    --verbose                    log each reverse call on stderr
",
    crate::cli::protocol_help!(),
    crate::cli::mcp_version_help!(),
    "    --init-timeout SECS, --describe-timeout SECS, --first-launch, --quiet, -h/--help

EXIT STATUS:
    0 success:true; 1 success:false, a JSON-RPC error or no answer; 2 usage or start
    failure.
"
);

pub fn run(mut args: Args) -> Result<ExitCode, Usage> {
    let mut common = Common::new();
    common.host.protocol = Protocol::Auto;
    let mut opts = InvokeOptions::new();
    let mut arguments = json!({});
    let mut tool = None;
    let mut fixture = None;
    let mut verbose = false;
    let mut raw = false;
    let mut local = Local::default();
    // Variables a credential was read from: the plugin must not inherit them.
    let mut read_from_env = Vec::new();
    while let Some((flag, inline)) = args.next_arg() {
        if common.apply(&mut args, &flag, inline.clone(), HELP)?
            || local.apply(&mut args, &flag, inline.clone())?
        {
            continue;
        }
        match flag.as_str() {
            "--args" => arguments = json_arg(&flag, &args.value(&flag, inline)?)?,
            "--credential" => {
                let (name, value, from_env) = credential(&args.value(&flag, inline)?)?;
                if from_env {
                    read_from_env.push(name.clone());
                }
                opts = opts.credential(name, value);
            }
            "--timeout" => opts.timeout = Some(secs(&flag, &args.value(&flag, inline)?)?),
            "--sampling-fixture" => fixture = Some(args.value(&flag, inline)?),
            "--verbose" | "-v" => verbose = true,
            "--raw" => raw = true,
            "--protocol" => common.host.protocol = protocol(&flag, &args.value(&flag, inline)?)?,
            "--mcp-version" => {
                common.host.mcp_version = mcp_version(&flag, &args.value(&flag, inline)?)?
            }
            f if f.starts_with('-') => return Err(unknown(f)),
            _ if tool.is_none() => tool = Some(flag),
            _ => return Err(Usage::Error(format!("unexpected argument `{flag}`"))),
        }
    }
    let tool = tool.ok_or_else(|| Usage::Error("`call` needs the tool name".to_owned()))?;
    common.host.protocol = with_pin(common.host.protocol, &common.host.mcp_version);
    // The plugin gets credentials in the invoke context and nowhere else: not in its
    // environment, where its children and `/proc/PID/environ` would keep them too.
    let cmd = read_from_env
        .iter()
        .fold(args.plugin()?, |cmd, name| cmd.env_remove(name));
    let sampling: Arc<dyn Service> = match (fixture, local.sampling()) {
        (Some(_), Some(_)) => {
            return Err(Usage::Error(
                "`--sampling-fixture` and `--sampling-cmd` both answer sampling: give one".into(),
            ));
        }
        (Some(path), None) => match ScriptedSampling::from_file(&path) {
            Ok(s) => Arc::new(s),
            Err(e) => return Err(Usage::Error(e.to_string())),
        },
        (None, Some(cmd)) => cmd,
        (None, None) => Arc::new(ScriptedSampling::echo()),
    };
    let storage = local
        .storage(&["user", "app", "tool"])?
        .unwrap_or_else(|| Arc::new(MemoryStorage::new()));
    let services: [Arc<dyn Service>; 2] = [storage, sampling];
    let printer = Arc::new(std::sync::Mutex::new(ProgressPrinter::default()));
    let shown = printer.clone();
    let mut handlers = Handlers::new().on_progress(move |p| {
        let id = p.invoke_id.as_deref().unwrap_or("-");
        let line = format!("progress [{}] {} {}", p.kind, id, p.data);
        shown.lock().unwrap_or_else(|e| e.into_inner()).print(&line);
    });
    for s in services {
        handlers = handlers.service(if verbose { Arc::new(Logged(s)) } else { s });
    }
    common.host.dev_tokens = true;
    let host = match Host::start(cmd, common.host, handlers) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("executa call: the plugin did not start: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let (outcome, timing) = timed_invoke(&host, &tool, &arguments, opts);
    let mcp = host.handshake().is_ok_and(|h| h.mcp_revision.is_some());
    // Progress events arrive on their own thread; print the last ones before the result.
    host.sync_progress(Duration::from_secs(1));
    printer.lock().unwrap_or_else(|e| e.into_inner()).finish();
    host.shutdown();
    let code = report(outcome, mcp && !raw);
    eprintln!("{timing}");
    Ok(code)
}

/// Invokes `tool` once; returns the outcome and the line that says how long it took,
/// whatever the outcome. The invoke id is minted here rather than by the host, so that
/// the line names the invoke even when no answer came.
fn timed_invoke(
    host: &Host,
    tool: &str,
    arguments: &Value,
    mut opts: InvokeOptions,
) -> (executa::Result<InvokeResult>, String) {
    let invoke_id = new_invoke_id();
    opts.invoke_id = Some(invoke_id.clone());
    let start = Instant::now();
    let outcome = host.invoke_with(tool, arguments, &opts);
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    (outcome, format!("invoke {invoke_id} took {ms:.1} ms"))
}

/// Progress lines printed in a second, at most; the rest are counted.
const PROGRESS_PER_SECOND: u32 = 4;

/// The longest progress line printed, in bytes (cut at a character's start, then `…`).
const PROGRESS_LINE: usize = 300;

/// Prints progress events on stderr as the logs are printed: a few a second, each line
/// cut, then how many were left out, so a plugin's flood of events (or one of 10 MB)
/// costs the terminal a few short lines.
#[derive(Default)]
struct ProgressPrinter {
    window: Option<std::time::Instant>,
    shown: u32,
    left_out: u64,
}

impl ProgressPrinter {
    fn print(&mut self, line: &str) {
        let now = std::time::Instant::now();
        if self
            .window
            .is_none_or(|w| now.duration_since(w) >= Duration::from_secs(1))
        {
            self.finish();
            self.window = Some(now);
            self.shown = 0;
        }
        if self.shown < PROGRESS_PER_SECOND {
            self.shown += 1;
            eprintln!("{}", cut(line, PROGRESS_LINE));
        } else {
            self.left_out += 1;
        }
    }

    /// Says how many events were left out since the last count.
    fn finish(&mut self) {
        if self.left_out > 0 {
            eprintln!("progress: {} more events not shown", self.left_out);
            self.left_out = 0;
        }
    }
}

/// `line` cut to at most `max` bytes at a character's start, marked with `…`.
fn cut(line: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if line.len() <= max {
        return line.into();
    }
    let mut end = max - '…'.len_utf8();
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end]).into()
}

/// Prints the outcome: the envelope on stdout (an MCP result read into it when
/// `from_mcp`), or why there is none on stderr.
fn report(outcome: executa::Result<InvokeResult>, from_mcp: bool) -> ExitCode {
    match outcome {
        Ok(r) => {
            let value = if from_mcp {
                envelope(&r)
            } else {
                serde_json::from_str(r.raw.get()).unwrap_or_default()
            };
            println!("{}", pretty(&value));
            if r.success {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(Error::Remote(e)) => {
            println!("{}", pretty(&json!({ "success": false, "error": e })));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("executa call: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The Executa envelope of a result read from MCP: `{success: true, data}` or
/// `{success: false, error}`, with `details` and `duration_ms` when it has them. What is
/// MCP's own (`content`, `_meta`, ...) is left to `--raw`: it would make the two shapes
/// differ.
fn envelope(r: &InvokeResult) -> Value {
    let mut out = Map::new();
    out.insert("success".to_owned(), Value::Bool(r.success));
    if r.success || !r.data.is_null() {
        out.insert("data".to_owned(), r.data.clone());
    }
    if let Some(error) = &r.error {
        out.insert("error".to_owned(), Value::from(error.as_str()));
    }
    if let Some(details) = &r.details {
        out.insert("details".to_owned(), details.clone());
    }
    if let Some(ms) = r.duration_ms {
        out.insert("duration_ms".to_owned(), Value::from(ms));
    }
    Value::Object(out)
}

/// Logs each reverse call (method, invoke and outcome; never the params, which may hold
/// user data) on stderr.
struct Logged(Arc<dyn Service>);

impl Service for Logged {
    fn handles(&self, method: &str) -> bool {
        self.0.handles(method)
    }

    fn call(&self, call: &ReverseCall) -> Result<Value, RpcError> {
        let out = self.0.call(call);
        let how = match &out {
            Ok(_) => "ok".to_owned(),
            Err(e) => format!("error {e}"),
        };
        eprintln!(
            "reverse {} (invoke {}): {how}",
            call.method,
            call.invoke_id.as_deref().unwrap_or("-")
        );
        out
    }
}

/// `NAME=VALUE`, or `NAME` with the value from the environment variable `NAME` (which
/// keeps it off the command line, where every local user can read it). The flag says
/// whether the value came from the environment.
fn credential(arg: &str) -> Result<(String, String, bool), Usage> {
    if let Some((name, value)) = arg.split_once('=') {
        return Ok((name.to_owned(), value.to_owned(), false));
    }
    if arg.is_empty() {
        return Err(Usage::Error(
            "`--credential` takes NAME (read from the environment) or NAME=VALUE".to_owned(),
        ));
    }
    match std::env::var(arg) {
        Ok(value) => Ok((arg.to_owned(), value, true)),
        Err(_) => Err(Usage::Error(format!(
            "`--credential {arg}`: the environment variable {arg} is not set (or not UTF-8)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn long_lines_are_cut_at_a_character() {
        assert_eq!(cut("short", 300), "short");
        let long = "é".repeat(400);
        let c = cut(&long, 300);
        assert!(c.len() <= 300 && c.ends_with('…'), "{}", c.len());
        assert!(c.trim_end_matches('…').chars().all(|ch| ch == 'é'));
    }
}
