//! How work moves through the real `everything` plugin under overload, over real pipes:
//! bursts are served completely, a flood while handlers wait on the host loses nothing,
//! shutdown answers queued invokes at once, and a closed stdout ends the plugin as soon as
//! its handlers end. Every wait is for an event, with generous bounds (CI machines are
//! loaded); no assertion is about speed.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{Conn, EXIT_TIMEOUT, RECV_TIMEOUT, everything_bin, sampled};
use serde_json::{Value, json};

fn invoke_line(id: u64, tool: &str, arguments: &Value) -> String {
    format!(
        "{}\n",
        json!({"jsonrpc":"2.0","id":id,"method":"invoke",
               "params":{"tool":tool,"arguments":arguments,"context":{"invoke_id":format!("inv-{id}")}}})
    )
}

/// A plugin driven by hand: the test decides when stdout is read.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Raw {
    fn spawn() -> Raw {
        let mut child = Command::new(everything_bin())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn everything");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Raw {
            child,
            stdin,
            stdout,
        }
    }

    /// Writes `bytes` from a separate thread (the write blocks while the plugin holds the
    /// flood back) and returns the stdin handle when done.
    fn write_in_background(&mut self, bytes: Vec<u8>) -> thread::JoinHandle<ChildStdin> {
        let mut stdin = self.stdin.take().expect("stdin");
        thread::spawn(move || {
            stdin.write_all(&bytes).expect("write the flood");
            stdin.flush().expect("flush");
            stdin
        })
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).expect("read stdout");
        assert!(n > 0, "the plugin closed stdout early");
        serde_json::from_str(&line).expect("a JSON line")
    }

    fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the plugin did not exit in time");
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads replies until every id in `ids` has exactly one, asserting that none repeats.
fn collect_replies(read: &mut dyn FnMut() -> Value, count: usize) -> HashMap<u64, Value> {
    let mut replies = HashMap::new();
    while replies.len() < count {
        let v = read();
        if v.get("method").is_some() {
            continue; // a reverse request or progress: not a reply
        }
        let id = v["id"].as_u64().expect("a numeric id");
        assert!(replies.insert(id, v).is_none(), "id {id} answered twice");
    }
    replies
}

