//! The two figures of the plugin's worst cases: the frame-size sweep (pipelined `echo`
//! with 1 KiB, 64 KiB and 1 MiB arguments, 8 in flight, against the bare loop in its
//! `--echo` mode, which parses the params into a `Value` and echoes the arguments back),
//! and the head-of-line wait (how long a `health` waits while a tool that was quick forty
//! times runs 1.5 s once).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::peer::Peer;
use crate::{Placement, Subject};

/// The argument sizes of the sweep, with the invokes sent at each (full run).
pub const SIZES: [(usize, &str, u64); 3] = [
    (1024, "1 KiB", 20_000),
    (64 * 1024, "64 KiB", 2_000),
    (1024 * 1024, "1 MiB", 200),
];

/// Invokes in flight in the sweep.
pub const IN_FLIGHT: usize = 8;

/// Pipelined rate (invokes per second) of `subject` at each size of [`SIZES`].
pub fn sweep(placement: Placement, subject: &Subject, smoke: bool) -> Vec<f64> {
    let mut cmd = subject.cmd.clone();
    if subject.name.starts_with("bare") {
        cmd.push("--echo".into());
    }
    let mut peer = Peer::spawn(&placement.prefix(), &cmd, true, smoke);
    peer.wait_ready();
    let rates = SIZES
        .iter()
        .map(|&(size, _, count)| {
            peer.text = "x".repeat(size);
            let count = if smoke { 3 } else { count };
            peer.pipelined(count / 10 + 1, Some(IN_FLIGHT));
            peer.pipelined(count, Some(IN_FLIGHT))
        })
        .collect();
    peer.close();
    rates
}

/// The offsets after the slow invoke at which a `health` is sent.
const OFFSETS_MS: [u64; 3] = [1, 10, 50];

/// The worst wait (ms) of a `health` sent 1, 10 and 50 ms after a `sleep {"ms":1500}`
/// that follows forty `sleep {"ms":0}`, each in a fresh plugin.
pub fn head_of_line(placement: Placement, subject: &Subject, smoke: bool) -> f64 {
    let slow_ms = if smoke { 100 } else { 1500 };
    let mut worst = Duration::ZERO;
    for offset in OFFSETS_MS {
        let argv: Vec<String> = placement
            .prefix()
            .into_iter()
            .chain(subject.cmd.clone())
            .collect();
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the plugin");
        let mut stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let mut read_id = |want: &str| loop {
            line.clear();
            assert!(
                stdout.read_line(&mut line).expect("read") > 0,
                "plugin closed stdout"
            );
            if line.contains(want) {
                return;
            }
        };
        let sleep = |id: &str, ms: u64| {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":\"{id}\",\"method\":\"invoke\",\"params\":{{\"tool\":\"sleep\",\"arguments\":{{\"ms\":{ms}}}}}}}\n"
            )
        };
        for i in 0..40 {
            stdin
                .write_all(sleep(&format!("q{i}"), 0).as_bytes())
                .expect("write");
            read_id(&format!("\"q{i}\""));
        }
        stdin
            .write_all(sleep("slow", slow_ms).as_bytes())
            .expect("write");
        std::thread::sleep(Duration::from_millis(offset));
        let sent = Instant::now();
        stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":\"h\",\"method\":\"health\"}\n")
            .expect("write");
        read_id("\"h\"");
        worst = worst.max(sent.elapsed());
        read_id("\"slow\"");
        drop(stdin);
        let _ = child.wait();
    }
    worst.as_secs_f64() * 1e3
}
