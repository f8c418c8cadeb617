//! The background process a sending pass runs in, as PostgreSQL sees it: what it shows in
//! `pg_stat_activity`, the statistics it reports, and whether it was told to stop. Used by the
//! workers (`crate::worker`) and by the pass itself (`crate::send`).

use pgrx::pg_sys;

/// Whether this worker was told to stop (SIGTERM: a shutdown, `pg_terminate_backend()`, or a
/// command that needs the database to itself). Stays true once set: pgrx's own
/// `sigterm_received()` forgets the signal once asked, and every loop of the worker must see it.
pub fn told_to_stop() -> bool {
    // SAFETY: a sig_atomic_t the SIGTERM handler sets; read, never written here.
    unsafe { (&raw const pg_sys::ShutdownRequestPending).read_volatile() != 0 }
}

/// Sends what this process wrote to the statistics system (`pg_stat_user_tables`, which
/// autovacuum reads), as a backend does between statements: `force` before sleeping, otherwise
/// at most once a second (PostgreSQL's own limit).
pub fn report_statistics(force: bool) {
    // SAFETY: outside any transaction, as PostgreSQL's own callers are.
    unsafe {
        pg_sys::pgstat_report_stat(force);
    }
}

/// Shows `what` as this worker's `query` in `pg_stat_activity`, its `state` active when `busy`.
pub fn report_activity(what: &str, busy: bool) {
    let what = std::ffi::CString::new(what.replace('\0', "")).unwrap_or_default();
    let state = if busy {
        pg_sys::BackendState::STATE_RUNNING
    } else {
        pg_sys::BackendState::STATE_IDLE
    };
    // SAFETY: copies the text into this backend's status entry.
    unsafe { pg_sys::pgstat_report_activity(state, what.as_ptr()) };
}
