//! How the end of a plugin process is noticed and reported to its supervisor.

use std::io;
use std::process::ExitStatus;

use crossbeam_channel::Sender;

/// What the supervisor is told.
pub(crate) enum Event {
    /// The process of this generation ended: it exited (seen by its watcher or at stdout's
    /// end of file), or closed its stdout and will be made to exit.
    Exited(u64),
    /// The host is shutting down.
    Stop,
}

/// Where to report this process's end (the supervisor), tagged with its generation.
pub(crate) struct ExitNotify {
    pub(crate) tx: Sender<Event>,
    pub(crate) generation: u64,
}

/// How the end of a process was noticed.
pub(crate) enum End {
    /// Stdout closed and the process had exited.
    Exited(ExitStatus),
    /// The process exited but something else still holds its stdout.
    ExitedStdoutHeld(ExitStatus),
    /// Stdout closed (or failed) but the process is still running.
    StdoutClosed(Option<io::Error>),
}
