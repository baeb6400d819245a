//! Locking that survives a poisoned mutex.
//!
//! Every structure the crate guards stays valid between statements (each critical section
//! is a few field updates), so a panic on another thread must not take the plugin or the
//! host down with it: the guard of a poisoned mutex is used as is.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, recovering the guard if a panicking thread poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
