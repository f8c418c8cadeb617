//! The statements of a sending pass, over `indexnow_urls`, `indexnow_hosts`, `indexnow_backoff`
//! and `indexnow_pushes`.
//!
//! The claim statements share the due rule's parameters ([`crate::queue::due::DUE_SQL`]):
//! `$1` = now, `$2`..`$4` = debounce, min_gap, repeat_after (seconds), and add
//! `$5` = dry run (bool). A statement that does not use some of them still takes them all, so
//! every call site passes the same [`super::Settings::claim_args`].

use crate::queue::due::{DUE_AT_SQL, DUE_SQL, NEWS_SQL, PENDING_SQL};

/// Who takes advisory locks of this key (`pg_advisory_*lock(PASS_LOCK)`): sending passes only.
/// A worker's claim transaction holds it shared, an `indexnow_push_now()` call exclusive until
/// its caller's transaction ends. See `super` for why.
const PASS_LOCK: &str = "hashtext('indexnow'), 1";

/// `indexnow_push_now()`'s hold on the pass lock, until its caller's transaction ends.
pub fn take_pass_lock() -> String {
    format!("SELECT pg_advisory_xact_lock({PASS_LOCK})")
}

/// A worker's claim transaction's share of the pass lock: true when it has it.
pub fn try_pass_lock_shared() -> String {
    format!("SELECT pg_try_advisory_xact_lock_shared({PASS_LOCK})")
}

/// In a dry run (the flag in parameter `$n`: `$5` in a pass's statements), a request a dry run
/// has already decided on is not decided again.
pub fn undecided(n: u8) -> String {
    format!("(NOT ${n} OR dry_run_seq IS DISTINCT FROM request_seq)")
}

/// A row a sender may take now, besides being due: no other sender holds a live lease on it, it
/// is undecided, and it is not [`HELD`].
fn claimable() -> String {
    claimable_with_dry_run_in(5)
}

/// [`claimable`] with the dry-run flag in parameter `$n` (`$1` is now, as everywhere): what
/// `indexnow_status()` counts as `due_now`.
pub fn claimable_with_dry_run_in(n: u8) -> String {
    format!(
        "(claimed_until IS NULL OR claimed_until <= $1) AND {} AND NOT {HELD}",
        undecided(n)
    )
}

/// A request derived from a transaction's change (`held_by`, `crate::queue::HELD_BY_SQL`) while
/// change sets that transaction recorded still wait to be derived: one transaction is one
/// announcement. An import of products and their prices in one transaction is several change
/// sets, derived one after another for as long as it takes; without the hold, a page derived
/// from the first was sent, and sent again when the next changed it. It cannot race: a
/// derivation removes its change sets in the transaction that queues what they gave, and every
/// change set of a transaction is there from its commit on, so a claim sees either the change
/// set or what it queued, never neither. A request held by a transaction whose change sets are
/// all derived (or that recorded none) is not held. (`OFFSET 0`: one probe of the change sets'
/// index per candidate row, never a hash of every change set, which a backlog of millions of
/// recorded saves would make for each claim.)
pub const HELD: &str =
    "(held_by IS NOT NULL AND EXISTS (SELECT FROM @extschema@.indexnow_changes c \
                                                      WHERE c.xact OPERATOR(pg_catalog.=) held_by \
                                                      OFFSET 0))";

/// The hosts a pass sends for, with their key: enabled, at home in this database, not paused
/// (neither all sending nor this host), and with something due. URLs of hosts not listed here
/// (no key, disabled, in a copy, paused) are held: they stay due and are counted in
/// `indexnow_status()`.
pub fn sendable_hosts() -> String {
    let claimable = claimable();
    let host_may_send = host_may_send();
    format!(
        "SELECT h.host, h.key, h.key_location FROM @extschema@.indexnow_hosts h \
          WHERE {host_may_send} \
            AND EXISTS (SELECT FROM @extschema@.indexnow_urls \
                         WHERE host = h.host AND {DUE_SQL} AND {claimable}) \
          ORDER BY h.host"
    )
}

