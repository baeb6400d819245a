//! Reverse RPC of the real `everything` plugin: a scripted host answers (or does not
//! answer) its sampling and storage calls over the stdio pipes.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Conn, Msg, now_ms};
use serde_json::{Value, json};

fn sampling_result(text: &str, model: &str) -> Value {
    json!({
        "role": "assistant",
        "content": { "type": "text", "text": text },
        "model": model,
        "stopReason": "endTurn",
        "usage": { "inputTokens": 5, "outputTokens": 7, "totalTokens": 12 },
        "_meta": { "provider": "scripted", "latencyMs": 1 },
        "someFutureField": [1, 2, 3]
    })
}

fn prompt_of(req: &Msg) -> String {
    req.v["params"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no prompt in {}", req.raw))
        .to_owned()
}

fn invoke_id_of(req: &Msg) -> &Value {
    &req.v["params"]["context"]["invoke_id"]
}

fn client_timeout_of(req: &Msg) -> f64 {
    req.v["params"]["_clientTimeoutS"]
        .as_f64()
        .unwrap_or_else(|| panic!("no _clientTimeoutS in {}", req.raw))
}

/// Checks the shape every reverse request must have and returns its id.
/// Invokes `sample` and returns the sampling request it makes to the host.
fn start_sample(p: &mut Conn, id: i64, prompt: &str, invoke_id: &str) -> Msg {
    start_sample_ctx(p, id, prompt, json!({ "invoke_id": invoke_id }))
}

/// As `start_sample`, with a whole invoke context.
fn start_sample_ctx(p: &mut Conn, id: i64, prompt: &str, context: Value) -> Msg {
    p.invoke_ctx(id, "sample", json!({ "prompt": prompt }), context);
    p.recv_request("sampling/createMessage")
}

fn reverse_id(req: &Msg) -> Value {
    let id = req.v["id"].clone();
    let text = id
        .as_str()
        .unwrap_or_else(|| panic!("reverse ids are strings: {}", req.raw));
    assert!(text.starts_with("ex-"), "reverse id {text}");
    id
}

#[test]
fn concurrent_sampling_calls_answered_in_reverse_order_each_get_their_own_answer() {
    let mut p = Conn::spawn();
    let init = p.initialize(
        "2.0",
        json!({ "sampling": { "maxTokensPerCall": 8192, "maxCallsPerInvoke": 8 } }),
    );
    assert_eq!(init["protocolVersion"], "2.0");
    let secret = "sampling-token-must-not-travel-back";
    p.invoke_ctx(
        1,
        "sample",
        json!({ "prompt": "alpha" }),
        json!({ "invoke_id": "inv-alpha", "sampling_token": secret }),
    );
    p.invoke_ctx(
        2,
        "sample",
        json!({ "prompt": "beta", "max_tokens": 100 }),
        json!({ "invoke_id": "inv-beta", "sampling_token": secret }),
    );
    let mut requests = BTreeMap::new();
    for _ in 0..2 {
        let req = p.recv_request("sampling/createMessage");
        assert!(
            !req.raw.contains(secret),
            "tokens are never sent back: {}",
            req.raw
        );
        requests.insert(prompt_of(&req), req);
    }
    let alpha = &requests["alpha"];
    let beta = &requests["beta"];
    assert_ne!(alpha.v["id"], beta.v["id"], "each call has its own id");
    assert_eq!(invoke_id_of(alpha), "inv-alpha");
    assert_eq!(invoke_id_of(beta), "inv-beta");
    assert_eq!(alpha.v["params"]["maxTokens"], 256);
    assert_eq!(beta.v["params"]["maxTokens"], 100);
    assert_eq!(alpha.v["params"]["messages"][0]["role"], "user");
    for req in [alpha, beta] {
        let t = client_timeout_of(req);
        assert!(
            t > 0.0 && t <= 90.0,
            "_clientTimeoutS {t} without a deadline is the 90 s default"
        );
    }

    // Answer in reverse order, each with text derived from its own prompt.
    let (alpha_id, beta_id) = (reverse_id(alpha), reverse_id(beta));
    p.answer(&beta_id, sampling_result("answer to beta", "model-beta"));
    let (reply2, _) = p.recv_until_id("2");
    p.answer(&alpha_id, sampling_result("answer to alpha", "model-alpha"));
    let (reply1, _) = p.recv_until_id("1");
    assert_eq!(
        reply1.data(),
        &json!({ "text": "answer to alpha", "model": "model-alpha" })
    );
    assert_eq!(
        reply2.data(),
        &json!({ "text": "answer to beta", "model": "model-beta" })
    );
    p.finish();
}

#[test]
fn many_concurrent_sampling_invokes_all_settle_correctly() {
    // More waiting handlers than the worker limit (4): replies still get through, since
    // the reader settles them straight into the waiting calls.
    let mut p = Conn::spawn();
    let n = 6;
    for i in 0..n {
        p.invoke_ctx(
            i,
            "sample",
            json!({ "prompt": format!("p{i}") }),
            json!({ "invoke_id": format!("inv-{i}") }),
        );
    }
    // At most four run at once; answer whatever arrives, newest first, until all are done.
    let mut done = BTreeMap::new();
    let mut waiting: Vec<Msg> = Vec::new();
    while done.len() < n as usize {
        let m = p.recv();
        if m.method() == Some("sampling/createMessage") {
            let prompt = prompt_of(&m);
            assert_eq!(invoke_id_of(&m), &json!(format!("inv-{}", &prompt[1..])));
            waiting.push(m);
            // Answer in LIFO order once nothing else is immediately pending.
            while let Some(more) = p.try_recv(Duration::from_millis(50)) {
                if more.method() == Some("sampling/createMessage") {
                    waiting.push(more);
                } else {
                    done.insert(more.raw_id().unwrap(), more);
                }
            }
            while let Some(req) = waiting.pop() {
                let prompt = prompt_of(&req);
                p.answer(
                    &reverse_id(&req),
                    sampling_result(&format!("re:{prompt}"), "m"),
                );
            }
        } else {
            done.insert(m.raw_id().unwrap(), m);
        }
    }
    for i in 0..n {
        assert_eq!(done[&i.to_string()].data()["text"], format!("re:p{i}"));
    }
    p.finish();
}

#[test]
fn health_and_describe_are_served_while_every_invoke_slot_waits_on_the_host() {
    let mut p = Conn::spawn();
    for i in 1..=4 {
        p.invoke_ctx(
            i,
            "sample",
            json!({ "prompt": format!("w{i}") }),
            json!({ "invoke_id": format!("inv-w{i}") }),
        );
    }
    let requests: Vec<Msg> = (0..4)
        .map(|_| p.recv_request("sampling/createMessage"))
        .collect();
    // All four invoke slots are blocked on the host; the runtime still answers.
    p.request(10, "health", None);
    let next = p.recv();
    assert_eq!(next.raw_id().as_deref(), Some("10"), "{}", next.raw);
    p.request(11, "describe", None);
    let next = p.recv();
    assert_eq!(next.raw_id().as_deref(), Some("11"), "{}", next.raw);
    // A fifth invoke waits for a slot, and runs once one frees up.
    p.invoke(5, "echo", json!({ "fifth": true }));
    for req in requests.iter().rev() {
        let prompt = prompt_of(req);
        p.answer(
            &reverse_id(req),
            sampling_result(&format!("re:{prompt}"), "m"),
        );
    }
    let mut done = BTreeMap::new();
    for _ in 0..5 {
        let m = p.recv();
        done.insert(m.raw_id().unwrap(), m);
    }
    for i in 1..=4 {
        assert_eq!(done[&i.to_string()].data()["text"], format!("re:w{i}"));
    }
    assert_eq!(done["5"].data(), &json!({ "fifth": true }));
    p.finish();
}

#[test]
fn client_timeout_follows_the_invoke_deadline() {
    let mut p = Conn::spawn();
    let sent_at = now_ms();
    let deadline = sent_at + 20_000;
    let req = start_sample_ctx(
        &mut p,
        1,
        "d",
        json!({ "invoke_id": "inv-d", "deadline_ms": deadline }),
    );
    assert_eq!(invoke_id_of(&req), "inv-d");
    let t = client_timeout_of(&req);
    let max = (deadline - sent_at) as f64 / 1000.0;
    assert!(
        t > 0.0 && t <= max,
        "_clientTimeoutS {t} must be within the {max} s left"
    );
    p.answer(&reverse_id(&req), sampling_result("ok", "m"));
    assert_eq!(p.recv_until_id("1").0.data()["text"], "ok");
    p.finish();
}

#[test]
fn a_host_that_never_answers_times_out_while_health_is_served() {
    let mut p = Conn::spawn();
    let deadline = now_ms() + 2000;
    let req = start_sample_ctx(
        &mut p,
        1,
        "silence",
        json!({ "invoke_id": "inv-t", "deadline_ms": deadline }),
    );
    assert_eq!(invoke_id_of(&req), "inv-t");
    assert!(client_timeout_of(&req) <= 2.0);
    // The plugin keeps serving while the handler waits.
    p.request(2, "health", None);
    let next = p.recv();
    assert_eq!(
        next.raw_id().as_deref(),
        Some("2"),
        "health first: {}",
        next.raw
    );
    assert_eq!(next.result()["status"], "ready");
    p.invoke(3, "echo", json!({ "meanwhile": true }));
    let next = p.recv();
    assert_eq!(
        next.raw_id().as_deref(),
        Some("3"),
        "echo before the timeout: {}",
        next.raw
    );
    // Then the call times out and the invoke fails cleanly.
    let reply = p.recv();
    assert_eq!(reply.raw_id().as_deref(), Some("1"));
    let error = reply.failure();
    assert!(error.contains("timed out"), "{error}");
    assert!(error.contains("sampling/createMessage"), "{error}");
    p.finish();
}

#[test]
fn a_late_answer_after_a_timeout_is_dropped() {
    let mut p = Conn::spawn();
    let deadline = now_ms() + 1500;
    let req = start_sample_ctx(
        &mut p,
        1,
        "late",
        json!({ "invoke_id": "inv-late", "deadline_ms": deadline }),
    );
    let reply = p.recv_until_id("1").0;
    assert!(reply.failure().contains("timed out"), "{}", reply.raw);
    // Now the answer arrives, too late: nothing is written for it and serving goes on.
    p.answer(&reverse_id(&req), sampling_result("too late", "m"));
    p.answer_error(
        &reverse_id(&req),
        json!({ "code": -32005, "message": "late error" }),
    );
    p.request(2, "health", None);
    let next = p.recv();
    assert_eq!(next.raw_id().as_deref(), Some("2"), "{}", next.raw);
    // A new sampling invoke still works, with a fresh id.
    let req2 = start_sample(&mut p, 3, "again", "inv-again");
    assert_ne!(req2.v["id"], req.v["id"]);
    p.answer(&reverse_id(&req2), sampling_result("fresh", "m"));
    assert_eq!(p.recv_until_id("3").0.data()["text"], "fresh");
    assert!(p.finish().is_empty());
    assert!(
        p.stderr().contains("dropped"),
        "the late answers should be logged as dropped: {}",
        p.stderr()
    );
}

#[test]
fn a_host_error_keeps_its_code_and_error_code() {
    let mut p = Conn::spawn();
    let req = start_sample(&mut p, 1, "q", "inv-q");
    p.answer_error(
        &reverse_id(&req),
        json!({ "code": -32002, "message": "monthly quota exhausted", "data": { "errorCode": "QUOTA_EXCEEDED" } }),
    );
    let reply = p.recv_until_id("1").0;
    let error = reply.failure();
    assert!(error.contains("-32002"), "{error}");
    assert!(error.contains("QUOTA_EXCEEDED"), "{error}");
    assert!(error.contains("monthly quota exhausted"), "{error}");
    p.finish();
}

#[test]
fn replies_with_unknown_ids_are_dropped() {
    let mut p = Conn::spawn();
    // With nothing pending.
    p.send(&json!({ "jsonrpc": "2.0", "id": "ex-999999", "result": {} }));
    p.send(&json!({ "jsonrpc": "2.0", "id": 42, "result": { "x": 1 } }));
    p.send(&json!({ "jsonrpc": "2.0", "id": "ex-999998", "error": { "code": -32000, "message": "x" } }));
    p.send(&json!({ "jsonrpc": "2.0", "id": null, "result": 1 }));
    p.request(1, "health", None);
    let next = p.recv();
    assert_eq!(
        next.raw_id().as_deref(),
        Some("1"),
        "replies must never be answered: {}",
        next.raw
    );

    // With a call pending: the strays do not settle it, the real answer does.
    let req = start_sample(&mut p, 2, "real", "inv-r");
    let real = reverse_id(&req);
    let real_text = real.as_str().unwrap();
    p.send(
        &json!({ "jsonrpc": "2.0", "id": "ex-999999", "result": sampling_result("stray", "m") }),
    );
    p.send(&json!({ "jsonrpc": "2.0", "id": 42, "result": sampling_result("stray", "m") }));
    p.send(&json!({ "jsonrpc": "2.0", "id": format!("{real_text}0"), "result": sampling_result("stray", "m") }));
    p.send(&json!({ "jsonrpc": "2.0", "id": real_text.trim_start_matches("ex-").parse::<u64>().unwrap(), "result": sampling_result("stray", "m") }));
    p.request(3, "health", None);
    let next = p.recv();
    assert_eq!(next.raw_id().as_deref(), Some("3"), "{}", next.raw);
    p.answer(&real, sampling_result("the real one", "m"));
    assert_eq!(p.recv_until_id("2").0.data()["text"], "the real one");
    // A second answer to a settled id is dropped too.
    p.answer(&real, sampling_result("twice", "m"));
    p.request(4, "health", None);
    let next = p.recv();
    assert_eq!(next.raw_id().as_deref(), Some("4"), "{}", next.raw);
    assert!(p.finish().is_empty());
    assert!(
        p.stderr().contains("dropped"),
        "stray answers should be logged as dropped: {}",
        p.stderr()
    );
}

#[test]
fn stdin_closing_while_a_handler_waits_fails_the_call_fast_and_exits_0() {
    let mut p = Conn::spawn();
    let req = start_sample(&mut p, 1, "bye", "inv-bye");
    assert!(
        client_timeout_of(&req) > 60.0,
        "the default sampling timeout is 90 s"
    );
    p.close_stdin();
    // The reverse call would wait 90 s; the host going away fails it at once, well
    // inside the 4 s grace period.
    // (Waiting out the grace would abandon the invoke: its error reply, checked below,
    // shows the reverse call was failed instead.)
    let status = p.wait_exit();
    assert_eq!(status.code(), Some(0), "stderr: {}", p.stderr());
    let rest = p.drain_to_eof();
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0].raw_id().as_deref(), Some("1"));
    let error = rest[0].failure();
    assert!(
        error.contains("disconnected") || error.contains("closed"),
        "{error}"
    );
}

