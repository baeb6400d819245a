//! Host side (work in progress).
