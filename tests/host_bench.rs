//! `executa bench` comparing plugins that each call their own tool, and driving MCP stdio
//! servers: the Python SDK's (`tests/mcp/server_bench.py`) and, with the `mcp` feature,
//! the reference plugin served both ways. Nothing here is timed: the figures are only
//! checked to be there.
// Unix only: drives Python plugins and MCP servers and sh sampling commands, which a Windows
// test process under Wine cannot start.
#![cfg(unix)]

mod common;
mod host_common;
mod mcp;

use std::path::Path;
use std::process::{Command, Output};

use host_common::fixture;
use serde_json::json;

/// Windows far past the Agent's 5 s for plugins that answer: a loaded machine must not
/// fake a stall (the Python SDK alone takes a second or more to import there).
const PATIENT: [&str; 4] = ["--init-timeout", "30", "--describe-timeout", "30"];

/// Every MCP server here in the handshake era, as these tests were written for (its
/// Python server samples with requests to the client, which 2026-07-28 has not got);
/// `tests/host_mcp_modern.rs` benches both eras.
fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_executa"))
        .arg("bench")
        .args(PATIENT)
        .args(["--no-progress", "--quiet", "--mcp-version", "legacy"])
        .args(args)
        .output()
        .expect("run executa bench")
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Each plugin's section of the report, by its label: from its `against` line to the next.
fn section<'a>(out: &'a str, label: &str) -> &'a str {
    let start = out
        .find(&format!("against `{label}`"))
        .unwrap_or_else(|| panic!("no section for `{label}`:\n{out}"));
    let rest = &out[start..];
    let end = rest[1..].find("\nagainst `").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// `--tool`/`--args`/`--protocol` after `--plugin NAME=CMD` are that plugin's own; the
