//! The two figures of the plugin's worst cases: the frame-size sweep (pipelined `echo`
//! against the bare loop in its `--echo` mode, which parses the params into a `Value` and
//! echoes the arguments back: the same work as an `echo` tool, so the ratio is the
//! runtime's cost; first the main table's 2-byte `{"text":"hi"}` with 64 in flight, then
//! 1 KiB, 64 KiB and 1 MiB arguments with 8 in flight), and the head-of-line wait (how long
//! a `health` waits while a tool that was quick forty times runs 1.5 s once).

use std::time::{Duration, Instant};

use crate::peer::Peer;
use crate::{Placement, Subject};

/// One size of the sweep.
pub struct Size {
    /// Bytes of the `text` argument.
    pub bytes: usize,
    pub label: &'static str,
    /// Invokes sent (full run).
    pub count: u64,
    pub in_flight: usize,
}

/// The argument sizes of the sweep.
pub const SIZES: [Size; 4] = [
    Size {
        bytes: 2,
        label: "2 B, 64 in flight",
        count: 30_000,
        in_flight: 64,
    },
    Size {
        bytes: 1024,
        label: "1 KiB",
        count: 20_000,
        in_flight: 8,
    },
    Size {
        bytes: 64 * 1024,
        label: "64 KiB",
        count: 2_000,
        in_flight: 8,
    },
    Size {
        bytes: 1024 * 1024,
        label: "1 MiB",
        count: 200,
        in_flight: 8,
    },
];

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
        .map(|size| {
            peer.text = "x".repeat(size.bytes);
            let count = if smoke { 3 } else { size.count };
            peer.pipelined(count / 10 + 1, Some(size.in_flight));
            peer.pipelined(count, Some(size.in_flight))
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
    let sleep = |id: &str, ms: u64| {
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"{id}\",\"method\":\"invoke\",\"params\":{{\"tool\":\"sleep\",\"arguments\":{{\"ms\":{ms}}}}}}}\n"
        )
    };
    for offset in OFFSETS_MS {
        let mut peer = Peer::spawn(&placement.prefix(), &subject.cmd, true, smoke);
        for i in 0..40 {
            peer.send(&sleep(&format!("q{i}"), 0));
            peer.read_until(&format!("\"q{i}\""));
        }
        peer.send(&sleep("slow", slow_ms));
        std::thread::sleep(Duration::from_millis(offset));
        let sent = Instant::now();
        peer.send("{\"jsonrpc\":\"2.0\",\"id\":\"h\",\"method\":\"health\"}\n");
        peer.read_until("\"h\"");
        worst = worst.max(sent.elapsed());
        peer.read_until("\"slow\"");
        peer.close();
    }
    worst.as_secs_f64() * 1e3
}
