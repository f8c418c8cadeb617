//! A table's primary key as the watches use it: its columns in the key's order. A row's key is
//! stored as `jsonb_build_array(k0, ...)` of them (`super::statements::row_key`).
//!
//! Two routes, for two callers. The capture trigger reads the written table's key from the
//! relation it has open ([`names_of_open`]): PostgreSQL's relation cache, always the catalog as
//! committed now, like the rest of what the trigger reads of the table (a query would read the
//! catalog in the statement's snapshot, which at REPEATABLE READ can predate a key change). A
//! table the caller has not opened (a partition's watched parent, a watch's table) is read by
//! query ([`columns`]): opening the parent from a partition's trigger would take a lock on it
//! after the partition's, the reverse of the order DDL on the parent takes them.

use crate::plan_cache;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;

/// The primary key columns of `table`, in the key's order: (name, SQL type). Empty when it has
/// no primary key, or only a deferrable one (`indexnow_watch()` refuses both).
pub fn columns(table: pg_sys::Oid) -> Vec<(String, String)> {
    Spi::connect(|client| {
        plan_cache::read(
            client,
            "SELECT a.attname::pg_catalog.text, pg_catalog.format_type(a.atttypid, a.atttypmod) \
               FROM pg_catalog.pg_index i \
               JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
              WHERE i.indrelid = $1 AND i.indisprimary AND i.indimmediate AND i.indisvalid \
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

/// The names of the primary key columns of the open `relation`, from the relation cache (the
/// same key as [`columns`]: valid, immediate). Empty without one.
///
/// # Safety
/// `relation` must be an open relation.
pub unsafe fn names_of_open(relation: pg_sys::Relation) -> Vec<String> {
    let index = crate::compat::primary_key_index(relation);
    if index == pg_sys::InvalidOid {
        return vec![];
    }
    let desc = (*relation).rd_att;
    let index_rel = pg_sys::index_open(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    let form = &*(*index_rel).rd_index;
    let names = form
        .indkey
        .values
        .as_slice(form.indnkeyatts as usize)
        .iter()
        .map(|&att| {
            let a = crate::compat::attribute(desc, att as usize - 1);
            CStr::from_ptr(a.attname.data.as_ptr())
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    pg_sys::index_close(index_rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    names
}
