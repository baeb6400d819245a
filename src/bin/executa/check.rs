//! `executa check`: the conformance run, printed one line per check.

use std::process::ExitCode;

use executa::host::check::{self, CheckOptions, Outcome, Smoke};
use serde_json::json;

use crate::cli::{Args, Common, Usage, json_arg, secs, unknown};

pub const HELP: &str = "\
executa check: a conformance run a plugin author can trust

USAGE:
    executa check [OPTIONS] -- <PLUGIN COMMAND...>

Starts the plugin and drives it as the Agent does, printing one PASS/WARN/FAIL/SKIP line
per check, then exits 1 if any check failed. It catches the documented pitfalls visible
on the wire:
    stays alive      exits after one reply instead of reading stdin until EOF (#1)
    initialize       answered (v2), or v1-only (reported; a timeout is a warning)
    describe         answered in time; the bare manifest, not {\"manifest\":{...}} (#5)
    manifest fields  name, description, SemVer version
    tools            non-empty, unique names, positive timeouts
    parameters       the LIST form with valid types, not JSON Schema / input_schema (#4)
    host_capabilities  only strings from the platform's allow-list (#9a)
    health           answered (or -32601, which counts as healthy)
    unknown tool     rejected with -32601
    invoke result    {success, data} / {success:false, error} envelope (#5)
    reverse calls    none refused: capabilities declared (#8), invoke_id stamped
    progress         every event carries its invoke's context.invoke_id (#13)
    malformed line   answered with -32700, and the plugin keeps serving
    storage scopes   storage calls use the \"user\" or \"tool\" scope (#12)
    stdout           nothing but JSON-RPC frames, up to exit: no banners or prints (#3)
    exit on EOF      exits 0 within the window after stdin closes, without SIGTERM

The smoke invoke waits for the tool's manifest `timeout` when it declares one, else 10 s.

OPTIONS:
    --invoke TOOL        the tool for the smoke invoke [first tool with no required
                         parameters]
    --args JSON          its arguments [{}]
    --no-invoke          skip the smoke invoke (tools with side effects)
    --grace SECS         exit window after stdin closes, and after SIGTERM [5]
    --init-timeout SECS, --describe-timeout SECS, --first-launch, --quiet, -h/--help
";

pub fn run(mut args: Args) -> Result<ExitCode, Usage> {
    let mut common = Common::new();
    let mut opts = CheckOptions::default();
    let mut tool: Option<String> = None;
    let mut arguments = json!({});
    let mut no_invoke = false;
    while let Some((flag, inline)) = args.next_arg() {
        if common.apply(&mut args, &flag, inline.clone(), HELP)? {
            continue;
        }
        match flag.as_str() {
            "--invoke" => tool = Some(args.value(&flag, inline)?),
            "--args" => arguments = json_arg(&flag, &args.value(&flag, inline)?)?,
            "--no-invoke" => no_invoke = true,
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
