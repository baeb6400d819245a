//! An in-memory `storage/*` backend (APS key/value) in the documented shapes (protocol
//! §8.3): scopes, weak etags `W/"<gen>-<digest>"`, `exists`, `if_match` preconditions,
//! TTLs and cursor paging.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::error::RpcError;
use crate::host::service::{ReverseCall, Service};
use crate::lock::lock;

/// The platform's KV value limit (about 64 KB).
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Entries one store holds before refusing new keys (memory stays bounded).
pub const MAX_ENTRIES: usize = 10_000;
/// Longest key accepted.
const MAX_KEY_BYTES: usize = 1024;

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

#[derive(Debug, Default)]
struct Store {
    entries: BTreeMap<(String, String), Entry>,
    generation: u64,
}

#[derive(Debug)]
struct Entry {
    value: Value,
    etag: String,
    size_bytes: usize,
    updated_at_ms: u64,
    expires: Option<Instant>,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.expires.is_none_or(|t| t > now)
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

    /// The live value under `key` in `scope`, for inspection by tests and tools.
    pub fn value(&self, scope: &str, key: &str) -> Option<Value> {
        let store = lock(&self.store);
        let e = store.entries.get(&(scope.to_owned(), key.to_owned()))?;
        e.live(Instant::now()).then(|| e.value.clone())
    }

    /// Number of live entries across all scopes.
    pub fn len(&self) -> usize {
        let now = Instant::now();
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
        let now = Instant::now();
        let wall = now_ms();
        let store = lock(&self.store);
        let entries: Vec<Value> = store
            .entries
            .iter()
            .filter(|(_, e)| e.live(now))
            .map(|((scope, key), e)| {
                let expires = e.expires.map(|t| {
                    let left = u64::try_from(t.duration_since(now).as_millis()).unwrap_or(0);
                    wall.saturating_add(left)
                });
                json!({
                    "scope": scope, "key": key, "value": e.value, "etag": e.etag,
                    "updated_at_ms": e.updated_at_ms, "expires_at_ms": expires,
                })
            })
            .collect();
        json!({ "generation": store.generation, "entries": entries })
    }

    /// Replaces the contents with a [`MemoryStorage::snapshot`]; entries already expired,
    /// malformed or past [`MAX_ENTRIES`] are left out.
    pub(crate) fn restore(&self, snapshot: &Value) {
        let now = Instant::now();
        let wall = now_ms();
        let mut store = lock(&self.store);
        store.entries.clear();
        store.generation = snapshot["generation"].as_u64().unwrap_or(0);
        for e in snapshot["entries"].as_array().into_iter().flatten() {
            let (Some(scope), Some(key), Some(etag)) =
                (e["scope"].as_str(), e["key"].as_str(), e["etag"].as_str())
            else {
                continue;
            };
            let expires = match e["expires_at_ms"].as_u64() {
                Some(at) if at <= wall => continue,
                Some(at) => Some(now + Duration::from_millis(at - wall)),
                None => None,
            };
            if store.entries.len() >= MAX_ENTRIES {
                break;
            }
            let value = e["value"].clone();
            let entry = Entry {
                size_bytes: value.to_string().len(),
                value,
                etag: etag.to_owned(),
                updated_at_ms: e["updated_at_ms"].as_u64().unwrap_or(wall),
                expires,
            };
            store
                .entries
                .insert((scope.to_owned(), key.to_owned()), entry);
        }
    }

    fn scope(&self, p: &Value) -> Result<String, RpcError> {
        let scope = match p.get("scope") {
            None | Some(Value::Null) => "app",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(invalid("`scope` must be a string")),
        };
        if !matches!(scope, "user" | "app" | "tool") {
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

    fn set(&self, p: &Value) -> Result<Value, RpcError> {
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
        if store.entries.len() >= MAX_ENTRIES && !store.entries.contains_key(&id) {
            return Err(RpcError::with_code(
                QUOTA_EXCEEDED,
                "QUOTA_EXCEEDED",
                format!("the in-memory store holds at most {MAX_ENTRIES} keys"),
            ));
        }
        store.generation += 1;
        let etag = format!("W/\"{}-{:016x}\"", store.generation, fnv1a(text.as_bytes()));
        let entry = Entry {
            value,
            etag: etag.clone(),
            size_bytes: text.len(),
            updated_at_ms: now_ms(),
            expires: ttl.map(|s| Instant::now() + Duration::from_secs(s)),
        };
        store.entries.insert(id, entry);
        Ok(json!({ "etag": etag, "size_bytes": text.len(), "generation": store.generation }))
    }

    fn delete(&self, p: &Value) -> Result<Value, RpcError> {
        let id = (self.scope(p)?, key(p)?);
        let mut store = lock(&self.store);
        purge_if_expired(&mut store, &id);
        check_if_match(p, store.entries.get(&id))?;
        store.entries.remove(&id);
        // Idempotent, as documented: deleting a missing key still answers `deleted: true`.
        Ok(json!({ "deleted": true }))
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
        let now = Instant::now();
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
            "storage/set" => self.set(p),
            "storage/delete" => self.delete(p),
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

fn purge_if_expired(store: &mut Store, id: &(String, String)) {
    if store
        .entries
        .get(id)
        .is_some_and(|e| !e.live(Instant::now()))
    {
        store.entries.remove(id);
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
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
    }
}
