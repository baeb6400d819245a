//! The round-trip bench's output: the plan, per-placement tables of medians, the ratios
//! issue 9 asks for, and the chart's data.

use crate::chart::{self, Panel};
use crate::common::median;
use crate::paced::PacedCpu;
use crate::{Bins, Cell, Counts, HostPair, Placement, Subject};

pub fn print_plan(counts: &Counts, subjects: &[Subject], placements: &[Placement], bins: &Bins) {
    println!(
        "rounds: {} (interleaved: each round visits every placement, and every subject in it)",
        counts.rounds
    );
    println!(
        "per round and subject: {} serial `echo` round trips (after {} warm-up), {} pipelined with {} in flight",
        counts.serial,
        counts.serial / 10 + 1,
        counts.pipelined,
        counts.in_flight
    );
    println!(
        "free-floating only: {} ms idle, then a {}-invoke flood for peak RSS; per round, every subject (and the bare loop echoing) at once, in alternating blocks: {} paced requests every 0.5 ms, {} every 5 ms",
        counts.idle.as_millis(),
        counts.flood,
        counts.paced,
        counts.paced_slow
    );
    println!(
        "host-driven pair: {} serial `echo` and `sample` invokes through executa::host, alternating",
        counts.host_calls
    );
    println!(
        "placements: {}",
        placements
            .iter()
            .map(|p| p.label())
            .collect::<Vec<_>>()
            .join("; ")
    );
    println!("binaries: {} profile, {}", bins.profile, bins.dir.display());
    for s in subjects {
        println!("  {:<24} {}", s.name, s.cmd.join(" "));
    }
}

fn med(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| median(xs.to_vec()))
}

