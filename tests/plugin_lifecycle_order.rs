//! Lifecycle in reading order: what `shutdown` and `initialize` decide holds for every
//! frame read after them, however soon it follows (here: in the same write), and an MCP
//! cancellation names only requests already seen. Driven over the real `everything`
//! plugin's stdio pipes, and in-process with the dispatch side held busy, so that the
//! order cannot come from the timing.

mod common;

use std::sync::{Arc, Condvar, Mutex};

use common::{Conn, EXIT_TIMEOUT, Msg};
use executa::{CreateMessage, Health, Invocation, Options, Plugin, Tool, ToolError};
use serde_json::{Value, json};

/// Every line of `frames`, each ended by LF, as one write.
fn one_write(conn: &mut Conn, frames: &[&str]) {
    let mut bytes = Vec::new();
    for frame in frames {
        bytes.extend_from_slice(frame.as_bytes());
        bytes.push(b'\n');
    }
    conn.send_raw(&bytes);
}

/// The reply with raw id `id` among `lines`; fails the test when there is none, or more.
fn reply<'a>(lines: &'a [Msg], id: &str) -> &'a Msg {
    let found: Vec<&Msg> = lines
        .iter()
        .filter(|m| m.is_response() && m.raw_id().as_deref() == Some(id))
        .collect();
    let raws: Vec<&str> = lines.iter().map(|m| m.raw.as_str()).collect();
    assert_eq!(found.len(), 1, "one reply to {id} expected among {raws:?}");
    found[0]
}

/// The refusal README promises for an invoke after `shutdown`.
fn assert_shutting_down(m: &Msg) {
    assert!(
        m.v.get("result").is_none(),
        "an invoke read after `shutdown` ran: {}",
        m.raw
    );
    assert_eq!(m.error_code(), -32000, "{}", m.raw);
    assert_eq!(m.error()["data"]["errorCode"], "SHUTTING_DOWN", "{}", m.raw);
    assert_eq!(
        m.error_message(),
        "the plugin is shutting down",
        "{}",
        m.raw
    );
}