fn burst_is_served_completely(tool: &str, arguments: Value, n: u64) {
    let mut p = Raw::spawn();
    let mut flood = String::new();
    for id in 1..=n {
        flood.push_str(&invoke_line(id, tool, &arguments));
    }
    let writer = p.write_in_background(flood.into_bytes());
    let replies = collect_replies(&mut || p.read(), n as usize);
    for id in 1..=n {
        let r = &replies[&id];
        assert_eq!(r["result"]["success"], json!(true), "id {id}: {r}");
    }
    drop(writer.join().expect("writer thread"));
    let status = p.wait_exit(EXIT_TIMEOUT);
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_burst_of_20000_echo_invokes_is_served_completely() {
    burst_is_served_completely("echo", json!({"text":"hi"}), 20_000);
}

#[test]
fn a_burst_of_3000_sleeping_invokes_is_served_completely() {
    burst_is_served_completely("sleep", json!({"ms":1}), 3_000);
}

/// Starts `everything` with `calls` `sample` invokes (ids 1 to `calls`) waiting on the
/// host; returns it, its stdin, and the answers those calls wait for, as frames.
fn with_calls_waiting(calls: u64) -> (Raw, ChildStdin, String) {
    let mut p = Raw::spawn();
    let mut stdin = p.stdin.take().expect("stdin");
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2.0","clientInfo":{"name":"test"},"capabilities":{"sampling":{}}}});
    writeln!(stdin, "{init}").unwrap();
    assert_eq!(p.read()["id"], json!(0));
    for id in 1..=calls {
        stdin
            .write_all(invoke_line(id, "sample", &json!({"prompt":"hi"})).as_bytes())
            .unwrap();
    }
    let mut answers = String::new();
    for _ in 0..calls {
        let v = p.read();
        assert_eq!(v["method"], json!("sampling/createMessage"), "{v}");
        let answer = json!({"jsonrpc":"2.0","id":v["id"],"result":{
            "role":"assistant","content":{"type":"text","text":"ok"},"model":"m","stopReason":"endTurn"}});
        answers.push_str(&format!("{answer}\n"));
    }
    (p, stdin, answers)
}

#[test]
fn a_flood_while_handlers_wait_on_the_host_and_stdout_goes_unread_loses_nothing() {
    // Four invokes that each wait on the host for a sampling answer.
    let (mut p, stdin, answers) = with_calls_waiting(4);
    // The flood, then (behind it in the same pipe) the answers the handlers wait for.
    let n = 6_000u64;
    let mut flood = String::new();
    for id in 5..5 + n {
        flood.push_str(&invoke_line(id, "echo", &json!({"i":id})));
    }
    flood.push_str(&answers);
    p.stdin = Some(stdin);
    let writer = p.write_in_background(flood.into_bytes());
    // The host does not read stdout for three seconds.
    thread::sleep(Duration::from_secs(3));
    let replies = collect_replies(&mut || p.read(), (n + 4) as usize);
    let busy = replies
        .values()
        .filter(|r| r["error"]["data"]["errorCode"] == json!("BUSY"))
        .count();
    for id in 1..5 + n {
        let r = &replies[&id];
        let ok = r["result"]["success"] == json!(true)
            || r["error"]["data"]["errorCode"] == json!("BUSY");
        assert!(ok, "id {id}: {r}");
    }
    for id in 1..=4 {
        assert_eq!(
            replies[&id]["result"]["success"],
            json!(true),
            "sample {id}"
        );
    }
    assert_eq!(busy, 0, "0.56 MB is far below the budget");
    drop(writer.join().expect("writer thread"));
    assert_eq!(p.wait_exit(EXIT_TIMEOUT).code(), Some(0));
}

/// Starts `everything` with `calls` `sample` invokes (ids 1 to `calls`) waiting on the
/// host, then writes `frames` (one write each, or all in one) followed by the answers to
/// those calls, reading stdout all the while. Returns every reply by id (each id once)
/// and how many were refused `BUSY`.
fn burst_while_calls_wait(
    calls: u64,
    frames: Vec<String>,
    one_write: bool,
) -> (HashMap<u64, Value>, usize) {
    let (mut p, mut stdin, answers) = with_calls_waiting(calls);
    let n = frames.len();
    let writer = thread::spawn(move || {
        if one_write {
            stdin
                .write_all(frames.concat().as_bytes())
                .expect("write the burst");
        } else {
            for frame in &frames {
                stdin.write_all(frame.as_bytes()).expect("write a frame");
            }
        }
        stdin
            .write_all(answers.as_bytes())
            .expect("write the answers");
        stdin
    });
    let replies = collect_replies(&mut || p.read(), n + calls as usize);
    let busy = replies
        .values()
        .filter(|r| r["error"]["data"]["errorCode"] == json!("BUSY"))
        .count();
    for id in 1..=calls {
        assert_eq!(
            replies[&id]["result"]["success"],
            json!(true),
            "sample {id}"
        );
    }
    drop(writer.join().expect("writer thread"));
    assert_eq!(p.wait_exit(EXIT_TIMEOUT).code(), Some(0));
    (replies, busy)
}

/// Invokes of `tool` with ids from `first`, `n` of them.
fn frames(first: u64, n: u64, tool: &str, arguments: &Value) -> Vec<String> {
    (first..first + n)
        .map(|id| invoke_line(id, tool, arguments))
        .collect()
}

/// Below the budget nothing is refused, whatever the count of requests, how they are
/// written, and how many handlers wait on the host (the queue used to be 128 jobs long,
/// and 70 of 200 such invokes were refused).
#[test]
fn no_busy_below_the_budget_while_calls_wait_on_the_host() {
    let sleep = json!({"ms":1});
    let shapes: [(u64, u64, &str, &Value, bool); 5] = [
        (1, 200, "sleep", &sleep, false),
        (1, 1_000, "sleep", &sleep, false),
        (1, 500, "sleep", &sleep, true),
        (4, 2_000, "echo", &json!({"text":"hi"}), false),
        (4, 6_000, "echo", &json!({"text":"hi"}), true),
    ];
    for (calls, n, tool, args, one_write) in shapes {
        let (replies, busy) =
            burst_while_calls_wait(calls, frames(calls + 1, n, tool, args), one_write);
        assert_eq!(
            busy,
            0,
            "{calls} call(s) waiting, {n} `{tool}` in {}",
            if one_write {
                "one write"
            } else {
                "one write each"
            }
        );
        for id in calls + 1..=calls + n {
            assert_eq!(replies[&id]["result"]["success"], json!(true), "id {id}");
        }
    }
}

/// Past the budget (the queue's 8 MiB and the waiting list's 8 MiB, while every slot holds
/// a handler waiting on the host), requests are refused `BUSY`, and each still gets one
/// reply.
#[test]
fn busy_past_the_budget_and_every_id_answered_once() {
    let big = json!({"text": "x".repeat(1024 * 1024)});
    let n = 24;
    let (replies, busy) = burst_while_calls_wait(4, frames(5, n, "echo", &big), false);
    assert!(busy >= 1, "24 MiB while 4 calls wait: none refused");
    for id in 5..5 + n {
        let r = &replies[&id];
        let ok = r["result"]["success"] == json!(true)
            || r["error"]["data"]["errorCode"] == json!("BUSY");
        assert!(ok, "id {id}: {}", r.to_string().len());
    }
    eprintln!("{busy} of {n} 1 MiB invokes refused as BUSY");
}

/// Fills the four invoke slots with `sleep ms` handlers (ids 1-4), then queues `echo`
/// invokes with ids 5 to `last`; returns once the plugin has read them all.
fn fill_slots_and_queue(p: &mut Conn, ms: u64, last: u64) {
    for id in 1..=4 {
        p.invoke(id, "sleep", json!({ "ms": ms }));
    }
    // `health` is answered by the spare thread: proof the four are running.
    p.request(99, "health", None);
    p.recv_until_id("99");
    for id in 5..=last {
        p.invoke(id, "echo", json!({ "i": id }));
    }
    p.request(100, "health", None);
    p.recv_until_id("100");
}

#[test]
#[cfg(unix)]
fn sigterm_answers_queued_invokes_at_once() {
    let mut p = Conn::spawn();
    // Four handlers that outlive the grace period fill every slot; six more wait.
    fill_slots_and_queue(&mut p, 30_000, 10);
    p.sigterm();
    let mut refused = Vec::new();
    while refused.len() < 6 {
        let m = p.recv();
        assert_eq!(m.error_code(), -32000, "{}", m.raw);
        assert_eq!(m.error()["data"]["errorCode"], json!("SHUTTING_DOWN"));
        refused.push(m.raw_id().unwrap());
    }
    refused.sort();
    assert_eq!(refused, ["10", "5", "6", "7", "8", "9"]);
    // The four stuck handlers are abandoned at the end of the grace period; exit is 0.
    assert_eq!(p.wait_exit().code(), Some(0));
}

#[test]
fn end_of_input_answers_invokes_waiting_for_a_slot_at_once() {
    let mut p = Conn::spawn();
    fill_slots_and_queue(&mut p, 1_500, 7);
    p.close_stdin();
    let rest = p.drain_to_eof();
    let mut by_id: HashMap<String, &common::Msg> = HashMap::new();
    for m in &rest {
        assert!(
            by_id.insert(m.raw_id().unwrap(), m).is_none(),
            "answered twice"
        );
    }
    for id in ["1", "2", "3", "4"] {
        assert_eq!(
            by_id[id].result()["success"],
            json!(true),
            "running invoke {id}"
        );
    }
    for id in ["5", "6", "7"] {
        assert_eq!(
            by_id[id].error()["data"]["errorCode"],
            json!("SHUTTING_DOWN")
        );
    }
    // The refusals come before the running invokes end.
    let first_sleep = rest.iter().position(|m| m.raw_id().as_deref() == Some("1"));
    let last_refusal = rest
        .iter()
        .rposition(|m| m.raw_id().as_deref() == Some("7"));
    assert!(
        last_refusal < first_sleep,
        "refused at once, not after the slots freed"
    );
    assert_eq!(p.wait_exit().code(), Some(0));
}

/// A command that exits at once, writing nothing.
fn done_command() -> Command {
    if cfg!(windows) {
        let mut cmd = Command::new("cmd");
        cmd.args(["/C", "exit 0"]);
        cmd
    } else {
        Command::new("true")
    }
}

#[test]
fn the_plugin_exits_once_its_handlers_end_after_the_host_closes_its_stdout() {
    let mut p = Raw::spawn();
    let mut stdin = p.stdin.take().expect("stdin");
    stdin
        .write_all(invoke_line(1, "sleep", &json!({"ms":100})).as_bytes())
        .unwrap();
    stdin
        .write_all(invoke_line(2, "sleep", &json!({"ms":600})).as_bytes())
        .unwrap();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":3,"method":"health"}}"#).unwrap();
    stdin.flush().unwrap();
    assert_eq!(p.read()["id"], json!(3), "both invokes were taken");
    // The host closes our stdout and keeps stdin open.
    let closed = Instant::now();
    drop(std::mem::replace(
        &mut p.stdout,
        BufReader::new(
            done_command()
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
                .stdout
                .take()
                .unwrap(),
        ),
    ));
    // ...and goes on writing requests, which can no longer be answered.
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let still = writing.clone();
    let writer = thread::spawn(move || {
        let mut id = 100u64;
        while still.load(std::sync::atomic::Ordering::SeqCst) {
            id += 1;
            let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"health\"}}\n");
            if stdin.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
    });
    let status = p.wait_exit(Duration::from_secs(10));
    let took = closed.elapsed();
    writing.store(false, std::sync::atomic::Ordering::SeqCst);
    let _ = writer.join();
    assert_eq!(status.code(), Some(0));
    // The grace period is 4 s; the last handler ends at 0.6 s. Well under the grace,
    // with a margin for a loaded machine, says it did not wait for the grace.
    assert!(took < Duration::from_millis(3_000), "exited after {took:?}");
    assert!(
        took >= Duration::from_millis(400),
        "exited before its handler ended"
    );
}

#[test]
fn oversized_frames_with_non_scalar_ids_are_answered_with_null() {
    let mut p = Conn::spawn();
    let bulk = "x".repeat(17 * 1024 * 1024);
    for id in [r#"{"a":1}"#, "true", "[1,2]"] {
        p.send_line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{"tool":"echo","arguments":{{"t":"{bulk}"}}}}}}"#
        ));
        let m = p.recv();
        assert_eq!(m.raw_id().as_deref(), Some("null"), "{}", m.raw);
        assert_eq!(m.error()["data"]["errorCode"], json!("frame_too_large"));
    }
    // A scalar id is still echoed.
    p.send_line(&format!(
        r#"{{"jsonrpc":"2.0","id":"s-1","method":"invoke","params":{{"tool":"echo","arguments":{{"t":"{bulk}"}}}}}}"#
    ));
    assert_eq!(p.recv().raw_id().as_deref(), Some("\"s-1\""));
    let _ = RECV_TIMEOUT;
    p.finish();
}

