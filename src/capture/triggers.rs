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
fn drop_one(table: &str, name: &str) {
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

/// Makes the capture triggers of `table` fire in replica mode too (`ENABLE ALWAYS`), or only
/// where writes originate (the default, and what making them again leaves), when they do not
/// already. In replica mode (`session_replication_role = replica`: ETL tools, some loaders) a
/// trigger fires only when it is enabled ALWAYS or REPLICA; a logical replication subscriber's
/// apply worker fires no statement triggers at all, whatever they are set to.
pub fn fire_always(table: pg_sys::Oid, always: bool) {
    let wanted = if always {
        pg_sys::TRIGGER_FIRES_ALWAYS
    } else {
        pg_sys::TRIGGER_FIRES_ON_ORIGIN
    };
    let now = crate::plan_cache::get_one::<String>(
        "SELECT tgenabled::text FROM pg_catalog.pg_trigger \
          WHERE tgrelid = $1 AND tgname = 'indexnow_capture_insert'",
        &[table.into()],
    )
    .unwrap_or_else(|e| error!("indexnow: reading a table's triggers: {e}"));
    // (no triggers; or disabled by hand, which stays so: the next `indexnow_watch()` makes them
    // again)
    let Some(now) = now.filter(|n| n != "D") else {
        return;
    };
    if now.as_bytes() != [wanted] {
        // SAFETY: the table is locked as `ALTER TABLE ... ENABLE TRIGGER` locks it, and closed
        // after; the trigger names are NUL-terminated.
        unsafe {
            let relation = pg_sys::table_open(table, pg_sys::ShareRowExclusiveLock as i32);
            for (name, _, _) in EVENTS {
                let name = std::ffi::CString::new(name).expect("a trigger's name");
                crate::compat::set_trigger_firing(relation, &name, wanted);
            }
            pg_sys::table_close(relation, pg_sys::NoLock as i32);
        }
    }
}

/// Drops the capture triggers of `table` (quoted, qualified).
pub fn drop(table: &str) {
    for (name, _, _) in EVENTS {
        drop_one(table, name);
    }
}
