//! Properties checked on arbitrary input, shared by the fuzz targets in `fuzz/` (which
//! include this file by path) and the quick randomized test in `tests/randomized.rs`.
//! Each `check_*` panics with a description when a property fails.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, Cursor, Read, Write};
#[cfg(all(feature = "host", unix))]
use std::path::Path;
#[cfg(feature = "host")]
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(all(feature = "host", unix))]
use executa::Error;
#[cfg(all(feature = "host", unix))]
use executa::host::{
    Handlers, HostOptions, PluginCommand, PluginProcess, ShutdownPolicy, StderrRelay,
};
use executa::wire::{self, Frame, FrameReader, Message};
use executa::{Invocation, Options, Plugin, Tool, ToolError};
use serde::de::IgnoredAny;
use serde_json::Value;

/// `wire::HEAD_BYTES`: how much of an oversized frame's head and tail the reader keeps.
const HEAD_BYTES: usize = 4096;

/// Frames a host or a plugin sends, taken from the tests: the seeds of every target.
pub const SEED_FRAMES: &[&str] = &[
    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2.0","clientInfo":{"name":"t","version":"1"},"capabilities":{"sampling":{},"fileTransport":true}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"method":"describe"}"#,
    r#"{"jsonrpc":"2.0","id":"a","method":"invoke","params":{"tool":"echo","arguments":{"text":"hi"},"context":{"invoke_id":"inv-1","deadline_ms":9999999999999,"credentials":{"K":"v"}}}}"#,
    r#"{"jsonrpc":"2.0","id":2,"method":"invoke","params":{"tool":"sample","arguments":{},"sampling_token":"tok"}}"#,
    r#"{"jsonrpc":"2.0","id":3,"method":"invoke","params":{"name":"fail","arguments":null}}"#,
    r#"{"jsonrpc":"2.0","id":4,"method":"invoke","params":{"tool":"progress","arguments":{"n":3}}}"#,
    r#"{"jsonrpc":"2.0","id":5,"method":"health"}"#,
    r#"{"jsonrpc":"2.0","id":6,"method":"shutdown"}"#,
    r#"{"jsonrpc":"2.0","method":"initialized"}"#,
    r#"{"jsonrpc":"2.0","id":"ex-1","result":{"role":"assistant","content":{"type":"text","text":"hello"},"model":"m"}}"#,
    r#"{"jsonrpc":"2.0","id":"ex-1","error":{"code":-32601,"message":"no"}}"#,
    r#"{"jsonrpc":"2.0","id":1,"result":{"success":true,"data":{"text":"hi"}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad","data":{"errorCode":"x"}}}"#,
    r#"{"jsonrpc":"2.0","id":1,"__file_transport":"/tmp/executa-fuzz-none.json"}"#,
    r#"{"jsonrpc":"2.0","id":"x-1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":5,"context":{"invoke_id":"inv-1"}}}"#,
    r#"{"jsonrpc":"2.0","method":"executa/progress","params":{"type":"progress","data":{"step":1},"context":{"invoke_id":"inv-1"}}}"#,
    r#"{"jsonrpc":2.0,"id":7,"method":"describe"}"#,
    r#"{"jsonrpc":"2.0","id":{"a":1},"method":"describe"}"#,
    r#"{"jsonrpc":"2.0","id":[1],"result":{}}"#,
    r#"{"jsonrpc":"2.0","id":null,"method":"describe"}"#,
    r#"{"jsonrpc":"2.0","id":1.5,"method":"health"}"#,
    r#"{"jsonrpc":"2.0","id":8,"result":{},"error":{}}"#,
    r#"{"jsonrpc":"2.0","id":9,"method":"invoke","params":{"tool":"echo","arguments":{"text":"truncated"#,
    "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"health\"}\r",
    "not json at all",
    "[1,2,3]",
    "",
];

