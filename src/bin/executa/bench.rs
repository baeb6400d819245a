//! `executa bench`: round-trip latency, throughput, CPU and memory of one tool, for one
//! plugin or several compared in the same run. The load generator is `bench_driver.rs`,
//! the plugins and their choices `bench_spec.rs`, the figures `bench_report.rs`.

use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use executa::Manifest;
use executa::host::{Handlers, MemoryStorage, ScriptedSampling, Service, StderrRelay};
use serde_json::Value;

use crate::bench_driver::{Load, Run, Session, Timeouts};
use crate::bench_proc::{self, CpuSnapshot};
use crate::bench_report::summarize;
use crate::bench_spec::{self, Choice, PluginSpec, Target};
use crate::bench_wire::Backends;
use crate::cli::{Args, Common, Local, Usage, count, json_arg, mcp_version, protocol, unknown};

pub const HELP: &str = concat!(
    "\
executa bench: round-trip latency, throughput, CPU and memory of a tool

USAGE:
    executa bench [OPTIONS] -- <PLUGIN COMMAND...>
    executa bench [OPTIONS] --plugin 'CMD ARGS' --plugin 'CMD ARGS' [-- <PLUGIN COMMAND...>]
    executa bench [OPTIONS] --plugin NAME=CMD [--tool T] [--args JSON] [--protocol P]
                  [--mcp-version V] ...
    executa bench [OPTIONS] --spec plugins.json

Starts the plugin, initializes it, warms it up, then sends REQUESTS invokes of TOOL with
CONCURRENCY of them in flight: one thread writes requests, one reads the replies and
matches them by id (with CONCURRENCY 1 a single thread does both). Reverse calls (sampling,
storage) are answered by the in-memory development backends, on the reading thread as
`executa::host` answers them, so `--tool sample --args '{\"prompt\":\"hi\"}'` works against
the everything example. Prints the latency percentiles (p50/p90/p99/max, from sending a
request (the flush that writes it to the pipe) to reading its reply), the throughput
(requests per second from the start to the last reply), the CPU time per request of the
plugin's process group and of the bench itself over the timed requests, and the plugin
group's resident memory after them (and its peak). A progress indicator runs on stderr.

Several plugins (each `--plugin`, each entry of `--spec`, plus the command after `--`) are
measured in ROUNDS interleaved rounds (each round starts every plugin afresh, in order);
the figures are medians over rounds, with ratios against the first plugin.

Each plugin may call its own tool: `--tool`, `--args`, `--protocol` and `--mcp-version`
given right after a `--plugin NAME=CMD` (before the next `--plugin` or `--spec`) are that
plugin's; given anywhere else they are the defaults of every plugin that sets none. NAME
(letters, digits, `_`, `-`, `.`) labels its figures. A spec file is JSON: an array of
plugins, or an object whose `plugins` is one; each plugin is {\"name\", \"command\" (a
string or an array of words), \"tool\", \"args\", \"protocol\", \"mcp_version\"}, only
\"command\" required. Each plugin's heading says what was measured: `executa`, or `mcp`
and the MCP revision the session settled on (`mcp 2026-07-28`, `mcp 2025-11-25`).

PROTOCOLS:
    executa   `initialize` (v2; -32601 from a 1.1 plugin is fine), `describe`, `invoke`
    mcp       an MCP stdio server, in the era `--mcp-version` settles. By default
              (`auto`) `server/discover` at 2026-07-28 first: a result naming it makes
              the session stateless (no handshake; every request carries the revision,
              the client and its capabilities in `_meta`); any error (but -32022 from a
              server of stateless revisions only) or a result naming no stateless
              revision falls back to the handshake. A probe that gets no answer within
              --init-timeout stops the plugin: `--mcp-version legacy` skips the probe.
              The handshake: `initialize` with protocolVersion 2025-11-25 (answers
              2024-11-05, 2025-03-26, 2025-06-18 and 2025-11-25 are accepted), the
              `notifications/initialized` notification. Then `tools/list` (placeholder
              arguments from each tool's inputSchema) and `tools/call {name, arguments}`;
              a result with `isError: true` counts as an error. Sampling is answered
              with the last user message's text ({role: assistant, content: {type: text,
              text}, model, stopReason: endTurn}): in the handshake era the server's
              `sampling/createMessage` request (and `ping` with {}); in the stateless era
              the input a `tools/call` result asks for (`roots/list`: no roots,
              `elicitation/create`: declined), after which the call is sent again under
              a new id with the answers and the `requestState`, at most 10 rounds (a
              result with only state waits 50 ms, doubling up to 250 ms, on the reading
              thread); a request's latency runs from its first send to its final
              result.
    auto      Executa's `initialize`, then whatever the answer says, as `executa call`
              reads it: a dated protocolVersion is an MCP server, in the handshake era
              (which answers a revision it does not know with its own; one it does not
              speak, or another than a revision pinned, gets its era settled as under
              `mcp`), as is an error naming the version when the era settled next is
              answered; anything else is Executa. An executa plugin built
              with the `mcp` feature is Executa here: `--protocol mcp` benches its MCP
              side.

