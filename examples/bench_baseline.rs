//! The floor the round-trip benchmark compares against: a single-threaded loop with no
//! runtime at all (read a line, parse it borrowed, write a canned reply, flush when the
//! input buffer is empty). With `--echo` it parses the params into a `Value` and echoes
//! the arguments back as `data`, as an `echo` tool does: the floor for the frame-size
//! sweep, where per-byte work decides. It serves benchmarks only; it has none of the
//! runtime's guarantees (no concurrency, no reverse calls, no shutdown handling).

use std::io::{BufRead, BufReader, BufWriter, Write};

use executa::wire::{self, Message};

fn main() -> std::io::Result<()> {
    let echo = std::env::args().any(|a| a == "--echo");
    let mut input = BufReader::with_capacity(64 * 1024, std::io::stdin().lock());
    let mut out = BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    let mut line = Vec::with_capacity(64 * 1024);
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return out.flush();
        }
        if let Message::Request {
            id: Some(id),
            params,
            ..
        } = wire::parse(&line)
        {
            out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":")?;
            out.write_all(id.get().as_bytes())?;
            out.write_all(b",\"result\":{\"success\":true,\"data\":")?;
            let params: Option<serde_json::Value> = params
                .filter(|_| echo)
                .and_then(|p| serde_json::from_str(p.get()).ok());
            match params.as_ref().and_then(|p| p.get("arguments")) {
                Some(args) => serde_json::to_writer(&mut out, args)?,
                None => out.write_all(b"{}")?,
            }
            out.write_all(b"}}\n")?;
        }
        if input.buffer().is_empty() {
            out.flush()?;
        }
    }
}
