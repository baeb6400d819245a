//! `executa bench`: round-trip latency and throughput of one tool, for one plugin or
//! several compared in the same run. The load generator is `bench_driver.rs`.

use std::process::ExitCode;
use std::time::Duration;

use executa::Manifest;
use executa::host::StderrRelay;
use serde_json::Value;

use crate::bench_driver::{Load, Run, Session, Target};
use crate::cli::{Args, Common, Usage, count, json_arg, unknown};

pub const HELP: &str = "\
executa bench: round-trip latency and throughput of an echo-style tool

USAGE:
    executa bench [OPTIONS] -- <PLUGIN COMMAND...>
    executa bench [OPTIONS] --plugin 'CMD ARGS' --plugin 'CMD ARGS' [-- <PLUGIN COMMAND...>]

Starts the plugin, initializes it, warms it up, then sends REQUESTS invokes of TOOL with
CONCURRENCY of them in flight: one thread writes requests, one reads the replies and
matches them by id (with CONCURRENCY 1 a single thread does both). Reverse calls (sampling,
storage) are answered by the in-memory development backends, so `--tool sample --args
'{\"prompt\":\"hi\"}'` works against the everything example. Prints the latency
percentiles (p50/p90/p99/max, from sending a request (the flush that writes it to the
pipe) to reading its reply) and the throughput (requests per second from the start to the
last reply). A progress indicator runs on stderr meanwhile.

Several plugins (each `--plugin`, plus the command after `--`) are measured in ROUNDS
interleaved rounds (each round starts every plugin afresh, in order); the figures are
medians over rounds, with ratios against the first plugin.

OPTIONS:
    --requests N         invokes to time per round [1000]
    --concurrency C      invokes in flight at once [1]
    --tool NAME          the tool to call [echo]
    --args JSON          its arguments [synthesized from the declared parameters]
    --warmup N           untimed invokes first, per round [min(100, REQUESTS/10)]
    --plugin 'CMD ARGS'  a plugin to compare (split at whitespace); repeatable
    --rounds R           interleaved rounds [1 for one plugin, 5 for several]
    --pin-host CPU       run this process on CPU (sched_setaffinity)
    --pin-plugin CPU     run each plugin on CPU (`taskset -c CPU`, util-linux)
    --stall SECS         stop a plugin that answers nothing for this long [60]
    --no-progress        no progress indicator
    --init-timeout SECS, --describe-timeout SECS, --first-launch, --quiet, -h/--help

Pinning both to one CPU (`--pin-host 0 --pin-plugin 0`) gives the steadiest latency on a
VM; different CPUs (`--pin-host 0 --pin-plugin 1`) measure the cross-core hand-off.
";

struct Settings {
    requests: usize,
    concurrency: usize,
    tool: String,
    arguments: Option<Value>,
    warmup: Option<usize>,
    progress: bool,
    plugins: Vec<Vec<String>>,
    rounds: Option<usize>,
    pin_host: Option<usize>,
    pin_plugin: Option<usize>,
    stall: Duration,
}

