//! `Plugin::serve` in-process over socket pairs, with custom tools: data wrapping, local
//! gating and budgets (checked by their exact codes), handles outliving their invoke.

mod common;

use std::sync::{Arc, Mutex};

use common::{Conn, Msg};
use executa::{
    CreateMessage, Error, Health, Invocation, InvokeHandle, Options, Plugin, Scope, StopReason,
    Tool, ToolError,
};
use serde::de::IgnoredAny;
use serde_json::{Value, json};

/// A reverse-call error as data the test can inspect.
fn report(e: &Error) -> Value {
    json!({
        "code": e.code(),
        "error_code": e.error_code(),
        "message": e.to_string(),
        "refused": matches!(e, Error::Refused(_)),
    })
}

fn sampling_result(text: &str, total_tokens: u64) -> Value {
    json!({
        "role": "assistant",
        "content": { "type": "text", "text": text },
        "model": "scripted",
        "stopReason": "endTurn",
        "usage": { "inputTokens": 1, "outputTokens": total_tokens - 1, "totalTokens": total_tokens }
    })
}

/// Reads the next line and checks it is the reply to `id`: nothing (no reverse request,
/// no notification) was written before it.
fn next_is_reply(p: &mut Conn, id: &str) -> Msg {
    let m = p.recv();
    assert_eq!(
        m.raw_id().as_deref(),
        Some(id),
        "expected only the reply to {id}, got {}",
        m.raw
    );
    assert!(m.is_response(), "{}", m.raw);
    m
}

#[test]
fn non_object_data_is_wrapped_as_value() {
    let plugin = Plugin::new("wrap", "0.0.1")
        .tool(Tool::new("int", "", |_: IgnoredAny, _: &Invocation| {
            Ok::<_, ToolError>(42)
        }))
        .tool(Tool::new("float", "", |_: IgnoredAny, _: &Invocation| {
            Ok::<_, ToolError>(1.5)
        }))
        .tool(Tool::new("str", "", |_: IgnoredAny, _: &Invocation| {
            Ok::<_, ToolError>("hello")
        }))
        .tool(Tool::new("brace", "", |_: IgnoredAny, _: &Invocation| {
            Ok::<_, ToolError>("{not an object}")
        }))
        .tool(Tool::new("bool", "", |_: IgnoredAny, _: &Invocation| {
            Ok::<_, ToolError>(true)
        }))
        .tool(Tool::new("arr", "", |_: IgnoredAny, _: &Invocation| {
            Ok::<_, ToolError>(vec![1, 2, 3])
        }))
        .tool(Tool::new("unit", "", |_: IgnoredAny, _: &Invocation| {
            Ok::<_, ToolError>(())
        }))
        .tool(Tool::new("obj", "", |_: IgnoredAny, _: &Invocation| {
            Ok::<_, ToolError>(json!({ "a": 1 }))
        }));
    let mut p = Conn::serve(plugin);
    let cases = [
        ("int", json!({ "value": 42 })),
        ("float", json!({ "value": 1.5 })),
        ("str", json!({ "value": "hello" })),
        ("brace", json!({ "value": "{not an object}" })),
        ("bool", json!({ "value": true })),
        ("arr", json!({ "value": [1, 2, 3] })),
        ("unit", json!({ "value": null })),
        ("obj", json!({ "a": 1 })),
    ];
    for (i, (tool, want)) in cases.iter().enumerate() {
        p.invoke(i, tool, json!({}));
        let reply = p.recv_until_id(&i.to_string()).0;
        assert_eq!(
            reply.result(),
            &json!({ "success": true, "data": want }),
            "{tool}: {}",
            reply.raw
        );
    }
    p.close_stdin();
    assert!(p.drain_to_eof().is_empty());
    let stopped = p.wait_stopped();
    assert_eq!(stopped.reason, StopReason::InputClosed);
    assert_eq!(stopped.abandoned, 0);
}

