//! Runs the capture statements of one trigger event: for each watch of the table (or those the
//! UPDATE gate chose), the set-based statement `indexnow_watch()` generated for the event
//! (`super::plan`), over the event's transition tables.
//!
//! Each statement runs
//! - with the watch's search_path (its `visible` and `url_sql` expressions were written for it),
//!   set for the rest of the trigger call only: `indexnow_capture()`'s own `SET search_path`
//!   puts the caller's back when it returns;
//! - in a subtransaction of its own: a statement that fails (a `url_sql` that raises, a watch left
//!   stale by `ALTER TABLE`) is rolled back alone and reported as a WARNING, and the user's write
//!   succeeds (spec behaviour 10). A cancel (`statement_timeout`, `pg_cancel_backend`) is not
//!   swallowed: it ends the user's statement as it would have without indexnow;
//! - from a plan kept per backend when the event wrote few rows. A single-row save is what a site
//!   does most, and planning a capture statement took longer than running it (0.6 ms against
//!   0.3 ms measured). A bulk statement is planned afresh each time instead: a plan is made for the
//!   transition tables' size at planning time, and one made for a single row (nested loops) must
//!   not meet a million.
//!
//! This was a plpgsql function (`EXECUTE` in an exception block) until the plans were kept; the
//! rules above are the ones it had.

use super::gate::own_schema;
use super::plan::quote_ident;
use crate::{kept, subtransaction};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// At most this many rows in each transition table: the statement's plan is kept and reused.
const KEEP_PLAN_ROWS: i64 = 100;

/// The watches of the table (`$1`): what the gate compares, and each event's statement.
const WATCHES_SQL: &str = "SELECT ignore, pattern, search_path, on_insert, on_update, \
            on_delete, on_truncate \
       FROM indexnow_watches WHERE tbl = $1::pg_catalog.regclass ORDER BY id";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Event {
    Insert,
    Update,
    Delete,
    Truncate,
}

impl Event {
    pub fn of(data: &pg_sys::TriggerData) -> Event {
        match data.tg_event & pg_sys::TRIGGER_EVENT_OPMASK {
            pg_sys::TRIGGER_EVENT_INSERT => Event::Insert,
            pg_sys::TRIGGER_EVENT_UPDATE => Event::Update,
            pg_sys::TRIGGER_EVENT_DELETE => Event::Delete,
            _ => Event::Truncate,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Event::Insert => "INSERT",
            Event::Update => "UPDATE",
            Event::Delete => "DELETE",
            Event::Truncate => "TRUNCATE",
        }
    }

    /// Its column in [`WATCHES_SQL`]'s result (1-based).
    fn column(self) -> usize {
        match self {
            Event::Insert => 4,
            Event::Update => 5,
            Event::Delete => 6,
            Event::Truncate => 7,
        }
    }
}

/// A watch of the table, and its statement for this event.
pub struct Watch {
    /// The columns it ignores.
    pub ignore: Vec<String>,
    pattern: String,
    search_path: String,
    sql: String,
}

/// Runs the statements of `watches` for this trigger event. Wakes the workers at commit when a
/// statement ran.
pub fn run(data: &pg_sys::TriggerData, watches: &[Watch]) {
    let event = Event::of(data);
    // SAFETY: the transition tables, when there are any, belong to this trigger call.
    let rows = unsafe {
        [data.tg_oldtable, data.tg_newtable]
            .iter()
            .filter(|t| !t.is_null())
            .map(|t| pg_sys::tuplestore_tuple_count(*t))
            .max()
            .unwrap_or(0)
    };
    let keep_plan = rows <= KEEP_PLAN_ROWS;
    // SAFETY: a trigger's relation is open for the duration of the call.
    let (table_schema, table) = unsafe { relation_name(data.tg_relation) };
    let ran = Spi::connect_mut(|client| {
        // The transition tables become visible to the statements as indexnow_old and indexnow_new.
        // SAFETY: the trigger data outlives this connection.
        let registered =
            unsafe { pg_sys::SPI_register_trigger_data(std::ptr::from_ref(data).cast_mut()) };
        if registered < 0 {
            error!("indexnow: could not register the transition tables ({registered})");
        }
        let mut ran = false;
        for watch in watches {
            kept::set_local_search_path(client, &watch.search_path);
            match subtransaction::run(|| execute(client, watch, keep_plan)) {
                Ok(()) => ran = true,
                Err(message) => ErrorReport::new(
                    PgSqlErrorCode::ERRCODE_WARNING,
                    format!(
                        "indexnow: {} on {table_schema}.{table} was not captured for {}: {message}",
                        event.name(),
                        watch.pattern
                    ),
                    "indexnow_capture",
                )
                .set_hint(
                    "The write itself succeeded. Fix the watch with indexnow_watch(), then run \
                     indexnow_reconcile() to catch up.",
                )
                .report(PgLogLevel::WARNING),
            }
        }
        ran
    });
    if ran {
        // The workers look at the queue when (and if) this transaction commits. Whether the
        // statement queued anything is not known here: its upsert is a CTE, and the row count a
        // statement reports is its last part's (the cancellations). Waking when nothing was queued
        // (a draft saved) costs the worker one idle pass, under a millisecond.
        crate::worker::worker_at_commit();
    }
}

/// The watches of the trigger's table, in the order they were made, with their statements for
/// this event.
pub fn watches(data: &pg_sys::TriggerData) -> Vec<Watch> {
    let event = Event::of(data);
    let schema = own_schema(data);
    // SAFETY: a trigger's relation is open for the duration of the call.
    let relid = unsafe { (*data.tg_relation).rd_id };
    // Named with its schema: a kept plan would otherwise look for the table where the extension
    // was when it was planned.
    let sql = WATCHES_SQL.replace(
        "FROM indexnow_watches",
        &format!("FROM {}.indexnow_watches", quote_ident(&schema)),
    );
    Spi::connect(|client| {
        kept::read(client, &sql, &[relid.into()])?
            .map(|row| {
                Ok(Watch {
                    ignore: row.get(1)?.unwrap_or_default(),
                    pattern: row.get(2)?.unwrap_or_default(),
                    search_path: row.get(3)?.unwrap_or_default(),
                    sql: row.get(event.column())?.unwrap_or_default(),
                })
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading the watches of the table: {e}"))
}

/// Runs the statement; raises on any error.
fn execute(client: &mut SpiClient<'_>, watch: &Watch, keep_plan: bool) {
    let result = if keep_plan {
        kept::write(client, &watch.sql, &[]).map(|_| ())
    } else {
        client.update(watch.sql.as_str(), None, &[]).map(|_| ())
    };
    result.unwrap_or_else(|e| error!("{e}"))
}

/// The schema and name of the trigger's table, for messages.
unsafe fn relation_name(relation: pg_sys::Relation) -> (String, String) {
    let name =
        |p: *const std::ffi::c_char| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
    (
        name(pg_sys::get_namespace_name(
            (*(*relation).rd_rel).relnamespace,
        )),
        name((*(*relation).rd_rel).relname.data.as_ptr()),
    )
}