/// A host (`h`, a row of `indexnow_hosts`) that may be sent for now: not held (`crate::hosts`:
/// switched off, a copy's; a pass runs only while sending is on) and neither all sending nor
/// this host paused.
fn host_may_send() -> String {
    format!(
        "{} IS NULL AND {} IS NULL",
        crate::hosts::held_sql("h.host", "true"),
        paused_until("h.host")
    )
}

/// Until when sending for `host` (a SQL expression) is paused — all sending (scope `*`) or that
/// host's — or NULL; `$1` is now.
pub fn paused_until(host: &str) -> String {
    format!(
        "(SELECT max(b.until) FROM @extschema@.indexnow_backoff b \
           WHERE b.scope IN ('*', {host}) AND b.until > $1)"
    )
}

/// The due rows of one host (`$6`), at most `$7` of them, in the order a backlog goes out: first
/// what search engines do not have yet ([`NEWS_SQL`]: content changes and removals, and their
/// retries after a pause or a lost answer), then re-announcements of unchanged content
/// (`refresh`), each longest quiet first; `and` adds a condition. (Two scans, each following an
/// index in order: `indexnow_urls_news` for the first, `indexnow_urls_pending` for the second,
/// which runs only when the first leaves room in the batch: an `Append` reads its branches in
/// turn, and the outer `LIMIT` stops it, locking no row it does not return.)
fn due_of_host(columns: &str, and: &str, lock: &str) -> String {
    let claimable = claimable();
    // (each branch a subquery of its own: a set operation takes no locking clause in a branch)
    let branch = |which: &str| {
        format!(
            "SELECT * FROM (SELECT {columns} FROM @extschema@.indexnow_urls \
               WHERE host = $6 AND {DUE_SQL} AND {claimable} {and} AND {which} \
               ORDER BY changed_at LIMIT $7 {lock}) b"
        )
    };
    format!(
        "SELECT * FROM ({news} UNION ALL {again}) d LIMIT $7",
        news = branch(&format!("({NEWS_SQL})")),
        again = branch(&format!("NOT ({NEWS_SQL})")),
    )
}

/// What a claim returns, read by name into `super::ClaimedUrl`. The row's `ctid` lets the
/// statements that settle it find it without an index lookup per row. A request queued for a
/// publication time has `available_at` later than `queued_at` (both are the request's `now()`
/// otherwise).
const CLAIMED_COLUMNS: &str = "url_hash, url, reason, changed_at, request_seq, \
     ctid::text AS ctid, available_at > queued_at AS scheduled";

/// A worker's claim: lock the rows, skipping those another sender holds, and lease them for
/// `$8` seconds, in a transaction committed before any HTTP request. (The locked rows are found
/// again by `ctid`: they cannot move while locked.) Unless it is a dry run (`$5`), it also notes
/// `tried_at`: from now on the request may have reached search engines, whatever becomes of the
/// answer. Not yet for a live page queued for a publication time: it is derived again first
/// (`super::reread_scheduled`), and a derivation that found it tried would take a page never
/// public for one search engines may know, and send its removal; [`lease_again`] notes it for
/// those still to be sent.
pub fn claim_with_lease() -> String {
    let scheduled_live = format!(
        "(available_at > queued_at AND reason NOT IN ({}))",
        crate::queue::removal_list()
    );
    format!(
        "UPDATE @extschema@.indexnow_urls SET claimed_until = $1 + make_interval(secs => $8), \
                tried_at = CASE WHEN $5 OR {scheduled_live} THEN tried_at ELSE $1 END \
          WHERE ctid = ANY (ARRAY({})) RETURNING {CLAIMED_COLUMNS}",
        due_of_host("ctid", "", "FOR UPDATE SKIP LOCKED")
    )
}

