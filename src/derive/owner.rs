//! Whose rights what runs with: a watch's own SQL runs with the rights of the role that made it,
//! and the extension's own work with its owner's.
//!
//! `visible`, `url_sql`, `publish_at` and the template's columns are SQL the watch's maker wrote.
//! The capture trigger runs as the extension's owner (it must write the queue whoever saves), and
//! the workers as the bootstrap superuser: evaluated there, that SQL would have their rights, and
//! a table owner allowed to watch its table could read keys or become superuser through an
//! expression. So the rows a derivation needs are read by `_indexnow_watch_rows()`, which switches
//! to the watch's maker for the one statement that evaluates them, in a security-restricted
//! operation (no `SET ROLE`, no temporary objects), with the watch's `search_path` and every
//! setting put back after it, as PostgreSQL does for `REFRESH MATERIALIZED VIEW`, and with
//! `row_security = off`: a row a policy would hide from the maker fails the read instead of
//! looking deleted. That statement reads in the snapshot of the derivation that calls it (its
//! rows and the sources they are compared with are seen at one moment). The derivation statements themselves hold none of the
//! watch's SQL (`super::statements`) and run with `pg_catalog` first in their path.
//!
//! The other way round, `indexnow_watch()`, `indexnow_unwatch()` and `indexnow_reconcile()` run
//! as their caller, check the caller's rights, and then do the extension's part (its tables, its
//! triggers) as the extension's owner ([`as_extension_owner`]), as a SECURITY DEFINER function
//! would; being invoker functions, they know who called them, whatever SECURITY DEFINER function
//! called them.
//!
//! The maker is kept by name, not OID: a dump restored into another cluster finds the role of
//! that name (or none: the derivation then fails with an error naming it).
//!
//! Key columns (and the columns of the foreign keys to related tables) must be of built-in types:
//! the capture trigger turns keys into jsonb as the extension's owner, and a user-defined type's
//! cast to json would be the maker's code run with those rights ([`built_in`]).

use crate::plan_cache;
use pgrx::prelude::*;
use pgrx::JsonB;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;

type WatchRow = (
    Option<String>,
    bool,
    Option<String>,
    Option<bool>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<i64>,
);

/// The rows of watch `watch_id` whose keys are in `keys` (all rows when NULL), with what each
/// derives to, evaluated with the rights of the role that made the watch. (Its C symbol changes
/// with its columns, as in 0.5.0 and 0.8.0, where the fingerprint became a bigint: a database
/// whose SQL still declares the earlier columns, between a restart onto this library and the
/// update, calls the old symbol, which refuses, rather than getting rows of another shape.)
#[pg_extern(name = "_indexnow_watch_rows", stable, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn rows_of_watch_fingerprinted(
    watch_id: i32,
    keys: Option<JsonB>,
) -> TableIterator<
    'static,
    (
        name!(row_key, Option<String>),
        name!(present, bool),
        name!(url, Option<String>),
        name!(vis, Option<bool>),
        name!(pub_at, Option<TimestampWithTimeZone>),
        name!(exp_at, Option<TimestampWithTimeZone>),
        name!(fp, Option<i64>),
    ),
