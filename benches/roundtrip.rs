//! Round trips through real pipes to real child processes: the hot `invoke` path as a host
//! sees it, for the `everything` example (the executa runtime) against three baselines in
//! the same run: a 1-thread loop with no runtime (`bench_baseline`), the cheapest shape
//! with a separate reader thread (`bench_onehop`) and a Python quickstart-style loop.
//!
//! Each round visits every placement (pinned: bench and plugin on cpu 0; cross-core: bench
//! on cpu 0, plugin on cpu 1; free-floating) and within it every subject in turn; the
//! figures printed are medians over rounds. See benches/README.md for what each means.
//!
//! Run: `cargo bench --bench roundtrip` (writes benches/roundtrip.svg).
//! Smoke (tiny counts, replies checked, nothing timed): `EXECUTA_BENCH_SMOKE=1 cargo bench
//! --bench roundtrip`. Counts (benches/README.md lists them all): `EXECUTA_BENCH_ROUNDS`
//! [5], `EXECUTA_BENCH_N` serial round trips per round [3000], `EXECUTA_BENCH_PIPELINED`
//! [30000], `EXECUTA_BENCH_PACED` [4000], `EXECUTA_BENCH_PACED_SLOW` [1000].
//!
//! Linux only: the plugin's CPU time, threads and memory come from `/proc`, and the
//! placements pin with `taskset` and `sched_setaffinity`. Elsewhere it says so and exits;
//! what only the Linux bench uses is allowed to be unused there.
#![cfg_attr(not(target_os = "linux"), allow(dead_code, unused_imports))]

#[path = "roundtrip/chart.rs"]
mod chart;
mod common;
#[cfg(target_os = "linux")]
#[path = "roundtrip/paced.rs"]
mod paced;
#[path = "roundtrip/peer.rs"]
mod peer;
#[cfg(target_os = "linux")]
#[path = "roundtrip/report.rs"]
mod report;
#[path = "roundtrip/sweep.rs"]
mod sweep;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
use common::procfs::{self, CpuTime};
use executa::host::{Handlers, Host, HostOptions, PluginCommand, StderrRelay};
use peer::Peer;
use serde_json::json;

/// A plugin under test.
pub struct Subject {
    pub name: &'static str,
    pub cmd: Vec<String>,
    /// Whether its `echo` replies carry the arguments back (the bare loop's do not).
    pub echoes: bool,
}

/// Where the bench (host) and the plugin run.
#[derive(Clone, Copy, PartialEq)]
pub enum Placement {
    Pinned,
    CrossCore,
    Free,
}

impl Placement {
    pub fn label(self) -> &'static str {
        match self {
            Placement::Pinned => "pinned (host and plugin on cpu 0)",
            Placement::CrossCore => "cross-core (host cpu 0, plugin cpu 1)",
            Placement::Free => "free-floating (bimodal on a VM)",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Placement::Pinned => "pinned",
            Placement::CrossCore => "cross-core",
            Placement::Free => "free",
        }
    }

    fn plugin_cpu(self) -> Option<usize> {
        match self {
            Placement::Pinned => Some(0),
            Placement::CrossCore => Some(1),
            Placement::Free => None,
        }
    }

    /// `taskset -c N` for the plugin's command line, or nothing.
    pub fn prefix(self) -> Vec<String> {
        self.plugin_cpu().map_or_else(Vec::new, |cpu| {
            vec!["taskset".into(), "-c".into(), cpu.to_string()]
        })
    }

    /// Pins (or unpins) this thread; threads started afterwards inherit it.
    fn place_host(self, all_cpus: &[usize]) {
        let cpus = if self == Placement::Free {
            all_cpus.to_vec()
        } else {
            vec![0]
        };
        executa::host::set_cpu_affinity(&cpus).expect("sched_setaffinity");
    }
}