/// Holds `health` hooks until opened: a plugin limited to one invoke at a time has two
/// dispatch threads, and while both are held nothing queued for them is handled.
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl Gate {
    /// A hook's wait: counted in, then held until [`Gate::open`].
    fn hold(&self) {
        let mut state = self.state.lock().unwrap();
        state.0 += 1;
        self.changed.notify_all();
        while !state.1 {
            state = self.changed.wait(state).unwrap();
        }
    }

    /// Waits (bounded) until `n` hooks are held.
    fn wait_held(&self, n: usize) {
        let state = self.state.lock().unwrap();
        let (state, waited) = self
            .changed
            .wait_timeout_while(state, EXIT_TIMEOUT, |s| s.0 < n)
            .unwrap();
        assert!(!waited.timed_out(), "{} of {n} hooks held", state.0);
    }

    fn open(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

/// Opens the gate when the test ends, failed or not, so no hook is left waiting.
struct Opener(Arc<Gate>);

impl Drop for Opener {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A plugin with `sample` (one sampling call) and `echo`, limited to one invoke at a time,
/// so it has two dispatch threads; both are held in `health` until the gate opens. Returns
/// it serving, with both held.
fn held_plugin() -> (Conn, Opener) {
    let gate = Arc::new(Gate::default());
    let hook = gate.clone();
    let opts = Options {
        max_concurrent_invokes: 1,
        ..Options::default()
    };
    let plugin = Plugin::new("ordered", "0.0.1")
        .capability("llm.sample")
        .options(opts)
        .health(move || {
            hook.hold();
            Health::ready()
        })
        .tool(Tool::new("sample", "", |_: Value, ctx: &Invocation| {
            let answer = ctx
                .sampling()
                .create_message(&CreateMessage::new("hi", 10))?;
            Ok::<_, ToolError>(json!({ "text": answer.text() }))
        }))
        .tool(Tool::new("echo", "", |args: Value, _: &Invocation| {
            Ok::<_, ToolError>(args)
        }));
    let mut p = Conn::serve(plugin);
    one_write(
        &mut p,
        &[
            r#"{"jsonrpc":"2.0","id":"h1","method":"health"}"#,
            r#"{"jsonrpc":"2.0","id":"h2","method":"health"}"#,
        ],
    );
    gate.wait_held(2);
    (p, Opener(gate))
}

/// After the held `health` requests are let go: their replies, then end of input.
fn release(mut p: Conn, opener: Opener, mut lines: Vec<Msg>) -> Vec<Msg> {
    drop(opener);
    for id in ["\"h1\"", "\"h2\""] {
        if !lines.iter().any(|m| m.raw_id().as_deref() == Some(id)) {
            let (m, skipped) = p.recv_until_id(id);
            lines.extend(skipped);
            lines.push(m);
        }
    }
    p.close_stdin();
    lines.extend(p.drain_to_eof());
    assert_eq!(p.wait_stopped().abandoned, 0);
    lines
}

/// `shutdown` and invokes behind it in one write, while the dispatch side, which answers
/// the `shutdown`, is held: the invokes are refused all the same, at once. Before, the
/// reader ran them (every run).
#[test]
fn invokes_read_after_shutdown_are_refused_before_it_is_handled() {
    let (mut p, opener) = held_plugin();
    one_write(
        &mut p,
        &[
            r#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"invoke","params":{"tool":"echo","arguments":{"n":2}}}"#,
            r#"{"method":"invoke","params":{"arguments":{"n":3},"tool":"echo"},"id":3,"jsonrpc":"2.0"}"#,
        ],
    );
    let mut lines = Vec::new();
    for id in ["2", "3"] {
        let (m, skipped) = p.recv_until_id(id);
        assert_shutting_down(&m);
        lines.extend(skipped);
        lines.push(m);
    }
    let lines = release(p, opener, lines);
    assert_eq!(reply(&lines, "1").result(), &json!({}));
    assert_eq!(lines.len(), 5, "{lines:?}");
}

/// A v1 `initialize` and an invoke that samples in one write, while the dispatch side is
/// held: the `initialize` is answered first, by the reader (which recorded it), and the
/// invoke sees the v1 session (-32008, and no frame to the host). Before, it sampled
/// (every run).
#[test]
fn an_invoke_read_after_a_v1_initialize_sees_v1_before_it_is_answered() {
    let (mut p, opener) = held_plugin();
    one_write(
        &mut p,
        &[
            r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"1.1","capabilities":{"sampling":{}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"tool":"sample","arguments":{}}}"#,
        ],
    );
    let first = p.recv();
    assert_eq!(first.raw_id().as_deref(), Some("\"init\""), "{}", first.raw);
    assert_eq!(first.result()["protocolVersion"], "1.1", "{}", first.raw);
    let second = p.recv();
    assert!(
        second.method().is_none(),
        "the plugin called a v1 host: {}",
        second.raw
    );
    assert_eq!(second.raw_id().as_deref(), Some("1"), "{}", second.raw);
    assert!(second.failure().contains("-32008"), "{}", second.raw);
    let lines = release(p, opener, vec![first, second]);
    assert!(lines.iter().all(|m| m.method().is_none()), "{lines:?}");
    assert_eq!(lines.len(), 4, "{lines:?}");
}

/// `shutdown` and invokes right behind it in one write: the invokes are refused
/// `SHUTTING_DOWN` (the compact form the reader may run itself, and the general form), the
/// shutdown is answered, and the plugin exits 0 at end of input. Before, the reader ran
/// the invokes while the dispatch side had yet to handle the shutdown (19 of 20 runs; the
/// held test above failed every run).
#[test]
fn invokes_in_the_same_write_as_shutdown_are_refused() {
    let mut p = Conn::spawn();
    // One exchange first, so the plugin is up and reading when the burst arrives.
    p.request(0, "describe", None);
    assert_eq!(p.recv_until_id("0").0.result()["name"], "everything");
    one_write(
        &mut p,
        &[
            r#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"invoke","params":{"tool":"echo","arguments":{"n":2}}}"#,
            r#"{"method":"invoke","params":{"arguments":{"n":3},"tool":"echo"},"id":3,"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"invoke","params":{"tool":"echo","arguments":{"n":4}}}"#,
        ],
    );
    let mut lines = Vec::new();
    for id in ["1", "2", "3", "4"] {
        if !lines
            .iter()
            .any(|m: &Msg| m.raw_id().as_deref() == Some(id))
        {
            let (m, skipped) = p.recv_until_id(id);
            lines.extend(skipped);
            lines.push(m);
        }
    }
    lines.extend(p.finish());
    assert_eq!(reply(&lines, "1").result(), &json!({}));
    for id in ["2", "3", "4"] {
        assert_shutting_down(reply(&lines, id));
    }
    assert_eq!(lines.len(), 4, "nothing else was written: {lines:?}");
}

/// The same at end of input: `shutdown` and invokes, then stdin closes at once.
#[test]
fn invokes_behind_shutdown_are_refused_at_end_of_input() {
    let mut p = Conn::spawn();
    one_write(
        &mut p,
        &[
            r#"{"jsonrpc":"2.0","id":1,"method":"shutdown"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"invoke","params":{"tool":"echo","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"invoke","params":{"tool":"echo","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"invoke","params":{"tool":"echo","arguments":{}}}"#,
        ],
    );
    let lines = p.finish();
    assert_eq!(reply(&lines, "1").result(), &json!({}));
    for id in ["2", "3", "4"] {
        assert_shutting_down(reply(&lines, id));
    }
    assert_eq!(lines.len(), 4, "{lines:?}");
}

/// A v1 `initialize` and invokes that sample, in one write: the invokes see the v1
/// session (sampling refused with -32008 `NOT_NEGOTIATED`, nothing sent to the host).
/// Before, the reader ran the first invoke before the dispatch side recorded the version,
/// and it sent `sampling/createMessage` to the v1 host (19 of 20 runs; the held test above
/// failed every run).
#[test]
fn invokes_in_the_same_write_as_a_v1_initialize_see_v1() {
    let mut p = Conn::spawn();
    p.request(0, "describe", None);
    assert_eq!(p.recv_until_id("0").0.result()["name"], "everything");
    one_write(
        &mut p,
        &[
            r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"1.1","clientInfo":{"name":"v1-host","version":"1"},"capabilities":{"sampling":{}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"tool":"sample","arguments":{"prompt":"a"},"context":{"invoke_id":"inv-1"}}}"#,
            r#"{"id":2,"jsonrpc":"2.0","method":"invoke","params":{"tool":"sample","arguments":{"prompt":"b"}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"invoke","params":{"tool":"sample","arguments":{"prompt":"c"}}}"#,
        ],
    );
    let mut seen: Vec<Msg> = Vec::new();
    while ["\"init\"", "1", "2", "3"]
        .iter()
        .any(|id| !seen.iter().any(|m| m.raw_id().as_deref() == Some(*id)))
    {
        let m = p.recv();
        assert!(
            m.method().is_none(),
            "the plugin called a v1 host: {}",
            m.raw
        );
        seen.push(m);
    }
    assert_eq!(reply(&seen, "\"init\"").result()["protocolVersion"], "1.1");
    for id in ["1", "2", "3"] {
        let failure = reply(&seen, id).failure().to_owned();
        assert!(failure.contains("-32008"), "{id}: {failure}");
    }
    assert!(p.finish().is_empty());
}

/// MCP: a cancellation names only a request already seen. One for id 7 before
/// `initialize`, or for an id answered before, is ignored: the `tools/call` with that id
/// read later is answered. Before, it suppressed that reply.
#[cfg(feature = "mcp")]
#[test]
fn a_cancellation_of_a_request_not_seen_yet_is_ignored() {
    let call = |id: u64, tag: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"tag":"{tag}"}}}}}}"#
        )
    };
    let cancel = |id: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"test"}}}}"#
        )
    };
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw-test","version":"0"}}}"#;
    let answered = |lines: &[Msg], id: &str, tag: &str| {
        let m = reply(lines, id);
        let want: Value = json!({ "tag": tag });
        assert_eq!(m.result()["structuredContent"], want, "{}", m.raw);
    };
    let mut p = Conn::spawn();
    one_write(
        &mut p,
        &[
            &cancel(7),
            init,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            &cancel(8),
            &call(7, "first"),
            &call(8, "eight"),
        ],
    );
    // The input ends right behind them: everything read before is answered.
    let lines = p.finish();
    answered(&lines, "7", "first");
    answered(&lines, "8", "eight");
    assert_eq!(lines.len(), 3, "the initialize reply, 7 and 8: {lines:?}");

    // An id answered already and cancelled after: a later call reusing it is answered.
    let mut p = Conn::spawn();
    one_write(&mut p, &[init, &call(7, "first")]);
    answered(&[p.recv_until_id("7").0], "7", "first");
    one_write(&mut p, &[&cancel(7), &call(7, "again")]);
    answered(&p.finish(), "7", "again");
}