#[test]
fn a_v1_session_refuses_sampling_without_writing_a_frame() {
    let mut p = Conn::spawn();
    let init = p.initialize("1.1", json!({}));
    assert_eq!(init["protocolVersion"], "1.1");
    p.invoke_ctx(
        1,
        "sample",
        json!({ "prompt": "v1" }),
        json!({ "invoke_id": "inv-v1" }),
    );
    let reply = p.recv();
    assert_eq!(
        reply.raw_id().as_deref(),
        Some("1"),
        "no reverse frame may precede the reply: {}",
        reply.raw
    );
    let error = reply.failure();
    assert!(error.contains("-32008"), "{error}");
    // Storage too.
    p.invoke_ctx(
        2,
        "recall",
        json!({ "key": "k" }),
        json!({ "invoke_id": "inv-v1b" }),
    );
    let reply = p.recv();
    assert_eq!(reply.raw_id().as_deref(), Some("2"), "{}", reply.raw);
    assert!(reply.failure().contains("-32021"), "{}", reply.raw);
    // Progress is not sent in a v1 session either.
    p.invoke_ctx(
        3,
        "progress",
        json!({ "steps": 3 }),
        json!({ "invoke_id": "inv-v1c" }),
    );
    let reply = p.recv();
    assert_eq!(reply.raw_id().as_deref(), Some("3"), "{}", reply.raw);
    assert_eq!(
        reply.data(),
        &json!({ "steps": 3, "sent": 0, "dropped": 3 })
    );
    assert!(p.finish().is_empty());
}