/// Invoke counts of one run.
pub struct Counts {
    pub rounds: u64,
    pub serial: u64,
    pub pipelined: u64,
    pub in_flight: usize,
    pub flood: u64,
    pub paced: u64,
    pub paced_slow: u64,
    pub idle: Duration,
    pub host_calls: u64,
}

impl Counts {
    fn from_env() -> Counts {
        Counts {
            rounds: common::count("EXECUTA_BENCH_ROUNDS", 5, 1),
            serial: common::count("EXECUTA_BENCH_N", 3_000, 20),
            pipelined: common::count("EXECUTA_BENCH_PIPELINED", 30_000, 300),
            in_flight: 64,
            flood: common::count("EXECUTA_BENCH_FLOOD", 20_000, 300),
            paced: common::count("EXECUTA_BENCH_PACED", 4_000, 10),
            paced_slow: common::count("EXECUTA_BENCH_PACED_SLOW", 1_000, 3),
            idle: Duration::from_millis(common::count("EXECUTA_BENCH_IDLE_MS", 1_000, 20)),
            host_calls: common::count("EXECUTA_BENCH_HOST_CALLS", 1_000, 10),
        }
    }
}

/// The figures of one subject in one placement, one entry per round.
#[derive(Default)]
pub struct Cell {
    pub p50: Vec<f64>,
    pub p90: Vec<f64>,
    pub rate: Vec<f64>,
    pub threads: Vec<f64>,
    pub rss_kb: Vec<f64>,
    /// CPU µs per request at one request every 0.5 ms: (stat, schedstat).
    pub cpu_fast: Vec<(f64, f64)>,
    /// The same at one request every 5 ms.
    pub cpu_slow: Vec<(f64, f64)>,
    /// CPU µs used while idle, per second of idleness (schedstat): the first window after
    /// the last reply, and the next.
    pub idle_us_per_s: Vec<(f64, f64)>,
    pub hwm_kb: Vec<f64>,
    /// `executa bench` throughput against this subject (executa and the bare loop).
    pub driver_rate: Vec<f64>,
    /// Pipelined rate at each argument size of `sweep::SIZES`, one entry per round
    /// (executa, and the bare loop echoing).
    pub sweep: Vec<Vec<f64>>,
    /// The worst wait of a `health` behind a tool's one slow run, ms (executa only).
    pub hol_ms: Vec<f64>,
}

/// Round-trip p50 of `echo` and `sample` driven by `executa::host`, one entry per round.
#[derive(Default)]
pub struct HostPair {
    pub echo: Vec<f64>,
    pub sample: Vec<f64>,
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("the roundtrip bench reads /proc and pins with taskset: it runs on Linux only");
}

