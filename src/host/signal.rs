//! The shutdown sequence's two stops, sent to a plugin's process tree (`crate::sys`'s
//! [`ProcessTree`]): on Unix `SIGTERM` and `SIGKILL` to its process group; on Windows a
//! Ctrl-Break console event to its console process group, then `TerminateJobObject` on its
//! job object.
//!
//! The plugin is started as the root of a tree of its own (`command.rs`), so the stops
//! reach the whole tree: a plugin started through a wrapper (`sh -c '...'`, a launcher
//! script) or one that started helpers is stopped as a whole, not just its top process.

use std::io;

use crate::sys::ProcessTree;

/// A stop the shutdown sequence sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    /// The polite one: `SIGTERM`; Ctrl-Break on Windows (which needs a console shared
    /// with the plugin, and fails without one).
    Term,
    /// `SIGKILL`; `TerminateJobObject` on Windows.
    Kill,
}

/// Sends `sig` to the plugin's tree (on Unix falling back to the process alone when its
/// group cannot be signalled: the plugin moved itself to another group).
///
/// The caller must hold the child unreaped (its `Child` not yet successfully waited on), so
/// that the pid cannot have been recycled for an unrelated process: an unreaped leader
/// keeps its pid, and with it the group id, reserved.
pub(crate) fn send(tree: &ProcessTree, sig: Signal) -> io::Result<()> {
    match sig {
        Signal::Term => tree.stop_politely(),
        Signal::Kill => tree.kill(),
    }
}

/// Kills whatever is left of the plugin's tree after it ended (helpers that ignored the
/// polite stop, or that outlived a crash holding the plugin's pipes). `Ok` with nothing to
/// do when the tree is empty.
pub(crate) fn kill_group_remnants(tree: &ProcessTree) -> io::Result<()> {
    tree.kill_remnants()
}
