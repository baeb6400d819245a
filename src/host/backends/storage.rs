//! An in-memory `storage/*` backend (APS key/value) in the documented shapes (protocol
//! §8.3): scopes, weak etags `W/"<gen>-<digest>"`, `exists`, `if_match` preconditions,
//! TTLs and cursor paging.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Value, json};

use crate::error::RpcError;
use crate::host::json_cost::value_cost;
use crate::host::service::{ReverseCall, Service};
use crate::lock::lock;
use crate::storage::{Scope, SetOptions};

/// The platform's KV value limit (about 64 KB).
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Entries one store holds before refusing new keys (memory stays bounded).
pub const MAX_ENTRIES: usize = 10_000;
/// Keys and values one store holds in all, each value counted as its JSON text or as the
/// memory its tree takes, whichever is more (a value of many tiny objects takes up to 90
/// times its text), and each key as a JSON string, before a write that would grow it is
/// refused (-32024): memory, and a [`DirStorage`](super::DirStorage) file, stay bounded.
pub const MAX_STORE_BYTES: usize = 64 * 1024 * 1024;
/// Longest key accepted.
pub(crate) const MAX_KEY_BYTES: usize = 1024;
/// Longest etag a stored entry may carry (this store's are about 45 bytes).
pub(crate) const MAX_ETAG_BYTES: usize = 64;
/// The scopes there are.
const SCOPES: [&str; 3] = ["user", "app", "tool"];

const NOT_GRANTED: i64 = -32021;
const PRECONDITION_FAILED: i64 = -32023;
const QUOTA_EXCEEDED: i64 = -32024;
const VALUE_TOO_LARGE: i64 = -32025;

/// An in-memory `storage/*` backend, shared by every invoke of the host (values survive
/// restarts of the plugin, as the platform's do).
///
/// Answers `storage/get`, `storage/set`, `storage/delete` and `storage/list`. A missing
/// `scope` means `app`, the platform default (pitfall #12). All three scopes are accepted
/// unless [`MemoryStorage::with_scopes`] narrows them (production grants plugins only
/// `user` and `tool`); others are refused with -32021.
#[derive(Debug)]
pub struct MemoryStorage {
    store: Mutex<Store>,
    scopes: Vec<String>,
}

type Id = (String, String);

#[derive(Debug, Default)]
struct Store {
    entries: BTreeMap<Id, Entry>,
    generation: u64,
    /// What the entries count against [`MAX_STORE_BYTES`].
    bytes: usize,
}

impl Store {
    fn insert(&mut self, id: Id, entry: Entry) {
        self.bytes += cost(&id, &entry);
        if let Some(old) = self.entries.insert(id.clone(), entry) {
            self.bytes -= cost(&id, &old);
        }
    }

    fn remove(&mut self, id: &Id) {
        if let Some(old) = self.entries.remove(id) {
            self.bytes -= cost(id, &old);
        }
    }
}

/// What an entry counts against [`MAX_STORE_BYTES`]: its value's JSON text or tree,
/// whichever is larger, and its key as a JSON string.
fn cost(id: &Id, entry: &Entry) -> usize {
    entry.size_bytes.max(entry.heap) + json_string_len(&id.1)
}

fn json_string_len(s: &str) -> usize {
    // At most 6 bytes a byte (`\u0000`) and the quotes.
    json_len(s).unwrap_or(6 * s.len() + 2)
}

/// The length of `value`'s compact JSON text, counted without making it (`None` only if
/// it could not be written, which a `Value` or a string always can).
fn json_len(value: &(impl serde::Serialize + ?Sized)) -> Option<usize> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value)
        .ok()
        .map(|()| count.0)
}

/// A change a [`DirStorage`](super::DirStorage) log holds, checked
/// ([`MemoryStorage::parse_change`]) and ready to [apply](MemoryStorage::apply).
#[derive(Debug)]
pub(crate) struct Change {
    id: Id,
    /// `None`: the key is gone (deleted, or set with an expiry already past).
    entry: Option<Entry>,
    generation: u64,
}

