//! The capture triggers: four statement-level triggers, all calling `_indexnow_capture()`
//! (`super::trigger_function`). Which tables carry them is decided in `super::placement`.

use pgrx::prelude::*;

pub const EVENTS: [(&str, &str, &str); 4] = [
    (
        "indexnow_capture_insert",
        "INSERT",
        "REFERENCING NEW TABLE AS indexnow_new",
    ),
    (
        "indexnow_capture_update",
        "UPDATE",
        "REFERENCING OLD TABLE AS indexnow_old NEW TABLE AS indexnow_new",
    ),
    (
        "indexnow_capture_delete",
        "DELETE",
        "REFERENCING OLD TABLE AS indexnow_old",
    ),
    ("indexnow_capture_truncate", "TRUNCATE", ""),
];

fn spi<T>(what: &str, r: Result<T, pgrx::spi::Error>) -> T {
    r.unwrap_or_else(|e| error!("indexnow: {what}: {e}"))
}

pub fn table_qualified(oid: pg_sys::Oid) -> String {
    spi(
        "naming a table",
        Spi::get_one_with_args::<String>(
            "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c \
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
            &[oid.into()],
        ),
    )
    .unwrap_or_default()
}

/// Whether `table` has the capture triggers. A watched table without them is not being watched
/// yet: a restore (pg_restore alters the tables, and attaches partitions, before it makes their
/// triggers), or triggers dropped by hand.
pub fn on(table: pg_sys::Oid) -> bool {
    crate::plan_cache::get_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_trigger \
                         WHERE tgrelid = $1 AND tgname = 'indexnow_capture_insert')",
        &[table.into()],
    )
    .unwrap_or_else(|e| error!("indexnow: reading a table's triggers: {e}"))
        == Some(true)
}

/// The tables that carry the capture triggers.
pub fn carried() -> Vec<pg_sys::Oid> {
    spi(
        "listing the tables with capture triggers",
        Spi::connect(|client| {
            client
                .select(
                    "SELECT DISTINCT t.tgrelid FROM pg_catalog.pg_trigger t \
                      WHERE t.tgname = 'indexnow_capture_insert'",
                    None,
                    &[],
                )?
                .map(|r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap()))
                .collect::<Result<Vec<_>, pgrx::spi::Error>>()
        }),
    )
}

/// Drops the capture trigger `name` of `table` (quoted, qualified).
pub fn drop_one(table: &str, name: &str) {
    spi(
        "removing a capture trigger",
        Spi::run(&format!(
            "DROP TRIGGER IF EXISTS {} ON {table}",
            crate::quote::quote_ident(name)
        )),
    );
}

/// The capture triggers on `table` (quoted, qualified): all call _indexnow_capture().
pub fn install(ext: &str, table: &str) {
    for (name, event, referencing) in EVENTS {
        spi(
            "installing the capture triggers",
            Spi::run(&format!(
                "CREATE OR REPLACE TRIGGER {name} AFTER {event} ON {table} {referencing} \
                 FOR EACH STATEMENT EXECUTE FUNCTION {ext}._indexnow_capture()"
            )),
        );
    }
}

/// Drops the capture triggers of `table` (quoted, qualified).
pub fn drop(table: &str) {
    for (name, _, _) in EVENTS {
        drop_one(table, name);
    }
}
