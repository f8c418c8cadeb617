//! Which columns the saves of a watched table change, for a site owner choosing a watch's
//! `ignore` (`indexnow_column_changes()`). With `indexnow.track_columns` on, the capture trigger
//! notes in the change set of a single-row UPDATE (a CMS's save) every column whose value it
//! changed; when that change set is derived (alone, never merged with others, so that what the
//! derivation queued is this save's), each of its columns counts one update, one update alone
//! when it was the only one, and one announcement when the derivation queued a request for the
//! row (a page announced, moved or removed). Written by the deriver, never by the save.
//!
//! Not counted: a save whose changes are all in ignored columns (the UPDATE gate records nothing
//! for it), a statement of several rows, and a save derived in its statement
//! (`indexnow.derive_at_write`).

use crate::plan_cache;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Counts one derived save of `table` that changed `columns`, and whether it was announced.
pub fn count(ext: &str, table: pg_sys::Oid, columns: &[String], announced: bool) {
    if columns.is_empty() {
        return;
    }
    let sql = format!(
        "INSERT INTO {ext}.indexnow_column_changes AS c \
           (tbl, column_name, updates, alone, announced, since, last_at) \
         SELECT $1::pg_catalog.oid::pg_catalog.regclass, col, 1, \
                CASE WHEN pg_catalog.cardinality($2) = 1 THEN 1 ELSE 0 END, \
                CASE WHEN $3 THEN 1 ELSE 0 END, pg_catalog.now(), pg_catalog.now() \
           FROM pg_catalog.unnest($2::pg_catalog.text[]) col \
         ON CONFLICT (tbl, column_name) DO UPDATE SET updates = c.updates + 1, \
            alone = c.alone + excluded.alone, announced = c.announced + excluded.announced, \
            last_at = excluded.last_at"
    );
    Spi::connect_mut(|client| {
        plan_cache::write(
            client,
            &sql,
            &[table.into(), columns.to_vec().into(), announced.into()],
        )
        .map(|_| ())
    })
    .unwrap_or_else(|e| error!("indexnow: counting the columns a save changed: {e}"));
}