/// `indexnow_push_now()`'s claim: a plain read, so the caller's transaction holds no row lock
/// across the HTTP request; the exclusive pass lock keeps other senders away instead.
///
/// It leaves out the rows the caller's own transaction wrote (queued in it, or in one of its
/// subtransactions, as a capture trigger does): nothing leaves the database before it is
/// committed. A transaction that saves a page and then calls `indexnow_push_now()` may still roll
/// back, and search engines would have been told of a page that never existed (or a test's
/// data). Those rows stay pending and go out after the commit, with the worker or the next call.
///
/// The rows a transaction that queued nothing of its own writes are those it derived from change
/// sets other transactions committed: those are sent (`own_requests` false).
pub fn claim_by_reading(own_requests: bool) -> String {
    let and = if own_requests {
        "AND NOT @extschema@._indexnow_written_by_this_transaction(xmin::text::bigint)"
    } else {
        ""
    };
    due_of_host(CLAIMED_COLUMNS, and, "")
}

/// What becomes of claimed rows once the answer is known.
#[derive(Clone, Copy)]
pub enum Settle {
    /// The endpoint accepted the batch. Only the requests the claim saw are settled: a request
    /// that arrived since keeps `request_seq > settled_seq` (behaviour 14), and
    /// `pushed_changed_at` is the content the push carried, so a change since is still a change.
    /// A live page whose request a derivation cancelled while it was being sent (it went away,
    /// and nothing said search engines might know it: `indexnow_push_now()` claims by reading,
    /// noting nothing) is known to them now: its removal is requested again, as a change.
    Accepted,
    /// The endpoint refused the batch (a 4xx that is not a pause): the requests it carried are
    /// settled as failed, with the answer kept (`$6` status, `$7` note), and not retried until a
    /// new request comes.
    Refused,
    /// A dry run decided on the batch: nothing is settled (search engines were told nothing); the
    /// decision is remembered so the next pass does not make it again.
    DryRun,
    /// A temporary failure: the lease is given back and the rows stay due. Nothing is dropped.
    /// The request was made, and may have reached search engines (a timeout, a worker told to
    /// stop mid-request): `tried_at` says so, as a worker's claim does before it sends, so that
    /// a removal of these URLs is not taken for one of a URL they never heard of
    /// (`indexnow_push_now()` claims by reading, and notes it here). Set for a 429 or 5xx
    /// answer too, and to the time of the answer, not of the sending: both err towards sending a
    /// removal, never towards losing one.
    Release,
}

/// How the statement finds the claimed rows.
#[derive(Clone, Copy)]
pub enum Locate {
    /// By the `ctid` the claim returned (`$5`): no index lookups. Misses a row that was updated
    /// since the claim (a save during the push): those are settled again [`Locate::ByKey`].
    ByTid,
    /// By primary key (`$1`).
    ByKey,
}

/// The statement that settles claimed rows, passed back as arrays: `$1` url_hash, `$2`
/// changed_at, `$3` request_seq, `$4` reason, `$5` ctid (text), and for a refusal `$6` status,
/// `$7` note. Returns the url_hash of each row it found.
pub fn settle(settle: Settle, locate: Locate) -> String {
    let set = match settle {
        Settle::Accepted => {
            let cancelled_removal = format!(
                "u.request_seq = c.request_seq AND u.settled_seq >= c.request_seq \
                 AND u.reason IN ({removals}) AND c.reason NOT IN ({removals})",
                removals = crate::queue::removal_list()
            );
            format!(
                "last_pushed_at = clock_timestamp(), pushed_changed_at = c.changed_at, \
                 settled_seq = greatest(u.settled_seq, c.request_seq), settled_reason = c.reason, \
                 request_seq = CASE WHEN {cancelled_removal} THEN u.request_seq + 1 \
                                    ELSE u.request_seq END, \
                 changed_at = CASE WHEN {cancelled_removal} THEN clock_timestamp() \
                                   ELSE u.changed_at END, \
                 failed_at = NULL, failed_status = NULL, failed_note = NULL, claimed_until = NULL, \
                 held_by = CASE WHEN u.request_seq = c.request_seq THEN NULL ELSE u.held_by END"
            )
        }
        Settle::Refused => "failed_at = clock_timestamp(), failed_status = $6, failed_note = $7, \
             settled_seq = greatest(u.settled_seq, c.request_seq), settled_reason = c.reason, \
             claimed_until = NULL, \
             held_by = CASE WHEN u.request_seq = c.request_seq THEN NULL ELSE u.held_by END"
            .into(),
        Settle::DryRun => "dry_run_seq = c.request_seq, claimed_until = NULL".into(),
        Settle::Release => {
            "claimed_until = NULL, tried_at = greatest(u.tried_at, clock_timestamp())".into()
        }
    };
    let found = match locate {
        Locate::ByTid => "u.ctid = ANY (ARRAY(SELECT t::tid FROM unnest($5::text[]) t))",
        Locate::ByKey => "u.url_hash = ANY ($1)",
    };
    format!(
        "UPDATE @extschema@.indexnow_urls u SET {set} \
           FROM unnest($1::bytea[], $2::timestamptz[], $3::bigint[], $4::text[]) \
                AS c(url_hash, changed_at, request_seq, reason) \
          WHERE {found} AND u.url_hash = c.url_hash \
         RETURNING u.url_hash"
    )
}