/// An oversized frame is answered `frame_too_large` unless its id belongs to a call of
/// ours that is actually waiting. An id of the runtime's own shape (`"ex-77"`) with the
/// `method` past the head used to get no reply at all.
#[test]
fn an_oversized_frame_with_an_id_of_our_shape_but_no_call_waiting_is_answered() {
    let mut p = Conn::spawn();
    let bulk = "x".repeat(17 * 1024 * 1024);
    p.send_line(&format!(
        r#"{{"jsonrpc":"2.0","id":"ex-77","params":{{"tool":"echo","arguments":{{"t":"{bulk}"}}}},"method":"invoke"}}"#
    ));
    let m = p.recv();
    assert_eq!(m.raw_id().as_deref(), Some("\"ex-77\""), "{}", m.raw);
    assert_eq!(m.error()["data"]["errorCode"], json!("frame_too_large"));
    p.finish();
}

/// A host request over the limit whose id is that of a call of ours actually waiting, with
/// its `method` past the head but `params` in it, is a request: it is answered
/// `frame_too_large`, and the call waits on for its real answer. (It used to be taken as
/// that call's answer: the request got no reply and the call failed.)
#[test]
fn an_oversized_request_with_the_id_of_a_waiting_call_is_answered_and_the_call_waits_on() {
    let mut p = Conn::spawn();
    p.invoke_ctx(
        1,
        "sample",
        json!({ "prompt": "hi" }),
        json!({ "invoke_id": "i-1" }),
    );
    let call = p.recv_request("sampling/createMessage");
    let ours = call.raw_id().expect("the call has an id");
    let bulk = "x".repeat(17 * 1024 * 1024);
    p.send_line(&format!(
        r#"{{"jsonrpc":"2.0","id":{ours},"params":{{"t":"{bulk}"}},"method":"health"}}"#
    ));
    let m = p.recv();
    assert_eq!(m.raw_id().as_deref(), Some(ours.as_str()), "{}", m.raw);
    assert_eq!(m.error()["data"]["errorCode"], json!("frame_too_large"));
    p.answer(&call.v["id"], sampled("yo"));
    let reply = p.recv_until_id("1").0;
    assert_eq!(reply.data()["text"], "yo", "{}", reply.raw);
    p.finish();
}