> {
    let ext = crate::extension::schema();
    let found: Option<(Option<pg_sys::Oid>, String, String)> = Spi::connect(|client| {
        let t = plan_cache::read(
            client,
            &format!(
                "SELECT r.oid, w.owner::pg_catalog.text, w.search_path \
                   FROM {ext}.indexnow_watches w \
                   LEFT JOIN pg_catalog.pg_roles r ON r.rolname OPERATOR(pg_catalog.=) w.owner \
                  WHERE w.id OPERATOR(pg_catalog.=) $1"
            ),
            &[watch_id.into()],
        )?;
        if t.is_empty() {
            return Ok::<_, pgrx::spi::Error>(None);
        }
        let r = t.first();
        Ok(Some((
            r.get(1)?,
            r.get::<String>(2)?.unwrap_or_default(),
            r.get::<String>(3)?.unwrap_or_default(),
        )))
    })
    .unwrap_or_else(|e| error!("indexnow: reading watch {watch_id}: {e}"));
    let Some((role, maker, search_path)) = found else {
        error!("indexnow: there is no watch {watch_id}");
    };
    let statements = super::generated::of(&ext, watch_id)
        .unwrap_or_else(|e| error!("indexnow: watch {watch_id} cannot read its rows: {e}"));
    let sql = if keys.is_some() {
        &statements.rows_keys
    } else {
        &statements.rows_all
    };
    let Some(role) = role else {
        error!(
            "indexnow: the role {maker} that made watch {watch_id} does not exist: make the watch \
             again with indexnow_watch() as a role that owns the table"
        );
    };
    // A row hidden by row-level security must fail the read, not look deleted.
    let settings = vec![("search_path", search_path), ("row_security", "off".into())];
    let as_maker = move |f: &mut dyn FnMut()| {
        switched_to(role, true, || crate::guc::with_settings(&settings, f))
    };
    if let Some(keys) = keys {
        // At most a change set's keys: read at once.
        let (mut keys, mut rows) = (Some(keys), vec![]);
        as_maker(&mut || rows = read_in_this_snapshot(sql, keys.take()));
        return TableIterator::new(rows);
    }
    TableIterator::new(RowCursor::open(sql, as_maker))
}

/// How many rows of a whole table [`RowCursor`] holds at a time.
const ROWS_A_FETCH: i64 = 10_000;

/// The rows of a whole table, read a fetch at a time from a cursor over the row statement, in
/// the snapshot of the statement that called `_indexnow_watch_rows()`, each fetch run as the
/// watch's maker (`as_maker`: the rows' expressions are evaluated as they are fetched). So the
/// derivation of a table of any size holds [`ROWS_A_FETCH`] of its rows here, not all of them:
/// the statement that calls it keeps what it has read in a tuplestore, which goes to disk past
/// `work_mem`. (The cursor is a portal of the transaction: it outlives each fetch's SPI
/// connection, and a (sub)transaction's abort drops it.)
struct RowCursor<F: FnMut(&mut dyn FnMut())> {
    portal: Option<CString>,
    rows: std::collections::VecDeque<WatchRow>,
    as_maker: F,
}

impl<F: FnMut(&mut dyn FnMut())> RowCursor<F> {
    fn open(sql: &str, mut as_maker: F) -> Self {
        let mut portal = None;
        as_maker(&mut || {
            // SAFETY: SPI is connected and finished here; the plan is kept for the backend's
            // life; the portal's name is copied out before SPI_finish.
            unsafe {
                pg_sys::SPI_connect();
                let plan = row_plan(sql);
                let mut values = [pg_sys::Datum::from(0)];
                let nulls = [b'n' as std::ffi::c_char];
                let opened = pg_sys::SPI_cursor_open(
                    std::ptr::null(),
                    plan,
                    values.as_mut_ptr(),
                    nulls.as_ptr(),
                    true,
                );
                if opened.is_null() {
                    error!("indexnow: could not open a watch's row statement");
                }
                portal = Some(std::ffi::CStr::from_ptr((*opened).name).to_owned());
                pg_sys::SPI_finish();
            }
        });
        RowCursor {
            portal,
            rows: Default::default(),
            as_maker,
        }
    }

    /// The next rows, or none: then the cursor is closed.
    fn fetch(&mut self) {
        let Some(name) = self.portal.take() else {
            return;
        };
        let mut rows = vec![];
        (self.as_maker)(&mut || {
            // SAFETY: as in `open`; the portal is this transaction's, found by its name.
            unsafe {
                pg_sys::SPI_connect();
                let portal = pg_sys::SPI_cursor_find(name.as_ptr());
                if portal.is_null() {
                    error!("indexnow: a watch's row cursor is gone");
                }
                pg_sys::SPI_cursor_fetch(portal, true, ROWS_A_FETCH as std::ffi::c_long);
                rows = rows_of_tuptable();
                if rows.is_empty() {
                    pg_sys::SPI_cursor_close(portal);
                }
                pg_sys::SPI_finish();
            }
        });
        if !rows.is_empty() {
            self.portal = Some(name);
        }
        self.rows = rows.into();
    }
}