/// A pause ordered by the endpoint: `$1` scope (`*` or a host), `$2` seconds, `$3` status,
/// `$4` note. The latest answer decides, so a shorter Retry-After shortens a pause.
pub const PAUSE: &str =
    "INSERT INTO @extschema@.indexnow_backoff AS b (scope, until, status, note) \
     VALUES ($1, clock_timestamp() + make_interval(secs => $2), $3, $4) \
     ON CONFLICT (scope) DO UPDATE SET until = excluded.until, status = excluded.status, \
                                       note = excluded.note";

/// A pause of all sending that the endpoint ordered through another database of the server
/// (`crate::registry::pause_endpoint`), written here too: `$1` seconds left, `$2` status, `$3`
/// note. It never shortens a pause of this database's own.
pub const ADOPT_PAUSE: &str =
    "INSERT INTO @extschema@.indexnow_backoff AS b (scope, until, status, note) \
     VALUES ('*', clock_timestamp() + make_interval(secs => $1), $2, $3) \
     ON CONFLICT (scope) DO UPDATE SET until = excluded.until, status = excluded.status, \
                                       note = excluded.note \
      WHERE b.until < excluded.until";

/// Whether all sending is paused in this database now (a pause of scope `*`).
pub const ALL_PAUSED: &str = "SELECT EXISTS (SELECT FROM @extschema@.indexnow_backoff \
                               WHERE scope = '*' AND until > clock_timestamp())";

/// How many answers in a row were 429 (since the last answer of another status, within a day):
/// each doubles the next 429's pause (`indexnow_protocol::response::classify`). Requests that got
/// no answer neither count nor break the row.
pub const THROTTLED_IN_A_ROW: &str = "\
    SELECT count(*)::int4 FROM @extschema@.indexnow_pushes \
     WHERE status = 429 AND pushed_at > clock_timestamp() - interval '1 day' \
       AND pushed_at > coalesce((SELECT max(pushed_at) FROM @extschema@.indexnow_pushes \
                                  WHERE status NOT IN (0, 429)), '-infinity')";

/// Whether a pause ran out (and [`PAUSES_OVER`] has something to end).
pub const ANY_PAUSE_OVER: &str =
    "SELECT EXISTS (SELECT FROM @extschema@.indexnow_backoff WHERE until <= clock_timestamp())";

/// The pauses that ran out, taken out of `indexnow_backoff` so that the end of each is reported
/// once (a pause that a new answer just extended is left alone).
/// A row another transaction holds (an `indexnow_push_now()` whose caller has not committed its
/// new pause) is skipped, not waited for: a worker must never block on a caller.
pub const PAUSES_OVER: &str = "DELETE FROM @extschema@.indexnow_backoff WHERE ctid IN ( \
         SELECT ctid FROM @extschema@.indexnow_backoff WHERE until <= clock_timestamp() \
            FOR UPDATE SKIP LOCKED) \
     RETURNING scope, status";

