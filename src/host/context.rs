//! The per-invoke `context` block: a fresh invoke id, credentials, deadline and tokens.
//! Secrets are held as [`Secret`]s: they are exposed only while serializing the request,
//! so they reach the wire but never a log line or a `Debug` output.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::Secret;

/// Per-call options for `invoke`: timeout, credentials, tokens.
#[derive(Debug, Default)]
pub struct InvokeOptions {
    /// Overrides the manifest's per-tool `timeout` and the host default.
    pub timeout: Option<Duration>,
    /// `context.credentials`, name to value.
    pub credentials: BTreeMap<String, Secret>,
    /// Tokens put into `context` by key (`sampling_token`, `storage_token`, ...).
    pub tokens: BTreeMap<String, Secret>,
    /// Use this invoke id instead of minting one.
    pub invoke_id: Option<String>,
}

impl InvokeOptions {
    /// Empty options: all defaults.
    pub fn new() -> Self {
        InvokeOptions::default()
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Adds a credential.
    pub fn credential(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.credentials
            .insert(name.into(), Secret::new(value.into()));
        self
    }

    /// Adds a token (`key` is the context field, e.g. `sampling_token`).
    pub fn token(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tokens.insert(key.into(), Secret::new(value.into()));
        self
    }
}

/// `params` of an `invoke` request.
#[derive(Serialize)]
pub(crate) struct InvokeParams<'a, A: ?Sized + Serialize> {
    pub(crate) tool: &'a str,
    pub(crate) arguments: &'a A,
    pub(crate) context: Context<'a>,
}

/// `params.context` of an `invoke` request.
#[derive(Serialize)]
pub(crate) struct Context<'a> {
    pub(crate) invoke_id: &'a str,
    pub(crate) deadline_ms: u64,
    pub(crate) credentials: SecretMap<'a>,
    #[serde(flatten)]
    pub(crate) tokens: SecretMap<'a>,
}

/// Names to secrets, serialized with the values exposed (only ever into a request frame).
pub(crate) struct SecretMap<'a>(pub(crate) BTreeMap<&'a str, &'a Secret>);

impl<'a> SecretMap<'a> {
    pub(crate) fn of(map: &'a BTreeMap<String, Secret>) -> Self {
        SecretMap(map.iter().map(|(k, v)| (k.as_str(), v)).collect())
    }
}

impl Serialize for SecretMap<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v.expose())?;
        }
        m.end()
    }
}

/// Milliseconds since the Unix epoch, `timeout` from now (`deadline_ms`).
pub(crate) fn deadline_ms(timeout: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from((now + timeout).as_millis()).unwrap_or(u64::MAX)
}

/// A fresh invoke id: 32 lowercase hex digits laid out as a version-4 UUID without dashes.
///
/// Built with std only: the clock, a process-wide counter and the pid, mixed by two
/// `RandomState` hashers (randomly keyed per process), so ids are unique within a process
/// and unpredictable across processes.
pub fn new_invoke_id() -> String {
    let [hi, lo] = unique_words();
    let hi = (hi & !0xf000) | 0x4000; // version 4
    let lo = (lo & !(0b11 << 62)) | (0b10 << 62); // RFC 4122 variant
    format!("{hi:016x}{lo:016x}")
}

/// 128 bits unique within the process and unpredictable across processes: the clock, a
/// process-wide counter and the pid, mixed by a `RandomState` hasher (randomly keyed per
/// process). For invoke ids, and the storage directory's temporary names and log epochs.
pub(crate) fn unique_words() -> [u64; 2] {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let keys = RandomState::new();
    let pid = std::process::id(); // a system call: asked once per call
    let mix = |salt: u64| keys.hash_one((salt, nanos, n, pid));
    [mix(0x9e37_79b9), mix(0x85eb_ca6b)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invoke_ids_are_uuid_hex_and_distinct() {
        let a = new_invoke_id();
        let b = new_invoke_id();
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(&a[12..13], "4");
        assert_ne!(a, b);
    }

    #[test]
    fn secrets_do_not_leak_through_debug() {
        let o = InvokeOptions::new()
            .credential("API_KEY", "sk-123")
            .token("storage_token", "eyJ");
        let s = format!("{o:?}");
        assert!(
            !s.contains("sk-123") && !s.contains("eyJ") && s.contains("API_KEY"),
            "{s}"
        );
        let ctx = Context {
            invoke_id: "x",
            deadline_ms: 1,
            credentials: SecretMap::of(&o.credentials),
            tokens: SecretMap::of(&o.tokens),
        };
        let wire = serde_json::to_string(&ctx).unwrap();
        assert_eq!(
            wire,
            r#"{"invoke_id":"x","deadline_ms":1,"credentials":{"API_KEY":"sk-123"},"storage_token":"eyJ"}"#
        );
    }
}