#[test]
fn max_tokens_above_the_per_call_cap_is_refused_without_a_frame() {
    let mut p = Conn::spawn();
    p.invoke_ctx(
        1,
        "sample",
        json!({ "prompt": "x", "max_tokens": 9000 }),
        json!({ "invoke_id": "inv-mt" }),
    );
    let reply = p.recv();
    assert_eq!(
        reply.raw_id().as_deref(),
        Some("1"),
        "no reverse frame may precede the reply: {}",
        reply.raw
    );
    let error = reply.failure();
    assert!(
        error.contains("-32007") && error.contains("MAX_TOKENS_EXCEEDED"),
        "{error}"
    );
    assert!(error.contains("8192"), "{error}");

    // The host's own cap from initialize applies.
    p.initialize("2.0", json!({ "sampling": { "maxTokensPerCall": 1000 } }));
    p.invoke_ctx(
        2,
        "sample",
        json!({ "prompt": "x", "max_tokens": 1001 }),
        json!({ "invoke_id": "inv-mt2" }),
    );
    let reply = p.recv();
    assert_eq!(reply.raw_id().as_deref(), Some("2"), "{}", reply.raw);
    assert!(reply.failure().contains("-32007"), "{}", reply.raw);
    // At the cap is fine.
    p.invoke_ctx(
        3,
        "sample",
        json!({ "prompt": "x", "max_tokens": 1000 }),
        json!({ "invoke_id": "inv-mt3" }),
    );
    let req = p.recv_request("sampling/createMessage");
    assert_eq!(req.v["params"]["maxTokens"], 1000);
    p.answer(&reverse_id(&req), sampling_result("fine", "m"));
    assert_eq!(p.recv_until_id("3").0.data()["text"], "fine");
    p.finish();
}

