//! The two figures of the plugin's worst cases: the frame-size sweep (pipelined `echo`
//! against the bare loop in its `--echo` mode, which parses the params into a `Value` and
//! echoes the arguments back: the same work as an `echo` tool, so the ratio is the
//! runtime's cost; first the main table's 2-byte `{"text":"hi"}` with 64 in flight, then
//! 1 KiB, 64 KiB and 1 MiB arguments with 8 in flight; the two run at once and take turns,
//! so they are measured in the same spell of the VM), and the head-of-line wait (how long
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
        count: 60_000,
        in_flight: 64,
    },
    Size {
        bytes: 1024,
        label: "1 KiB",
        count: 40_000,
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

/// Pipelined rates (invokes per second) at each size of [`SIZES`] of executa and of the
/// bare loop in its `--echo` mode (`pair`, in that order), paired in time: both run at
/// once, and each size is timed in two halves per subject, alternating which goes first
/// (rotating with `round`), so a spell of the VM falls on both alike.
pub fn sweep_pair(
    placement: Placement,
    pair: [&Subject; 2],
    smoke: bool,
    round: u64,
) -> [Vec<f64>; 2] {
    let mut peers = pair.map(|subject| {
        let mut peer = Peer::spawn(&placement.prefix(), &subject.cmd, true, smoke);
        peer.wait_ready();
        peer
    });
    let mut rates = [Vec::new(), Vec::new()];
    for size in &SIZES {
        let count = if smoke { 3 } else { size.count };
        let mut took = [Duration::ZERO; 2];
        for peer in &mut peers {
            peer.text = "x".repeat(size.bytes);
            peer.pipelined(count / 10 + 1, Some(size.in_flight));
        }
        let half = count.div_ceil(2);
        for turn in 0..2 {
            for k in 0..2 {
                let s = (k + (turn + round) as usize) % 2;
                let rate = peers[s].pipelined(half, Some(size.in_flight));
                took[s] += Duration::from_secs_f64(half as f64 / rate);
            }
        }
        for s in 0..2 {
            rates[s].push((half * 2) as f64 / took[s].as_secs_f64());
        }
    }
    for peer in peers {
        peer.close();
    }
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