pub fn run(mut args: Args) -> Result<ExitCode, Usage> {
    let mut common = Common::new();
    let mut s = Settings {
        requests: 1000,
        concurrency: 1,
        tool: "echo".to_owned(),
        arguments: None,
        warmup: None,
        progress: true,
        plugins: Vec::new(),
        rounds: None,
        pin_host: None,
        pin_plugin: None,
        stall: Duration::from_secs(60),
    };
    while let Some((flag, inline)) = args.next_arg() {
        if common.apply(&mut args, &flag, inline.clone(), HELP)? {
            continue;
        }
        match flag.as_str() {
            "--requests" => s.requests = count(&flag, &args.value(&flag, inline)?)?,
            "--concurrency" => s.concurrency = count(&flag, &args.value(&flag, inline)?)?,
            "--tool" => s.tool = args.value(&flag, inline)?,
            "--args" => s.arguments = Some(json_arg(&flag, &args.value(&flag, inline)?)?),
            "--warmup" => {
                let text = args.value(&flag, inline)?;
                s.warmup = Some(text.parse().map_err(|_| {
                    Usage::Error(format!("`--warmup` takes a count, got {text:?}"))
                })?);
            }
            "--plugin" => {
                let argv: Vec<String> = args
                    .value(&flag, inline)?
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect();
                if argv.is_empty() {
                    return Err(Usage::Error("`--plugin` needs a command".into()));
                }
                s.plugins.push(argv);
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
        s.plugins.push(argv);
    }
    if s.plugins.is_empty() {
        return Err(Usage::Error(
            "missing the plugin command: put it after `--` or give `--plugin 'CMD ARGS'`".into(),
        ));
    }
    if let Some(cpu) = s.pin_host
        && let Err(e) = executa::host::set_cpu_affinity(&[cpu])
    {
        return Err(Usage::Error(format!("`--pin-host {cpu}`: {e}")));
    }
    Ok(compare(&s, &common))
}

fn cpu(flag: &str, text: &str) -> Result<usize, Usage> {
    text.parse()
        .map_err(|_| Usage::Error(format!("`{flag}` takes a CPU number, got {text:?}")))
}

/// Per plugin, the figures of each round.
struct Rounds {
    target: Target,
    runs: Vec<Run>,
}

/// Runs every round, then prints each plugin's medians and its ratios against the first.
fn compare(s: &Settings, common: &Common) -> ExitCode {
    let mut plugins: Vec<Rounds> = s
        .plugins
        .iter()
        .map(|argv| Rounds {
            target: Target {
                argv: argv.clone(),
                pin: s.pin_plugin,
            },
            runs: Vec::new(),
        })
        .collect();
    let rounds = s.rounds.unwrap_or(if plugins.len() > 1 { 5 } else { 1 });
    for round in 0..rounds {
        for p in &mut plugins {
            match one_round(&p.target, s, common) {
                Ok(run) => p.runs.push(run),
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
    println!(
        "executa bench: {} x `{}`, concurrency {}, {rounds} round(s){}",
        s.requests,
        s.tool,
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
    for p in &plugins {
        let sum = summarize(&p.runs);
        println!("\nagainst `{}`", p.target.label());
        sum.print(rounds);
        if !std::ptr::eq(p, &plugins[0]) {
            println!(
                "vs first    p50 {:.2}x   throughput {:.2}x",
                sum.p50.as_secs_f64() / first.p50.as_secs_f64().max(1e-12),
                sum.rate / first.rate.max(1e-12)
            );
        }
        failed |= sum.errors > 0;
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Starts the plugin, warms it up, times the load, stops it.
fn one_round(target: &Target, s: &Settings, common: &Common) -> Result<Run, (ExitCode, String)> {
    let quiet = matches!(common.host.stderr, StderrRelay::Quiet);
    let mut session = Session::start(
        target,
        quiet,
        common.host.initialize_timeout,
        common.host.effective_describe_timeout(),
    )
    .map_err(|e| (ExitCode::from(2), format!("the plugin did not start: {e}")))?;
    let Some(arguments) = s
        .arguments
        .clone()
        .or_else(|| placeholder_args(&session.manifest, &s.tool))
    else {
        let names: Vec<_> = session
            .manifest
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        let why = format!(
            "the plugin has no tool `{}` (it has: {})",
            s.tool,
            names.join(", ")
        );
        session.close();
        return Err((ExitCode::from(2), why));
    };
    let mut load = Load {
        tool: &s.tool,
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
            session.run(&load)
        }
        Err(e) => Err(format!("warm-up failed: {e}")),
    };
    session.close();
    run.map_err(|e| (ExitCode::FAILURE, e))
}

/// Medians over rounds.
struct Summary {
    p50: Duration,
    p90: Duration,
    p99: Duration,
    max: Duration,
    mean: Duration,
    rate: f64,
    requests: usize,
    elapsed: f64,
    errors: usize,
    first_error: Option<String>,
}

fn summarize(runs: &[Run]) -> Summary {
    let mut per: Vec<[f64; 7]> = Vec::new();
    for r in runs {
        let mut l = r.latencies.clone();
        l.sort_unstable();
        let ok = l.len();
        let pct = |p: f64| {
            if ok == 0 {
                0.0
            } else {
                l[((p / 100.0 * ok as f64).ceil() as usize).clamp(1, ok) - 1].as_secs_f64()
            }
        };
        let mean = l.iter().map(Duration::as_secs_f64).sum::<f64>() / ok.max(1) as f64;
        let elapsed = r.elapsed.as_secs_f64().max(1e-9);
        per.push([
            pct(50.0),
            pct(90.0),
            pct(99.0),
            pct(100.0),
            mean,
            (ok + r.errors) as f64 / elapsed,
            elapsed,
        ]);
    }
    let median = |k: usize| {
        let mut xs: Vec<f64> = per.iter().map(|v| v[k]).collect();
        xs.sort_by(f64::total_cmp);
        xs.get(xs.len() / 2).copied().unwrap_or(0.0)
    };
    let d = |k| Duration::from_secs_f64(median(k));
    Summary {
        p50: d(0),
        p90: d(1),
        p99: d(2),
        max: d(3),
        mean: d(4),
        rate: median(5),
        requests: runs.first().map_or(0, |r| r.latencies.len() + r.errors),
        elapsed: median(6),
        errors: runs.iter().map(|r| r.errors).sum(),
        first_error: runs.iter().find_map(|r| r.first_error.clone()),
    }
}

impl Summary {
    fn print(&self, rounds: usize) {
        let of = if rounds > 1 {
            " (medians of rounds)"
        } else {
            ""
        };
        println!(
            "latency     p50 {}   p90 {}   p99 {}   max {}   mean {}{of}",
            fmt(self.p50),
            fmt(self.p90),
            fmt(self.p99),
            fmt(self.max),
            fmt(self.mean)
        );
        println!(
            "throughput  {:.0} req/s ({} requests in {:.3} s){of}",
            self.rate, self.requests, self.elapsed
        );
        println!("errors      {}", self.errors);
        if let Some(e) = &self.first_error {
            println!("first error {e}");
        }
    }
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

/// Arguments synthesized from `tool`'s declared parameters (nested required objects,
/// arrays, enums, defaults; see [`executa::host::sample_arguments`]), or `None` when the
/// manifest has no such tool.
fn placeholder_args(m: &Manifest, tool: &str) -> Option<Value> {
    let spec = m.tools.iter().find(|t| t.name == tool)?;
    Some(executa::host::sample_arguments(spec))
}