#[test]
fn storage_get_branches_on_exists_and_set_sends_scope_user() {
    // No initialize: dev hosts never send it, and reverse calls still work.
    let mut p = Conn::spawn();
    p.invoke_ctx(
        1,
        "recall",
        json!({ "key": "missing" }),
        json!({ "invoke_id": "inv-s1", "storage_token": "st" }),
    );
    let req = p.recv_request("storage/get");
    assert_eq!(req.v["params"]["key"], "missing");
    assert_eq!(req.v["params"]["scope"], "user");
    assert_eq!(invoke_id_of(&req), "inv-s1");
    assert!(
        client_timeout_of(&req) <= 30.0,
        "storage default timeout is 30 s"
    );
    assert!(req.v["params"].get("storage_token").is_none());
    p.answer(
        &reverse_id(&req),
        json!({ "value": null, "exists": false, "etag": null }),
    );
    assert_eq!(
        p.recv_until_id("1").0.data(),
        &json!({ "exists": false, "value": null })
    );

    // A falsy value that exists.
    p.invoke_ctx(
        2,
        "recall",
        json!({ "key": "empty" }),
        json!({ "invoke_id": "inv-s2" }),
    );
    let req = p.recv_request("storage/get");
    p.answer(
        &reverse_id(&req),
        json!({ "value": "", "exists": true, "etag": "W/\"1-abc\"" }),
    );
    assert_eq!(
        p.recv_until_id("2").0.data(),
        &json!({ "exists": true, "value": "" })
    );

    p.invoke_ctx(
        3,
        "remember",
        json!({ "key": "k", "value": { "n": 1 } }),
        json!({ "invoke_id": "inv-s3" }),
    );
    let req = p.recv_request("storage/set");
    assert_eq!(req.v["params"]["key"], "k");
    assert_eq!(req.v["params"]["value"], json!({ "n": 1 }));
    assert_eq!(req.v["params"]["scope"], "user");
    assert_eq!(invoke_id_of(&req), "inv-s3");
    p.answer(
        &reverse_id(&req),
        json!({ "etag": "W/\"2-def\"", "size_bytes": 7 }),
    );
    assert_eq!(
        p.recv_until_id("3").0.data(),
        &json!({ "stored": true, "etag": "W/\"2-def\"" })
    );
    p.finish();
}

