//! What `/proc` says about a child process: its CPU time, threads and memory.

use std::time::Duration;

/// Clock ticks per second of `/proc/PID/stat` times (`USER_HZ`, 100 on Linux's ABI).
const USER_HZ: f64 = 100.0;

/// A line of `/proc/PID/status` such as `VmRSS` or `Threads`, value only (`"1234 kB"`).
pub fn status(pid: u32, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// A `/proc/PID/status` figure in kB (`VmRSS`, `VmHWM`) or a count (`Threads`).
pub fn status_number(pid: u32, key: &str) -> Option<u64> {
    status(pid, key)?.split_whitespace().next()?.parse().ok()
}

/// CPU time the process used so far, two ways.
#[derive(Clone, Copy, Debug)]
pub struct CpuTime {
    /// utime + stime of `/proc/PID/stat` (all threads, 10 ms resolution).
    pub stat: Duration,
    /// The sum of the run times in `/proc/PID/task/*/schedstat` (live threads, ns).
    pub sched: Duration,
}

impl CpuTime {
    /// Reads both counters of `pid`; `None` when the process is gone.
    pub fn of(pid: u32) -> Option<CpuTime> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name may hold spaces; fields are counted after its closing ')'.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        let mut sched_ns = 0u64;
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
        {
            let text = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            sched_ns += text
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
        Some(CpuTime {
            stat: Duration::from_secs_f64(ticks as f64 / USER_HZ),
            sched: Duration::from_nanos(sched_ns),
        })
    }

    /// The CPU time used between `earlier` and `self`.
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            stat: self.stat.saturating_sub(earlier.stat),
            sched: self.sched.saturating_sub(earlier.sched),
        }
    }
}