/// A `shutdown` read while the request budget is spent (every slot holds a handler waiting
/// on the host, and a flood filled the queue and the waiting list) took effect as it was
/// read: it is answered `{}`, not refused `BUSY`, and the invoke behind it is refused
/// `SHUTTING_DOWN`. Before, it was refused `BUSY` (and had no effect).
#[test]
fn a_shutdown_read_past_the_budget_is_answered_and_holds() {
    let mut p = Conn::spawn();
    p.initialize("2.0", json!({ "sampling": {} }));
    for id in 1..=4 {
        p.invoke_ctx(
            id,
            "sample",
            json!({ "prompt": "hold" }),
            json!({ "invoke_id": format!("inv-{id}") }),
        );
    }
    let mut answers = String::new();
    for _ in 1..=4 {
        let call = p.recv_request("sampling/createMessage");
        let answer = json!({"jsonrpc": "2.0", "id": call.v["id"], "result": common::sampled("ok")});
        answers.push_str(&format!("{answer}\n"));
    }
    // 24 MiB of invokes: past the queue's and the waiting list's 8 MiB each.
    let big = json!({ "text": "x".repeat(1024 * 1024) });
    let mut burst = String::new();
    for id in 5..=28 {
        let invoke = json!({"jsonrpc": "2.0", "id": id, "method": "invoke",
                            "params": {"tool": "echo", "arguments": big}});
        burst.push_str(&format!("{invoke}\n"));
    }
    // As long as the invokes before it (unknown params are ignored), so no room left for
    // them is room for it.
    let shutdown = json!({"jsonrpc": "2.0", "id": 100, "method": "shutdown",
                          "params": {"pad": "x".repeat(1024 * 1024 + 1024)}});
    burst.push_str(&format!("{shutdown}\n"));
    burst.push_str(
        "{\"jsonrpc\":\"2.0\",\"id\":101,\"method\":\"invoke\",\"params\":{\"tool\":\"echo\",\"arguments\":{}}}\n",
    );
    burst.push_str(&answers);
    p.send_raw(burst.as_bytes());
    let mut replies = std::collections::HashMap::new();
    while replies.len() < 30 {
        let m = p.recv();
        if m.is_response() {
            let id = m.v["id"].as_u64().expect("a numeric id");
            assert!(replies.insert(id, m).is_none(), "{id} answered twice");
        }
    }
    assert_eq!(replies[&100].result(), &json!({}), "{}", replies[&100].raw);
    assert_shutting_down(&replies[&101]);
    for id in 1..=4 {
        assert_eq!(replies[&id].data()["text"], "ok", "{}", replies[&id].raw);
    }
    let mut busy = 0;
    for id in 5..=28 {
        let m = &replies[&id];
        let code = m.v.pointer("/error/data/errorCode").and_then(Value::as_str);
        busy += usize::from(code == Some("BUSY"));
        let ok = m.v.pointer("/result/success") == Some(&json!(true))
            || matches!(code, Some("BUSY" | "SHUTTING_DOWN"));
        assert!(ok, "{id}: {}", &m.raw[..m.raw.len().min(300)]);
    }
    assert!(busy >= 1, "the budget was never spent");
    assert!(p.finish().is_empty());
}

