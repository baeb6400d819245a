//! `storage/*`: the APS key/value store. `scope` is always explicit: the platform's silent
//! default (`app`) fails for standalone tools.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::InvokeHandle;
use crate::error::Result;

/// Which bucket a key or file lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Per user, shared by this user's tools.
    User,
    /// The hosting App's bucket (only when an App invoked the tool).
    App,
    /// Per tool.
    Tool,
}

/// The answer to `storage/get`. Branch on `exists`, never on whether `value` is truthy.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Stored {
    /// Whether the key exists.
    #[serde(default)]
    pub exists: bool,
    /// The value (`null` on a miss).
    #[serde(default)]
    pub value: Value,
    /// `W/"<gen>-<digest>"`, for `if_match`.
    #[serde(default)]
    pub etag: Option<String>,
}

/// The answer to `storage/set`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Written {
    /// The new etag.
    #[serde(default)]
    pub etag: Option<String>,
    /// Stored size.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// Generation, when the host reports one.
    #[serde(default)]
    pub generation: Option<u64>,
}

/// Options of `storage/set`.
#[derive(Clone, Debug, Default)]
pub struct SetOptions {
    /// Write only if the current etag matches (else -32023 PRECONDITION_FAILED).
    pub if_match: Option<String>,
    /// Expire after this many seconds.
    pub ttl_seconds: Option<u64>,
}

/// One entry of a `storage/list` page.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ListItem {
    /// The key.
    pub key: String,
    /// Its etag.
    #[serde(default)]
    pub etag: Option<String>,
    /// Its size.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// Last update time as sent.
    #[serde(default)]
    pub updated_at: Option<Value>,
    /// Metadata, as sent.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Tags, as sent.
    #[serde(default)]
    pub tags: Option<Value>,
}

/// One page of `storage/list`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ListPage {
    /// The entries.
    #[serde(default)]
    pub items: Vec<ListItem>,
    /// Pass back as `cursor` for the next page; `None` on the last one.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// The `{deleted: bool}` answer of `storage/delete` and `files/delete`.
#[derive(Deserialize)]
pub(crate) struct Deleted {
    #[serde(default)]
    pub deleted: bool,
}

/// The storage client of one invoke; needs `aps.kv` in `host_capabilities`. Each call
/// blocks for the host's answer (default 30 s, capped by the deadline) and counts against
/// the 200 storage calls an invoke may make.
pub struct Storage<'a>(pub(crate) &'a InvokeHandle);

impl InvokeHandle {
    /// The key/value storage client (`storage/*`).
    pub fn storage(&self) -> Storage<'_> {
        Storage(self)
    }
}

impl Storage<'_> {
    /// Reads a key.
    pub fn get(&self, key: &str, scope: Scope) -> Result<Stored> {
        self.0
            .call("storage/get", &json!({ "key": key, "scope": scope }))
    }

    /// Writes a key.
    pub fn set<V: Serialize + ?Sized>(
        &self,
        key: &str,
        value: &V,
        scope: Scope,
    ) -> Result<Written> {
        self.set_with(key, value, scope, &SetOptions::default())
    }

    /// Writes a key with `if_match` / `ttl_seconds`.
    pub fn set_with<V: Serialize + ?Sized>(
        &self,
        key: &str,
        value: &V,
        scope: Scope,
        opts: &SetOptions,
    ) -> Result<Written> {
        let mut p = Map::new();
        p.insert("key".into(), json!(key));
        p.insert("value".into(), serde_json::to_value(value)?);
        p.insert("scope".into(), json!(scope));
        if let Some(tag) = &opts.if_match {
            p.insert("if_match".into(), json!(tag));
        }
        if let Some(ttl) = opts.ttl_seconds {
            p.insert("ttl_seconds".into(), json!(ttl));
        }
        self.0.call("storage/set", &p)
    }

    /// Deletes a key (optionally only if its etag matches). Returns whether it was deleted.
    pub fn delete(&self, key: &str, scope: Scope, if_match: Option<&str>) -> Result<bool> {
        let mut p = json!({ "key": key, "scope": scope });
        if let Some(tag) = if_match {
            p["if_match"] = json!(tag);
        }
        Ok(self.0.call::<_, Deleted>("storage/delete", &p)?.deleted)
    }

    /// Lists one page of keys; pass the previous page's `next_cursor` to continue.
    pub fn list(
        &self,
        scope: Scope,
        prefix: Option<&str>,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<ListPage> {
        self.list_kind(scope, prefix, cursor, limit, None)
    }

    /// As [`Storage::list`], restricted to `kind` (`"kv"` or `"file"`).
    pub fn list_kind(
        &self,
        scope: Scope,
        prefix: Option<&str>,
        cursor: Option<&str>,
        limit: Option<u32>,
        kind: Option<&str>,
    ) -> Result<ListPage> {
        let mut p = json!({ "scope": scope });
        if let Some(x) = kind {
            p["kind"] = json!(x);
        }
        if let Some(x) = prefix {
            p["prefix"] = json!(x);
        }
        if let Some(x) = cursor {
            p["cursor"] = json!(x);
        }
        if let Some(x) = limit {
            p["limit"] = json!(x);
        }
        self.0.call("storage/list", &p)
    }
}