#[cfg(target_os = "linux")]
fn main() {
    let smoke = common::smoke();
    let counts = Counts::from_env();
    let bins = build(smoke);
    let subjects = subjects(&bins);
    let all_cpus = executa::host::cpu_affinity().expect("sched_getaffinity");
    let placements = placements(&all_cpus);
    common::print_machine(&format!(
        "{}cargo bench --bench roundtrip",
        if smoke { "EXECUTA_BENCH_SMOKE=1 " } else { "" }
    ));
    report::print_plan(&counts, &subjects, &placements, &bins);

    let mut grid: Vec<Vec<Cell>> = placements
        .iter()
        .map(|_| subjects.iter().map(|_| Cell::default()).collect())
        .collect();
    let mut host_pairs: Vec<HostPair> = placements.iter().map(|_| HostPair::default()).collect();
    let mut echo_cpu = Vec::new();
    for round in 0..counts.rounds {
        eprintln!("round {}/{}", round + 1, counts.rounds);
        for (p, &placement) in placements.iter().enumerate() {
            placement.place_host(&all_cpus);
            for (s, subject) in subjects.iter().enumerate() {
                // The crate's driver against executa and against the bare loop (no runtime
                // of its own, so the driver's own limit shows), right before this bench's
                // own client measures the same subject: free-floating, this VM has fast and
                // slow spells, and two draws seconds apart share one more often.
                if let Some(driver) = bins.driver.as_ref().filter(|_| s < 2) {
                    let rate = driver_rate(driver, placement, subject, &counts, smoke);
                    grid[p][s].driver_rate.push(rate);
                }
                measure(placement, subject, &counts, smoke, &mut grid[p][s]);
                if s == 0 {
                    let hol = sweep::head_of_line(placement, subject, smoke);
                    grid[p][s].hol_ms.push(hol);
                }
            }
            let echo_loop = echoing(&subjects[1]);
            let [executa, bare] =
                sweep::sweep_pair(placement, [&subjects[0], &echo_loop], smoke, round);
            grid[p][0].sweep.push(executa);
            grid[p][1].sweep.push(bare);
            if placement == Placement::Free {
                paced_round(
                    &subjects,
                    &echo_loop,
                    &counts,
                    smoke,
                    round,
                    &mut grid[p],
                    &mut echo_cpu,
                );
            }
            host_pair(placement, &subjects[0], &counts, &mut host_pairs[p]);
        }
    }
    Placement::Free.place_host(&all_cpus);
    if smoke {
        println!("smoke run: every reply checked; no figures are reported in smoke mode");
        return;
    }
    report::print(&subjects, &placements, &grid, &host_pairs, &echo_cpu);
    let svg = report::chart(&subjects, &placements, &grid);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/roundtrip.svg");
    match std::fs::write(&path, svg) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
}

/// One subject in one placement, one round: spawn, warm up, then every figure.
#[cfg(target_os = "linux")]
fn measure(placement: Placement, subject: &Subject, counts: &Counts, smoke: bool, cell: &mut Cell) {
    let mut peer = Peer::spawn(&placement.prefix(), &subject.cmd, subject.echoes, smoke);
    peer.wait_ready();
    peer.serial(counts.serial / 10 + 1);
    if let Some(t) = procfs::status_number(peer.pid(), "Threads") {
        cell.threads.push(t as f64);
    }
    if let Some(kb) = procfs::status_number(peer.pid(), "VmRSS") {
        cell.rss_kb.push(kb as f64);
    }
    let mut rtt = peer.serial(counts.serial);
    let summary = common::summarize(&mut rtt);
    cell.p50.push(common::micros(summary.p50));
    cell.p90.push(common::micros(summary.p90));
    cell.rate
        .push(peer.pipelined(counts.pipelined, Some(counts.in_flight)));
    if placement == Placement::Free {
        cell.idle_us_per_s.push(idle_cpu(&peer, counts.idle));
        peer.pipelined(counts.flood, None);
        if let Some(kb) = procfs::status_number(peer.pid(), "VmHWM") {
            cell.hwm_kb.push(kb as f64);
        }
    }
    peer.close();
}

/// The bare loop in its `--echo` mode: the same work as the `echo` tool (the sweep's and
/// the paced load's second baseline).
fn echoing(bare: &Subject) -> Subject {
    Subject {
        name: "bare loop, --echo",
        cmd: bare.cmd.iter().cloned().chain(["--echo".into()]).collect(),
        echoes: true,
    }
}

/// The paced load of one round over every subject and `echoing`, paired in time
/// (`roundtrip/paced.rs`): each subject's cell gets its figures, `echo_cpu` the echoing
/// loop's.
#[cfg(target_os = "linux")]
fn paced_round(
    subjects: &[Subject],
    echoing: &Subject,
    counts: &Counts,
    smoke: bool,
    round: u64,
    cells: &mut [Cell],
    echo_cpu: &mut Vec<paced::PacedCpu>,
) {
    let all: Vec<&Subject> = subjects.iter().chain([echoing]).collect();
    let mut figures = paced::paced_cpu(&all, counts, smoke, round);
    echo_cpu.extend(figures.pop());
    for (cell, (fast, slow)) in cells.iter_mut().zip(figures) {
        cell.cpu_fast.push(fast);
        cell.cpu_slow.push(slow);
    }
}

