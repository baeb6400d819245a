//! Heap allocations per `echo` invoke, from frame in to frame out: the runtime serves
//! in-process (`Plugin::serve` over socket pairs on Unix, anonymous pipes elsewhere) under
//! a counting global allocator, with
//! the `echo` tool of examples/everything.rs. The driving thread renders every frame before
//! the count starts and reads replies into a fixed buffer, so it allocates nothing itself:
//! every allocation counted is the runtime's (reader, dispatch, tool, writer).
//!
//! Run: `cargo bench --bench alloc`. Smoke (tiny counts, replies checked):
//! `EXECUTA_BENCH_SMOKE=1 cargo bench --bench alloc`. `EXECUTA_BENCH_N` sets the invokes
//! counted per mode [20000].

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};

use executa::{Invocation, Plugin, Tool, ToolError};
use serde_json::{Map, Value};

/// Counts every allocation (and reallocation) and the bytes requested, then defers to the
/// system allocator.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static REALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters are atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        REALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(
            new_size.saturating_sub(layout.size()) as u64,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded as received.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Clone, Copy)]
struct Counters {
    allocs: u64,
    reallocs: u64,
    bytes: u64,
}

fn counters() -> Counters {
    Counters {
        allocs: ALLOCS.load(Ordering::SeqCst),
        reallocs: REALLOCS.load(Ordering::SeqCst),
        bytes: BYTES.load(Ordering::SeqCst),
    }
}

/// What every reply must contain.
const SUCCESS: &[u8] = b"\"success\":true";

/// The `echo` tool of examples/everything.rs.
fn echo(args: Map<String, Value>, _: &Invocation) -> Result<Map<String, Value>, ToolError> {
    Ok(args)
}

/// One way of a link to the runtime, as (read end, write end): a socket pair on Unix, where
/// the figures in benches/README.md were measured (the reader can wait on it, as on a real
/// stdin); elsewhere an anonymous pipe, which is what a plugin's stdin is there.
#[cfg(unix)]
type ReadEnd = UnixStream;
#[cfg(unix)]
type WriteEnd = UnixStream;
#[cfg(not(unix))]
type ReadEnd = std::io::PipeReader;
#[cfg(not(unix))]
type WriteEnd = std::io::PipeWriter;

#[cfg(unix)]
fn link() -> (ReadEnd, WriteEnd) {
    UnixStream::pair().expect("socket pair")
}

#[cfg(not(unix))]
fn link() -> (ReadEnd, WriteEnd) {
    std::io::pipe().expect("pipe")
}

/// The runtime in a thread, and our ends of its input and output.
struct Served {
    input: WriteEnd,
    output: ReadEnd,
    buf: Box<[u8]>,
    filled: usize,
    thread: std::thread::JoinHandle<()>,
}

impl Served {
    fn start() -> Served {
        let (theirs_in, ours_in) = link();
        let (ours_out, theirs_out) = link();
        let plugin = Plugin::new("everything", "1.0.0").tool(Tool::new(
            "echo",
            "Returns its arguments object as data",
            echo,
        ));
        let thread = std::thread::spawn(move || {
            if let Err(e) = plugin.serve(theirs_in, theirs_out) {
                panic!("serve failed: {e}");
            }
        });
        Served {
            input: ours_in,
            output: ours_out,
            buf: vec![0; 1 << 16].into_boxed_slice(),
            filled: 0,
            thread,
        }
    }

    /// The length of the next complete line in the buffer, reading more as needed; the
    /// fixed buffer means no allocation. [`Served::consume`] drops it afterwards.
    fn next_line(&mut self) -> usize {
        loop {
            if let Some(end) = self.buf[..self.filled].iter().position(|&b| b == b'\n') {
                return end;
            }
            let n = self
                .output
                .read(&mut self.buf[self.filled..])
                .expect("read reply");
            assert!(n > 0, "the runtime closed its output");
            self.filled += n;
        }
    }

    fn consume(&mut self, end: usize) {
        self.buf.copy_within(end + 1..self.filled, 0);
        self.filled -= end + 1;
    }

