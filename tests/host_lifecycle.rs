//! The host against well-behaved plugins: the full lifecycle, fallback, concurrency,
//! timeouts and the invoke context.
// The tests marked `#[cfg(unix)]` drive Python fixtures, which a Windows test process under
// Wine cannot start; what they leave unused there is allowed.
#![cfg_attr(not(unix), allow(unused_imports, dead_code))]

mod host_common;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use executa::host::{
    ExitStage, Handlers, Host, HostOptions, HostState, InvokeOptions, PluginProcess,
};
use executa::{Error, ProtocolVersion};
use host_common::{opts, py, unique};
use serde_json::json;

#[test]
fn handles_are_send_and_sync() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Host>();
    shareable::<PluginProcess>();
    shareable::<Handlers>();
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn quickstart_plugin_full_lifecycle() {
    let host = Host::start(py("quickstart.py", &[]), opts(), Handlers::new()).expect("start");
    let hs = host.handshake().unwrap();
    assert_eq!(hs.protocol, Some(ProtocolVersion::V2));
    assert_eq!(hs.fallback, None);
    assert_eq!(hs.server_info.as_ref().unwrap()["name"], "quickstart");

    let m = host.manifest().unwrap();
    assert_eq!(m.name, "quickstart");
    let tools: Vec<_> = m.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["echo", "add", "whoami"]);
    assert_eq!(m.tools[1].timeout, Some(10));

    let r = host.invoke("echo", &json!({"text": "héllo"})).unwrap();
    assert!(r.success);
    assert_eq!(r.data, json!({"text": "héllo"}));
    assert_eq!(r.invoke_id.len(), 32);

    let r = host.invoke("add", &json!({"a": 2, "b": 40.5})).unwrap();
    assert_eq!(r.data["sum"], 42.5);
    let r = host.invoke("add", &json!({"a": "x"})).unwrap();
    assert!(!r.success);
    assert!(r.error.unwrap().contains("add needs numbers"));

    let err = host.invoke("nope", &json!({})).unwrap_err();
    assert_eq!(err.code(), Some(-32601), "{err}");

    let health = host.health().unwrap();
    assert!(health.implemented && health.is_healthy());
    assert_eq!(health.status, "ready");
    assert!(host.stdout_noise().is_clean());

    // The stderr drain reads on its own thread: the line may still be on its way after
    // the calls above (they need no stderr), so wait for it.
    host_common::wait_until(
        "the plugin's ready line reaches the stderr tail",
        host_common::EVENT_WAIT,
        || {
            host.stderr_tail()
                .iter()
                .any(|l| l.contains("quickstart: ready"))
        },
    );
    let report = host.shutdown().expect("a process was running");
    assert_eq!(report.stage, ExitStage::StdinClosed, "{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(host.status().state, HostState::Stopped);
    assert_eq!(host.status().restarts, 0);
    assert!(matches!(
        host.invoke("echo", &json!({"text": "late"})),
        Err(Error::Disconnected(_))
    ));
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn unanswered_initialize_falls_back_to_v1_silently() {
    let o = HostOptions {
        initialize_timeout: Duration::from_millis(300),
        ..opts()
    };
    let host = Host::start(py("no_initialize.py", &[]), o, Handlers::new()).expect("start");
    let hs = host.handshake().unwrap();
    assert_eq!(hs.protocol, Some(ProtocolVersion::V1));
    assert!(
        hs.fallback
            .as_deref()
            .unwrap()
            .contains("no answer to initialize"),
        "{hs:?}"
    );
    assert!(!hs.reverse_rpc());
    // The session keeps working on 1.1.
    assert_eq!(
        host.invoke("echo", &json!({"text": "v1"})).unwrap().data["text"],
        "v1"
    );
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn initialize_answered_with_minus_32601_falls_back_at_once() {
    let host = Host::start(
        py("flawed.py", &["init_not_found"]),
        opts(),
        Handlers::new(),
    )
    .expect("start");
    let hs = host.handshake().unwrap();
    assert_eq!(hs.protocol, Some(ProtocolVersion::V1));
    assert!(hs.fallback.as_deref().unwrap().contains("-32601"), "{hs:?}");
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn health_method_not_found_counts_as_healthy() {
    let p =
        PluginProcess::spawn(&py("flawed.py", &["no_health"]), opts(), Handlers::new()).unwrap();
    let h = p.health().unwrap();
    assert!(
        !h.implemented && h.is_healthy(),
        "-32601 on health counts as healthy"
    );
    let report = p.shutdown();
    assert!(report.is_clean(), "{report}");
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn many_invokes_in_flight_from_many_threads() {
    let host = Host::start(py("tools_plugin.py", &[]), opts(), Handlers::new()).expect("start");
    // The barrier tool only succeeds when 6 invokes are inside the plugin at once.
    std::thread::scope(|s| {
        let calls: Vec<_> = (0..6)
            .map(|_| s.spawn(|| host.invoke("barrier", &json!({"n": 6}))))
            .collect();
        for c in calls {
            let r = c.join().unwrap().unwrap();
            assert!(r.success, "{:?}", r.error);
        }
    });
    // Replies are matched to their callers even when interleaved.
    std::thread::scope(|s| {
        for t in 0..8 {
            let host = &host;
            s.spawn(move || {
                for i in 0..25 {
                    let text = format!("t{t}-{i}");
                    let r = host.invoke("echo", &json!({ "text": text })).unwrap();
                    assert_eq!(r.data["text"], text);
                }
            });
        }
    });
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn caller_timeout_fails_the_call_and_the_late_reply_is_dropped() {
    let host = Host::start(py("tools_plugin.py", &[]), opts(), Handlers::new()).expect("start");
    // The plugin answers only once the test releases it: the timeout cannot lose a race
    // against a slow machine.
    let release = std::env::temp_dir().join(unique("release"));
    let slow = InvokeOptions::new().timeout(Duration::from_millis(200));
    match host.invoke_with("hold", &json!({"until": release}), &slow) {
        Err(Error::Timeout { method, after }) => {
            assert_eq!(method, "invoke");
            assert_eq!(after, Duration::from_millis(200));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    std::fs::write(&release, b"").unwrap();
    // Other calls are unaffected, and the late reply does not confuse them.
    for i in 0..5 {
        let r = host
            .invoke("echo", &json!({"text": i.to_string()}))
            .unwrap();
        assert_eq!(r.data["text"], i.to_string());
    }
    let _ = std::fs::remove_file(&release);
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn context_carries_invoke_id_deadline_credentials_and_tokens() {
    let o = HostOptions {
        dev_tokens: true,
        ..opts()
    };
    let host = Host::start(py("tools_plugin.py", &[]), o, Handlers::new()).expect("start");
    let call = InvokeOptions::new()
        .credential("API_KEY", "sk-live-123456")
        .token("upload_token", "eyJ.upload");
    assert!(
        !format!("{call:?}").contains("sk-live"),
        "credentials leak through Debug"
    );
    let before = now_ms();
    let r = host.invoke_with("credentials", &json!({}), &call).unwrap();
    let d = &r.data;
    assert_eq!(d["names"], json!(["API_KEY"]));
    assert_eq!(d["lengths"]["API_KEY"], 14);
    assert_eq!(d["invoke_id"], r.invoke_id);
    let keys: BTreeSet<_> = d["context_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let want = [
        "credentials",
        "deadline_ms",
        "invoke_id",
        "sampling_token",
        "storage_token",
        "upload_token",
    ];
    assert_eq!(keys, want.into_iter().collect());
    // The manifest gives `credentials` a 7 s timeout: the deadline is now + 7 s.
    let deadline = d["deadline_ms"].as_u64().unwrap();
    assert!(
        deadline >= before + 7000 && deadline <= now_ms() + 7000,
        "{deadline} vs {before}"
    );

    // The caller's timeout wins over the manifest's.
    let r = host
        .invoke_with(
            "credentials",
            &json!({}),
            &InvokeOptions::new().timeout(Duration::from_secs(2)),
        )
        .unwrap();
    let deadline = r.data["deadline_ms"].as_u64().unwrap();
    assert!(deadline <= now_ms() + 2000, "{deadline}");
    // Each invoke gets a fresh id.
    let again = host.invoke("credentials", &json!({})).unwrap();
    assert_ne!(again.invoke_id, r.invoke_id);
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn initialize_is_sent_with_id_0_as_the_agent_does() {
    // This plugin drops every request whose id is falsy: only initialize (id 0) goes
    // unanswered, so the session falls back to 1.1 on the timeout.
    let o = HostOptions {
        initialize_timeout: Duration::from_millis(500),
        ..opts()
    };
    let p = PluginProcess::spawn(&py("flawed.py", &["falsy_id"]), o, Handlers::new()).unwrap();
    let h = p.initialize().unwrap();
    assert_eq!(h.protocol, Some(ProtocolVersion::V1), "{h:?}");
    assert!(
        h.fallback
            .as_deref()
            .unwrap_or_default()
            .contains("no answer"),
        "{h:?}"
    );
    // Later requests have non-zero ids and are answered.
    assert_eq!(p.describe().unwrap().name, "flawed");
    assert!(p.health().is_ok());
}
