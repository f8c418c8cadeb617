//! Waking the worker at commit, not by polling: a transaction that queued something asks for a
//! wake-up, and when (and only if) it commits, the workers of its database are woken to look at
//! the queue at once. A `CREATE EXTENSION` wakes the launcher the same way, so the new database
//! gets its worker without waiting for the launcher's next look.
//!
//! The request is remembered in this process and acted on by a transaction callback; a rollback
//! forgets it (a rolled-back queue row is nothing to send: behaviour 9).

use crate::registry;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};

static CALLBACK_REGISTERED: AtomicBool = AtomicBool::new(false);
static WAKE_WORKER: AtomicBool = AtomicBool::new(false);
static WAKE_LAUNCHER: AtomicBool = AtomicBool::new(false);

/// Wake this database's workers when the current transaction commits.
pub fn worker_at_commit() {
    if registry::preloaded() {
        register_callback();
        WAKE_WORKER.store(true, Ordering::Relaxed);
    }
}

/// Tell the launcher, when the current transaction commits, that a database may need a worker.
pub fn launcher_at_commit() {
    if registry::preloaded() {
        register_callback();
        WAKE_LAUNCHER.store(true, Ordering::Relaxed);
    }
}

fn register_callback() {
    if !CALLBACK_REGISTERED.swap(true, Ordering::Relaxed) {
        unsafe { pg_sys::RegisterXactCallback(Some(on_transaction_end), std::ptr::null_mut()) };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_COMMIT => {
            if WAKE_WORKER.swap(false, Ordering::Relaxed) {
                registry::wake_workers(unsafe { pg_sys::MyDatabaseId }.to_u32());
            }
            if WAKE_LAUNCHER.swap(false, Ordering::Relaxed) {
                registry::bump_generation();
                registry::wake_launcher();
            }
        }
        XACT_EVENT_ABORT | XACT_EVENT_PREPARE => {
            // A prepared transaction commits later, elsewhere: the worker finds its rows within
            // naptime.
            WAKE_WORKER.store(false, Ordering::Relaxed);
            WAKE_LAUNCHER.store(false, Ordering::Relaxed);
        }
        _ => {}
    }
}

/// Called by the extension's script: the launcher starts this database's worker at commit.
#[pg_extern(name = "_indexnow_wake_launcher_at_commit", volatile, parallel_unsafe)]
fn indexnow_wake_launcher_at_commit() {
    launcher_at_commit();
}
