//! Review of quick invokes on the reader thread (`Options::inline`): what the reader must
//! not do while it runs an invoke itself. Served in-process over socket pairs; handlers
//! report the thread they ran on and block on channels the test controls, so every wait is
//! an event, bounded, never a sleep.

mod common;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use common::{Conn, thread_name};
use crossbeam_channel::{Receiver, Sender, bounded};
use executa::{Health, Invocation, Options, Plugin, Tool, ToolError};
use serde_json::{Value, json};

/// One plugin at a time: the tests count on the runtime's threads being theirs.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs needed before a tool runs on the reader (quick.rs `STREAK`).
const STREAK: usize = 8;

/// How long the test waits for something that should happen at once. Only a failing test
/// waits this long.
const PROMPT: Duration = Duration::from_secs(10);

/// How long a blocked handler waits for the test before it gives up (longer than
/// [`PROMPT`], so a failing test still ends).
const GIVE_UP: Duration = Duration::from_secs(30);

/// A gate: the handler says it is in, then waits for the test to let it go.
#[derive(Clone)]
struct Gate {
    entered: Sender<()>,
    go: Receiver<()>,
}

/// The test's end of a [`Gate`].
struct Opener {
    entered: Receiver<()>,
    go: Sender<()>,
}

fn gate() -> (Gate, Opener) {
    let (entered_tx, entered_rx) = bounded(16);
    let (go_tx, go_rx) = bounded(16);
    let g = Gate {
        entered: entered_tx,
        go: go_rx,
    };
    let o = Opener {
        entered: entered_rx,
        go: go_tx,
    };
    (g, o)
}

impl Gate {
    fn pass(&self) -> Result<(), ToolError> {
        let _ = self.entered.try_send(());
        self.go
            .recv_timeout(GIVE_UP)
            .map_err(|_| ToolError::new("the test never opened the gate"))
    }
}

impl Opener {
    fn wait_entered(&self) {
        self.entered
            .recv_timeout(GIVE_UP)
            .expect("a handler should have reached its gate");
    }
    fn open(&self) {
        self.go.try_send(()).expect("gate channel has room");
    }
}

fn opts(limit: usize) -> Options {
    Options {
        max_concurrent_invokes: limit,
        // Generous, so a loaded machine cannot make a run look slow.
        inline: Duration::from_secs(1),
        ..Options::default()
    }
}

/// A tool that reports its thread, and waits at `gate` when called with `hold: true`.
fn held_tool(name: &'static str, gate: Gate) -> Tool {
    Tool::new(name, "", move |args: Value, _: &Invocation| {
        if args["hold"] == true {
            gate.pass()?;
        }
        Ok::<_, ToolError>(json!({ "thread": thread_name() }))
    })
}

/// Invokes `tool` until it has run on the reader (asserting it takes `STREAK` + 1 runs).
fn warm_up(p: &mut Conn, tool: &str) {
    let mut last = String::new();
    for i in 0..=STREAK {
        let id = format!("{tool}-warm{i}");
        p.invoke(id.as_str(), tool, json!({}));
        let reply = p.recv_until_id(&format!("\"{id}\"")).0;
        last = reply.data()["thread"].as_str().unwrap_or("?").to_owned();
    }
    assert_eq!(last, "executa-reader", "{tool} is quick now");
}

fn invoke_line(id: &str, tool: &str, args: Value) -> String {
    let params = json!({ "tool": tool, "arguments": args });
    json!({ "jsonrpc": "2.0", "id": id, "method": "invoke", "params": params }).to_string()
}

fn request_line(id: &str, method: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": method }).to_string()
}

/// Sends lines in one write, so the reader finds them buffered together.
fn send_together(p: &mut Conn, lines: &[String]) {
    let mut bytes = lines.join("\n").into_bytes();
    bytes.push(b'\n');
    p.send_raw(&bytes);
}

