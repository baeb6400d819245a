//! File transport: a plugin writes a big response to a temp file and prints
//! `{"jsonrpc":"2.0","id":N,"__file_transport":"/tmp/....json"}`; the host reads the file,
//! deletes it, and settles the call with it.
//!
//! The plugin names the path and may change what is behind it at any moment, so the host
//! never resolves that path twice and never lets the plugin steer the lookup:
//!
//! 1. The name must be one component whose parent directory is the temp directory. That
//!    check only decides whether the plugin named the temp directory; it opens nothing.
//! 2. The host opens the temp directory itself (from its own environment, not the
//!    plugin's path) and then the name *relative to that directory handle*
//!    (`openat(O_NOFOLLOW | O_NONBLOCK)`): the kernel looks up exactly one entry of that
//!    directory. A symlink fails (`ELOOP`), and a FIFO cannot block the reader thread.
//!    Whatever the plugin renames or swaps, the host holds an entry of the temp directory
//!    or nothing. (Windows: the entry's path is opened with `FILE_FLAG_OPEN_REPARSE_POINT`,
//!    so a symlink or junction is opened itself, never followed, and refused on the handle.)
//! 3. Every further check is made on the opened handle (`fstat`): a regular file, with one
//!    link (a hard link could make a file from elsewhere appear in the temp directory), no
//!    larger than the frame cap.
//! 4. At most size + 1 bytes are read from that handle, into a buffer reserved once, so a
//!    file that grows while it is read cannot raise memory above the cap.
//! 5. The file is deleted only when it held the reply, and only while its name still
//!    names the inode that was read, so a swap after the read cannot redirect the delete.

use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::pending::Reply;
use crate::error::Error;
use crate::sys;
use crate::wire::{self, Message};

/// Reads, checks and (when it held the reply) deletes the file `path` names. Blocks only
/// on local file I/O of at most `max + 1` bytes. Refusals are [`Error::Protocol`] naming
/// the path and the reason; a file over the cap is [`Error::FrameTooLarge`].
pub(crate) fn read(path: &Path, max: usize) -> Reply {
    let refuse = |why: &str| {
        Error::Protocol(format!(
            "file transport path {} refused: {why}",
            path.display()
        ))
    };
    let (tmp, name) = temp_dir_entry(path).map_err(|why| refuse(&why))?;
    let dir = sys::Dir::open(&tmp).map_err(|e| refuse(&format!("temp directory: {e}")))?;
    let file = dir
        .open_entry_nofollow(name)
        .map_err(|e| refuse(&open_failure(&e)))?;
    let meta = file.metadata().map_err(|e| refuse(&e.to_string()))?;
    let (id, links) = sys::file_identity(&file, &meta).map_err(|e| refuse(&e.to_string()))?;
    let size = checked_size(&meta, links, max).map_err(|e| match e {
        Refusal::TooLarge(size) => Error::FrameTooLarge { size, max },
        Refusal::Why(why) => refuse(why),
    })?;
    let bytes = read_at_most(file, size).map_err(|e| refuse(&format!("read failed: {e}")))?;
    let reply = match wire::parse(&bytes) {
        Message::Response {
            outcome: Ok(result),
            ..
        } => Ok(result.to_owned()),
        Message::Response {
            outcome: Err(error),
            ..
        } => Err(Error::Remote(wire::parse_error_object(error))),
        _ => return Err(refuse("the file holds no JSON-RPC response")),
    };
    remove_if_same(&tmp.join(name), id);
    reply
}

/// The canonical temp directory and the entry name, when `path` names an entry directly
/// inside it.
fn temp_dir_entry(path: &Path) -> Result<(PathBuf, &OsStr), String> {
    let name = path.file_name().ok_or("no file name")?;
    let parent = path.parent().ok_or("no parent directory")?;
    let parent = parent.canonicalize().map_err(|e| e.to_string())?;
    let tmp = std::env::temp_dir()
        .canonicalize()
        .map_err(|e| format!("temp directory: {e}"))?;
    if parent != tmp {
        return Err("only files directly in the temp directory are accepted".to_owned());
    }
    Ok((tmp, name))
}

