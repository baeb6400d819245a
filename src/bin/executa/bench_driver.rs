//! `executa bench`'s load generator: talks to the plugin's pipes directly. One thread
//! writes invokes (at most N unanswered), one thread reads replies, matches them to their
//! request by id and answers the plugin's reverse calls (`bench_wire.rs`: the in-memory
//! development backends for Executa, an echo for MCP). With one in flight a single thread
//! does both, so a round trip pays no hand-off of the driver's own. The handshake decides
//! the protocol (`--protocol`; `auto` reads it from the answer to `initialize`).

use std::io::{BufReader, BufWriter, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, bounded};
use executa::host::{
    McpRevision, McpToolsPager, McpVersion, ProcessTree, Protocol, ShutdownPolicy, mcp_revision,
};
use executa::wire::{self, Message};
use executa::{Manifest, RpcError};
use serde_json::json;
use serde_json::value::RawValue;

use crate::bench_era::{self, FollowUp, Retries, Settled};
use crate::bench_io::{OpenSession, Plugin, flush, push_u64, read_line, with_watchdog, write_all};
use crate::bench_mcp;
use crate::bench_spec::Target;
use crate::bench_wire::{Backends, InvokeParts, Responder, Wire, request_frame};

/// What one timed run measured.
#[derive(Default)]
pub struct Run {
    /// One per answered request, failed ones too (`errors` counts those).
    pub latencies: Vec<Duration>,
    pub errors: usize,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    /// CPU time over the run: the plugin's process group, and the bench itself.
    pub plugin_cpu: Option<Duration>,
    pub bench_cpu: Option<Duration>,
    /// The plugin group's resident memory after the run and at its peak, kB.
    pub memory_kb: Option<(u64, u64)>,
}

/// The invokes of one run: frames `{"jsonrpc":"2.0","id":N,"method":"invoke",...}` (MCP:
/// `"method":"tools/call"`).
pub struct Load<'a> {
    pub tool: &'a str,
    pub arguments: &'a serde_json::Value,
    pub count: usize,
    pub in_flight: usize,
    /// A reply that stalls this long ends the run (the plugin is killed).
    pub stall: Duration,
    pub progress: bool,
}

/// A started plugin, initialized, with its manifest.
pub struct Session {
    child: Child,
    /// Its process group (Windows: its job object), which the shutdown sequence reaches.
    tree: ProcessTree,
    /// Counts the session as open until it is dropped (see [`OpenSession`]).
    _open: OpenSession,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    responder: Responder,
    next_id: u64,
    pub manifest: Manifest,
    /// The MCP revision the handshake settled on; `None`: the session is Executa.
    pub revision: Option<String>,
}

/// How long the handshake may take, step by step.
pub struct Timeouts {
    pub initialize: Duration,
    pub describe: Duration,
}