impl<F: FnMut(&mut dyn FnMut())> Iterator for RowCursor<F> {
    type Item = WatchRow;

    fn next(&mut self) -> Option<WatchRow> {
        if self.rows.is_empty() {
            self.fetch();
        }
        self.rows.pop_front()
    }
}

/// `_indexnow_watch_rows()` as 0.5.0 to 0.7.0 declare it, by C symbol (a text fingerprint):
/// refused with the hint to update. The upgrade scripts before 0.8.0's create it under this
/// symbol, and PostgreSQL looks the symbol up when a script creates the function, so the chain of
/// upgrades from an earlier release needs it to be there; nothing derives before the update.
///
/// # Safety
/// Called by PostgreSQL through the version-1 calling convention; reads no argument.
#[pg_guard]
#[unsafe(no_mangle)]
#[doc(hidden)]
pub unsafe extern "C-unwind" fn rows_of_watch_wrapper(
    _fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    crate::extension::require_current_version();
    error!(
        "indexnow: this database's _indexnow_watch_rows() is not this library's: run ALTER \
         EXTENSION indexnow UPDATE"
    )
}

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_rows_of_watch_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

thread_local! {
    /// The row statements planned in this backend, by text (see `crate::plan_cache`).
    static ROW_PLANS: RefCell<HashMap<String, usize>> = RefCell::new(HashMap::new());
}

/// Runs the row statement `sql` (`$1` the keys) read-only, in the snapshot of the statement that
/// called `_indexnow_watch_rows()`. (pgrx's SPI reads take a new snapshot once the transaction
/// has written, as a volatile function's would.)
fn read_in_this_snapshot(sql: &str, keys: Option<JsonB>) -> Vec<WatchRow> {
    let keys_datum = keys.into_datum();
    // SAFETY: SPI is connected and finished here; every value is copied out before SPI_finish.
    // An ERROR inside unwinds SPI with the (sub)transaction it aborts.
    unsafe {
        pg_sys::SPI_connect();
        let plan = row_plan(sql);
        let mut values = [keys_datum.unwrap_or(pg_sys::Datum::from(0))];
        let mut nulls = [if keys_datum.is_some() { b' ' } else { b'n' } as std::ffi::c_char];
        let status =
            pg_sys::SPI_execute_plan(plan, values.as_mut_ptr(), nulls.as_mut_ptr(), true, 0);
        if status != pg_sys::SPI_OK_SELECT as i32 {
            error!("indexnow: a watch's row statement failed ({status})");
        }
        let rows = rows_of_tuptable();
        pg_sys::SPI_finish();
        rows
    }
}

/// The plan of the row statement `sql` (`$1` the keys), planned once in this backend and kept
/// for its life (as `crate::plan_cache` keeps its plans).
///
/// # Safety
/// SPI must be connected.
unsafe fn row_plan(sql: &str) -> pg_sys::SPIPlanPtr {
    if let Some(plan) = ROW_PLANS.with(|plans| plans.borrow().get(sql).copied()) {
        return plan as pg_sys::SPIPlanPtr;
    }
    let text = CString::new(sql).unwrap_or_else(|_| error!("indexnow: a NUL in SQL"));
    let mut types = [pg_sys::JSONBOID];
    // SAFETY: SPI is connected (the caller's promise); the text lives across the call.
    unsafe {
        let plan = pg_sys::SPI_prepare(text.as_ptr(), 1, types.as_mut_ptr());
        if plan.is_null() {
            error!("indexnow: could not plan a watch's row statement");
        }
        pg_sys::SPI_keepplan(plan);
        ROW_PLANS.with(|plans| plans.borrow_mut().insert(sql.to_string(), plan as usize));
        plan
    }
}