/// A small deterministic PRNG (SplitMix64): the randomized test needs no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// A few seed frames, each maybe mutated, joined by LF (sometimes CRLF, sometimes no
    /// final LF).
    pub fn stream(&mut self, max_frames: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..=self.below(max_frames) {
            let mut frame = SEED_FRAMES[self.below(SEED_FRAMES.len())]
                .as_bytes()
                .to_vec();
            self.mutate(&mut frame);
            out.extend_from_slice(&frame);
            if self.below(10) == 0 {
                out.push(b'\r');
            }
            out.push(b'\n');
        }
        if self.below(4) == 0 {
            out.pop();
        }
        out
    }

    /// Zero to three random edits: flip, insert, delete, truncate, duplicate a span.
    pub fn mutate(&mut self, bytes: &mut Vec<u8>) {
        const INTERESTING: &[u8] = b"{}[]\":,0-9enul\\\n \xff\xc3";
        for _ in 0..self.below(4) {
            let at = self.below(bytes.len() + 1);
            match self.below(5) {
                0 if at < bytes.len() => bytes[at] = self.next() as u8,
                1 => bytes.insert(at, INTERESTING[self.below(INTERESTING.len())]),
                2 if at < bytes.len() => {
                    bytes.remove(at);
                }
                3 => bytes.truncate(at),
                _ => {
                    let end = (at + self.below(40)).min(bytes.len());
                    let span = bytes[at..end].to_vec();
                    bytes.splice(at..at, span);
                }
            }
        }
    }
}

// ---- wire::parse ----

/// `wire::parse` classifies anything without panicking, and agrees with `serde_json` on
/// what is JSON: a line that breaks JSON's syntax is always [`Message::Unparsable`]
/// (-32700), and an unparsable line is never JSON. (Bytes that are not UTF-8 inside a
/// member the envelope ignores are tolerated, as `serde_json` itself skips them.)
pub fn check_parse(line: &[u8]) {
    let syntax_ok = serde_json::from_slice::<IgnoredAny>(line).is_ok();
    let is_json = serde_json::from_slice::<Value>(line).is_ok();
    let message = wire::parse(line);
    let unparsable = matches!(message, Message::Unparsable(_));
    let text = String::from_utf8_lossy(line);
    assert!(
        syntax_ok || unparsable,
        "{text:?} classified as {message:?}"
    );
    assert!(
        !(unparsable && is_json),
        "{text:?} classified as {message:?}"
    );
}

// ---- FrameReader ----

/// A reader that hands out `data` in the given chunk sizes, in turn; a size of 0 is an
/// `Interrupted` error, which the frame reader must retry (the retry then reads a byte).
pub struct Chunked {
    data: Vec<u8>,
    pos: usize,
    sizes: Vec<usize>,
    turn: usize,
    interrupted: bool,
}

impl Chunked {
    pub fn new(data: Vec<u8>, sizes: Vec<usize>) -> Self {
        let sizes = if sizes.is_empty() {
            vec![1 << 20]
        } else {
            sizes
        };
        Chunked {
            data,
            pos: 0,
            sizes,
            turn: 0,
            interrupted: false,
        }
    }
}

impl Read for Chunked {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let size = self.sizes[self.turn % self.sizes.len()];
        self.turn += 1;
        if size == 0 && self.pos < self.data.len() && !self.interrupted {
            self.interrupted = true;
            return Err(io::ErrorKind::Interrupted.into());
        }
        self.interrupted = false;
        let n = size.max(1).min(buf.len()).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..n + self.pos]);
        self.pos += n;
        Ok(n)
    }
}

/// What the reference splitter expects of one raw line.
#[derive(Debug)]
enum Expected<'a> {
    Line(&'a [u8]),
    Oversized { raw: &'a [u8] },
}

/// The reference: split at LF; a final piece without LF counts when not empty; a line over
/// the cap is oversized; otherwise the line without a leading BOM and surrounding ASCII
/// white space (CR included), skipped when nothing is left.
fn reference_frames(data: &[u8], max: usize) -> Vec<Expected<'_>> {
    let mut pieces: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if pieces.last().is_some_and(|p| p.is_empty()) {
        pieces.pop();
    }
    pieces
        .into_iter()
        .filter_map(|raw| {
            if raw.len() > max {
                return Some(Expected::Oversized { raw });
            }
            let body = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
            let body = body.trim_ascii();
            (!body.is_empty()).then_some(Expected::Line(body))
        })
        .collect()
}

