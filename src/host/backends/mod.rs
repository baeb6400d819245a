//! In-memory reverse-call backends for development and tests, so a plugin can be exercised
//! end to end on one machine: [`MemoryStorage`] for `storage/*` and [`ScriptedSampling`]
//! for `sampling/createMessage`. Both are [`Service`](super::Service)s; add them to
//! [`Handlers`](super::Handlers) with `.service(Arc::new(...))`, or take both with
//! [`Handlers::dev_backends`](super::Handlers::dev_backends).

mod sampling;
mod storage;

pub use sampling::ScriptedSampling;
pub use storage::{MAX_ENTRIES, MAX_VALUE_BYTES, MemoryStorage};

use crate::error::RpcError;

/// The storage family's `INVALID_REQUEST` (-32028).
pub(crate) fn invalid(why: &str) -> RpcError {
    RpcError::with_code(-32028, "INVALID_REQUEST", why)
}

/// FNV-1a, 64 bits: a stable digest for etags (std's hasher is randomly keyed).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
