//! `executa bench`: round-trip latency and throughput of one tool.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use executa::Manifest;
use executa::host::{Handlers, Host, InvokeOptions};
use serde_json::Value;

use crate::cli::{Args, Common, Usage, count, json_arg, unknown};

pub const HELP: &str = "\
executa bench: round-trip latency and throughput of an echo-style tool

USAGE:
    executa bench [OPTIONS] -- <PLUGIN COMMAND...>

Starts the plugin, warms it up, then sends REQUESTS invokes of TOOL from CONCURRENCY
threads (each keeps one invoke in flight), and prints the latency percentiles
(p50/p90/p99/max, measured per call from request to reply) and the throughput. A
progress indicator runs on stderr meanwhile.

OPTIONS:
    --requests N         invokes to time [1000]
    --concurrency C      invokes in flight at once [1]
    --tool NAME          the tool to call [echo]
    --args JSON          its arguments [synthesized from the declared parameters]
    --warmup N           untimed invokes first [min(100, REQUESTS/10)]
    --no-progress        no progress indicator
    --init-timeout SECS, --describe-timeout SECS, --first-launch, --quiet, -h/--help
";

struct Settings {
    requests: usize,
    concurrency: usize,
    tool: String,
    arguments: Option<Value>,
    warmup: Option<usize>,
    progress: bool,
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
            "--no-progress" => s.progress = false,
            _ => return Err(unknown(&flag)),
        }
    }
    let cmd = args.plugin()?;
    let label = cmd.to_string();
    let host = match Host::start(cmd, common.host, Handlers::dev_backends()) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("executa bench: the plugin did not start: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let manifest = host.manifest().map_err(|e| Usage::Error(e.to_string()))?;
    let Some(arguments) = s
        .arguments
        .clone()
        .or_else(|| placeholder_args(&manifest, &s.tool))
    else {
        let names: Vec<_> = manifest.tools.iter().map(|t| t.name.as_str()).collect();
        eprintln!(
            "executa bench: the plugin has no tool `{}` (it has: {})",
            s.tool,
            names.join(", ")
        );
        host.shutdown();
        return Ok(ExitCode::from(2));
    };
    let opts = InvokeOptions::new();
    let warmup = s.warmup.unwrap_or((s.requests / 10).min(100));
    for _ in 0..warmup {
        if let Err(e) = host.invoke_with(&s.tool, &arguments, &opts) {
            eprintln!("executa bench: warm-up invoke failed: {e}");
            host.shutdown();
            return Ok(ExitCode::FAILURE);
        }
    }
    let results = measure(&host, &s, &arguments, &opts);
    host.shutdown();
    println!(
        "executa bench: {} x `{}`, concurrency {}, against `{label}`",
        s.requests, s.tool, s.concurrency
    );
    Ok(results.print())
}

struct Results {
    latencies: Vec<Duration>,
    errors: usize,
    first_error: Option<String>,
    elapsed: Duration,
}

/// Runs the timed invokes from `concurrency` threads, with a progress line on stderr.
fn measure(host: &Host, s: &Settings, arguments: &Value, opts: &InvokeOptions) -> Results {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let finished = AtomicBool::new(false);
    let collected = Mutex::new(Results {
        latencies: Vec::with_capacity(s.requests),
        errors: 0,
        first_error: None,
        elapsed: Duration::ZERO,
    });
    let start = Instant::now();
    std::thread::scope(|scope| {
        if s.progress {
            scope.spawn(|| progress_line(&done, &finished, s.requests));
        }
        let workers: Vec<_> = (0..s.concurrency)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::with_capacity(s.requests / s.concurrency + 1);
                    let mut errors = Vec::new();
                    while next.fetch_add(1, Ordering::Relaxed) < s.requests {
                        let t0 = Instant::now();
                        match host.invoke_with(&s.tool, arguments, opts) {
                            Ok(r) if r.success => mine.push(t0.elapsed()),
                            Ok(r) => errors
                                .push(format!("success:false: {}", r.error.unwrap_or_default())),
                            Err(e) => errors.push(e.to_string()),
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    let mut all = collected.lock().unwrap_or_else(PoisonError::into_inner);
                    all.latencies.extend(mine);
                    all.errors += errors.len();
                    if all.first_error.is_none() {
                        all.first_error = errors.into_iter().next();
                    }
                })
            })
            .collect();
        for w in workers {
            let _ = w.join();
        }
        finished.store(true, Ordering::Relaxed);
    });
    let mut results = collected
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    results.elapsed = start.elapsed();
    results
}

/// Redraws `done/total` on stderr every 100 ms until `finished`.
fn progress_line(done: &AtomicUsize, finished: &AtomicBool, total: usize) {
    let mut err = std::io::stderr();
    while !finished.load(Ordering::Relaxed) {
        let n = done.load(Ordering::Relaxed).min(total);
        let _ = write!(err, "\rbench: {n}/{total} ({}%)", n * 100 / total.max(1));
        let _ = err.flush();
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = write!(err, "\rbench: {total}/{total} (100%)\n");
}

impl Results {
    fn print(mut self) -> ExitCode {
        self.latencies.sort_unstable();
        let ok = self.latencies.len();
        if ok > 0 {
            let pct =
                |p: f64| self.latencies[((p / 100.0 * ok as f64).ceil() as usize).clamp(1, ok) - 1];
            let mean =
                self.latencies.iter().sum::<Duration>() / u32::try_from(ok).unwrap_or(u32::MAX);
            println!(
                "latency     p50 {}   p90 {}   p99 {}   max {}   mean {}",
                fmt(pct(50.0)),
                fmt(pct(90.0)),
                fmt(pct(99.0)),
                fmt(self.latencies[ok - 1]),
                fmt(mean)
            );
        }
        let total = ok + self.errors;
        println!(
            "throughput  {:.0} req/s ({total} requests in {:.3} s)",
            total as f64 / self.elapsed.as_secs_f64().max(1e-9),
            self.elapsed.as_secs_f64()
        );
        println!("errors      {}", self.errors);
        if let Some(e) = &self.first_error {
            println!("first error {e}");
        }
        if self.errors == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
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