/// CPU µs the child spent per second while nothing was sent (schedstat), in two windows
/// one after the other: from 50 ms after the last reply, and the next one (executa's main
/// thread looks once for a stalled run up to a second after the last invoke, then sleeps).
#[cfg(target_os = "linux")]
fn idle_cpu(peer: &Peer, window: Duration) -> (f64, f64) {
    // Let any post-message polling end before the window opens.
    std::thread::sleep(Duration::from_millis(50));
    let per_s = || {
        let before = CpuTime::of(peer.pid()).expect("child alive");
        let start = Instant::now();
        std::thread::sleep(window);
        let used = CpuTime::of(peer.pid()).expect("child alive").since(before);
        common::micros(used.sched) / start.elapsed().as_secs_f64()
    };
    let first = per_s();
    (first, per_s())
}

/// Serial `echo` and `sample` invokes through `executa::host`, alternating.
fn host_pair(placement: Placement, subject: &Subject, counts: &Counts, pair: &mut HostPair) {
    let argv: Vec<String> = placement
        .prefix()
        .into_iter()
        .chain(subject.cmd.clone())
        .collect();
    let cmd = PluginCommand::from_argv(&argv).expect("a command");
    let opts = HostOptions {
        stderr: StderrRelay::Quiet,
        ..HostOptions::default()
    };
    let host = Host::start(cmd, opts, Handlers::dev_backends()).expect("host start");
    let echo_args = json!({ "text": "hi" });
    let sample_args = json!({ "prompt": "hi" });
    let call = |tool: &str, args: &serde_json::Value| {
        let start = Instant::now();
        let r = host.invoke(tool, args).expect("host invoke");
        let took = start.elapsed();
        assert!(r.success, "{tool} failed: {:?}", r.error);
        let want = if tool == "echo" { "hi" } else { "" };
        if tool == "echo" {
            assert_eq!(r.data["text"], want, "echo data: {}", r.data);
        } else {
            assert!(r.data["text"].is_string(), "sample data: {}", r.data);
        }
        took
    };
    for _ in 0..counts.host_calls / 10 + 1 {
        call("echo", &echo_args);
        call("sample", &sample_args);
    }
    let (mut echo, mut sample) = (Vec::new(), Vec::new());
    for _ in 0..counts.host_calls {
        echo.push(call("echo", &echo_args));
        sample.push(call("sample", &sample_args));
    }
    host.shutdown();
    pair.echo
        .push(common::micros(common::summarize(&mut echo).p50));
    pair.sample
        .push(common::micros(common::summarize(&mut sample).p50));
}

/// `executa bench` (the crate's own driver) pipelining `echo` against `subject`, in
/// invokes per second, with the same count and window as this bench's pipelined client.
fn driver_rate(
    driver: &Path,
    placement: Placement,
    subject: &Subject,
    counts: &Counts,
    smoke: bool,
) -> f64 {
    let mut cmd = Command::new(driver);
    cmd.args(["bench", "--quiet", "--no-progress", "--rounds", "1"])
        .args(["--requests", &counts.pipelined.to_string()])
        .args(["--concurrency", &counts.in_flight.to_string()])
        .args(["--args", r#"{"text":"hi"}"#]);
    if let Some(cpu) = placement.plugin_cpu() {
        cmd.args(["--pin-host", "0", "--pin-plugin", &cpu.to_string()]);
    }
    let out = cmd
        .arg("--")
        .args(&subject.cmd)
        .output()
        .expect("run executa bench");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "executa bench failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let rate = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("throughput")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no throughput line in:\n{text}"));
    if smoke {
        assert!(
            text.contains("errors      0"),
            "executa bench errors:\n{text}"
        );
    }
    rate
}

