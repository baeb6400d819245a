//! Windows: the only file that calls Win32 (through `windows-sys`).
//!
//! The stdout guard: the runtime keeps private, non-inheritable duplicates of the original
//! standard input and output handles, points the process's standard output handle at
//! stderr (std's `print!` looks the handle up on every write, so a stray `println!` lands
//! in the log) and its standard input at `NUL`, and makes the originals non-inheritable so
//! that no child process holds the protocol's pipes open after the plugin ends. The C
//! runtime's own descriptors 0 and 1 keep the handles they had at start-up: C code that
//! writes to its `stdout` (`printf` in a linked C library) still reaches the protocol pipe
//! (there is no `windows-sys` binding for the C runtime's `_dup2`; the README says so).
//!
//! Waits with a timeout (the bell, so the portable timer) end on the system's tick, 15.6 ms
//! by default: the scheduling bound of `Options::inline` is that coarse here.
//!
//! Anonymous pipes cannot be waited on with a timeout, so no input is [`Waitable`]: the
//! reader hands reading to a new reader when its own invoke calls the host.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::windows::io::{AsHandle, IntoRawHandle, OwnedHandle};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::{
    FALSE, HANDLE, HANDLE_FLAG_INHERIT, SetHandleInformation, TRUE,
};
use windows_sys::Win32::Storage::FileSystem::{FILE_TYPE_PIPE, GetFileType};
use windows_sys::Win32::System::Console::{
    CTRL_BREAK_EVENT, CTRL_C_EVENT, GetStdHandle, STD_ERROR_HANDLE, STD_HANDLE, STD_INPUT_HANDLE,
    STD_OUTPUT_HANDLE, SetConsoleCtrlHandler, SetStdHandle,
};

use windows_sys::core::BOOL;

use super::{ProtocolStdio, STOP_BYTE};
use crate::lock::lock;

#[cfg(feature = "host")]
mod host;
#[cfg(feature = "host")]
pub(crate) use host::*;

/// Takes the protocol streams. With `guard`, also points the standard output handle at
/// stderr and the standard input handle at `NUL`; without it, both stay as they are.
pub(crate) fn take(guard: bool) -> io::Result<ProtocolStdio> {
    io::stdout().flush()?;
    // std duplicates without inheritance: children never get these.
    let input: OwnedHandle = io::stdin().as_handle().try_clone_to_owned()?;
    let output: OwnedHandle = io::stdout().as_handle().try_clone_to_owned()?;
    if guard {
        let original_in = std_handle(STD_INPUT_HANDLE);
        let original_out = std_handle(STD_OUTPUT_HANDLE);
        let null = File::open("NUL")?.into_raw_handle();
        set_std_handle(STD_OUTPUT_HANDLE, std_handle(STD_ERROR_HANDLE))?;
        set_std_handle(STD_INPUT_HANDLE, null as HANDLE)?;
        for original in [original_in, original_out] {
            // SAFETY: a handle value this process holds; a stale one only fails.
            unsafe { SetHandleInformation(original, HANDLE_FLAG_INHERIT, 0) };
        }
    }
    Ok(ProtocolStdio {
        input: File::from(input),
        output: BlockingWrites(File::from(output)),
    })
}

fn std_handle(which: STD_HANDLE) -> HANDLE {
    // SAFETY: no preconditions; returns null or INVALID_HANDLE_VALUE when there is none.
    unsafe { GetStdHandle(which) }
}

