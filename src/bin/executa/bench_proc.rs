//! What a benched plugin costs besides time: the CPU its process group spends over a run
//! and its memory, from the process CPU clocks (all threads, ended ones too, in ns) and
//! `/proc/PID/status`. The plugin runs as the leader of its own process group, so helpers
//! it starts (a wrapper's interpreter, say) are counted with it.

use std::collections::HashMap;
use std::time::Duration;

/// The CPU time of each process in a group at one moment.
pub struct CpuSnapshot(HashMap<u32, Duration>);

impl CpuSnapshot {
    /// Reads the CPU clock of every process in group `pgid`.
    pub fn take(pgid: u32) -> CpuSnapshot {
        CpuSnapshot(
            group(pgid)
                .into_iter()
                .filter_map(|pid| Some((pid, executa::host::process_cpu_time(pid).ok()?)))
                .collect(),
        )
    }

    /// The CPU time the group spent since `earlier`: a process that started meanwhile
    /// counts in full, one that ended meanwhile is missed.
    pub fn since(&self, earlier: &CpuSnapshot) -> Duration {
        self.0
            .iter()
            .map(|(pid, now)| now.saturating_sub(earlier.0.get(pid).copied().unwrap_or_default()))
            .sum()
    }
}

/// The CPU time this process (the bench) has spent so far.
pub fn own_cpu() -> Option<Duration> {
    executa::host::process_cpu_time(std::process::id()).ok()
}

/// The group's resident memory now and at its peak (`VmRSS`, `VmHWM`, summed), in kB.
pub fn memory_kb(pgid: u32) -> Option<(u64, u64)> {
    let pids = group(pgid);
    let sum = |key| {
        pids.iter()
            .map(|&pid| status_kb(pid, key))
            .try_fold(0, |acc, kb| Some(acc + kb?))
    };
    Some((sum("VmRSS")?, sum("VmHWM")?))
}

/// A `/proc/PID/status` figure in kB.
fn status_kb(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The processes of group `pgid` (`/proc/PID/stat`'s fifth field), the leader first.
fn group(pgid: u32) -> Vec<u32> {
    let mut pids = vec![pgid];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == pgid {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may hold spaces: fields are counted after its closing ')'.
        let in_group = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(2)?.parse::<u32>().ok())
            == Some(pgid);
        if in_group {
            pids.push(pid);
        }
    }
    pids
}