/// A tool's raw JSON keeps its own white space; a line break there must not end the reply
/// frame early (nor one in a string, which JSON holds escaped).
#[test]
fn raw_data_on_several_lines_is_answered_on_one() {
    use serde_json::value::RawValue;
    let raw = |text: &'static str| {
        move |_: IgnoredAny, _: &Invocation| {
            RawValue::from_string(text.to_owned()).map_err(|e| ToolError::new(e.to_string()))
        }
    };
    let plugin = Plugin::new("raw", "0.0.1")
        .tool(Tool::new(
            "obj",
            "",
            raw("{\n\"a\": \"x\\ny\",\r\n\"b\": [1,\n2]\n}"),
        ))
        .tool(Tool::new("arr", "", raw("[1,\r\n2]")));
    let mut p = Conn::serve(plugin);
    p.invoke(1, "obj", json!({}));
    let reply = p.recv_until_id("1").0;
    assert_eq!(
        reply.result(),
        &json!({ "success": true, "data": { "a": "x\ny", "b": [1, 2] } }),
        "{}",
        reply.raw
    );
    p.invoke(2, "arr", json!({}));
    let reply = p.recv_until_id("2").0;
    assert_eq!(
        reply.result(),
        &json!({ "success": true, "data": { "value": [1, 2] } }),
        "{}",
        reply.raw
    );
    p.close_stdin();
    assert!(
        p.drain_to_eof().is_empty(),
        "nothing left over from a split frame"
    );
}