/// `FrameReader` over `data` cut into `sizes` chunks yields exactly the reference's frames.
pub fn check_frame_reader(data: &[u8], sizes: Vec<usize>, max: usize) {
    let expected = reference_frames(data, max);
    let mut reader = FrameReader::new(Chunked::new(data.to_vec(), sizes), max);
    for (n, want) in expected.iter().enumerate() {
        let got = reader.next_frame().expect("in-memory read");
        match (got, want) {
            (Some(Frame::Line(line)), Expected::Line(w)) => {
                assert_eq!(line, *w, "frame {n}: line differs")
            }
            (Some(Frame::Oversized { head, tail, size }), Expected::Oversized { raw }) => {
                assert_eq!(size, raw.len(), "frame {n}: oversized size");
                assert!(raw.starts_with(head), "frame {n}: head is not a prefix");
                assert!(
                    head.len() <= HEAD_BYTES && head.len() >= (max + 1).min(HEAD_BYTES),
                    "frame {n}: head of {} bytes (cap {max})",
                    head.len()
                );
                let keep = raw.len().min(HEAD_BYTES);
                assert_eq!(tail, &raw[raw.len() - keep..], "frame {n}: tail");
            }
            (got, want) => panic!("frame {n}: got {got:?}, expected {want:?}"),
        }
    }
    let end = reader.next_frame().expect("in-memory read");
    assert!(end.is_none(), "a frame past the reference's: {end:?}");
}

// ---- Plugin::serve ----

/// An in-memory output shared with the test.
#[derive(Clone, Default)]
pub struct Sink(pub Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The plugin under test: tools that echo, fail, make a reverse call and send progress.
pub fn fuzz_plugin() -> Plugin {
    let opts = Options {
        max_frame_bytes: 2048,
        max_result_bytes: 1024,
        grace: Duration::from_secs(2),
        stdout_guard: false,
        handle_signals: false,
        spin: Duration::ZERO,
        ..Options::default()
    };
    Plugin::new("fuzz", "0.0.1")
        .options(opts)
        .capability("llm.sample")
        .tool(Tool::new("echo", "Echo.", |v: Value, _: &Invocation| {
            Ok::<_, ToolError>(v)
        }))
        .tool(Tool::new(
            "fail",
            "Fail.",
            |_: IgnoredAny, _: &Invocation| Err::<(), _>(ToolError::new("it failed")),
        ))
        .tool(Tool::new(
            "sample",
            "Sample.",
            |_: IgnoredAny, inv: &Invocation| {
                let text = inv
                    .sampling()
                    .complete("hi", 5)
                    .map_err(|e| ToolError::new(e.to_string()))?;
                Ok::<_, ToolError>(text)
            },
        ))
        .tool(Tool::new(
            "progress",
            "Progress.",
            |_: IgnoredAny, inv: &Invocation| {
                for step in 0..3 {
                    inv.progress("progress", &step);
                }
                Ok::<_, ToolError>(())
            },
        ))
}

fn is_scalar_id(id: &Value) -> bool {
    id.is_string() || id.is_number() || id.is_null()
}

/// Serves `input` through `Plugin::serve` and checks the output: every line is one
/// JSON-RPC 2.0 frame; a response has a string, number or null id and exactly one of
/// `result` and `error`; a request from the plugin has a string id (or none, for a
/// notification); and every request in the input whose id is a string or number,
/// used once, gets exactly one response.
pub fn check_serve(input: &[u8]) {
    let sink = Sink::default();
    let stopped = fuzz_plugin().serve(Cursor::new(input.to_vec()), sink.clone());
    assert!(stopped.is_ok(), "serve failed: {stopped:?}");
    let output = sink.0.lock().expect("sink").clone();
    assert!(
        output.is_empty() || output.ends_with(b"\n"),
        "a partial last line"
    );
    let mut answered: HashMap<String, usize> = HashMap::new();
    for line in output.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let text = String::from_utf8_lossy(line);
        let frame: Value = serde_json::from_slice(line).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(frame["jsonrpc"], "2.0", "{text}");
        let obj = frame.as_object().expect("an object");
        if obj.contains_key("method") {
            assert!(frame["method"].is_string(), "{text}");
            if let Some(id) = obj.get("id") {
                assert!(id.is_string(), "a reverse call's id: {text}");
            }
            continue;
        }
        let id = obj.get("id").unwrap_or_else(|| panic!("no id: {text}"));
        assert!(is_scalar_id(id), "a non-scalar id: {text}");
        assert!(
            obj.contains_key("result") != obj.contains_key("error"),
            "not exactly one of result/error: {text}"
        );
        *answered.entry(id.to_string()).or_default() += 1;
    }
    for id in unique_request_ids(input, 2048) {
        assert_eq!(
            answered.get(&id).copied().unwrap_or(0),
            1,
            "request {id} got {:?} replies",
            answered.get(&id)
        );
    }
}