/// A small deterministic PRNG (xorshift64*), so a failing case can be replayed by its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    Eof,
    Sigterm,
    CloseStdout,
}

/// One random session against the real plugin: requests of every kind (quick, slow,
/// waiting on the host, malformed), answers to reverse calls (or none, or errors), read
/// stalls, and one of the three endings. Returns a description of any broken promise.
fn random_session(seed: u64) -> Result<(), String> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    let mut rng = Rng(seed | 1);
    // Replaying one seed shows the plugin's log.
    let replay = std::env::var_os("EXECUTA_FLOW_SEED").is_some();
    let mut child = Command::new(everything_bin())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(if replay {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .env("EXECUTA_LOG", if replay { "debug" } else { "warn" })
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    // One thread owns stdin, fed without blocking by the test and by the stdout reader
    // (answers to reverse calls). It closes stdin when the test's channel closes.
    let (to_stdin, lines_in) = crossbeam_channel::unbounded::<String>();
    let (answers, answers_in) = crossbeam_channel::unbounded::<String>();
    let writer = thread::spawn(move || {
        let mut answers_in = answers_in;
        loop {
            let line = crossbeam_channel::select! {
                recv(lines_in) -> l => match l { Ok(l) => l, Err(_) => return },
                recv(answers_in) -> l => match l {
                    Ok(l) => l,
                    Err(_) => {
                        answers_in = crossbeam_channel::never();
                        continue;
                    }
                },
            };
            if stdin.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
    });
    // The stdout reader: records replies, answers reverse calls, stalls when told to.
    let pause_until_ms = Arc::new(AtomicU64::new(0));
    let stop_reading = Arc::new(AtomicBool::new(false));
    let replies: Arc<Mutex<Vec<Value>>> = Arc::default();
    let reader = {
        let (pause, stop, replies) = (
            pause_until_ms.clone(),
            stop_reading.clone(),
            replies.clone(),
        );
        let mut answer_rng = Rng(seed.rotate_left(17) | 1);
        let t0 = Instant::now();
        thread::spawn(move || {
            let mut out = BufReader::new(stdout);
            let mut line = String::new();
            loop {
                while (t0.elapsed().as_millis() as u64) < pause.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(1));
                }
                if stop.load(Ordering::SeqCst) {
                    return; // dropping `out` closes the plugin's stdout
                }
                line.clear();
                match out.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let v: Value = match serde_json::from_str(&line) {
                    Ok(v) => v,
                    Err(e) => {
                        replies
                            .lock()
                            .unwrap()
                            .push(json!({"bad_line": line.clone(), "why": e.to_string()}));
                        continue;
                    }
                };
                if v.get("method").is_some() {
                    if let Some(rid) = v.get("id") {
                        let answer = match answer_rng.below(4) {
                            0 => None, // never answered: the call times out or fails at shutdown
                            1 => Some(
                                json!({"jsonrpc":"2.0","id":rid,"error":{"code":-32603,"message":"no"}}),
                            ),
                            _ => Some(
                                json!({"jsonrpc":"2.0","id":rid,"result":{"role":"assistant",
                                "content":{"type":"text","text":"ok"},"model":"m","stopReason":"endTurn"}}),
                            ),
                        };
                        if let Some(a) = answer {
                            let _ = answers.send(format!("{a}\n"));
                        }
                    }
                    continue;
                }
                replies.lock().unwrap().push(v);
            }
        })
    };
    let init = json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{
        "protocolVersion":"2.0","clientInfo":{"name":"fuzz"},"capabilities":{"sampling":{}}}});
    let _ = to_stdin.send(format!("{init}\n"));
    let mut sent: Vec<Value> = vec![json!("init")];
    let mut malformed = 0usize;
    let end = match rng.below(3) {
        0 => End::Eof,
        // No signal outside Unix (Windows' console events cannot be sent to a process
        // without a console): end of input instead.
        1 if cfg!(unix) => End::Sigterm,
        1 => End::Eof,
        _ => End::CloseStdout,
    };
    if end == End::Sigterm {
        sent.push(json!("barrier"));
    }
    let steps = 5 + rng.below(60);
    let end_at = rng.below(steps + 1);
    let t0 = Instant::now();
    let mut ended = false;
    for step in 0..steps {
        if step == end_at && end == End::CloseStdout {
            stop_reading.store(true, Ordering::SeqCst);
            ended = true;
        }
        if step == end_at && end == End::Sigterm {
            // Everything sent so far has been read once `health` behind it is answered;
            // then the signal. Nothing is sent after it (a request still in the pipe when
            // the plugin exits is never read, so it cannot be answered).
            sigterm_after_barrier(&child, &to_stdin, &replies, seed)?;
            ended = true;
            break;
        }
        let id = if rng.below(5) == 0 {
            json!(format!("s-{step}"))
        } else {
            json!(step)
        };
        let line = match rng.below(11) {
            10 => {
                // A burst: more than the queues hold, often while handlers wait on the
                // host and the reader above stalls.
                let mut burst = String::new();
                for k in 0..500 + rng.below(2500) {
                    let id = json!(format!("b-{step}-{k}"));
                    burst.push_str(&invoke_line_any(&id, "echo", &json!({"k": k})));
                    sent.push(id);
                }
                let _ = to_stdin.send(burst);
                continue;
            }
            0..=2 => invoke_line_any(&id, "echo", &json!({"step": step})),
            3 => invoke_line_any(&id, "sleep", &json!({"ms": rng.below(30)})),
            4 | 5 => invoke_line_any(&id, "sample", &json!({"prompt": "hi"})),
            6 => format!("{}\n", json!({"jsonrpc":"2.0","id":id,"method":"health"})),
            7 => format!("{}\n", json!({"jsonrpc":"2.0","id":id,"method":"no/such"})),
            8 => {
                malformed += 1;
                let _ = to_stdin.send("{not json\n".into());
                continue;
            }
            _ => {
                let ms = rng.below(300);
                let now = t0.elapsed().as_millis() as u64;
                pause_until_ms.store(now + ms, Ordering::SeqCst);
                continue;
            }
        };
        sent.push(id);
        let _ = to_stdin.send(line);
    }
    if !ended && end == End::Sigterm {
        sigterm_after_barrier(&child, &to_stdin, &replies, seed)?;
    }
    if end == End::CloseStdout && !ended {
        stop_reading.store(true, Ordering::SeqCst);
    }
    drop(to_stdin);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("seed {seed}: the plugin did not exit ({end:?})"));
        }
        thread::sleep(Duration::from_millis(5));
    };
    let _ = writer.join();
    let _ = reader.join();
    if status.code() != Some(0) {
        return Err(format!("seed {seed}: exit status {status} ({end:?})"));
    }
    let replies = replies.lock().unwrap();
    let mut count: HashMap<String, usize> = HashMap::new();
    for r in replies.iter() {
        if r.get("bad_line").is_some() {
            return Err(format!("seed {seed}: a line that is not JSON: {r}"));
        }
        let id = r
            .get("id")
            .ok_or_else(|| format!("seed {seed}: a reply without id: {r}"))?;
        if !(id.is_string() || id.is_number() || id.is_null()) {
            return Err(format!("seed {seed}: a non-scalar id: {r}"));
        }
        *count.entry(id.to_string()).or_default() += 1;
    }
    let closed = end == End::CloseStdout;
    for id in &sent {
        let n = count.remove(&id.to_string()).unwrap_or(0);
        if n > 1 || (n == 0 && !closed) {
            return Err(format!("seed {seed}: id {id} answered {n} times ({end:?})"));
        }
    }
    let nulls = count.remove("null").unwrap_or(0);
    if nulls > malformed || (nulls < malformed && !closed) {
        return Err(format!(
            "seed {seed}: {nulls} replies with id null for {malformed} malformed lines ({end:?})"
        ));
    }
    if let Some((id, _)) = count.into_iter().next() {
        return Err(format!(
            "seed {seed}: a reply to id {id}, which was never sent"
        ));
    }
    Ok(())
}

