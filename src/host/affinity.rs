//! CPU pinning and CPU time for benchmark drivers: a host that measures a plugin's latency
//! pins itself (and the plugin, with `taskset`) so that figures do not depend on where the
//! scheduler happens to put each process, and reads what the plugin spent per request.

use std::io;

/// The CPUs the calling thread may run on, in ascending order.
///
/// Never blocks. Fails with the OS error, or `Unsupported` off Linux.
pub fn cpu_affinity() -> io::Result<Vec<usize>> {
    crate::sys::thread_affinity()
}

/// Restricts the calling thread to `cpus` (`sched_setaffinity`); threads it starts
/// afterwards inherit the set, threads already running keep theirs. Call it first thing in
/// `main` to pin the whole process; pass the set [`cpu_affinity`] returned to undo it.
///
/// Never blocks. Fails with `InvalidInput` for an empty set or a CPU number beyond the
/// kernel's set size, with the OS error when none of `cpus` is usable, and with
/// `Unsupported` off Linux.
pub fn set_cpu_affinity(cpus: &[usize]) -> io::Result<()> {
    crate::sys::set_thread_affinity(cpus)
}

/// The CPU time process `pid` (any process this one may see, typically a plugin it
/// started) has used so far: all its threads together, also those that have ended, in
/// nanoseconds (`clock_getcpuclockid`). Its children are not included.
///
/// Never blocks. Fails with the OS error (`ESRCH` once the process is reaped), or
/// `Unsupported` off Linux.
pub fn process_cpu_time(pid: u32) -> io::Result<std::time::Duration> {
    crate::sys::process_cpu_time(pid)
}