#[test]
fn progress_is_throttled_to_50_and_stamped_with_the_invoke_id() {
    let mut p = Conn::spawn();
    p.invoke_ctx(
        1,
        "progress",
        json!({ "steps": 60 }),
        json!({ "invoke_id": "inv-p" }),
    );
    let (reply, before) = p.recv_until_id("1");
    assert_eq!(before.len(), 50, "exactly 50 events in the first second");
    for (i, ev) in before.iter().enumerate() {
        assert_eq!(ev.method(), Some("executa/progress"), "{}", ev.raw);
        assert!(
            ev.v.get("id").is_none(),
            "progress is a notification: {}",
            ev.raw
        );
        assert_eq!(ev.v["params"]["type"], "progress");
        assert_eq!(
            ev.v["params"]["context"]["invoke_id"], "inv-p",
            "{}",
            ev.raw
        );
        assert_eq!(ev.v["params"]["data"], json!({ "step": i + 1, "of": 60 }));
    }
    assert_eq!(
        reply.data(),
        &json!({ "steps": 60, "sent": 50, "dropped": 10 })
    );

    // Every invoke has its own budget.
    p.invoke_ctx(
        2,
        "progress",
        json!({ "steps": 5 }),
        json!({ "invoke_id": "inv-p2" }),
    );
    let (reply, before) = p.recv_until_id("2");
    assert_eq!(before.len(), 5);
    assert!(
        before
            .iter()
            .all(|ev| ev.v["params"]["context"]["invoke_id"] == "inv-p2")
    );
    assert_eq!(
        reply.data(),
        &json!({ "steps": 5, "sent": 5, "dropped": 0 })
    );
    assert!(p.finish().is_empty(), "no progress after the invoke ended");
}