/// Sends `health` with id "barrier", waits for its answer, then sends SIGTERM.
fn sigterm_after_barrier(
    child: &Child,
    to_stdin: &crossbeam_channel::Sender<String>,
    replies: &std::sync::Mutex<Vec<Value>>,
    seed: u64,
) -> Result<(), String> {
    let barrier = r#"{"jsonrpc":"2.0","id":"barrier","method":"health"}"#;
    let _ = to_stdin.send(format!("{barrier}\n"));
    let deadline = Instant::now() + RECV_TIMEOUT;
    while !replies
        .lock()
        .unwrap()
        .iter()
        .any(|r| r["id"] == json!("barrier"))
    {
        if Instant::now() > deadline {
            return Err(format!(
                "seed {seed}: `health` before SIGTERM was never answered"
            ));
        }
        thread::sleep(Duration::from_millis(2));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    Ok(())
}

fn invoke_line_any(id: &Value, tool: &str, arguments: &Value) -> String {
    format!(
        "{}\n",
        json!({"jsonrpc":"2.0","id":id,"method":"invoke",
               "params":{"tool":tool,"arguments":arguments,"context":{"invoke_id":format!("inv-{id}")}}})
    )
}

/// Exactly one reply per request, whatever the host does. `EXECUTA_FLOW_CASES` sets how
/// many random sessions run (default 12); `EXECUTA_FLOW_SEED` replays one.
#[test]
fn every_request_gets_exactly_one_reply_in_random_sessions() {
    if let Some(seed) = std::env::var("EXECUTA_FLOW_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return random_session(seed).unwrap();
    }
    let cases: u64 = std::env::var("EXECUTA_FLOW_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let failures: Vec<String> = (0..cases)
        .map(|i| 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i + 1))
        .filter_map(|seed| random_session(seed).err())
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}
