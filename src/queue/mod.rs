//! The queue: `indexnow_urls`, one row per URL, and the rules for putting a request into it.
//!
//! - One row per URL: the primary key is `sha1(url)` of the URL in normal form; a request is one
//!   `INSERT ... ON CONFLICT` (no "is it queued?" read first), so ten saves make one row.
//! - Every content change moves `changed_at`, restarting the debounce. A `refresh` (re-announce
//!   unchanged content) is not a content change: it leaves `changed_at` alone, so the due rule
//!   applies `repeat_after` to it, and it never overrides a request still pending (neither its
//!   reason nor its `available_at`: a refresh does not make a scheduled page sendable early).
//! - The last event wins: the reason is the latest request's, so an `unpublished` followed by a
//!   `changed` before the send leaves one live page, and the reverse one removal.
//! - `request_seq` counts requests; see `due.rs` for what makes a row due and `sql/schema.sql` for
//!   why pending is a count.
//!
//! `now()` is the writing transaction's start: every row one statement queues carries the same time.

pub mod due;
mod reason;

pub use reason::{Reason, UnknownReason};

use crate::error::{invalid_parameter, shown};
use crate::quote::quote_literal;
use pgrx::prelude::*;
use sha1::{Digest, Sha1};
use std::sync::atomic::{AtomicU32, Ordering};

/// The conflict rule every writer of `indexnow_urls` shares (this function and the capture
/// triggers), appended to an `INSERT INTO indexnow_urls AS u (...) ... ` that supplies `url`,
/// `url_hash`, `host`, `reason`, `changed_at`, `queued_at` and `available_at` (and, from a watch,
/// `watch_id` and [`HELD_BY_SQL`] as `held_by`). A request not derived from a transaction's
/// change (`indexnow_queue()`) is held by none; a `refresh` leaves a pending request's hold.
pub const ON_CONFLICT_SQL: &str = "ON CONFLICT (url_hash) DO UPDATE SET \
       reason = CASE WHEN excluded.reason = 'refresh' AND u.request_seq > u.settled_seq \
                     THEN u.reason ELSE excluded.reason END, \
       changed_at = CASE WHEN excluded.reason = 'refresh' THEN u.changed_at \
                         ELSE excluded.changed_at END, \
       queued_at = excluded.queued_at, \
       available_at = CASE WHEN excluded.reason = 'refresh' AND u.request_seq > u.settled_seq \
                           THEN u.available_at ELSE excluded.available_at END, \
       request_seq = u.request_seq + 1, \
       watch_id = coalesce(excluded.watch_id, u.watch_id), \
       held_by = CASE WHEN excluded.reason = 'refresh' AND u.request_seq > u.settled_seq \
                      THEN u.held_by ELSE excluded.held_by END";

/// The transaction whose change a derivation queues (`indexnow_urls.held_by`): the one that
/// recorded the change sets being derived (`indexnow.deriving_for`, set around a derivation of
/// change sets: `crate::derive`), else the deriving transaction itself (a save derived in its
/// own statement, `indexnow.derive_at_write`). The senders hold the request while that
/// transaction has change sets waiting (`crate::send::sql::claimable`): one transaction is one
/// announcement, however long its derivation takes.
pub const HELD_BY_SQL: &str = "COALESCE(NULLIF(pg_catalog.current_setting(\
       'indexnow.deriving_for', true), '')::pg_catalog.xid8, pg_catalog.pg_current_xact_id())";

/// The top-level transaction that last queued a request of its own (a content write captured, or
/// `indexnow_queue()`), so that `indexnow_push_now()` in that transaction leaves its rows for
/// after the commit (see `crate::send::sql::claim_by_reading`).
static OWN_REQUESTS_XID: AtomicU32 = AtomicU32::new(0);

/// The current transaction queues a request of its own.
pub fn note_own_request() {
    // SAFETY: assigns (or reads) this backend's top-level transaction id.
    let xid = unsafe { pg_sys::GetTopTransactionId() };
    OWN_REQUESTS_XID.store(xid.into_inner(), Ordering::Relaxed);
}