fn open_failure(e: &io::Error) -> String {
    if sys::is_nofollow_refusal(e) {
        "a symlink (the host never follows one)".to_owned()
    } else {
        format!("cannot open: {e}")
    }
}

enum Refusal {
    TooLarge(usize),
    Why(&'static str),
}

/// The size of the opened file, which has `links` names, when it may be read as a reply.
fn checked_size(meta: &Metadata, links: u64, max: usize) -> Result<usize, Refusal> {
    if !meta.file_type().is_file() {
        return Err(Refusal::Why("not a regular file"));
    }
    // Exactly one name: a second one could be a hard link to a file from elsewhere, and
    // none means the plugin replaced the file right after the host opened it.
    if links != 1 {
        return Err(Refusal::Why(
            "the file has other links, or was replaced while it was opened",
        ));
    }
    let size = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    if size > max {
        return Err(Refusal::TooLarge(size));
    }
    Ok(size)
}

/// Reads the file as `fstat` sized it. One byte more than that is asked for, so a file
/// that grew since is noticed rather than read on: the buffer never grows past `size + 1`.
fn read_at_most(file: File, size: usize) -> io::Result<Vec<u8>> {
    let limit = size.saturating_add(1);
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(limit).map_err(io::Error::other)?;
    file.take(limit as u64).read_to_end(&mut bytes)?;
    if bytes.len() > size {
        return Err(io::Error::other("the file grew while it was read"));
    }
    Ok(bytes)
}

/// Deletes `path` when it still names the inode that was read.
fn remove_if_same(path: &Path, read: sys::FileId) {
    let same = sys::entry_identity(path).is_ok_and(|now| now == read);
    if same {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("executa-ft-unit-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_reply_file_is_read_and_deleted() {
        let path = scratch("ok");
        std::fs::write(&path, br#"{"jsonrpc":"2.0","id":3,"result":{"a":1}}"#).unwrap();
        let raw = read(&path, 1024).expect("the reply");
        assert_eq!(raw.get(), r#"{"a":1}"#);
        assert!(!path.exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_is_refused_and_left_alone() {
        let path = scratch("link");
        let _ = std::fs::remove_file(&path);
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let err = read(&path, 1024).unwrap_err().to_string();
        assert!(err.contains("a symlink"), "{err}");
        assert!(std::fs::symlink_metadata(&path).is_ok(), "not deleted");
        std::fs::remove_file(&path).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let path = scratch("fifo");
        let _ = std::fs::remove_file(&path);
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let err = read(&path, 1024).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_file_over_the_cap_or_not_a_reply_is_refused_and_kept() {
        let path = scratch("big");
        std::fs::write(&path, vec![b' '; 2048]).unwrap();
        assert!(matches!(
            read(&path, 1024),
            Err(Error::FrameTooLarge {
                size: 2048,
                max: 1024
            })
        ));
        std::fs::write(&path, b"{\"not\":\"a reply\"}").unwrap();
        let err = read(&path, 1024).unwrap_err().to_string();
        assert!(err.contains("no JSON-RPC response"), "{err}");
        assert!(path.exists(), "only a reply is deleted");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_hard_link_or_a_file_elsewhere_is_refused() {
        let outside = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let err = read(&outside, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("directly in the temp directory"), "{err}");

        let a = scratch("nlink-a");
        let b = scratch("nlink-b");
        let _ = std::fs::remove_file(&b);
        std::fs::write(&a, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).unwrap();
        std::fs::hard_link(&a, &b).unwrap();
        let err = read(&b, 1024).unwrap_err().to_string();
        assert!(err.contains("other links"), "{err}");
        std::fs::remove_file(&a).unwrap();
        std::fs::remove_file(&b).unwrap();
    }

    #[test]
    fn the_read_stops_one_byte_past_the_fstat_size() {
        let mut bytes = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_vec();
        let path = scratch("grow");
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        // As if the file had grown after `fstat` reported fewer bytes.
        let err = read_at_most(file, bytes.len() - 5).unwrap_err();
        assert!(err.to_string().contains("grew"), "{err}");
        let file = File::open(&path).unwrap();
        assert_eq!(read_at_most(file, bytes.len()).unwrap(), bytes);
        bytes.clear();
        std::fs::remove_file(&path).unwrap();
    }
}
