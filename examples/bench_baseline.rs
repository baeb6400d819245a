//! The floor the round-trip benchmark compares against: a single-threaded loop with no
//! runtime at all (read a line, parse it borrowed, write a canned reply, flush when the
//! input buffer is empty). It serves benchmarks only; it has none of the runtime's
//! guarantees (no concurrency, no reverse calls, no shutdown handling).

use std::io::{BufRead, BufReader, BufWriter, Write};

use executa::wire::{self, Message};

fn main() -> std::io::Result<()> {
    let mut input = BufReader::with_capacity(64 * 1024, std::io::stdin().lock());
    let mut out = BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    let mut line = Vec::with_capacity(64 * 1024);
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return out.flush();
        }
        if let Message::Request { id: Some(id), .. } = wire::parse(&line) {
            out.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":")?;
            out.write_all(id.get().as_bytes())?;
            out.write_all(b",\"result\":{\"success\":true,\"data\":{}}}\n")?;
        }
        if input.buffer().is_empty() {
            out.flush()?;
        }
    }
}
