//! Every setting of the extension: name, default, unit, range and who may change it.
//!
//! All settings but `indexnow.workers_per_database` and `indexnow.server_enabled` (`SIGHUP`, see
//! `register`) are `SUSET`: a
//! superuser sets them in `postgresql.conf`, `ALTER SYSTEM`, `ALTER DATABASE ... SET` or a
//! session, and `pg_reload_conf()` makes the worker take them up. A
//! role that may only write content tables cannot change how (or whether) URLs are sent; on
//! PostgreSQL 15 a superuser can hand one setting to a role with `GRANT SET ON PARAMETER`.
//! `indexnow.endpoint` decides where keys are sent, so it is also hidden from roles that are
//! neither superusers nor members of `pg_read_all_settings` (PostgreSQL lets those read it).

use crate::queue::due::DueRule;
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::CString;
use std::time::Duration;

pub const DEFAULT_ENDPOINT: &std::ffi::CStr = c"https://api.indexnow.org/indexnow";

pub static ENABLED: GucSetting<bool> = GucSetting::<bool>::new(true);
pub static SERVER_ENABLED: GucSetting<bool> = GucSetting::<bool>::new(true);
pub static DRY_RUN: GucSetting<bool> = GucSetting::<bool>::new(false);
pub static ENDPOINT: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(DEFAULT_ENDPOINT));
pub static DEBOUNCE_S: GucSetting<i32> = GucSetting::<i32>::new(120);
pub static MIN_GAP_S: GucSetting<i32> = GucSetting::<i32>::new(3600);
pub static REPEAT_AFTER_S: GucSetting<i32> = GucSetting::<i32>::new(86400);
pub static BATCH_SIZE: GucSetting<i32> = GucSetting::<i32>::new(10_000);
pub static NAPTIME_MS: GucSetting<i32> = GucSetting::<i32>::new(5_000);
pub static HTTP_TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(30_000);
pub static BACKOFF_THROTTLED_S: GucSetting<i32> = GucSetting::<i32>::new(3600);
pub static BACKOFF_UNAVAILABLE_S: GucSetting<i32> = GucSetting::<i32>::new(900);
pub static HISTORY_DAYS: GucSetting<i32> = GucSetting::<i32>::new(30);
pub static WORKERS_PER_DATABASE: GucSetting<i32> = GucSetting::<i32>::new(1);
pub static DERIVE_AT_WRITE: GucSetting<i32> = GucSetting::<i32>::new(0);
pub static MAX_IN_FLIGHT: GucSetting<i32> = GucSetting::<i32>::new(32);
pub static TRACK_COLUMNS: GucSetting<bool> = GucSetting::<bool>::new(false);
pub static DERIVING_FOR: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// The name of [`DERIVING_FOR`], which the derivation's statements read.
pub const DERIVING_FOR_NAME: &str = "indexnow.deriving_for";

/// The most `indexnow.max_in_flight` allows: each request in flight is a thread and a connection.
pub const MAX_MAX_IN_FLIGHT: i32 = 256;

/// The most rows `indexnow.derive_at_write` allows: one change set's worth.
pub const MAX_DERIVE_AT_WRITE: i32 = 10_000;

/// The most `indexnow.workers_per_database` allows: more senders than cores only compete.
pub const MAX_WORKERS_PER_DATABASE: i32 = 8;

const DAY_S: i32 = 86_400;
const YEAR_S: i32 = 366 * DAY_S;

