//! Invokes on the reader thread (`Options::inline`): that a call to the host from such an
//! invoke (or from a thread it waits for, or from another handler it waits for) hands
//! reading over instead of deadlocking, and that a long run hands reading over by the
//! clock, whatever the tool did before. Served in-process over socket pairs; handlers
//! report the thread they ran on.

// What only the Linux tests (thread counts from /proc) use is unused elsewhere.
#![cfg_attr(not(target_os = "linux"), allow(unused_imports, dead_code))]

mod common;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use common::{Conn, sampled, thread_name};
use crossbeam_channel::bounded;
use executa::{CreateMessage, Invocation, Options, Plugin, Tool, ToolError};
use serde_json::{Value, json};

/// The tests count this process's `executa-reader` threads: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A plugin whose `where` tool says which thread ran it and, with `sample: true`, makes
/// one sampling call first. `limit` is `Options::inline`.
fn plugin(limit: Duration) -> Plugin {
    let opts = Options {
        inline: limit,
        ..Options::default()
    };
    Plugin::new("inline", "0.0.1")
        .capability("llm.sample")
        .options(opts)
        .tool(Tool::new("where", "", |args: Value, ctx: &Invocation| {
            let text = if args["sample"] == true {
                let timeout = Duration::from_millis(args["timeout_ms"].as_u64().unwrap_or(30_000));
                let params = json!({ "messages": [], "maxTokens": 10 });
                match ctx.call_with_timeout::<_, Value>("sampling/createMessage", &params, timeout)
                {
                    Ok(reply) => reply["content"]["text"].clone(),
                    Err(e) => json!({ "error": e.to_string() }),
                }
            } else {
                json!("")
            };
            if let Some(ms) = args["sleep_ms"].as_u64() {
                std::thread::sleep(Duration::from_millis(ms));
            }
            let id = format!("{:?}", std::thread::current().id());
            Ok::<_, ToolError>(json!({ "thread": thread_name(), "id": id, "text": text }))
        }))
}

fn start(limit: Duration) -> Conn {
    let mut p = Conn::serve(plugin(limit));
    p.initialize("2.0", json!({ "sampling": {} }));
    p
}

/// Invokes `where` and returns the thread it ran on.
fn run_where(p: &mut Conn, id: &str, args: Value) -> String {
    p.invoke(id, "where", args);
    let quoted = format!("\"{id}\"");
    let reply = p.recv_until_id(&quoted).0;
    reply.data()["thread"]
        .as_str()
        .unwrap_or_else(|| panic!("no thread in {}", reply.raw))
        .to_owned()
}

/// How many `executa-reader` threads this process has now.
#[cfg(target_os = "linux")]
fn readers() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "executa-reader")
        .count()
}