fn set_std_handle(which: STD_HANDLE, handle: HANDLE) -> io::Result<()> {
    // SAFETY: replaces the process's standard handle slot; the handle stays open.
    if unsafe { SetStdHandle(which, handle) } == FALSE {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An input the reader can wait on with a bound: none on Windows (anonymous pipes have no
/// readiness wait), so the type has no values.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Waitable {}

/// No input is waitable here.
pub(crate) fn waitable(_input: &dyn std::any::Any) -> Option<Waitable> {
    None
}

/// None here: a pipe's write end cannot be asked what its reader has left
/// (`PeekNamedPipe` needs read access), so MCP progress falls back to a pause.
pub(crate) fn unread_probe(
    _output: &dyn std::any::Any,
) -> Option<Box<dyn Fn() -> Option<usize> + Send + Sync>> {
    None
}

/// Never called: there is no [`Waitable`] to pass.
pub(crate) fn wait_readable(input: Waitable, _timeout: Duration) -> io::Result<bool> {
    match input {}
}

/// Where `byte` first occurs in `haystack`.
pub(crate) fn find_byte(haystack: &[u8], byte: u8) -> Option<usize> {
    haystack.iter().position(|&b| b == byte)
}

/// Bytes rung and not yet taken, at most. A byte already waiting is not queued again
/// (but for [`STOP_BYTE`], which the main thread counts), so the few kinds of events fit
/// and no event is lost to a flood of another: a starved main thread finds one poke from
/// the timer, not a queue of them in front of the end of input.
const BELL_BYTES: usize = 64;

type BellShared = Arc<(Mutex<VecDeque<u8>>, Condvar)>;

/// The receiving end of the main thread's bell: bytes in a short queue behind a condition
/// variable (Windows has no socket pair to poll beside a timer, and needs none: the console
/// handler is a thread, not a signal handler).
pub(crate) struct Bell(BellShared);

/// The ringing end of a [`Bell`].
pub(crate) struct Ringer(BellShared);

/// What the main thread waits on for an OS timer: nothing (Windows runs the portable timer).
#[derive(Clone, Copy, Debug)]
pub(crate) enum TimerWatch {}

/// A bell and the ringer to clone.
pub(crate) fn bell() -> io::Result<(Bell, Ringer)> {
    let shared: BellShared = Arc::new((Mutex::new(VecDeque::new()), Condvar::new()));
    Ok((Bell(shared.clone()), Ringer(shared)))
}

impl Ringer {
    /// Rings `byte`. Never blocks beyond a short lock.
    pub fn ring(&self, byte: u8) {
        let mut bytes = lock(&self.0.0);
        if bytes.len() < BELL_BYTES && (byte == STOP_BYTE || !bytes.contains(&byte)) {
            bytes.push_back(byte);
        }
        self.0.1.notify_one();
    }

    /// Another handle to the same bell.
    pub fn try_clone(&self) -> io::Result<Ringer> {
        Ok(Ringer(self.0.clone()))
    }
}

impl Bell {
    /// Blocks until a byte is rung, at most `timeout` (`None`: no bound). `Ok(None)`: the
    /// time ran out. (`timer` has no values here.)
    pub fn wait(
        &mut self,
        timeout: Option<Duration>,
        timer: Option<TimerWatch>,
    ) -> io::Result<Option<u8>> {
        if let Some(t) = timer {
            match t {}
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut bytes = lock(&self.0.0);
        loop {
            if let Some(b) = bytes.pop_front() {
                return Ok(Some(b));
            }
            bytes = match deadline {
                None => self.0.1.wait(bytes).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    self.0
                        .1
                        .wait_timeout(bytes, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

/// Where console control events ring, while a plugin serves.
static STOP_RINGER: Mutex<Option<Ringer>> = Mutex::new(None);

/// Whether serving has ended, for a close, logoff or shutdown event waiting on it.
static SERVING: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// How long a close, logoff or shutdown event holds the process open for the orderly stop
/// (Windows ends the process 5 s after a close event whatever the handler does).
const CLOSE_HOLD: Duration = Duration::from_secs(10);

/// The console control handler, on a thread Windows starts: rings [`STOP_BYTE`]. Ctrl-C
/// and Ctrl-Break are then handled; a close, logoff or shutdown ends the process when the
/// handler returns, so it waits (bounded) for serving to end first.
unsafe extern "system" fn on_console_event(kind: u32) -> BOOL {
    let Some(ringer) = lock(&STOP_RINGER).as_ref().and_then(|r| r.try_clone().ok()) else {
        return FALSE; // not serving: the next handler (the default: exit) decides
    };
    ringer.ring(STOP_BYTE);
    if kind != CTRL_C_EVENT && kind != CTRL_BREAK_EVENT {
        let serving = lock(&SERVING.0);
        drop(
            SERVING
                .1
                .wait_timeout_while(serving, CLOSE_HOLD, |serving| *serving),
        );
    }
    TRUE
}

/// Console control events ring [`STOP_BYTE`] on a bell while this lives.
pub(crate) struct StopSignals(());

/// Rings `ringer` with [`STOP_BYTE`] on Ctrl-C, Ctrl-Break, and the console's close, logoff
/// and shutdown events, until the result is dropped. (A plugin without a console, as most
/// are, gets none of these: end of input is its stop.)
pub(crate) fn stop_signals(ringer: &Ringer) -> io::Result<StopSignals> {
    *lock(&SERVING.0) = true;
    if let Err(e) = add_console_handler(on_console_event, &STOP_RINGER, ringer) {
        *lock(&SERVING.0) = false;
        return Err(e);
    }
    Ok(StopSignals(()))
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        remove_console_handler(on_console_event, &STOP_RINGER);
        *lock(&SERVING.0) = false;
        SERVING.1.notify_all();
    }
}

/// A console control handler, as Windows calls it.
type ConsoleHandler = unsafe extern "system" fn(u32) -> BOOL;

/// Puts `ringer` in `slot`, for `handler` to ring, and registers `handler` with the
/// console; on failure `slot` is emptied again.
fn add_console_handler(
    handler: ConsoleHandler,
    slot: &Mutex<Option<Ringer>>,
    ringer: &Ringer,
) -> io::Result<()> {
    *lock(slot) = Some(ringer.try_clone()?);
    // SAFETY: registers a handler with the signature Windows calls.
    if unsafe { SetConsoleCtrlHandler(Some(handler), TRUE) } == FALSE {
        *lock(slot) = None;
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Undoes [`add_console_handler`].
fn remove_console_handler(handler: ConsoleHandler, slot: &Mutex<Option<Ringer>>) {
    // SAFETY: removes a handler registered by `add_console_handler`.
    unsafe { SetConsoleCtrlHandler(Some(handler), FALSE) };
    *lock(slot) = None;
}

/// The room a logger line needs: its longest line (2 KiB), so a write that finds it never
/// waits for the reader.
const LOG_ROOM: u32 = 2048;

/// Whether stderr's pipe has reported a free quota above zero: only then does a zero mean
/// a full pipe. (Wine reports zero always; Windows reports the free space.)
static QUOTA_REPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a logger line written to stderr now would not block: for a pipe, its free
/// write quota (`NtQueryInformationFile`, as libuv reads it); a console or a file always
/// has room. `true` when the quota cannot be read, or reads zero on a system that has never
/// reported one above zero (Wine): the write may then block.
pub(crate) fn stderr_has_room() -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    use windows_sys::Wdk::Storage::FileSystem::{
        FILE_PIPE_LOCAL_INFORMATION, FilePipeLocalInformation, NtQueryInformationFile,
    };
    use windows_sys::Win32::System::IO::IO_STATUS_BLOCK;
    let err = std_handle(STD_ERROR_HANDLE);
    // SAFETY: GetFileType takes any handle value.
    if unsafe { GetFileType(err) } != FILE_TYPE_PIPE {
        return true;
    }
    let mut info = FILE_PIPE_LOCAL_INFORMATION::default();
    // SAFETY: all-zero is a valid IO_STATUS_BLOCK; both out-pointers are valid for the
    // sizes given.
    let status = unsafe {
        let mut io_status: IO_STATUS_BLOCK = std::mem::zeroed();
        NtQueryInformationFile(
            err,
            &mut io_status,
            (&mut info as *mut FILE_PIPE_LOCAL_INFORMATION).cast(),
            std::mem::size_of::<FILE_PIPE_LOCAL_INFORMATION>() as u32,
            FilePipeLocalInformation,
        )
    };
    if status < 0 {
        return true;
    }
    if info.WriteQuotaAvailable > 0 {
        QUOTA_REPORTED.store(true, Relaxed);
    } else if !QUOTA_REPORTED.load(Relaxed) {
        return true;
    }
    info.WriteQuotaAvailable >= LOG_ROOM.min(info.OutboundQuota.max(1))
}

/// Seconds on a monotonic clock that is cheap to read (the tick count), for windows of a
/// second.
pub(crate) fn coarse_secs() -> u32 {
    // SAFETY: no preconditions.
    (unsafe { windows_sys::Win32::System::SystemInformation::GetTickCount64() } / 1000) as u32
}

/// A handle written as a blocking one: on Windows every pipe write blocks until it is
/// taken (anonymous pipes are never non-blocking here), so this adds nothing. The wait has
/// no bound, as a blocking write has none: it is the backpressure, and ends when the other
/// side reads, or with an error when it closes the pipe.
pub(crate) struct BlockingWrites<F = File>(pub F);

impl<F: Write> Write for BlockingWrites<F> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// How many CPUs this process may run on, at least 1.
pub(crate) fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The raw handle of anything that has one (for the host module).
#[cfg(feature = "host")]
fn raw(h: &impl std::os::windows::io::AsRawHandle) -> HANDLE {
    h.as_raw_handle() as HANDLE
}

#[cfg(test)]
mod tests {
    use super::*;
    use windows_sys::Win32::System::Console::CTRL_CLOSE_EVENT;

    /// Console events cannot be sent here (Wine has no console for a piped process, and
    /// `GenerateConsoleCtrlEvent` fails), so the handler Windows would call is called as
    /// Windows calls it. One test: the handler's registration is process-wide.
    #[test]
    fn console_events_ring_the_stop_byte_and_a_close_waits_for_the_end_of_serving() {
        let (mut bell, ringer) = bell().unwrap();
        // Not serving: the event is left to the next handler.
        // SAFETY: the handler takes any event code.
        assert_eq!(unsafe { on_console_event(CTRL_C_EVENT) }, FALSE);
        let stop = stop_signals(&ringer).unwrap();
        for kind in [CTRL_C_EVENT, CTRL_BREAK_EVENT] {
            // SAFETY: as above.
            assert_eq!(unsafe { on_console_event(kind) }, TRUE);
            let rung = bell.wait(Some(Duration::from_secs(5)), None).unwrap();
            assert_eq!(rung, Some(STOP_BYTE));
        }
        // A close holds the process until serving ends.
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // SAFETY: as above.
            let handled = unsafe { on_console_event(CTRL_CLOSE_EVENT) };
            let _ = done_tx.send(handled);
        });
        let rung = bell.wait(Some(Duration::from_secs(30)), None).unwrap();
        assert_eq!(rung, Some(STOP_BYTE));
        assert!(
            done_rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "a close returned while the plugin still served"
        );
        drop(stop);
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(30)), Ok(TRUE));
    }

    #[test]
    fn the_bell_keeps_order_and_times_out() {
        let (mut bell, ringer) = bell().unwrap();
        let other = ringer.try_clone().unwrap();
        ringer.ring(b'a');
        other.ring(b'b');
        assert_eq!(bell.wait(None, None).unwrap(), Some(b'a'));
        assert_eq!(bell.wait(Some(Duration::ZERO), None).unwrap(), Some(b'b'));
        assert_eq!(
            bell.wait(Some(Duration::from_millis(20)), None).unwrap(),
            None
        );
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.ring(b'c');
        });
        assert_eq!(
            bell.wait(Some(Duration::from_secs(30)), None).unwrap(),
            Some(b'c')
        );
        late.join().unwrap();
    }
}
