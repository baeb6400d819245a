//! Runtime limits and switches.

use std::time::Duration;

use crate::wire::DEFAULT_MAX_FRAME_BYTES;

/// Limits and switches of the plugin runtime. `Options::default()` matches the platform.
#[derive(Clone, Debug)]
pub struct Options {
    /// Invokes that run at once; more are queued (bounded) until one finishes. Default 4.
    pub max_concurrent_invokes: usize,
    /// Longest accepted input line; a longer one is drained and answered with -32600.
    /// Default 16 MiB.
    pub max_frame_bytes: usize,
    /// Largest `invoke` response frame; a larger result becomes `success:false` with both
    /// sizes. Default 4 MiB, the platform's NATS payload cap.
    pub max_result_bytes: usize,
    /// How long in-flight invokes may finish and replies may be flushed after stdin closes
    /// or SIGTERM: the whole shutdown takes at most this plus 0.2 s. Default 4 s, inside
    /// the Agent's 5 s window.
    pub grace: Duration,
    /// Redirect fd 1 to stderr (and fd 0 to `/dev/null`) while serving, so nothing but
    /// frames reaches the host. Default on; `EXECUTA_STDOUT_GUARD=0` also turns it off.
    pub stdout_guard: bool,
    /// Handle SIGTERM and SIGINT as an orderly shutdown. Default on.
    pub handle_signals: bool,
    /// How long an extra worker thread waits for more work before it exits. Default 50 ms.
    pub worker_linger: Duration,
    /// The longest the dispatch thread polls for the next request before it sleeps, and
    /// the gap between requests below which it polls at all. A cross-vCPU wake-up costs
    /// 20-25 µs on a VM, so in a busy exchange polling saves it; at a paced load it would
    /// only burn CPU. So the thread polls only while the average gap between requests is
    /// under this value, for at most twice that gap, and never more than a quarter of the
    /// wall time (a token bucket); an idle or paced plugin never polls. Ignored where only
    /// one CPU is usable. Default 100 µs; `Duration::ZERO` never polls.
    pub spin: Duration,
    /// How long a tool's runs may take for the reader thread to run its invokes itself,
    /// sparing the hand-off to another thread (a wake-up: 20-30 µs of CPU on a VM). A run's
    /// time is its own work: time waiting on the host is not counted, since while the
    /// handler on the reader waits for the host's answer, the reader reads on (it serves
    /// other requests and reads that answer itself). A tool qualifies after 8 runs in a row
    /// under this limit; one slower run on the reader, or a run whose reading had to move to
    /// a new reader thread, sends it back to the dispatch side: for 16 runs the first time,
    /// twice as many each later time, up to 256. Other requests
    /// wait in the pipe while the reader runs an invoke's own work, at most 1-2 s: a call
    /// to the host from another thread while it runs hands reading to a new reader thread
    /// at once, and so does a run still going after a second (it may wait for a later
    /// request). With an input the runtime cannot poll (a custom `Read` given to
    /// `Plugin::serve`), any call to the host hands reading over and counts as slow.
    /// Default 50 µs; `Duration::ZERO` never runs invokes on the reader.
    pub inline: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_concurrent_invokes: 4,
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_result_bytes: 4 * 1024 * 1024,
            grace: Duration::from_secs(4),
            stdout_guard: true,
            handle_signals: true,
            worker_linger: Duration::from_millis(50),
            spin: Duration::from_micros(100),
            inline: Duration::from_micros(50),
        }
    }
}