#[test]
fn a_deadline_already_past_fails_the_call_without_a_frame() {
    let mut p = Conn::spawn();
    let past = now_ms() - 1000;
    p.invoke_ctx(
        1,
        "sample",
        json!({ "prompt": "p" }),
        json!({ "invoke_id": "inv-past", "deadline_ms": past }),
    );
    let reply = p.recv();
    assert_eq!(
        reply.raw_id().as_deref(),
        Some("1"),
        "no reverse frame may be written: {}",
        reply.raw
    );
    assert!(reply.failure().contains("timed out"), "{}", reply.raw);
    assert!(p.finish().is_empty());
}

#[test]
fn an_oversized_answer_fails_only_its_call() {
    let mut p = Conn::spawn();
    let req = start_sample(&mut p, 1, "huge", "inv-huge");
    // The id comes first, so the reader can tell which call the 17 MiB answer was for.
    let bulk = "h".repeat(17 * 1024 * 1024);
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"role":"assistant","content":{{"type":"text","text":"{bulk}"}},"model":"m"}}}}"#,
        req.v["id"]
    );
    drop(bulk);
    p.send_line(&line);
    drop(line);
    let reply = p.recv();
    assert_eq!(
        reply.raw_id().as_deref(),
        Some("1"),
        "the host's answer is not answered back: {}",
        reply.raw
    );
    let error = reply.failure();
    assert!(
        error.contains("frame_too_large") || error.contains("exceeds"),
        "{error}"
    );
    // Serving goes on.
    p.request(2, "health", None);
    assert_eq!(p.recv().raw_id().as_deref(), Some("2"));
    assert!(p.finish().is_empty());
}