#[test]
fn tool_errors_map_to_failures_and_32602() {
    let plugin = Plugin::new("errs", "0.0.1")
        .tool(Tool::new("details", "", |_: IgnoredAny, _: &Invocation| {
            Err::<Value, _>(ToolError::new("no luck").with_details(json!({ "retry_after_s": 3 })))
        }))
        .tool(Tool::new("badarg", "", |_: IgnoredAny, _: &Invocation| {
            Err::<Value, _>(ToolError::invalid_arguments("`when` must be in the future"))
        }));
    let mut p = Conn::serve(plugin);
    p.invoke(1, "details", json!({}));
    let reply = p.recv_until_id("1").0;
    assert_eq!(reply.failure(), "no luck");
    assert_eq!(reply.result()["details"], json!({ "retry_after_s": 3 }));
    p.invoke(2, "badarg", json!({}));
    let reply = p.recv_until_id("2").0;
    assert_eq!(reply.error_code(), -32602);
    assert!(reply.error_message().contains("`when`"), "{}", reply.raw);
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn options_and_health_hook_apply() {
    let plugin = Plugin::new("opts", "0.0.1")
        .options(Options {
            max_result_bytes: 1000,
            ..Options::default()
        })
        .health(|| Health::initializing("warming the cache"))
        .tool(Tool::new("blob", "", |n: Value, _: &Invocation| {
            Ok::<_, ToolError>(json!({ "blob": "z".repeat(n["n"].as_u64().unwrap_or(0) as usize) }))
        }));
    let mut p = Conn::serve(plugin);
    p.request(1, "health", None);
    assert_eq!(
        p.recv_until_id("1").0.result(),
        &json!({ "status": "initializing", "message": "warming the cache", "details": {} })
    );
    p.invoke(2, "blob", json!({ "n": 500 }));
    assert_eq!(
        p.recv_until_id("2").0.data()["blob"]
            .as_str()
            .unwrap()
            .len(),
        500
    );
    p.invoke(3, "blob", json!({ "n": 2000 }));
    let reply = p.recv_until_id("3").0;
    assert!(reply.failure().contains("1000"), "{}", reply.raw);
    assert_eq!(reply.result()["data"]["errorCode"], "RESULT_TOO_LARGE");
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn a_panicking_health_hook_reports_error() {
    let plugin = Plugin::new("hp", "0.0.1")
        .health(|| panic!("health hook exploded"))
        .tool(Tool::new("noop", "", |_: IgnoredAny, _: &Invocation| {
            Ok::<_, ToolError>(json!({}))
        }));
    let mut p = Conn::serve(plugin);
    p.request(1, "health", None);
    assert_eq!(p.recv_until_id("1").0.result()["status"], "error");
    p.invoke(2, "noop", json!({}));
    assert_eq!(p.recv_until_id("2").0.data(), &json!({}));
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn credentials_are_readable_but_never_in_debug() {
    let plugin = Plugin::new("creds", "0.0.1").tool(Tool::new(
        "peek",
        "",
        |_: IgnoredAny, ctx: &Invocation| {
            Ok::<_, ToolError>(json!({
                "debug": format!("{ctx:?}"),
                "matches": ctx.credential("API_KEY") == Some("s3cr3t-value"),
                "token_matches": ctx.token("storage_token") == Some("tok-value"),
                "invoke_id": ctx.invoke_id(),
            }))
        },
    ));
    let mut p = Conn::serve(plugin);
    p.invoke_ctx(
        1,
        "peek",
        json!({}),
        json!({ "invoke_id": "inv-1", "credentials": { "API_KEY": "s3cr3t-value" }, "storage_token": "tok-value" }),
    );
    let data = p.recv_until_id("1").0.data().clone();
    assert_eq!(data["matches"], true);
    assert_eq!(data["token_matches"], true);
    assert_eq!(data["invoke_id"], "inv-1");
    let debug = data["debug"].as_str().unwrap();
    assert!(
        debug.contains("API_KEY") && debug.contains("storage_token"),
        "{debug}"
    );
    assert!(
        !debug.contains("s3cr3t-value") && !debug.contains("tok-value"),
        "{debug}"
    );
    p.close_stdin();
    p.wait_stopped();
}

fn gating_plugin(capabilities: &[&str]) -> Plugin {
    let mut plugin = Plugin::new("gated", "0.0.1")
        .tool(Tool::new("store", "", |_: IgnoredAny, ctx: &Invocation| {
            Ok::<_, ToolError>(match ctx.storage().get("k", Scope::User) {
                Ok(stored) => json!({ "ok": stored.exists }),
                Err(e) => report(&e),
            })
        }))
        .tool(Tool::new(
            "sample",
            "",
            |_: IgnoredAny, ctx: &Invocation| {
                Ok::<_, ToolError>(
                    match ctx.sampling().create_message(&CreateMessage::new("hi", 10)) {
                        Ok(r) => json!({ "ok": r.text() }),
                        Err(e) => report(&e),
                    },
                )
            },
        ))
        .tool(Tool::new("web", "", |_: IgnoredAny, ctx: &Invocation| {
            Ok::<_, ToolError>(
                match ctx.call::<_, Value>("web/search", &json!({ "query": "q" })) {
                    Ok(v) => json!({ "ok": v }),
                    Err(e) => report(&e),
                },
            )
        }));
    for c in capabilities {
        plugin = plugin.capability(*c);
    }
    plugin
}

#[test]
fn storage_without_aps_kv_is_refused_locally_with_32021() {
    let mut p = Conn::serve(gating_plugin(&["llm.sample"]));
    p.initialize("2.0", json!({ "sampling": {} }));
    p.invoke_ctx(1, "store", json!({}), json!({ "invoke_id": "inv-g1" }));
    let data = next_is_reply(&mut p, "1").data().clone();
    assert_eq!(data["code"], -32021, "{data}");
    assert_eq!(data["error_code"], "STORAGE_NOT_GRANTED");
    assert_eq!(data["refused"], true);
    assert!(
        data["message"].as_str().unwrap().contains("aps.kv"),
        "{data}"
    );

    p.invoke_ctx(2, "web", json!({}), json!({ "invoke_id": "inv-g2" }));
    let data = next_is_reply(&mut p, "2").data().clone();
    assert_eq!(data["code"], -32526, "{data}");
    assert!(
        data["message"].as_str().unwrap().contains("web.search"),
        "{data}"
    );
    p.close_stdin();
    assert!(p.drain_to_eof().is_empty());
    p.wait_stopped();
}

#[test]
fn sampling_without_llm_sample_is_refused_locally_with_32008() {
    let mut p = Conn::serve(gating_plugin(&["aps.kv"]));
    p.invoke_ctx(1, "sample", json!({}), json!({ "invoke_id": "inv-g3" }));
    let data = next_is_reply(&mut p, "1").data().clone();
    assert_eq!(data["code"], -32008, "{data}");
    assert_eq!(data["refused"], true);
    assert!(
        data["message"].as_str().unwrap().contains("llm.sample"),
        "{data}"
    );
    p.close_stdin();
    assert!(p.drain_to_eof().is_empty());
    p.wait_stopped();
}

#[test]
fn a_v1_session_refuses_reverse_calls_locally() {
    let mut p = Conn::serve(gating_plugin(&["llm.sample", "aps.kv"]));
    assert_eq!(p.initialize("1.1", json!({}))["protocolVersion"], "1.1");
    p.invoke_ctx(1, "sample", json!({}), json!({ "invoke_id": "inv-v1" }));
    let data = next_is_reply(&mut p, "1").data().clone();
    assert_eq!(data["code"], -32008, "{data}");
    assert_eq!(data["refused"], true);
    p.invoke_ctx(2, "store", json!({}), json!({ "invoke_id": "inv-v1b" }));
    let data = next_is_reply(&mut p, "2").data().clone();
    assert_eq!(data["code"], -32021, "{data}");
    assert_eq!(data["refused"], true);

    // Re-negotiating v2 opens reverse calls again: the same tool now writes a frame.
    p.initialize("2.0", json!({ "sampling": {} }));
    p.invoke_ctx(3, "sample", json!({}), json!({ "invoke_id": "inv-v2" }));
    let req = p.recv_request("sampling/createMessage");
    assert_eq!(req.v["params"]["context"]["invoke_id"], "inv-v2");
    p.answer(&req.v["id"], sampling_result("now it works", 5));
    assert_eq!(
        p.recv_until_id("3").0.data(),
        &json!({ "ok": "now it works" })
    );
    p.close_stdin();
    p.wait_stopped();
}

fn budget_plugin() -> Plugin {
    Plugin::new("budget", "0.0.1")
        .capability("llm.sample")
        .tool(Tool::new("loop", "", |args: Value, ctx: &Invocation| {
            let calls = args["calls"].as_u64().unwrap_or(9);
            let max_tokens = args["max_tokens"].as_u64().unwrap_or(10);
            let mut answers = Vec::new();
            for i in 0..calls {
                match ctx
                    .sampling()
                    .create_message(&CreateMessage::new(format!("q{i}"), max_tokens))
                {
                    Ok(r) => answers.push(json!(r.text())),
                    Err(e) => {
                        return Ok::<_, ToolError>(
                            json!({ "answers": answers, "refused": report(&e) }),
                        );
                    }
                }
            }
            Ok(json!({ "answers": answers }))
        }))
}

/// Runs invoke `id` of the `loop` tool, answering each sampling request with
/// `re:<prompt>` and `tokens` total tokens. Returns the reply and the request count.
fn run_loop(p: &mut Conn, id: u64, args: Value, invoke_id: &str, tokens: u64) -> (Msg, usize) {
    p.invoke_ctx(id, "loop", args, json!({ "invoke_id": invoke_id }));
    let mut requests = 0;
    loop {
        let m = p.recv();
        if m.method() == Some("sampling/createMessage") {
            requests += 1;
            assert_eq!(
                m.v["params"]["context"]["invoke_id"], invoke_id,
                "{}",
                m.raw
            );
            let prompt = m.v["params"]["messages"][0]["content"]["text"]
                .as_str()
                .unwrap()
                .to_owned();
            p.answer(&m.v["id"], sampling_result(&format!("re:{prompt}"), tokens));
        } else {
            assert_eq!(m.raw_id(), Some(id.to_string()), "{}", m.raw);
            return (m, requests);
        }
    }
}

#[test]
fn the_ninth_sampling_call_is_refused_locally_with_32006() {
    let mut p = Conn::serve(budget_plugin());
    let (reply, requests) = run_loop(&mut p, 1, json!({ "calls": 9 }), "inv-b1", 10);
    assert_eq!(requests, 8, "only 8 request frames may be written");
    let data = reply.data();
    let want: Vec<Value> = (0..8).map(|i| json!(format!("re:q{i}"))).collect();
    assert_eq!(data["answers"], json!(want));
    assert_eq!(data["refused"]["code"], -32006, "{data}");
    assert_eq!(data["refused"]["error_code"], "MAX_CALLS_EXCEEDED");
    assert_eq!(data["refused"]["refused"], true);

    // The budget is per invoke: a new invoke starts afresh.
    let (reply, requests) = run_loop(&mut p, 2, json!({ "calls": 2 }), "inv-b2", 10);
    assert_eq!(requests, 2);
    assert!(reply.data().get("refused").is_none(), "{}", reply.raw);
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn the_hosts_max_calls_per_invoke_is_honoured() {
    let mut p = Conn::serve(budget_plugin());
    p.initialize("2.0", json!({ "sampling": { "maxCallsPerInvoke": 2 } }));
    let (reply, requests) = run_loop(&mut p, 1, json!({ "calls": 5 }), "inv-mc", 10);
    assert_eq!(requests, 2);
    assert_eq!(reply.data()["refused"]["code"], -32006, "{}", reply.raw);
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn max_tokens_above_8192_is_refused_locally_with_32007() {
    let mut p = Conn::serve(budget_plugin());
    p.invoke_ctx(
        1,
        "loop",
        json!({ "calls": 1, "max_tokens": 9000 }),
        json!({ "invoke_id": "inv-mt" }),
    );
    let data = next_is_reply(&mut p, "1").data().clone();
    assert_eq!(data["answers"], json!([]));
    assert_eq!(data["refused"]["code"], -32007, "{data}");
    assert_eq!(data["refused"]["error_code"], "MAX_TOKENS_EXCEEDED");
    assert_eq!(data["refused"]["refused"], true);
    p.close_stdin();
    assert!(p.drain_to_eof().is_empty());
    p.wait_stopped();
}

#[test]
fn the_32000_token_budget_per_invoke_is_enforced_locally() {
    let mut p = Conn::serve(budget_plugin());
    // Each answer reports 20 000 tokens: after two calls 40 000 are used.
    let (reply, requests) = run_loop(&mut p, 1, json!({ "calls": 5 }), "inv-tok", 20_000);
    assert_eq!(requests, 2);
    let data = reply.data();
    assert_eq!(data["answers"], json!(["re:q0", "re:q1"]));
    assert_eq!(data["refused"]["code"], -32007, "{data}");
    assert_eq!(data["refused"]["refused"], true);
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn a_handle_used_after_its_invoke_ended_fails_locally() {
    let kept: Arc<Mutex<Option<InvokeHandle>>> = Arc::default();
    let slot = kept.clone();
    let plugin = Plugin::new("late", "0.0.1")
        .capability("llm.sample")
        .tool(Tool::new(
            "keep",
            "",
            move |_: IgnoredAny, ctx: &Invocation| {
                *slot.lock().unwrap() = Some(ctx.handle());
                Ok::<_, ToolError>(json!({ "ended_inside": ctx.host().is_ended() }))
            },
        ));
    let mut p = Conn::serve(plugin);
    p.invoke_ctx(1, "keep", json!({}), json!({ "invoke_id": "inv-keep" }));
    assert_eq!(
        p.recv_until_id("1").0.data(),
        &json!({ "ended_inside": false })
    );
    let handle = kept
        .lock()
        .unwrap()
        .take()
        .expect("the tool kept its handle");
    assert!(handle.is_ended());
    assert_eq!(handle.invoke_id(), Some("inv-keep"));
    let err = handle
        .call::<_, Value>(
            "sampling/createMessage",
            &CreateMessage::new("too late", 10),
        )
        .expect_err("a call after the invoke ended must fail");
    assert!(matches!(err, Error::InvokeEnded), "{err:?}");
    assert!(!handle.progress("progress", &json!({ "late": true })));
    // Nothing was written for either.
    p.request(2, "health", None);
    next_is_reply(&mut p, "2");
    p.close_stdin();
    assert!(p.drain_to_eof().is_empty());
    p.wait_stopped();
}

#[test]
fn calls_from_a_thread_the_handler_spawns_are_stamped_with_its_invoke_id() {
    let plugin = Plugin::new("threads", "0.0.1")
        .capability("llm.sample")
        .tool(Tool::new(
            "fanout",
            "",
            |_: IgnoredAny, ctx: &Invocation| {
                let workers: Vec<_> = (0..2)
                    .map(|i| {
                        let h = ctx.handle();
                        std::thread::spawn(move || h.sampling().complete(&format!("t{i}"), 10))
                    })
                    .collect();
                let texts: Vec<String> = workers
                    .into_iter()
                    .map(|w| w.join().unwrap())
                    .collect::<Result<_, _>>()?;
                Ok::<_, ToolError>(json!({ "texts": texts }))
            },
        ));
    let mut p = Conn::serve(plugin);
    p.invoke_ctx(1, "fanout", json!({}), json!({ "invoke_id": "inv-fan" }));
    let a = p.recv_request("sampling/createMessage");
    let b = p.recv_request("sampling/createMessage");
    for req in [&a, &b] {
        assert_eq!(
            req.v["params"]["context"]["invoke_id"], "inv-fan",
            "{}",
            req.raw
        );
    }
    // Answer in reverse order of arrival.
    for req in [&b, &a] {
        let prompt = req.v["params"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        p.answer(&req.v["id"], sampling_result(&format!("re:{prompt}"), 3));
    }
    assert_eq!(
        p.recv_until_id("1").0.data(),
        &json!({ "texts": ["re:t0", "re:t1"] })
    );
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn a_generic_call_passes_params_through_with_context_and_timeout() {
    let plugin = Plugin::new("generic", "0.0.1").tool(Tool::new(
        "call",
        "",
        |_: IgnoredAny, ctx: &Invocation| {
            Ok::<_, ToolError>(
                match ctx.call::<_, Value>("some/future", &json!({ "q": 1, "list": [true] })) {
                    Ok(v) => json!({ "ok": v }),
                    Err(e) => report(&e),
                },
            )
        },
    ));
    let mut p = Conn::serve(plugin);
    let deadline = common::now_ms() + 30_000;
    p.invoke_ctx(
        1,
        "call",
        json!({}),
        json!({ "invoke_id": "inv-gen", "deadline_ms": deadline }),
    );
    let req = p.recv_request("some/future");
    let params = req.v["params"].as_object().unwrap();
    assert_eq!(params["q"], 1);
    assert_eq!(params["list"], json!([true]));
    assert_eq!(params["context"], json!({ "invoke_id": "inv-gen" }));
    let t = params["_clientTimeoutS"].as_f64().unwrap();
    assert!(t > 0.0 && t <= 30.0, "{t}");
    p.answer(&req.v["id"], json!({ "answer": 42 }));
    assert_eq!(
        p.recv_until_id("1").0.data(),
        &json!({ "ok": { "answer": 42 } })
    );

    // A host error comes back as Remote with code and errorCode.
    p.invoke_ctx(2, "call", json!({}), json!({ "invoke_id": "inv-gen2" }));
    let req = p.recv_request("some/future");
    p.answer_error(
        &req.v["id"],
        json!({ "code": -32004, "message": "nope", "data": { "errorCode": "not_implemented" } }),
    );
    let data = p.recv_until_id("2").0.data().clone();
    assert_eq!(data["code"], -32004);
    assert_eq!(data["error_code"], "not_implemented");
    assert_eq!(data["refused"], false);
    p.close_stdin();
    p.wait_stopped();
}

#[test]
fn closing_input_fails_waiting_calls_with_disconnected() {
    let plugin = Plugin::new("gone", "0.0.1").capability("aps.kv").tool(Tool::new(
        "wait",
        "",
        |_: IgnoredAny, ctx: &Invocation| {
            Ok::<_, ToolError>(match ctx.storage().get("k", Scope::Tool) {
                Ok(_) => json!({ "answered": true }),
                Err(e) => json!({ "disconnected": matches!(e, Error::Disconnected(_)), "message": e.to_string() }),
            })
        },
    ));
    let mut p = Conn::serve(plugin);
    p.invoke_ctx(1, "wait", json!({}), json!({ "invoke_id": "inv-gone" }));
    let req = p.recv_request("storage/get");
    assert_eq!(req.v["params"]["scope"], "tool");
    p.close_stdin();
    let rest = p.drain_to_eof();
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0].data()["disconnected"], true, "{}", rest[0].raw);
    let stopped = p.wait_stopped();
    assert_eq!(stopped.reason, StopReason::InputClosed);
    assert_eq!(stopped.abandoned, 0);
}

#[test]
fn progress_events_above_8_kib_are_dropped_and_counted() {
    let plugin = Plugin::new("prog", "0.0.1").tool(Tool::new("emit", "", |_: IgnoredAny, ctx: &Invocation| {
        let small = ctx.progress("progress", &json!({ "pct": 50 }));
        let big = ctx.progress("progress", &json!({ "blob": "b".repeat(9 * 1024) }));
        let custom = ctx.progress("tool_update", &json!({ "note": "n" }));
        Ok::<_, ToolError>(json!({
            "small": small, "big": big, "custom": custom, "dropped": ctx.host().progress_dropped()
        }))
    }));
    let mut p = Conn::serve(plugin);
    p.invoke_ctx(1, "emit", json!({}), json!({ "invoke_id": "inv-pr" }));
    let (reply, events) = p.recv_until_id("1");
    assert_eq!(
        reply.data(),
        &json!({ "small": true, "big": false, "custom": true, "dropped": 1 })
    );
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events[0].v["params"],
        json!({ "type": "progress", "data": { "pct": 50 }, "context": { "invoke_id": "inv-pr" } })
    );
    assert_eq!(events[1].v["params"]["type"], "tool_update");
    assert!(
        events
            .iter()
            .all(|e| e.method() == Some("executa/progress") && e.v.get("id").is_none())
    );
    p.close_stdin();
    p.wait_stopped();
}
