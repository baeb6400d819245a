//! One child process behind real pipes, and the ways the bench drives it: serial round
//! trips, a pipelined stream with a fixed number in flight, an unthrottled flood and a paced
//! load.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use crossbeam_channel::bounded;
use serde_json::Value;

/// The frame of invoke `id`: `echo {"text":TEXT}`.
pub fn invoke(id: u64, text: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"invoke\",\"params\":{{\"tool\":\"echo\",\"arguments\":{{\"text\":\"{text}\"}},\"context\":{{\"invoke_id\":\"bench-{id}\"}}}}}}\n"
    )
}

/// Frames for ids `first..first + count`, rendered before any timing starts.
fn frames(first: u64, count: u64, text: &str) -> Vec<u8> {
    let mut all = Vec::with_capacity(count as usize * (140 + text.len()));
    for id in first..first + count {
        all.extend_from_slice(invoke(id, text).as_bytes());
    }
    all
}

/// Checks one reply: the expected id (when given), `success: true`, and for subjects that
/// echo, `data.text` of `len` bytes (the text sent). Returns the id.
pub fn check_reply(line: &[u8], expected: Option<u64>, echoes: bool, len: usize) -> u64 {
    let text = String::from_utf8_lossy(line);
    let v: Value =
        serde_json::from_slice(line).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {text}"));
    let id = v["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("reply without a numeric id: {text}"));
    if let Some(want) = expected {
        assert_eq!(id, want, "reply to the wrong request: {text}");
    }
    assert_eq!(v["result"]["success"], true, "not a success: {text}");
    if echoes {
        let echoed = v["result"]["data"]["text"].as_str().map(str::len);
        assert_eq!(
            echoed,
            Some(len),
            "not an echo: {}",
            &text[..text.len().min(300)]
        );
    }
    id
}

/// A child process with piped stdin and stdout (stderr discarded).
pub struct Peer {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    line: Vec<u8>,
    /// Check every reply (smoke mode) rather than only the first of each phase.
    pub check_all: bool,
    /// Whether replies carry the arguments back as `data`.
    pub echoes: bool,
    /// The `text` argument of every invoke (`hi` unless set).
    pub text: String,
    next_id: u64,
}

impl Peer {
    /// Starts `cmd`, prefixed by `prefix` (e.g. `taskset -c 1`).
    pub fn spawn(prefix: &[String], cmd: &[String], echoes: bool, check_all: bool) -> Peer {
        let argv: Vec<&String> = prefix.iter().chain(cmd).collect();
        let mut child = Command::new(argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {argv:?}: {e}"));
        let stdin = BufWriter::with_capacity(64 * 1024, child.stdin.take().expect("piped stdin"));
        let stdout =
            BufReader::with_capacity(64 * 1024, child.stdout.take().expect("piped stdout"));
        Peer {
            child,
            stdin,
            stdout,
            line: Vec::with_capacity(4096),
            check_all,
            echoes,
            text: "hi".into(),
            next_id: 1,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `describe` and waits for any reply: the child is up and serving.
    pub fn wait_ready(&mut self) {
        self.stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"describe\"}\n")
            .expect("write describe");
        self.stdin.flush().expect("flush");
        self.read_line();
    }

    /// Writes `frame` (one line, LF included) and flushes it.
    pub fn send(&mut self, frame: &str) {
        self.stdin.write_all(frame.as_bytes()).expect("write");
        self.stdin.flush().expect("flush");
    }

    /// Reads lines until one contains `needle` (a reply's id, quoted as sent).
    pub fn read_until(&mut self, needle: &str) {
        while !String::from_utf8_lossy(self.read_line()).contains(needle) {}
    }

    fn read_line(&mut self) -> &[u8] {
        self.line.clear();
        let n = self.stdout.read_until(b'\n', &mut self.line).expect("read");
        assert!(n > 0, "plugin closed its stdout");
        &self.line
    }

    /// One echo round trip; returns how long it took.
    pub fn call(&mut self, check: bool) -> Duration {
        let id = self.next_id;
        self.next_id += 1;
        let frame = invoke(id, &self.text);
        let start = Instant::now();
        self.stdin.write_all(frame.as_bytes()).expect("write");
        self.stdin.flush().expect("flush");
        let (echoes, check) = (self.echoes, check || self.check_all);
        let len = self.text.len();
        let line = self.read_line();
        let took = start.elapsed();
        if check {
            check_reply(line, Some(id), echoes, len);
        }
        took
    }

    /// `count` serial round trips, the first one checked; returns each duration.
    pub fn serial(&mut self, count: u64) -> Vec<Duration> {
        (0..count).map(|i| self.call(i == 0)).collect()
    }

    /// `count` round trips, one starting every `interval` (a missed start is not made up).
    pub fn paced(&mut self, count: u64, interval: Duration) {
        let start = Instant::now();
        for i in 0..count {
            let due = start + interval * u32::try_from(i).unwrap_or(u32::MAX);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            self.call(i == 0);
        }
    }

    /// Sends `count` invokes from a second thread, at most `in_flight` unanswered at a time
    /// (`None`: no limit, a flood), while this thread reads the replies. Returns the rate
    /// in invokes per second.
    pub fn pipelined(&mut self, count: u64, in_flight: Option<usize>) -> f64 {
        let first = self.next_id;
        self.next_id += count;
        let all = frames(first, count, &self.text);
        let len = self.text.len();
        let ends: Vec<usize> = all
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1)
            .collect();
        let window = in_flight.unwrap_or(ends.len().max(1));
        // One credit per request allowed in flight; the reader returns one per reply.
        let (credit_tx, credit_rx) = bounded::<()>(window);
        for _ in 0..window {
            credit_tx.send(()).expect("credit");
        }
        let (echoes, check_all) = (self.echoes, self.check_all);
        let mut seen = vec![false; if check_all { count as usize } else { 0 }];
        let stdin = &mut self.stdin;
        let stdout = &mut self.stdout;
        let line = &mut self.line;
        let start = Instant::now();
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut from = 0;
                for &end in &ends {
                    if credit_rx.try_recv().is_err() {
                        stdin.flush().expect("flush");
                        credit_rx.recv().expect("credit");
                    }
                    stdin.write_all(&all[from..end]).expect("write");
                    from = end;
                }
                stdin.flush().expect("flush");
            });
            for i in 0..count {
                line.clear();
                let n = stdout.read_until(b'\n', line).expect("read");
                assert!(n > 0, "plugin closed its stdout");
                if check_all || i == 0 {
                    let id = check_reply(line, None, echoes, len);
                    let slot = id.checked_sub(first).expect("id in range") as usize;
                    if check_all {
                        assert!(!seen[slot], "two replies to request {id}");
                        seen[slot] = true;
                    }
                }
                // Never full: at most `window` credits exist.
                let _ = credit_tx.try_send(());
            }
        });
        count as f64 / start.elapsed().as_secs_f64()
    }

    /// Closes stdin and waits for the child to exit.
    pub fn close(mut self) {
        let _ = self.stdin.flush();
        drop(self.stdin);
        let _ = self.child.wait();
    }
}
