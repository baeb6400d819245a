//! Reverse calls and progress: the in-memory backends end to end, custom handlers, the
//! Agent's gates and routing, and a slow handler that must not stall other replies.
// Unix only: drives Python fixtures, which a Windows test process under Wine cannot start.
#![cfg(unix)]

mod host_common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{bounded, unbounded};
use executa::RpcError;
use executa::host::{Handlers, Host, HostOptions, MemoryStorage, ScriptedSampling};
use host_common::{opts, py, unique};
use serde_json::{Value, json};

fn tools(args: &[&str], o: HostOptions, handlers: Handlers) -> Host {
    Host::start(py("tools_plugin.py", args), o, handlers).expect("start")
}

#[test]
fn storage_round_trip_through_the_memory_backend() {
    let storage = Arc::new(MemoryStorage::new());
    let host = tools(&[], opts(), Handlers::new().service(storage.clone()));
    let set = host
        .invoke("remember", &json!({"key": "color", "value": "teal"}))
        .unwrap();
    assert!(set.success, "{:?}", set.error);
    let etag = set.data["etag"].as_str().unwrap();
    assert!(etag.starts_with("W/\"") && etag.ends_with('"'), "{etag}");
    assert_eq!(set.data["size_bytes"], 6);

    let got = host.invoke("recall", &json!({"key": "color"})).unwrap();
    assert_eq!(
        got.data,
        json!({"value": "teal", "exists": true, "etag": etag})
    );
    let miss = host.invoke("recall", &json!({"key": "nothing"})).unwrap();
    assert_eq!(
        miss.data,
        json!({"value": null, "exists": false, "etag": null})
    );
    assert_eq!(storage.value("user", "color"), Some(json!("teal")));
}

#[test]
fn sampling_echo_and_fixture_replies() {
    let host = tools(&[], opts(), Handlers::dev_backends());
    let r = host
        .invoke("sample", &json!({"prompt": "say this back"}))
        .unwrap();
    assert_eq!(r.data["text"], "say this back");

    let fixture = r#"{"match":{"contains":"weather"},"result":{"text":"sunny, 21 C"}}"#;
    let sampling = ScriptedSampling::from_jsonl(fixture)
        .unwrap()
        .with_model("fixture-model");
    let host = tools(&[], opts(), Handlers::new().service(Arc::new(sampling)));
    let r = host
        .invoke("sample", &json!({"prompt": "what's the weather?"}))
        .unwrap();
    assert_eq!(
        r.data,
        json!({"text": "sunny, 21 C", "model": "fixture-model"})
    );
    // The plugin turns the failed reverse call into an error frame carrying the host's error.
    let err = host
        .invoke("sample", &json!({"prompt": "anything else"}))
        .unwrap_err();
    let host_error = err.rpc().and_then(|e| e.data.clone()).unwrap();
    assert_eq!(
        host_error["data"]["errorCode"], "NO_FIXTURE_MATCH",
        "{host_error}"
    );
}

#[test]
fn progress_reaches_the_callback_with_its_invoke_id() {
    let (tx, rx) = unbounded();
    let handlers = Handlers::new().on_progress(move |p| {
        let _ = tx.send(p.clone());
    });
    let host = tools(&[], opts(), handlers);
    let r = host.invoke("progress", &json!({"steps": 3})).unwrap();
    assert!(host.sync_progress(host_common::EVENT_WAIT));
    let events: Vec<_> = rx.try_iter().collect();
    assert_eq!(events.len(), 3, "{events:?}");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.invoke_id.as_deref(), Some(r.invoke_id.as_str()));
        assert!(e.active, "the invoke was in flight");
        assert_eq!(e.kind, "progress");
        assert_eq!(e.data, json!({"step": i + 1, "of": 3}));
    }
}

fn reverse(host: &Host, method: &str) -> executa::host::InvokeResult {
    host.invoke("reverse", &json!({"method": method, "params": {"x": 1}}))
        .unwrap()
}

#[test]
fn a_method_without_handler_gets_minus_32601() {
    let host = tools(&[], opts(), Handlers::new());
    let r = reverse(&host, "nobody/handles");
    assert!(!r.success);
    assert_eq!(r.details.as_ref().unwrap()["code"], -32601, "{r:?}");
}