impl Session {
    /// Spawns `target` (under `taskset -c CPU` when pinned, which execs it) as the leader
    /// of its own process group (Windows: in a job object of its own), so that the
    /// shutdown sequence reaches its helpers too,
    /// and shakes hands in the target's protocol ([`Session::handshake`]), each request
    /// bounded by its timeout. Reverse calls go to `backends`.
    /// On failure the plugin is shut down ([`Session::close`]).
    pub fn start(
        target: &Target,
        quiet: bool,
        timeouts: &Timeouts,
        backends: Backends,
    ) -> Result<Session, String> {
        let open = OpenSession::new()?;
        let mut argv: Vec<String> = Vec::new();
        if let Some(cpu) = target.pin {
            argv.extend(["taskset".into(), "-c".into(), cpu.to_string()]);
        }
        argv.extend(target.argv.iter().cloned());
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if quiet {
                Stdio::null()
            } else {
                Stdio::inherit()
            });
        let (mut child, tree) = ProcessTree::spawn(&mut cmd)
            .map_err(|e| format!("cannot start `{}`: {e}", argv.join(" ")))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            tree.shutdown(&mut child, &ShutdownPolicy::default());
            return Err("the plugin's pipes are missing".into());
        };
        let mut session = Session {
            child,
            tree,
            _open: open,
            stdin: BufWriter::with_capacity(64 * 1024, stdin),
            stdout: BufReader::with_capacity(64 * 1024, stdout),
            responder: Responder::new(Wire::Executa, backends),
            next_id: 0,
            manifest: Manifest::default(),
            revision: None,
        };
        match session.handshake(target, timeouts) {
            Ok(()) => Ok(session),
            Err(e) => {
                session.close();
                Err(e)
            }
        }
    }

    /// Executa: `initialize` (v2, with the sampling capability; a 1.1 plugin answers
    /// -32601 and the run goes on), then `describe`. MCP: the era the target's
    /// `--mcp-version` settles (`bench_era.rs`): `server/discover` and the `_meta`
    /// envelope, or `initialize` and `notifications/initialized`; then `tools/list`
    /// (every page). `auto` reads the answer to Executa's `initialize` as `executa::host`
    /// does: a dated revision it speaks is adopted (unless another is pinned); another
    /// dated one (an MCP server answers a revision it does not know with its own) or an
    /// error that names the version settles the MCP era as `mcp` does; anything else is
    /// Executa.
    fn handshake(&mut self, target: &Target, t: &Timeouts) -> Result<(), String> {
        let executa_init = json!({
            "protocolVersion": "2.0",
            "clientInfo": { "name": "executa-bench", "version": env!("CARGO_PKG_VERSION") },
            "capabilities": {
                "sampling": { "modalities": ["text"], "maxTokensPerCall": 8192, "maxCallsPerInvoke": 8 }
            }
        });
        let version = &target.mcp_version;
        let mcp = match target.protocol {
            Protocol::Executa => {
                let _ = self.request("initialize", &executa_init, t.initialize);
                None
            }
            Protocol::Mcp => Some(self.settle_mcp(version, t)?),
            Protocol::Auto => match self.request("initialize", &executa_init, t.initialize) {
                Ok(Ok(result)) => match mcp_revision(&result) {
                    McpRevision::Spoken(v) if version.pinned().is_none_or(|p| p == v) => {
                        Some((result, v))
                    }
                    McpRevision::None => None,
                    _ => Some(self.settle_mcp(version, t)?),
                },
                Ok(Err(error))
                    if serde_json::from_str::<RpcError>(error.get())
                        .is_ok_and(|e| executa::host::suggests_mcp(&e)) =>
                {
                    self.settle_mcp(version, t).ok()
                }
                _ => None,
            },
        };
        let Some((init, revision)) = mcp else {
            let manifest = self
                .request("describe", &json!({}), t.describe)
                .and_then(|m| m.map_err(|e| format!("describe failed: {}", e.get())))?;
            self.manifest = serde_json::from_str(manifest.get())
                .map_err(|e| format!("unreadable manifest: {e}"))?;
            return Ok(());
        };
        self.revision = Some(revision);
        let wire = self.wire();
        self.responder.set_wire(wire);
        let meta = wire.stateless().map(bench_mcp::envelope);
        if meta.is_none() {
            write_all(&mut self.stdin, &bench_mcp::initialized_frame())?;
        }
        // Read as the host reads it: bounded, a server whose pages never end is refused.
        let mut pager = McpToolsPager::default();
        loop {
            let mut params = pager.params();
            if let Some(meta) = &meta {
                params["_meta"] = meta.clone();
            }
            let page = self
                .request("tools/list", &params, t.describe)
                .and_then(|p| p.map_err(|e| format!("tools/list failed: {}", e.get())))?;
            if pager.take(&page).map_err(|e| e.to_string())? {
                break;
            }
        }
        self.manifest = bench_mcp::manifest(&init, pager.into_tools())?;
        Ok(())
    }

    /// The protocol the handshake settled on.
    pub fn wire(&self) -> Wire {
        match self.revision.as_deref() {
            Some(v) => bench_era::stateless(v).map_or(Wire::Mcp, Wire::McpStateless),
            None => Wire::Executa,
        }
    }

    /// The MCP era `version` asks for, each request bounded by the initialize timeout.
    fn settle_mcp(&mut self, version: &McpVersion, t: &Timeouts) -> Result<Settled, String> {
        bench_era::settle(version, &mut |method, params| {
            self.request(method, params, t.initialize)
        })
    }

    /// The plugin's process id (its process group's, too).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// One request; its result (or error object), or why there is none.
    fn request(
        &mut self,
        method: &str,
        params: &serde_json::Value,
        timeout: Duration,
    ) -> Result<Result<Box<RawValue>, Box<RawValue>>, String> {
        let id = self.next_id;
        self.next_id += 1;
        write_all(&mut self.stdin, &request_frame(id, method, params))?;
        flush(&mut self.stdin)?;
        let (child, stdin, stdout, responder) = self.parts();
        let quiet = AtomicUsize::new(0);
        let answer = with_watchdog(child, timeout, &quiet, None, || {
            let mut line = Vec::with_capacity(4096);
            loop {
                read_line(stdout, &mut line)?;
                match wire::parse(&line) {
                    Message::Response { id: got, outcome } if got.get() == id.to_string() => {
                        return Ok(match outcome {
                            Ok(r) => Ok(r.to_owned()),
                            Err(e) => Err(e.to_owned()),
                        });
                    }
                    Message::Request {
                        id: Some(rid),
                        method,
                        params,
                    } => {
                        write_all(stdin, &responder.answer(rid, &method, params))?;
                        flush(stdin)?;
                    }
                    _ => {}
                }
            }
        });
        answer.map_err(|e| format!("{method}: {e}"))
    }

    /// Runs `load.count` invokes, keeping `load.in_flight` unanswered.
    pub fn run(&mut self, load: &Load) -> Result<Run, String> {
        let first = self.next_id;
        self.next_id += load.count as u64;
        let mut requests = Requests::new(load, first, self.wire())?;
        let done = AtomicUsize::new(0);
        let retries = (self.wire().stateless())
            .map(|revision| Retries::new(load.tool, load.arguments, revision));
        let mut tally = Tally::new(&requests, self.wire(), retries);
        let (child, stdin, stdout, responder) = self.parts();
        let outcome = if load.in_flight <= 1 {
            with_watchdog(child, load.stall, &done, shown(load), || {
                let mut feed = Inline {
                    out: stdin,
                    requests: &mut requests,
                };
                feed.credits(1)?;
                read_replies(stdout, responder, &mut tally, &mut feed, &done)
            })
        } else {
            pipelined(
                child,
                stdin,
                stdout,
                responder,
                &mut requests,
                &mut tally,
                load,
                &done,
            )
        };
        outcome?;
        Ok(tally.finish())
    }

    /// The fields the reading and writing sides borrow separately.
    fn parts(&mut self) -> Parts<'_> {
        (
            (&mut self.child, &self.tree),
            &mut self.stdin,
            &mut self.stdout,
            &self.responder,
        )
    }

    /// Runs the Agent's shutdown sequence, as the host does: closes the plugin's stdin,
    /// waits up to 5 s, `SIGTERM`, 5 s, `SIGKILL`, 5 s, then `SIGKILL` to what is left of
    /// its process group; returns once it has been reaped.
    pub fn close(mut self) {
        let _ = self.stdin.flush();
        drop(self.stdin);
        self.tree
            .shutdown(&mut self.child, &ShutdownPolicy::default());
    }
}

