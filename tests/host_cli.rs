//! The `executa` binary: help, check, describe, call and bench against the Python plugins
//! and the crate's examples; a plugin started by hand in a terminal.
// The tests marked `#[cfg(unix)]` drive Python fixtures, which a Windows test process under
// Wine cannot start; what they leave unused there is allowed.
#![cfg_attr(not(unix), allow(unused_imports, dead_code))]

mod common;
mod host_common;

use std::process::{Command, Output, Stdio};

use host_common::fixture;
use serde_json::Value;

fn executa(args: &[&str], plugin: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_executa"));
    cmd.args(args);
    if !plugin.is_empty() {
        cmd.args(PATIENT);
        let script = fixture(plugin[0]);
        cmd.arg("--").arg("python3").arg(script).args(&plugin[1..]);
    }
    cmd.output().expect("run executa")
}

/// Windows far past the Agent's 5 s for plugins that answer: a loaded machine must not
/// fake a stall.
const PATIENT: [&str; 4] = ["--init-timeout", "30", "--describe-timeout", "30"];

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_documents_every_subcommand() {
    let top = executa(&["--help"], &[]);
    assert!(top.status.success());
    let text = stdout(&top);
    for sub in ["check", "describe", "call", "bench"] {
        assert!(text.contains(sub), "--help lacks {sub}");
        for form in [vec!["help", sub], vec![sub, "--help"]] {
            let o = executa(&form, &[]);
            assert!(o.status.success(), "{form:?}");
            assert!(
                stdout(&o).starts_with(&format!("executa {sub}:")),
                "{form:?}: {}",
                stdout(&o)
            );
            assert!(stdout(&o).contains("USAGE:"));
        }
    }
    let check = stdout(&executa(&["help", "check"], &[]));
    for pitfall in [
        "(#1)", "(#3)", "(#4)", "(#5)", "(#9a)", "(#12)", "-32601", "-32700",
    ] {
        assert!(check.contains(pitfall), "check help lacks {pitfall}");
    }
    // Each subcommand has its own line in the top-level COMMANDS section.
    let commands = text
        .split("COMMANDS:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("a COMMANDS section");
    for sub in ["check", "describe", "call", "bench", "help"] {
        assert!(
            commands
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{sub} "))),
            "COMMANDS lacks {sub}:\n{commands}"
        );
    }
    for section in ["USAGE:", "OPTIONS", "EXIT STATUS:", "--version"] {
        assert!(text.contains(section), "--help lacks {section}");
    }
    // Each subcommand's help documents its options and the plugin command.
    for (sub, options) in [
        (
            "check",
            &["--invoke", "--args", "--no-invoke", "--grace"][..],
        ),
        ("describe", &["--pretty"][..]),
        (
            "call",
            &[
                "--args",
                "--credential NAME ",
                "--credential NAME=VALUE",
                "--timeout",
            ][..],
        ),
        ("bench", &["--requests", "--concurrency"][..]),
    ] {
        let help = stdout(&executa(&["help", sub], &[]));
        assert!(help.contains("OPTIONS:"), "{sub} help lacks OPTIONS");
        assert!(
            help.contains("-- <PLUGIN COMMAND...>"),
            "{sub} help lacks the plugin command"
        );
        for opt in options {
            assert!(help.contains(opt), "{sub} help lacks {opt}:\n{help}");
        }
    }
    let version = executa(&["--version"], &[]);
    assert!(
        stdout(&version).starts_with("executa "),
        "{}",
        stdout(&version)
    );
}

#[test]
fn check_of_a_plugin_that_cannot_start_exits_2() {
    let o = Command::new(env!("CARGO_BIN_EXE_executa"))
        .args(["check", "--quiet", "--", "/nonexistent/executa-plugin"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("cannot start"), "{}", stdout(&o));
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn describe_prints_the_answer_verbatim_and_fails_a_wrapped_manifest() {
    // Verbatim: the text the plugin sent, member order and all (a re-serialized Value
    // sorts the members).
    let o = executa(&["describe", "--quiet"], &["flawed.py", "bad_semver"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let name = text.find("\"name\"").unwrap();
    let version = text.find("\"version\"").unwrap();
    let tools = text.find("\"tools\"").unwrap();
    assert!(name < version && version < tools, "{text}");
    assert!(
        text.contains("\"version\": \"v1.0\""),
        "python's spacing kept: {text}"
    );

    let o = executa(&["describe", "--quiet"], &["flawed.py", "wrapped_manifest"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("pitfall #5"), "{}", stderr(&o));
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn call_reads_a_credential_named_alone_from_the_environment() {
    let o = Command::new(env!("CARGO_BIN_EXE_executa"))
        .args([
            "call",
            "--quiet",
            "--args",
            r#"{"probe":["EXECUTA_TEST_SECRET","EXECUTA_TEST_CONTROL"]}"#,
            "--credential",
            "EXECUTA_TEST_SECRET",
            "credentials",
        ])
        .args(PATIENT)
        .arg("--")
        .arg("python3")
        .arg(fixture("tools_plugin.py"))
        .env("EXECUTA_TEST_SECRET", "from-the-env")
        .env("EXECUTA_TEST_CONTROL", "inherited")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    let r: Value = serde_json::from_str(&out).expect("result JSON");
    assert_eq!(
        r["data"]["names"],
        serde_json::json!(["EXECUTA_TEST_SECRET"])
    );
    // The value itself is never printed; its length (12) shows it arrived.
    assert!(!out.contains("from-the-env"), "{out}");
    assert_eq!(r["data"]["lengths"]["EXECUTA_TEST_SECRET"], 12, "{out}");
    // Only in the context: the variable it came from is not in the plugin's environment,
    // while an ordinary variable still is (the plugin inherits the user's environment).
    assert_eq!(
        r["data"]["in_environ"],
        serde_json::json!({"EXECUTA_TEST_SECRET": false, "EXECUTA_TEST_CONTROL": true}),
        "{out}"
    );

    let o = Command::new(env!("CARGO_BIN_EXE_executa"))
        .args([
            "call",
            "--credential",
            "EXECUTA_TEST_UNSET_VAR",
            "credentials",
            "--",
            "true",
        ])
        .env_remove("EXECUTA_TEST_UNSET_VAR")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not set"), "{}", stderr(&o));
}

#[test]
fn usage_errors_exit_2() {
    let o = executa(&["call", "echo"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("after `--`"), "{}", stderr(&o));
    let o = executa(&["frobnicate"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let o = executa(&["bench", "--requests", "zero"], &["quickstart.py"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn check_passes_the_quickstart_plugin_and_fails_a_banner() {
    let o = executa(&["check", "--quiet"], &["quickstart.py"]);
    assert!(o.status.success(), "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.lines().filter(|l| l.starts_with("PASS")).count() >= 14,
        "{out}"
    );
    assert!(out.contains("0 failed"), "{out}");

    let o = executa(&["check", "--quiet"], &["banner.py"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("FAIL"))
        .unwrap_or_default();
    assert!(
        line.contains("stdout") && line.contains("Banner Plugin"),
        "{out}"
    );
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn describe_prints_the_manifest() {
    let o = executa(&["describe", "--quiet"], &["quickstart.py"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let m: Value = serde_json::from_slice(&o.stdout).expect("JSON manifest");
    assert_eq!(m["name"], "quickstart");
    assert_eq!(m["tools"].as_array().unwrap().len(), 3);
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn call_prints_the_result_and_progress() {
    let o = executa(
        &[
            "call",
            "--quiet",
            "--args",
            r#"{"text":"hi there"}"#,
            "echo",
        ],
        &["quickstart.py"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["data"]["text"], "hi there");
    // The timing is on its own line on stderr, never glued to the JSON.
    assert!(
        stderr(&o)
            .lines()
            .any(|l| l.starts_with("invoke ") && l.ends_with(" ms") && l.contains(" took ")),
        "{}",
        stderr(&o)
    );

    let o = executa(
        &[
            "call",
            "--quiet",
            "--credential",
            "API_KEY=sk-secret-1",
            "credentials",
        ],
        &["tools_plugin.py"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["data"]["names"], serde_json::json!(["API_KEY"]));
    assert!(
        !stderr(&o).contains("sk-secret-1"),
        "a credential value reached stderr"
    );

    let o = executa(
        &["call", "--quiet", "--args", r#"{"steps":2}"#, "progress"],
        &["tools_plugin.py"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(
        err.lines()
            .filter(|l| l.starts_with("progress [progress]"))
            .count(),
        2,
        "{err}"
    );
    assert!(err.contains(r#"{"of":2,"step":2}"#), "{err}");

    // In-memory storage and echo sampling answer reverse calls.
    let o = executa(
        &[
            "call",
            "--quiet",
            "--verbose",
            "--args",
            r#"{"prompt":"echo me"}"#,
            "sample",
        ],
        &["tools_plugin.py"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["data"]["text"], "echo me");
    assert!(
        stderr(&o).contains("reverse sampling/createMessage"),
        "{}",
        stderr(&o)
    );

    // success:false exits 1.
    let o = executa(&["call", "--quiet", "fail"], &["tools_plugin.py"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn bench_reports_percentiles_and_throughput() {
    let o = executa(
        &[
            "bench",
            "--quiet",
            "--requests",
            "300",
            "--concurrency",
            "3",
        ],
        &["quickstart.py"],
    );
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    for want in ["p50", "p90", "p99", "req/s", "errors      0"] {
        assert!(out.contains(want), "{want} missing:\n{out}");
    }
    assert!(
        stderr(&o).contains("bench: 300/300 (100%)"),
        "progress indicator: {}",
        stderr(&o)
    );
}

#[test]
fn check_help_matches_behaviour_and_pitfalls_are_listed() {
    let o = executa(&["check", "--help"], &[]);
    let help = stdout(&o) + &stderr(&o);
    assert!(help.contains("no answer fails"), "{help}");
    assert!(help.contains("every tool"), "{help}");
    assert!(help.contains("--pitfalls"), "{help}");
    let o = executa(&["check", "--pitfalls"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let list = stdout(&o);
    for n in ["#1 ", "#3 ", "#4 ", "#5 ", "#8 ", "#9a", "#12", "#13"] {
        assert!(list.contains(n), "{n} missing:\n{list}");
    }
}

/// A plugin that floods its host with reverse calls and reads none of the answers: the
/// host drops answers it cannot write, and says so a few lines a second per kind, then
/// how many it left out (at the latest when the plugin is shut down). It printed one line
/// per dropped answer: 998,011 in 6 s.
#[test]
#[cfg(unix)] // drives a Python fixture
fn a_reverse_call_flood_prints_a_bounded_number_of_lines() {
    let start = std::time::Instant::now();
    let o = executa(&["call", "flood"], &["floods_reverse_calls.py"]);
    let elapsed = start.elapsed();
    let err = stderr(&o);
    assert!(o.status.success(), "{}\n{}", stdout(&o), tail(&err));
    let printed = err
        .lines()
        .filter(|l| l.contains("dropped") && !l.contains("suppressed"))
        .count();
    // Three kinds of drop, at most 4 lines a second each (a window is a second of the
    // clock, so the run's seconds and one more).
    let bound = 3 * 4 * (elapsed.as_secs() as usize + 2);
    assert!(
        (1..=bound).contains(&printed),
        "{printed} lines about dropped answers in {elapsed:?}: {}",
        tail(&err)
    );
    let suppressed: u64 = err
        .lines()
        .filter(|l| l.contains("lines suppressed"))
        .filter_map(|l| {
            l.split("executa: ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(
        suppressed >= 1000,
        "{suppressed} lines counted as suppressed: {}",
        tail(&err)
    );
}

/// The end of a long text, for assertion messages.
fn tail(text: &str) -> &str {
    let mut from = text.len().saturating_sub(3000);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    &text[from..]
}

/// Every `executa` command against a plugin that closes its stdout on `vanish` but keeps
/// running (ignoring stdin's end; its helper, in its process group, ignores `SIGTERM`
/// too) returns only after the full shutdown sequence (stdin closed, `SIGTERM`, then
/// `SIGKILL` to what is left of the group) has ended both. `call` used to return after
/// 1.7 s and leave both running (the supervisor had taken the dead session, and its thread
/// died with `main` in the middle of the sequence); `bench` killed the plugin alone,
/// leaving its helper. (`check` invokes `vanish` too; `describe` meets the lingering.)
#[test]
#[cfg(unix)] // drives a Python fixture
fn commands_leave_nothing_running_after_a_plugin_that_closed_its_stdout() {
    for (command, code) in [
        (&["call", "vanish"][..], 1),
        (
            &["bench", "--tool", "vanish", "--requests", "1", "--quiet"],
            1,
        ),
        (&["check"], 1),
        (&["describe"], 0),
    ] {
        let marker = host_common::unique("vanish");
        let pidfile = std::env::temp_dir().join(format!("{marker}.pids"));
        let o = executa(
            command,
            &[
                "closes_stdout.py",
                &marker,
                pidfile.to_str().expect("UTF-8 path"),
            ],
        );
        let (plugin, helper) = host_common::read_pids(&pidfile);
        let _leftovers = host_common::KillOnDrop(vec![plugin, helper]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{command:?}: {}", tail(&err));
        for (what, pid) in [("plugin", plugin), ("helper", helper)] {
            assert!(
                host_common::ends_within(pid, host_common::EVENT_WAIT_SHORT),
                "{command:?}: the {what} (pid {pid}) still runs after the command returned"
            );
        }
    }
}

/// `executa call` prints a plugin's progress events a few a second, then counts the rest:
/// 60 events come back as at most a few lines a second plus counts that add up to 60
/// (issue 36, item 7: every event was printed, 500 MB for 50 events of 10 MB).
#[test]
#[cfg(unix)] // drives a Python fixture
fn progress_is_printed_a_few_lines_a_second_then_counted() {
    let start = std::time::Instant::now();
    let o = executa(
        &["call", "--quiet", "--args", r#"{"steps":60}"#, "progress"],
        &["tools_plugin.py"],
    );
    let seconds = start.elapsed().as_secs() + 1;
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let shown = err
        .lines()
        .filter(|l| l.starts_with("progress [progress]"))
        .count() as u64;
    let counted: u64 = err
        .lines()
        .filter_map(|l| l.strip_prefix("progress: "))
        .filter_map(|l| l.split(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(shown <= 4 * seconds, "{shown} lines in {seconds} s: {err}");
    assert_eq!(shown + counted, 60, "{err}");
}

/// `executa call ARGS -- <the example plugin>`, with patient start-up windows.
fn call_example(args: &[&str], example: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_executa"))
        .arg("call")
        .args(args)
        .args(PATIENT)
        .arg("--")
        .arg(common::example_bin(example))
        .output()
        .expect("run executa")
}

/// The milliseconds of a timing line, `invoke <32 hex digits> took <ms> ms`.
fn timing_ms(line: &str) -> Option<f64> {
    let (id, rest) = line.strip_prefix("invoke ")?.split_once(" took ")?;
    let ms = rest.strip_suffix(" ms")?.parse().ok()?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(ms)
}

/// The milliseconds `executa call` says the invoke took: it says so once, as the last
/// line of its stderr, whatever the outcome.
fn timed(what: &str, o: &Output) -> f64 {
    let err = stderr(o);
    let lines = err.lines().filter(|l| timing_ms(l).is_some()).count();
    assert_eq!(lines, 1, "{what}: {lines} timing lines: {}", tail(&err));
    err.lines()
        .last()
        .and_then(timing_ms)
        .unwrap_or_else(|| panic!("{what}: the timing is not the last line: {}", tail(&err)))
}

/// `executa call` prints the invoke's timing on every outcome, as it does on success: a
/// tool's failure, an unknown tool (a JSON-RPC error), a timeout (issue 37, item 6: only
/// a result was timed).
#[test]
fn call_prints_its_timing_on_every_outcome() {
    let mut protocols = vec!["executa"];
    if cfg!(feature = "mcp") {
        protocols.push("mcp");
    }
    for protocol in protocols {
        for (tool, args, code) in [
            ("echo", r#"{"a":1}"#, 0),
            ("fail", r#"{"message":"boom"}"#, 1),
            ("no_such_tool", "{}", 1),
        ] {
            let o = call_example(
                &["--quiet", "--protocol", protocol, "--args", args, tool],
                "everything",
            );
            let what = format!("{protocol} {tool}");
            assert_eq!(o.status.code(), Some(code), "{what}: {}", stderr(&o));
            let r: Value = serde_json::from_slice(&o.stdout).expect("a result on stdout");
            assert_eq!(r["success"], code == 0, "{what}: {r}");
            timed(&what, &o);
        }
    }
    // No result at all: the time waited is what the timing says.
    let o = call_example(
        &[
            "--quiet",
            "--protocol",
            "executa",
            "--timeout",
            "5",
            "--args",
            r#"{"ms":120000}"#,
            "sleep",
        ],
        "everything",
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("timed out"), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    let ms = timed("a timeout", &o);
    assert!(ms >= 5000.0, "a 5 s timeout took {ms} ms");
}

/// As above, for the outcomes a well-behaved plugin never has: it exits in the middle of
/// the invoke, or answers what is not a result.
#[test]
#[cfg(unix)] // drives Python fixtures
fn call_prints_its_timing_when_the_plugin_exits_or_breaks_the_protocol() {
    for (plugin, tool, says) in [
        ("crash_mid_invoke.py", "work", "exited unexpectedly"),
        ("tools_plugin.py", "bare", "no boolean `success`"),
    ] {
        let o = executa(&["call", "--quiet", tool], &[plugin]);
        assert_eq!(o.status.code(), Some(1), "{plugin}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{plugin}: {}", stderr(&o));
        timed(plugin, &o);
    }
}

/// `executa call` prints one envelope, `{success, data}` or `{success:false, error}`, over
/// both protocols: an MCP server's `tools/call` result is read into it as the host library
/// reads it, in both eras of MCP; `--raw` prints that result as it came (issue 37, item 6:
/// MCP printed the raw result, another shape for scripts to read).
#[test]
#[cfg(feature = "mcp")] // the example serves MCP
fn call_prints_one_envelope_for_both_protocols() {
    let json = |o: &Output| -> Value {
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(o), stderr(o)))
    };
    for (tool, args) in [
        ("echo", r#"{"a":1,"nested":{"b":[1,"two",null]}}"#),
        ("stats", r#"{"numbers":[1,2.5]}"#),
        ("fail", r#"{"message":"boom"}"#),
    ] {
        let executa = call_example(
            &["--quiet", "--protocol", "executa", "--args", args, tool],
            "everything",
        );
        let envelope = json(&executa);
        assert!(envelope["success"].is_boolean(), "{envelope}");
        for era in ["legacy", "2026-07-28"] {
            let mcp = call_example(
                &[
                    "--quiet",
                    "--protocol",
                    "mcp",
                    "--mcp-version",
                    era,
                    "--args",
                    args,
                    tool,
                ],
                "everything",
            );
            assert_eq!(json(&mcp), envelope, "{tool} over MCP ({era})");
            assert_eq!(mcp.status.code(), executa.status.code(), "{tool} ({era})");
        }
    }
    let raw = call_example(
        &[
            "--quiet",
            "--protocol",
            "mcp",
            "--raw",
            "--args",
            r#"{"a":1}"#,
            "echo",
        ],
        "everything",
    );
    assert!(raw.status.success(), "{}", stderr(&raw));
    let result = json(&raw);
    assert_eq!(result["structuredContent"], serde_json::json!({"a": 1}));
    assert!(result["content"].is_array() && result.get("success").is_none());
    let help = stdout(&executa(&["help", "call"], &[]));
    assert!(help.contains("--raw"), "{help}");
}

/// A plugin started by hand, its stdin a terminal, says on stderr what it is and what it
/// waits for; stdout, the protocol's, stays empty. Started by a host (stdin a pipe), it
/// says nothing (issue 37, item 6: it waited silently).
#[test]
#[cfg(unix)] // a pseudo-terminal, from Python's `pty`
fn a_plugin_on_a_terminal_says_what_it_waits_for() {
    let hello = common::example_bin("hello");
    let pty_stdin = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pty_stdin.py");
    for guard in ["1", "0"] {
        let o = Command::new("python3")
            .arg(pty_stdin)
            .arg(&hello)
            .env("EXECUTA_STDOUT_GUARD", guard)
            .output()
            .expect("run python3");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "guard {guard}: {err}");
        assert!(o.stdout.is_empty(), "guard {guard}: {}", stdout(&o));
        let notice: Vec<&str> = err.lines().filter(|l| l.starts_with("executa: ")).collect();
        assert!((1..=2).contains(&notice.len()), "guard {guard}: {err}");
        let notice = notice.join("\n");
        for want in [
            "hello 0.1.0",
            "Executa plugin",
            "JSON-RPC",
            "stdin",
            "executa call",
        ] {
            assert!(
                notice.contains(want),
                "guard {guard}: no {want:?} in {notice}"
            );
        }
        assert_eq!(notice.contains("MCP"), cfg!(feature = "mcp"), "{notice}");
    }
    let mut child = Command::new(&hello)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start hello");
    drop(child.stdin.take());
    let o = child.wait_with_output().expect("hello's output");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{}", stderr(&o));
}
