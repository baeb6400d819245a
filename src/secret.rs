//! Secret strings (credentials, tokens): redacted in `Debug`, zeroed when dropped.

use std::fmt;

/// A secret value such as a credential or a per-invoke token.
///
/// `Debug` prints `Secret(<redacted>)`; there is deliberately no `Display`. The bytes are
/// overwritten with zeros when the value is dropped, which happens when its invoke ends.
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// The secret text. Do not log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        wipe(std::mem::take(&mut self.0));
    }
}

/// Overwrites a string's bytes before freeing it.
pub(crate) fn wipe(s: String) {
    let mut bytes = s.into_bytes();
    bytes.fill(0);
    // Keep the writes from being optimised away as dead stores.
    std::hint::black_box(&bytes);
}

/// Overwrites bytes with zeros. The writes are kept even where the memory is freed right
/// after, which would otherwise make them dead stores the compiler may drop.
pub(crate) fn zero(bytes: &mut [u8]) {
    bytes.fill(0);
    std::hint::black_box(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_redacted() {
        let s = Secret::new("sk-live-123".into());
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(s.expose(), "sk-live-123");
    }
}