OPTIONS:
    --requests N         invokes to time per round [1000]
    --concurrency C      invokes in flight at once [1]
    --tool NAME          the tool to call [echo]
    --args JSON          its arguments [synthesized from the declared parameters]
    --protocol P         executa, mcp or auto [auto]
    --mcp-version V      auto, legacy, or one MCP revision (2026-07-28, 2025-11-25,
                         2025-06-18, 2025-03-26, 2024-11-05; a revision makes `auto`
                         `mcp`) [auto]
    --warmup N           untimed invokes first, per round [min(100, REQUESTS/10)]
    --plugin 'CMD ARGS'  a plugin to compare (split at whitespace); repeatable;
                         `--plugin NAME=CMD ARGS` names it and takes its own options
    --spec FILE          plugins to compare, from a JSON file (above); repeatable
    --rounds R           interleaved rounds [1 for one plugin, 5 for several]
    --pin-host CPU       run this process on CPU (sched_setaffinity)
    --pin-plugin CPU     run each plugin on CPU (`taskset -c CPU`, util-linux)
    --stall SECS         stop a plugin that answers nothing for this long [60]
    --no-progress        no progress indicator
",
    local_help!(),
    "                         (Both answer on the bench's reading thread, so the figures
                         include them; an MCP server has no storage.)
    --init-timeout SECS, --describe-timeout SECS, --first-launch, --quiet, -h/--help

Pinning both to one CPU (`--pin-host 0 --pin-plugin 0`) gives the steadiest latency on a
VM; different CPUs (`--pin-host 0 --pin-plugin 1`) measure the cross-core hand-off.
Example: the same plugin served both ways beside a Python MCP server, all calling `echo`
with the same arguments, then `sample` in the plugin's MCP side (add
`--mcp-version legacy` after a plugin to measure it in the handshake era):
    executa bench --rounds 5 --args '{\"text\":\"hi\"}' \\
        --plugin exec=./everything --protocol executa \\
        --plugin mcp=./everything --protocol mcp \\
        --plugin py='python3 server.py' --protocol mcp \\
        --plugin mcp-sample=./everything --protocol mcp --tool sample --args '{\"prompt\":\"hi\"}'
"
);

struct Settings {
    requests: usize,
    concurrency: usize,
    warmup: Option<usize>,
    progress: bool,
    rounds: Option<usize>,
    pin_host: Option<usize>,
    pin_plugin: Option<usize>,
    stall: Duration,
    plugins: Vec<Target>,
    backends: Backends,
}

