//! The background worker. This version has none yet: sending comes with the worker, and until
//! then `indexnow_status()` says so, and why.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by `_PG_init` when the library is loaded through `shared_preload_libraries`; backends
/// forked from that postmaster inherit it.
static PRELOADED: AtomicBool = AtomicBool::new(false);

pub fn note_preloaded() {
    PRELOADED.store(true, Ordering::Relaxed);
}

/// The `worker` column of `indexnow_status()`.
pub fn state_for_status() -> String {
    if PRELOADED.load(Ordering::Relaxed) {
        "not running: this version of indexnow has no background worker yet".to_string()
    } else {
        "not running: indexnow is not in shared_preload_libraries".to_string()
    }
}
