//! The frames of reverse calls: params are rendered once and stamped with the invoke's
//! context and client timeout, never sending a key twice; a sampling answer is parsed once
//! for the caller and the token budget.

mod common;

use common::{Conn, Msg};
use executa::{CreateMessage, Invocation, Plugin, Tool, ToolError};
use serde_json::{Value, json};

/// `call` sends `args.params` to `args.method` through the generic path; `typed` makes
/// one typed sampling call and reports the text and the budget left afterwards.
fn plugin() -> Plugin {
    Plugin::new("frames", "0.0.1")
        .capability("llm.sample")
        .tool(Tool::new("call", "", |args: Value, ctx: &Invocation| {
            let method = args["method"].as_str().unwrap_or_default().to_owned();
            let out = ctx.call::<_, Value>(&method, &args["params"]);
            Ok::<_, ToolError>(match out {
                Ok(v) => json!({ "ok": v }),
                Err(e) => json!({ "error": e.to_string() }),
            })
        }))
        .tool(Tool::new("typed", "", |args: Value, ctx: &Invocation| {
            let rounds = args["rounds"].as_u64().unwrap_or(1);
            let mut texts = Vec::new();
            for _ in 0..rounds {
                match ctx.sampling().create_message(&CreateMessage::new("hi", 10)) {
                    Ok(r) => texts.push(json!(r.text())),
                    Err(e) => texts.push(json!({ "error": e.to_string() })),
                }
            }
            Ok::<_, ToolError>(json!({ "texts": texts }))
        }))
}

fn start() -> Conn {
    let mut p = Conn::serve(plugin());
    p.initialize("2.0", json!({ "sampling": {} }));
    p
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

fn call(p: &mut Conn, id: &str, method: &str, params: Value) {
    let context = json!({ "invoke_id": format!("inv-{id}") });
    p.invoke_ctx(
        id,
        "call",
        json!({ "method": method, "params": params }),
        context,
    );
}

#[test]
fn params_that_name_context_or_the_timeout_are_stamped_without_a_second_key() {
    let mut p = start();
    let params = json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": "hi" } }],
        "maxTokens": 10,
        "context": { "invoke_id": "forged" },
        "_clientTimeoutS": 9999,
    });
    call(&mut p, "a", "sampling/createMessage", params);
    let req = p.recv_request("sampling/createMessage");
    assert_eq!(count(&req.raw, "\"context\""), 1, "{}", req.raw);
    assert_eq!(count(&req.raw, "\"_clientTimeoutS\""), 1, "{}", req.raw);
    assert_eq!(
        req.v["params"]["context"]["invoke_id"], "inv-a",
        "{}",
        req.raw
    );
    let t = req.v["params"]["_clientTimeoutS"].as_f64().unwrap();
    assert!(
        t > 0.0 && t <= 90.0,
        "the default timeout, not the caller's key: {t}"
    );
    assert_eq!(req.v["params"]["maxTokens"], 10);
    p.answer(
        &req.v["id"],
        json!({ "content": { "type": "text", "text": "ok" } }),
    );
    let reply = p.recv_until_id("\"a\"").0;
    assert_eq!(reply.data()["ok"]["content"]["text"], "ok", "{}", reply.raw);
}

#[test]
fn plain_params_and_null_params_get_the_context_and_timeout_appended() {
    let mut p = start();
    call(
        &mut p,
        "b",
        "sampling/createMessage",
        json!({ "messages": [], "maxTokens": 10 }),
    );
    let req = p.recv_request("sampling/createMessage");
    check_stamped(&req, "inv-b");
    assert_eq!(req.v["params"]["maxTokens"], 10);
    p.answer(&req.v["id"], json!({ "content": "bare" }));
    assert_eq!(p.recv_until_id("\"b\"").0.data()["ok"]["content"], "bare");

    call(&mut p, "c", "sampling/createMessage", Value::Null);
    let req = p.recv_request("sampling/createMessage");
    check_stamped(&req, "inv-c");
    assert_eq!(req.v["params"].as_object().unwrap().len(), 2, "{}", req.raw);
    p.answer(&req.v["id"], json!({}));
    p.recv_until_id("\"c\"");
}

fn check_stamped(req: &Msg, invoke_id: &str) {
    assert_eq!(
        req.v["params"]["context"]["invoke_id"], invoke_id,
        "{}",
        req.raw
    );
    assert!(
        req.v["params"]["_clientTimeoutS"].as_f64().is_some(),
        "{}",
        req.raw
    );
    assert_eq!(count(&req.raw, "\"context\""), 1, "{}", req.raw);
}

/// Invokes `call` with `params` and returns the error its reverse call failed with,
/// checking that no frame went to the host before the reply.
fn refused(p: &mut Conn, id: &str, params: Value) -> String {
    call(p, id, "sampling/createMessage", params);
    let (reply, before) = p.recv_until_id(&format!("\"{id}\""));
    assert!(before.is_empty(), "refused without a frame: {before:?}");
    reply.data()["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error in {}", reply.raw))
        .to_owned()
}

#[test]
fn params_that_are_not_an_object_fail_the_call_without_a_frame() {
    let error = refused(&mut start(), "d", json!([1, 2]));
    assert!(error.contains("must be a JSON object"), "{error}");
}

#[test]
fn the_generic_path_reads_max_tokens_from_the_rendered_params() {
    let params = json!({ "messages": [], "maxTokens": 100_000 });
    let error = refused(&mut start(), "e", params);
    assert!(error.contains("maxTokens 100000"), "{error}");
}

/// Typed answers count their tokens once: 3 answers of 12,000 tokens spend the 32,000
/// budget, so the fourth call is refused locally.
#[test]
fn typed_sampling_answers_count_their_tokens_against_the_budget() {
    let mut p = start();
    let context = json!({ "invoke_id": "inv-f" });
    p.invoke_ctx("f", "typed", json!({ "rounds": 4 }), context);
    for text in ["one", "two", "three"] {
        let req = p.recv_request("sampling/createMessage");
        check_stamped(&req, "inv-f");
        let answer = json!({
            "content": { "type": "text", "text": text, "annotations": [1] },
            "usage": { "inputTokens": 5000, "outputTokens": 7000 },
        });
        p.answer(&req.v["id"], answer);
    }
    let reply = p.recv_until_id("\"f\"").0;
    let texts = reply.data()["texts"].as_array().unwrap().clone();
    assert_eq!(&texts[..3], &[json!("one"), json!("two"), json!("three")]);
    let refusal = texts[3]["error"].as_str().unwrap_or_default();
    assert!(refusal.contains("token budget spent"), "{}", reply.raw);
}
