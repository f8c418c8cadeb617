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
    // What the pass left due and why, so that a caller (a cron job) can tell a pause or a hold
    // from an empty queue.
    for why in what_waits() {
        notice!("{why}");
    }
    TableIterator::new(rows)
}

/// A line for each pause in force (all hosts, or a host with due URLs) and each held host with
/// due URLs: `indexnow: sending is paused until T for all hosts (status 429)`, `indexnow:
/// sending is paused until T for HOST (status 403): N due URLs wait`, `indexnow: N due URLs of
/// HOST wait: <held>`.
fn what_waits() -> Vec<String> {
    let [debounce, min_gap, repeat_after] = crate::guc::due_rule().sql_args();
    let held = crate::hosts::held_sql("d.host", "true");
    let sql = format!(
        "WITH due AS (SELECT host, count(*) AS n FROM @extschema@.indexnow_urls
                       WHERE {due} GROUP BY host)
         SELECT line FROM (
           SELECT 0 AS k, b.scope AS s, 'indexnow: sending is paused until ' || b.until::text
                  || ' for all hosts (status ' || b.status || ')' AS line
             FROM @extschema@.indexnow_backoff b WHERE b.scope = '*' AND b.until > $1
           UNION ALL
           SELECT 1, b.scope, 'indexnow: sending is paused until ' || b.until::text || ' for '
                  || b.scope || ' (status ' || b.status || '): ' || d.n || ' due URLs wait'
             FROM @extschema@.indexnow_backoff b JOIN due d ON d.host = b.scope
            WHERE b.until > $1
           UNION ALL
           SELECT 2, d.host, 'indexnow: ' || d.n || ' due URLs of ' || d.host || ' wait: '
                  || {held}
             FROM due d LEFT JOIN @extschema@.indexnow_hosts h ON h.host = d.host
            WHERE {held} IS NOT NULL) w
         ORDER BY k, s",
        due = crate::queue::due::DUE_SQL,
    );
    let args = [
        pgrx::datum::DatumWithOid::from(pgrx::prelude::now()),
        debounce.into(),
        min_gap.into(),
        repeat_after.into(),
    ];
    Spi::connect(|client| {
        crate::plan_cache::read(client, &sql, &args)?
            .map(|r| r.get::<String>(1).map(Option::unwrap_or_default))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading what waits: {e}"))
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
