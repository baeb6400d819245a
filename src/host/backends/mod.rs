//! Reverse-call backends for development and tests, so a plugin can be exercised end to
//! end on one machine. In memory: [`MemoryStorage`] for `storage/*` and
//! [`ScriptedSampling`] for `sampling/createMessage`. Local and real: [`DirStorage`] keeps
//! `storage/*` in a directory (state survives between runs), [`CommandSampling`] answers
//! sampling with a local command (any model CLI). All are [`Service`](super::Service)s;
//! add them to [`Handlers`](super::Handlers) with `.service(Arc::new(...))`, or take the
//! in-memory pair with [`Handlers::dev_backends`](super::Handlers::dev_backends).

mod command;
mod dir_files;
mod dir_storage;
mod sampling;
mod storage;

pub use command::{CommandSampling, DEFAULT_COMMAND_TIMEOUT, DEFAULT_MAX_OUTPUT};
pub use dir_storage::{DirStorage, MAX_FILE_BYTES as MAX_STORAGE_FILE_BYTES, STORAGE_FILE};
pub use sampling::ScriptedSampling;
pub use storage::{MAX_ENTRIES, MAX_STORE_BYTES, MAX_VALUE_BYTES, MemoryStorage};

/// One call to a backend, as a test makes it.
#[cfg(test)]
fn test_call(
    service: &dyn crate::host::service::Service,
    method: &str,
    params: serde_json::Value,
) -> Result<serde_json::Value, crate::error::RpcError> {
    service.call(&crate::host::service::ReverseCall {
        method: method.into(),
        params,
        invoke_id: Some("test-invoke".into()),
        client_timeout: None,
        id: crate::id::Id::number(1),
    })
}
