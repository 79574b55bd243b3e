//! Version 1 of a plugin for hot-swap tests: logs like `recorder`, each
//! line prefixed with `v1`. Its twin differs only in that prefix, so the
//! two components have different content hashes.

const VERSION: &str = "v1";

include!("../../swap-v1/src/versioned.rs");
