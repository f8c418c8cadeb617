//! `indexnow_status()`: what is pending, due, failed and paused, per host, and what the worker of
//! this database is doing. With no host and nothing queued it returns one row whose `host` is
//! NULL, so the worker's state is always visible. It counts with the same due rule the worker sends by,
//! and says why a host sends nothing (`held`), when its next URL can go out, how long the URL due
//! the longest has waited (what an alert watches), whether sending is a dry run, what the
//! endpoint's answers revealed of the host's key, and what the capture triggers recorded and no
//! derivation has made into queue rows yet (how many rows, since when), and which watched tables
//! are written where the capture triggers cannot see. It derives nothing
//! itself: a scrape answers in milliseconds whatever is recorded (`indexnow_derive()` derives
//! first, for whoever wants the queue as it will be).

use crate::guc;
use crate::queue::due::{DUE_AT_SQL, DUE_SQL, FAILED_SQL, PENDING_SQL};
use pgrx::prelude::*;

/// The arguments `$1`..`$6` of a reader that counts as the database's workers send: `now`, the
/// due rule (`$2`..`$4`, `DueRule::sql_args`), whether sending is on and whether it is a dry run
/// for those workers (`worker::sending_for_status`). `indexnow_status()`, `indexnow_explain()`
/// and `indexnow_coverage()` pass them, and add their own after.
pub fn reader_args(now: TimestampWithTimeZone) -> Vec<pgrx::datum::DatumWithOid<'static>> {
    let (enabled, dry_run) = crate::worker::sending_for_status();
    let [debounce, min_gap, repeat_after] = guc::due_rule().sql_args();
    vec![
        now.into(),
        debounce.into(),
        min_gap.into(),
        repeat_after.into(),
        enabled.into(),
        dry_run.into(),
    ]
}

/// One row of `indexnow_status()`, as its columns are named.
#[derive(Default)]
struct HostStatus {
    host: Option<String>,
    has_key: bool,
    enabled: bool,
    pending: i64,
    due_now: i64,
    failed: i64,
    next_due_at: Option<TimestampWithTimeZone>,
    last_push_at: Option<TimestampWithTimeZone>,
    last_status: Option<i32>,
    backoff_until: Option<TimestampWithTimeZone>,
    held: Option<String>,
    worker: String,
    oldest_due_age: Option<Interval>,
    dry_run: bool,
    key_state: Option<String>,
    key_state_at: Option<TimestampWithTimeZone>,
    key_state_note: Option<String>,
    oldest_change_age: Option<Interval>,
    changes_waiting: i64,
    capture_gaps: Option<String>,
}

type StatusRow = (
    Option<String>,
    bool,
    bool,
    i64,
    i64,
    i64,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<i32>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    String,
    Option<Interval>,
    bool,
    Option<String>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Option<Interval>,
    i64,
    Option<String>,
);

impl HostStatus {
    /// In the order of the function's columns.
    fn into_row(self) -> StatusRow {
        (
            self.host,
            self.has_key,
            self.enabled,
            self.pending,
            self.due_now,
            self.failed,
            self.next_due_at,
            self.last_push_at,
            self.last_status,
            self.backoff_until,
            self.held,
            self.worker,
            self.oldest_due_age,
            self.dry_run,
            self.key_state,
            self.key_state_at,
            self.key_state_note,
            self.oldest_change_age,
            self.changes_waiting,
            self.capture_gaps,
        )
    }
}

#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn indexnow_status() -> TableIterator<
    'static,
    (
        name!(host, Option<String>),
        name!(has_key, bool),
        name!(enabled, bool),
        name!(pending, i64),
        name!(due_now, i64),
        name!(failed, i64),
        name!(next_due_at, Option<TimestampWithTimeZone>),
        name!(last_push_at, Option<TimestampWithTimeZone>),
        name!(last_status, Option<i32>),
        name!(backoff_until, Option<TimestampWithTimeZone>),
        name!(held, Option<String>),
        name!(worker, String),
        name!(oldest_due_age, Option<Interval>),
        name!(dry_run, bool),
        name!(key_state, Option<String>),
        name!(key_state_at, Option<TimestampWithTimeZone>),
        name!(key_state_note, Option<String>),
        name!(oldest_change_age, Option<Interval>),
        name!(changes_waiting, i64),
        name!(capture_gaps, Option<String>),
    ),
