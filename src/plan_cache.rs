//! Statements planned once per backend and kept (`SPI_keepplan`), by their text.
//!
//! The statements that run on every save of a watched table and on every pass of a worker are
//! short, and planning them took longer than running them (measured: the sendable-hosts query
//! of an idle pass planned in 0.33 ms and ran in 0.05 ms). PostgreSQL's plan cache keeps a kept
//! plan right: it plans again after DDL on a table it reads and when `search_path` differs from
//! the one it was planned under. Every statement kept here has a fixed text per backend (or a
//! small set of texts), so the cache stays small.
//!
//! A statement may name the extension's own objects as `@extschema@.name` ([`qualified`]): the
//! schema is filled in before it is planned, and the plan is kept by the text with the schema in
//! it. The schema is read from `pg_extension` here ([`extension_schema`]), through a kept plan of
//! its own, and kept until a relation-cache invalidation (`crate::extension` asks here too), so
//! that this file needs nothing above the settings and the invalidations.
//!
//! A statement is run either as a read ([`read`], [`get_one`]) or as a write ([`write`]), and the
//! difference matters: pgrx takes a transaction id for a write (`SpiClient::update`, and also
//! `Spi::get_one`/`Spi::run`), so a read-only path (a worker's idle pass, `indexnow_status()`,
//! which must also work on a hot standby) uses reads only. A read runs in the current snapshot
//! until the transaction has written; a statement that must see what committed since the
//! calling statement began (after waiting for a lock) runs as a write.

use pgrx::datum::DatumWithOid;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiResult, SpiTupleTable};
use pgrx::PgOid;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

thread_local! {
    static PLANS: RefCell<HashMap<String, Rc<OwnedPreparedStatement>>> =
        RefCell::new(HashMap::new());
}

/// Runs the reading statement `sql` with `args` through this backend's kept plan of it (see
/// [`plan`]). A read assigns no transaction id: an idle pass of a worker and `indexnow_status()`
/// write nothing, and work on a hot standby.
pub fn read<'conn>(
    client: &SpiClient<'conn>,
    sql: &str,
    args: &[DatumWithOid<'_>],
) -> SpiResult<SpiTupleTable<'conn>> {
    client.select(&*plan(client, sql, args, false)?, None, args)
}

/// Runs the writing statement `sql` (or one that must see this transaction's writes) with `args`
/// through this backend's kept plan of it (see [`plan`]).
pub fn write<'conn>(
    client: &mut SpiClient<'conn>,
    sql: &str,
    args: &[DatumWithOid<'_>],
) -> SpiResult<SpiTupleTable<'conn>> {
    let plan = plan(client, sql, args, true)?;
    client.update(&*plan, None, args)
}

/// [`write`], run with a generic plan and no nested loop: for a statement whose parameters are
/// arrays of the rows it works on, joined to the queue (the sender's settle of an answer).
///
/// Generic: PostgreSQL's plan cache chose a custom plan for those at every run, planned again
/// each time: a custom plan's estimate of an array's length is exact, the generic plan's is 100
/// rows, so the generic plan never looked as cheap (measured: the settle of each answer was
/// replanned every time, 16 % of a worker's time sending to many hosts).
///
/// No nested loop: the join of the arrays with the queue is then a hash or merge join, whatever
/// the statistics say. With the queue's statistics taking it for empty (see
/// `crate::derive::statements`), the generic plan was a nested loop reading the whole array
/// again for each queue row: the settle of 20,000 rows took 91 s, and the plan is kept for the
/// worker's life, or until the queue is analyzed.
pub fn write_generic<'conn>(
    client: &mut SpiClient<'conn>,
    sql: &str,
    args: &[DatumWithOid<'_>],
) -> SpiResult<SpiTupleTable<'conn>> {
    crate::guc::with_settings(&settings_of_generic(), || write(client, sql, args))
}

/// The settings [`write_generic`] plans and runs its statements with.
pub fn settings_of_generic() -> [(&'static str, String); 2] {
    [
        ("plan_cache_mode", "force_generic_plan".into()),
        ("enable_nestloop", "off".into()),
    ]
}

/// The first column of the first row the reading statement `sql` returns (see [`read`]), or
/// `None` when it returns no row.
pub fn get_one<T: pgrx::datum::FromDatum + pgrx::datum::IntoDatum>(
    sql: &str,
    args: &[DatumWithOid<'_>],
) -> SpiResult<Option<T>> {
    pgrx::Spi::connect(|client| {
        let table = read(client, sql, args)?;
        if table.is_empty() {
            return Ok(None);
        }
        table.first().get_one()
    })
}

/// This backend's kept plan of `sql`, planned at first use with the arguments' types.
///
/// The cache is not borrowed while a statement runs: a statement may call a function that runs
/// a kept statement itself (a watch's URL expression that writes another watched table fires
/// that table's capture trigger).
fn plan(
    client: &SpiClient<'_>,
    sql: &str,
    args: &[DatumWithOid<'_>],
    writes: bool,
) -> SpiResult<Rc<OwnedPreparedStatement>> {
    let sql = &*qualified(sql);
    if let Some(plan) = PLANS.with(|plans| plans.borrow().get(sql).cloned()) {
        return Ok(plan);
    }
    let types: Vec<PgOid> = args.iter().map(|a| PgOid::from(a.oid())).collect();
    let prepared = if writes {
        client.prepare_mut(sql, &types)?
    } else {
        client.prepare(sql, &types)?
    };
    let plan = Rc::new(prepared.keep());
    PLANS.with(|plans| plans.borrow_mut().insert(sql.to_owned(), plan.clone()));
    Ok(plan)
}

/// How a statement names the extension's schema (see `crate::extension::OWN_SEARCH_PATH`).
const EXTSCHEMA: &str = "@extschema@";

/// `sql` with `@extschema@` replaced by the extension's schema, quoted.
pub fn qualified(sql: &str) -> std::borrow::Cow<'_, str> {
    if sql.contains(EXTSCHEMA) {
        let schema = extension_schema().unwrap_or_else(|| {
            pgrx::error!("indexnow: the extension is not installed in this database")
        });
        sql.replace(EXTSCHEMA, &schema).into()
    } else {
        sql.into()
    }
}

thread_local! {
    /// The extension's schema, quoted, once found: kept until any relation-cache invalidation
    /// (the extension is not relocatable: its schema changes only when it is dropped and created
    /// again, and its tables' drop and creation send them). Every statement that names `@extschema@` needs it, and reading it each
    /// time was 8 % of a worker's time sending to many hosts.
    static SCHEMA: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn forget_schema(_table: pgrx::pg_sys::Oid) {
    SCHEMA.with(|s| s.borrow_mut().take());
}

/// The schema the extension is installed in, quoted, or `None` when this database has none: the
/// one query for it (`crate::extension::schema` asks here).
pub fn extension_schema() -> Option<String> {
    if let Some(schema) = SCHEMA.with(|s| s.borrow().clone()) {
        return Some(schema);
    }
    crate::invalidation::listen(forget_schema);
    let (schema, keep) = crate::invalidation::built(read_extension_schema);
    if keep {
        SCHEMA.with(|s| *s.borrow_mut() = schema.clone());
    }
    schema
}

fn read_extension_schema() -> Option<String> {
    let name: Option<String> = get_one(
        "SELECT n.nspname::text FROM pg_catalog.pg_extension e \
           JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace \
          WHERE e.extname = 'indexnow'",
        &[],
    )
    .unwrap_or_else(|e| pgrx::error!("indexnow: finding the extension's schema: {e}"));
    name.map(|n| crate::quote::quote_ident(&n))
}
