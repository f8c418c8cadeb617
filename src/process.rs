//! The background process a sending pass runs in, as PostgreSQL sees it: what it shows in
//! `pg_stat_activity`, the statistics it reports, whether it was told to stop, and how it waits.
//! Used by the workers (`crate::worker`) and by the pass itself (`crate::send`).
//!
//! Every wait of a worker is a wait on its latch that ends the process when the postmaster dies
//! (a worker that outlives a crashed postmaster keeps its shared memory in use, and `pg_ctl
//! start` fails until it exits) and handles the interrupts any backend must (a procsignal
//! barrier, which `DROP DATABASE`, `DROP TABLESPACE` and `ALTER DATABASE ... SET TABLESPACE` of
//! any database wait for; a cancel; `pg_log_backend_memory_contexts()`), also while a request is
//! under way in another thread.

use pgrx::pg_guard;
use pgrx::pg_sys;
use std::time::Duration;

static DERIVING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes SIGTERM (a shutdown, `pg_terminate_backend()`, `DROP DATABASE ... WITH (FORCE)`, a
/// command that needs the database to itself) tell this worker to stop, as pgrx's handler does,
/// and also cancel the statement it runs while it derives ([`deriving`]): a derivation can take
/// seconds, and PostgreSQL gives a database's other processes 5 s to leave before a `DROP
/// DATABASE` fails. What the derivation did is rolled back, and its change sets stay.
pub fn stop_at_once_when_told() {
    // SAFETY: installed once at the worker's start, as PostgreSQL installs its handlers.
    unsafe { crate::compat::backend_signal(pg_sys::SIGTERM, on_sigterm) };
}

#[pg_guard]
unsafe extern "C-unwind" fn on_sigterm(_signal: i32) {
    // SAFETY: sig_atomic_t flags and this process's latch, as PostgreSQL's handlers set them.
    unsafe {
        (&raw mut pg_sys::ShutdownRequestPending).write_volatile(1);
        if DERIVING.load(std::sync::atomic::Ordering::Relaxed) {
            (&raw mut pg_sys::QueryCancelPending).write_volatile(1);
            (&raw mut pg_sys::InterruptPending).write_volatile(1);
        }
        pg_sys::SetLatch(pg_sys::MyLatch);
    }
}

/// Runs `f`, a derivation, so that a SIGTERM meanwhile cancels it ([`stop_at_once_when_told`]).
pub fn deriving<R>(f: impl FnOnce() -> R) -> R {
    DERIVING.store(true, std::sync::atomic::Ordering::Relaxed);
    if told_to_stop() {
        DERIVING.store(false, std::sync::atomic::Ordering::Relaxed);
        pgrx::error!("indexnow: the worker was told to stop");
    }
    let f = std::panic::AssertUnwindSafe(f);
    pgrx::PgTryBuilder::new(move || {
        let f = f;
        (f.0)()
    })
    .finally(|| DERIVING.store(false, std::sync::atomic::Ordering::Relaxed))
    .execute()
}

/// Whether this worker was told to stop (SIGTERM: a shutdown, `pg_terminate_backend()`, or a
/// command that needs the database to itself). Stays true once set: pgrx's own
/// `sigterm_received()` forgets the signal once asked, and every loop of the worker must see it.
pub fn told_to_stop() -> bool {
    // SAFETY: a sig_atomic_t the SIGTERM handler sets; read, never written here.
    unsafe { (&raw const pg_sys::ShutdownRequestPending).read_volatile() != 0 }
}

/// Waits up to `at_most` on this process's latch, or until the file descriptor `readable` (a pipe
/// the process's own threads write to) has something to read: at once gone with the postmaster,
/// and with the interrupts that came meanwhile handled (see the module's comment).
pub fn wait_a_moment_or_readable(at_most: Duration, readable: Option<std::os::fd::RawFd>) {
    let ms = at_most.as_millis().min(i64::MAX as u128) as std::ffi::c_long;
    let mut events = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH;
    if readable.is_some() {
        events |= pg_sys::WL_SOCKET_READABLE;
    }
    // SAFETY: this process's own latch, waited on by its main thread, as PostgreSQL's own
    // processes wait; the interrupts are handled outside any critical section. The descriptor
    // is open for the call (the caller's).
    unsafe {
        let rc = pg_sys::WaitLatchOrSocket(
            pg_sys::MyLatch,
            events as i32,
            readable.unwrap_or(pg_sys::PGINVALID_SOCKET),
            ms,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
        if rc & pg_sys::WL_LATCH_SET as i32 != 0 {
            WOKEN.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    pgrx::check_for_interrupts!();
}

/// Whether the latch was set during a [`wait_a_moment_or_readable`] (a commit that recorded changes or
/// queued URLs woke the worker while it waited for an answer): the worker then sets it again
/// before it sleeps, so that the wake-up is not lost. Asks once.
pub fn woken_meanwhile() -> bool {
    WOKEN.swap(false, std::sync::atomic::Ordering::Relaxed)
}

static WOKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sends what this process wrote to the statistics system (`pg_stat_user_tables`, which
/// autovacuum reads), as a backend does between statements: `force` before sleeping, otherwise
/// at most once a second (PostgreSQL's own limit).
pub fn report_statistics(force: bool) {
    // SAFETY: outside any transaction, as PostgreSQL's own callers are.
    unsafe {
        pg_sys::pgstat_report_stat(force);
    }
}

/// Shows `what` as this worker's `query` in `pg_stat_activity`, its `state` active when `busy`;
/// nothing in a client's backend, whose own statement is what it shows.
pub fn report_activity(what: &str, busy: bool) {
    // SAFETY: set once at a background worker's start, NULL in any other process.
    if unsafe { pg_sys::MyBgworkerEntry }.is_null() {
        return;
    }
    let state = if busy {
        pg_sys::BackendState::STATE_RUNNING
    } else {
        pg_sys::BackendState::STATE_IDLE
    };
    show(what, state);
}

/// Shows `what` as the `query` of a client's long statement in `pg_stat_activity` while it runs
/// (`indexnow_watch()`'s phases), in any backend; [`report_statement_again`] puts the statement's
/// own text back.
pub fn report_phase(what: &str) {
    show(what, pg_sys::BackendState::STATE_RUNNING);
}

/// Shows the running statement's own text again after [`report_phase`].
pub fn report_statement_again() {
    // SAFETY: the text of the running statement, owned by it; NULL outside one.
    let statement = unsafe { pg_sys::debug_query_string };
    if !statement.is_null() {
        // SAFETY: a NUL-terminated string that outlives this call.
        show(
            &unsafe { std::ffi::CStr::from_ptr(statement) }.to_string_lossy(),
            pg_sys::BackendState::STATE_RUNNING,
        );
    }
}

fn show(what: &str, state: pg_sys::BackendState::Type) {
    let what = std::ffi::CString::new(what.replace('\0', "")).unwrap_or_default();
    // SAFETY: copies the text into this backend's status entry.
    unsafe { pg_sys::pgstat_report_activity(state, what.as_ptr()) };
}