> {
    // The result's columns are those of this library's release: refused on a database whose
    // extension SQL is another release's (between installing a release and ALTER EXTENSION UPDATE).
    crate::extension::require_current_version();
    // What the capture triggers recorded is not derived here: it is counted, with the age of the
    // oldest change (monitoring answers at once, however much is recorded or however slow a
    // watch's expressions; `SELECT indexnow_derive()` first derives it all, for a reader that
    // wants the queue as it will be).
    let ext = crate::extension::schema();
    let (changes_waiting, oldest_change_age) = crate::derive::change_sets::waiting_summary(&ext);
    let capture_gaps = crate::capture::placement::gaps(&ext);
    let worker = crate::worker::state_for_status();
    let (_, dry_run) = crate::worker::sending_for_status();
    // `$5`: whether `indexnow.enabled` is on for the database's workers.
    let held = crate::hosts::held_sql("n.host", "$5");
    let paused = crate::send::sql::paused_until("n.host");
    // In a dry run, what a dry run has decided on is not due again (the sender skips it).
    let undecided = crate::send::sql::undecided(6);
    // due_now: what a sender may take now — due, and not in a sender's hands (a live lease).
    let claimable = crate::send::sql::claimable_with_dry_run_in(6);
    // The query is in status.sql; its comments say what each {name} is, and are left out.
    let sql = include_str!("status.sql")
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("{pending}", PENDING_SQL)
        .replace("{due}", DUE_SQL)
        .replace("{due_at}", DUE_AT_SQL)
        .replace("{failed}", FAILED_SQL)
        .replace("{claimable}", &claimable)
        .replace("{undecided}", &undecided)
        .replace("{paused}", &paused)
        .replace("{held}", &held);
    let rows: Vec<HostStatus> = Spi::connect(|client| {
        crate::plan_cache::read(client, &sql, &reader_args(now()))?
            .map(|r| {
                Ok(HostStatus {
                    host: r.get_by_name("host")?,
                    has_key: r.get_by_name("has_key")?.unwrap_or(false),
                    enabled: r.get_by_name("enabled")?.unwrap_or(false),
                    pending: r.get_by_name("pending")?.unwrap_or(0),
                    due_now: r.get_by_name("due_now")?.unwrap_or(0),
                    failed: r.get_by_name("failed")?.unwrap_or(0),
                    next_due_at: r.get_by_name("next_due_at")?,
                    last_push_at: r.get_by_name("last_push_at")?,
                    last_status: r.get_by_name("last_status")?,
                    backoff_until: r.get_by_name("backoff_until")?,
                    held: r.get_by_name("held")?,
                    worker: worker.clone(),
                    oldest_due_age: r.get_by_name("oldest_due_age")?,
                    dry_run,
                    key_state: r.get_by_name("key_state")?,
                    key_state_at: r.get_by_name("key_state_at")?,
                    key_state_note: r.get_by_name("key_state_note")?,
                    oldest_change_age,
                    changes_waiting,
                    capture_gaps: capture_gaps.clone(),
                })
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: status query failed: {e}"));
    let rows = if rows.is_empty() {
        // No host and nothing queued yet: still one row, so the worker's state can be seen.
        vec![HostStatus {
            worker,
            dry_run,
            oldest_change_age,
            changes_waiting,
            capture_gaps,
            ..Default::default()
        }]
    } else {
        rows
    };
    let rows: Vec<StatusRow> = rows.into_iter().map(HostStatus::into_row).collect();
    TableIterator::new(rows)
}