    /// Reads one reply and checks it is a success; with `strict`, also its id and echoed
    /// data (that parse allocates: smoke mode only).
    fn read_reply(&mut self, id: u64, strict: bool) {
        let end = self.next_line();
        let line = &self.buf[..end];
        assert!(
            line.windows(SUCCESS.len()).any(|w| w == SUCCESS),
            "not a success: {}",
            String::from_utf8_lossy(line)
        );
        if strict {
            let v: Value = serde_json::from_slice(line).expect("reply is JSON");
            assert_eq!(v["id"], id, "reply to the wrong request: {v}");
            assert_eq!(v["result"]["data"]["text"], "hi", "not an echo: {v}");
        }
        self.consume(end);
    }

    /// Reads the `initialize` answer (before counting starts).
    fn read_initialized(&mut self) {
        let end = self.next_line();
        let v: Value = serde_json::from_slice(&self.buf[..end]).expect("JSON");
        assert_eq!(v["id"], 0, "not the initialize answer: {v}");
        self.consume(end);
    }

    fn send(&mut self, frame: &[u8]) {
        self.input.write_all(frame).expect("write frame");
    }

    fn stop(self) {
        drop(self.input);
        self.thread.join().expect("runtime thread");
    }
}

fn invoke(id: u64) -> Vec<u8> {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"invoke\",\"params\":{{\"tool\":\"echo\",\"arguments\":{{\"text\":\"hi\"}},\"context\":{{\"invoke_id\":\"bench-{id}\"}}}}}}\n"
    )
    .into_bytes()
}

/// Invokes `ids` in bursts of `burst` (1: serial); returns the counters' change.
fn count(served: &mut Served, frames: &[(u64, Vec<u8>)], burst: usize, strict: bool) -> Counters {
    let before = counters();
    for chunk in frames.chunks(burst) {
        for (_, f) in chunk {
            served.send(f);
        }
        for (id, _) in chunk {
            served.read_reply(*id, strict && burst == 1);
        }
    }
    let after = counters();
    Counters {
        allocs: after.allocs - before.allocs,
        reallocs: after.reallocs - before.reallocs,
        bytes: after.bytes - before.bytes,
    }
}

fn main() {
    let smoke = common::smoke();
    let n = common::count("EXECUTA_BENCH_N", 20_000, 50);
    common::print_machine(&format!(
        "{}cargo bench --bench alloc",
        if smoke { "EXECUTA_BENCH_SMOKE=1 " } else { "" }
    ));
    let mut served = Served::start();
    served.send(
        b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2.0\",\"clientInfo\":{\"name\":\"alloc-bench\",\"version\":\"0\"},\"capabilities\":{}}}\n",
    );
    served.read_initialized();
    let mut next = 1u64;
    let mut frames = |count: u64| -> Vec<(u64, Vec<u8>)> {
        let out = (next..next + count).map(|id| (id, invoke(id))).collect();
        next += count;
        out
    };
    let warm = frames(n / 10 + 1);
    count(&mut served, &warm, 1, smoke);
    println!(
        "echo {{\"text\":\"hi\"}} through Plugin::serve over {}, {n} invokes per mode (after {} warm-up)",
        if cfg!(unix) { "socket pairs" } else { "pipes" },
        warm.len()
    );
    if !smoke {
        println!(
            "{:<26} {:>14} {:>14} {:>14}",
            "mode", "allocs/invoke", "reallocs/inv.", "bytes/invoke"
        );
    }
    for (label, burst) in [
        ("serial (1 in flight)", 1usize),
        ("bursts of 64 in flight", 64),
    ] {
        let batch = frames(n);
        let c = count(&mut served, &batch, burst, smoke);
        if smoke {
            continue;
        }
        let per = |x: u64| x as f64 / n as f64;
        println!(
            "{label:<26} {:>14.2} {:>14.2} {:>14.0}",
            per(c.allocs),
            per(c.reallocs),
            per(c.bytes)
        );
    }
    served.stop();
    if smoke {
        println!("smoke run: every reply checked; no figures are reported in smoke mode");
    }
}
