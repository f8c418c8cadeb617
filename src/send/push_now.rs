//! `indexnow_push_now()`: one sending pass in the caller's session, the "send now" button.

use super::{run_pass, Session};
use pgrx::prelude::*;

/// Runs one pass now, in this session and transaction, and returns what it sent per host:
/// the requests made, the URLs they carried, and the last answer's status and note (status 0 is
/// no answer: a network failure, or a dry run). Respects `indexnow.server_enabled`, `indexnow.enabled`, pauses and every
/// other setting as the worker does. It waits for another `indexnow_push_now()` whose transaction
/// is still open; it holds no row lock across an HTTP request. URLs queued by the calling
/// transaction itself are not sent before it commits (see `sql::claim_by_reading`).
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn indexnow_push_now() -> TableIterator<
    'static,
    (
        name!(host, String),
        name!(requests, i32),
        name!(url_count, i64),
        name!(status, Option<i32>),
        name!(note, Option<String>),
    ),
> {
    crate::extension::require_writable("indexnow_push_now");
    // The tables a pass writes are those of this library's release (as for the workers, which
    // wait for the update).
    crate::extension::require_current_version();
    if let Some(why) = crate::guc::sending_off_because() {
        notice!("indexnow: {why}: nothing is sent");
    }
    let rows = run_pass(Session::PushNow)
        .0
        .into_iter()
        .map(|r| (r.host, r.requests, r.url_count, r.status, r.note))
        .collect::<Vec<_>>();
    TableIterator::new(rows)
}

/// Whether `xid` (a row's `xmin`) is the calling transaction's or one of its subtransactions': a
/// row it wrote and has not committed. For `indexnow_push_now()`'s claim.
#[pg_extern(
    name = "_indexnow_written_by_this_transaction",
    stable,
    parallel_safe,
    strict
)]
fn indexnow_written_by_this_transaction(xid: i64) -> bool {
    // An xid is 32 bits; a row's xmin read as text gives it unsigned.
    u32::try_from(xid)
        .map(|xid| unsafe { pg_sys::TransactionIdIsCurrentTransactionId(xid.into()) })
        .unwrap_or(false)
}
