//! A column of a watched table renamed (`ALTER TABLE ... RENAME COLUMN`): the watches' URL
//! templates and `ignore` lists that name it are renamed with it, before the rename runs, from
//! the `ddl_command_start` event trigger `indexnow_renames` (sql/capture.sql). The event trigger
//! at the end of the ALTER then makes the watches again (`super::watch::follow_alter_table`),
//! with the new names. A watch keeps its id, sources and queue, and its pattern (the template)
//! takes the new name: `indexnow_unwatch()` names it so.
//!
//! Only the end of an ALTER has the new table, and only its start the old name (PostgreSQL
//! gives an event trigger the statement only in C, hence this module). `visible`, `url_sql`
//! and `publish_at` are the maker's SQL text: they are not rewritten, and a watch whose
//! expression names the column breaks with a WARNING, as for a column dropped.

use super::template::{self, Part};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;

/// `_indexnow_before_alter()`: the event trigger function. Declared in sql/capture.sql.
///
/// # Safety
/// Called by PostgreSQL as an event trigger function: `fcinfo.context` is its
/// `EventTriggerData`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn indexnow_before_alter_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let context = (*fcinfo).context;
    if context.is_null() || !pgrx::is_a(context, pg_sys::NodeTag::T_EventTriggerData) {
        error!("indexnow: _indexnow_before_alter() is called by an event trigger only");
    }
    let parsetree = (*(context as *mut pg_sys::EventTriggerData)).parsetree;
    if parsetree.is_null() || !pgrx::is_a(parsetree, pg_sys::NodeTag::T_RenameStmt) {
        return pg_sys::Datum::from(0);
    }
    let rename = &*(parsetree as *mut pg_sys::RenameStmt);
    if rename.renameType != pg_sys::ObjectType::OBJECT_COLUMN
        || rename.relation.is_null()
        || rename.subname.is_null()
        || rename.newname.is_null()
    {
        return pg_sys::Datum::from(0);
    }
    let table = pg_sys::RangeVarGetRelidExtended(
        rename.relation,
        pg_sys::NoLock as pg_sys::LOCKMODE,
        pg_sys::RVROption::RVR_MISSING_OK,
        None,
        std::ptr::null_mut(),
    );
    if table == pg_sys::InvalidOid {
        return pg_sys::Datum::from(0);
    }
    let old = CStr::from_ptr(rename.subname)
        .to_string_lossy()
        .into_owned();
    let new = CStr::from_ptr(rename.newname)
        .to_string_lossy()
        .into_owned();
    follow(table, &old, &new);
    pg_sys::Datum::from(0)
}

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_indexnow_before_alter_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// A watch's id, template, ignore list and the columns its expressions read.
type Names = (i32, Option<String>, Vec<String>, Option<Vec<String>>);

/// Renames `old` to `new` in the templates and ignore lists of the watches of `table`.
fn follow(table: pg_sys::Oid, old: &str, new: &str) {
    if crate::extension::version_mismatch().is_some() {
        return;
    }
    let ext = crate::extension::schema();
    let watches: Vec<Names> = Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT id, url, ignore, expression_columns FROM {ext}.indexnow_watches \
                          WHERE tbl = $1::pg_catalog.oid::pg_catalog.regclass ORDER BY id"
                ),
                None,
                &[table.into()],
            )?
            .map(|r| {
                Ok((
                    r.get(1)?.unwrap_or_default(),
                    r.get(2)?,
                    r.get(3)?.unwrap_or_default(),
                    r.get(4)?,
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading the watches of a table: {e}"));
    let rename = |c: &String| if c == old { new.to_string() } else { c.clone() };
    for (id, url, ignore, read) in watches {
        let url = url.map(|u| renamed_template(&u, old, new).unwrap_or(u));
        let ignore: Vec<String> = ignore.iter().map(rename).collect();
        let read: Option<Vec<String>> = read.map(|r| r.iter().map(rename).collect());
        Spi::run_with_args(
            &format!(
                "UPDATE {ext}.indexnow_watches \
                    SET url = $2, ignore = $3, expression_columns = $4 \
                  WHERE id = $1 AND (url IS DISTINCT FROM $2 OR ignore IS DISTINCT FROM $3 \
                                     OR expression_columns IS DISTINCT FROM $4)"
            ),
            &[id.into(), url.into(), ignore.into(), read.into()],
        )
        .unwrap_or_else(|e| error!("indexnow: renaming a column in watch {id}: {e}"));
    }
}

/// `template` with its `{old}` parts naming `new`, when it has any and `new` can be written
/// in a template (no brace).
fn renamed_template(template: &str, old: &str, new: &str) -> Option<String> {
    if new.contains(['{', '}']) || new.trim() != new {
        return None;
    }
    let parts = template::parse(template).ok()?;
    if !parts
        .iter()
        .any(|p| matches!(p, Part::Column(c) if c == old))
    {
        return None;
    }
    Some(template::unparse(parts.into_iter().map(|p| match p {
        Part::Column(c) if c == old => Part::Column(new.to_string()),
        p => p,
    })))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_template_follows_its_column_renamed() {
        assert_eq!(
            super::renamed_template(
                "https://x.example/{{a}}/{slug}/{ id }-{slug}",
                "slug",
                "path"
            ),
            Some("https://x.example/{{a}}/{path}/{id}-{path}".into())
        );
        assert_eq!(
            super::renamed_template("https://x.example/{slug}", "title", "t"),
            None
        );
        assert_eq!(
            super::renamed_template("https://x.example/{slug}", "slug", "a}b"),
            None
        );
    }
}
