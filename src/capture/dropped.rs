//! A watched or related table dropped (`DROP TABLE`, `DROP SCHEMA ... CASCADE`, `DROP OWNED`),
//! seen by the `sql_drop` event trigger (sql/capture.sql).
//!
//! A dropped watched table takes every page it gave with it: each URL its watches gave that
//! search engines were told of, and that no other watch gives, is queued as `deleted`; the
//! others' requests are cancelled. Its watches, their sources and its recorded change sets go
//! (there is no table to derive them from, and a table made again under the same name is a new
//! table, watched anew). A dropped related table leaves the watches that read it without the
//! rows they read: they stay (the watched table's pages are still there), with a WARNING saying
//! how to mend them, and their relation to the dropped table goes.

use super::placement;
use crate::derive::vacate_inactive;
use crate::queue::Reason;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;

/// For the event trigger: `table` (named `identity`) was dropped.
#[pg_extern(name = "_indexnow_table_dropped", volatile, parallel_unsafe)]
fn indexnow_table_dropped(table: pg_sys::Oid, identity: &str) {
    let ext = crate::extension::schema();
    let read_by = related_watches(&ext, table);
    if !read_by.is_empty() {
        for (pattern, watched) in &read_by {
            ErrorReport::new(
                PgSqlErrorCode::ERRCODE_WARNING,
                format!(
                    "indexnow: the watch of {watched} for {pattern} read the dropped table \
                     {identity}: writes to {watched} are kept until it can derive them"
                ),
                "indexnow",
            )
            .set_hint(
                "Make the watch again with indexnow_watch() without the dropped table (it \
                 catches up by itself), or end it with indexnow_unwatch().",
            )
            .report(PgLogLevel::WARNING);
        }
        run(
            &format!(
                "DELETE FROM {ext}.indexnow_relations \
                  WHERE tbl = $1::pg_catalog.oid::pg_catalog.regclass"
            ),
            table,
        );
    }
    let watched = crate::plan_cache::get_one::<bool>(
        &format!(
            "SELECT EXISTS (SELECT FROM {ext}.indexnow_watches \
                             WHERE tbl = $1::pg_catalog.oid::pg_catalog.regclass)"
        ),
        &[table.into()],
    )
    .unwrap_or_else(|e| error!("indexnow: reading the watches of a dropped table: {e}"));
    if watched != Some(true) {
        return;
    }
    run(
        &format!(
            "UPDATE {ext}.indexnow_watches SET active = false \
              WHERE tbl = $1::pg_catalog.oid::pg_catalog.regclass AND active"
        ),
        table,
    );
    // (read before the watches are vacated, with their relations)
    let related = super::related::tables_of_ended_watches(&ext, table);
    run(
        &format!("DELETE FROM {ext}.indexnow_changes WHERE tbl = $1"),
        table,
    );
    let removed = vacate_inactive(&ext, table, Reason::Deleted);
    placement::take_off_unneeded(&ext, &placement::trees(&related));
    // (and the tables it was below: the catalog no longer says which)
    placement::take_off_all_unneeded(&ext);
    notice!(
        "indexnow: {identity} was dropped: {removed} of its URLs search engines were told of are \
         queued as deleted, and its watches are gone"
    );
    crate::wake::worker_at_commit();
}

/// The watches of other tables that read `table` as a related table: (pattern, watched table);
/// not those whose table goes in the same statement (their own drop ends them).
fn related_watches(ext: &str, table: pg_sys::Oid) -> Vec<(String, String)> {
    Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT w.pattern, w.tbl::pg_catalog.text FROM {ext}.indexnow_relations r \
                       JOIN {ext}.indexnow_watches w ON w.id = r.watch_id \
                      WHERE r.tbl = $1::pg_catalog.oid::pg_catalog.regclass AND w.active \
                        AND w.tbl <> r.tbl \
                        AND EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid = w.tbl) \
                      ORDER BY w.id"
                ),
                None,
                &[table.into()],
            )?
            .map(|r| Ok((r.get(1)?.unwrap_or_default(), r.get(2)?.unwrap_or_default())))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading the watches of a dropped table: {e}"))
}

fn run(sql: &str, table: pg_sys::Oid) {
    Spi::run_with_args(sql, &[table.into()])
        .unwrap_or_else(|e| error!("indexnow: following a dropped table: {e}"));
}
