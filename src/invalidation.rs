//! Per-backend caches of what the catalog and the extension's tables say, kept right the way
//! PostgreSQL keeps its own relation cache right: by relation-cache invalidation messages.
//!
//! One callback is registered per backend; each cache hands it a listener that drops the
//! entries an invalidated table touches (`InvalidOid`: every table). An entry built while an
//! invalidation arrived may already be stale, and one read from a snapshot older than the latest
//! committed state (REPEATABLE READ, SERIALIZABLE) may miss what another session committed since:
//! either serves its caller once and is not kept ([`built`]).

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

thread_local! {
    static LISTENERS: RefCell<Vec<fn(pg_sys::Oid)>> = const { RefCell::new(Vec::new()) };
    /// Bumped by every invalidation heard.
    static GENERATION: Cell<u64> = const { Cell::new(0) };
}

/// Calls `listener` with the table of every relation-cache invalidation this backend hears from
/// now on. Listening twice with the same function listens once.
pub fn listen(listener: fn(pg_sys::Oid)) {
    let first = LISTENERS.with(|l| {
        let mut l = l.borrow_mut();
        let first = l.is_empty();
        if !l.iter().any(|known| std::ptr::fn_addr_eq(*known, listener)) {
            l.push(listener);
        }
        first
    });
    if first {
        // SAFETY: registers a callback for this backend's lifetime; it only calls the listeners,
        // which touch their own modules' thread-local caches.
        unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(heard), pg_sys::Datum::from(0)) };
    }
}

/// Builds an entry and says whether it may be kept: no invalidation arrived while it was built,
/// and it was read at READ COMMITTED (a statement's snapshot, as fresh as the invalidations heard).
pub fn built<T>(build: impl FnOnce() -> T) -> (T, bool) {
    let generation = GENERATION.get();
    let entry = build();
    // SAFETY: a plain read of this backend's isolation level.
    let read_committed = unsafe { pg_sys::XactIsoLevel } == pg_sys::XACT_READ_COMMITTED as i32;
    (entry, GENERATION.get() == generation && read_committed)
}

#[pg_guard]
unsafe extern "C-unwind" fn heard(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    GENERATION.set(GENERATION.get() + 1);
    // (copied out: a listener never calls into PostgreSQL, but no borrow spans one anyway)
    let listeners = LISTENERS.with(|l| l.borrow().clone());
    for listener in listeners {
        listener(relid);
    }
}