pub fn run(mut args: Args) -> Result<ExitCode, Usage> {
    let mut common = Common::new();
    let mut s = Settings {
        requests: 1000,
        concurrency: 1,
        warmup: None,
        progress: true,
        rounds: None,
        pin_host: None,
        pin_plugin: None,
        stall: Duration::from_secs(60),
        plugins: Vec::new(),
        backends: Backends {
            handlers: Handlers::new(),
            mcp_sampling: None,
        },
    };
    let mut local = Local::default();
    let mut defaults = Choice::default();
    let mut specs: Vec<PluginSpec> = Vec::new();
    // The named plugin that `--tool`, `--args` and `--protocol` belong to, if any.
    let mut own: Option<usize> = None;
    while let Some((flag, inline)) = args.next_arg() {
        if common.apply(&mut args, &flag, inline.clone(), HELP)?
            || local.apply(&mut args, &flag, inline.clone())?
        {
            continue;
        }
        let choice = match own {
            Some(i) => &mut specs[i].own,
            None => &mut defaults,
        };
        match flag.as_str() {
            "--requests" => s.requests = count(&flag, &args.value(&flag, inline)?)?,
            "--concurrency" => s.concurrency = count(&flag, &args.value(&flag, inline)?)?,
            "--tool" => choice.tool = Some(args.value(&flag, inline)?),
            "--args" => choice.args = Some(json_arg(&flag, &args.value(&flag, inline)?)?),
            "--protocol" => choice.protocol = Some(protocol(&flag, &args.value(&flag, inline)?)?),
            "--mcp-version" => {
                choice.mcp_version = Some(mcp_version(&flag, &args.value(&flag, inline)?)?)
            }
            "--warmup" => {
                let text = args.value(&flag, inline)?;
                s.warmup = Some(text.parse().map_err(|_| {
                    Usage::Error(format!("`--warmup` takes a count, got {text:?}"))
                })?);
            }
            "--plugin" => {
                let spec =
                    bench_spec::parse_plugin(&args.value(&flag, inline)?).map_err(Usage::Error)?;
                own = spec.name.is_some().then_some(specs.len());
                specs.push(spec);
            }
            "--spec" => {
                let path = args.value(&flag, inline)?;
                specs.extend(bench_spec::read_spec_file(&path).map_err(Usage::Error)?);
                own = None;
            }
            "--rounds" => s.rounds = Some(count(&flag, &args.value(&flag, inline)?)?),
            "--pin-host" => s.pin_host = Some(cpu(&flag, &args.value(&flag, inline)?)?),
            "--pin-plugin" => s.pin_plugin = Some(cpu(&flag, &args.value(&flag, inline)?)?),
            "--stall" => s.stall = crate::cli::secs(&flag, &args.value(&flag, inline)?)?,
            "--no-progress" => s.progress = false,
            _ => return Err(unknown(&flag)),
        }
    }
    if let Ok(cmd) = args.plugin() {
        let mut argv = vec![cmd.program().to_string_lossy().into_owned()];
        argv.extend(
            cmd.get_args()
                .iter()
                .map(|a| a.to_string_lossy().into_owned()),
        );
        specs.push(PluginSpec {
            name: None,
            argv,
            own: Choice::default(),
        });
    }
    if specs.is_empty() {
        return Err(Usage::Error(
            "missing the plugin command: put it after `--` or give `--plugin 'CMD ARGS'`".into(),
        ));
    }
    s.backends = backends(&local)?;
    s.plugins = specs
        .iter()
        .map(|spec| Target::resolve(spec, &defaults, s.pin_plugin))
        .collect();
    if let Some(cpu) = s.pin_host
        && let Err(e) = executa::host::set_cpu_affinity(&[cpu])
    {
        return Err(Usage::Error(format!("`--pin-host {cpu}`: {e}")));
    }
    Ok(compare(&s, &common))
}

/// The development backends (in-memory storage, echoed sampling), or the local ones
/// `--sampling-cmd` and `--storage-dir` ask for.
fn backends(local: &Local) -> Result<Backends, Usage> {
    let storage = local
        .storage(&["user", "app", "tool"])?
        .unwrap_or_else(|| Arc::new(MemoryStorage::new()));
    let mcp_sampling = local.sampling();
    let sampling: Arc<dyn Service> = mcp_sampling
        .clone()
        .unwrap_or_else(|| Arc::new(ScriptedSampling::echo()));
    Ok(Backends {
        handlers: Handlers::new().service(storage).service(sampling),
        mcp_sampling,
    })
}

fn cpu(flag: &str, text: &str) -> Result<usize, Usage> {
    text.parse()
        .map_err(|_| Usage::Error(format!("`{flag}` takes a CPU number, got {text:?}")))
}

/// Per plugin, the figures of each round, and the protocol its last round spoke.
struct Rounds<'a> {
    target: &'a Target,
    runs: Vec<Run>,
    spoke: String,
}

