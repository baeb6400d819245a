//! Secrets are wiped from every buffer that held them: once an invoke carrying a credential
//! has been answered, no byte string of it is left anywhere in the plugin's writable memory
//! (heap, thread arenas, stacks), read through `/proc/PID/mem` of the real `everything`
//! plugin. Linux only: no other platform here lets a test read another process's memory.
#![cfg(target_os = "linux")]

mod common;

use common::Conn;
use serde_json::{Value, json};

/// Where each copy of `mark` sits in the writable private memory of process `pid`
/// (`None`: the memory cannot be read here, so the test cannot judge).
fn find_in_memory(pid: u32, mark: &str) -> Option<Vec<String>> {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mark = mark.as_bytes();
    let mut found = Vec::new();
    let mut read_any = false;
    for line in maps.lines() {
        let mut cols = line.split_whitespace();
        let (Some(range), Some(perms)) = (cols.next(), cols.next()) else {
            continue;
        };
        let path = cols.nth(3).unwrap_or("");
        // Anonymous memory, the heap and the stacks: where a program's own data lives (a
        // file's private pages are its code and constants).
        if !perms.starts_with("rw") || !(path.is_empty() || path.starts_with('[')) {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        let mut bytes = vec![0u8; (end - start) as usize];
        if mem.read_exact_at(&mut bytes, start).is_err() {
            continue;
        }
        read_any = true;
        let mut from = 0;
        while let Some(i) = bytes[from..].iter().position(|&b| b == mark[0]) {
            let at = from + i;
            if bytes[at..].starts_with(mark) {
                found.push(format!("{:#x} in {line}", start + at as u64));
            }
            from = at + 1;
        }
    }
    read_any.then_some(found)
}

/// Sends `frame` (an invoke of `credentials` holding `mark`) `times` times, waits for the
/// replies and then for a `health` reply (the reader has moved on to read it, so the
/// invokes' frames are consumed), and asserts that `mark` is nowhere in the plugin's memory.
fn assert_wiped_after(frame: &str, mark: &str, times: usize) {
    let mut p = Conn::spawn();
    for _ in 0..times {
        p.send_line(frame);
        let reply = p.recv_until_id("1").0;
        assert!(!reply.raw.contains(mark), "the reply echoes the secret");
    }
    p.request(2, "health", None);
    assert_eq!(p.recv_until_id("2").0.result()["status"], "ready");
    match find_in_memory(p.pid(), mark) {
        None => eprintln!("skipped: /proc/{}/mem cannot be read here", p.pid()),
        Some(found) => assert!(
            found.is_empty(),
            "the secret is still in the plugin's memory {} time(s):\n{}",
            found.len(),
            found.join("\n")
        ),
    }
    p.finish();
}

/// A secret the size of a real token (a JWT is several hundred bytes), unique to `tag`. A
/// short one can be missed: the allocator reuses small freed blocks sooner.
fn secret(tag: &str) -> String {
    format!("sk-live-{tag}-{}", "eyJhbGciOiJIUzI1NiJ9".repeat(15))
}

/// An invoke of `credentials` (which answers with the credentials' names) with `context`.
fn invoke_with(context: &Value) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "invoke",
        "params": { "tool": "credentials", "arguments": {}, "context": context },
    })
    .to_string()
}

/// The case: the credential's frame stayed in the reader's read buffer (only the
/// line copied out of it was zeroed).
#[test]
fn a_credential_is_wiped_once_its_invoke_is_answered() {
    let mark = secret("answered");
    let frame = invoke_with(&json!({
        "invoke_id": "inv-1",
        "credentials": { "DEMO_API_KEY": mark },
        "sampling_token": mark,
    }));
    assert_wiped_after(&frame, &mark, 1);
    // Once the tool has proved quick, the reader thread runs its invokes itself.
    assert_wiped_after(&frame, &mark, 20);
}

/// A frame larger than the read buffer grows it: the smaller buffer it outgrew is wiped
/// before it is freed.
#[test]
fn a_credential_in_a_frame_that_grew_the_buffer_is_wiped() {
    let mark = secret("grown");
    let frame = invoke_with(&json!({
        "credentials": { "DEMO_API_KEY": mark },
        "padding": "p".repeat(300_000),
    }));
    assert_wiped_after(&frame, &mark, 1);
}

/// A bare-string context is no context: it is not read at all (serde's error text would
/// quote it, and an error's text is freed unwiped).
#[test]
fn a_bare_string_context_leaves_no_copy() {
    let mark = secret("bare");
    assert_wiped_after(&invoke_with(&json!(mark)), &mark, 1);
}

/// Credentials or a token of the wrong shape are skipped without a copy (they were read
/// into a `serde_json::Value` and dropped unwiped).
#[test]
fn wrongly_shaped_credentials_and_tokens_leave_no_copy() {
    let mark = secret("shape");
    let frame = invoke_with(&json!({
        "invoke_id": "inv-2",
        "credentials": mark,
        "storage_token": { "nested": [mark] },
    }));
    assert_wiped_after(&frame, &mark, 1);
    let frame = invoke_with(&json!({ "credentials": [mark, { "k": mark }] }));
    assert_wiped_after(&frame, &mark, 1);
}
