//! `executa check`: the conformance run, printed one line per check.

use std::process::ExitCode;

use executa::host::check::{self, CheckOptions, Outcome, Smoke};
use serde_json::json;

use crate::cli::{Args, Common, Local, Usage, json_arg, secs, unknown};

pub const HELP: &str = concat!(
    "\
executa check: a conformance run a plugin author can trust

USAGE:
    executa check [OPTIONS] -- <PLUGIN COMMAND...>

Starts the plugin and drives it as the Agent does, printing one PASS/WARN/FAIL/SKIP line
per check, then exits 1 if any check failed. It catches the documented pitfalls visible
on the wire:
    start            a plugin that exits with a failure before answering (a definition
                     its runtime refuses, a crash) is one line: \"refused to start\",
                     quoting its own reason from stderr; exit status 2
    stays alive      exits after one reply instead of reading stdin until EOF (#1)
    initialize       answered (v2), or -32601 (v1-only, reported); no answer fails, and a
                     plugin that buffers stdout is told to flush after each reply
    describe         answered in time; the bare manifest, not {\"manifest\":{...}} (#5)
    manifest fields  name, description, SemVer version
    tools            non-empty, unique names, positive timeouts
    parameters       the LIST form with valid types, not JSON Schema / input_schema (#4)
    host_capabilities  only strings from the platform's allow-list (#9a)
    health           answered (or -32601, which counts as healthy)
    unknown tool     rejected with -32601
    invoke result    every tool, with arguments synthesized from its declared parameters
                     (nested objects, arrays, enums, defaults): the {success, data} /
                     {success:false, error} envelope (#5)
    reverse calls    none refused: capabilities declared (#8), invoke_id stamped
    progress         every event carries its invoke's context.invoke_id (#13)
    malformed line   answered with -32700, and the plugin keeps serving
    storage scopes   storage calls use the \"user\" or \"tool\" scope (#12)
    stdout           nothing but JSON-RPC frames, up to exit: no banners or prints (#3)
    exit on EOF      exits 0 within the window after stdin closes, without SIGTERM

Each invoke waits for the tool's manifest `timeout` when it declares one, else 10 s.
The numbers (#1 ... #13) are the platform's documented pitfalls: `executa check --pitfalls`.

OPTIONS:
    --invoke TOOL        invoke only this tool [every tool, arguments synthesized]
    --args JSON          its arguments [{}]
    --no-invoke          invoke no tool (tools with side effects)
    --pitfalls           list the documented pitfalls the numbers refer to, and exit
    --grace SECS         exit window after stdin closes, and after SIGTERM [5]
",
    local_help!(),
    "    --init-timeout SECS, --describe-timeout SECS, --first-launch, --quiet, -h/--help
"
);

/// The platform's "Common Pitfalls" list, which check lines cite by number.
pub const PITFALLS: &str = "\
The platform's documented plugin pitfalls (\"Common Pitfalls\"), cited by `executa check`:

 #1  The process exits after one request: the card shows Stopped and every call pays a cold
     start. Loop on stdin until EOF.
 #2  Names do not match (tool_id vs describe `name` vs the archive's manifest.json): the
     plugin lands under \"Extra Agent Plugins\".
 #3  Banners or debug text on stdout break the protocol. Log to stderr.
 #4  MCP-style `input_schema` instead of a `parameters` LIST: the model invents argument names.
 #5  Wrong result shape: describe returns the bare manifest; invoke returns {success, data, ...}.
 #6  A multi-file archive without manifest.json: wrong entrypoint, missing exec bits.
 #7  Slow start (onefile bundles) beyond the 5 s describe timeout: shrink, or init lazily.
 #8  sampling/createMessage fails with -32008 not_negotiated: `llm.sample` missing from
     host_capabilities.
 #9  The plugin exits before a reverse call completes (\"unmatched response id\").
 #9a No Permission button (UPLOAD_NOT_GRANTED): the manifest never reached the server; unknown
     capability strings are rejected with HTTP 400.
 #10 MAX_TOKENS_EXCEEDED (-32007) on a small call: the cap is cumulative per invoke (32 000).
 #11 storage/get looks empty: check `exists`, not whether `value` is truthy.
 #12 Wrong or missing storage `scope`: it defaults to `app`; always pass it.
 #13 Progress never shows: no invoke_id correlation, a sync invoke, or the 50/s rate limit.
";

pub fn run(mut args: Args) -> Result<ExitCode, Usage> {
    let mut common = Common::new();
    let mut opts = CheckOptions::default();
    let mut tool: Option<String> = None;
    let mut arguments = json!({});
    let mut no_invoke = false;
    let mut local = Local::default();
    while let Some((flag, inline)) = args.next_arg() {
        if common.apply(&mut args, &flag, inline.clone(), HELP)?
            || local.apply(&mut args, &flag, inline.clone())?
        {
            continue;
        }
        match flag.as_str() {
            "--invoke" => tool = Some(args.value(&flag, inline)?),
            "--args" => arguments = json_arg(&flag, &args.value(&flag, inline)?)?,
            "--no-invoke" => no_invoke = true,
            "--pitfalls" => return Err(Usage::Help(PITFALLS.to_owned())),
            "--grace" => {
                let grace = secs(&flag, &args.value(&flag, inline)?)?;
                common.host.shutdown.stdin_grace = grace;
                common.host.shutdown.term_grace = grace;
            }
            _ => return Err(unknown(&flag)),
        }
    }
    let cmd = args.plugin()?;
    opts.smoke = match (no_invoke, tool) {
        (true, _) => Smoke::Off,
        (false, Some(name)) => Smoke::Tool { name, arguments },
        (false, None) => Smoke::Auto,
    };
    opts.host = common.host;
    opts.sampling = local.sampling();
    // The scopes production grants plugins, as the in-memory default does (pitfall #12).
    opts.storage = local.storage(&["user", "tool"])?;
    println!("executa check: {cmd}");
    let report = check::run_with(&cmd, &opts, |line| println!("{line}"));
    println!(
        "\n{} passed, {} warnings, {} failed, {} skipped",
        report.count(Outcome::Pass),
        report.count(Outcome::Warn),
        report.count(Outcome::Fail),
        report.count(Outcome::Skip)
    );
    // A plugin that could not be started at all is exit status 2, as `--help` says.
    let started = report
        .line("start")
        .is_some_and(|l| l.outcome != Outcome::Fail);
    Ok(if !started {
        ExitCode::from(2)
    } else if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