#[test]
fn custom_handlers_see_params_and_the_routed_invoke_id() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let handlers = Handlers::new()
        .on("test/whoami", move |call| {
            log.lock().unwrap().push(call.params.clone());
            Ok(json!({ "invoke_id": call.invoke_id }))
        })
        .on("test/panic", |_| panic!("handler bug"));
    let host = tools(&[], opts(), handlers);
    let r = reverse(&host, "test/whoami");
    assert_eq!(r.data["result"]["invoke_id"], r.invoke_id);
    // `context` is routing, not payload: the handler does not see it.
    assert_eq!(seen.lock().unwrap()[0], json!({"x": 1}));

    // Without context.invoke_id, the single invoke in flight is used (legacy routing).
    let r = host
        .invoke("unstamped", &json!({"method": "test/whoami"}))
        .unwrap();
    assert_eq!(r.data["result"]["invoke_id"], r.invoke_id);

    let r = reverse(&host, "test/panic");
    let details = r.details.unwrap();
    assert_eq!(details["code"], -32603);
    assert!(
        details["message"].as_str().unwrap().contains("handler bug"),
        "{details}"
    );
}

#[test]
fn a_slow_handler_does_not_stall_other_replies() {
    let (entered_tx, entered_rx) = bounded::<()>(1);
    let (release_tx, release_rx) = bounded::<()>(1);
    let handlers = Handlers::new().on("test/slow", move |_| {
        let _ = entered_tx.send(());
        release_rx
            .recv_timeout(host_common::EVENT_WAIT)
            .map_err(|_| RpcError::new(-32603, "never released"))?;
        Ok(json!("released"))
    });
    let host = tools(&[], opts(), handlers);
    std::thread::scope(|s| {
        let slow = s.spawn(|| reverse(&host, "test/slow"));
        entered_rx
            .recv_timeout(host_common::EVENT_WAIT)
            .expect("the slow handler started");
        // While it blocks, other invokes (and their replies) flow.
        for i in 0..10 {
            let r = host
                .invoke("echo", &json!({"text": i.to_string()}))
                .unwrap();
            assert_eq!(r.data["text"], i.to_string());
        }
        assert!(
            !slow.is_finished(),
            "the slow call is still waiting for its handler"
        );
        release_tx.send(()).unwrap();
        let r = slow.join().unwrap();
        assert_eq!(r.data["result"], "released");
    });
}

fn error_code(r: &executa::host::InvokeResult) -> (Value, Value) {
    let d = r.details.clone().unwrap_or_default();
    (d["code"].clone(), d["data"]["errorCode"].clone())
}

#[test]
fn reverse_calls_are_gated_like_the_agent() {
    // No host_capabilities in the manifest: sampling and storage are refused.
    let host = tools(&["--no-caps"], opts(), Handlers::dev_backends());
    let r = reverse(&host, "sampling/createMessage");
    assert_eq!(error_code(&r), (json!(-32008), json!("NOT_NEGOTIATED")));
    let r = reverse(&host, "storage/get");
    assert_eq!(
        error_code(&r),
        (json!(-32021), json!("STORAGE_NOT_GRANTED"))
    );

    // A 1.1 session has no reverse RPC at all.
    let o = HostOptions {
        initialize_timeout: Duration::from_millis(300),
        ..opts()
    };
    let host = tools(&["--v1"], o, Handlers::new().on("test/x", |_| Ok(json!(1))));
    let r = reverse(&host, "test/x");
    assert_eq!(
        error_code(&r),
        (json!(-32601), json!("REVERSE_RPC_DISABLED"))
    );
}

#[test]
fn a_method_without_handler_is_32601_even_when_routing_would_fail() {
    // Two invokes in flight and a reverse call without context.invoke_id: the routing
    // error (-32602) applies only to a method the host could have served.
    let (started_tx, started_rx) = bounded(1);
    let handlers = Handlers::new().on_progress(move |_| {
        let _ = started_tx.try_send(());
    });
    let host = tools(&[], opts(), handlers);
    let release = std::env::temp_dir().join(unique("release"));
    std::thread::scope(|s| {
        let held = s.spawn(|| host.invoke("hold", &json!({"until": release})));
        // `hold` announces itself with a progress event once it runs.
        started_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the held invoke started");
        let r = host
            .invoke("unstamped", &json!({"method": "nobody/handles"}))
            .unwrap();
        std::fs::write(&release, b"").unwrap();
        assert!(!r.success);
        let details = r.details.clone().unwrap_or_default();
        assert_eq!(details["code"], -32601, "{details}");
        assert!(held.join().unwrap().unwrap().success);
    });
    let _ = std::fs::remove_file(&release);
}

