//! The host against the crate's own `everything` example plugin: every method, concurrent
//! invokes, reverse calls through the in-memory backends, progress, and `executa check`.

mod host_common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crossbeam_channel::unbounded;
use executa::host::check::{self, CheckOptions, Outcome, Smoke};
use executa::host::{
    ExitStage, Handlers, Host, InvokeOptions, MemoryStorage, PluginCommand, ScriptedSampling,
};
use executa::{Error, ProtocolVersion};
use host_common::opts;
use serde_json::json;

/// The example binary (`target/<profile>/examples/everything`, next to this test's own
/// directory), brought up to date once per run: a targeted `cargo test --test` does not
/// build examples, and a stale binary would test old code. With `EXECUTA_EXAMPLES` set (a
/// folder of examples built already: a cross build, whose tests run under an emulator that
/// cannot start cargo), the example there instead.
fn everything() -> PluginCommand {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    let path = PATH.get_or_init(|| {
        let file = format!("everything{}", std::env::consts::EXE_SUFFIX);
        if let Some(dir) = std::env::var_os("EXECUTA_EXAMPLES") {
            let bin = PathBuf::from(dir).join(file);
            assert!(bin.exists(), "{} was not built", bin.display());
            return bin;
        }
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--quiet", "--example", "everything"]);
        if cfg!(feature = "mcp") {
            build.args(["--features", "mcp"]);
        }
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        let status = build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building examples/everything failed");
        let exe = std::env::current_exe().expect("test binary path");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("target/<profile>");
        profile_dir.join("examples").join(file)
    });
    PluginCommand::new(path)
}

#[test]
fn every_method_of_the_everything_plugin() {
    let storage = Arc::new(MemoryStorage::with_scopes(&["user", "tool"]));
    let (tx, progress) = unbounded();
    let handlers = Handlers::new()
        .service(storage.clone())
        .service(Arc::new(ScriptedSampling::echo()))
        .on_progress(move |p| {
            let _ = tx.send(p.clone());
        });
    let host = Host::start(everything(), opts(), handlers).expect("start");
    assert_eq!(
        host.handshake().unwrap().protocol,
        Some(ProtocolVersion::V2)
    );
    let m = host.manifest().unwrap();
    assert_eq!(
        (m.name.as_str(), m.version.as_str()),
        ("everything", "1.0.0")
    );
    assert_eq!(m.host_capabilities, ["llm.sample", "aps.kv"]);
    for tool in [
        "echo",
        "sleep",
        "fail",
        "panic",
        "big",
        "print",
        "credentials",
        "sample",
        "remember",
        "recall",
        "progress",
    ] {
        assert!(
            m.tools.iter().any(|t| t.name == tool),
            "manifest lacks {tool}"
        );
    }

    let r = host
        .invoke("echo", &json!({"a": [1, 2], "b": "x"}))
        .unwrap();
    assert_eq!(r.data, json!({"a": [1, 2], "b": "x"}));
    assert!(
        host.invoke("sleep", &json!({"ms": 20})).unwrap().data["slept_ms"]
            .as_u64()
            .unwrap()
            >= 20
    );
    let r = host
        .invoke("fail", &json!({"message": "as asked"}))
        .unwrap();
    assert!(!r.success);
    assert!(r.error.unwrap().contains("as asked"));
    let err = host.invoke("panic", &json!({})).unwrap_err();
    assert_eq!(err.code(), Some(-32603), "{err}");
    let r = host.invoke("big", &json!({"bytes": 300_000})).unwrap();
    assert_eq!(r.data["blob"].as_str().unwrap().len(), 300_000);

    // println! inside a tool lands on stderr; stdout stays pure.
    let r = host
        .invoke("print", &json!({"text": "hello stderr"}))
        .unwrap();
    assert!(r.success);
    host_common::wait_until(
        "the printed line reaches stderr",
        Duration::from_secs(5),
        || {
            host.stderr_tail()
                .iter()
                .any(|l| l.contains("hello stderr"))
        },
    );
    assert!(host.stdout_noise().is_clean());

    let call = InvokeOptions::new().credential("DEMO_API_KEY", "demo-secret");
    let r = host.invoke_with("credentials", &json!({}), &call).unwrap();
    assert_eq!(r.data["names"], json!(["DEMO_API_KEY"]));

    // Reverse calls: sampling answered by the echo responder, storage by the memory store.
    let r = host
        .invoke("sample", &json!({"prompt": "repeat after me"}))
        .unwrap();
    assert_eq!(r.data["text"], "repeat after me", "{r:?}");
    let r = host
        .invoke("remember", &json!({"key": "k1", "value": {"n": 7}}))
        .unwrap();
    assert!(r.success, "{r:?}");
    assert!(r.data["etag"].as_str().unwrap().starts_with("W/\""));
    assert_eq!(storage.value("user", "k1"), Some(json!({"n": 7})));
    let r = host.invoke("recall", &json!({"key": "k1"})).unwrap();
    assert_eq!(
        (r.data["exists"].clone(), r.data["value"].clone()),
        (json!(true), json!({"n": 7}))
    );
    let r = host.invoke("recall", &json!({"key": "missing"})).unwrap();
    assert_eq!(r.data["exists"], false);

    let r = host.invoke("progress", &json!({"steps": 4})).unwrap();
    assert!(host.sync_progress(host_common::EVENT_WAIT));
    let events: Vec<_> = progress.try_iter().collect();
    assert_eq!(events.len(), 4, "{events:?}");
    assert!(
        events
            .iter()
            .all(|e| e.invoke_id.as_deref() == Some(r.invoke_id.as_str()) && e.active)
    );
    assert_eq!(events[3].data, json!({"step": 4, "of": 4}));

    let health = host.health().unwrap();
    assert!(health.implemented && health.is_healthy(), "{health:?}");
    let report = host.shutdown().unwrap();
    assert_eq!(report.stage, ExitStage::StdinClosed, "{report}");
    assert!(report.is_clean(), "{report}");
}

