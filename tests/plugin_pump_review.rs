//! Review tests for the reader reading the answers to its own invoke's calls
//! (`Relay::pump`): a shutdown during such a call, a call with an unbounded timeout, a
//! frame that stops half-way while the reader waits, and a quick tool that did nothing
//! wrong. Served in-process over socket pairs (pollable, so the reader pumps). Unix only:
//! only there can an input be waited on with a bound, which pumping needs.
#![cfg(unix)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use common::{Conn, sampled, thread_name};
use crossbeam_channel::{Receiver, Sender, bounded};
use executa::{Invocation, Options, Plugin, StopReason, Tool, ToolError};
use serde_json::{Value, json};

/// Runs needed before a tool runs on the reader (quick.rs `STREAK`).
const STREAK: usize = 8;

/// Only a failing test waits this long.
const WAIT: Duration = Duration::from_secs(60);

/// The tests look at which thread ran a handler: one plugin at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `where` says which thread ran it; with `sample: true` it first makes one sampling call
/// (timeout `timeout_ms`, or no bound at all with `unbounded: true`) and reports a failed
/// call's error on `failures`.
fn plugin(opts: Options, failures: Sender<String>) -> Plugin {
    Plugin::new("pump-review", "0.0.1")
        .capability("llm.sample")
        .options(opts)
        .tool(Tool::new(
            "where",
            "",
            move |args: Value, ctx: &Invocation| {
                let mut text = json!("");
                if args["sample"] == true {
                    let timeout = if args["unbounded"] == true {
                        Duration::MAX
                    } else {
                        Duration::from_millis(args["timeout_ms"].as_u64().unwrap_or(30_000))
                    };
                    let params = json!({ "messages": [], "maxTokens": 10 });
                    text = match ctx.call_with_timeout::<_, Value>(
                        "sampling/createMessage",
                        &params,
                        timeout,
                    ) {
                        Ok(reply) => reply["content"]["text"].clone(),
                        Err(e) => {
                            let _ = failures.try_send(e.to_string());
                            json!({ "error": e.to_string() })
                        }
                    };
                }
                if let Some(ms) = args["sleep_ms"].as_u64() {
                    std::thread::sleep(Duration::from_millis(ms));
                }
                Ok::<_, ToolError>(json!({ "thread": thread_name(), "text": text }))
            },
        ))
}

fn inline_opts() -> Options {
    Options {
        // Generous, so a loaded machine cannot make a run look slow.
        inline: Duration::from_secs(1),
        ..Options::default()
    }
}

fn start(opts: Options) -> (Conn, Receiver<String>) {
    let (tx, rx) = bounded(16);
    let mut p = Conn::serve(plugin(opts, tx));
    p.initialize("2.0", json!({ "sampling": {} }));
    (p, rx)
}

fn where_data(p: &mut Conn, id: &str, args: Value) -> Value {
    p.invoke(id, "where", args);
    p.recv_until_id(&format!("\"{id}\"")).0.data().clone()
}

/// Warms `where` up until it runs on the reader.
fn warm_up(p: &mut Conn) {
    for i in 0..=STREAK {
        where_data(p, &format!("w{i}"), json!({}));
    }
    assert_eq!(
        where_data(p, "warm", json!({}))["thread"],
        "executa-reader",
        "quick by now"
    );
}

/// A call without a bound (`Duration::MAX`, no deadline) waits for its answer, as
/// `AnswerReceiver::recv_timeout` allows: it must not overflow the clock.
#[test]
fn a_call_without_a_bound_is_answered_on_the_dispatch_side() {
    let _one = serial();
    unbounded_call(Options {
        inline: Duration::ZERO,
        ..Options::default()
    });
}

#[test]
fn a_call_without_a_bound_is_answered_on_the_reader() {
    let _one = serial();
    assert_eq!(unbounded_call(inline_opts()), "executa-reader");
}

/// Makes an unbounded call (on the reader once warmed up, with `opts.inline`) and returns
/// the thread that made it.
fn unbounded_call(opts: Options) -> Value {
    let warm = !opts.inline.is_zero();
    let (mut p, _failures) = start(opts);
    if warm {
        warm_up(&mut p);
    }
    p.invoke("s", "where", json!({ "sample": true, "unbounded": true }));
    let req = p.recv_request("sampling/createMessage");
    p.answer(&req.v["id"], sampled("answered"));
    let reply = p.recv_until_id("\"s\"").0;
    assert!(reply.v.get("error").is_none(), "{}", reply.raw);
    assert_eq!(reply.data()["text"], "answered", "{}", reply.raw);
    p.close_stdin();
    p.wait_stopped();
    reply.data()["thread"].clone()
}