/// ones before any named plugin are everyone else's. Each section names the protocol and
/// tool it measured, with latency, throughput, CPU and memory.
#[test]
fn each_named_plugin_calls_its_own_tool_with_its_own_arguments() {
    let quickstart = format!("qs=python3 {}", path(&fixture("quickstart.py")));
    let tools = format!("tools=python3 {}", path(&fixture("tools_plugin.py")));
    let o = bench(&[
        "--requests",
        "30",
        "--rounds",
        "2",
        "--args",
        r#"{"text":"shared"}"#,
        "--plugin",
        &quickstart,
        "--tool",
        "add",
        "--args",
        r#"{"a":1,"b":2}"#,
        "--protocol",
        "executa",
        "--plugin",
        &tools,
        "--tool",
        "sample",
        "--args",
        r#"{"prompt":"hi"}"#,
        "--",
        "python3",
        path(&fixture("quickstart.py")),
    ]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        out.contains("30 x invokes, concurrency 1, 2 round(s)"),
        "{out}"
    );
    for (label, head) in [
        ("qs", "executa, `add`"),
        ("tools", "executa, `sample`"),
        // The plugin after `--` takes the defaults: `echo` (the default tool) with the
        // shared arguments.
        (
            &format!("python3 {}", path(&fixture("quickstart.py"))),
            "executa, `echo`",
        ),
    ] {
        let s = section(&out, label);
        assert!(s.lines().next().is_some_and(|l| l.ends_with(head)), "{s}");
        for want in [
            "p50",
            "req/s",
            "cpu/request plugin",
            "memory      plugin RSS",
            "errors      0",
        ] {
            assert!(s.contains(want), "{want} missing for {label}:\n{s}");
        }
    }
    assert!(section(&out, "tools").contains("vs first"), "{out}");

    // A tool the named plugin lacks: the run stops, naming the plugin and its tools.
    let o = bench(&[
        "--requests",
        "5",
        "--plugin",
        &quickstart,
        "--tool",
        "sample",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("`qs`") && err.contains("no tool `sample`"),
        "{err}"
    );
}

/// A spec file lists the plugins with their own choices; unknown fields are refused.
#[test]
fn a_spec_file_gives_each_plugin_its_command_tool_and_arguments() {
    let dir = std::env::temp_dir().join(host_common::unique("bench-spec"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let spec = dir.join("plugins.json");
    let doc = json!({"plugins": [
        {"name": "add", "command": ["python3", path(&fixture("quickstart.py"))],
         "tool": "add", "args": {"a": 2, "b": 3}, "protocol": "executa"},
        {"command": format!("python3 {}", path(&fixture("tools_plugin.py"))), "tool": "fail"}
    ]});
    std::fs::write(&spec, doc.to_string()).expect("write spec");
    let o = bench(&["--requests", "10", "--rounds", "1", "--spec", path(&spec)]);
    // `fail` answers success:false: the warm-up fails the run, naming the second plugin.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("tools_plugin.py` (round 1): warm-up invoke failed: success:false"),
        "{err}"
    );

    let doc = json!([{"name": "add", "command": ["python3", path(&fixture("quickstart.py"))],
                      "tool": "add", "args": {"a": 2, "b": 3}}]);
    std::fs::write(&spec, doc.to_string()).expect("write spec");
    let o = bench(&["--requests", "10", "--spec", path(&spec)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(section(&String::from_utf8_lossy(&o.stdout), "add").contains("errors      0"));

    std::fs::write(&spec, r#"[{"command": "x", "tol": "add"}]"#).expect("write spec");
    let o = bench(&["--spec", path(&spec)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("unknown field `tol`"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The official Python SDK's MCP server: `--protocol mcp` and `auto` both find it,
/// `tools/call` is timed, its `sampling/createMessage` is answered (the echo comes back
/// as the tool's result), and `isError: true` counts as an error.
#[test]
fn drives_an_mcp_server_written_with_the_python_sdk() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let server = format!("{}/tests/mcp/server_bench.py", env!("CARGO_MANIFEST_DIR"));
    let cmd = format!("{} {server}", path(&python));
    for protocol in ["mcp", "auto"] {
        let o = bench(&[
            "--requests",
            "20",
            "--concurrency",
            "2",
            "--plugin",
            &format!("echo={cmd}"),
            "--protocol",
            protocol,
            "--tool",
            "echo",
            "--plugin",
            &format!("sample={cmd}"),
            "--protocol",
            protocol,
            "--tool",
            "sample",
            "--args",
            r#"{"prompt":"hi"}"#,
            "--rounds",
            "1",
        ]);
        assert!(o.status.success(), "{protocol}: {}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        for (label, tool) in [("echo", "echo"), ("sample", "sample")] {
            let s = section(&out, label);
            assert!(
                s.contains(&format!("mcp 2025-11-25, `{tool}`")),
                "{protocol}:\n{s}"
            );
            assert!(
                s.contains("errors      0") && s.contains("cpu/request"),
                "{s}"
            );
        }
    }
    let o = bench(&[
        "--requests",
        "5",
        "--warmup",
        "0",
        "--protocol",
        "mcp",
        "--tool",
        "fail",
        "--",
        path(&python),
        &server,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("errors      5") && out.contains("isError: true"),
        "{}",
        text(&o)
    );
}

/// An Executa plugin is not an MCP server: `--protocol mcp` says so instead of timing it.
#[test]
fn protocol_mcp_refuses_a_plugin_that_answers_as_executa() {
    let o = bench(&[
        "--requests",
        "5",
        "--protocol",
        "mcp",
        "--",
        "python3",
        path(&fixture("quickstart.py")),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("did not start"), "{err}");
}

/// The reference plugin built with MCP serving, benched as Executa and as MCP (sampling
/// included) in one run beside the Python SDK's server.
#[cfg(feature = "mcp")]
#[test]
fn compares_the_reference_plugin_served_both_ways_with_a_python_mcp_server() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let everything = common::everything_bin();
    let everything = path(&everything);
    let server = format!("{}/tests/mcp/server_bench.py", env!("CARGO_MANIFEST_DIR"));
    let o = bench(&[
        "--requests",
        "50",
        "--rounds",
        "1",
        "--args",
        r#"{"text":"hi"}"#,
        "--plugin",
        &format!("exec={everything}"),
        "--protocol",
        "executa",
        "--plugin",
        &format!("mcp={everything}"),
        "--protocol",
        "mcp",
        "--plugin",
        &format!("auto={everything}"),
        "--plugin",
        &format!("mcp-sample={everything}"),
        "--protocol",
        "mcp",
        "--tool",
        "sample",
        "--args",
        r#"{"prompt":"hi"}"#,
        "--plugin",
        &format!("py={} {server}", path(&python)),
        "--protocol",
        "mcp",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    for (label, head) in [
        ("exec", "executa, `echo`"),
        ("mcp", "mcp 2025-11-25, `echo`"),
        // Executa's `initialize` gets an Executa answer from an executa plugin.
        ("auto", "executa, `echo`"),
        ("mcp-sample", "mcp 2025-11-25, `sample`"),
        ("py", "mcp 2025-11-25, `echo`"),
    ] {
        let s = section(&out, label);
        assert!(s.lines().next().is_some_and(|l| l.ends_with(head)), "{s}");
        assert!(s.contains("errors      0"), "{s}");
    }
}

/// `--sampling-cmd` answers the sampling calls of an Executa plugin and of an MCP server
/// (a failing command fails both, quoting its stderr); `--storage-dir` keeps what the
/// plugin stores in its file.
#[test]
fn local_backends_answer_reverse_calls_in_both_protocols() {
    let Some(python) = mcp::sdk_python() else {
        return;
    };
    let server = format!("{}/tests/mcp/server_bench.py", env!("CARGO_MANIFEST_DIR"));
    let tools = format!("ex=python3 {}", path(&fixture("tools_plugin.py")));
    let mcp_server = format!("py={} {server}", path(&python));
    let with = |extra: &[&str], tool: &str| {
        let mut args = vec!["--requests", "4", "--warmup", "0", "--rounds", "1"];
        args.extend_from_slice(extra);
        args.extend(["--plugin", &tools, "--tool", tool, "--plugin", &mcp_server]);
        args.extend(["--protocol", "mcp", "--tool", "sample"]);
        bench(&args)
    };
    let o = with(
        &["--sampling-cmd", "echo no-model-here >&2; exit 3"],
        "sample",
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    for label in ["ex", "py"] {
        let s = section(&out, label);
        assert!(
            s.contains("errors      4") && s.contains("no-model-here"),
            "{s}"
        );
    }

    let dir = std::env::temp_dir().join(host_common::unique("bench-storage"));
    let o = with(
        &["--sampling-cmd", "tr a-z A-Z", "--storage-dir", path(&dir)],
        "remember",
    );
    assert!(o.status.success(), "{}", text(&o));
    let stored = std::fs::read_to_string(dir.join(executa::host::STORAGE_FILE))
        .unwrap_or_else(|e| panic!("no storage file in {}: {e}\n{}", dir.display(), text(&o)));
    assert!(stored.contains("\"scope\": \"user\""), "{stored}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plugin that writes one endless stdout line (here 64 MiB without a line break, then
/// silence) ends the bench with the frame cap's error once 16 MiB are read, instead of
/// growing one line until memory runs out (issue 36, item 1: 20 GB in 68 s before).
#[test]
fn an_endless_stdout_line_ends_the_bench_at_the_frame_cap() {
    let out = bench(&[
        "--stall",
        "120",
        "--",
        "sh",
        "-c",
        "head -c 67108864 /dev/zero | tr '\\0' x; sleep 120",
    ]);
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("over 16777216 bytes (the frame cap)"), "{all}");
}
