//! Shared helpers for the benchmarks: machine description and order statistics.

#![allow(dead_code)]

// What `/proc` says about a process: Linux by nature.
#[cfg(target_os = "linux")]
pub mod procfs;

use std::time::Duration;

/// Prints what the numbers were measured on, so a result is never read without context.
pub fn print_machine(command: &str) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let affinity = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Cpus_allowed_list"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    println!("machine: {cpu}, {cpus} usable cpus (allowed: {affinity})");
    println!("command: {command}");
    println!("note: absolute figures drift between runs on a VM; compare ratios within one run");
}

/// Median, p90 and p99 of a sample.
pub struct Summary {
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
}

pub fn summarize(samples: &mut [Duration]) -> Summary {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    Summary {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
    }
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The median of several repeated measurements.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// Whether the bench runs in smoke mode (`EXECUTA_BENCH_SMOKE=1`): tiny counts, replies
/// checked, nothing timed or judged by time.
pub fn smoke() -> bool {
    std::env::var("EXECUTA_BENCH_SMOKE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A count from the environment variable `name`, else `full`, or `tiny` in smoke mode.
pub fn count(name: &str, full: u64, tiny: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if smoke() { tiny } else { full })
}