/// A pipelined `initialize` is answered before anything read after it (issue 38, item 5):
/// its reply is the first line out, though what follows it is answered on the reader
/// itself (an inline invoke). Before, the reply waited for the dispatch side, and the
/// invokes read behind it were often answered first.
#[test]
fn a_pipelined_initialize_is_answered_before_what_follows_it() {
    let mut rounds = vec![(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2.0","clientInfo":{"name":"t","version":"0"},"capabilities":{}}}"#,
        r#"{"jsonrpc":"2.0","id":ID,"method":"invoke","params":{"tool":"echo","arguments":{"n":ID}}}"#,
    )];
    if cfg!(feature = "mcp") {
        rounds.push((
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
            r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"echo","arguments":{"n":ID}}}"#,
        ));
    }
    for (init, call) in rounds {
        for round in 0..10 {
            let mut p = Conn::spawn();
            let calls: Vec<String> = (1..=20)
                .map(|i| call.replace("ID", &i.to_string()))
                .collect();
            let mut frames = vec![init];
            frames.extend(calls.iter().map(String::as_str));
            one_write(&mut p, &frames);
            let first = p.recv();
            assert_eq!(
                first.raw_id().as_deref(),
                Some("0"),
                "round {round}: the first line out is not the initialize reply: {}",
                first.raw
            );
            let rest = p.finish();
            assert_eq!(rest.len(), 20, "every call answered once: {rest:?}");
        }
    }
}
