//! `executa bench`'s figures: each plugin's medians over rounds, printed, with ratios
//! against the first plugin.

use std::time::Duration;

use crate::bench_driver::Run;

/// Medians over rounds.
pub struct Summary {
    pub p50: Duration,
    p90: Duration,
    p99: Duration,
    max: Duration,
    mean: Duration,
    pub rate: f64,
    requests: usize,
    elapsed: f64,
    pub errors: usize,
    first_error: Option<String>,
    /// CPU per request: the plugin's, the bench's.
    pub plugin_cpu: Option<Duration>,
    bench_cpu: Option<Duration>,
    /// Resident memory after the run, and peak, kB.
    memory_kb: Option<(u64, u64)>,
}

pub fn summarize(runs: &[Run]) -> Summary {
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
            // Every answered request has a latency, failed ones too.
            ok as f64 / elapsed,
            elapsed,
        ]);
    }
    let median = |k: usize| median_of(per.iter().map(|v| v[k]).collect());
    let d = |k| Duration::from_secs_f64(median(k));
    let per_request = |cpu: fn(&Run) -> Option<Duration>| {
        let xs: Option<Vec<f64>> = runs
            .iter()
            .map(|r| Some(cpu(r)?.as_secs_f64() / r.latencies.len().max(1) as f64))
            .collect();
        xs.filter(|x| !x.is_empty())
            .map(|x| Duration::from_secs_f64(median_of(x)))
    };
    let memory: Option<Vec<(u64, u64)>> = runs.iter().map(|r| r.memory_kb).collect();
    Summary {
        p50: d(0),
        p90: d(1),
        p99: d(2),
        max: d(3),
        mean: d(4),
        rate: median(5),
        requests: runs.first().map_or(0, |r| r.latencies.len()),
        elapsed: median(6),
        errors: runs.iter().map(|r| r.errors).sum(),
        first_error: runs.iter().find_map(|r| r.first_error.clone()),
        plugin_cpu: per_request(|r| r.plugin_cpu),
        bench_cpu: per_request(|r| r.bench_cpu),
        memory_kb: memory.filter(|m| !m.is_empty()).map(|m| {
            let rss = median_of(m.iter().map(|x| x.0 as f64).collect());
            let peak = median_of(m.iter().map(|x| x.1 as f64).collect());
            (rss as u64, peak as u64)
        }),
    }
}

fn median_of(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(0.0)
}

impl Summary {
    pub fn print(&self, rounds: usize) {
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
        if let Some(plugin) = self.plugin_cpu {
            println!(
                "cpu/request plugin {}   bench {}",
                fmt(plugin),
                self.bench_cpu.map_or("?".into(), fmt)
            );
        }
        if let Some((rss, peak)) = self.memory_kb {
            println!("memory      plugin RSS {} (peak {})", mb(rss), mb(peak));
        }
        println!("errors      {}", self.errors);
        if let Some(e) = &self.first_error {
            println!("first error {e}");
        }
    }

    /// This plugin's figures against `first`'s.
    pub fn print_ratios(&self, first: &Summary) {
        let cpu = match (self.plugin_cpu, first.plugin_cpu) {
            (Some(a), Some(b)) => {
                format!("   cpu/request {}", ratio(a.as_secs_f64(), b.as_secs_f64()))
            }
            _ => String::new(),
        };
        let memory = match (self.memory_kb, first.memory_kb) {
            (Some(a), Some(b)) => format!("   RSS {}", ratio(a.0 as f64, b.0 as f64)),
            _ => String::new(),
        };
        println!(
            "vs first    p50 {}   throughput {}{cpu}{memory}",
            ratio(self.p50.as_secs_f64(), first.p50.as_secs_f64()),
            ratio(self.rate, first.rate)
        );
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

/// `a / b` with two decimals, or four below 0.1 (a Python server
/// moves a small fraction of a Rust plugin's requests).
fn ratio(a: f64, b: f64) -> String {
    let r = a / b.max(1e-12);
    if r < 0.1 {
        format!("{r:.4}x")
    } else {
        format!("{r:.2}x")
    }
}

fn mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1000.0)
}