/// Whether the current transaction has queued a request of its own.
pub fn own_requests_in_this_transaction() -> bool {
    // SAFETY: reads this backend's top-level transaction id, if it has one.
    let xid = unsafe { pg_sys::GetTopTransactionIdIfAny() }.into_inner();
    xid != 0 && OWN_REQUESTS_XID.load(Ordering::Relaxed) == xid
}

/// The 20-byte key of a URL (already in normal form).
pub fn url_hash(url: &str) -> Vec<u8> {
    Sha1::digest(url.as_bytes()).to_vec()
}

/// Queue one URL for sending. Raises an ERROR naming the problem when the URL cannot be submitted
/// or the reason is unknown; nothing is queued then.
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_queue(url: &str, reason: default!(&str, "'changed'")) {
    crate::extension::require_writable("indexnow_queue");
    let reason: Reason = reason
        .parse()
        .unwrap_or_else(|e: UnknownReason| invalid_parameter(e.to_string()));
    let target = indexnow_protocol::submittable_url(url).unwrap_or_else(|e| {
        invalid_parameter(format!("indexnow: cannot queue {}: {e}", shown(url)))
    });
    let sql = format!(
        "INSERT INTO @extschema@.indexnow_urls AS u \
           (url, url_hash, host, reason, changed_at, queued_at, available_at) \
         VALUES ($1, $2, $3, $4, now(), now(), now()) {ON_CONFLICT_SQL}"
    );
    Spi::run_with_args(
        &crate::plan_cache::qualified(&sql),
        &[
            target.url.as_str().into(),
            url_hash(&target.url).into(),
            target.host.as_str().into(),
            reason.as_str().into(),
        ],
    )
    .unwrap_or_else(|e| error!("indexnow: could not queue {}: {e}", target.url));
    note_own_request();
    crate::wake::worker_at_commit();
}

/// Search engines were last told the queue row `alias` is live (or, for a watch's baseline, are
/// taken to know it).
pub fn known_live(alias: &str) -> String {
    format!(
        "coalesce({alias}.settled_reason NOT IN ({}), false)",
        removal_list()
    )
}

/// Whether search engines may have been told of the URL of the queue row `alias` since the time
/// `since` (when the row that gives it began to give it): a push of it as live recorded since
/// then, or a request of it tried since then whose answer was never recorded (a timeout, a
/// worker killed mid-request: `tried_at`). A URL told of is owed its removal when it goes; one
/// that is not (a draft, a page scheduled and cancelled, a URL whose only request was a dry run's)
/// never is. The one statement of the rule: every derivation that decides on a removal uses it.
/// (An `OR` of two terms: inside a larger condition, put it in parentheses.)
pub fn told_of_since(alias: &str, since: &str) -> String {
    format!(
        "({} AND coalesce({alias}.last_pushed_at, '-infinity') >= {since}) \
         OR coalesce({alias}.tried_at >= {since}, false)",
        known_live(alias)
    )
}

/// Whether the queue row `alias` holds a removal that no sender has tried since it was queued,
/// of a URL search engines were last told is live: withdrawn, it leaves them as they are. A page
/// that gives its URL again before its removal went out (a table restored after `pg_restore
/// --clean` dropped it, and watched again) owes nothing. A removal a sender has claimed (its
/// `tried_at`, set at the claim, is as new as the request) may have arrived: it stays.
pub fn removal_unsent_of_live(alias: &str) -> String {
    format!(
        "({alias}.request_seq > {alias}.settled_seq AND {alias}.reason IN ({}) AND {} \
          AND coalesce({alias}.tried_at < {alias}.queued_at, true))",
        removal_list(),
        known_live(alias)
    )
}

/// The removal reasons as a SQL list: `'moved', 'unpublished', ...`.
pub fn removal_list() -> String {
    Reason::ALL
        .iter()
        .filter(|r| r.is_removal())
        .map(|r| quote_literal(r.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}
