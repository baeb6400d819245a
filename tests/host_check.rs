//! `executa check` (the library run behind the CLI): passes on well-behaved plugins, and
//! fails each misbehaving one with the right reason.
// Unix only: drives Python fixtures, which a Windows test process under Wine cannot start.
#![cfg(unix)]

mod host_common;

use std::time::Duration;

use executa::host::PluginCommand;
use executa::host::check::{self, CheckOptions, Outcome, Report, Smoke};
use host_common::{py, short_shutdown};
use serde_json::json;

/// The Agent's windows (generous for what a good plugin does at once), quiet stderr.
fn options() -> CheckOptions {
    CheckOptions {
        host: host_common::opts(),
        // A plugin that answers the malformed line must never miss this on a slow machine.
        probe_timeout: Duration::from_secs(5),
        ..CheckOptions::default()
    }
}

/// Short shutdown windows, for plugins that never exit on their own: they miss them
/// however fast the machine is. Everything else keeps the generous defaults.
fn never_exits() -> CheckOptions {
    let mut o = options();
    o.host.shutdown = short_shutdown();
    o
}

/// A short `initialize` window, for plugins that never answer it.
fn never_initializes() -> CheckOptions {
    let mut o = options();
    o.host.initialize_timeout = Duration::from_millis(500);
    o
}

/// Short `initialize` and `describe` windows, for a plugin that answers neither until its
/// stdin closes (it buffers stdout).
fn never_answers_in_time() -> CheckOptions {
    let mut o = never_initializes();
    o.host.describe_timeout = Duration::from_millis(500);
    o
}

/// A short probe window, for a plugin that never answers a malformed line.
fn never_answers_the_probe() -> CheckOptions {
    let mut o = options();
    o.probe_timeout = Duration::from_millis(500);
    o
}

fn check(cmd: PluginCommand) -> Report {
    check::run(&cmd, &options())
}

