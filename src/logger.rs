//! A tiny `log` backend that writes to stderr, the one place a plugin may write freely.

use std::io::Write;

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
        if !self.enabled(record.metadata()) {
            return;
        }
        // One write per line under the lock, so lines from several threads never interleave.
        let line = format!(
            "[{} {}] {}\n",
            record.level(),
            record.target(),
            record.args()
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;

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