type Parts<'a> = (
    Plugin<'a>,
    &'a mut BufWriter<ChildStdin>,
    &'a mut BufReader<ChildStdout>,
    &'a Responder,
);

/// The writer thread takes credits and reverse-call answers from the reader.
enum ToWriter {
    Credits(usize),
    Frame(Vec<u8>),
}

#[allow(clippy::too_many_arguments)]
fn pipelined(
    child: Plugin<'_>,
    stdin: &mut BufWriter<ChildStdin>,
    stdout: &mut BufReader<ChildStdout>,
    responder: &Responder,
    requests: &mut Requests,
    tally: &mut Tally,
    load: &Load,
    done: &AtomicUsize,
) -> Result<(), String> {
    // Credits in flight never exceed `in_flight`; reverse answers at most one per invoke
    // in flight per reverse call, so this bound is never what blocks the reader.
    let (tx, rx) = bounded::<ToWriter>(4 * load.in_flight + 64);
    std::thread::scope(|s| {
        let writer = s.spawn(move || -> Result<(), String> {
            let mut credits = load.in_flight;
            loop {
                while let Ok(m) = rx.try_recv() {
                    credits += apply(m, requests, stdin)?;
                }
                if credits > 0 && requests.write_next(stdin)? {
                    credits -= 1;
                    continue;
                }
                requests.flush(stdin)?;
                // The reader drops its sender when every reply is in (or it failed).
                match rx.recv() {
                    Ok(m) => credits += apply(m, requests, stdin)?,
                    Err(_) => return Ok(()),
                }
            }
        });
        let read = with_watchdog(child, load.stall, done, shown(load), || {
            let mut feed = Channel(tx);
            read_replies(stdout, responder, tally, &mut feed, done)
        });
        let wrote = writer
            .join()
            .map_err(|_| "the writer thread panicked".to_owned())?;
        read.and(wrote)
    })
}