/// Runs `check`, then waits (at most 10 s) until every thread it started has ended:
/// `Plugin::serve` returns while its reader, dispatcher and idle workers wind down, and a
/// host's reverse-call workers end after its last handle is dropped; none may outlive the
/// call for long. Only for a process that runs nothing else meanwhile (a fuzz target),
/// since it counts the process's threads.
pub fn and_its_threads_end(check: impl FnOnce()) {
    let before = threads();
    check();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while threads() > before {
        assert!(
            std::time::Instant::now() < deadline,
            "{} threads outlived the check",
            threads() - before
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// This process's thread count (`Threads:` in `/proc/self/status`); 0 where there is no
/// `/proc` (off Linux), so that [`and_its_threads_end`] checks nothing there.
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Ids (as compact JSON) of the requests in `input` with a string or number id that no
/// other frame of the input uses.
fn unique_request_ids(input: &[u8], max: usize) -> Vec<String> {
    let mut reader = FrameReader::new(input, max);
    let mut seen: HashMap<String, (usize, bool)> = HashMap::new();
    while let Ok(Some(frame)) = reader.next_frame() {
        let Frame::Line(line) = frame else {
            continue;
        };
        let (id, is_request) = match wire::parse(line) {
            Message::Request { id: Some(id), .. } => (id, true),
            Message::Response { id, .. } | Message::BadResponse { id, .. } => (id, false),
            Message::Invalid { id: Some(id), .. } => (id, false),
            _ => continue,
        };
        let Ok(id) = serde_json::from_str::<Value>(id.get()) else {
            continue;
        };
        let entry = seen.entry(id.to_string()).or_insert((0, is_request));
        entry.0 += 1;
        entry.1 &= is_request && (id.is_string() || id.is_number());
    }
    seen.into_iter()
        .filter(|(_, (count, ok))| *count == 1 && *ok)
        .map(|(id, _)| id)
        .collect()
}

// ---- the host's reader ----

/// A scratch directory for the host-reader check: the plugin's output is replayed from a
/// file here, and the host's temp directory (`TMPDIR`, where file transport may read and
/// delete) is a subdirectory, so arbitrary output can never touch anyone else's files.
#[cfg(feature = "host")]
pub fn host_scratch(dir: PathBuf) -> PathBuf {
    std::fs::create_dir_all(dir.join("tmp")).expect("scratch dir");
    dir
}

/// The host's reader on arbitrary plugin output: a plugin that waits for the host's
/// first request, writes `output` and exits. The request is settled (by a reply in the
/// output, a refusal, or the plugin's exit) well before its timeout, and nothing panics.
/// When `TMPDIR` is `scratch/tmp`, a file-transport reply `reply.json` waits there.
/// Unix only: the plugin is a sh command line, which a Windows test process under Wine
/// cannot start.
#[cfg(all(feature = "host", unix))]
pub fn check_host_reader(output: &[u8], scratch: &Path) {
    let replay = scratch.join("output");
    std::fs::write(&replay, output).expect("write replay file");
    let tmp = scratch.join("tmp");
    if std::env::temp_dir() == tmp {
        let reply = br#"{"jsonrpc":"2.0","id":1,"result":{"via":"file"}}"#;
        std::fs::write(tmp.join("reply.json"), reply).expect("write reply file");
    }
    let cmd = PluginCommand::new("sh")
        .arg("-c")
        .arg(r#"read -r _; exec cat "$0""#)
        .arg(&replay);
    let opts = HostOptions {
        max_frame_bytes: 2048,
        stderr: StderrRelay::Quiet,
        shutdown: ShutdownPolicy {
            stdin_grace: Duration::from_secs(5),
            term_grace: Duration::from_secs(5),
            kill_wait: Duration::from_secs(5),
        },
        ..HostOptions::default()
    };
    let process = PluginProcess::spawn(&cmd, opts, Handlers::new()).expect("spawn sh");
    let limit = Duration::from_secs(30);
    match process.request("fuzz/echo", &Value::Null, limit) {
        Ok(raw) => assert!(serde_json::from_str::<Value>(raw.get()).is_ok()),
        Err(Error::Timeout { .. }) => panic!("the request was never settled"),
        Err(_) => {}
    }
    process.shutdown();
}
