//! The host side's Windows calls: filled in by the host's Windows port.