fn render(r: &Report) -> String {
    r.lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Asserts that exactly the named line fails (besides `also`), with `reason` in its text.
fn fails_with(r: &Report, name: &str, reason: &str, also: &[&str]) {
    let line = r
        .line(name)
        .unwrap_or_else(|| panic!("no `{name}` line in\n{}", render(r)));
    assert_eq!(line.outcome, Outcome::Fail, "{}", render(r));
    assert!(
        line.detail.contains(reason),
        "`{name}` should mention {reason:?}:\n{}",
        render(r)
    );
    for f in r.failures() {
        assert!(
            f.name == name || also.contains(&f.name.as_str()),
            "unexpected failure {f}\n{}",
            render(r)
        );
    }
    assert!(!r.passed());
}

#[test]
fn quickstart_plugin_passes() {
    let r = check(py("quickstart.py", &[]));
    assert!(r.passed(), "{}", render(&r));
    assert_eq!(r.count(Outcome::Warn), 0, "{}", render(&r));
    for name in [
        "initialize",
        "describe",
        "health",
        "unknown tool",
        "invoke result",
        "malformed line",
        "stdout",
    ] {
        assert_eq!(
            r.line(name).unwrap().outcome,
            Outcome::Pass,
            "{name}\n{}",
            render(&r)
        );
    }
    let invoked = &r.line("invoke result").unwrap().detail;
    assert!(
        invoked.contains("`whoami`") && invoked.contains("synthesized"),
        "every tool is invoked: {invoked}"
    );
    assert!(r.line("exit on EOF").unwrap().detail.contains("exited 0"));
}

#[test]
fn tools_plugin_passes_with_a_chosen_smoke_invoke() {
    let mut o = options();
    o.smoke = Smoke::Tool {
        name: "echo".into(),
        arguments: json!({"text": "smoke"}),
    };
    let r = check::run(&py("tools_plugin.py", &[]), &o);
    assert!(r.passed(), "{}", render(&r));
    assert!(
        r.line("invoke result")
            .unwrap()
            .detail
            .contains("`echo`: success: true"),
        "{}",
        render(&r)
    );
}

#[test]
fn reverse_calls_and_progress_are_checked_when_the_smoke_invoke_makes_them() {
    let mut o = options();
    o.smoke = Smoke::Tool {
        name: "progress".into(),
        arguments: json!({"steps": 2}),
    };
    let r = check::run(&py("tools_plugin.py", &[]), &o);
    assert!(r.passed(), "{}", render(&r));
    assert_eq!(
        r.line("progress").unwrap().outcome,
        Outcome::Pass,
        "{}",
        render(&r)
    );

    o.smoke = Smoke::Tool {
        name: "sample".into(),
        arguments: json!({"prompt": "hi"}),
    };
    let r = check::run(&py("tools_plugin.py", &[]), &o);
    assert!(r.passed(), "{}", render(&r));
    assert!(
        r.line("reverse calls").unwrap().detail.contains("1 served"),
        "{}",
        render(&r)
    );

    // Pitfall #8: sampling without `llm.sample` in host_capabilities.
    let r = check::run(&py("tools_plugin.py", &["--no-caps"]), &o);
    fails_with(&r, "reverse calls", "pitfall #8", &[]);
    assert!(
        r.line("reverse calls").unwrap().detail.contains("-32008"),
        "{}",
        render(&r)
    );
}

#[test]
fn a_plugin_that_never_answers_initialize_fails_with_the_stall() {
    let r = check::run(&py("no_initialize.py", &[]), &never_initializes());
    fails_with(&r, "initialize", "never answered", &[]);
    assert!(
        r.line("initialize").unwrap().detail.contains("-32601"),
        "{}",
        render(&r)
    );
}

#[test]
fn a_parameter_without_a_description_is_a_warning_naming_its_path_and_the_fix() {
    let r = check(py("undescribed_params.py", &[]));
    assert!(r.passed(), "{}", render(&r));
    let line = r.line("parameters").unwrap();
    assert_eq!(line.outcome, Outcome::Warn, "{}", render(&r));
    let fix = "has no `description` (the model reads it to fill the argument in): add a `///` \
               doc comment to the field, or give its `Param` one (`Param::string(name, description)`)";
    let expected: Vec<String> = ["address.city", "lines[].qty", "note"]
        .iter()
        .map(|path| format!("tool \"order\": parameter \"{path}\" {fix}"))
        .collect();
    assert_eq!(line.detail, expected.join("; "), "{}", render(&r));
    assert_eq!(
        r.count(Outcome::Warn),
        1,
        "only the parameters warn\n{}",
        render(&r)
    );
}

#[test]
fn a_v1_plugin_answering_32601_is_reported_as_such_and_passes() {
    let r = check::run(&py("flawed.py", &["init_not_found"]), &options());
    let line = r.line("initialize").unwrap();
    assert_eq!(line.outcome, Outcome::Pass, "{}", render(&r));
    assert!(line.detail.contains("v1-only"), "{}", render(&r));
    assert!(r.passed(), "{}", render(&r));
}

#[test]
fn exit_after_one_reply_fails_stays_alive() {
    let r = check(py("exits_after_reply.py", &[]));
    fails_with(&r, "stays alive", "pitfall #1", &["describe"]);
    assert!(
        r.line("stays alive")
            .unwrap()
            .detail
            .contains("exit status: 0"),
        "{}",
        render(&r)
    );
}

#[test]
fn banner_on_stdout_fails_stdout() {
    let r = check(py("banner.py", &[]));
    fails_with(&r, "stdout", "Banner Plugin v1.0", &[]);
    assert!(r.line("stdout").unwrap().detail.contains("pitfall #3"));
}

#[test]
fn crash_mid_invoke_fails_the_invoke_and_stays_alive() {
    let r = check(py("crash_mid_invoke.py", &[]));
    fails_with(&r, "invoke result", "exit status: 3", &["stays alive"]);
    assert!(
        r.line("stays alive")
            .unwrap()
            .detail
            .contains("crashed (exit status: 3)"),
        "{}",
        render(&r)
    );
}

#[test]
fn ignoring_stdin_eof_fails_exit_on_eof() {
    let r = check::run(&py("ignores_eof.py", &[]), &never_exits());
    fails_with(&r, "exit on EOF", "needed SIGTERM", &[]);
}

#[test]
fn ignoring_sigterm_fails_exit_on_eof() {
    let r = check::run(&py("ignores_sigterm.py", &[]), &never_exits());
    fails_with(&r, "exit on EOF", "needed SIGKILL", &[]);
}

#[test]
fn manifest_and_envelope_pitfalls_fail_with_the_right_reason() {
    let cases: &[(&str, &str, &str)] = &[
        ("wrapped_manifest", "manifest shape", "wrapped"),
        ("input_schema", "parameters", "input_schema"),
        ("schema_parameters", "parameters", "JSON-Schema"),
        ("bad_param_type", "parameters", "\"str\""),
        ("bad_capability", "host_capabilities", "\"storage.user\""),
        ("bad_semver", "manifest fields", "not SemVer"),
        ("duplicate_tools", "tools", "more than once"),
        ("no_success", "invoke result", "no `success` field"),
        ("silent_on_malformed", "malformed line", "no answer"),
        ("exit_nonzero", "exit on EOF", "exit status: 2"),
        ("wrong_unknown_tool", "unknown tool", "instead of a -32601"),
        ("progress_uncorrelated", "progress", "pitfall #13"),
        ("storage_no_scope", "storage scopes", "pitfall #12"),
        ("goodbye_on_stdout", "stdout", "Goodbye from flawed!"),
    ];
    // Independent plugins: run them two at a time to keep the suite quick.
    std::thread::scope(|s| {
        for pair in cases.chunks(2) {
            let runs: Vec<_> = pair
                .iter()
                .map(|&(flaw, line, reason)| {
                    s.spawn(move || {
                        let opts = if flaw == "silent_on_malformed" {
                            never_answers_the_probe()
                        } else {
                            options()
                        };
                        let report = check::run(&py("flawed.py", &[flaw]), &opts);
                        (flaw, line, reason, report)
                    })
                })
                .collect();
            for run in runs {
                let (flaw, line, reason, report) = run.join().unwrap();
                let r = &report;
                let l = r
                    .line(line)
                    .unwrap_or_else(|| panic!("{flaw}: no `{line}` line\n{}", render(r)));
                assert_eq!(l.outcome, Outcome::Fail, "{flaw}\n{}", render(r));
                assert!(
                    l.detail.contains(reason),
                    "{flaw}: `{line}` should mention {reason:?}\n{}",
                    render(r)
                );
                assert_eq!(
                    r.failures().count(),
                    1,
                    "{flaw}: one failure expected\n{}",
                    render(r)
                );
            }
        }
    });
}

#[test]
fn a_plugin_dropping_the_agents_initialize_id_0_fails() {
    let r = check::run(&py("flawed.py", &["falsy_id"]), &never_initializes());
    fails_with(&r, "initialize", "id 0", &[]);
}

#[test]
fn the_smoke_invoke_waits_for_the_tools_declared_timeout() {
    // The tool takes 1.5 s and declares 30 s; the check's own call timeout is shorter.
    let mut o = options();
    o.call_timeout = Duration::from_millis(500);
    let r = check::run(&py("flawed.py", &["slow_tool"]), &o);
    let line = r.line("invoke result").unwrap();
    assert_eq!(line.outcome, Outcome::Pass, "{}", render(&r));
    assert!(r.passed(), "{}", render(&r));
}

#[test]
fn every_tool_is_invoked_with_synthesized_arguments() {
    // The only tool requires `text`; its result lacks `success`, which must fail, not skip.
    let r = check::run(&py("flawed.py", &["required_no_success"]), &options());
    fails_with(&r, "invoke result", "no `success` field", &[]);
    assert!(
        r.line("invoke result")
            .unwrap()
            .detail
            .contains(r#"`echo` {"text":"ping"}"#),
        "{}",
        render(&r)
    );
}

#[test]
fn a_plugin_that_buffers_stdout_is_told_to_flush() {
    let r = check::run(&py("buffered.py", &[]), &never_answers_in_time());
    let line = r.line("initialize").unwrap();
    assert_eq!(line.outcome, Outcome::Fail, "{}", render(&r));
    assert!(
        line.detail.contains("flush stdout after each reply"),
        "{}",
        render(&r)
    );
    assert!(!line.detail.contains("never answered"), "{}", render(&r));
    // The plugin is gone after the probe: the rest is skipped, not waited for.
    assert_eq!(
        r.line("describe").unwrap().outcome,
        Outcome::Skip,
        "{}",
        render(&r)
    );
}
