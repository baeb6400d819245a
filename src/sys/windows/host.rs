//! The host side's Win32 calls: a plugin's process tree (a job object, and Ctrl-Break to
//! its console process group), its stdin, the file transport's open without following a
//! link, the shell for `--sampling-cmd`, and other processes' CPU time.

use std::ffi::OsStr;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::fs::{MetadataExt, OpenOptionsExt};
use std::os::windows::io::{FromRawHandle, OwnedHandle};
use std::os::windows::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command};
use std::time::Duration;

use windows_sys::Win32::Foundation::{
    CloseHandle, ERROR_STOPPED_ON_SYMLINK, FALSE, FILETIME, HANDLE, TRUE,
};
use windows_sys::Win32::Storage::FileSystem::{
    BY_HANDLE_FILE_INFORMATION, FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS,
    FILE_FLAG_OPEN_REPARSE_POINT, FILE_TYPE_DISK, GetFileInformationByHandle, GetFileType,
};
use windows_sys::Win32::System::Console::{
    CTRL_BREAK_EVENT, CTRL_C_EVENT, GenerateConsoleCtrlEvent,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectExtendedLimitInformation,
    SetInformationJobObject, TerminateJobObject,
};
use windows_sys::Win32::System::Threading::{
    CREATE_NEW_PROCESS_GROUP, GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
};
use windows_sys::core::BOOL;

use super::raw;

/// The exit code of processes the host kills (`TerminateJobObject`), as std's
/// `Child::kill` gives (`TerminateProcess`).
const KILLED: u32 = 1;

/// The processes a plugin (or a sampling command) started, held so that none outlives it:
/// on Windows a job object that the child is assigned to right after it starts (every
/// process it starts from then on is in the job too), created with
/// `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`, so that closing the handle (dropping this, or the
/// host's own end) kills whatever is still in it. The child also leads a console process
/// group of its own (`CREATE_NEW_PROCESS_GROUP`), which the polite stop (Ctrl-Break) goes
/// to.
///
/// The window: std starts the child running (it cannot start it suspended and resume it
/// after the assignment), so a process the child starts in the moment between its start
/// and [`ProcessTree::adopt`] is outside the job. A plugin starts its helpers later than
/// that in practice; nothing else differs.
#[derive(Debug)]
pub(crate) struct ProcessTree {
    pid: u32,
    /// Whether the child leads a console process group of its own, so that a Ctrl-Break
    /// reaches it and its console children alone (sent to any other pid, the event would
    /// go to every process on the host's console, the host too).
    group: bool,
    /// `None` when the job could not be made or the child not assigned (logged): the stops
    /// then reach the child alone.
    job: Option<OwnedHandle>,
}

impl ProcessTree {
    /// Makes the child `cmd` spawns the leader of a new console process group
    /// (`CREATE_NEW_PROCESS_GROUP`, which also turns Ctrl-C off in it), so that a Ctrl-C
    /// meant for the host does not hit it and a Ctrl-Break can go to it alone.
    pub fn prepare(cmd: &mut Command) {
        cmd.creation_flags(CREATE_NEW_PROCESS_GROUP);
    }

    /// The tree of `child`, just spawned from a [prepared](ProcessTree::prepare) command:
    /// a new job object with the child assigned to it. Call it at once after the spawn.
    /// Never fails: without a job (logged), the stops reach the child alone.
    pub fn adopt(child: &Child) -> ProcessTree {
        ProcessTree {
            pid: child.id(),
            group: true,
            job: job_of(child),
        }
    }

    /// The tree of `child`, started elsewhere: a job made now (only what the child starts
    /// from now on is in it), and no polite stop (its console process group is unknown).
    pub fn adopt_foreign(child: &Child) -> ProcessTree {
        ProcessTree {
            pid: child.id(),
            group: false,
            job: job_of(child),
        }
    }

    /// The polite stop: Ctrl-Break to the child's console process group. Fails when the
    /// host has no console, or does not share it with the child (a plugin under a service
    /// or a GUI host; under Wine always): the caller then goes straight on to the kill.
    pub fn stop_politely(&self) -> io::Result<()> {
        if !self.group {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the child does not lead a console process group of its own",
            ));
        }
        // SAFETY: no memory is passed; an unknown group only fails.
        if unsafe { GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, self.pid) } == FALSE {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Kills every process in the job (`TerminateJobObject`). Fails without a job: the
    /// caller then kills the child alone.
    pub fn kill(&self) -> io::Result<()> {
        match &self.job {
            Some(job) => terminate(job),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the child is in no job object",
            )),
        }
    }

    /// Kills whatever is left in the job after the child ended (helpers that outlived it
    /// holding its pipes). `Ok` with nothing to do when the job is empty, or there is none.
    pub fn kill_remnants(&self) -> io::Result<()> {
        match &self.job {
            Some(job) => terminate(job),
            None => Ok(()),
        }
    }
}