/// Applies one message on the writer thread; returns the credits it adds.
fn apply(
    m: ToWriter,
    requests: &mut Requests,
    out: &mut BufWriter<ChildStdin>,
) -> Result<usize, String> {
    match m {
        ToWriter::Credits(n) => Ok(n),
        ToWriter::Frame(f) => requests.write_other(out, &f).map(|()| 0),
    }
}

/// Where the reader sends credits (one per reply, handed over in a batch just before the
/// reader would block on a read) and reverse-call answers.
trait Feed {
    fn credits(&mut self, n: usize) -> Result<(), String>;
    fn frame(&mut self, frame: Vec<u8>) -> Result<(), String>;
}

/// One in flight: the reading thread writes too.
struct Inline<'a> {
    out: &'a mut BufWriter<ChildStdin>,
    requests: &'a mut Requests,
}

impl Feed for Inline<'_> {
    fn credits(&mut self, n: usize) -> Result<(), String> {
        let mut wrote = false;
        for _ in 0..n {
            wrote |= self.requests.write_next(self.out)?;
        }
        if wrote {
            self.requests.flush(self.out)?;
        }
        Ok(())
    }
    fn frame(&mut self, frame: Vec<u8>) -> Result<(), String> {
        self.requests.write_other(self.out, &frame)?;
        self.requests.flush(self.out)
    }
}

struct Channel(Sender<ToWriter>);

impl Feed for Channel {
    fn credits(&mut self, n: usize) -> Result<(), String> {
        self.0
            .send(ToWriter::Credits(n))
            .map_err(|_| "the writer thread stopped".to_owned())
    }
    fn frame(&mut self, frame: Vec<u8>) -> Result<(), String> {
        self.0
            .send(ToWriter::Frame(frame))
            .map_err(|_| "the writer thread stopped".to_owned())
    }
}

/// Renders invoke frames into one reused buffer and stamps their send times.
struct Requests {
    head: Vec<u8>,
    parts: InvokeParts,
    buf: Vec<u8>,
    first: u64,
    count: usize,
    sent: usize,
    /// Requests before this one have their send time stamped.
    stamped: usize,
    t0: Instant,
    starts: Arc<[AtomicU64]>,
}