fn range(xs: &[f64]) -> String {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if xs.is_empty() {
        "-".into()
    } else {
        format!("{lo:.1}-{hi:.1}")
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

pub fn print(
    subjects: &[Subject],
    placements: &[Placement],
    grid: &[Vec<Cell>],
    host_pairs: &[HostPair],
    echo_cpu: &[PacedCpu],
) {
    for (p, placement) in placements.iter().enumerate() {
        println!("\n{} — medians over rounds", placement.label());
        println!(
            "{:<24} {:>8} {:>8} {:>13} {:>12} {:>8} {:>9}",
            "subject", "p50 us", "p90 us", "p50 range", "pipelined/s", "threads", "RSS kB"
        );
        for (s, subject) in subjects.iter().enumerate() {
            let c = &grid[p][s];
            println!(
                "{:<24} {:>8} {:>8} {:>13} {:>12} {:>8} {:>9}",
                subject.name,
                opt(med(&c.p50), 1),
                opt(med(&c.p90), 1),
                range(&c.p50),
                opt(med(&c.rate), 0),
                opt(med(&c.threads), 0),
                opt(med(&c.rss_kb), 0),
            );
        }
        for (s, subject) in subjects.iter().enumerate() {
            if let Some(rate) = med(&grid[p][s].driver_rate) {
                println!(
                    "{:<24} {:>8} {:>8} {:>13} {:>12.0}   (`executa bench --concurrency 64` against {})",
                    "executa bench driver", "", "", "", rate, subject.name
                );
            }
        }
    }
    print_cpu(subjects, placements, grid, echo_cpu);
    print_ratios(subjects, placements, grid, host_pairs, echo_cpu);
}

fn print_cpu(
    subjects: &[Subject],
    placements: &[Placement],
    grid: &[Vec<Cell>],
    echo_cpu: &[PacedCpu],
) {
    let Some(p) = placements.iter().position(|&p| p == Placement::Free) else {
        return;
    };
    println!("\nCPU and memory, free-floating — medians over rounds");
    println!(
        "{:<24} {:>20} {:>20} {:>12} {:>14}",
        "subject", "CPU us/req @0.5ms", "CPU us/req @5ms", "idle us/s", "peak RSS kB"
    );
    println!(
        "{:<24} {:>20} {:>20} {:>12}",
        "", "(stat | schedstat)", "(stat | schedstat)", "(1st | 2nd)"
    );
    let pair = |xs: &[(f64, f64)], digits| {
        let a: Vec<f64> = xs.iter().map(|x| x.0).collect();
        let b: Vec<f64> = xs.iter().map(|x| x.1).collect();
        format!("{} | {}", opt(med(&a), digits), opt(med(&b), digits))
    };
    for (s, subject) in subjects.iter().enumerate() {
        let c = &grid[p][s];
        println!(
            "{:<24} {:>20} {:>20} {:>12} {:>14}",
            subject.name,
            pair(&c.cpu_fast, 1),
            pair(&c.cpu_slow, 1),
            pair(&c.idle_us_per_s, 0),
            opt(med(&c.hwm_kb), 0),
        );
    }
    let (fast, slow): (Vec<_>, Vec<_>) = echo_cpu.iter().copied().unzip();
    println!(
        "{:<24} {:>20} {:>20}   (paced load only)",
        "bare loop, --echo",
        pair(&fast, 1),
        pair(&slow, 1)
    );
}

/// Each round's ratio `a / b`.
fn per_round(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

/// Median over rounds of the per-round ratio `f(a) / f(b)`.
fn ratio(a: &[f64], b: &[f64]) -> Option<f64> {
    med(&per_round(a, b))
}

/// The lowest and highest per-round ratio `a / b`, as `rounds LO-HIx`.
fn ratio_range(a: &[f64], b: &[f64]) -> String {
    let per_round = per_round(a, b);
    if per_round.is_empty() {
        return "no rounds".into();
    }
    let lo = per_round.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("rounds {lo:.2}-{hi:.2}x")
}

fn print_ratios(
    subjects: &[Subject],
    placements: &[Placement],
    grid: &[Vec<Cell>],
    host_pairs: &[HostPair],
    echo_cpu: &[PacedCpu],
) {
    println!("\nratios (median over rounds of each round's ratio)");
    let find = |name: &str| subjects.iter().position(|s| s.name.starts_with(name));
    let (bare, probe, python) = (find("bare"), find("one-hop"), find("python"));
    let speed = find("executa, speed");
    for (p, placement) in placements.iter().enumerate() {
        let row = &grid[p];
        let e = &row[0];
        let mut parts = Vec::new();
        let mut add = |label: &str, v: Option<f64>| {
            if let Some(v) = v {
                parts.push(format!("{label} {v:.2}x"));
            }
        };
        if let Some(i) = probe {
            add("p50 executa/one-hop", ratio(&e.p50, &row[i].p50));
        }
        if let Some(i) = bare {
            add("p50 executa/bare", ratio(&e.p50, &row[i].p50));
            add("pipelined executa/bare", ratio(&e.rate, &row[i].rate));
        }
        if let Some(i) = python {
            add("pipelined executa/python", ratio(&e.rate, &row[i].rate));
        }
        add("executa bench/this client", ratio(&e.driver_rate, &e.rate));
        if let Some(i) = bare {
            add("(against bare)", ratio(&row[i].driver_rate, &row[i].rate));
        }
        if let (Some(s), Some(b)) = (speed, bare) {
            add("p50 speed-profile/bare", ratio(&row[s].p50, &row[b].p50));
            add(
                "pipelined speed-profile/bare",
                ratio(&row[s].rate, &row[b].rate),
            );
        }
        println!("  {:<11} {}", placement.short(), parts.join(", "));
    }
    if let Some(p) = placements.iter().position(|&p| p == Placement::Free) {
        let sched = |xs: &[(f64, f64)]| xs.iter().map(|x| x.1).collect::<Vec<f64>>();
        for (label, pick) in [("CPU/req @0.5ms", 0usize), ("CPU/req @5ms", 1usize)] {
            let of = |c: &Cell| sched(if pick == 0 { &c.cpu_fast } else { &c.cpu_slow });
            let e = of(&grid[p][0]);
            let echoing: Vec<f64> = echo_cpu
                .iter()
                .map(|&(fast, slow)| if pick == 0 { fast.1 } else { slow.1 })
                .collect();
            let mut parts: Vec<String> = subjects
                .iter()
                .enumerate()
                .skip(1)
                .filter_map(|(s, subj)| {
                    let other = of(&grid[p][s]);
                    ratio(&e, &other).map(|r| {
                        format!(
                            "executa/{} {r:.2}x ({})",
                            subj.name,
                            ratio_range(&e, &other)
                        )
                    })
                })
                .collect();
            parts.extend(ratio(&e, &echoing).map(|r| {
                format!(
                    "executa/bare loop --echo {r:.2}x ({})",
                    ratio_range(&e, &echoing)
                )
            }));
            println!("  free {label} (schedstat): {}", parts.join(", "));
        }
    }
    if let Some(b) = bare {
        for (p, placement) in placements.iter().enumerate() {
            let parts: Vec<String> = crate::sweep::SIZES
                .iter()
                .enumerate()
                .map(|(i, size)| {
                    let at = |c: &Cell| c.sweep.iter().map(|r| r[i]).collect::<Vec<f64>>();
                    let (e, bare) = (at(&grid[p][0]), at(&grid[p][b]));
                    format!(
                        "{} {}x ({}; {} against {} invokes/s)",
                        size.label,
                        opt(ratio(&e, &bare), 2),
                        ratio_range(&e, &bare),
                        opt(med(&e), 0),
                        opt(med(&bare), 0)
                    )
                })
                .collect();
            println!(
                "  {:<11} sweep (8 in flight unless said), executa/bare --echo: {}",
                placement.short(),
                parts.join(", ")
            );
        }
    }
    for (p, placement) in placements.iter().enumerate() {
        let hol = &grid[p][0].hol_ms;
        println!(
            "  {:<11} head of line: worst `health` wait behind a 1.5 s run {} ms (median of rounds; rounds {})",
            placement.short(),
            opt(med(hol), 2),
            range(hol)
        );
    }
    for (p, placement) in placements.iter().enumerate() {
        let h = &host_pairs[p];
        println!(
            "  {:<11} executa::host: echo p50 {} us, sample p50 {} us, sample/echo {}x",
            placement.short(),
            opt(med(&h.echo), 1),
            opt(med(&h.sample), 1),
            opt(ratio(&h.sample, &h.echo), 2)
        );
    }
}

/// The chart of round-trip p50 and pipelined throughput, from this run's medians.
pub fn chart(subjects: &[Subject], placements: &[Placement], grid: &[Vec<Cell>]) -> String {
    let names: Vec<&str> = subjects.iter().map(|s| s.name).collect();
    let panel = |title: &str, unit, pick: fn(&Cell) -> &Vec<f64>, scale: f64| Panel {
        title: title.into(),
        unit,
        groups: placements
            .iter()
            .enumerate()
            .map(|(p, placement)| {
                let values = grid[p]
                    .iter()
                    .map(|c| med(pick(c)).map(|v| v * scale))
                    .collect();
                (placement.short(), values)
            })
            .collect(),
    };
    chart::render(
        "executa echo round trip against baselines (cargo bench --bench roundtrip, medians)",
        &names,
        &[
            panel("round trip p50", "µs, lower is better", |c| &c.p50, 1.0),
            panel(
                "pipelined, 64 in flight",
                "k invokes/s, higher is better",
                |c| &c.rate,
                1e-3,
            ),
            sweep_panel(subjects, placements, grid),
        ],
    )
}

/// executa's pipelined rate over the echoing bare loop's at each argument size (8 in
/// flight, cross-core where it ran), and the head-of-line wait in the title.
fn sweep_panel<'a>(
    subjects: &'a [Subject],
    placements: &[Placement],
    grid: &[Vec<Cell>],
) -> Panel<'a> {
    let p = placements
        .iter()
        .position(|&p| p == Placement::CrossCore)
        .unwrap_or(0);
    let bare = subjects.iter().position(|s| s.name.starts_with("bare"));
    let groups = crate::sweep::SIZES
        .iter()
        .enumerate()
        .map(|(i, size)| {
            let at = |c: &Cell| c.sweep.iter().map(|r| r[i]).collect::<Vec<f64>>();
            let values = (0..subjects.len())
                .map(|s| match (s, bare) {
                    (0, Some(b)) => ratio(&at(&grid[p][0]), &at(&grid[p][b])),
                    _ => None,
                })
                .collect();
            (size.label, values)
        })
        .collect();
    let hol = med(&grid[p][0].hol_ms).unwrap_or(f64::NAN);
    Panel {
        title: format!("size sweep, executa/bare echo; worst health wait {hol:.1} ms"),
        unit: "x the bare loop echoing, 8 in flight (2 B: 64), higher is better",
        groups,
    }
}
