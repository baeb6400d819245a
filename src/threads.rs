//! Named threads, for both sides: every thread this crate starts carries a name that says
//! what it is (`executa-reader`, `executa-rd:<plugin>`, ...), so a stack dump or `top -H`
//! reads at a glance.

use std::io;
use std::thread::{self, JoinHandle};

/// Starts a named thread. Fails only when the operating system refuses a new thread.
pub(crate) fn spawn<F>(name: String, f: F) -> io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    spawn_boxed(name, Box::new(f))
}

/// The one place a thread starts: each closure type given to `std::thread` compiles its
/// own start-up code, a few kilobytes of every plugin binary, so all go through one box.
fn spawn_boxed(name: String, f: Box<dyn FnOnce() + Send>) -> io::Result<JoinHandle<()>> {
    thread::Builder::new().name(name).spawn(f)
}
