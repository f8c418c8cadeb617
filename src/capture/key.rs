//! A table's primary key as the watches use it: its columns in the key's order. A row's key is
//! stored as `jsonb_build_array(k0, ...)` of them (`super::statements::row_key`).

use crate::plan_cache;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The primary key columns of `table`, in the key's order: (name, SQL type). None when it has no
/// primary key, or only a deferrable one (`indexnow_watch()` refuses both).
pub fn columns(table: pg_sys::Oid) -> Vec<(String, String)> {
    Spi::connect(|client| {
        plan_cache::read(
            client,
            "SELECT a.attname::pg_catalog.text, pg_catalog.format_type(a.atttypid, a.atttypmod) \
               FROM pg_catalog.pg_index i \
               JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
              WHERE i.indrelid = $1 AND i.indisprimary AND i.indimmediate \
              ORDER BY pg_catalog.array_position(i.indkey::pg_catalog.int2[], a.attnum)",
            &[table.into()],
        )?
        .map(|r| {
            Ok((
                r.get::<String>(1)?.unwrap_or_default(),
                r.get::<String>(2)?.unwrap_or_default(),
            ))
        })
        .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading a table's primary key: {e}"))
}

/// The names of [`columns`].
pub fn names(table: pg_sys::Oid) -> Vec<String> {
    columns(table).into_iter().map(|(name, _)| name).collect()
}
