//! `storage/*` kept in a directory, so what a plugin stores survives between runs of the
//! host (`executa call --storage-dir DIR`, one call after another).

use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::storage::{MAX_ENTRIES, MAX_VALUE_BYTES, MemoryStorage};
use crate::error::{Error, Result, RpcError, codes};
use crate::host::service::{ReverseCall, Service};
use crate::lock::lock;

/// The file, inside the directory, that holds the entries.
pub const STORAGE_FILE: &str = "storage.json";

/// A `storage/*` backend whose entries live in `DIR/storage.json`: [`MemoryStorage`]'s
/// semantics (scopes, etags, `if_match`, TTLs, paging, its limits), loaded when it is
/// opened and written back after every `storage/set` and `storage/delete` that succeeds
/// (to a temporary file renamed over the old one, so a crash leaves the old or the new
/// contents, never half of one). The file is plain JSON, to read or edit between runs.
///
/// Meant for one host at a time: two processes writing the same directory at once each
/// keep their own view, and the last write wins.
#[derive(Debug)]
pub struct DirStorage {
    store: MemoryStorage,
    file: PathBuf,
    /// Held while the file is written, so two calls never write it at once.
    writing: std::sync::Mutex<()>,
}

impl DirStorage {
    /// Opens (creating it when missing) the directory `dir`, accepting the `user`, `app`
    /// and `tool` scopes. Blocks on reading the file; fails with [`Error::Io`] naming the
    /// path when the directory cannot be made or the file read, and with
    /// [`Error::Protocol`] when the file is not what this backend writes.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        DirStorage::with_scopes(dir, &["user", "app", "tool"])
    }

    /// [`DirStorage::open`] accepting only these scopes (`&["user", "tool"]` is what
    /// production grants a plugin).
    pub fn with_scopes(dir: impl AsRef<Path>, scopes: &[&str]) -> Result<Self> {
        let dir = dir.as_ref();
        let named =
            |e: io::Error| Error::Io(io::Error::new(e.kind(), format!("{}: {e}", dir.display())));
        std::fs::create_dir_all(dir).map_err(named)?;
        let file = dir.join(STORAGE_FILE);
        let store = MemoryStorage::with_scopes(scopes);
        // Looked at before it is read: a file this backend never wrote is not loaded whole.
        if let Ok(meta) = std::fs::metadata(&file)
            && meta.len() > max_file_bytes() as u64
        {
            return Err(Error::Protocol(format!(
                "{}: {} bytes is more than this backend ever writes",
                file.display(),
                meta.len()
            )));
        }
        match std::fs::read(&file) {
            Ok(bytes) => {
                let snapshot: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| Error::Protocol(format!("{}: {e}", file.display())))?;
                store.restore(&snapshot);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(named(e)),
        }
        Ok(DirStorage {
            store,
            file,
            writing: std::sync::Mutex::new(()),
        })
    }

    /// The file the entries are kept in.
    pub fn path(&self) -> &Path {
        &self.file
    }

    /// The live value under `key` in `scope`.
    pub fn value(&self, scope: &str, key: &str) -> Option<Value> {
        self.store.value(scope, key)
    }

    /// Writes the entries to the file. Blocks on local file I/O.
    fn save(&self) -> io::Result<()> {
        let _writing = lock(&self.writing);
        let text = serde_json::to_vec_pretty(&self.store.snapshot())?;
        let tmp = self.file.with_extension("json.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.file)
    }
}

/// The largest file [`DirStorage`] writes: every entry at the value limit, with room for
/// its key and etag.
fn max_file_bytes() -> usize {
    MAX_ENTRIES * (2 * MAX_VALUE_BYTES + 4096)
}

impl Service for DirStorage {
    fn handles(&self, method: &str) -> bool {
        self.store.handles(method)
    }

    /// Answers as [`MemoryStorage`] does; a write that cannot be saved is answered -32603
    /// naming the file (the value stays in memory for this run).
    fn call(&self, call: &ReverseCall) -> std::result::Result<Value, RpcError> {
        let answer = self.store.call(call)?;
        if matches!(call.method.as_str(), "storage/set" | "storage/delete") {
            self.save().map_err(|e| {
                RpcError::new(
                    codes::INTERNAL_ERROR,
                    format!("storage file {}: {e}", self.file.display()),
                )
            })?;
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_call as call;
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_survive_reopening_with_their_etags() {
        let dir = std::env::temp_dir().join(format!("executa-dir-storage-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = DirStorage::open(&dir).unwrap();
        let set = call(
            &first,
            "storage/set",
            json!({"key": "k", "scope": "user", "value": {"n": 1}}),
        )
        .unwrap();
        call(
            &first,
            "storage/set",
            json!({"key": "gone", "scope": "tool", "value": 1}),
        )
        .unwrap();
        call(
            &first,
            "storage/delete",
            json!({"key": "gone", "scope": "tool"}),
        )
        .unwrap();
        drop(first);

        let second = DirStorage::open(&dir).unwrap();
        let got = call(&second, "storage/get", json!({"key": "k", "scope": "user"})).unwrap();
        assert_eq!(got["value"], json!({"n": 1}));
        assert_eq!(got["etag"], set["etag"]);
        assert_eq!(second.value("tool", "gone"), None);
        // The generation goes on where it was: etags stay unique across runs.
        let next = call(
            &second,
            "storage/set",
            json!({"key": "k", "scope": "user", "value": 2, "if_match": set["etag"]}),
        )
        .unwrap();
        assert_eq!(next["generation"], 3);
        std::fs::write(second.path(), "not json").unwrap();
        assert!(matches!(DirStorage::open(&dir), Err(Error::Protocol(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