/// A job object that kills what is in it when its last handle closes, with `child` in it;
/// `None` (logged) when either step fails.
fn job_of(child: &Child) -> Option<OwnedHandle> {
    let made = new_job().and_then(|job| {
        // SAFETY: both are live handles this process holds for the call.
        if unsafe { AssignProcessToJobObject(raw(&job), raw(child)) } == FALSE {
            return Err(io::Error::last_os_error());
        }
        Ok(job)
    });
    made.inspect_err(|e| {
        log::warn!(
            "process {}: no job object ({e}): what it starts may outlive it",
            child.id()
        );
    })
    .ok()
}

fn new_job() -> io::Result<OwnedHandle> {
    // SAFETY: no security attributes and no name: both may be null.
    let job = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
    if job.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a handle just created that nothing else owns.
    let job = unsafe { OwnedHandle::from_raw_handle(job) };
    // SAFETY: all-zero is a valid value of this plain-data struct.
    let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    // SAFETY: a live job handle, and a pointer to a value of the size given, read only
    // during the call.
    let set = unsafe {
        SetInformationJobObject(
            raw(&job),
            JobObjectExtendedLimitInformation,
            (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
        )
    };
    if set == FALSE {
        return Err(io::Error::last_os_error());
    }
    Ok(job)
}

fn terminate(job: &OwnedHandle) -> io::Result<()> {
    // SAFETY: a live job handle.
    if unsafe { TerminateJobObject(raw(job), KILLED) } == FALSE {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The host's end of a child's stdin as a `File`.
pub(crate) fn stdin_file(stdin: ChildStdin) -> File {
    File::from(OwnedHandle::from(stdin))
}

/// No atomic non-blocking pipe writes here (see [`set_nonblocking_pipe`]).
pub(crate) const ATOMIC_PIPE_WRITE: usize = 0;

/// Anonymous pipes are never made non-blocking on Windows (`PIPE_NOWAIT` is a legacy mode
/// that breaks overlapped and partial writes): `Ok(false)`, every write blocks, and the
/// host writes every frame from its writer thread.
pub(crate) fn set_nonblocking_pipe(_file: &File) -> io::Result<bool> {
    Ok(false)
}

/// A directory whose entries are opened without following links. (Windows opens an entry
/// by its path under the directory's, as canonicalized by the caller: `\\?\` paths, in
/// which no DOS device name such as `NUL` is looked up.)
pub(crate) struct Dir(PathBuf);

impl Dir {
    /// The directory `path` (which must be one).
    pub fn open(path: &Path) -> io::Result<Dir> {
        if !std::fs::metadata(path)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            ));
        }
        Ok(Dir(path.to_owned()))
    }

    /// Opens the entry `name` for reading, exactly once, never through a link: opened with
    /// `FILE_FLAG_OPEN_REPARSE_POINT`, a symlink, junction or other reparse point is opened
    /// itself and then refused (`ERROR_STOPPED_ON_SYMLINK`, see [`is_nofollow_refusal`]);
    /// anything but a file on disk (a device) is refused too. `name` must be one path
    /// component: anything with a separator, a drive or stream colon, or a NUL fails with
    /// `InvalidInput`. Does not block beyond the open itself.
    pub fn open_entry_nofollow(&self, name: &OsStr) -> io::Result<File> {
        self.open_entry(name, OpenOptions::new().read(true))
    }

    /// Opens the entry `name` for reading and writing (at the end the caller seeks to), as
    /// [`Dir::open_entry_nofollow`] opens it for reading: never through a link, never a
    /// device.
    pub fn open_entry_nofollow_append(&self, name: &OsStr) -> io::Result<File> {
        // Not `append`: its handle lacks FILE_WRITE_DATA, so a failed append could not be
        // cut off again (`set_len`). The caller writes at the end it seeks to.
        self.open_entry(name, OpenOptions::new().read(true).write(true))
    }

    fn open_entry(&self, name: &OsStr, options: &mut OpenOptions) -> io::Result<File> {
        let units: Vec<u16> = name.encode_wide().collect();
        let bad = |c: u16| {
            c == 0 || c == u16::from(b'/') || c == u16::from(b'\\') || c == u16::from(b':')
        };
        if units.is_empty() || units.iter().any(|&c| bad(c)) || name == "." || name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a single path component",
            ));
        }
        let file = options
            .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
            .open(self.0.join(name))?;
        if file.metadata()?.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
            return Err(io::Error::from_raw_os_error(
                ERROR_STOPPED_ON_SYMLINK as i32,
            ));
        }
        // SAFETY: GetFileType takes any handle value.
        if unsafe { GetFileType(raw(&file)) } != FILE_TYPE_DISK {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a file on disk",
            ));
        }
        Ok(file)
    }
}

