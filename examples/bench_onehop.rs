//! A round-trip baseline with exactly one hand-off: a reader thread passes each line over a
//! bounded crossbeam channel to one worker thread, which parses it with serde_json, builds
//! the echo reply (`{"success":true,"data":<arguments>}`) and writes it itself, flushing
//! when no further line is queued. It is the cheapest shape with a separate reader, the
//! floor a runtime with a reader thread is measured against (`cargo bench --bench
//! roundtrip`). It serves benchmarks only: no concurrency, no reverse calls, no shutdown
//! handling.

use std::io::{BufRead, BufReader, BufWriter, Write};

use crossbeam_channel::bounded;
use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<&'a str>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct InvokeParams<'a> {
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

/// Appends the reply to one request line to `out`; nothing for notifications.
fn reply(line: &[u8], out: &mut Vec<u8>) {
    let Ok(req) = serde_json::from_slice::<Request>(line) else {
        return;
    };
    let Some(id) = req.id else {
        return;
    };
    let data = match (req.method, req.params) {
        (Some("invoke"), Some(p)) => serde_json::from_str::<InvokeParams>(p.get())
            .ok()
            .and_then(|p| p.arguments)
            .map_or("{}", RawValue::get),
        _ => "{}",
    };
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id.get().as_bytes());
    out.extend_from_slice(b",\"result\":{\"success\":true,\"data\":");
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(b"}}\n");
}

fn main() -> std::io::Result<()> {
    // Bounded: a reader that outruns the worker blocks on the channel, as a runtime must.
    let (tx, rx) = bounded::<Vec<u8>>(1024);
    let reader = std::thread::Builder::new()
        .name("onehop-reader".into())
        .spawn(move || -> std::io::Result<()> {
            let mut input = BufReader::with_capacity(64 * 1024, std::io::stdin().lock());
            loop {
                let mut line = Vec::with_capacity(256);
                if input.read_until(b'\n', &mut line)? == 0 || tx.send(line).is_err() {
                    return Ok(());
                }
            }
        })?;
    let mut out = BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    let mut frame = Vec::with_capacity(1024);
    // The channel disconnects when the reader reaches end of input.
    while let Ok(line) = rx.recv() {
        frame.clear();
        reply(&line, &mut frame);
        out.write_all(&frame)?;
        if rx.is_empty() {
            out.flush()?;
        }
    }
    out.flush()?;
    reader
        .join()
        .map_err(|_| std::io::Error::other("reader thread panicked"))?
}
