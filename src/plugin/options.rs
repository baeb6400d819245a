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
    /// Largest reply frame of any kind. A larger `invoke` result becomes `success:false`
    /// with both sizes; a larger `describe` or `health` reply a -32603 `RESULT_TOO_LARGE`
    /// error. Error messages quote at most 256 bytes of request text (with its length) and
    /// stop at about 1 KiB, and ids over 1 KiB are answered `null`, so every refusal fits
    /// any cap of a few KiB. Default 4 MiB, the platform's NATS payload cap.
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
    /// The longest any request waits behind a handler the reader thread runs itself. The
    /// reader runs an invoke itself, sparing the hand-off to another thread (a wake-up:
    /// 20-30 µs of CPU on a VM, more than most handlers take), when an invoke slot is free,
    /// no handler waits on the host, and it has spent less than this in handlers since it
    /// last caught up with its input. A run still going after this long hands reading to a
    /// new reader thread (a timer fires; nothing is polled), which sends what it finds
    /// waiting to the dispatch threads, so a tool that is usually quick and once slow
    /// holds nothing up for longer than this, whatever it did before. A call to the host
    /// from the handler is read by the reader itself; one from any other thread hands
    /// reading over at once. Where the platform has no `timerfd` (outside Linux), the
    /// reader never runs invokes. `Duration::ZERO` never runs invokes on the reader.
    ///
    /// Default 6 ms. The timer is set when a run starts and pushed ahead by a later run
    /// only once less than two thirds of it (4 ms) is left, so while requests keep coming
    /// (a pipelined stream, a request every 0.5 ms) it costs one system call per 2 ms at
    /// most, and every run starts with its expiry about one scheduler tick (4 ms at the
    /// usual `HZ=250`) away or more; requests more than 2 ms apart cost two (a set and a
    /// disarm). A nearer pending timer costs CPU on every request even for the same
    /// number of calls: at one request every 0.5 ms, a bare loop pushing a timer every
    /// 2 ms spent 2.0-2.1 µs more CPU per request than with no timer when it was set 4 ms
    /// ahead, 1.2 µs when 6 ms, 0.8-0.9 µs when 8 ms or an hour (the call alone). A 2 ms
    /// timer also reprograms the CPU's timer hardware at each set and disarm, a trap to
    /// the hypervisor on a VM (10 µs per lone request). Runs read together are timed from
    /// the first of them, so at worst a request waits these 6 ms and then for the
    /// hand-over (a thread start, well under 1 ms), inside the 10 ms the runtime promises.
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
            inline: Duration::from_millis(6),
        }
    }
}
