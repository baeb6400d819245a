//! The files of a [`DirStorage`](super::DirStorage) directory, handled so that nothing
//! planted there can redirect, hang or flood the store: every entry is opened without
//! following a link (and without blocking on a FIFO), checked to be a regular file on the
//! open handle, and read within a cap; new contents are written to a temporary file made
//! exclusively under a unique name and renamed into place; and the processes sharing the
//! directory take turns through a lock on a file of its own.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::host::context::unique_words;
use crate::sys;

/// The log of changes since the snapshot, inside the directory.
pub(crate) const LOG_FILE: &str = "storage.log";
/// The file locked while a process reads (shared) or writes (exclusive) the store.
pub(crate) const LOCK_FILE: &str = "storage.lock";
/// How long a call waits for the lock another process holds before it fails (-32603):
/// below the 30 s a plugin's storage client waits for the answer.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(20);
/// The longest pause between two tries of the lock.
const LOCK_POLL_MAX: Duration = Duration::from_millis(20);
/// Tries at a unique temporary name before giving up (another name is taken only when
/// something else made a file of that name, which a random part makes unlikely).
const TEMP_TRIES: u32 = 16;
/// The first bytes of the log that hold its header line.
const HEAD_BYTES: u64 = 256;

/// The directory, opened once, and its lock file.
pub(crate) struct Files {
    dir: PathBuf,
    handle: sys::Dir,
    lock: File,
}

/// Which file a name held, and how long and how recently written it was: a store that
/// finds the snapshot's stamp changed reads it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    id: sys::FileId,
    len: u64,
    modified: Option<SystemTime>,
}

/// The lock [`Files::lock`] took, released when dropped.
pub(crate) struct Locked<'a>(&'a File);

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // Closing the file would release it too; failing to unlock an open file is not
        // expected and leaves the next try to time out with a message.
        if let Err(e) = sys::unlock_file(self.0) {
            log::warn!("storage lock: unlock failed: {e}");
        }
    }
}