#[test]
#[cfg(unix)]
fn sigterm_while_a_handler_waits_fails_the_call_at_once_and_exits_0() {
    let mut p = Conn::spawn();
    p.invoke_ctx(
        1,
        "sample",
        json!({ "prompt": "term" }),
        json!({ "invoke_id": "inv-term" }),
    );
    p.recv_request("sampling/createMessage");
    p.sigterm();
    // The plugin shuts down: the waiting call must fail at once ("host gone") so the
    // invoke is answered, rather than being abandoned when the grace period runs out.
    let reply = p.recv();
    assert_eq!(reply.raw_id().as_deref(), Some("1"), "{}", reply.raw);
    let error = reply.failure().to_owned();
    assert!(
        error.contains("disconnected") || error.contains("shutting down"),
        "{error}"
    );
    let status = p.wait_exit();
    assert_eq!(status.code(), Some(0), "stderr: {}", p.stderr());
}

#[test]
fn a_malformed_answer_fails_only_its_call_and_is_never_answered() {
    let mut p = Conn::spawn();
    let req = start_sample(&mut p, 1, "q", "inv-m");
    let rid = reverse_id(&req);
    // Neither result nor error: not a valid response.
    p.send(&json!({ "jsonrpc": "2.0", "id": rid }));
    let (reply, before) = p.recv_until_id("1");
    assert!(
        reply.failure().contains("malformed response"),
        "{}",
        reply.raw
    );
    assert!(
        before
            .iter()
            .all(|m| m.raw_id().as_deref() != Some(rid.to_string().as_str())),
        "the plugin must not answer an answer: {before:?}"
    );
    p.request(2, "health", None);
    assert_eq!(p.recv_until_id("2").0.result()["status"], "ready");
    p.finish();
}

#[test]
fn a_json_rpc_1_style_answer_with_error_null_is_accepted() {
    let mut p = Conn::spawn();
    let req = start_sample(&mut p, 1, "q", "inv-1");
    p.send(&json!({
        "jsonrpc": "2.0",
        "id": reverse_id(&req),
        "result": { "role": "assistant", "content": { "type": "text", "text": "ok" }, "model": "m" },
        "error": null,
    }));
    assert_eq!(p.recv_until_id("1").0.data()["text"], "ok");
    p.finish();
}

#[test]
fn an_offer_other_than_2_0_keeps_reverse_rpc_off() {
    let mut p = Conn::spawn();
    let reply = p.initialize("3.0", json!({ "sampling": {} }));
    assert_eq!(reply["protocolVersion"], "2.0");
    p.invoke_ctx(
        1,
        "sample",
        json!({ "prompt": "q" }),
        json!({ "invoke_id": "inv-v" }),
    );
    let (reply, before) = p.recv_until_id("1");
    assert!(reply.failure().contains("-32008"), "{}", reply.raw);
    assert!(
        before.iter().all(|m| m.method().is_none()),
        "no reverse frame: {before:?}"
    );
    p.finish();
}

#[test]
fn an_absurd_deadline_is_ignored_not_fatal() {
    let mut p = Conn::spawn();
    p.invoke_ctx(
        1,
        "echo",
        json!({ "a": 1 }),
        json!({ "invoke_id": "i", "deadline_ms": 1e300 }),
    );
    assert_eq!(p.recv_until_id("1").0.data(), &json!({ "a": 1 }));
    p.invoke_ctx(
        2,
        "echo",
        json!({ "b": 2 }),
        json!({ "invoke_id": "j", "deadline_ms": -5 }),
    );
    assert_eq!(p.recv_until_id("2").0.data(), &json!({ "b": 2 }));
    p.finish();
}