/// A service that says which thread answered it, quick or not as built.
struct WhereService {
    method: &'static str,
    quick: bool,
}

impl executa::host::Service for WhereService {
    fn handles(&self, method: &str) -> bool {
        method == self.method
    }
    fn call(&self, _: &executa::host::ReverseCall) -> Result<Value, RpcError> {
        Ok(json!(std::thread::current().name().unwrap_or("?")))
    }
    fn is_quick(&self) -> bool {
        self.quick
    }
}

#[test]
fn a_quick_service_is_answered_on_the_reader_and_any_other_on_a_worker() {
    let handlers = Handlers::new()
        .service(Arc::new(WhereService {
            method: "test/quick",
            quick: true,
        }))
        .service(Arc::new(WhereService {
            method: "test/slow",
            quick: false,
        }))
        // A closure never declared its cost: a worker answers it.
        .on("test/closure", |_| {
            Ok(json!(std::thread::current().name().unwrap_or("?")))
        });
    let host = tools(&[], opts(), handlers);
    let thread = |method| reverse(&host, method).data["result"].clone();
    let quick = thread("test/quick");
    assert!(
        quick.as_str().is_some_and(|t| t.starts_with("executa-rd")),
        "{quick}"
    );
    for method in ["test/slow", "test/closure"] {
        let t = thread(method);
        assert!(
            t.as_str().is_some_and(|t| t.starts_with("executa-rpc")),
            "{method}: {t}"
        );
    }
}

/// The host refuses a storage call past the Agent's 200 per invoke, -32024
/// `QUOTA_EXCEEDED`, and a new invoke has its own budget (issue 36, item 6: 400 calls in
/// one invoke were all served).
#[test]
fn the_storage_budget_of_an_invoke_is_enforced() {
    let handlers = Handlers::new().service(Arc::new(MemoryStorage::new()));
    let host = tools(&[], opts(), handlers);
    for _ in 0..2 {
        let r = host
            .invoke("storage_many", &json!({ "n": 203 }))
            .expect("storage_many");
        assert!(r.success, "{:?}", r.error);
        assert_eq!(r.data["answered"], 200, "{}", r.data);
        assert_eq!(
            r.data["codes"],
            json!([-32024, -32024, -32024]),
            "{}",
            r.data
        );
    }
}

#[test]
fn answers_to_a_plugin_that_reads_none_of_them_yet_wait_without_stalling_the_reader() {
    // The answers to 1,000 quick calls (84 KB) overflow the plugin's stdin pipe (64 KiB, or
    // less) while the plugin writes the calls and reads nothing. The reader answers them
    // itself: if its write waited for room, it would stop reading the plugin's stdout, the
    // plugin would block on its next call, and neither would move again.
    let n = 1_000;
    let o = HostOptions {
        // Room for every answer whatever the pipe's size, so none is dropped for a full queue.
        write_queue: 2 * n,
        // 1,000 calls in one invoke: past the Agent's storage budget, which is not what
        // this test is about (`the_storage_budget_of_an_invoke_is_enforced` is).
        gate_reverse_calls: false,
        ..opts()
    };
    let handlers = Handlers::new().service(Arc::new(MemoryStorage::new()));
    let host = tools(&[], o, handlers);
    let r = host.invoke("flood", &json!({ "n": n })).expect("flood");
    assert!(r.success, "{:?}", r.error);
    // Once answers wait in the queue, quick calls go to the reverse-call workers, and while
    // their queue is full a call is refused as busy: a refusal is that call's one reply.
    let mut replied: Vec<String> = serde_json::from_value(r.data["answered"].clone()).unwrap();
    let refused: Vec<(String, i64)> = serde_json::from_value(r.data["errors"].clone()).unwrap();
    assert!(!replied.is_empty(), "answers went through");
    for (id, code) in &refused {
        assert_eq!(*code, -32000, "{id} refused as busy");
        replied.push(id.clone());
    }
    replied.sort();
    let mut want: Vec<String> = (0..n).map(|i| format!("fl-{i}")).collect();
    want.sort();
    assert!(replied == want, "each call has exactly one reply");
}
