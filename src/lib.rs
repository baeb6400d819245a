//! executa
#![deny(missing_docs)]
pub mod error;
pub mod host;
pub mod id;
pub mod manifest;
pub mod wire;