/// The binaries the run needs.
pub struct Bins {
    pub dir: PathBuf,
    /// `everything` built with `[profile.speed]` (opt-level 3); not in smoke mode.
    pub speed: Option<PathBuf>,
    pub profile: &'static str,
    /// The `executa` binary, for `executa bench`.
    pub driver: Option<PathBuf>,
}

/// Builds the examples (and the `executa` binary): release for figures; in smoke mode the
/// profile this bench was built with, so `cargo test --benches` stays a debug build.
fn build(smoke: bool) -> Bins {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let release = !smoke || !cfg!(debug_assertions);
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(&root).args(["build", "--quiet"]);
    if release {
        cmd.arg("--release");
    }
    for e in ["everything", "bench_baseline", "bench_onehop"] {
        cmd.args(["--example", e]);
    }
    cmd.args(["--bin", "executa"]);
    assert!(
        cmd.status().expect("cargo build").success(),
        "building the examples failed"
    );
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), |p| root.join(PathBuf::from(p)));
    let profile = if release { "release" } else { "debug" };
    let driver = target.join(profile).join("executa");
    // The same plugin at opt-level 3, the profile the README offers for speed. Smoke mode
    // checks replies only, and the code is the same: it skips this second build.
    let speed = (!smoke).then(|| {
        let built = Command::new(env!("CARGO"))
            .current_dir(&root)
            .args([
                "build",
                "--quiet",
                "--profile",
                "speed",
                "--example",
                "everything",
            ])
            .status()
            .expect("cargo build --profile speed");
        assert!(
            built.success(),
            "building everything with the speed profile failed"
        );
        target.join("speed/examples/everything")
    });
    Bins {
        speed,
        dir: target.join(profile).join("examples"),
        profile,
        driver: driver.exists().then_some(driver),
    }
}

/// The subjects, executa and the bare loop first and in that order (the sweep and the
/// paced load pair those two by index), then the others found here.
fn subjects(bins: &Bins) -> Vec<Subject> {
    let path = |name: &str| bins.dir.join(name).to_string_lossy().into_owned();
    let mut subjects = vec![
        Subject {
            name: "executa (everything)",
            cmd: vec![path("everything")],
            echoes: true,
        },
        Subject {
            name: "bare 1-thread loop",
            cmd: vec![path("bench_baseline")],
            echoes: false,
        },
        Subject {
            name: "one-hop probe",
            cmd: vec![path("bench_onehop")],
            echoes: true,
        },
    ];
    let quickstart = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quickstart.py");
    if works(Command::new("python3").arg("--version")) {
        subjects.push(Subject {
            name: "python quickstart loop",
            cmd: vec!["python3".into(), quickstart.to_string_lossy().into_owned()],
            echoes: true,
        });
    } else {
        eprintln!("python3 not found: the Python subject is skipped");
    }
    if let Some(speed) = &bins.speed {
        subjects.push(Subject {
            name: "executa, speed profile",
            cmd: vec![speed.to_string_lossy().into_owned()],
            echoes: true,
        });
    }
    subjects
}

/// Pinned placements need `taskset` and cpus 0 and 1; free-floating always runs.
fn placements(all_cpus: &[usize]) -> Vec<Placement> {
    let taskset = works(Command::new("taskset").args(["-c", "0", "true"]));
    let mut out = Vec::new();
    if taskset && all_cpus.contains(&0) {
        out.push(Placement::Pinned);
        if all_cpus.contains(&1) {
            out.push(Placement::CrossCore);
        }
    } else {
        eprintln!("taskset or cpu 0 unavailable: only the free-floating placement runs");
    }
    out.push(Placement::Free);
    // `EXECUTA_BENCH_PLACEMENTS=pinned,free` keeps only the named placements.
    if let Ok(keep) = std::env::var("EXECUTA_BENCH_PLACEMENTS") {
        out.retain(|p| keep.split(',').any(|k| k.trim() == p.short()));
    }
    out
}

fn works(cmd: &mut Command) -> bool {
    cmd.output().is_ok_and(|o| o.status.success())
}