/// One row per request made (or per dry-run decision): `$1` host, `$2` URL count, `$3` status,
/// `$4` duration in seconds, `$5` note, `$6` the URLs. `pushed_at` is when the request started.
pub const RECORD: &str = "INSERT INTO @extschema@.indexnow_pushes \
       (pushed_at, host, url_count, status, duration, note, urls) \
     VALUES (clock_timestamp() - make_interval(secs => $4), $1, $2, $3, \
             make_interval(secs => $4), $5, $6)";

/// The key's state as an answer revealed it (`indexnow_protocol::key_state`): `$1` host, `$2`
/// state, `$3` the answer (its status and note), `$4` the key the request carried. Written when
/// the state or the answer differs from the last, so a host's thousandth 200 writes (and locks)
/// nothing: the conditions are in the locking subquery;
/// `key_state_at` is since when. Not written when the host has another key by now (an answer to
/// the old key says nothing of the new one), nor when another transaction holds the host's row
/// (an `indexnow_add_host()` not committed yet): the state is information, and a sender never
/// waits for a caller.
pub const KEY_STATE: &str = "UPDATE @extschema@.indexnow_hosts u \
        SET key_state = $2, key_state_note = $3, \
            key_state_at = CASE WHEN u.key_state = $2 THEN u.key_state_at \
                                ELSE clock_timestamp() END \
      WHERE u.ctid = (SELECT ctid FROM @extschema@.indexnow_hosts \
                       WHERE host = $1 AND key = $4 \
                         AND (key_state, key_state_note) IS DISTINCT FROM ($2, $3) \
                         FOR UPDATE SKIP LOCKED) \
        AND u.key = $4 AND (u.key_state, u.key_state_note) IS DISTINCT FROM ($2, $3)";

/// History pruning: `$1` = history_days.
pub const PRUNE: &str =
    "DELETE FROM @extschema@.indexnow_pushes WHERE pushed_at < now() - make_interval(days => $1)";

/// The queue rows that no longer need keeping: a removal search engines accepted more than `$1`
/// days ago, with no request since, in no sender's hands, and given by no row (no source). The
/// queue would otherwise keep a row for every URL ever known. Should the URL come back, it is
/// announced as new, as it is to search engines. A row another transaction holds is left for the
/// next time: the prune waits for no one.
pub fn prune_settled_removals() -> String {
    format!(
        "DELETE FROM @extschema@.indexnow_urls WHERE url_hash IN ( \
           SELECT u.url_hash FROM @extschema@.indexnow_urls u \
            WHERE u.request_seq = u.settled_seq AND u.settled_reason IN ({}) \
              AND u.failed_at IS NULL AND u.claimed_until IS NULL \
              AND u.last_pushed_at < now() - make_interval(days => $1) \
              AND NOT EXISTS (SELECT FROM @extschema@.indexnow_sources s \
                               WHERE s.url_hash = u.url_hash) \
              FOR UPDATE SKIP LOCKED) \
         RETURNING 1",
        crate::queue::removal_list()
    )
}

/// Seconds from `$1` until the next row becomes sendable (due, its lease, if any, passed, and the
/// pause of its host, if any, over), for the worker's sleep; NULL when nothing is pending. Same
/// parameters as the claims. A row scheduled for `infinity` is never due: it counts as a day
/// away (the worker sleeps `naptime` at most anyway).
///
/// The rows of a host without a key, disabled or in a copy (held) do not count: they are due and
/// cannot be sent, and counted they made the next due time "now", so the worker slept `naptime`
/// and another host's row due in two seconds waited for it; and a large held backlog was read in
/// full at every wake-up (measured: 0.3 s with 1,000,000 held URLs, most of it JIT compilation).
/// A paused host's rows count from the end of the pause, so that sending resumes when it ends.
pub fn seconds_to_next_due() -> String {
    let undecided = undecided(5);
    let held = crate::hosts::held_sql("h.host", "true");
    let paused = paused_until("h.host");
    // Host by host through the pending index: as `host IN (...)` the planner (which takes a third
    // of the queue to be pending) read the whole pending index instead, 260 ms with a million
    // held URLs against 0.35 ms.
    format!(
        "SELECT extract(epoch FROM min(least(greatest(n.next_at, {paused}), \
                                             $1 + interval '1 day')) - $1)::float8 \
           FROM @extschema@.indexnow_hosts h \
          CROSS JOIN LATERAL ( \
                SELECT min(greatest({DUE_AT_SQL}, claimed_until)) AS next_at \
                  FROM @extschema@.indexnow_urls \
                 WHERE host = h.host AND {PENDING_SQL} AND {undecided}) n \
          WHERE {held} IS NULL AND n.next_at IS NOT NULL"
    )
}