/// A frame that stops half-way while the reader waits for its own call's answer: the call
/// still times out on time (the wait is bounded by the call's timeout), and the frame is
/// served once it is complete.
#[test]
fn a_half_sent_frame_does_not_hold_the_reader_past_the_calls_timeout() {
    let _one = serial();
    let (mut p, _failures) = start(inline_opts());
    warm_up(&mut p);
    p.invoke("s", "where", json!({ "sample": true, "timeout_ms": 300 }));
    p.recv_request("sampling/createMessage");
    p.send_raw(br#"{"jsonrpc":"2.0","id":"late","method":"describe""#);
    let reply = p.recv_until_id("\"s\"").0;
    let error = reply.data()["text"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("timed out"), "{}", reply.raw);
    p.send_raw(b"}\n");
    let late = p.recv_until_id("\"late\"").0;
    assert!(late.v.get("result").is_some(), "{}", late.raw);
    p.close_stdin();
    p.wait_stopped();
}

/// With one invoke at a time, an invoke read while the reader's own invoke waits on the
/// host waits for that slot, and the reader runs it after its own (reading moves to a new
/// reader first). The quick tool did nothing to stall the reader: it must stay quick.
#[test]
fn a_quick_tool_is_not_sent_back_for_an_invoke_that_waited_for_its_slot() {
    let _one = serial();
    let (mut p, _failures) = start(Options {
        max_concurrent_invokes: 1,
        ..inline_opts()
    });
    warm_up(&mut p);
    p.invoke("s", "where", json!({ "sample": true }));
    let req = p.recv_request("sampling/createMessage");
    // Long enough for the new reader to take over while it runs.
    p.invoke("x", "where", json!({ "sleep_ms": 300 }));
    // Handled after `x` was taken: `x` waits for the slot by now.
    p.request("d", "describe", None);
    p.recv_until_id("\"d\"");
    p.answer(&req.v["id"], sampled("answered"));
    let mut threads = Vec::new();
    while threads.len() < 2 {
        let m = p.recv();
        assert!(m.is_response(), "{}", m.raw);
        threads.push((m.raw_id(), m.data()["thread"].clone()));
    }
    threads.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(threads[0].1, "executa-reader", "s ran on the reader");
    // Sent back, the tool would run its next 16 invokes (the first penalty) on the dispatch
    // side. One of these runs may still land there for a reason of the moment (on a loaded
    // machine the old reader can be slow to hand its role back), so the last two decide.
    let after: Vec<Value> = (0..5)
        .map(|i| where_data(&mut p, &format!("after{i}"), json!({}))["thread"].clone())
        .collect();
    assert!(
        after[3..].iter().all(|t| t == "executa-reader"),
        "the runs after: {after:?}"
    );
    p.close_stdin();
    p.wait_stopped();
}

/// A host that reads lines of the plugin's output, with every wait bounded.
struct RawHost {
    input: UnixStream,
    output: BufReader<UnixStream>,
    stopped: Receiver<executa::Result<executa::Stopped>>,
}

impl RawHost {
    fn serve(plugin: Plugin) -> RawHost {
        let (ours_in, theirs_in) = UnixStream::pair().expect("socket pair");
        let (theirs_out, ours_out) = UnixStream::pair().expect("socket pair");
        ours_out.set_read_timeout(Some(WAIT)).expect("read timeout");
        let (tx, stopped) = bounded(1);
        std::thread::spawn(move || {
            let _ = tx.send(plugin.serve(theirs_in, theirs_out));
        });
        RawHost {
            input: ours_in,
            output: BufReader::new(ours_out),
            stopped,
        }
    }

    fn send(&mut self, frame: Value) {
        let mut line = frame.to_string();
        line.push('\n');
        self.input.write_all(line.as_bytes()).expect("write");
    }

    fn invoke(&mut self, id: &str, args: Value) {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": "invoke",
            "params": { "tool": "where", "arguments": args } }));
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = self.output.read_line(&mut line).expect("a line in time");
        assert!(n > 0, "output ended");
        serde_json::from_str(&line).expect("one JSON object per line")
    }

    fn recv_id(&mut self, id: &str) -> Value {
        loop {
            let m = self.recv();
            if m["id"] == id && m.get("method").is_none() {
                return m;
            }
        }
    }
}

/// The host stops reading while the handler on the reader waits for the host: the
/// plugin shuts down, and the call must fail at once ("calls waiting on the host fail at
/// once, so their invokes can end in time"), not at its own (long) timeout after the
/// grace period has given the invoke up.
#[test]
fn a_shutdown_while_the_reader_waits_on_the_host_fails_the_call_at_once() {
    let _one = serial();
    let (tx, failures) = bounded(16);
    let mut host = RawHost::serve(plugin(
        Options {
            grace: Duration::from_secs(30),
            ..inline_opts()
        },
        tx,
    ));
    host.send(
        json!({ "jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": { "protocolVersion": "2.0", "capabilities": { "sampling": {} },
            "clientInfo": { "name": "raw", "version": "0" } } }),
    );
    host.recv_id("init");
    for i in 0..=STREAK + 1 {
        let id = format!("w{i}");
        host.invoke(&id, json!({}));
        host.recv_id(&id);
    }
    host.invoke("last", json!({}));
    assert_eq!(
        host.recv_id("last")["result"]["data"]["thread"],
        "executa-reader"
    );
    host.invoke("s", json!({ "sample": true, "timeout_ms": 600_000 }));
    loop {
        let m = host.recv();
        if m["method"] == "sampling/createMessage" {
            break;
        }
    }
    // The host stops reading; the next reply breaks the output.
    host.output
        .get_ref()
        .shutdown(Shutdown::Read)
        .expect("shutdown");
    host.send(json!({ "jsonrpc": "2.0", "id": "d", "method": "describe" }));
    let error = failures
        .recv_timeout(WAIT)
        .expect("the call failed in time");
    assert!(error.contains("shutting down"), "{error}");
    let stopped = host
        .stopped
        .recv_timeout(WAIT)
        .expect("serve returned")
        .expect("serve ok");
    assert_eq!(stopped.reason, StopReason::OutputBroken);
    assert_eq!(
        stopped.abandoned, 0,
        "the invoke ended within the grace period"
    );
}