/// The log, opened for reading (and appending, for a writer).
#[derive(Debug)]
pub(crate) struct Log {
    file: File,
    /// Where it is, for messages.
    pub path: PathBuf,
    /// Its length when opened.
    pub len: u64,
    /// Its names (hard links): one that has others is never written in place.
    pub links: u64,
}

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Files")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Files {
    /// Makes the directory `dir` when missing and opens it, and its lock file.
    pub fn open(dir: &Path) -> io::Result<Files> {
        std::fs::create_dir_all(dir).map_err(|e| named(dir, e))?;
        let handle = sys::Dir::open(dir).map_err(|e| named(dir, e))?;
        let path = dir.join(LOCK_FILE);
        // Made exclusively (never through a link), or opened as any other entry: for
        // writing too, which an exclusive lock needs where `flock` is emulated with POSIX
        // locks (NFS).
        let lock = match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let file = open_checked(&handle, &path, true)?;
                file.ok_or_else(|| named(&path, io::ErrorKind::NotFound.into()))?
            }
            Err(e) => return Err(named(&path, e)),
        };
        Ok(Files {
            dir: dir.to_owned(),
            handle,
            lock,
        })
    }

    /// The path of the entry `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Takes the directory's lock, shared (to read) or exclusive (to write), waiting at
    /// most [`LOCK_WAIT`] for another process to release it. Blocks for that long at most.
    pub fn lock(&self, exclusive: bool) -> io::Result<Locked<'_>> {
        self.lock_within(exclusive, LOCK_WAIT)
    }

    fn lock_within(&self, exclusive: bool, wait: Duration) -> io::Result<Locked<'_>> {
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(1);
        loop {
            if sys::try_lock_file(&self.lock, exclusive).map_err(|e| self.lock_error(e))? {
                let locked = Locked(&self.lock);
                self.check_lock_file()?;
                return Ok(locked);
            }
            if Instant::now() >= deadline {
                let why = format!("another process has held the lock for over {wait:?}");
                return Err(self.lock_error(io::Error::new(io::ErrorKind::TimedOut, why)));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(LOCK_POLL_MAX);
        }
    }

    /// Whether the lock held is still the one `storage.lock` names: a lock file removed
    /// (or replaced) while the store is open would let a process that opens the directory
    /// later take another lock, and two writers would no longer take turns. Refused then,
    /// rather than written unserialized.
    fn check_lock_file(&self) -> io::Result<()> {
        let path = self.path(LOCK_FILE);
        let held = self
            .lock
            .metadata()
            .and_then(|meta| sys::file_identity(&self.lock, &meta));
        let named_now = sys::entry_identity(&path);
        match (held, named_now) {
            (Ok((held, _)), Ok(now)) if held == now => Ok(()),
            _ => Err(refusal(
                &path,
                "was removed or replaced while the store was open, so other processes no \
                 longer take turns with this one: start this one again",
            )),
        }
    }

    fn lock_error(&self, e: io::Error) -> io::Error {
        named(&self.path(LOCK_FILE), e)
    }

    /// The stamp of the entry `name` (not following a link), `None` when it is missing.
    pub fn stamp(&self, name: &str) -> io::Result<Option<Stamp>> {
        let path = self.path(name);
        let found = std::fs::symlink_metadata(&path)
            .and_then(|meta| Ok((meta, sys::entry_identity(&path)?)));
        match found {
            Ok((meta, id)) => Ok(Some(Stamp {
                id,
                len: meta.len(),
                modified: meta.modified().ok(),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(named(&path, e)),
        }
    }

    /// The whole of the regular file `name` (at most `cap` bytes, or it is refused
    /// unread), `None` when it is missing.
    pub fn read(&self, name: &str, cap: u64) -> io::Result<Option<Vec<u8>>> {
        let path = self.path(name);
        let Some(file) = open_checked(&self.handle, &path, false)? else {
            return Ok(None);
        };
        let len = file.metadata().map_err(|e| named(&path, e))?.len();
        read_capped(file, &path, 0, len, cap).map(Some)
    }

    /// The log, opened for reading (and appending, for a writer), `None` when it is
    /// missing.
    pub fn open_log(&self, append: bool) -> io::Result<Option<Log>> {
        let path = self.path(LOG_FILE);
        let Some(file) = open_checked(&self.handle, &path, append)? else {
            return Ok(None);
        };
        let meta = file.metadata().map_err(|e| named(&path, e))?;
        let (_, links) = sys::file_identity(&file, &meta).map_err(|e| named(&path, e))?;
        Ok(Some(Log {
            len: meta.len(),
            links,
            file,
            path,
        }))
    }

    /// Puts `bytes` in the entry `name` whole or not at all: written and flushed to disk
    /// in a temporary file made exclusively, then renamed over `name` (which, a link or
    /// not, is replaced, never written through).
    pub fn replace(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let (tmp, mut file) = self.temp_file(name)?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| {
                drop(file);
                std::fs::rename(&tmp, self.path(name))
            });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(named(&self.path(name), e));
        }
        self.sync_dir();
        Ok(())
    }

    /// A new file `NAME.PID-N-RANDOM.tmp`, made exclusively (`create_new`: an existing
    /// entry of that name, a link too, is never opened).
    fn temp_file(&self, name: &str) -> io::Result<(PathBuf, File)> {
        let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
        for _ in 0..TEMP_TRIES {
            let tmp = self.path(&temp_name(name));
            match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(file) => return Ok((tmp, file)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
                Err(e) => return Err(named(&tmp, e)),
            }
        }
        Err(named(&self.path(name), last))
    }

    /// Makes the renames in the directory durable where the platform allows (on Unix,
    /// `fsync` of the directory; elsewhere opening a directory as a file fails, and the
    /// rename is left to the file system).
    fn sync_dir(&self) {
        if let Ok(dir) = File::open(&self.dir) {
            let _ = dir.sync_all();
        }
    }

    /// Removes temporary files that a process ended before renaming. Only while holding
    /// the exclusive lock: every temporary file is written under it, so none is in use.
    pub fn sweep_temps(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            if is_temp_name(&entry.file_name()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

impl Log {
    /// Its first line, where the header is (at most a few hundred bytes).
    pub fn head(&mut self) -> io::Result<Vec<u8>> {
        let mut head = Vec::new();
        self.file
            .seek(SeekFrom::Start(0))
            .and_then(|_| (&mut self.file).take(HEAD_BYTES).read_to_end(&mut head))
            .map_err(|e| named(&self.path, e))?;
        let line = head.iter().position(|&b| b == b'\n').map_or(0, |n| n + 1);
        head.truncate(line);
        Ok(head)
    }

    /// Its bytes from `offset` to the end, refused unread past `cap` bytes in all.
    pub fn read_from(&mut self, offset: u64, cap: u64) -> io::Result<Vec<u8>> {
        read_capped(&mut self.file, &self.path, offset, self.len, cap)
    }

    /// Appends `line` (ending in a newline) at `at`, its end, and flushes it to disk. A
    /// failed append is cut off again where possible, so no half line stays.
    pub fn append(&mut self, line: &[u8], at: u64) -> io::Result<()> {
        // The end, under the exclusive lock (Unix appends there anyway; Windows opens the
        // log for writing, not appending, so that a failed append can be cut off).
        let appended = self
            .file
            .seek(SeekFrom::Start(at))
            .and_then(|_| self.file.write_all(line))
            .and_then(|()| self.file.sync_data());
        if let Err(e) = appended {
            if self.file.set_len(at).is_err() {
                log::warn!(
                    "{}: a failed append may have left half a line",
                    self.path.display()
                );
            }
            return Err(named(&self.path, e));
        }
        Ok(())
    }
}

/// Opens the entry `path` names in `dir` without following a link, refusing anything but
/// a regular file (looked at on the open handle); `None` when it is missing.
fn open_checked(dir: &sys::Dir, path: &Path, append: bool) -> io::Result<Option<File>> {
    let name = path.file_name().unwrap_or_default();
    let opened = if append {
        dir.open_entry_nofollow_append(name)
    } else {
        dir.open_entry_nofollow(name)
    };
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if sys::is_nofollow_refusal(&e) => {
            return Err(refusal(
                path,
                "a symbolic link (or another kind of link), which the store never follows; \
                 replace it with the file itself",
            ));
        }
        Err(e) => return Err(named(path, e)),
    };
    let meta = file.metadata().map_err(|e| named(path, e))?;
    if !meta.is_file() {
        return Err(refusal(
            path,
            "not a regular file (a FIFO, a device or a directory): refused unread",
        ));
    }
    Ok(Some(file))
}

/// `file` from `offset` to its end; more than `cap` bytes in all (`offset` included) is
/// refused: unread when its length (`len`, from `fstat`) says so, and after `cap + 1`
/// bytes when it grows, or its length lied.
fn read_capped(
    mut file: impl Read + Seek,
    path: &Path,
    offset: u64,
    len: u64,
    cap: u64,
) -> io::Result<Vec<u8>> {
    let too_large = |len: u64| {
        refusal(
            path,
            &format!("{len} bytes or more, over the {cap}-byte limit of a storage file: refused"),
        )
    };
    if offset.max(len) > cap {
        return Err(too_large(offset.max(len)));
    }
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.take(cap - offset + 1).read_to_end(&mut bytes))
        .map_err(|e| named(path, e))?;
    let end = offset + bytes.len() as u64;
    if end > cap {
        return Err(too_large(end));
    }
    Ok(bytes)
}

/// `e`, its message starting with the path it is about.
pub(crate) fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// A file the store will not read or write, and why (`InvalidData`).
pub(crate) fn refusal(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {why}", path.display()),
    )
}