impl Requests {
    fn new(load: &Load, first: u64, wire: Wire) -> Result<Requests, String> {
        Ok(Requests {
            head: b"{\"jsonrpc\":\"2.0\",\"id\":".to_vec(),
            parts: wire.invoke_parts(load.tool, load.arguments)?,
            buf: Vec::with_capacity(1024),
            first,
            count: load.count,
            sent: 0,
            stamped: 0,
            t0: Instant::now(),
            starts: (0..load.count).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// Writes the next invoke into `out`'s buffer; `false` when all are sent. A request
    /// leaves when `out` is flushed, and is stamped then ([`Requests::flush`]).
    fn write_next(&mut self, out: &mut BufWriter<ChildStdin>) -> Result<bool, String> {
        if self.sent == self.count {
            return Ok(false);
        }
        let id = self.first + self.sent as u64;
        self.buf.clear();
        self.buf.extend_from_slice(&self.head);
        push_u64(&mut self.buf, id);
        self.buf.extend_from_slice(&self.parts.tail);
        if let Some(suffix) = &self.parts.suffix {
            push_u64(&mut self.buf, id);
            self.buf.extend_from_slice(suffix);
        }
        self.make_room(out, self.buf.len())?;
        self.sent += 1;
        if self.buf.len() >= out.capacity() {
            // Too big for the buffer: `out` writes it straight through, so it leaves now.
            self.flush(out)?;
        }
        write_all(out, &self.buf)?;
        Ok(true)
    }

    /// Writes a frame that is not a request (an answer to a reverse call) through the
    /// same buffer, making room first as [`Requests::write_next`] does.
    fn write_other(&mut self, out: &mut BufWriter<ChildStdin>, frame: &[u8]) -> Result<(), String> {
        self.make_room(out, frame.len())?;
        write_all(out, frame)
    }

    /// Sends (stamped) what `out` holds when `len` more bytes would not fit beside it: `out`
    /// then never flushes a request by itself, unstamped.
    fn make_room(&mut self, out: &mut BufWriter<ChildStdin>, len: usize) -> Result<(), String> {
        if out.capacity() - out.buffer().len() < len {
            self.flush(out)?;
        }
        Ok(())
    }

    /// Stamps the requests written since the last flush with one clock read, then sends
    /// them: one clock read per batch, taken as the batch leaves.
    fn flush(&mut self, out: &mut BufWriter<ChildStdin>) -> Result<(), String> {
        if self.stamped < self.sent {
            let now = self.t0.elapsed().as_nanos() as u64;
            for start in &self.starts[self.stamped..self.sent] {
                start.store(now, Ordering::Relaxed);
            }
            self.stamped = self.sent;
        }
        flush(out)
    }
}

/// Replies as they come in: latency per request, errors, which ids were answered.
struct Tally {
    first: u64,
    answered: Vec<bool>,
    left: usize,
    latencies: Vec<Duration>,
    errors: usize,
    first_error: Option<String>,
    starts: Arc<[AtomicU64]>,
    t0: Instant,
    wire: Wire,
    /// When the last reply arrived, since `t0`: the run's length. (Measured here, not
    /// after the threads are joined, so their wind-down is not counted as the plugin's.)
    last: Duration,
    /// In the stateless era: the calls sent again with the input their results asked for.
    retries: Option<Retries>,
}

impl Tally {
    fn new(requests: &Requests, wire: Wire, retries: Option<Retries>) -> Tally {
        Tally {
            first: requests.first,
            answered: vec![false; requests.count],
            left: requests.count,
            latencies: Vec::with_capacity(requests.count),
            errors: 0,
            first_error: None,
            starts: requests.starts.clone(),
            t0: requests.t0,
            wire,
            last: Duration::ZERO,
            retries,
        }
    }

    /// Records the reply to `id`; `false` when it answers none of this run's requests
    /// (or one already answered).
    fn answered(&mut self, id: u64, arrived: Instant) -> bool {
        let id = self.retries.as_mut().map_or(id, |r| r.original(id));
        let Some(slot) = id
            .checked_sub(self.first)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n < self.answered.len() && !self.answered[n])
        else {
            return false;
        };
        self.answered[slot] = true;
        self.left -= 1;
        let sent = Duration::from_nanos(self.starts[slot].load(Ordering::Relaxed));
        let at = arrived.saturating_duration_since(self.t0);
        self.latencies.push(at.saturating_sub(sent));
        self.last = self.last.max(at);
        true
    }

    /// Records a reply the fast scan left to the full parser, with its failure if any.
    fn record(
        &mut self,
        id: &RawValue,
        outcome: Result<&RawValue, &RawValue>,
        arrived: Instant,
    ) -> bool {
        if !id.get().parse().is_ok_and(|n| self.answered(n, arrived)) {
            return false;
        }
        let failure = match outcome {
            Ok(result) => self.wire.failure(result),
            Err(error) => Some(format!("error frame: {}", error.get())),
        };
        if let Some(f) = failure {
            self.errors += 1;
            self.first_error.get_or_insert(f);
        }
        true
    }

    /// What the reply to `id` calls for: in the stateless era, a result that asks for
    /// input is answered and the call sent again (see [`Retries::follow_up`]).
    fn follow_up(
        &mut self,
        id: &RawValue,
        outcome: Result<&RawValue, &RawValue>,
        responder: &Responder,
    ) -> Result<FollowUp, String> {
        match (&mut self.retries, outcome, id.get().parse::<u64>()) {
            (Some(retries), Ok(result), Ok(n)) => {
                retries.follow_up(n, result, |r| responder.input_answer(r))
            }
            _ => Ok(FollowUp::Final),
        }
    }

    /// Records the request the reply to `id` stands for as failed, for `why`.
    fn failed(&mut self, id: &RawValue, arrived: Instant, why: String) -> bool {
        if !id.get().parse().is_ok_and(|n| self.answered(n, arrived)) {
            return false;
        }
        self.errors += 1;
        self.first_error.get_or_insert(why);
        true
    }

    fn finish(self) -> Run {
        Run {
            latencies: self.latencies,
            errors: self.errors,
            first_error: self.first_error,
            elapsed: self.last,
            ..Run::default()
        }
    }
}

/// Reads until every request of the run is answered, answering reverse calls on the way.
fn read_replies(
    stdout: &mut BufReader<ChildStdout>,
    responder: &Responder,
    tally: &mut Tally,
    feed: &mut dyn Feed,
    done: &AtomicUsize,
) -> Result<(), String> {
    let mut line = Vec::with_capacity(4096);
    let mut arrived = Instant::now();
    let mut owed = 0;
    while tally.left > 0 {
        // A reply arrives when the read that brought it returns: one clock read per read
        // call, not per line. Credits go back in one message per read, not per reply:
        // fewer wake-ups of the writer, which then writes and flushes them as one batch.
        let refill = stdout.buffer().is_empty();
        // No complete line buffered: the next read may block (it stops at the first '\n').
        if owed > 0 && !stdout.buffer().contains(&b'\n') {
            feed.credits(owed)?;
            owed = 0;
        }
        read_line(stdout, &mut line)?;
        if refill {
            arrived = Instant::now();
        }
        if let Some(id) = tally.wire.success_id(&line) {
            if tally.answered(id, arrived) {
                done.fetch_add(1, Ordering::Relaxed);
                owed += 1;
            }
            continue;
        }
        match wire::parse(&line) {
            Message::Response { id, outcome } => {
                let counted = match tally.follow_up(id, outcome, responder)? {
                    FollowUp::Final => tally.record(id, outcome, arrived),
                    FollowUp::Retry(frame) => {
                        feed.frame(frame)?;
                        false
                    }
                    FollowUp::Failed(why) => tally.failed(id, arrived, why),
                };
                if counted {
                    done.fetch_add(1, Ordering::Relaxed);
                    owed += 1;
                }
            }
            Message::Request {
                id: Some(id),
                method,
                params,
            } => feed.frame(responder.answer(id, &method, params))?,
            _ => {}
        }
    }
    Ok(())
}

/// The total the progress line counts to, when it is shown.
fn shown(load: &Load) -> Option<usize> {
    load.progress.then_some(load.count)
}