/// Whether an error from [`Dir::open_entry_nofollow`] means the entry is a link.
pub(crate) fn is_nofollow_refusal(e: &io::Error) -> bool {
    e.raw_os_error() == Some(ERROR_STOPPED_ON_SYMLINK as i32)
}

/// Takes a lock on the whole of `file` (`LockFileEx`, shared or exclusive) without
/// waiting: `Ok(false)` when another handle holds one in the way. Held until
/// [`unlock_file`] or the handle is closed. (std's `File::try_lock` is newer than Rust
/// 1.88, the crate's minimum.)
pub(crate) fn try_lock_file(file: &File, exclusive: bool) -> io::Result<bool> {
    use windows_sys::Win32::Foundation::ERROR_LOCK_VIOLATION;
    use windows_sys::Win32::Storage::FileSystem::{
        LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY, LockFileEx,
    };
    let kind = if exclusive {
        LOCKFILE_EXCLUSIVE_LOCK
    } else {
        0
    };
    // SAFETY: all-zero is a valid value of this plain-data struct.
    let mut at: windows_sys::Win32::System::IO::OVERLAPPED = unsafe { std::mem::zeroed() };
    // SAFETY: a live handle (opened synchronously: the call returns at once), and a valid
    // OVERLAPPED that outlives the call.
    let ok = unsafe {
        LockFileEx(
            raw(file),
            kind | LOCKFILE_FAIL_IMMEDIATELY,
            0,
            u32::MAX,
            u32::MAX,
            &mut at,
        )
    };
    if ok != FALSE {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(ERROR_LOCK_VIOLATION as i32) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Releases the lock [`try_lock_file`] took.
pub(crate) fn unlock_file(file: &File) -> io::Result<()> {
    // SAFETY: a live handle; the range is the one `try_lock_file` locked.
    let ok = unsafe {
        windows_sys::Win32::Storage::FileSystem::UnlockFile(raw(file), 0, 0, u32::MAX, u32::MAX)
    };
    if ok == FALSE {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Which file an opened file or a directory entry is (volume serial number and file
/// index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    volume: u32,
    index: u64,
}

/// The identity and the number of links (names) of the opened `file`.
pub(crate) fn file_identity(file: &File, _meta: &Metadata) -> io::Result<(FileId, u64)> {
    // SAFETY: all-zero is a valid value of this plain-data struct.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: a live handle, and a valid out-pointer for the call.
    if unsafe { GetFileInformationByHandle(raw(file), &mut info) } == FALSE {
        return Err(io::Error::last_os_error());
    }
    let id = FileId {
        volume: info.dwVolumeSerialNumber,
        index: (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow),
    };
    Ok((id, u64::from(info.nNumberOfLinks)))
}

/// The identity of what the directory entry `path` names now, without following a link
/// (opened for no access, only to read its identity).
pub(crate) fn entry_identity(path: &Path) -> io::Result<FileId> {
    let file = OpenOptions::new()
        .access_mode(0)
        .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_BACKUP_SEMANTICS)
        .open(path)?;
    let meta = file.metadata()?;
    file_identity(&file, &meta).map(|(id, _)| id)
}

/// The shell command line that runs `command` (`cmd /C COMMAND`, the command passed as
/// it is: cmd parses its own command line).
pub(crate) fn shell(command: &str) -> Command {
    let mut cmd = Command::new("cmd");
    cmd.arg("/C").raw_arg(command);
    cmd
}

/// The shell [`shell`] runs, as messages name it.
pub(crate) const SHELL: &str = "cmd /C";

/// The CPU time process `pid` has used so far, all its threads together, ended ones too
/// (user and kernel time from `GetProcessTimes`, in 100 ns units).
pub(crate) fn process_cpu_time(pid: u32) -> io::Result<Duration> {
    // SAFETY: no memory is passed; the handle returned is closed below.
    let process: HANDLE = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, pid) };
    if process.is_null() {
        return Err(io::Error::last_os_error());
    }
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: a live process handle and four valid out-pointers.
    let ok = unsafe { GetProcessTimes(process, &mut created, &mut exited, &mut kernel, &mut user) };
    let err = io::Error::last_os_error();
    // SAFETY: the handle OpenProcess returned, closed once.
    unsafe { CloseHandle(process) };
    if ok == FALSE {
        return Err(err);
    }
    let ticks = |t: FILETIME| (u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime);
    Ok(Duration::from_nanos(
        (ticks(kernel) + ticks(user)).saturating_mul(100),
    ))
}

/// CPU affinity is Linux-only here.
pub(crate) fn thread_affinity() -> io::Result<Vec<usize>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "CPU affinity needs Linux",
    ))
}