/// Registers every setting. Called once per process from `_PG_init`.
pub fn register() {
    use GucContext::Suset;
    let none = GucFlags::default();
    let seconds = GucFlags::UNIT_S;
    let millis = GucFlags::UNIT_MS;

    GucRegistry::define_bool_guc(
        c"indexnow.enabled",
        c"Send due URLs. Off pauses sending; queueing goes on.",
        c"",
        &ENABLED,
        Suset,
        none,
    );
    // The switch of the whole server, which no database, role or session can turn back on: a
    // physical copy (pg_basebackup, PITR) started the first time with `-c
    // indexnow.server_enabled=off` sends nothing, whatever `ALTER DATABASE ... SET
    // indexnow.enabled = on` came with its data (a SUSET setting of a database or a role wins
    // over the command line; PostgreSQL refuses a SIGHUP one in ALTER DATABASE, ALTER ROLE and
    // SET, and the command line wins over postgresql.conf and postgresql.auto.conf).
    GucRegistry::define_bool_guc(
        c"indexnow.server_enabled",
        c"Send due URLs from this server. Off pauses sending in every database; no database, role or session setting can turn it on.",
        c"",
        &SERVER_ENABLED,
        GucContext::Sighup,
        none,
    );
    GucRegistry::define_bool_guc(
        c"indexnow.dry_run",
        c"Decide and record every push in indexnow_pushes (note dry_run), but make no HTTP request.",
        c"",
        &DRY_RUN,
        Suset,
        none,
    );
    GucRegistry::define_string_guc(
        c"indexnow.endpoint",
        c"The IndexNow endpoint URL that requests are POSTed to.",
        c"Keys are sent there, so only superusers may set or see it.",
        &ENDPOINT,
        Suset,
        GucFlags::SUPERUSER_ONLY,
    );
    GucRegistry::define_bool_guc(
        c"indexnow.track_columns",
        c"Count, per watched table, which columns single-row UPDATEs change and how many of them were announced: indexnow_column_changes().",
        c"Compares every column of the row the UPDATE changed (the UPDATE gate stops at the first difference), in the writing session.",
        &TRACK_COLUMNS,
        Suset,
        none,
    );
    GucRegistry::define_int_guc(
        c"indexnow.derive_at_write",
        c"A statement that wrote at most this many rows of a watched table (at READ COMMITTED) is turned into queue requests by the statement itself; larger ones, and 0, are recorded and derived after commit.",
        c"",
        &DERIVE_AT_WRITE,
        0,
        MAX_DERIVE_AT_WRITE,
        Suset,
        none,
    );
    GucRegistry::define_int_guc(
        c"indexnow.debounce",
        c"A URL must be quiet (no content change) this long before it is sent.",
        c"",
        &DEBOUNCE_S,
        0,
        DAY_S,
        Suset,
        seconds,
    );
    GucRegistry::define_int_guc(
        c"indexnow.min_gap",
        c"A URL whose content changed again is sent at most once in this interval.",
        c"",
        &MIN_GAP_S,
        0,
        YEAR_S,
        Suset,
        seconds,
    );
    GucRegistry::define_int_guc(
        c"indexnow.repeat_after",
        c"Unchanged content queued again (reason refresh) is not re-sent within this interval.",
        c"",
        &REPEAT_AFTER_S,
        0,
        YEAR_S,
        Suset,
        seconds,
    );
    GucRegistry::define_int_guc(
        c"indexnow.batch_size",
        c"URLs per POST (the protocol allows at most 10000).",
        c"",
        &BATCH_SIZE,
        1,
        indexnow_protocol::MAX_URLS_PER_REQUEST as i32,
        Suset,
        none,
    );
    GucRegistry::define_int_guc(
        c"indexnow.max_in_flight",
        c"How many requests one sender keeps open at once, each for another host.",
        c"One host's requests go one after another (its answers apply in order); requests for \
          different hosts overlap, so a thousand hosts are not sent for one at a time.",
        &MAX_IN_FLIGHT,
        1,
        MAX_MAX_IN_FLIGHT,
        Suset,
        none,
    );
    GucRegistry::define_int_guc(
        c"indexnow.naptime",
        c"Longest time the worker sleeps between passes.",
        c"",
        &NAPTIME_MS,
        10,
        3_600_000,
        Suset,
        millis,
    );
    GucRegistry::define_int_guc(
        c"indexnow.http_timeout",
        c"Time limit of one request to the endpoint.",
        c"",
        &HTTP_TIMEOUT_MS,
        100,
        600_000,
        Suset,
        millis,
    );
    GucRegistry::define_int_guc(
        c"indexnow.backoff_throttled",
        c"Pause of all sending after a 429 answer, unless it carries Retry-After.",
        c"",
        &BACKOFF_THROTTLED_S,
        0,
        7 * DAY_S,
        Suset,
        seconds,
    );
    GucRegistry::define_int_guc(
        c"indexnow.backoff_unavailable",
        c"Pause after a 5xx answer, a timeout, no connection, or 403 SiteVerificationNotCompleted.",
        c"",
        &BACKOFF_UNAVAILABLE_S,
        0,
        7 * DAY_S,
        Suset,
        seconds,
    );
    GucRegistry::define_int_guc(
        c"indexnow.history_days",
        c"indexnow_pushes rows older than this many days are pruned.",
        c"",
        &HISTORY_DAYS,
        1,
        36_500,
        Suset,
        none,
    );
    // The launcher reads this one, and it is connected to no database: so it is a server-wide
    // setting (postgresql.conf or ALTER SYSTEM, then a reload), not one a database or a session
    // can set.
    GucRegistry::define_int_guc(
        c"indexnow.workers_per_database",
        c"How many workers send for each database where indexnow is installed.",
        c"They claim different rows (FOR UPDATE SKIP LOCKED with a lease) and start with \
          different hosts: a large backlog drains faster on a machine with spare cores.",
        &WORKERS_PER_DATABASE,
        1,
        MAX_WORKERS_PER_DATABASE,
        GucContext::Sighup,
        none,
    );
    // Not a setting for people: what a derivation of change sets tells its own statements, the
    // transaction that recorded them (`crate::derive`), so that the requests it queues are held
    // until that transaction's other change sets are derived too. Set around a derivation only.
    GucRegistry::define_string_guc(
        c"indexnow.deriving_for",
        c"Internal: the transaction whose change sets are being derived.",
        c"",
        &DERIVING_FOR,
        GucContext::Userset,
        GucFlags::NO_SHOW_ALL | GucFlags::NO_RESET_ALL | GucFlags::DISALLOW_IN_FILE,
    );
    // Any other `indexnow.` name is a typo, refused with a WARNING rather than kept as a
    // placeholder: `-c indexnow.server_enable=off` at a copy's first start must not pass in
    // silence while the copy sends.
    // SAFETY: called once per process, after the settings above are defined, as extensions do.
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"indexnow".as_ptr()) };
}