/// The rows that gave the URLs `$1` (bytea[]), per watch: `watch_id`, their keys (jsonb).
pub fn sources_of(ext: &str) -> String {
    format!(
        "SELECT watch_id, pg_catalog.jsonb_agg(row_key) FROM {ext}.indexnow_sources \
          WHERE url_hash = ANY ($1) GROUP BY watch_id"
    )
}

/// Sets the lease of the rows `$1` (bytea[]) to `$2` seconds from now, or removes it (NULL), and
/// with `$3` notes `tried_at` (re-read pages about to be sent: see [`claim_with_lease`]).
pub fn lease_again() -> String {
    "UPDATE @extschema@.indexnow_urls \
        SET claimed_until = clock_timestamp() + make_interval(secs => $2), \
            tried_at = CASE WHEN $3 THEN clock_timestamp() ELSE tried_at END \
      WHERE url_hash = ANY ($1)"
        .into()
}

/// Of the claimed rows `$1` (bytea[]) with the request each carried `$2` (bigint[]), those still
/// as claimed: the same request, pending, its time come.
/// (Each row looked up by its key alone, `LATERAL ... OFFSET 0`, and the rest compared after: as
/// a join, or with the pending condition beside the key, which the pending index also serves,
/// the planner read the whole queue or all of its pending rows for each claimed row when the
/// statistics took the queue for empty: see `crate::derive::statements`.)
pub const STILL_AS_CLAIMED: &str = "SELECT u.url_hash \
       FROM unnest($1::bytea[], $2::bigint[]) AS c(url_hash, request_seq) \
      CROSS JOIN LATERAL (SELECT u.url_hash, u.request_seq, u.settled_seq, u.available_at \
                            FROM @extschema@.indexnow_urls u \
                           WHERE u.url_hash = c.url_hash OFFSET 0) u \
      WHERE u.request_seq = c.request_seq AND u.request_seq > u.settled_seq \
        AND u.available_at <= clock_timestamp()";

#[cfg(test)]
mod tests {
    use super::*;

    /// The statements a sending pass runs on the queue, from the claim to settling the answer,
    /// pinned by a golden file (`crate::golden`). (The statements that read `indexnow_hosts`
    /// carry this server's system identifier, which only a running server has: the pg_tests
    /// cover them.)
    #[test]
    fn the_claim_and_settle_statements_are_the_golden_ones() {
        let mut statements: Vec<(String, String)> = vec![
            ("claim_with_lease".into(), claim_with_lease()),
            (
                "claim_by_reading (own requests)".into(),
                claim_by_reading(true),
            ),
            ("claim_by_reading".into(), claim_by_reading(false)),
            ("lease_again".into(), lease_again()),
            ("still_as_claimed".into(), STILL_AS_CLAIMED.into()),
        ];
        for (settled, s) in [
            ("accepted", Settle::Accepted),
            ("refused", Settle::Refused),
            ("dry_run", Settle::DryRun),
            ("release", Settle::Release),
        ] {
            for (by, l) in [("tid", Locate::ByTid), ("key", Locate::ByKey)] {
                statements.push((format!("settle {settled} by {by}"), settle(s, l)));
            }
        }
        statements.extend([("prune_settled_removals".into(), prune_settled_removals())]);
        let named: Vec<(&str, &str)> = statements
            .iter()
            .map(|(n, s)| (n.as_str(), s.as_str()))
            .collect();
        crate::golden::check(
            "sending.sql",
            &crate::golden::file("src/send/sql.rs", "every sending pass", &named),
        );
    }
}