/// CPU affinity is Linux-only here.
pub(crate) fn set_thread_affinity(_cpus: &[usize]) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "CPU affinity needs Linux",
    ))
}

/// Where console control events ring for a host process that catches its interrupts
/// (`host::Interrupts`), and the last event's kind (`u32::MAX`: none yet).
static HOST_RINGER: std::sync::Mutex<Option<super::Ringer>> = std::sync::Mutex::new(None);
static HOST_LAST: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(u32::MAX);

/// How long a close, logoff or shutdown event holds the host for its teardown (Windows
/// ends the process 5 s after a close event whatever the handler does; the job objects
/// kill the plugins then).
const HOST_CLOSE_HOLD: Duration = Duration::from_secs(10);

/// The host's console control handler, on a thread Windows starts: notes the event and
/// rings [`STOP_BYTE`](crate::sys::STOP_BYTE). A close, logoff or shutdown ends the
/// process when the handler returns, so it holds (bounded) while the host's teardown
/// runs, which exits the process itself.
unsafe extern "system" fn on_host_console_event(kind: u32) -> BOOL {
    let Some(ringer) = crate::lock::lock(&HOST_RINGER)
        .as_ref()
        .and_then(|r| r.try_clone().ok())
    else {
        return FALSE;
    };
    HOST_LAST.store(kind, std::sync::atomic::Ordering::SeqCst);
    ringer.ring(crate::sys::STOP_BYTE);
    if kind != CTRL_C_EVENT && kind != CTRL_BREAK_EVENT {
        std::thread::sleep(HOST_CLOSE_HOLD);
    }
    TRUE
}

/// Console control events ring a host's bell while this lives.
pub(crate) struct HostSignals(());

/// Rings `ringer` with [`STOP_BYTE`](crate::sys::STOP_BYTE) on Ctrl-C, Ctrl-Break and the
/// console's close, logoff and shutdown events, until the result is dropped;
/// [`last_host_signal`] says which came.
pub(crate) fn host_signals(ringer: &super::Ringer) -> io::Result<HostSignals> {
    super::add_console_handler(on_host_console_event, &HOST_RINGER, ringer)?;
    Ok(HostSignals(()))
}

impl Drop for HostSignals {
    fn drop(&mut self) {
        super::remove_console_handler(on_host_console_event, &HOST_RINGER);
    }
}

/// How the last event [`host_signals`] took asks the host to stop: 0 interrupt (Ctrl-C),
/// 1 terminate (Ctrl-Break), 2 hang-up (close, logoff, shutdown); `None` before any came.
pub(crate) fn last_host_signal() -> Option<u8> {
    match HOST_LAST.load(std::sync::atomic::Ordering::SeqCst) {
        u32::MAX => None,
        CTRL_C_EVENT => Some(0),
        CTRL_BREAK_EVENT => Some(1),
        _ => Some(2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Console events cannot be sent here (see `sys::windows`'s test), so the handler is
    /// called as Windows calls it. One test: the registration is process-wide.
    #[test]
    fn console_events_ring_the_host_and_say_which_came() {
        let (mut bell, ringer) = crate::sys::bell().unwrap();
        // SAFETY: the handler takes any event code.
        assert_eq!(unsafe { on_host_console_event(CTRL_C_EVENT) }, FALSE);
        let caught = host_signals(&ringer).unwrap();
        for (kind, said) in [(CTRL_C_EVENT, 0), (CTRL_BREAK_EVENT, 1)] {
            // SAFETY: as above.
            assert_eq!(unsafe { on_host_console_event(kind) }, TRUE);
            let rung = bell.wait(Some(Duration::from_secs(30)), None).unwrap();
            assert_eq!(rung, Some(crate::sys::STOP_BYTE));
            assert_eq!(last_host_signal(), Some(said));
        }
        drop(caught);
        // SAFETY: as above.
        assert_eq!(unsafe { on_host_console_event(CTRL_C_EVENT) }, FALSE);
    }
}
