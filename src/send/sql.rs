//! The statements of a sending pass, over `indexnow_urls`, `indexnow_hosts`, `indexnow_backoff`
//! and `indexnow_pushes`.
//!
//! The claim statements share the due rule's parameters ([`crate::queue::due::DUE_SQL`]):
//! `$1` = now, `$2`..`$4` = debounce, min_gap, repeat_after (seconds), and add
//! `$5` = dry run (bool). A statement that does not use some of them still takes them all, so
//! every call site passes the same [`super::Settings::claim_args`].

use crate::queue::due::{DUE_AT_SQL, DUE_SQL};

/// Who takes advisory locks of this key (`pg_advisory_*lock(PASS_LOCK)`): sending passes only.
/// A worker's claim transaction holds it shared, an `indexnow_push_now()` call exclusive until
/// its caller's transaction ends. See `super` for why.
pub const PASS_LOCK: &str = "hashtext('indexnow'), 1";

/// A row a sender may take now, besides being due: no other sender holds a live lease on it and,
/// in a dry run, no dry run has decided on this very request yet.
const CLAIMABLE_SQL: &str = "(claimed_until IS NULL OR claimed_until <= $1) \
     AND (NOT $5 OR dry_run_seq IS DISTINCT FROM request_seq)";

/// The hosts a pass sends for, with their key: enabled, not paused (neither all sending nor this
/// host), and with something due. URLs of hosts not listed here (no key, disabled, paused) are
/// held: they stay due and are counted in `indexnow_status()`.
pub fn sendable_hosts() -> String {
    format!(
        "SELECT h.host, h.key, h.key_location FROM indexnow_hosts h \
          WHERE h.enabled \
            AND NOT EXISTS (SELECT FROM indexnow_backoff b \
                             WHERE b.scope IN ('*', h.host) AND b.until > $1) \
            AND EXISTS (SELECT FROM indexnow_urls \
                         WHERE host = h.host AND {DUE_SQL} AND {CLAIMABLE_SQL}) \
          ORDER BY h.host"
    )
}

/// The due rows of one host (`$6`), at most `$7` of them, longest quiet first.
fn due_of_host(lock: &str) -> String {
    format!(
        "SELECT url_hash FROM indexnow_urls \
          WHERE host = $6 AND {DUE_SQL} AND {CLAIMABLE_SQL} \
          ORDER BY changed_at LIMIT $7 {lock}"
    )
}

/// What a claim returns, in this order: see `super::Claimed`.
const CLAIMED_COLUMNS: &str = "u.url_hash, u.url, u.reason, u.changed_at, u.request_seq";

/// A worker's claim: lock the rows, skipping those another sender holds, and lease them for
/// `$8` seconds, in a transaction committed before any HTTP request.
pub fn claim_with_lease() -> String {
    format!(
        "UPDATE indexnow_urls u SET claimed_until = $1 + make_interval(secs => $8) \
           FROM ({}) c WHERE u.url_hash = c.url_hash RETURNING {CLAIMED_COLUMNS}",
        due_of_host("FOR UPDATE SKIP LOCKED")
    )
}

/// `indexnow_push_now()`'s claim: a plain read, so the caller's transaction holds no row lock
/// across the HTTP request; the exclusive pass lock keeps other senders away instead.
pub fn claim_by_reading() -> String {
    format!(
        "SELECT {CLAIMED_COLUMNS} FROM indexnow_urls u \
          WHERE u.url_hash IN ({})",
        due_of_host("")
    )
}

/// The claimed rows, passed back as arrays: `$1` url_hash, `$2` changed_at, `$3` request_seq,
/// `$4` reason.
const CLAIMS: &str = "unnest($1::bytea[], $2::timestamptz[], $3::bigint[], $4::text[]) \
     AS c(url_hash, changed_at, request_seq, reason)";

/// The endpoint accepted the batch. Only the requests the claim saw are settled: a request that
/// arrived since keeps `request_seq > settled_seq` (spec behaviour 14), and `pushed_changed_at`
/// is the content the push carried, so a change since is still a change.
pub fn settle_accepted() -> String {
    format!(
        "UPDATE indexnow_urls u SET \
            last_pushed_at = clock_timestamp(), pushed_changed_at = c.changed_at, \
            settled_seq = greatest(u.settled_seq, c.request_seq), settled_reason = c.reason, \
            failed_at = NULL, failed_status = NULL, failed_note = NULL, claimed_until = NULL \
           FROM {CLAIMS} WHERE u.url_hash = c.url_hash"
    )
}

/// The endpoint refused the batch (a 4xx that is not a pause): the requests it carried are
/// settled as failed, with the answer kept (`$5` status, `$6` note), and not retried until a new
/// request comes.
pub fn settle_refused() -> String {
    format!(
        "UPDATE indexnow_urls u SET \
            failed_at = clock_timestamp(), failed_status = $5, failed_note = $6, \
            settled_seq = greatest(u.settled_seq, c.request_seq), settled_reason = c.reason, \
            claimed_until = NULL \
           FROM {CLAIMS} WHERE u.url_hash = c.url_hash"
    )
}

/// A dry run decided on the batch: nothing is settled (search engines were told nothing), the
/// decision is remembered so the next pass does not make it again.
pub fn settle_dry_run() -> String {
    format!(
        "UPDATE indexnow_urls u SET dry_run_seq = c.request_seq, claimed_until = NULL \
           FROM {CLAIMS} WHERE u.url_hash = c.url_hash"
    )
}

/// A temporary failure: the lease is given back and the rows stay due. Nothing is dropped.
pub fn release() -> String {
    format!(
        "UPDATE indexnow_urls u SET claimed_until = NULL \
           FROM {CLAIMS} WHERE u.url_hash = c.url_hash"
    )
}

/// A pause ordered by the endpoint: `$1` scope (`*` or a host), `$2` seconds, `$3` status,
/// `$4` note. The latest answer decides, so a shorter Retry-After shortens a pause.
pub const PAUSE: &str = "INSERT INTO indexnow_backoff AS b (scope, until, status, note) \
     VALUES ($1, clock_timestamp() + make_interval(secs => $2), $3, $4) \
     ON CONFLICT (scope) DO UPDATE SET until = excluded.until, status = excluded.status, \
                                       note = excluded.note";

/// One row per request made (or per dry-run decision): `$1` host, `$2` URL count, `$3` status,
/// `$4` duration in seconds, `$5` note. `pushed_at` is when the request started.
pub const RECORD: &str =
    "INSERT INTO indexnow_pushes (pushed_at, host, url_count, status, duration, note) \
     VALUES (clock_timestamp() - make_interval(secs => $4), $1, $2, $3, \
             make_interval(secs => $4), $5)";

/// History pruning: `$1` = history_days.
pub const PRUNE: &str =
    "DELETE FROM indexnow_pushes WHERE pushed_at < now() - make_interval(days => $1)";

/// When the next row becomes sendable (due and its lease, if any, passed), for the worker's
/// sleep. Same parameters as the claims.
pub fn next_due() -> String {
    format!(
        "SELECT min(greatest({DUE_AT_SQL}, claimed_until)) FROM indexnow_urls \
          WHERE request_seq > settled_seq \
            AND (NOT $5 OR dry_run_seq IS DISTINCT FROM request_seq)"
    )
}