/// Reads until the response with id `id` (a string id), at most `PROMPT`; `None` if it
/// did not come in time. Other lines are kept in `seen`.
fn reply_within(p: &mut Conn, id: &str, seen: &mut Vec<common::Msg>) -> Option<common::Msg> {
    let quoted = format!("\"{id}\"");
    if let Some(at) = seen
        .iter()
        .position(|m| m.is_response() && m.raw_id().as_deref() == Some(&*quoted))
    {
        return Some(seen.remove(at));
    }
    let deadline = std::time::Instant::now() + PROMPT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let m = p.try_recv(left)?;
        if m.is_response() && m.raw_id().as_deref() == Some(&*quoted) {
            return Some(m);
        }
        seen.push(m);
    }
}

/// Limit 1. The reader runs `q` itself (holding the only slot) while another invoke is
/// admitted and has to wait for that slot. When `q` ends, the waiting invoke must not run
/// on the reader thread: it would hold back `q`'s finished reply (kept in the reader's
/// batch) and stop all reading (no `describe`, no `health`, no end of input) for as long
/// as it runs, whatever its tool.
#[test]
fn an_invoke_waiting_for_the_readers_slot_neither_stalls_reading_nor_holds_its_reply() {
    let _one = serial();
    let (q_gate, q) = gate();
    let (s_gate, s) = gate();
    let (h_gate, h) = gate();
    let plugin = Plugin::new("inline-review", "0.0.1")
        .options(opts(1))
        .tool(held_tool("q", q_gate))
        .tool(held_tool("s", s_gate))
        .health(move || {
            let _ = h_gate.pass();
            Health::ready()
        });
    let mut p = Conn::serve(plugin);
    warm_up(&mut p, "q");

    // Both dispatch threads (limit + 1) wait in the health hook, so what the reader queues
    // next stays in the request queue.
    p.request("h1", "health", None);
    p.request("h2", "health", None);
    h.wait_entered();
    h.wait_entered();
    // The reader runs `q` itself in the free slot; once `q` has run for the inline limit,
    // a new reader queues `s` and `d`.
    send_together(
        &mut p,
        &[
            invoke_line("q", "q", json!({ "hold": true })),
            invoke_line("s", "s", json!({ "hold": true })),
            request_line("d", "describe"),
        ],
    );
    q.wait_entered();
    // One dispatch thread goes on: it admits `s` (which waits for `q`'s slot), then
    // answers `d`, in that order.
    h.open();
    let mut seen = Vec::new();
    let d = reply_within(&mut p, "d", &mut seen);
    assert!(d.is_some(), "describe answered once one thread was free");
    // `q` ends; `s` now has its slot.
    q.open();
    let q_reply = reply_within(&mut p, "q", &mut seen);
    p.request("d2", "describe", None);
    let d2_reply = reply_within(&mut p, "d2", &mut seen);

    // Let everything finish before asserting, so a failure still ends cleanly.
    s.open();
    h.open();
    let s_reply = reply_within(&mut p, "s", &mut seen).expect("s answered once let go");
    p.close_stdin();
    p.wait_stopped();

    assert!(
        q_reply.is_some(),
        "q's reply was held back while the invoke that waited for its slot ran"
    );
    assert!(
        d2_reply.is_some(),
        "nothing was read while the invoke that waited for q's slot ran on the reader"
    );
    assert!(s_reply.data()["thread"].is_string(), "{}", s_reply.raw);
}