fn temp_name(name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{name}.{}-{n}-{:016x}.tmp",
        std::process::id(),
        unique_words()[0]
    )
}

/// Whether `name` is one [`temp_name`] makes for this store's files.
fn is_temp_name(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    let Some(middle) = [super::STORAGE_FILE, LOG_FILE].iter().find_map(|base| {
        name.strip_prefix(base)?
            .strip_prefix('.')?
            .strip_suffix(".tmp")
    }) else {
        return false;
    };
    let parts: Vec<&str> = middle.split('-').collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    matches!(parts.as_slice(), [pid, n, random]
        if digits(pid) && digits(n) && random.len() == 16
            && random.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("executa-dir-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn readers_share_the_lock_and_a_writer_waits_a_bounded_time() {
        let dir = scratch("lock");
        let (a, b) = (Files::open(&dir).unwrap(), Files::open(&dir).unwrap());
        let short = Duration::from_millis(100);
        {
            let _reading = a.lock_within(false, short).unwrap();
            let _also = b.lock_within(false, short).unwrap();
            let err = Files::open(&dir)
                .unwrap()
                .lock_within(true, short)
                .err()
                .unwrap();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut);
            assert!(err.to_string().contains(LOCK_FILE), "{err}");
        }
        let _writing = a.lock_within(true, short).unwrap();
        assert!(b.lock_within(false, short).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A lock file removed while a store is open: its lock no longer excludes a process
    /// that opens the directory afterwards, so it refuses to go on.
    #[test]
    #[cfg(unix)] // Windows refuses a new file under a name whose old file is still open
    fn a_lock_file_removed_under_an_open_store_is_refused() {
        let dir = scratch("removed-lock");
        let a = Files::open(&dir).unwrap();
        drop(a.lock_within(true, Duration::from_secs(30)).unwrap());
        std::fs::remove_file(dir.join(LOCK_FILE)).unwrap();
        let late = Files::open(&dir).unwrap();
        let _held = late.lock_within(true, Duration::from_secs(30)).unwrap();
        let err = a.lock_within(true, Duration::from_secs(30)).err().unwrap();
        assert!(err.to_string().contains("removed or replaced"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn leftover_temporary_files_go_and_nothing_else() {
        let dir = scratch("sweep");
        let files = Files::open(&dir).unwrap();
        let (ours, _) = files.temp_file(LOG_FILE).unwrap();
        let others = [
            "storage.json.tmp",
            "storage.json.1-2-xyz.tmp",
            "notes.1-2-0123456789abcdef.tmp",
        ];
        for name in others {
            std::fs::write(dir.join(name), "keep").unwrap();
        }
        files.sweep_temps();
        assert!(!ours.exists());
        for name in others {
            assert!(dir.join(name).exists(), "{name}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
