//! CPU per request at a paced load, with the subjects paired in time: every subject runs
//! at once (idle while another is driven), and each pace is split into blocks that visit
//! the subjects in turn, in an order that rotates with the block and the round. A subject
//! is still paced alone within its block (nothing else runs between two of its requests
//! but the bench's client), so what is measured is the same as one subject after another;
//! but a slow or fast spell of the VM now falls on every subject's blocks alike instead of
//! on whichever subject it met. (Measured one after another, the bare loop's figure at one
//! request every 5 ms moved from 18.4 to 26.0 µs between two runs of the same code, and the
//! ratio from 2.1x to 1.2x; in alternating blocks five rounds in a row gave 1.67-1.76x.)
//! Ten blocks a pace rather than five: a round's ratio at 0.5 ms spread 1.34-1.80x over
//! five rounds of 5 blocks (run Y); more, shorter visits average a spell over more blocks
//! of every subject.

use std::time::Duration;

use crate::common::procfs::CpuTime;
use crate::peer::Peer;
use crate::{Counts, Subject};

/// Blocks each pace is split into (per subject).
const BLOCKS: u64 = 10;

/// After a block's last reply, how long its CPU window stays open: what a subject does
/// just after a request (a timer expiring, a poller ending) counts as that request's cost.
const SETTLE: Duration = Duration::from_millis(20);

/// A subject's CPU per request at both paces, µs: ((stat, schedstat) at 0.5 ms, the same
/// at 5 ms).
pub type PacedCpu = ((f64, f64), (f64, f64));

/// One round of the paced load over `subjects` (free-floating), in alternating blocks.
pub fn paced_cpu(subjects: &[&Subject], counts: &Counts, smoke: bool, round: u64) -> Vec<PacedCpu> {
    let mut peers: Vec<Peer> = subjects
        .iter()
        .map(|s| {
            let mut peer = Peer::spawn(&[], &s.cmd, s.echoes, smoke);
            peer.wait_ready();
            peer.serial(counts.serial / 10 + 1);
            peer
        })
        .collect();
    let mut at = |count: u64, interval: Duration| {
        let blocks = BLOCKS.min(count).max(1);
        let per_block = count / blocks;
        let mut used = vec![(Duration::ZERO, Duration::ZERO); peers.len()];
        for block in 0..blocks {
            for k in 0..peers.len() {
                let s = (k + (block + round) as usize) % peers.len();
                let peer = &mut peers[s];
                std::thread::sleep(interval);
                let before = CpuTime::of(peer.pid()).expect("child alive");
                peer.paced(per_block, interval);
                std::thread::sleep(SETTLE);
                let spent = CpuTime::of(peer.pid()).expect("child alive").since(before);
                used[s].0 += spent.stat;
                used[s].1 += spent.sched;
            }
        }
        let per = |d: Duration| crate::common::micros(d) / (blocks * per_block) as f64;
        used.into_iter()
            .map(|(stat, sched)| (per(stat), per(sched)))
            .collect::<Vec<_>>()
    };
    let fast = at(counts.paced, Duration::from_micros(500));
    let slow = at(counts.paced_slow, Duration::from_millis(5));
    for peer in peers {
        peer.close();
    }
    fast.into_iter().zip(slow).collect()
}
