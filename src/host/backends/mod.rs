//! In-memory reverse-call backends for development and tests, so a plugin can be exercised
//! end to end on one machine: [`MemoryStorage`] for `storage/*` and [`ScriptedSampling`]
//! for `sampling/createMessage`. Both are [`Service`](super::Service)s; add them to
//! [`Handlers`](super::Handlers) with `.service(Arc::new(...))`, or take both with
//! [`Handlers::dev_backends`](super::Handlers::dev_backends).

mod sampling;
mod storage;

pub use sampling::ScriptedSampling;
pub use storage::{MAX_ENTRIES, MAX_VALUE_BYTES, MemoryStorage};
