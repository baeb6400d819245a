//! A tiny `log` backend that writes to stderr, the one place a plugin may write freely.
//!
//! It never waits for stderr: a plugin's stderr is often a pipe that nobody reads, and a
//! logger that blocks there stops every thread that logs (the reader, say: the plugin
//! then stops answering). A line that finds no room is dropped and counted, and the count
//! is written right after the next line that finds room.

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use log::{LevelFilter, Log, Metadata, Record};

/// The environment variable that sets the level: `off`, `error`, `warn` (default),
/// `info`, `debug` or `trace`.
pub const LOG_ENV: &str = "EXECUTA_LOG";

struct StderrLogger;

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            write_line(format!(
                "[{} {}] {}\n",
                record.level(),
                record.target(),
                record.args()
            ));
        }
    }

    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;

/// The longest line written, in bytes, its line break included: under half of `PIPE_BUF`,
/// so that a pipe with room takes it whole, with the count of lines dropped before it, and
/// the write cannot block.
const MAX_LINE: usize = 2048;

/// Lines dropped since the last one written.
static DROPPED: AtomicU32 = AtomicU32::new(0);

/// Writes `line` (ending with its line break) to stderr, cut to [`MAX_LINE`], if stderr
/// has room now; else drops and counts it. Never blocks, unless another process sharing
/// our stderr fills it between the look and the write. Writes under std's stderr lock, so
/// lines from several threads never interleave (`eprintln!` takes the same lock).
pub(crate) fn write_line(line: String) {
    let mut err = std::io::stderr().lock();
    if !crate::sys::stderr_has_room() {
        DROPPED.fetch_add(1, Relaxed);
        return;
    }
    let mut line = line.into_bytes();
    if line.len() > MAX_LINE {
        // Cut at a character's first byte, never inside one.
        let mut cut = MAX_LINE - 4;
        while line[cut] & 0xC0 == 0x80 {
            cut -= 1;
        }
        line.truncate(cut);
        line.extend_from_slice("…\n".as_bytes());
    }
    let _ = err.write_all(&line);
    // Through the logger again, with the limiter's words: a line of its own costs the
    // plugin binary 300 bytes.
    crate::log_limit::report(DROPPED.swap(0, Relaxed), "log (stderr was full)");
}

/// Installs the stderr logger with the level from `EXECUTA_LOG`.
///
/// Returns `false`, changing nothing, when another logger is already installed: an
/// author's own logger always wins. Never blocks.
pub fn init_logger() -> bool {
    let level = std::env::var(LOG_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<LevelFilter>().ok())
        .unwrap_or(LevelFilter::Warn);
    if log::set_logger(&LOGGER).is_err() {
        return false;
    }
    log::set_max_level(level);
    true
}
