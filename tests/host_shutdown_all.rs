//! `executa::host::shutdown_all`: the shutdown sequence on every plugin process the
//! program started, from any thread, and no more started after it (it is final for the
//! process, so it has a test binary of its own).
#![cfg(unix)] // drives a Python fixture

mod host_common;

use std::time::Duration;

use executa::host::{Handlers, Host, PluginProcess, shutdown_all};
use host_common::{ends_within, opts, py};

#[test]
fn shutdown_all_ends_every_plugin_and_no_more_start() {
    let host = Host::start(py("tools_plugin.py", &[]), opts(), Handlers::new()).expect("start");
    let alone =
        PluginProcess::spawn(&py("tools_plugin.py", &[]), opts(), Handlers::new()).expect("spawn");
    let pids = [host.status().pid.expect("a pid"), alone.pid()];
    // A supervisor that restarted the plugin would make a process nobody ends: none starts.
    assert_eq!(std::thread::spawn(shutdown_all).join().ok(), Some(2));
    for pid in pids {
        assert!(ends_within(pid, Duration::ZERO), "pid {pid} still runs");
    }
    assert!(host.invoke("echo", &serde_json::json!({})).is_err());
    let late = Host::start(py("tools_plugin.py", &[]), opts(), Handlers::new());
    assert!(late.is_err(), "a plugin started after shutdown_all");
    // The owners' own shutdowns find the work done.
    assert!(alone.exit_status().is_some());
    assert_eq!(shutdown_all(), 0);
}
