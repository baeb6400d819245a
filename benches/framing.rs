//! Per-message cost of the framing layer, in process: parsing a typical `invoke` frame
//! borrowed (what the reader does) against building a `serde_json::Value` tree (what most
//! runtimes do), splitting a stream into frames, and building a reply frame.
//!
//! Run: `cargo bench --bench framing` (medians of 9 runs each). Smoke (a few iterations,
//! results checked, nothing timed): `EXECUTA_BENCH_SMOKE=1 cargo bench --bench framing`.

mod common;

use std::hint::black_box;
use std::time::Instant;

use executa::wire::{self, Frame, FrameReader, Message};
use serde_json::value::RawValue;

const INVOKE: &str = r#"{"jsonrpc":"2.0","id":42,"method":"invoke","params":{"tool":"echo","arguments":{"text":"hello world","n":3},"context":{"invoke_id":"8f1c2a7e9b3d4c5f","deadline_ms":1767225600000}}}"#;

fn per_op_ns(iters: u32, mut f: impl FnMut()) -> f64 {
    let runs: Vec<f64> = (0..9)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(iters)
        })
        .collect();
    common::median(runs)
}

fn main() {
    common::print_machine("cargo bench --bench framing");
    println!("frame: {} bytes (a typical invoke)", INVOKE.len());
    let line = INVOKE.as_bytes();
    if common::smoke() {
        check(line);
        return;
    }

    let borrowed = per_op_ns(200_000, || {
        if let Message::Request { method, params, .. } = wire::parse(black_box(line)) {
            black_box((method, params));
        }
    });
    let tree = per_op_ns(200_000, || {
        let v: serde_json::Value = serde_json::from_slice(black_box(line)).unwrap_or_default();
        black_box(v);
    });
    println!("parse, borrowed (executa::wire::parse): {borrowed:>8.1} ns/frame");
    println!(
        "parse, serde_json::Value tree:          {tree:>8.1} ns/frame  ({:.2}x the borrowed cost)",
        tree / borrowed
    );

    let mut stream = Vec::new();
    for _ in 0..10_000 {
        stream.extend_from_slice(line);
        stream.push(b'\n');
    }
    let split = per_op_ns(20, || {
        let mut r = FrameReader::new(black_box(&stream[..]), wire::DEFAULT_MAX_FRAME_BYTES);
        let mut n = 0;
        while let Ok(Some(Frame::Line(l))) = r.next_frame() {
            n += l.len();
        }
        black_box(n);
    }) / 10_000.0;
    println!("split stream into frames (FrameReader):  {split:>8.1} ns/frame");

    let id = RawValue::from_string("42".into()).expect("valid json");
    let result = RawValue::from_string(r#"{"success":true,"data":{"text":"hello world"}}"#.into())
        .expect("valid json");
    let mut out = Vec::with_capacity(256);
    let reply = per_op_ns(1_000_000, || {
        out.clear();
        wire::write_response(&mut out, black_box(&id), black_box(&result));
        black_box(&out);
    });
    println!("build a reply frame from raw result:     {reply:>8.1} ns/frame");
}

/// Smoke mode: each operation the bench times gives the right answer.
fn check(line: &[u8]) {
    match wire::parse(line) {
        Message::Request {
            id: Some(id),
            method,
            params: Some(_),
        } => assert_eq!((id.get(), method.as_ref()), ("42", "invoke")),
        _ => panic!("the invoke frame did not parse as a request"),
    }
    let tree: serde_json::Value = serde_json::from_slice(line).expect("valid JSON");
    assert_eq!(tree["params"]["tool"], "echo");
    let stream: Vec<u8> = [line, b"\n", line, b"\n"].concat();
    let mut r = FrameReader::new(&stream[..], wire::DEFAULT_MAX_FRAME_BYTES);
    let mut frames = 0;
    while let Ok(Some(Frame::Line(l))) = r.next_frame() {
        assert_eq!(l, line);
        frames += 1;
    }
    assert_eq!(frames, 2, "the stream splits into its two frames");
    let id = RawValue::from_string("42".into()).expect("valid json");
    let result = RawValue::from_string(r#"{"success":true}"#.into()).expect("valid json");
    let mut out = Vec::new();
    wire::write_response(&mut out, &id, &result);
    let reply: serde_json::Value = serde_json::from_slice(&out).expect("reply is JSON");
    assert_eq!(reply["id"], 42);
    assert_eq!(reply["result"]["success"], true);
    println!("smoke run: every operation checked; nothing timed");
}