/// Waits (bounded) until the count of reader threads is as `wanted` says.
#[cfg(target_os = "linux")]
fn wait_readers(wanted: fn(usize) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !wanted(readers()) {
        assert!(
            std::time::Instant::now() < deadline,
            "{} reader threads",
            readers()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits (bounded) until exactly one reader thread is left.
#[cfg(target_os = "linux")]
fn wait_one_reader() {
    wait_readers(|n| n == 1);
}

/// Runs `where` a few times: every run is on the reader, from the first (no record).
fn warm_up(p: &mut Conn) {
    for i in 0..5 {
        assert_eq!(run_where(p, &format!("r{i}"), json!({})), "executa-reader");
    }
}

/// Invokes `where` and returns its reply's data.
fn where_data(p: &mut Conn, id: &str, args: Value) -> Value {
    p.invoke(id, "where", args);
    p.recv_until_id(&format!("\"{id}\"")).0.data().clone()
}

#[test]
#[cfg(target_os = "linux")] // counts reader threads in /proc/self/task
fn a_quick_tool_moves_to_the_reader_which_reads_the_answers_to_its_calls_itself() {
    let _one = serial();
    // A generous limit, so a loaded machine cannot make a run look slow.
    let mut p = start(Duration::from_secs(1));
    warm_up(&mut p);
    let reader = where_data(&mut p, "before", json!({}))["id"].clone();

    // On the reader, the handler calls the host. While it waits, the same thread reads
    // on: other requests are served (by the dispatch side) before the answer comes.
    p.invoke("s", "where", json!({ "sample": true }));
    let req = p.recv_request("sampling/createMessage");
    p.request("d", "describe", None);
    p.invoke("x", "where", json!({}));
    let mut early = Vec::new();
    while early.len() < 2 {
        let m = p.recv();
        assert!(m.is_response(), "{}", m.raw);
        early.push(m.raw_id().unwrap_or_default());
    }
    early.sort();
    assert_eq!(early, ["\"d\"", "\"x\""], "served while the call waited");
    p.answer(&req.v["id"], sampled("answered"));
    let reply = p.recv_until_id("\"s\"").0;
    assert_eq!(reply.data()["text"], "answered");
    assert_eq!(reply.data()["thread"], "executa-reader");
    assert_eq!(
        reply.data()["id"],
        reader,
        "the same reader thread: no hand-over"
    );

    // Its own work is quick: it stays on the reader, on the same thread.
    for i in 0..5 {
        let data = where_data(&mut p, &format!("after{i}"), json!({}));
        assert_eq!(data["id"], reader, "run {i} after the call: {data}");
    }
    wait_one_reader();
    p.close_stdin();
    p.wait_stopped();
}

/// A warmed-up plugin whose reader runs invoke `s` of `where` with `args` and waits in
/// its sampling call (the request has been read).
fn sampling_on_the_reader(args: Value) -> Conn {
    let mut p = start(Duration::from_secs(1));
    warm_up(&mut p);
    p.invoke("s", "where", args);
    p.recv_request("sampling/createMessage");
    p
}

/// The error text a `where` reply reports for its failed call.
fn call_error(reply: &common::Msg) -> String {
    reply.data()["text"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_call_read_by_the_reader_itself_still_times_out_and_reading_goes_on() {
    let _one = serial();
    let mut p = sampling_on_the_reader(json!({ "sample": true, "timeout_ms": 300 }));
    // Never answered.
    let reply = p.recv_until_id("\"s\"").0;
    assert!(call_error(&reply).contains("timed out"), "{}", reply.raw);
    assert_eq!(reply.data()["thread"], "executa-reader");
    p.request("d", "describe", None);
    p.recv_until_id("\"d\"");
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn end_of_input_while_the_reader_waits_on_the_host_fails_the_call_and_ends() {
    let _one = serial();
    let mut p = sampling_on_the_reader(json!({ "sample": true }));
    p.close_stdin();
    let reply = p.recv_until_id("\"s\"").0;
    assert!(call_error(&reply).contains("closed stdin"), "{}", reply.raw);
    let stopped = p.wait_stopped();
    assert_eq!(stopped.reason, executa::StopReason::InputClosed);
}

#[test]
#[cfg(target_os = "linux")] // counts reader threads in /proc/self/task
fn a_slow_run_hands_reading_over_and_leaves_no_record() {
    let _one = serial();
    let mut p = start(Duration::from_millis(50));
    warm_up(&mut p);
    let slow = where_data(&mut p, "slow", json!({ "sleep_ms": 800 }));
    assert_eq!(
        slow["thread"], "executa-reader",
        "the reader cannot know in advance"
    );
    let before = slow["id"].clone();
    wait_one_reader();
    // The next runs are on the reader again, on the new reader thread.
    let after = where_data(&mut p, "after", json!({}));
    assert_eq!(after["thread"], "executa-reader", "{after}");
    assert_ne!(after["id"], before, "reading moved to a new thread");
    p.close_stdin();
    p.wait_stopped();
}

/// End of input while a run handed over is still going: the plugin stops as soon as that
/// run is answered, not when the grace period runs out (it waited the whole grace: the
/// old reader's slot was given back without a word to the draining main thread).
#[test]
#[cfg(target_os = "linux")] // counts reader threads in /proc/self/task
fn end_of_input_during_a_handed_over_run_stops_when_the_run_ends() {
    let _one = serial();
    let grace = Duration::from_secs(120);
    let mut p = Conn::serve(plugin(Duration::from_millis(20)).options(Options {
        inline: Duration::from_millis(20),
        grace,
        ..Options::default()
    }));
    warm_up(&mut p);
    p.invoke("slow", "where", json!({ "sleep_ms": 1_000 }));
    // Reading moves to a new reader (by the timer) while the run goes on: the run's old
    // reader and the one reading now. That reader then meets the end of input.
    wait_readers(|n| n >= 2);
    p.close_stdin();
    let reply = p.recv_until_id("\"slow\"").0;
    assert_eq!(reply.data()["thread"], "executa-reader", "{}", reply.raw);
    let stopped = p.wait_stopped();
    assert_eq!(stopped.reason, executa::StopReason::InputClosed);
    assert_eq!(
        stopped.abandoned, 0,
        "the run ended within the grace period"
    );
}

#[test]
fn with_inline_zero_nothing_runs_on_the_reader() {
    let _one = serial();
    let mut p = start(Duration::ZERO);
    runs_off_the_reader(&mut p, "z", 24);
    p.close_stdin();
    p.wait_stopped();
}

/// The promise of `Options::inline`: a tool that was quick forty times and is then slow
/// once holds up no other request for longer than its limit. The slow run waits until the
/// test has the other replies (a gate), so a reader stuck behind it would never answer; the
/// bound (half a second against the default 6 ms) leaves room for a loaded machine and is
/// far below the second the old watchdog took.
#[test]
fn requests_behind_a_long_run_on_the_reader_are_answered_at_once() {
    let _one = serial();
    let (open_tx, open_rx) = bounded::<()>(1);
    let open_rx = Mutex::new(open_rx);
    let plugin = Plugin::new("hol", "0.0.1").tool(Tool::new(
        "gate",
        "",
        move |args: Value, _: &Invocation| {
            if args["hold"] == true {
                open_rx
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(60))
                    .map_err(|_| ToolError::new("never opened"))?;
            }
            Ok::<_, ToolError>(json!({ "thread": thread_name() }))
        },
    ));
    let mut p = Conn::serve(plugin);
    for i in 0..40 {
        p.invoke(format!("q{i}"), "gate", json!({}));
        p.recv_until_id(&format!("\"q{i}\""));
    }
    p.invoke("held", "gate", json!({ "hold": true }));
    for round in 0..3 {
        let sent = std::time::Instant::now();
        p.request(format!("h{round}"), "health", None);
        p.invoke(format!("e{round}"), "gate", json!({}));
        let mut ids = vec![p.recv().raw_id(), p.recv().raw_id()];
        let waited = sent.elapsed();
        ids.sort();
        let want = [format!("\"e{round}\""), format!("\"h{round}\"")];
        assert_eq!(ids, want.map(Some), "round {round}");
        assert!(
            waited < Duration::from_millis(500),
            "round {round}: answered after {waited:?} behind a held handler"
        );
    }
    open_tx.send(()).unwrap();
    let held = p.recv_until_id("\"held\"").0;
    assert_eq!(held.data()["thread"], "executa-reader", "{}", held.raw);
    p.close_stdin();
    p.wait_stopped();
}

/// Requests read together wait for each other's runs: the second of two invokes read in
/// one go with a `health` still runs on the reader (the first took less than the limit),
/// but it is timed from the first run's start, so the `health` behind both waits the limit
/// in all (2 s here), not the first run and then a limit of the second's own (3.8 s). The
/// first reply, held with the replies of its read, leaves with the hand-over too.
#[test]
fn what_waits_behind_runs_read_together_waits_the_limit_once() {
    let _one = serial();
    let mut p = start(Duration::from_secs(2));
    warm_up(&mut p);
    let invoke = |id: &str, ms: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "invoke",
               "params": {"tool": "where", "arguments": {"sleep_ms": ms}}})
        .to_string()
    };
    let health = json!({"jsonrpc": "2.0", "id": "h", "method": "health"}).to_string();
    let sent = std::time::Instant::now();
    p.send_raw(format!("{}\n{}\n{health}\n", invoke("a", 1800), invoke("b", 4000)).as_bytes());
    let (_, before) = p.recv_until_id("\"h\"");
    let waited = sent.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "health answered after {waited:?} behind two runs"
    );
    // The first reply may have come before the `health` or after it.
    let a = match before
        .into_iter()
        .find(|m| m.raw_id().as_deref() == Some("\"a\""))
    {
        Some(a) => a,
        None => p.recv_until_id("\"a\"").0,
    };
    assert_eq!(a.data()["thread"], "executa-reader", "{}", a.raw);
    let b = p.recv_until_id("\"b\"").0;
    assert_eq!(b.data()["thread"], "executa-reader", "{}", b.raw);
    p.close_stdin();
    p.wait_stopped();
}

/// Runs `where` `n` times; none may run on the reader.
fn runs_off_the_reader(p: &mut Conn, prefix: &str, n: usize) {
    for i in 0..n {
        let t = run_where(p, &format!("{prefix}{i}"), json!({}));
        assert_ne!(t, "executa-reader", "run {prefix}{i}");
    }
}

/// A handler on the reader that waits for a thread it spawned, which calls the host; and
/// one that waits for another handler that calls the host. Both would deadlock if reading
/// were not handed over.
#[test]
#[cfg(target_os = "linux")] // counts reader threads in /proc/self/task
fn a_call_from_a_thread_the_reader_waits_for_is_answered() {
    let _one = serial();
    let (started_tx, started_rx) = bounded::<()>(1);
    let (done_tx, done_rx) = bounded::<()>(1);
    let started_rx = Arc::new(Mutex::new(started_rx));
    let done_rx = Arc::new(Mutex::new(done_rx));
    let opts = Options {
        inline: Duration::from_secs(1),
        ..Options::default()
    };
    let plugin = Plugin::new("inline", "0.0.1")
        .capability("llm.sample")
        .options(opts)
        // Spawns a thread that calls the host and joins it; warmed up with `call: false`.
        .tool(Tool::new("spawner", "", |args: Value, ctx: &Invocation| {
            if args["call"] != true {
                return Ok::<_, ToolError>(json!({ "thread": thread_name() }));
            }
            let handle = ctx.handle();
            let helper = std::thread::spawn(move || {
                handle.call::<_, Value>(
                    "sampling/createMessage",
                    &json!({ "messages": [], "maxTokens": 5 }),
                )
            });
            let answer = helper
                .join()
                .map_err(|_| ToolError::new("helper panicked"))?
                .map_err(|e| ToolError::new(e.to_string()))?;
            Ok(json!({ "thread": thread_name(), "answer": answer }))
        }))
        // Waits until `waiter` runs, then calls the host, then lets `waiter` finish.
        .tool(Tool::new(
            "caller",
            "",
            move |_: Value, ctx: &Invocation| {
                let started = started_rx.lock().unwrap();
                started
                    .recv_timeout(Duration::from_secs(30))
                    .map_err(|_| ToolError::new("waiter never started"))?;
                let reply = ctx
                    .sampling()
                    .create_message(&CreateMessage::new("hi", 10))
                    .map_err(|e| ToolError::new(e.to_string()))?;
                let _ = done_tx.send(());
                Ok::<_, ToolError>(json!({ "text": reply.text() }))
            },
        ))
        // Warmed up with `wait: false`; with `wait: true` it waits for `caller` to finish.
        .tool(Tool::new(
            "waiter",
            "",
            move |args: Value, _: &Invocation| {
                if args["wait"] == true {
                    let _ = started_tx.send(());
                    done_rx
                        .lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(30))
                        .map_err(|_| ToolError::new("deadlocked: caller never finished"))?;
                }
                Ok::<_, ToolError>(json!({ "thread": thread_name() }))
            },
        ));
    let mut p = Conn::serve(plugin);
    p.initialize("2.0", json!({ "sampling": {} }));
    for tool in ["spawner", "waiter"] {
        p.invoke(format!("{tool}0"), tool, json!({}));
        let reply = p.recv_until_id(&format!("\"{tool}0\"")).0;
        assert_eq!(
            reply.data()["thread"],
            "executa-reader",
            "{tool} runs on the reader"
        );
    }

    // The spawned helper's call.
    p.invoke("sp", "spawner", json!({ "call": true }));
    let req = p.recv_request("sampling/createMessage");
    p.answer(&req.v["id"], sampled("from the helper"));
    let reply = p.recv_until_id("\"sp\"").0;
    assert_eq!(reply.data()["thread"], "executa-reader");
    assert_eq!(reply.data()["answer"]["content"]["text"], "from the helper");
    wait_one_reader();

    // `caller` runs on the reader and waits for `waiter`, which nobody reads until the
    // timer hands reading over (after the 1 s limit); `waiter` then runs elsewhere, and
    // `caller`'s call is read by the new reader.
    p.invoke("c", "caller", json!({}));
    p.invoke("w", "waiter", json!({ "wait": true }));
    let req = p.recv_request("sampling/createMessage");
    p.answer(&req.v["id"], sampled("to the caller"));
    let mut replies = Vec::new();
    while replies.len() < 2 {
        let m = p.recv();
        assert!(m.is_response(), "{}", m.raw);
        replies.push(m);
    }
    replies.sort_by_key(|m| m.raw_id());
    assert_eq!(
        replies[0].data()["text"],
        "to the caller",
        "{}",
        replies[0].raw
    );
    assert!(
        replies[1].data()["thread"].is_string(),
        "{}",
        replies[1].raw
    );
    wait_one_reader();
    p.close_stdin();
    p.wait_stopped();
}
