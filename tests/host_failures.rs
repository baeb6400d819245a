//! The host against misbehaving plugins: crashes, restarts, shutdown escalation, and
//! malformed, oversized or noisy output that must fail only the affected call.
// The tests marked `#[cfg(unix)]` drive Python and sh fixtures, which a Windows test process
// under Wine cannot start (those that find processes in `/proc` are Linux only); what they
// leave unused there is allowed.
#![cfg_attr(not(unix), allow(unused_imports, dead_code))]

mod host_common;

#[cfg(unix)]
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use executa::Error;
use executa::host::{
    ExitStage, Handlers, Host, HostOptions, HostState, InvokeOptions, PluginProcess, RestartPolicy,
};
#[cfg(target_os = "linux")]
use host_common::processes_with;
use host_common::{EVENT_WAIT, opts, py, short_shutdown, unique, wait_until};
use serde_json::json;

#[test]
#[cfg(unix)] // drives a Python fixture
fn crash_mid_invoke_fails_the_pending_call_at_once_naming_status_and_stderr() {
    let o = HostOptions {
        restart: RestartPolicy {
            enabled: false,
            ..RestartPolicy::default()
        },
        ..opts()
    };
    let host = Host::start(py("crash_mid_invoke.py", &[]), o, Handlers::new()).expect("start");
    // A long timeout: the call must fail because the process died, not because time ran out.
    let call = InvokeOptions::new().timeout(Duration::from_secs(60));
    match host.invoke_with("work", &json!({}), &call) {
        Err(Error::Disconnected(why)) => {
            assert!(
                why.contains("exited unexpectedly (exit status: 3)"),
                "{why}"
            );
            assert!(
                why.contains("fatal: disk on fire"),
                "stderr tail missing: {why}"
            );
        }
        other => panic!("expected a disconnect, got {other:?}"),
    }
    wait_until("the host gives up", EVENT_WAIT, || {
        matches!(host.status().state, HostState::Failed(_))
    });
    let status = host.status();
    assert!(status.last_exit.unwrap().contains("exit status: 3"));
    match host.invoke("ok", &json!({})) {
        Err(Error::Disconnected(why)) => assert!(why.contains("restarts are disabled"), "{why}"),
        other => panic!("expected a disconnect, got {other:?}"),
    }
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn plugin_exiting_after_one_reply_fails_to_start_with_its_exit_status() {
    // Pitfall #1: it answers initialize, then exits, so describe never gets an answer.
    match Host::start(py("exits_after_reply.py", &[]), opts(), Handlers::new()) {
        Err(Error::Disconnected(why)) => {
            assert!(why.contains("exit status: 0"), "{why}");
            assert!(why.contains("done after 1 replies"), "{why}");
        }
        other => panic!("expected a disconnect, got {other:?}"),
    }
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn unexpected_exit_is_restarted_with_backoff_until_the_budget_is_spent() {
    // Serves initialize, describe and one invoke (3 replies), then exits with status 1.
    // Each run reports its start count in its manifest version.
    let runs = std::env::temp_dir().join(unique("runs"));
    let runs_arg = runs.to_str().unwrap().to_owned();
    let host = Host::start(
        py("exits_after_reply.py", &["3", "1", &runs_arg]),
        opts(),
        Handlers::new(),
    )
    .expect("start");
    let first_pid = host.status().pid.unwrap();
    assert_eq!(host.manifest().unwrap().version, "0.1.1");
    for restart in 1..=3 {
        let r = host.invoke("echo", &json!({"text": "once"})).unwrap();
        assert_eq!(r.data["text"], "once");
        wait_until("the plugin is restarted", EVENT_WAIT, || {
            host.status().restarts == restart
        });
        host.wait_ready(EVENT_WAIT).unwrap();
        let status = host.status();
        assert!(
            status
                .last_exit
                .as_deref()
                .unwrap()
                .contains("exit status: 1"),
            "{status:?}"
        );
        assert_ne!(status.pid, Some(first_pid), "a new process serves");
        // The manifest is re-read from the new process.
        let manifest = host.manifest().unwrap();
        assert_eq!(manifest.name, "oneshot");
        assert_eq!(manifest.version, format!("0.1.{}", restart + 1));
    }
    let _ = std::fs::remove_file(&runs);
    // The fourth exit exhausts the three attempts.
    host.invoke("echo", &json!({"text": "last"})).unwrap();
    wait_until("the host gives up", EVENT_WAIT, || {
        matches!(host.status().state, HostState::Failed(_))
    });
    let HostState::Failed(why) = host.status().state else {
        unreachable!()
    };
    assert!(why.contains("gave up after 3 restart attempts"), "{why}");
    assert!(matches!(
        host.wait_ready(Duration::from_secs(1)),
        Err(Error::Disconnected(_))
    ));
    match host.invoke("echo", &json!({"text": "x"})) {
        Err(Error::Disconnected(why)) => assert!(why.contains("exit status: 1"), "{why}"),
        other => panic!("expected a disconnect, got {other:?}"),
    }
}

#[test]
fn restart_delays_grow_exponentially() {
    let p = RestartPolicy {
        base_delay: Duration::from_secs(1),
        ..RestartPolicy::default()
    };
    let delays: Vec<_> = (1..=4).map(|n| p.delay(n).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8]);
    assert_eq!(p.max_attempts, 3);
}

#[test]
#[cfg(unix)] // drives a Python fixture; ends it with SIGTERM
fn plugin_ignoring_stdin_eof_gets_sigterm() {
    let o = HostOptions {
        shutdown: short_shutdown(),
        ..opts()
    };
    let p = PluginProcess::spawn(&py("ignores_eof.py", &[]), o, Handlers::new()).unwrap();
    p.initialize().unwrap();
    p.describe().unwrap();
    let report = p.shutdown();
    assert_eq!(report.stage, ExitStage::Terminated, "{report}");
    assert_eq!(
        report.status.unwrap().signal(),
        Some(libc_sigterm()),
        "{report}"
    );
    assert!(
        report.elapsed >= Duration::from_millis(400),
        "waited the stdin grace first: {report}"
    );
    assert!(p.stderr_tail().iter().any(|l| l.contains("I keep running")));
    // Idempotent.
    assert_eq!(p.shutdown(), report);
}

#[test]
#[cfg(unix)] // drives a Python fixture; ends it with SIGKILL
fn plugin_ignoring_sigterm_gets_sigkill() {
    let o = HostOptions {
        shutdown: short_shutdown(),
        ..opts()
    };
    let p = PluginProcess::spawn(&py("ignores_sigterm.py", &[]), o, Handlers::new()).unwrap();
    p.initialize().unwrap();
    let report = p.shutdown();
    assert_eq!(report.stage, ExitStage::Killed, "{report}");
    assert_eq!(report.status.unwrap().signal(), Some(9), "{report}");
}

fn libc_sigterm() -> i32 {
    15
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn oversized_reply_fails_only_its_call() {
    let o = HostOptions {
        max_frame_bytes: 64 * 1024,
        ..opts()
    };
    let host = Host::start(py("tools_plugin.py", &[]), o, Handlers::new()).expect("start");
    match host.invoke("big", &json!({"bytes": 200_000})) {
        Err(Error::FrameTooLarge { size, max }) => {
            assert!(size > 200_000, "{size}");
            assert_eq!(max, 64 * 1024);
        }
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
    // The id is found at the end of the frame too.
    match host.invoke("big_id_last", &json!({"bytes": 200_000})) {
        Err(Error::FrameTooLarge { size, .. }) => assert!(size > 200_000, "{size}"),
        other => panic!("expected FrameTooLarge, got {other:?}"),
    }
    assert_eq!(
        host.invoke("echo", &json!({"text": "still here"}))
            .unwrap()
            .data["text"],
        "still here"
    );
    assert!(host.invoke("big", &json!({"bytes": 1000})).unwrap().success);
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn file_transport_reply_is_read_and_deleted_and_foreign_paths_are_refused() {
    let host = Host::start(py("tools_plugin.py", &[]), opts(), Handlers::new()).expect("start");
    let r = host.invoke("file_reply", &json!({})).unwrap();
    assert_eq!(r.data["via"], "file");
    let path = std::path::PathBuf::from(r.data["path"].as_str().unwrap());
    assert!(!path.exists(), "the host deletes the transport file");

    // A pointer outside the temp directory is refused, and the file is left alone.
    let foreign = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("not-yours.json");
    std::fs::write(&foreign, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#).unwrap();
    match host.invoke("file_reply", &json!({"path": foreign})) {
        Err(Error::Protocol(why)) => assert!(why.contains("refused"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(foreign.exists(), "a foreign file must never be deleted");
    assert!(host.invoke("echo", &json!({"text": "ok"})).unwrap().success);
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn corrupt_reply_fails_only_its_call() {
    let host = Host::start(py("tools_plugin.py", &[]), opts(), Handlers::new()).expect("start");
    match host.invoke("garbage", &json!({})) {
        Err(Error::Protocol(why)) => assert!(why.contains("unparsable reply"), "{why}"),
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert_eq!(
        host.invoke("echo", &json!({"text": "ok"})).unwrap().data["text"],
        "ok"
    );
}

/// A cut-off frame that names a pending call's id but carries `params` (only a request
/// has them) is not that call's reply: it is noise, and the call gets its real reply.
#[test]
#[cfg(unix)] // drives a Python fixture
fn corrupt_request_under_a_pending_id_is_noise_not_a_reply() {
    let host = Host::start(py("tools_plugin.py", &[]), opts(), Handlers::new()).expect("start");
    let r = host
        .invoke("garbage_request", &json!({}))
        .expect("the real reply");
    assert_eq!(r.data["after"], "garbage", "{r:?}");
    let noise = host.stdout_noise();
    assert_eq!((noise.non_json, noise.invalid), (1, 0), "{noise:?}");
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn result_without_success_is_a_protocol_error() {
    let host = Host::start(py("tools_plugin.py", &[]), opts(), Handlers::new()).expect("start");
    match host.invoke("bare", &json!({})) {
        Err(Error::Protocol(why)) => assert!(why.contains("no boolean `success`"), "{why}"),
        other => panic!("expected a protocol error, got {other:?}"),
    }
    let err = host.invoke("error", &json!({})).unwrap_err();
    assert_eq!(err.code(), Some(-32602), "{err}");
    let failed = host.invoke("fail", &json!({"message": "nope"})).unwrap();
    assert!(!failed.success);
    assert_eq!(failed.error.as_deref(), Some("nope"));
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn stdout_noise_is_skipped_and_recorded() {
    let host =
        Host::start(py("banner.py", &[]), opts(), Handlers::new()).expect("the banner is skipped");
    assert_eq!(
        host.invoke("echo", &json!({"text": "hi"})).unwrap().data["text"],
        "hi"
    );
    let noise = host.stdout_noise();
    assert_eq!((noise.non_json, noise.invalid), (1, 0));
    assert_eq!(noise.samples, ["Banner Plugin v1.0 starting up..."]);

    let host = Host::start(py("tools_plugin.py", &[]), opts(), Handlers::new()).expect("start");
    assert!(host.invoke("noise", &json!({})).unwrap().success);
    let noise = host.stdout_noise();
    assert_eq!((noise.non_json, noise.invalid), (1, 1), "{noise:?}");
}

#[test]
fn missing_program_is_an_io_error() {
    let cmd = executa::host::PluginCommand::new("/nonexistent/executa-plugin");
    match Host::start(cmd, opts(), Handlers::new()) {
        Err(Error::Io(e)) => assert!(e.to_string().contains("cannot start plugin"), "{e}"),
        other => panic!("expected an i/o error, got {other:?}"),
    }
}

#[test]
#[cfg(target_os = "linux")] // drives a Python fixture, finds its processes in /proc
fn crash_leaving_a_helper_on_stdout_fails_the_call_and_restarts() {
    // The helper keeps the plugin's stdout open, so the exit is never an end of file:
    // the host must see the process itself end.
    let marker = unique("helper");
    let host = Host::start(
        py("crash_leaving_helper.py", &[&marker]),
        opts(),
        Handlers::new(),
    )
    .expect("start");
    let first_pid = host.status().pid.unwrap();
    // A long timeout: the call must fail because the process died, not because time ran out.
    let call = InvokeOptions::new().timeout(Duration::from_secs(30));
    match host.invoke_with("crash", &json!({}), &call) {
        Err(Error::Disconnected(why)) => {
            assert!(
                why.contains("exited unexpectedly (exit status: 3)"),
                "{why}"
            );
            assert!(why.contains("crashing, the helper lives on"), "{why}");
        }
        other => panic!("expected a disconnect, got {other:?}"),
    }
    wait_until("the plugin is restarted", EVENT_WAIT, || {
        host.status().restarts == 1
    });
    let status = host.status();
    assert_eq!(status.state, HostState::Running, "{status:?}");
    assert_ne!(status.pid, Some(first_pid), "{status:?}");
    assert!(status.last_exit.unwrap().contains("exit status: 3"));
    assert!(host.invoke("ok", &json!({})).unwrap().success);
    // The crashed plugin's helper went with it: left are the new plugin and its helper.
    wait_until("the orphaned helper is gone", EVENT_WAIT, || {
        processes_with(&marker).len() == 2
    });
    host.shutdown();
    wait_until("every helper is gone", EVENT_WAIT, || {
        processes_with(&marker).is_empty()
    });
}

#[test]
#[cfg(target_os = "linux")] // drives sh and a Python fixture, finds them in /proc
fn signals_reach_the_whole_process_group() {
    // A wrapper shell as the plugin command: SIGTERM to the shell alone would leave the
    // real plugin (which ignores stdin EOF and SIGTERM) running, orphaned.
    let marker = unique("wrapped");
    let o = HostOptions {
        shutdown: short_shutdown(),
        ..opts()
    };
    let script = host_common::fixture("ignores_sigterm.py");
    let cmd = executa::host::PluginCommand::new("sh")
        .arg("-c")
        .arg(format!("python3 {} {marker}; true", script.display()));
    let p = PluginProcess::spawn(&cmd, o, Handlers::new()).unwrap();
    p.initialize().unwrap();
    assert_eq!(processes_with(&marker).len(), 2, "sh and python");
    let report = p.shutdown();
    assert!(
        matches!(report.stage, ExitStage::Terminated | ExitStage::Killed),
        "{report}"
    );
    wait_until("the wrapped plugin is gone", EVENT_WAIT, || {
        processes_with(&marker).is_empty()
    });
}

#[test]
#[cfg(target_os = "linux")] // drives a Python fixture, finds its processes in /proc
fn shutdown_during_a_restart_handshake_stops_the_starting_process() {
    let marker_file = std::env::temp_dir().join(unique("wedged"));
    let o = HostOptions {
        shutdown: short_shutdown(),
        initialize_timeout: Duration::from_secs(30),
        ..opts()
    };
    let marker = marker_file.to_str().unwrap().to_owned();
    let host = Host::start(py("wedged_restart.py", &[&marker]), o, Handlers::new()).unwrap();
    let _ = host.invoke("crash", &json!({}));
    // The restart's process answers nothing: wait until it is in its handshake.
    let wedged = format!("{marker}.wedged");
    wait_until("a restart is under way", EVENT_WAIT, || {
        std::path::Path::new(&wedged).exists()
            && matches!(host.status().state, HostState::Restarting { .. })
    });
    let report = host.shutdown().expect("the starting process is shut down");
    assert_eq!(report.stage, ExitStage::Killed, "{report}");
    assert_eq!(host.status().state, HostState::Stopped);
    wait_until("the wedged process is gone", EVENT_WAIT, || {
        processes_with(&marker).is_empty()
    });
    let _ = std::fs::remove_file(&marker_file);
    let _ = std::fs::remove_file(&wedged);
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn reply_with_a_bad_envelope_fails_only_its_call() {
    let host = Host::start(py("bad_jsonrpc_reply.py", &[]), opts(), Handlers::new()).unwrap();
    // A long timeout: the call must fail on the bad reply, not time out.
    let call = InvokeOptions::new().timeout(Duration::from_secs(30));
    match host.invoke_with("bad", &json!({}), &call) {
        Err(Error::Protocol(why)) => assert!(why.contains("malformed reply"), "{why}"),
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert!(host.invoke("ok", &json!({})).unwrap().success);
    assert_eq!(host.status().restarts, 0);
}

#[test]
#[cfg(unix)] // drives a Python fixture
fn restarts_wait_the_backoff_delay() {
    // Each start records its time; every run exits after initialize, describe and one
    // invoke. Backoff of 150 ms, 300 ms, 600 ms: each restart starts at least that long
    // after the previous start (which also had to serve three requests).
    let runs = std::env::temp_dir().join(unique("runs"));
    let base = Duration::from_millis(150);
    let o = HostOptions {
        restart: RestartPolicy {
            base_delay: base,
            ..RestartPolicy::default()
        },
        ..opts()
    };
    let runs_arg = runs.to_str().unwrap().to_owned();
    let host = Host::start(
        py("exits_after_reply.py", &["3", "1", &runs_arg]),
        o,
        Handlers::new(),
    )
    .unwrap();
    for restart in 1..=3 {
        host.invoke("echo", &json!({"text": "x"})).unwrap();
        wait_until("the plugin is restarted", EVENT_WAIT, || {
            host.status().restarts == restart
        });
        host.wait_ready(EVENT_WAIT).unwrap();
    }
    let text = std::fs::read_to_string(&runs).unwrap();
    let starts: Vec<f64> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(starts.len(), 4, "{text}");
    for (n, pair) in starts.windows(2).enumerate() {
        let gap = pair[1] - pair[0];
        let delay = base.as_secs_f64() * f64::from(1u32 << n);
        assert!(gap >= delay, "restart {}: {gap:.3}s < {delay:.3}s", n + 1);
    }
    let _ = std::fs::remove_file(&runs);
}

/// A plugin that closes its stdout but keeps running (and a helper in its process group
/// that ignores `SIGTERM`): the supervisor takes the ended session and runs the shutdown
/// sequence on it; `Host::shutdown` waits for that sequence to end, so the plugin has been
/// reaped when it returns, and its helper got `SIGKILL`. It used to return at once, the
/// plugin still running, stopped only by a supervisor thread that a program's end kills.
#[test]
#[cfg(unix)] // drives a Python fixture
fn shutdown_waits_for_a_plugin_that_closed_its_stdout_and_its_helper() {
    let marker = unique("vanish");
    let pidfile = std::env::temp_dir().join(format!("{marker}.pids"));
    let o = HostOptions {
        shutdown: short_shutdown(),
        restart: RestartPolicy {
            enabled: false,
            ..RestartPolicy::default()
        },
        ..opts()
    };
    let cmd = py(
        "closes_stdout.py",
        &[&marker, pidfile.to_str().expect("UTF-8 path")],
    );
    let host = Host::start(cmd, o, Handlers::new()).expect("start");
    let call = InvokeOptions::new().timeout(Duration::from_secs(60));
    match host.invoke_with("vanish", &json!({}), &call) {
        Err(Error::Disconnected(why)) => assert!(why.contains("closed its stdout"), "{why}"),
        other => panic!("expected a disconnect, got {other:?}"),
    }
    let (plugin, helper) = host_common::read_pids(&pidfile);
    let _leftovers = host_common::KillOnDrop(vec![plugin, helper]);
    // Restarts are off: the host is down once the supervisor has taken the session, which
    // it then shuts down. (`Host` has no event for a state change: its status is looked at.)
    wait_until("the supervisor takes the ended session", EVENT_WAIT, || {
        matches!(host.status().state, HostState::Failed(_))
    });
    let report = host.shutdown();
    assert!(
        host_common::ends_within(plugin, Duration::ZERO),
        "the plugin (pid {plugin}) still runs after Host::shutdown returned"
    );
    assert!(
        host_common::ends_within(helper, host_common::EVENT_WAIT_SHORT),
        "its helper (pid {helper}) still runs after Host::shutdown returned"
    );
    // It ignored stdin's end: SIGTERM ended it.
    let stage = report.map(|r| r.stage);
    assert_eq!(stage, Some(ExitStage::Terminated), "{report:?}");
}