/// Runs every round, then prints each plugin's medians and its ratios against the first.
fn compare(s: &Settings, common: &Common) -> ExitCode {
    let mut plugins: Vec<Rounds> = s
        .plugins
        .iter()
        .map(|target| Rounds {
            target,
            runs: Vec::new(),
            spoke: String::new(),
        })
        .collect();
    let rounds = s.rounds.unwrap_or(if plugins.len() > 1 { 5 } else { 1 });
    for round in 0..rounds {
        for p in &mut plugins {
            match one_round(p.target, s, common) {
                Ok((run, spoke)) => {
                    p.runs.push(run);
                    p.spoke = spoke;
                }
                Err((code, why)) => {
                    eprintln!(
                        "executa bench: `{}` (round {}): {why}",
                        p.target.label(),
                        round + 1
                    );
                    return code;
                }
            }
        }
    }
    let first_tool = &s.plugins[0].tool;
    let tool = if s.plugins.iter().all(|t| &t.tool == first_tool) {
        format!("`{first_tool}`")
    } else {
        "invokes".to_owned()
    };
    println!(
        "executa bench: {} x {tool}, concurrency {}, {rounds} round(s){}",
        s.requests,
        s.concurrency,
        match (s.pin_host, s.pin_plugin) {
            (None, None) => String::new(),
            (h, p) => format!(
                ", host on cpu {}, plugin on cpu {}",
                h.map_or("any".into(), |c| c.to_string()),
                p.map_or("any".into(), |c| c.to_string())
            ),
        }
    );
    let first = summarize(&plugins[0].runs);
    let mut failed = false;
    for (i, p) in plugins.iter().enumerate() {
        let sum = summarize(&p.runs);
        let t = p.target;
        let command = match &t.name {
            Some(_) => format!(" ({})", t.argv.join(" ")),
            None => String::new(),
        };
        println!(
            "\nagainst `{}`{command}: {}, `{}`",
            t.label(),
            p.spoke,
            t.tool
        );
        sum.print(rounds);
        if i > 0 {
            sum.print_ratios(&first);
        }
        failed |= sum.errors > 0;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Starts the plugin, warms it up, times the load (and what it cost the plugin and the
/// bench), stops it. Also returns the protocol the handshake settled on.
fn one_round(
    target: &Target,
    s: &Settings,
    common: &Common,
) -> Result<(Run, String), (ExitCode, String)> {
    let quiet = matches!(common.host.stderr, StderrRelay::Quiet);
    let timeouts = Timeouts {
        initialize: common.host.initialize_timeout,
        describe: common.host.effective_describe_timeout(),
    };
    let mut session = Session::start(target, quiet, &timeouts, s.backends.clone())
        .map_err(|e| (ExitCode::from(2), format!("the plugin did not start: {e}")))?;
    let spoke = match &session.revision {
        Some(v) => format!("{} {v}", session.wire().name()),
        None => session.wire().name().to_owned(),
    };
    let Some(arguments) = target
        .arguments
        .clone()
        .or_else(|| placeholder_args(&session.manifest, &target.tool))
    else {
        let names: Vec<_> = session
            .manifest
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        let why = format!(
            "the plugin has no tool `{}` (it has: {})",
            target.tool,
            names.join(", ")
        );
        session.close();
        return Err((ExitCode::from(2), why));
    };
    let mut load = Load {
        tool: &target.tool,
        arguments: &arguments,
        count: s.warmup.unwrap_or((s.requests / 10).min(100)),
        in_flight: s.concurrency,
        stall: s.stall,
        progress: false,
    };
    let warm = if load.count > 0 {
        session.run(&load)
    } else {
        Ok(Run::default())
    };
    let run = match warm {
        Ok(w) if w.errors > 0 => Err(format!(
            "warm-up invoke failed: {}",
            w.first_error.unwrap_or_default()
        )),
        Ok(_) => {
            load.count = s.requests;
            load.progress = s.progress;
            let pid = session.pid();
            let (plugin0, bench0) = (CpuSnapshot::take(pid), bench_proc::own_cpu());
            session.run(&load).map(|mut run| {
                run.plugin_cpu = Some(CpuSnapshot::take(pid).since(&plugin0));
                run.bench_cpu = bench_proc::own_cpu()
                    .zip(bench0)
                    .map(|(now, then)| now.saturating_sub(then));
                run.memory_kb = bench_proc::memory_kb(pid);
                run
            })
        }
        Err(e) => Err(format!("warm-up failed: {e}")),
    };
    session.close();
    run.map(|r| (r, spoke)).map_err(|e| (ExitCode::FAILURE, e))
}

/// Arguments synthesized from `tool`'s declared parameters (nested required objects,
/// arrays, enums, defaults; see [`executa::host::sample_arguments`]), or `None` when the
/// manifest has no such tool.
fn placeholder_args(m: &Manifest, tool: &str) -> Option<Value> {
    let spec = m.tools.iter().find(|t| t.name == tool)?;
    Some(executa::host::sample_arguments(spec))
}