#[derive(Debug)]
struct Entry {
    value: Value,
    etag: String,
    size_bytes: usize,
    /// The estimated memory of its value's tree.
    heap: usize,
    updated_at_ms: u64,
    /// When it expires, in epoch milliseconds: the wall clock, which other processes
    /// sharing a [`DirStorage`](super::DirStorage) file read the same way (a monotonic
    /// instant would drift from it across a suspend or a clock step).
    expires_at_ms: Option<u64>,
}

impl Entry {
    fn live(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_none_or(|t| t > now_ms)
    }
}

impl Default for MemoryStorage {
    fn default() -> Self {
        MemoryStorage::new()
    }
}

impl MemoryStorage {
    /// An empty store accepting the `user`, `app` and `tool` scopes.
    pub fn new() -> Self {
        MemoryStorage::with_scopes(&["user", "app", "tool"])
    }

    /// An empty store accepting only these scopes (`&["user", "tool"]` mimics what
    /// production grants a standalone plugin).
    pub fn with_scopes(scopes: &[&str]) -> Self {
        MemoryStorage {
            store: Mutex::new(Store::default()),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// A store (all three scopes granted) holding `entries`, each `(scope, key, value)`
    /// put as [`MemoryStorage::insert`] puts it: the one line that pre-fills the storage
    /// of a test.
    ///
    /// ```
    /// use executa::Scope;
    /// use executa::host::MemoryStorage;
    /// use serde_json::json;
    ///
    /// let storage = MemoryStorage::with_entries([
    ///     (Scope::User, "greeting", json!("Hi")),
    ///     (Scope::Tool, "seen", json!(["a", "b"])),
    /// ])?;
    /// assert_eq!(storage.value("user", "greeting"), Some(json!("Hi")));
    /// # Ok::<(), executa::Error>(())
    /// ```
    ///
    /// Fails on the first entry `insert` refuses.
    pub fn with_entries<K: AsRef<str>, V: Serialize>(
        entries: impl IntoIterator<Item = (Scope, K, V)>,
    ) -> crate::Result<Self> {
        let store = MemoryStorage::new();
        for (scope, key, value) in entries {
            store.insert(scope, key.as_ref(), value)?;
        }
        Ok(store)
    }

    /// Puts `value` under `key` in `scope`, as the plugin's
    /// `ctx.storage().set(key, &value, scope)` would (same rules, same etags: a test's
    /// setup can hold nothing the platform would refuse), and returns its etag. Takes
    /// `&self`: a [`TestHost`](crate::testing::TestHost)'s store is filled in one line,
    /// `host.storage().insert(Scope::User, "greeting", "Hi")?`.
    ///
    /// Fails with [`Error::Refused`](crate::Error::Refused) carrying the code `storage/set`
    /// would answer: -32021 for a scope this store does not grant
    /// ([`MemoryStorage::with_scopes`]), -32028 for an empty key or one over 1,024 bytes,
    /// -32025 for a value over [`MAX_VALUE_BYTES`], -32024 past [`MAX_ENTRIES`] or
    /// [`MAX_STORE_BYTES`]; with [`crate::Error::Json`] for a value that does not
    /// serialize. The store is then unchanged.
    pub fn insert(&self, scope: Scope, key: &str, value: impl Serialize) -> crate::Result<String> {
        self.insert_with(scope, key, value, &SetOptions::default())
    }

    /// [`MemoryStorage::insert`] with the options of the plugin's `storage().set_with`: an
    /// expiry (`ttl_seconds`, at least 1) or an `if_match` precondition (-32023 when the
    /// current etag differs).
    pub fn insert_with(
        &self,
        scope: Scope,
        key: &str,
        value: impl Serialize,
        options: &SetOptions,
    ) -> crate::Result<String> {
        let mut params =
            json!({ "scope": scope, "key": key, "value": serde_json::to_value(value)? });
        if let Some(etag) = &options.if_match {
            params["if_match"] = json!(etag);
        }
        if let Some(ttl) = options.ttl_seconds {
            params["ttl_seconds"] = json!(ttl);
        }
        let (answer, _) = self.set(&params, false).map_err(crate::Error::Refused)?;
        Ok(answer["etag"].as_str().unwrap_or_default().to_owned())
    }

    /// The live value under `key` in `scope`, for inspection by tests and tools.
    pub fn value(&self, scope: &str, key: &str) -> Option<Value> {
        let store = lock(&self.store);
        let e = store.entries.get(&(scope.to_owned(), key.to_owned()))?;
        e.live(now_ms()).then(|| e.value.clone())
    }

    /// Number of live entries across all scopes.
    pub fn len(&self) -> usize {
        let now = now_ms();
        lock(&self.store)
            .entries
            .values()
            .filter(|e| e.live(now))
            .count()
    }

    /// Whether the store holds no live entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The live entries and the etag generation, as JSON (expiries as epoch
    /// milliseconds), for [`DirStorage`](super::DirStorage) to keep in a file.
    pub(crate) fn snapshot(&self) -> Value {
        let now = now_ms();
        let store = lock(&self.store);
        let entries: Vec<Value> = store
            .entries
            .iter()
            .filter(|(_, e)| e.live(now))
            .map(|((scope, key), e)| {
                json!({
                    "scope": scope, "key": key, "value": e.value, "etag": e.etag,
                    "updated_at_ms": e.updated_at_ms, "expires_at_ms": e.expires_at_ms,
                })
            })
            .collect();
        json!({ "generation": store.generation, "entries": entries })
    }

    /// Replaces the contents with a [`MemoryStorage::snapshot`] (entries already expired
    /// are left out), or fails saying what in it is not what `snapshot` writes, leaving
    /// the contents as they were. Keeps entries of scopes this store does not grant, and
    /// more than the limits allow (the file holding them is bounded by its own cap):
    /// nothing read is dropped.
    pub(crate) fn restore(&self, snapshot: Value) -> Result<(), String> {
        let Value::Object(mut obj) = snapshot else {
            return Err("not a JSON object with `generation` and `entries`".into());
        };
        let generation = obj
            .get("generation")
            .and_then(Value::as_u64)
            .ok_or("no `generation` (a non-negative integer)")?;
        let entries = match obj.remove("entries") {
            Some(Value::Array(a)) => a,
            Some(_) => return Err("`entries` must be an array".into()),
            None => return Err("no `entries` (an array)".into()),
        };
        let wall = now_ms();
        let mut fresh = Store {
            generation,
            ..Store::default()
        };
        for (i, e) in entries.into_iter().enumerate() {
            let (id, entry) =
                stored_entry(e, wall).map_err(|why| format!("entries[{i}]: {why}"))?;
            if fresh.entries.contains_key(&id) {
                return Err(format!(
                    "entries[{i}]: a second entry for key {:?} in scope {:?}",
                    id.1, id.0
                ));
            }
            if let Some(entry) = entry {
                fresh.insert(id, entry);
            }
        }
        *lock(&self.store) = fresh;
        Ok(())
    }

    /// Checks one line of a [`DirStorage`](super::DirStorage) log: a [`MemoryStorage::change`]
    /// record. Says what is wrong with it otherwise.
    pub(crate) fn parse_change(record: Value) -> Result<Change, String> {
        let Value::Object(obj) = record else {
            return Err("not a JSON object".into());
        };
        let generation = obj
            .get("generation")
            .and_then(Value::as_u64)
            .ok_or("no `generation` (a non-negative integer)")?;
        let (id, entry) = match obj.get("op").and_then(Value::as_str) {
            Some("set") => stored_entry(Value::Object(obj), now_ms())?,
            Some("delete") => ((stored_scope(&obj)?, stored_key(&obj)?), None),
            _ => return Err("`op` must be \"set\" or \"delete\"".into()),
        };
        Ok(Change {
            id,
            entry,
            generation,
        })
    }

    /// Applies checked changes in order (what a log holds past the snapshot). The writes
    /// that made them passed the limits; they are not checked again.
    pub(crate) fn apply(&self, changes: Vec<Change>) {
        let mut store = lock(&self.store);
        for change in changes {
            store.generation = store.generation.max(change.generation);
            match change.entry {
                Some(entry) => store.insert(change.id, entry),
                None => store.remove(&change.id),
            }
        }
    }

    /// Answers `call` as [`Service::call`] does, with the change a successful
    /// `storage/set` or `storage/delete` made, as a log line records it (`None` for the
    /// other methods, and a delete of a key that was not there).
    pub(crate) fn change(&self, call: &ReverseCall) -> Result<(Value, Option<Value>), RpcError> {
        match call.method.as_str() {
            "storage/set" => self.set(&call.params, true),
            "storage/delete" => self.delete(&call.params, true),
            _ => self.call(call).map(|answer| (answer, None)),
        }
    }

    fn scope(&self, p: &Value) -> Result<String, RpcError> {
        let scope = match p.get("scope") {
            None | Some(Value::Null) => "app",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(invalid("`scope` must be a string")),
        };
        if !SCOPES.contains(&scope) {
            return Err(invalid(&format!(
                "unknown scope {scope:?}: use \"user\", \"app\" or \"tool\""
            )));
        }
        if !self.scopes.iter().any(|s| s == scope) {
            return Err(RpcError::with_code(
                NOT_GRANTED,
                "STORAGE_NOT_GRANTED",
                format!("scope {scope:?} is not granted to this plugin"),
            ));
        }
        Ok(scope.to_owned())
    }

    fn get(&self, p: &Value) -> Result<Value, RpcError> {
        let id = (self.scope(p)?, key(p)?);
        let mut store = lock(&self.store);
        purge_if_expired(&mut store, &id);
        Ok(match store.entries.get(&id) {
            Some(e) => json!({ "value": e.value, "exists": true, "etag": e.etag }),
            None => json!({ "value": null, "exists": false, "etag": null }),
        })
    }

    fn set(&self, p: &Value, record: bool) -> Result<(Value, Option<Value>), RpcError> {
        let id = (self.scope(p)?, key(p)?);
        let value = p
            .get("value")
            .cloned()
            .ok_or_else(|| invalid("`value` is required"))?;
        let text = value.to_string();
        if text.len() > MAX_VALUE_BYTES {
            return Err(RpcError::with_code(
                VALUE_TOO_LARGE,
                "VALUE_TOO_LARGE",
                format!(
                    "value of {} bytes exceeds the {MAX_VALUE_BYTES}-byte limit",
                    text.len()
                ),
            ));
        }
        let ttl = match p.get("ttl_seconds") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|&s| s > 0)
                    .ok_or_else(|| invalid("`ttl_seconds` must be a positive integer"))?,
            ),
        };
        let mut store = lock(&self.store);
        purge_if_expired(&mut store, &id);
        check_if_match(p, store.entries.get(&id))?;
        let heap = value_cost(&value);
        let size = text.len().max(heap);
        if check_quota(&store, &id, size).is_err() {
            // Expired entries still count until touched: gone before a refusal.
            purge_expired(&mut store);
            check_quota(&store, &id, size)?;
        }
        store.generation += 1;
        let etag = format!("W/\"{}-{:016x}\"", store.generation, fnv1a(text.as_bytes()));
        let wall = now_ms();
        // A lifetime past what the clock can count never ends (saturates).
        let expires = ttl.map(|s| wall.saturating_add(s.saturating_mul(1000)));
        let change = record.then(|| {
            json!({
                "op": "set", "scope": id.0, "key": id.1, "value": value, "etag": etag,
                "updated_at_ms": wall, "expires_at_ms": expires, "generation": store.generation,
            })
        });
        let entry = Entry {
            value,
            etag: etag.clone(),
            size_bytes: text.len(),
            heap,
            updated_at_ms: wall,
            expires_at_ms: expires,
        };
        store.insert(id, entry);
        let answer =
            json!({ "etag": etag, "size_bytes": text.len(), "generation": store.generation });
        Ok((answer, change))
    }

    fn delete(&self, p: &Value, record: bool) -> Result<(Value, Option<Value>), RpcError> {
        let id = (self.scope(p)?, key(p)?);
        let mut store = lock(&self.store);
        purge_if_expired(&mut store, &id);
        check_if_match(p, store.entries.get(&id))?;
        let change = (record && store.entries.contains_key(&id)).then(|| {
            json!({ "op": "delete", "scope": id.0, "key": id.1, "generation": store.generation })
        });
        store.remove(&id);
        // Idempotent, as documented: deleting a missing key still answers `deleted: true`.
        Ok((json!({ "deleted": true }), change))
    }

    fn list(&self, p: &Value) -> Result<Value, RpcError> {
        let scope = self.scope(p)?;
        let prefix = opt_str(p, "prefix")?.unwrap_or_default();
        let limit = match p.get("limit") {
            None | Some(Value::Null) => 100,
            Some(v) => v
                .as_u64()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| invalid("`limit` must be an integer from 1 to 1000"))?,
        };
        let after = match opt_str(p, "cursor")? {
            Some(c) => Some(
                decode_cursor(&c).ok_or_else(|| invalid("`cursor` is not one this host issued"))?,
            ),
            None => None,
        };
        if opt_str(p, "kind")?.as_deref() == Some("file") {
            return Ok(json!({ "items": [], "next_cursor": null }));
        }
        let now = now_ms();
        let store = lock(&self.store);
        let mut items = Vec::new();
        let mut next_cursor = Value::Null;
        let matching = store
            .entries
            .iter()
            .filter(|((s, k), e)| *s == scope && k.starts_with(&prefix) && e.live(now))
            .filter(|((_, k), _)| after.as_ref().is_none_or(|a| k > a));
        for ((_, key), e) in matching {
            if items.len() as u64 == limit {
                // There is more: the cursor is the last key returned.
                next_cursor = Value::String(encode_cursor(items_last_key(&items)));
                break;
            }
            items.push(json!({
                "key": key,
                "etag": e.etag,
                "size_bytes": e.size_bytes,
                "metadata": {},
                "tags": [],
                "updated_at": rfc3339(e.updated_at_ms),
            }));
        }
        Ok(json!({ "items": items, "next_cursor": next_cursor }))
    }
}