/// The rows of `SPI_tuptable`, copied out (and the table freed).
///
/// # Safety
/// SPI must be connected, its last command a row statement's.
unsafe fn rows_of_tuptable() -> Vec<WatchRow> {
    // SAFETY: the tuple table is SPI's, read within its length (the caller's promise).
    unsafe {
        let table = pg_sys::SPI_tuptable;
        let mut rows = Vec::with_capacity(pg_sys::SPI_processed as usize);
        for i in 0..pg_sys::SPI_processed as usize {
            let tuple = *(*table).vals.add(i);
            let column = |n: i32| {
                let mut null = false;
                let datum = pg_sys::SPI_getbinval(tuple, (*table).tupdesc, n, &mut null);
                (datum, null)
            };
            let text = |n: i32| {
                let (d, null) = column(n);
                String::from_datum(d, null)
            };
            let (present, present_null) = column(2);
            let (vis, vis_null) = column(4);
            let (pub_at, pub_at_null) = column(5);
            let (exp_at, exp_at_null) = column(6);
            let (fp, fp_null) = column(7);
            rows.push((
                text(1),
                bool::from_datum(present, present_null).unwrap_or(false),
                text(3),
                bool::from_datum(vis, vis_null),
                TimestampWithTimeZone::from_datum(pub_at, pub_at_null),
                TimestampWithTimeZone::from_datum(exp_at, exp_at_null),
                i64::from_datum(fp, fp_null),
            ));
        }
        pg_sys::SPI_freetuptable(table);
        rows
    }
}

/// Runs `f` as the extension's owner (its tables, its triggers), with the extension's own
/// search_path, as a SECURITY DEFINER function of it would; then as the caller again.
pub fn as_extension_owner<R>(f: impl FnOnce() -> R) -> R {
    let settings = [("search_path", crate::extension::OWN_SEARCH_PATH.to_string())];
    switched_to(crate::extension::owner(), false, || {
        crate::guc::with_settings(&settings, f)
    })
}

/// Runs `f` as `role` (in a security-restricted operation when `restricted`), and switches back
/// after it, also when it raises an ERROR.
pub fn switched_to<R>(role: pg_sys::Oid, restricted: bool, f: impl FnOnce() -> R) -> R {
    let (mut user, mut context) = (pg_sys::InvalidOid, 0);
    // SAFETY: reads and sets this backend's current user, as PostgreSQL's own callers do.
    unsafe { pg_sys::GetUserIdAndSecContext(&mut user, &mut context) };
    let mut switched = context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32;
    if restricted {
        switched |= pg_sys::SECURITY_RESTRICTED_OPERATION as i32;
    }
    unsafe { pg_sys::SetUserIdAndSecContext(role, switched) };
    let f = std::panic::AssertUnwindSafe(f);
    pgrx::PgTryBuilder::new(move || {
        let f = f;
        (f.0)()
    })
    .finally(|| unsafe { pg_sys::SetUserIdAndSecContext(user, context) })
    .execute()
}

/// Who is calling: the current user of the invoker function that asks.
pub fn caller() -> pg_sys::Oid {
    // SAFETY: reads this backend's current user.
    unsafe { pg_sys::GetUserId() }
}

/// Refuses a call from inside a security-restricted operation: a watch's own expression (which
/// could otherwise make a watch while a derivation runs it) or maintenance that runs a table
/// owner's code.
pub fn refuse_in_restricted_operation(what: &str) {
    // SAFETY: reads this backend's security context.
    if unsafe { pg_sys::InSecurityRestrictedOperation() } {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "{what} cannot be called from a watch's expression or another \
                 security-restricted operation"
            )
        );
    }
}

/// Whether values of type `typ` turn into text and jsonb with built-in code only: its base type
/// (through domains), and an array's element type, are built in.
pub fn built_in(typ: pg_sys::Oid) -> bool {
    // SAFETY: syscache lookups of a type that exists (a table column's).
    unsafe {
        let base = pg_sys::getBaseType(typ);
        let element = pg_sys::get_element_type(base);
        let first_user_oid = pg_sys::FirstNormalObjectId;
        base.to_u32() < first_user_oid
            && (element == pg_sys::InvalidOid || element.to_u32() < first_user_oid)
    }
}