/// A handler may wait for another request (a rendezvous between two tools), as it could
/// before invokes ran on the reader: with `max_concurrent_invokes` above 1 the other
/// request runs beside it. On the reader, nothing would read that request: the main
/// thread hands reading over from a run that lasts a second or two (`relay.rs`).
#[test]
fn a_handler_on_the_reader_may_wait_for_the_next_request() {
    let _one = serial();
    let (tx, rx) = bounded::<()>(64);
    let plugin = Plugin::new("inline-review", "0.0.1")
        .options(opts(4))
        .tool(Tool::new("take", "", move |_: Value, _: &Invocation| {
            rx.recv_timeout(GIVE_UP)
                .map_err(|_| ToolError::new("nothing was given"))?;
            Ok::<_, ToolError>(json!({ "thread": thread_name() }))
        }))
        .tool(Tool::new("give", "", move |_: Value, _: &Invocation| {
            tx.try_send(())
                .map_err(|_| ToolError::new("too much given"))?;
            Ok::<_, ToolError>(json!({ "thread": thread_name() }))
        }));
    let mut p = Conn::serve(plugin);
    // Given first, then taken: `take` never waits, so it turns quick.
    let mut last = String::new();
    for i in 0..=STREAK {
        p.invoke(format!("g{i}"), "give", json!({}));
        p.recv_until_id(&format!("\"g{i}\""));
        p.invoke(format!("t{i}"), "take", json!({}));
        let reply = p.recv_until_id(&format!("\"t{i}\"")).0;
        last = reply.data()["thread"].as_str().unwrap_or("?").to_owned();
    }
    assert_eq!(last, "executa-reader", "take is quick now");

    // Now taken first: it waits for `give`, which comes right behind it.
    p.invoke("take", "take", json!({}));
    p.invoke("give", "give", json!({}));
    let mut seen = Vec::new();
    let give = reply_within(&mut p, "give", &mut seen);
    let take = reply_within(&mut p, "take", &mut seen);
    if give.is_none() {
        // `take` gives up after GIVE_UP; then `give` is read and both end.
        let _ = reply_within(&mut p, "give", &mut seen);
    }
    p.close_stdin();
    p.wait_stopped();
    assert!(
        give.is_some() && take.is_some(),
        "take, run on the reader, waited for a request nobody read"
    );
}

/// Two requests in one read: the first runs on the reader and its reply is kept for the
/// batch; the second (the same quick tool, blocked this once) holds that reply back only
/// until its run is handed over (1-2 s): the new reader writes the batch.
#[test]
fn a_finished_reply_is_not_held_while_the_next_invoke_runs_on_the_reader() {
    let _one = serial();
    let (q_gate, q) = gate();
    let plugin = Plugin::new("inline-review", "0.0.1")
        .options(opts(4))
        .tool(held_tool("q", q_gate));
    let mut p = Conn::serve(plugin);
    warm_up(&mut p, "q");
    send_together(
        &mut p,
        &[
            invoke_line("first", "q", json!({})),
            invoke_line("second", "q", json!({ "hold": true })),
        ],
    );
    q.wait_entered();
    let mut seen = Vec::new();
    let first = reply_within(&mut p, "first", &mut seen);
    q.open();
    let second = reply_within(&mut p, "second", &mut seen);
    p.close_stdin();
    p.wait_stopped();
    assert!(second.is_some(), "second answered once let go");
    assert!(
        first.is_some(),
        "first's reply was held in the reader's batch while the second invoke ran"
    );
}

/// A panic payload that panics again as it is dropped.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("a panic payload that panics on drop");
    }
}

/// A handler's panic is the runtime's to contain, its payload included: the invoke gets
/// its -32603 and the plugin keeps serving. On the reader thread, a panic that escapes
/// the runtime's code would end reading for good (the state stays parked, the slot held).
#[test]
fn a_panic_payload_that_panics_on_drop_still_gets_a_reply_and_reading_goes_on() {
    let _one = serial();
    let plugin = Plugin::new("inline-review", "0.0.1")
        .options(opts(4))
        .tool(Tool::new("bomb", "", |args: Value, _: &Invocation| {
            if args["bomb"] == true {
                std::panic::panic_any(Bomb);
            }
            Ok::<_, ToolError>(json!({ "thread": thread_name() }))
        }));
    let mut p = Conn::serve(plugin);
    warm_up(&mut p, "bomb");
    p.invoke("boom", "bomb", json!({ "bomb": true }));
    let mut seen = Vec::new();
    let boom = reply_within(&mut p, "boom", &mut seen);
    p.request("d", "describe", None);
    let d = reply_within(&mut p, "d", &mut seen);
    assert!(boom.is_some(), "the panicking invoke got no reply");
    assert_eq!(boom.map(|m| m.error_code()), Some(-32603));
    assert!(d.is_some(), "nothing is read after the panic");
    p.close_stdin();
    p.wait_stopped();
}
