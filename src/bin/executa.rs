//! `executa`: drive any Executa plugin from the command line the way the Agent does.
//!
//! ```text
//! executa check    [OPTIONS] -- <plugin command...>
//! executa describe [OPTIONS] -- <plugin command...>
//! executa call     [OPTIONS] <TOOL> -- <plugin command...>
//! executa bench    [OPTIONS] -- <plugin command...>
//! executa new      [OPTIONS] <NAME>
//! ```
//!
//! Argument parsing is std-only (see `cli.rs`). Exit codes: 0 success, 1 the plugin failed
//! (a failed check, `success: false`, an error), 2 a usage error or a plugin that would not
//! start.

// A binary's root looks for modules beside itself; ours live in `executa/`. `cli` comes
// first: its `local_help!` is used by the commands' help texts.
#[macro_use]
#[path = "executa/cli.rs"]
mod cli;
#[path = "executa/bench.rs"]
mod bench;
#[path = "executa/bench_driver.rs"]
mod bench_driver;
#[path = "executa/bench_era.rs"]
mod bench_era;
#[path = "executa/bench_io.rs"]
mod bench_io;
#[path = "executa/bench_mcp.rs"]
mod bench_mcp;
#[path = "executa/bench_proc.rs"]
mod bench_proc;
#[path = "executa/bench_report.rs"]
mod bench_report;
#[path = "executa/bench_scan.rs"]
mod bench_scan;
#[path = "executa/bench_spec.rs"]
mod bench_spec;
#[path = "executa/bench_wire.rs"]
mod bench_wire;
#[path = "executa/call.rs"]
mod call;
#[path = "executa/check.rs"]
mod check;
#[path = "executa/describe.rs"]
mod describe;
#[path = "executa/interrupt.rs"]
mod interrupt;
#[path = "executa/new.rs"]
mod new;

use std::process::ExitCode;

use cli::{Args, Usage};

const HELP: &str = "\
executa: drive an Executa plugin (any language) the way the Agent does

USAGE:
    executa <COMMAND> [OPTIONS] -- <PLUGIN COMMAND...>

COMMANDS:
    check      Conformance run: stays alive, initialize, manifest shape and fields,
               health, unknown tool, invoke envelope, malformed line, clean stdout,
               exit on stdin EOF. One line per check; exits 1 on any failure.
    describe   Print the plugin's manifest as JSON (for manifest.json).
    call       Invoke one tool; in-memory storage and sampling answer reverse calls.
    bench      Round-trip latency (p50/p90/p99), throughput, CPU and memory of a tool,
               for Executa plugins and MCP stdio servers, several compared in one run.
    new        Create a plugin crate that builds, tests and checks clean: `executa new NAME`.
    help       Show the options of a command: `executa help <COMMAND>`.

Everything after `--` is the plugin's command line, e.g.
    executa check -- python3 plugin.py
    executa call --args '{\"text\":\"hi\"}' echo -- ./target/release/my-plugin
    API_KEY=... executa call --credential API_KEY fetch -- python3 plugin.py

OPTIONS (every command):
    --init-timeout SECS       initialize timeout before falling back to 1.1 [5]
    --describe-timeout SECS   describe timeout [5]
    --first-launch            allow 60 s for describe (first launch of a onefile binary)
    --quiet                   do not relay the plugin's stderr
    -h, --help                show help

    executa -V | --version    show the version

EXIT STATUS:
    0 success; 1 the plugin failed a check, returned success:false or an error;
    2 usage error, or the plugin could not be started; 130, 143 or 129 interrupted
    by SIGINT (Ctrl-C), SIGTERM or SIGHUP, once what it started was stopped.
";

fn main() -> ExitCode {
    executa::init_logger();
    interrupt::catch();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // A panic (a print to a terminal that hung up fails so) must still reach `finish`,
    // which lets an interrupt's teardown end the plugins before the process exits.
    let code = std::panic::catch_unwind(|| match run(argv) {
        Ok(code) => code,
        Err(Usage::Help(text)) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(Usage::Error(msg)) => {
            eprintln!("executa: {msg}\nRun `executa --help` for usage.");
            ExitCode::from(2)
        }
    });
    interrupt::finish(code.unwrap_or(ExitCode::from(101)))
}

fn run(argv: Vec<String>) -> Result<ExitCode, Usage> {
    let mut args = Args::new(argv);
    let Some(command) = args.next_token() else {
        return Err(Usage::Error(
            "a command is required (check, describe, call, bench, new)".into(),
        ));
    };
    match command.as_str() {
        "-h" | "--help" => Err(Usage::Help(HELP.to_owned())),
        "-V" | "--version" => Err(Usage::Help(format!(
            "executa {}\n",
            env!("CARGO_PKG_VERSION")
        ))),
        "help" => match args.next_token() {
            None => Err(Usage::Help(HELP.to_owned())),
            Some(c) if matches!(c.as_str(), "check" | "describe" | "call" | "bench" | "new") => {
                Err(Usage::Help(help_for(Some(&c))))
            }
            Some(c) => Err(Usage::Error(format!("no help for unknown command `{c}`"))),
        },
        "check" => check::run(args),
        "describe" => describe::run(args),
        "call" => call::run(args),
        "bench" => bench::run(args),
        "new" => new::run(args),
        other => Err(Usage::Error(format!("unknown command `{other}`"))),
    }
}

fn help_for(command: Option<&str>) -> String {
    match command {
        Some("check") => check::HELP.to_owned(),
        Some("describe") => describe::HELP.to_owned(),
        Some("call") => call::HELP.to_owned(),
        Some("bench") => bench::HELP.to_owned(),
        Some("new") => new::HELP.to_owned(),
        _ => HELP.to_owned(),
    }
}