#[test]
fn concurrent_invokes_with_reverse_calls() {
    let storage = Arc::new(MemoryStorage::new());
    let handlers = Handlers::new()
        .service(storage.clone())
        .service(Arc::new(ScriptedSampling::echo()));
    let host = Host::start(everything(), opts(), handlers).expect("start");
    std::thread::scope(|s| {
        for t in 0..6 {
            let host = &host;
            s.spawn(move || {
                for i in 0..10 {
                    let key = format!("t{t}-{i}");
                    let r = host
                        .invoke("remember", &json!({"key": key, "value": {"i": i}}))
                        .unwrap();
                    assert!(r.success, "{r:?}");
                    let r = host.invoke("sample", &json!({"prompt": key})).unwrap();
                    assert_eq!(r.data["text"], key.as_str());
                    let r = host.invoke("recall", &json!({"key": key})).unwrap();
                    assert_eq!(r.data["value"], json!({"i": i}));
                }
            });
        }
    });
    assert_eq!(storage.len(), 60);
}

#[test]
fn slow_invoke_times_out_without_disturbing_others() {
    let host = Host::start(everything(), opts(), Handlers::new()).expect("start");
    // A sleep far longer than the test: the timeout cannot lose a race on a slow machine.
    let quick = InvokeOptions::new().timeout(Duration::from_millis(100));
    assert!(matches!(
        host.invoke_with("sleep", &json!({"ms": 600_000}), &quick),
        Err(Error::Timeout { .. })
    ));
    assert_eq!(
        host.invoke("echo", &json!({"still": "fine"})).unwrap().data["still"],
        "fine"
    );
}

#[test]
fn executa_check_passes_on_everything() {
    let mut o = CheckOptions {
        host: opts(),
        ..CheckOptions::default()
    };
    let r = check::run(&everything(), &o);
    let text: String = r.lines.iter().map(|l| format!("{l}\n")).collect();
    assert!(r.passed(), "{text}");
    // Every tool is invoked: the one warning is the `panic` tool's deliberate -32603.
    assert_eq!(r.count(Outcome::Warn), 1, "{text}");
    let invoked = r.line("invoke result").unwrap();
    assert_eq!(invoked.outcome, Outcome::Warn, "{text}");
    assert!(invoked.detail.starts_with("`panic` {}: "), "{text}");
    assert!(invoked.detail.contains("-32603"), "{text}");

    // With a smoke invoke that makes reverse calls and sends progress.
    o.smoke = Smoke::Tool {
        name: "progress".into(),
        arguments: json!({"steps": 3}),
    };
    let r = check::run(&everything(), &o);
    assert!(r.passed());
    assert_eq!(r.line("progress").unwrap().outcome, Outcome::Pass);
    o.smoke = Smoke::Tool {
        name: "sample".into(),
        arguments: json!({"prompt": "hi"}),
    };
    let r = check::run(&everything(), &o);
    assert!(r.passed());
    assert!(r.line("reverse calls").unwrap().detail.contains("1 served"));
}