/// Whether this process sends: `indexnow.server_enabled` and `indexnow.enabled` both on.
pub fn sending_on() -> bool {
    SERVER_ENABLED.get() && ENABLED.get()
}

/// Why this process does not send, as `indexnow_status()` and NOTICEs say it; `None` when it
/// does.
pub fn sending_off_because() -> Option<&'static str> {
    if !SERVER_ENABLED.get() {
        Some("indexnow.server_enabled is off")
    } else if !ENABLED.get() {
        Some("indexnow.enabled is off")
    } else {
        None
    }
}

/// The due rule with the settings now in force.
pub fn due_rule() -> DueRule {
    DueRule {
        debounce: seconds(DEBOUNCE_S.get()),
        min_gap: seconds(MIN_GAP_S.get()),
        repeat_after: seconds(REPEAT_AFTER_S.get()),
    }
}

fn seconds(s: i32) -> Duration {
    Duration::from_secs(s.max(0) as u64)
}

/// Runs `f` with `settings`, and puts every setting back after it, those `f` changed included (a
/// `set_config(..., false)` in a watch's expression does not outlive it), as PostgreSQL does
/// around `REFRESH MATERIALIZED VIEW`. An ERROR inside unwinds them with the (sub)transaction it
/// aborts.
pub fn with_settings<R>(settings: &[(&str, String)], f: impl FnOnce() -> R) -> R {
    // SAFETY: a GUC nest level is opened and closed around `f` on this backend's own state.
    let level = unsafe { pg_sys::NewGUCNestLevel() };
    for (name, value) in settings {
        let (name, value) = (
            CString::new(*name).expect("a setting's name"),
            CString::new(value.as_str()).unwrap_or_else(|_| error!("indexnow: a NUL in {name}")),
        );
        // SAFETY: both strings live across the call; errors are raised as ERRORs.
        unsafe {
            pg_sys::set_config_option(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                pgrx::PgLogLevel::ERROR as i32,
                false,
            );
        }
    }
    let r = f();
    // SAFETY: closes the level opened above, undoing everything set at it.
    unsafe { pg_sys::AtEOXact_GUC(false, level) };
    r
}
