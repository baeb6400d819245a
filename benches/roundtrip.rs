//! Round trips through real pipes to real child processes: the hot `invoke` path as a host
//! sees it. Compares the `everything` example (the executa runtime) with a single-threaded
//! loop with no runtime (`bench_baseline`), in the same run, as ratios.
//!
//! Run unpinned: `cargo bench --bench roundtrip`
//! Run pinned (both processes on one core, the stable figure on a VM):
//! `taskset -c 0 cargo bench --bench roundtrip`
//! `EXECUTA_BENCH_N` sets the number of serial round trips (default 20000).

mod common;

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

struct Subject {
    name: &'static str,
    cmd: Vec<String>,
}

struct Peer {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Peer {
    fn spawn(cmd: &[String]) -> Peer {
        let mut child = Command::new(&cmd[0])
            .args(&cmd[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stdin = BufWriter::new(child.stdin.take().expect("piped stdin"));
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Peer {
            child,
            stdin,
            stdout,
            line: String::new(),
        }
    }

    fn call(&mut self, frame: &str) {
        self.stdin.write_all(frame.as_bytes()).expect("write");
        self.stdin.flush().expect("flush");
        self.read_reply();
    }

    fn read_reply(&mut self) {
        self.line.clear();
        let n = self.stdout.read_line(&mut self.line).expect("read");
        assert!(n > 0, "plugin closed its stdout");
    }

    fn status(&self, key: &str) -> String {
        let path = format!("/proc/{}/status", self.child.id());
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with(key))
                    .map(|l| l[key.len() + 1..].trim().to_owned())
            })
            .unwrap_or_default()
    }

    fn close(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn invoke(n: u64) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{n},\"method\":\"invoke\",\"params\":{{\"tool\":\"echo\",\"arguments\":{{\"text\":\"hi\"}},\"context\":{{\"invoke_id\":\"bench-{n}\"}}}}}}\n"
    )
}

struct Figures {
    rtt: common::Summary,
    per_sec: f64,
    rss: String,
    threads: String,
}

fn measure(subject: &Subject, serial: u64, pipelined: u64) -> Figures {
    let mut peer = Peer::spawn(&subject.cmd);
    peer.call("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"describe\"}\n");
    std::thread::sleep(Duration::from_millis(200));
    let (rss, threads) = (peer.status("VmRSS"), peer.status("Threads"));
    for i in 0..serial / 10 {
        peer.call(&invoke(i));
    }
    let mut samples = Vec::with_capacity(serial as usize);
    for i in 0..serial {
        let frame = invoke(i);
        let start = Instant::now();
        peer.call(&frame);
        samples.push(start.elapsed());
    }
    let rtt = common::summarize(&mut samples);
    let per_sec = pipelined_rate(peer, pipelined);
    Figures {
        rtt,
        per_sec,
        rss,
        threads,
    }
}

/// One thread writes every request while this one reads every reply.
fn pipelined_rate(peer: Peer, count: u64) -> f64 {
    let Peer {
        child,
        mut stdin,
        mut stdout,
        mut line,
    } = peer;
    let start = Instant::now();
    let writer = std::thread::spawn(move || {
        for i in 0..count {
            stdin.write_all(invoke(i).as_bytes()).expect("write");
        }
        stdin.flush().expect("flush");
        stdin
    });
    for _ in 0..count {
        line.clear();
        assert!(
            stdout.read_line(&mut line).expect("read") > 0,
            "plugin closed its stdout"
        );
    }
    let rate = count as f64 / start.elapsed().as_secs_f64();
    let stdin = writer.join().expect("writer thread");
    Peer {
        child,
        stdin,
        stdout,
        line,
    }
    .close();
    rate
}

fn build(examples: &[&str]) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(&root)
        .args(["build", "--quiet", "--release"]);
    for e in examples {
        cmd.args(["--example", e]);
    }
    assert!(
        cmd.status().expect("cargo build").success(),
        "building the examples failed"
    );
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    target.join("release").join("examples")
}

fn main() {
    common::print_machine(
        "cargo bench --bench roundtrip   (pinned: taskset -c 0 cargo bench --bench roundtrip)",
    );
    let serial: u64 = std::env::var("EXECUTA_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let pipelined = serial * 5;
    let dir = build(&["everything", "bench_baseline"]);
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let mut subjects = vec![
        Subject {
            name: "baseline: 1-thread loop, no runtime",
            cmd: vec![path("bench_baseline")],
        },
        Subject {
            name: "executa (everything example)",
            cmd: vec![path("everything")],
        },
    ];
    // The platform's Python quickstart style (`for line in sys.stdin`), when python3 exists.
    let quickstart = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quickstart.py");
    if Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        subjects.push(Subject {
            name: "python quickstart-style plugin",
            cmd: vec!["python3".into(), quickstart.to_string_lossy().into_owned()],
        });
    }
    println!(
        "serial round trips: {serial} (after {} warm-up); pipelined: {pipelined} invokes of `echo {{\"text\":\"hi\"}}`",
        serial / 10
    );
    println!();
    println!(
        "{:<38} {:>9} {:>9} {:>9} {:>12} {:>10} {:>8}",
        "subject", "p50 us", "p90 us", "p99 us", "pipelined/s", "idle RSS", "threads"
    );
    let mut base: Option<Figures> = None;
    for s in &subjects {
        let f = measure(s, serial, pipelined);
        println!(
            "{:<38} {:>9.1} {:>9.1} {:>9.1} {:>12.0} {:>10} {:>8}",
            s.name,
            common::micros(f.rtt.p50),
            common::micros(f.rtt.p90),
            common::micros(f.rtt.p99),
            f.per_sec,
            f.rss,
            f.threads
        );
        match &base {
            None => base = Some(f),
            Some(b) => println!(
                "{:<38} p50 {:.2}x the baseline; pipelined {:.2}x the baseline's rate",
                "",
                f.rtt.p50.as_secs_f64() / b.rtt.p50.as_secs_f64(),
                f.per_sec / b.per_sec
            ),
        }
    }
}
