//! The shutdown contract of the real `everything` plugin: stdin EOF, SIGTERM, a second
//! signal, and a host that stops reading stdout.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Conn, EXIT_TIMEOUT, everything_bin};
use serde_json::json;

#[test]
fn stdin_eof_alone_exits_0() {
    let mut p = Conn::spawn();
    assert!(p.finish().is_empty());
}

#[test]
fn eof_with_an_invoke_in_flight_delivers_its_reply_then_exits_0() {
    let mut p = Conn::spawn();
    p.invoke(1, "sleep", json!({ "ms": 500 }));
    // The health reply proves the reader has taken the sleep off the pipe before EOF.
    p.request(2, "health", None);
    let (health, _) = p.recv_until_id("2");
    assert_eq!(health.result()["status"], "ready");
    p.close_stdin();
    let rest = p.drain_to_eof();
    assert_eq!(rest.len(), 1, "exactly the in-flight reply: {rest:?}");
    assert_eq!(rest[0].raw_id().as_deref(), Some("1"));
    assert!(rest[0].data()["slept_ms"].as_u64().unwrap() >= 500);
    let status = p.wait_exit();
    assert_eq!(status.code(), Some(0), "stderr: {}", p.stderr());
}

#[test]
fn requests_written_just_before_eof_are_all_answered() {
    let mut p = Conn::spawn();
    let mut burst = String::new();
    for id in 1..=20 {
        let tool = if id % 2 == 0 { "echo" } else { "noop" };
        burst.push_str(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{"tool":"{tool}","arguments":{{"i":{id}}}}}}}"#
        ));
        burst.push('\n');
    }
    p.send_raw(burst.as_bytes());
    let rest = p.finish();
    let mut ids: Vec<u64> = rest
        .iter()
        .map(|m| m.raw_id().unwrap().parse().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=20).collect::<Vec<_>>());
}

#[test]
#[cfg(unix)]
fn sigterm_with_an_invoke_in_flight_delivers_its_reply_then_exits_0() {
    signal_with_an_invoke_in_flight("TERM");
}

#[test]
#[cfg(unix)]
fn sigint_with_an_invoke_in_flight_delivers_its_reply_then_exits_0() {
    signal_with_an_invoke_in_flight("INT");
}

#[cfg(unix)]
fn signal_with_an_invoke_in_flight(signal: &str) {
    let mut p = Conn::spawn();
    p.invoke(1, "sleep", json!({ "ms": 1500 }));
    p.request(2, "health", None);
    p.recv_until_id("2");
    p.signal(signal);
    // stdin stays open: the signal alone ends the plugin, after the in-flight reply.
    let reply = p.recv();
    assert_eq!(reply.raw_id().as_deref(), Some("1"), "{}", reply.raw);
    assert!(reply.data()["slept_ms"].as_u64().unwrap() >= 1500);
    let status = p.wait_exit();
    assert_eq!(status.code(), Some(0), "stderr: {}", p.stderr());
    assert!(p.drain_to_eof().is_empty());
}

#[test]
#[cfg(unix)]
fn a_second_signal_exits_at_once() {
    let mut p = Conn::spawn_with(&[], &[("EXECUTA_LOG", "info")]);
    p.invoke(1, "sleep", json!({ "ms": 30_000 }));
    p.request(2, "health", None);
    p.recv_until_id("2");
    p.sigterm();
    // Wait until the runtime has taken the first signal (it logs that it is draining),
    // so the second one cannot merge with it.
    let deadline = Instant::now() + EXIT_TIMEOUT;
    while !p.stderr().contains("stopping") {
        assert!(
            Instant::now() < deadline,
            "the first SIGTERM was not noticed; stderr: {}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    p.sigterm();
    // Without the second signal the plugin would wait out its 4 s grace period; with
    // it, it leaves at once, and says why (not the grace period's end).
    let status = p.wait_exit();
    assert_eq!(status.code(), Some(0), "stderr: {}", p.stderr());
    assert!(
        p.stderr().contains("second signal: exiting now"),
        "stderr: {}",
        p.stderr()
    );
    assert!(
        p.drain_to_eof().is_empty(),
        "the abandoned sleep must not be answered"
    );
}

#[test]
fn an_invoke_outliving_the_grace_period_is_abandoned_and_exit_is_0() {
    let mut p = Conn::spawn();
    p.invoke(1, "sleep", json!({ "ms": 30_000 }));
    p.request(2, "health", None);
    p.recv_until_id("2");
    p.close_stdin();
    // The default grace is 4 s, far shorter than the sleep: the plugin must not wait it out.
    let status = p.wait_exit();
    assert_eq!(status.code(), Some(0), "stderr: {}", p.stderr());
    assert!(p.drain_to_eof().is_empty());
}

#[test]
fn a_host_that_closes_our_stdout_ends_the_plugin_cleanly() {
    let mut child = Command::new(everything_bin())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let mut stdin = child.stdin.take().unwrap();
    use std::io::Write;
    // The reply to this request cannot be written: the writer sees EPIPE.
    let _ = stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"health\"}\n");
    let _ = stdin.flush();
    let deadline = Instant::now() + EXIT_TIMEOUT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the plugin kept running after its stdout was closed");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    drop(stdin);
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
}
