//! `files/*`: the APS object store (presigned uploads and downloads).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::InvokeHandle;
use super::storage::{Deleted, Scope};
use crate::error::Result;

/// The answer to `files/upload_begin`. Sources disagree on the shape, so both are
/// accepted: `{upload_id, put_url, headers}` (working examples, SDKs) and
/// `{presigned_url, fields}` (the storage page). Use [`UploadTicket::url`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct UploadTicket {
    /// Upload id, when sent.
    #[serde(default)]
    pub upload_id: Option<String>,
    /// URL to `PUT` the bytes to (first shape).
    #[serde(default)]
    pub put_url: Option<String>,
    /// Headers to send with the `PUT` (first shape).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Presigned URL (second shape).
    #[serde(default)]
    pub presigned_url: Option<String>,
    /// Form fields (second shape).
    #[serde(default)]
    pub fields: BTreeMap<String, Value>,
    /// Expiry as sent.
    #[serde(default)]
    pub expires_at: Option<Value>,
}

impl UploadTicket {
    /// The upload URL, whichever shape the host used.
    pub fn url(&self) -> Option<&str> {
        self.put_url.as_deref().or(self.presigned_url.as_deref())
    }
}

/// A stored object as `upload_complete` reports it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct FileInfo {
    /// Object path.
    #[serde(default)]
    pub path: String,
    /// Etag.
    #[serde(default)]
    pub etag: Option<String>,
    /// Size.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// MIME type.
    #[serde(default)]
    pub content_type: Option<String>,
    /// Last update.
    #[serde(default)]
    pub updated_at: Option<Value>,
}

/// The answer to `files/download_url`: hosts send `get_url`, `url` or both (the SDKs copy
/// one into the other). Use [`DownloadUrl::link`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct DownloadUrl {
    /// `url`, when sent.
    #[serde(default)]
    pub url: Option<String>,
    /// `get_url`, when sent.
    #[serde(default)]
    pub get_url: Option<String>,
    /// Expiry as sent.
    #[serde(default)]
    pub expires_at: Option<Value>,
}

impl DownloadUrl {
    /// The download URL, whichever key carried it.
    pub fn link(&self) -> Option<&str> {
        self.get_url.as_deref().or(self.url.as_deref())
    }
}

/// One page of `files/list`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct FileList {
    /// The objects.
    #[serde(default)]
    pub items: Vec<FileInfo>,
    /// Cursor of the next page.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// The files client of one invoke; needs `aps.files` in `host_capabilities`. Each call
/// blocks for the host's answer (default 60 s, capped by the deadline).
pub struct Files<'a>(pub(crate) &'a InvokeHandle);

impl InvokeHandle {
    /// The object store client (`files/*`).
    pub fn files(&self) -> Files<'_> {
        Files(self)
    }
}

impl Files<'_> {
    /// Starts an upload; then `PUT` the bytes to [`UploadTicket::url`] and call
    /// [`Files::upload_complete`] (else the object is garbage-collected).
    pub fn upload_begin(
        &self,
        path: &str,
        scope: Scope,
        size_bytes: Option<u64>,
        content_type: Option<&str>,
    ) -> Result<UploadTicket> {
        self.upload_begin_with(path, scope, size_bytes, content_type, None)
    }

    /// As [`Files::upload_begin`], with a `metadata` object.
    pub fn upload_begin_with(
        &self,
        path: &str,
        scope: Scope,
        size_bytes: Option<u64>,
        content_type: Option<&str>,
        metadata: Option<&Value>,
    ) -> Result<UploadTicket> {
        let mut p = Map::new();
        if let Some(m) = metadata {
            p.insert("metadata".into(), m.clone());
        }
        p.insert("path".into(), json!(path));
        p.insert("scope".into(), json!(scope));
        if let Some(n) = size_bytes {
            p.insert("size_bytes".into(), json!(n));
        }
        if let Some(t) = content_type {
            p.insert("content_type".into(), json!(t));
        }
        self.0.call("files/upload_begin", &p)
    }

    /// Finishes an upload.
    pub fn upload_complete(
        &self,
        path: &str,
        scope: Scope,
        etag: Option<&str>,
    ) -> Result<FileInfo> {
        let mut p = json!({ "path": path, "scope": scope });
        if let Some(e) = etag {
            p["etag"] = json!(e);
        }
        self.0.call("files/upload_complete", &p)
    }

    /// A time-limited download URL (both `expires_in` and `ttl_seconds` are sent, as the
    /// SDKs do).
    pub fn download_url(
        &self,
        path: &str,
        scope: Scope,
        expires_in: Option<u64>,
    ) -> Result<DownloadUrl> {
        let mut p = json!({ "path": path, "scope": scope });
        if let Some(s) = expires_in {
            p["expires_in"] = json!(s);
            p["ttl_seconds"] = json!(s);
        }
        self.0.call("files/download_url", &p)
    }

    /// Lists one page of objects.
    pub fn list(
        &self,
        scope: Scope,
        prefix: Option<&str>,
        cursor: Option<&str>,
    ) -> Result<FileList> {
        let mut p = json!({ "scope": scope });
        if let Some(x) = prefix {
            p["prefix"] = json!(x);
        }
        if let Some(x) = cursor {
            p["cursor"] = json!(x);
        }
        self.0.call("files/list", &p)
    }

    /// Deletes an object. Returns whether it was deleted.
    pub fn delete(&self, path: &str, scope: Scope) -> Result<bool> {
        Ok(self
            .0
            .call::<_, Deleted>("files/delete", &json!({ "path": path, "scope": scope }))?
            .deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn download_url_accepts_either_key_or_both() {
        for (json, want) in [
            (r#"{"get_url":"g"}"#, "g"),
            (r#"{"url":"u"}"#, "u"),
            (r#"{"get_url":"g","url":"g","expires_at":1}"#, "g"),
        ] {
            let d: DownloadUrl = serde_json::from_str(json).unwrap();
            assert_eq!(d.link(), Some(want), "{json}");
        }
    }

    #[test]
    fn upload_ticket_accepts_both_shapes() {
        let a: UploadTicket =
            serde_json::from_str(r#"{"upload_id":"1","put_url":"p","headers":{"x":"y"}}"#).unwrap();
        let b: UploadTicket =
            serde_json::from_str(r#"{"presigned_url":"q","fields":{"k":1}}"#).unwrap();
        assert_eq!((a.url(), b.url()), (Some("p"), Some("q")));
    }
}
