//! Running a piece of work in a subtransaction of its own, as PL/pgSQL's exception blocks do:
//! an ERROR inside rolls back that subtransaction alone and comes back as its message, and the
//! caller goes on. The capture runner runs each watch's statement so (a failing watch is a
//! WARNING, the user's write succeeds: behaviour 10), and a sending pass its re-read of
//! scheduled pages (a stale watch must not stop sending).
//!
//! A cancel (`statement_timeout`, `pg_cancel_backend()`) is not an error of the work: it is raised
//! again, and ends the caller's statement as it would have without indexnow.

use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::PgTryBuilder;
use pgrx::prelude::*;

/// An ERROR caught by [`run`].
pub struct Failure {
    pub message: String,
    /// Its SQLSTATE, for raising it again as it was.
    pub code: PgSqlErrorCode,
    /// Not the work's fault and gone if it is tried again (a deadlock, a serialization failure,
    /// a lock timeout, memory or disk running out): the work must not be given up for it.
    pub transient: bool,
}

/// Runs `f` in a subtransaction; the ERROR if it raised one (the subtransaction is then rolled
/// back). A cancel is raised again.
pub fn run<R>(f: impl FnOnce() -> R) -> Result<R, Failure> {
    run_catching(f, false).map_err(|e| match e {
        Ended::Failed(failure) => failure,
        Ended::OutOfTime => unreachable!("no time limit was set"),
    })
}

/// How [`run_within`] ended without a result.
pub enum Ended {
    Failed(Failure),
    /// `f` took longer than it was given: cancelled, and its subtransaction rolled back.
    OutOfTime,
}

/// [`run`], with `f` cancelled once it has run for `at_most` (PostgreSQL's statement timeout,
/// armed here: a background worker's statements have none of their own). For a worker's
/// derivation, which a slow watch expression must not let run for ever.
pub fn run_within<R>(at_most: std::time::Duration, f: impl FnOnce() -> R) -> Result<R, Ended> {
    let ms = at_most.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: the statement timeout is registered for every backend and worker connected to a
    // database (InitPostgres); it is disarmed below however `f` ends.
    unsafe { enable_timeout_after(STATEMENT_TIMEOUT, ms) };
    let outcome = run_catching(f, true);
    // A cancel the timer asked for and nothing raised yet (it fired as `f` ended) is not for what
    // follows.
    // SAFETY: as above.
    unsafe {
        let fired = disarm_statement_timeout();
        if fired && !matches!(outcome, Err(Ended::OutOfTime)) {
            (&raw mut pg_sys::QueryCancelPending).write_volatile(0);
        }
    }
    outcome
}

/// [`run_within`], for work inside a session's own statement (a save derived in its statement):
/// `f` is given at most `at_most`, and at most a quarter of what the session's
/// `statement_timeout` leaves the statement, so that running out of time is `f`'s (rolled back,
/// and the caller falls back to something cheaper) and never the session's statement's: a save
/// must not fail because indexnow made it slower. Nothing is run when that would be less than
/// [`TOO_SHORT`] (a `statement_timeout` under about 100 ms): work cut that short is mostly rolled
/// back, and the rest of the statement (the fallback, the statement's own work, a loaded
/// machine's delays) needs the time more. The session's own timer is put back after, as it was.
pub fn run_within_statement<R>(
    at_most: std::time::Duration,
    f: impl FnOnce() -> R,
) -> Result<R, Ended> {
    // SAFETY: the statement timeout is registered in every backend; its state is read here and
    // put back below.
    let deadline = unsafe {
        get_timeout_active(STATEMENT_TIMEOUT).then(|| get_timeout_finish_time(STATEMENT_TIMEOUT))
    };
    let mut budget = at_most;
    if let Some(deadline) = deadline {
        // SAFETY: reads the clock.
        let left_us = deadline - unsafe { pg_sys::GetCurrentTimestamp() };
        budget = budget.min(std::time::Duration::from_micros(
            (left_us.max(0) / 4) as u64,
        ));
    }
    if budget < TOO_SHORT {
        return Err(Ended::OutOfTime);
    }
    let outcome = run_within(budget, f);
    if let Some(deadline) = deadline {
        // SAFETY: the session's timer, armed again for the deadline it had.
        unsafe { enable_timeout_at(STATEMENT_TIMEOUT, deadline) };
    }
    outcome
}

/// Less time than this is not worth giving work inside a session's statement
/// ([`run_within_statement`]).
pub const TOO_SHORT: std::time::Duration = std::time::Duration::from_millis(25);

/// Disarms the statement timeout [`run_within`] armed; whether it had fired.
///
/// # Safety
/// Only after `enable_timeout_after(STATEMENT_TIMEOUT, ..)`, in the same process.
unsafe fn disarm_statement_timeout() -> bool {
    // (an armed timeout is active until it fires)
    let fired = !get_timeout_active(STATEMENT_TIMEOUT);
    disable_timeout(STATEMENT_TIMEOUT, false);
    fired
}

// utils/timeout.h, which pgrx does not bind: the same in PostgreSQL 15 to 18 (the fourth
// of `TimeoutId`).
const STATEMENT_TIMEOUT: std::ffi::c_int = 3;
unsafe extern "C-unwind" {
    fn enable_timeout_after(id: std::ffi::c_int, delay_ms: std::ffi::c_int);
    fn disable_timeout(id: std::ffi::c_int, keep_indicator: bool);
    fn get_timeout_active(id: std::ffi::c_int) -> bool;
    fn get_timeout_finish_time(id: std::ffi::c_int) -> pg_sys::TimestampTz;
    fn enable_timeout_at(id: std::ffi::c_int, fin_time: pg_sys::TimestampTz);
}

fn run_catching<R>(f: impl FnOnce() -> R, timed: bool) -> Result<R, Ended> {
    // SAFETY: the subtransaction is begun and ended here, around code that either returns or
    // raises into the catch below; the memory context and resource owner are put back after,
    // as PL/pgSQL does for its exception blocks.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let f = std::panic::AssertUnwindSafe(f);
        let outcome = PgTryBuilder::new(move || {
            let f = f; // the whole wrapper, not its field
            let r = (f.0)();
            pg_sys::ReleaseCurrentSubTransaction();
            Ok(r)
        })
        .catch_others(|caught| Err(Box::new(caught)))
        .execute();
        if outcome.is_err() {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
        outcome.map_err(|caught| {
            let report = match caught.as_ref() {
                CaughtError::PostgresError(e) | CaughtError::ErrorReport(e) => e,
                CaughtError::RustPanic { ereport, .. } => ereport,
            };
            let code = report.sql_error_code();
            if code == PgSqlErrorCode::ERRCODE_QUERY_CANCELED {
                // Ours when the timer armed for `f` has fired (the message is translated: not
                // to be compared); any other cancel is the caller's, and raised again.
                if timed && !get_timeout_active(STATEMENT_TIMEOUT) {
                    return Ended::OutOfTime;
                }
                if timed {
                    disarm_statement_timeout();
                }
                (*caught).rethrow();
            }
            Ended::Failed(Failure {
                message: report.message().to_string(),
                code,
                transient: matches!(
                    code,
                    PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE
                        | PgSqlErrorCode::ERRCODE_T_R_DEADLOCK_DETECTED
                        | PgSqlErrorCode::ERRCODE_TRANSACTION_ROLLBACK
                        | PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE
                        | PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY
                        | PgSqlErrorCode::ERRCODE_DISK_FULL
                        | PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES
                        | PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED
                        | PgSqlErrorCode::ERRCODE_IO_ERROR
                ),
            })
        })
    }
}