impl Service for MemoryStorage {
    /// In memory: answered at once, on the host's reader thread.
    fn is_quick(&self) -> bool {
        true
    }

    fn handles(&self, method: &str) -> bool {
        method.starts_with("storage/")
    }

    fn call(&self, call: &ReverseCall) -> Result<Value, RpcError> {
        let p = &call.params;
        match call.method.as_str() {
            "storage/get" => self.get(p),
            "storage/set" => self.set(p, false).map(|(answer, _)| answer),
            "storage/delete" => self.delete(p, false).map(|(answer, _)| answer),
            "storage/list" => self.list(p),
            other => Err(RpcError::with_code(
                crate::error::codes::METHOD_NOT_FOUND,
                "METHOD_NOT_FOUND",
                format!("`{other}` is not a storage method"),
            )),
        }
    }
}

fn items_last_key(items: &[Value]) -> &str {
    items
        .last()
        .and_then(|i| i.get("key"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn key(p: &Value) -> Result<String, RpcError> {
    match p.get("key") {
        Some(Value::String(k)) if !k.is_empty() && k.len() <= MAX_KEY_BYTES => Ok(k.clone()),
        Some(Value::String(_)) => Err(invalid(&format!(
            "`key` must be 1 to {MAX_KEY_BYTES} bytes"
        ))),
        _ => Err(invalid("`key` (a string) is required")),
    }
}

fn opt_str(p: &Value, field: &str) -> Result<Option<String>, RpcError> {
    match p.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(&format!("`{field}` must be a string"))),
    }
}

fn purge_if_expired(store: &mut Store, id: &Id) {
    if store.entries.get(id).is_some_and(|e| !e.live(now_ms())) {
        store.remove(id);
    }
}

/// Removes every expired entry.
fn purge_expired(store: &mut Store) {
    let now = now_ms();
    let dead: Vec<Id> = store
        .entries
        .iter()
        .filter(|(_, e)| !e.live(now))
        .map(|(id, _)| id.clone())
        .collect();
    for id in &dead {
        store.remove(id);
    }
}

/// Refuses a value of `size` bytes under `id` when the store would then hold more than
/// [`MAX_ENTRIES`] keys or [`MAX_STORE_BYTES`] bytes (-32024).
fn check_quota(store: &Store, id: &Id, size: usize) -> Result<(), RpcError> {
    let quota = |why: String| Err(RpcError::with_code(QUOTA_EXCEEDED, "QUOTA_EXCEEDED", why));
    let old = store.entries.get(id);
    if old.is_none() && store.entries.len() >= MAX_ENTRIES {
        return quota(format!("the store holds at most {MAX_ENTRIES} keys"));
    }
    let after = store.bytes - old.map_or(0, |e| cost(id, e)) + size + json_string_len(&id.1);
    if after > MAX_STORE_BYTES {
        return quota(format!(
            "the store holds at most {MAX_STORE_BYTES} bytes of keys and values; \
             this value would make it {after}"
        ));
    }
    Ok(())
}

/// An entry as [`MemoryStorage::snapshot`] writes it (a `set` log line is one too), checked;
/// `None` for the entry when its expiry is past.
fn stored_entry(e: Value, wall: u64) -> Result<(Id, Option<Entry>), String> {
    let Value::Object(mut obj) = e else {
        return Err("not a JSON object".into());
    };
    let id = (stored_scope(&obj)?, stored_key(&obj)?);
    let value = obj.remove("value").ok_or("no `value`")?;
    let size_bytes = json_len(&value).unwrap_or(usize::MAX);
    if size_bytes > MAX_VALUE_BYTES {
        return Err(format!(
            "`value` of {size_bytes} bytes is over the {MAX_VALUE_BYTES}-byte limit"
        ));
    }
    let etag = match obj.remove("etag") {
        Some(Value::String(t)) if !t.is_empty() && t.len() <= MAX_ETAG_BYTES => t,
        Some(Value::String(_)) => {
            return Err(format!("`etag` must be 1 to {MAX_ETAG_BYTES} bytes"));
        }
        _ => return Err("no `etag` (a string)".into()),
    };
    let updated_at_ms = stored_ms(&obj, "updated_at_ms")?.unwrap_or(wall);
    let expires_at_ms = match stored_ms(&obj, "expires_at_ms")? {
        Some(at) if at <= wall => return Ok((id, None)),
        other => other,
    };
    let entry = Entry {
        heap: value_cost(&value),
        value,
        etag,
        size_bytes,
        updated_at_ms,
        expires_at_ms,
    };
    Ok((id, Some(entry)))
}

fn stored_scope(obj: &serde_json::Map<String, Value>) -> Result<String, String> {
    match obj.get("scope") {
        Some(Value::String(s)) if SCOPES.contains(&s.as_str()) => Ok(s.clone()),
        Some(_) => Err("`scope` must be \"user\", \"app\" or \"tool\"".into()),
        None => Err("no `scope`".into()),
    }
}

fn stored_key(obj: &serde_json::Map<String, Value>) -> Result<String, String> {
    match obj.get("key") {
        Some(Value::String(k)) if !k.is_empty() && k.len() <= MAX_KEY_BYTES => Ok(k.clone()),
        Some(Value::String(_)) => Err(format!("`key` must be 1 to {MAX_KEY_BYTES} bytes")),
        _ => Err("no `key` (a string)".into()),
    }
}

/// An optional epoch-milliseconds field (absent or `null`: `None`).
fn stored_ms(obj: &serde_json::Map<String, Value>, field: &str) -> Result<Option<u64>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{field}` must be null or a non-negative integer")),
    }
}

/// `if_match` must equal the current etag; a missing key never matches.
fn check_if_match(p: &Value, current: Option<&Entry>) -> Result<(), RpcError> {
    let Some(want) = opt_str(p, "if_match")? else {
        return Ok(());
    };
    match current {
        Some(e) if e.etag == want => Ok(()),
        _ => {
            let mut err = RpcError::with_code(
                PRECONDITION_FAILED,
                "PRECONDITION_FAILED",
                format!("if_match {want} does not match the current etag"),
            );
            err.data = Some(json!({
                "errorCode": "PRECONDITION_FAILED",
                "current_etag": current.map(|e| e.etag.clone()),
            }));
            Err(err)
        }
    }
}

/// Cursors are the last key returned, hex-encoded so callers treat them as opaque.
fn encode_cursor(key: &str) -> String {
    key.bytes()
        .fold(String::with_capacity(key.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn decode_cursor(cursor: &str) -> Option<String> {
    if !cursor.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..cursor.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(cursor.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

fn now_ms() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` from epoch milliseconds (civil-from-days, no calendar crate).
fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// The storage family's `INVALID_REQUEST` (-32028).
fn invalid(why: &str) -> RpcError {
    RpcError::with_code(-32028, "INVALID_REQUEST", why)
}

/// FNV-1a, 64 bits: a stable digest for etags (std's hasher is randomly keyed).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_call as call;
    use super::*;

    #[test]
    fn get_set_etag_if_match_delete() {
        let s = MemoryStorage::new();
        let miss = call(&s, "storage/get", json!({"key": "k", "scope": "user"})).unwrap();
        assert_eq!(miss, json!({"value": null, "exists": false, "etag": null}));
        let set = call(
            &s,
            "storage/set",
            json!({"key": "k", "scope": "user", "value": {"n": 1}}),
        )
        .unwrap();
        let etag = set["etag"].as_str().unwrap().to_owned();
        assert!(etag.starts_with("W/\"1-") && etag.ends_with('"'), "{etag}");
        let got = call(&s, "storage/get", json!({"key": "k", "scope": "user"})).unwrap();
        assert_eq!(got["exists"], true);
        assert_eq!(got["value"], json!({"n": 1}));
        let falsy = call(
            &s,
            "storage/set",
            json!({"key": "z", "scope": "user", "value": 0}),
        )
        .unwrap();
        assert!(falsy["etag"].is_string());
        assert_eq!(
            call(&s, "storage/get", json!({"key": "z", "scope": "user"})).unwrap()["exists"],
            true
        );

        let stale = call(
            &s,
            "storage/set",
            json!({"key": "k", "scope": "user", "value": 2, "if_match": "W/\"0-x\""}),
        );
        let e = stale.unwrap_err();
        assert_eq!(e.code, -32023);
        assert_eq!(e.data.unwrap()["current_etag"], etag);
        call(
            &s,
            "storage/set",
            json!({"key": "k", "scope": "user", "value": 2, "if_match": etag}),
        )
        .unwrap();
        assert_eq!(
            call(&s, "storage/delete", json!({"key": "k", "scope": "user"})).unwrap(),
            json!({"deleted": true})
        );
        assert_eq!(s.value("user", "k"), None);
        // Scopes are separate, and `app` is the default.
        call(&s, "storage/set", json!({"key": "k", "value": "a"})).unwrap();
        assert_eq!(s.value("app", "k"), Some(json!("a")));
        assert_eq!(s.value("tool", "k"), None);
    }

    #[test]
    fn list_pages_with_cursor() {
        let s = MemoryStorage::new();
        for i in 0..5 {
            call(
                &s,
                "storage/set",
                json!({"key": format!("note/{i}"), "scope": "tool", "value": i}),
            )
            .unwrap();
        }
        call(
            &s,
            "storage/set",
            json!({"key": "other", "scope": "tool", "value": 0}),
        )
        .unwrap();
        let mut keys = Vec::new();
        let mut cursor = Value::Null;
        loop {
            let page = call(
                &s,
                "storage/list",
                json!({"scope": "tool", "prefix": "note/", "limit": 2, "cursor": cursor}),
            )
            .unwrap();
            for item in page["items"].as_array().unwrap() {
                assert!(item["updated_at"].as_str().unwrap().ends_with('Z'));
                keys.push(item["key"].as_str().unwrap().to_owned());
            }
            cursor = page["next_cursor"].clone();
            if cursor.is_null() {
                break;
            }
        }
        assert_eq!(keys, ["note/0", "note/1", "note/2", "note/3", "note/4"]);
        assert_eq!(
            call(&s, "storage/list", json!({"scope": "tool", "limit": 0}))
                .unwrap_err()
                .code,
            -32028
        );
    }

    /// A lifetime past what the clock can count never ends (it panicked on the monotonic
    /// clock's addition), and an expired entry does not count against the store's quota.
    #[test]
    fn lifetimes_are_wall_clock_and_saturate() {
        let s = MemoryStorage::new();
        let set = json!({"key": "k", "value": 1, "scope": "user", "ttl_seconds": u64::MAX});
        call(&s, "storage/set", set).expect("a set with the longest lifetime");
        assert_eq!(s.value("user", "k"), Some(json!(1)));
        let expired = json!({
            "generation": 1,
            "entries": [{"scope": "user", "key": "old", "value": 2, "etag": "W/\"1-0\"",
                         "updated_at_ms": 1, "expires_at_ms": 2}],
        });
        s.restore(expired).expect("a snapshot");
        assert_eq!(
            s.value("user", "old"),
            None,
            "expired at 2 ms after the epoch"
        );
        assert_eq!(s.snapshot()["entries"], json!([]));
    }

    /// Values of many tiny objects count as the memory their trees take (about 80 times
    /// their text), so the store's quota bounds its memory: 60 KB of `{"a":0}`s is about
    /// 5 MB of tree, and a dozen reach the 64 MiB quota (their text alone never would).
    #[test]
    fn values_count_as_the_memory_their_trees_take() {
        let s = MemoryStorage::new();
        let tiny = Value::Array(vec![json!({"a": 0}); 7_500]);
        let refused = (0..40).find_map(|i| {
            let set = json!({"key": format!("k{i}"), "value": tiny, "scope": "user"});
            call(&s, "storage/set", set).err().map(|e| (i, e))
        });
        let (at, e) = refused.expect("refused before 40 values");
        assert_eq!(e.code, -32024, "{e}");
        assert!((5..20).contains(&at), "refused at value {at}");
    }

    #[test]
    fn scope_grants_and_limits() {
        let s = MemoryStorage::with_scopes(&["user", "tool"]);
        assert_eq!(
            call(&s, "storage/get", json!({"key": "k"}))
                .unwrap_err()
                .code,
            -32021
        );
        assert_eq!(
            call(&s, "storage/get", json!({"key": "k", "scope": "bogus"}))
                .unwrap_err()
                .code,
            -32028
        );
        let big = "x".repeat(MAX_VALUE_BYTES + 1);
        assert_eq!(
            call(
                &s,
                "storage/set",
                json!({"key": "k", "scope": "user", "value": big})
            )
            .unwrap_err()
            .code,
            -32025
        );
        assert_eq!(
            call(&s, "storage/get", json!({"scope": "user"}))
                .unwrap_err()
                .code,
            -32028
        );
    }

    #[test]
    fn keys_and_values_are_bounded_in_all() {
        let s = MemoryStorage::new();
        let value = json!("x".repeat(MAX_VALUE_BYTES - 2));
        let mut stored = 0;
        let refused = loop {
            let key = format!("{stored:04}");
            match call(
                &s,
                "storage/set",
                json!({"key": key, "scope": "user", "value": value}),
            ) {
                Ok(_) => stored += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(refused.code, -32024, "{refused:?}");
        assert!(
            refused.message.contains("bytes of keys and values"),
            "{refused:?}"
        );
        // Each entry is a 64 KiB value and a 6-byte key: 1023 of them fit in 64 MiB.
        assert_eq!(stored, 1023);
        // Replacing a value is not growing the store; a smaller one makes room.
        call(
            &s,
            "storage/set",
            json!({"key": "0000", "scope": "user", "value": value}),
        )
        .unwrap();
        call(
            &s,
            "storage/delete",
            json!({"key": "0001", "scope": "user"}),
        )
        .unwrap();
        call(
            &s,
            "storage/set",
            json!({"key": "new", "scope": "user", "value": value}),
        )
        .unwrap();
    }

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
    }
}
