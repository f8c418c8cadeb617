//! Derivation: the one engine that turns "these rows of this table changed" (or "every row") into
//! queue requests, from the rows as they are now and from what each watch last derived from them
//! (`indexnow_sources`). Capture (the triggers, watching, DDL followed, related tables, drops),
//! the senders' re-read of a scheduled page and every reader that must see all changes come here;
//! this module imports neither `crate::capture` nor `crate::send`.
//!
//! This file runs derivations: a watch's statement (`statements`) over some rows of its table,
//! and the change sets the capture trigger recorded (`change_sets`).
//!
//! - **Settings pinned** (`settings`): a URL, a fingerprint or a publication time never depends on
//!   the session that happens to derive it.
//! - **A row that fails is skipped, not the statement.** The statement runs in a subtransaction;
//!   when it raises (a `url_sql` that divides by zero for one row), the keys are split in halves
//!   until the failing rows are alone, and every other row is derived. A watch that fails even for
//!   no row at all (a column it names was dropped, its maker lost a privilege) is broken as a
//!   whole: a write or a change set then leaves it one derivation of the whole table, owed until
//!   the watch can read its rows again. One WARNING per derivation says how many rows were
//!   skipped (the first keys and the error), or that the watch is broken.
//! - **A cancel is not an error**: it ends the statement (see `crate::subtransaction`).
//! - **Change sets** are derived oldest first, one at a time (with the small ones after it of the
//!   same table and watches, up to a change set's 10,000 keys): a worker skips one another sender
//!   is deriving (`SKIP LOCKED`) and commits each on its own, so a SIGKILL loses nothing (the
//!   change set is deleted in the transaction that wrote what it derived); a reader
//!   (`indexnow_derive()`, `indexnow_push_now()`, `indexnow_reconcile()`) waits for it instead,
//!   because it must see everything.

pub mod change_sets;
mod column_changes;
pub mod fingerprint;
pub mod generated;
pub mod key;
pub mod owner;
pub mod settings;
pub mod statements;
pub mod template;

use crate::guc::with_settings;
use crate::queue::Reason;
use crate::{plan_cache, subtransaction};
use change_sets::{Waiting, MERGED_AT_MOST};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;
use settings::pinned_settings;

/// A watch as the derivation needs it.
#[derive(Clone)]
pub struct Watch {
    /// The extension's schema, quoted.
    pub ext: String,
    pub id: i32,
    pub pattern: String,
    /// The table, schema-qualified and quoted.
    pub table: String,
    /// The same table's OID.
    pub oid: pg_sys::Oid,
    /// Which of its statements a derivation runs.
    pub derivation: Derivation,
    /// The columns the UPDATE gate may ignore: the ignored ones the watch's expressions do not
    /// read.
    pub ignore: Vec<String>,
}

/// Which of a watch's statements (`generated`) a derivation runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Derivation {
    /// What changed is queued.
    Derive,
    /// A new watch's baseline: the rows public now are recorded as known, not announced.
    Baseline,
}

/// Which rows to derive.
pub enum Rows {
    /// These keys (`[[k0, ...], ...]`).
    Keyed(Value),
    /// Every row of the table and every row the watch has a source for.
    All,
}

/// What one derivation queued.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Derived {
    pub created: i64,
    pub changed: i64,
    pub removed: i64,
}

impl std::ops::AddAssign for Derived {
    fn add_assign(&mut self, o: Derived) {
        self.created += o.created;
        self.changed += o.changed;
        self.removed += o.removed;
    }
}

/// The active watches of the table `$1` (oid), oldest first.
pub fn watches_of(ext: &str, table: pg_sys::Oid) -> Vec<Watch> {
    watches_where(
        ext,
        "w.tbl = $1::pg_catalog.oid::pg_catalog.regclass",
        table.into(),
    )
}

/// The active watches among `ids`.
pub fn watches_by_id(ext: &str, ids: Vec<i32>) -> Vec<Watch> {
    watches_where(ext, "w.id = ANY ($1)", ids.into())
}

/// The gate's columns come from `expression_columns`, read by name from the row as JSON: a
/// database still on the SQL of 0.2.0 (between a restart with this library and `ALTER EXTENSION
/// indexnow UPDATE`) has no such column, and its gate compares every column meanwhile.
fn watches_where(ext: &str, condition: &str, arg: pgrx::datum::DatumWithOid<'_>) -> Vec<Watch> {
    let sql = format!(
        "SELECT w.id, w.pattern, pg_catalog.format('%I.%I', n.nspname, c.relname), \
                CASE WHEN pg_catalog.jsonb_typeof(e.columns) OPERATOR(pg_catalog.=) 'array' \
                     THEN ARRAY(SELECT i FROM pg_catalog.unnest(w.ignore) i \
                                 WHERE NOT e.columns OPERATOR(pg_catalog.?) i) END, \
                w.tbl::pg_catalog.oid \
           FROM {ext}.indexnow_watches w \
           CROSS JOIN LATERAL (SELECT pg_catalog.to_jsonb(w) -> 'expression_columns') e(columns) \
           JOIN pg_catalog.pg_class c ON c.oid = w.tbl \
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
          WHERE {condition} AND w.active ORDER BY w.id"
    );
    Spi::connect(|client| {
        plan_cache::read(client, &sql, &[arg])?
            .map(|r| {
                Ok(Watch {
                    ext: ext.to_string(),
                    id: r.get(1)?.unwrap_or_default(),
                    pattern: r.get(2)?.unwrap_or_default(),
                    table: r.get(3)?.unwrap_or_default(),
                    derivation: Derivation::Derive,
                    ignore: r.get(4)?.unwrap_or_default(),
                    oid: r.get(5)?.unwrap_or(pg_sys::InvalidOid),
                })
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading the watches of a table: {e}"))
}

/// The outcome of one run of a statement.
struct Run {
    derived: Derived,
    problems: i64,
    problem: Option<String>,
    writes: i64,
}

fn run_statement(
    watch: &Watch,
    rows: &Rows,
    absent: Reason,
) -> Result<Run, subtransaction::Failure> {
    // A watch whose statements cannot be generated fails as one whose statement fails for every
    // row: broken.
    let statements =
        generated::of(&watch.ext, watch.id).map_err(|message| subtransaction::Failure {
            message,
            code: PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            transient: false,
        })?;
    let (sql, args): (&str, Vec<pgrx::datum::DatumWithOid>) = match (rows, watch.derivation) {
        (Rows::Keyed(keys), derivation) => (
            match derivation {
                Derivation::Derive => &statements.derive_keys,
                Derivation::Baseline => &statements.baseline_keys,
            },
            vec![JsonB(keys.clone()).into(), absent.as_str().into()],
        ),
        (Rows::All, derivation) => (
            match derivation {
                Derivation::Derive => &statements.derive_all,
                Derivation::Baseline => &statements.baseline,
            },
            vec![Option::<JsonB>::None.into(), absent.as_str().into()],
        ),
    };
    // The keyed statement runs for small sets on every save: planned once per backend. The
    // whole-table one is planned afresh (it runs rarely, and its plan depends on the table's size).
    let keep = matches!(rows, Rows::Keyed(Value::Array(a)) if a.len() <= 100);
    subtransaction::run(|| {
        Spi::connect_mut(|client| {
            let table = if keep {
                plan_cache::write(client, sql, &args)?
            } else {
                client.update(sql, None, &args)?
            };
            let row = table.first();
            Ok::<_, pgrx::spi::Error>(Run {
                derived: Derived {
                    created: row.get::<i64>(1)?.unwrap_or(0),
                    changed: row.get::<i64>(2)?.unwrap_or(0),
                    removed: row.get::<i64>(3)?.unwrap_or(0),
                },
                problems: row.get::<i64>(4)?.unwrap_or(0),
                problem: row.get::<String>(5)?,
                writes: row.get::<i64>(6)?.unwrap_or(0),
            })
        })
        .unwrap_or_else(|e| error!("{e}"))
    })
}

/// Rows that could not be derived, for the one WARNING of a derivation.
#[derive(Default)]
struct Skipped {
    count: i64,
    first: Vec<String>,
}

impl Skipped {
    fn add(&mut self, count: i64, what: Option<String>) {
        self.count += count;
        if let Some(w) = what {
            if self.first.len() < 3 {
                self.first.push(w);
            }
        }
    }
}

/// Derives `rows` for `watch`. Rows that cannot be derived are skipped with one WARNING; the
/// others are derived. Returns what was queued, and whether anything was written; or, when the
/// derivation failed for a reason that is gone if it is tried again (a deadlock, a serialization
/// failure, a lock timeout, resources), that reason: then nothing is skipped, and the caller keeps
/// the rows for later.
pub fn derive(watch: &Watch, rows: Rows, absent: Reason) -> Result<(Derived, bool), String> {
    derive_with(watch, rows, absent, Deriver::AfterCommit).map_err(|u| u.message)
}

/// Why a derivation did not finish: a reason gone if it is tried again (a lock wait ended, a
/// deadlock), or a watch that cannot derive at all now (`broken`: a column it reads is gone, its
/// maker lost a privilege, row-level security applies to the maker), which a WARNING has said.
pub struct Unfinished {
    pub message: String,
    pub broken: bool,
}

impl From<String> for Unfinished {
    fn from(message: String) -> Self {
        Unfinished {
            message,
            broken: false,
        }
    }
}

/// Who derives: after the writes' commit (a reader, a worker), or the writing statement itself,
/// which must never wait for a worker and may try the commonest save's shortcut first.
#[derive(Clone, Copy)]
enum Deriver<'a> {
    /// `indexnow_watch()`, `indexnow_reconcile()`, a re-read at send time: a watch that cannot
    /// derive is warned of, and nothing is derived.
    AfterCommit,
    /// A reader or a worker deriving change sets, with the settings it adds: a watch that cannot
    /// derive leaves them (warned of once per session).
    ChangeSet(&'a [(&'static str, String)]),
    /// The writing statement, for rows it inserted or deleted, or updated with new keys.
    Write,
    /// The writing statement, for rows it updated with their keys unchanged.
    WriteEdited,
}

/// How long a write waits for a queue row or source that another transaction holds (a worker
/// deriving a change set of 10,000 keys holds them for most of a second) before it leaves its
/// event to the workers: recorded as a change set, derived after that transaction.
const WRITE_WAITS_AT_MOST: &str = "20ms";

/// Derives the rows a writing statement changed (its keys), in that statement: as [`derive`],
/// except that a lock held by another transaction fails it at once (then the caller records the
/// keys), so that no save waits for a worker's derivation. `edited` says the rows were updated
/// with their keys unchanged: then one row is first tried as a row edited in place
/// ([`statements::edited_in_place`]), the commonest save, at a fraction of the cost.
///
/// Rows that cannot be derived, of a watch whose tables have a foreign key checked at commit
/// (`DEFERRABLE INITIALLY DEFERRED`, the foreign keys ORMs such as Django make), fail it too
/// (their WARNING unsaid; the rows that could be derived were): a row inserted before the row it
/// references has no URL until then. Recorded by the caller, they are derived after the commit,
/// and warned of then if they still fail.
pub fn derive_at_write(
    watch: &Watch,
    keys: Value,
    edited: bool,
) -> Result<(Derived, bool), String> {
    let deriver = if edited {
        Deriver::WriteEdited
    } else {
        Deriver::Write
    };
    match subtransaction::run_within_statement(WRITE_AT_MOST, || {
        derive_with(watch, Rows::Keyed(keys), Reason::Deleted, deriver)
    }) {
        Ok(derived) => derived.map_err(|u| u.message),
        Err(subtransaction::Ended::OutOfTime) => {
            Err("out of the time a save gives its derivation".into())
        }
        Err(subtransaction::Ended::Failed(failure)) => Err(failure.message),
    }
}

/// The most a save's derivation in its statement may take (and never more than a quarter of what
/// the session's `statement_timeout` leaves the statement; none under a timeout too short for
/// that to be worth it: `subtransaction::run_within_statement`): past it, it is rolled back and
/// the save records its keys instead, derived after the commit. A save never fails, nor runs much
/// longer, because indexnow derives in it.
const WRITE_AT_MOST: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the watched table or a related table of `watch` has a foreign key checked at commit
/// (`INITIALLY DEFERRED`). Read in a subtransaction, under the save's short lock timeout: a
/// failure to read counts as yes (the rows are left to the workers, never lost).
fn references_deferred(watch: &Watch) -> bool {
    let sql = format!(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_constraint c \
                         WHERE c.contype = 'f' AND c.condeferred \
                           AND (c.conrelid = $1 OR c.conrelid IN ( \
                                SELECT r.tbl::pg_catalog.oid FROM {}.indexnow_relations r \
                                 WHERE r.watch_id = $2)))",
        watch.ext
    );
    subtransaction::run(|| {
        plan_cache::get_one::<bool>(&sql, &[watch.oid.into(), watch.id.into()])
            .unwrap_or_else(|e| error!("indexnow: reading a watch's foreign keys: {e}"))
    })
    .map_or(true, |deferred| deferred == Some(true))
}

/// Rows this backend derived as edited in place: the tests' proof that saves take that path.
#[cfg(any(test, feature = "pg_test"))]
pub static EDITED_IN_PLACE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Derives `keys` (one key) as a row edited in place, if it is one: what was queued, or `None`
/// when it is not (nothing was written, and the whole derivation must run).
fn run_edited_in_place(
    watch: &Watch,
    keys: &Value,
) -> Result<Option<Derived>, subtransaction::Failure> {
    let sql = statements::edited_in_place(&watch.ext);
    subtransaction::run(|| {
        Spi::connect_mut(|client| {
            let table =
                plan_cache::write(client, &sql, &[JsonB(keys.clone()).into(), watch.id.into()])?;
            let row = table.first();
            if row.get::<bool>(3)? != Some(true) {
                return Ok::<_, pgrx::spi::Error>(None);
            }
            #[cfg(any(test, feature = "pg_test"))]
            EDITED_IN_PLACE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(Some(Derived {
                created: row.get::<i64>(1)?.unwrap_or(0),
                changed: row.get::<i64>(2)?.unwrap_or(0),
                removed: 0,
            }))
        })
        .unwrap_or_else(|e| error!("{e}"))
    })
}

fn derive_with(
    watch: &Watch,
    rows: Rows,
    absent: Reason,
    deriver: Deriver,
) -> Result<(Derived, bool), Unfinished> {
    let mut settings = pinned_settings().to_vec();
    match deriver {
        Deriver::AfterCommit => {}
        Deriver::ChangeSet(more) => settings.extend_from_slice(more),
        Deriver::Write | Deriver::WriteEdited => {
            settings.push(("lock_timeout", WRITE_WAITS_AT_MOST.into()))
        }
    }
    if matches!(rows, Rows::Keyed(_)) {
        // At most 10,000 keys: index probes are always the plan. Without statistics on the
        // queue's tables (a watch just made, before autovacuum's first ANALYZE) the planner took
        // a sequential scan of every source per save (measured: 57 single-row saves a second
        // against 916 once analyzed).
        settings.push(("enable_seqscan", "off".into()));
    }
    with_settings(&settings, || {
        if let (Deriver::WriteEdited, Rows::Keyed(keys @ Value::Array(one))) = (deriver, &rows) {
            if one.len() == 1 {
                match run_edited_in_place(watch, keys) {
                    Ok(Some(derived)) => return Ok((derived, true)),
                    Err(failure) if failure.transient => return Err(failure.message.into()),
                    // Not a row edited in place, or a row that fails: the whole derivation
                    // decides (and reports what fails).
                    Ok(None) | Err(_) => {}
                }
            }
        }
        let mut skipped = Skipped::default();
        let mut derived = Derived::default();
        let mut wrote = false;
        let mut broken = None;
        match run_statement(watch, &rows, absent) {
            Ok(run) => {
                derived += run.derived;
                wrote = run.writes > 0 || run.derived != Derived::default();
                skipped.add(run.problems, run.problem);
            }
            Err(failure) if failure.transient => return Err(failure.message.into()),
            Err(failure) => {
                // Broken whatever the rows (a column it names is gone)? Then nothing can be
                // derived; else find the rows that fail.
                match run_statement(watch, &Rows::Keyed(Value::Array(vec![])), absent) {
                    Err(f) if f.transient => return Err(f.message.into()),
                    Err(f) => broken = Some(f.message),
                    Ok(_) => {
                        let keys = match rows {
                            Rows::Keyed(Value::Array(keys)) => keys,
                            Rows::Keyed(_) => vec![],
                            Rows::All => all_keys(watch),
                        };
                        let mut found = Found {
                            derived: &mut derived,
                            wrote: &mut wrote,
                            skipped: &mut skipped,
                        };
                        bisect(watch, &keys, absent, failure.message, &mut found)?;
                    }
                }
            }
        }
        if let Some(message) = broken {
            let warning = format!(
                "indexnow: the watch of {} for {} could not derive its URLs: {message}",
                watch.table, watch.pattern
            );
            if matches!(deriver, Deriver::AfterCommit) {
                warn_broken(watch, warning);
            } else {
                // The changes are kept, tried again by every pass of a worker: said once a
                // session.
                let said_before =
                    matches!(deriver, Deriver::ChangeSet(_)) && !first_warning(watch.id, &warning);
                if !said_before {
                    warn_kept(warning);
                }
                return Err(Unfinished {
                    message,
                    broken: true,
                });
            }
        } else if skipped.count > 0 {
            let at_write = matches!(deriver, Deriver::Write | Deriver::WriteEdited);
            if at_write && references_deferred(watch) {
                return Err(format!(
                    "{} rows left to the derivation after commit (a deferred foreign key)",
                    skipped.count
                )
                .into());
            }
            warn(
                watch,
                format!(
                    "indexnow: {} row{} of {} skipped for {} ({})",
                    skipped.count,
                    if skipped.count == 1 { "" } else { "s" },
                    watch.table,
                    watch.pattern,
                    skipped.first.join("; ")
                ),
            );
        }
        Ok((derived, wrote))
    })
}

/// What a bisection adds up.
struct Found<'a> {
    derived: &'a mut Derived,
    wrote: &'a mut bool,
    skipped: &'a mut Skipped,
}

/// Derives `keys` in halves until the rows that fail are alone; those are skipped. A transient
/// failure on the way stops it (see [`derive`]).
fn bisect(
    watch: &Watch,
    keys: &[Value],
    absent: Reason,
    message: String,
    found: &mut Found<'_>,
) -> Result<(), String> {
    if keys.len() <= 1 {
        if let Some(key) = keys.first() {
            found.skipped.add(1, Some(format!("{key}: {message}")));
        }
        return Ok(());
    }
    let (left, right) = keys.split_at(keys.len() / 2);
    for half in [left, right] {
        match run_statement(watch, &Rows::Keyed(Value::Array(half.to_vec())), absent) {
            Ok(run) => {
                *found.derived += run.derived;
                *found.wrote |= run.writes > 0 || run.derived != Derived::default();
                found.skipped.add(run.problems, run.problem);
            }
            Err(f) if f.transient => return Err(f.message),
            Err(f) => bisect(watch, half, absent, f.message, found)?,
        }
    }
    Ok(())
}

/// Every key the whole-table derivation covers, for finding the rows that fail.
fn all_keys(watch: &Watch) -> Vec<Value> {
    let sql = format!(
        "SELECT pg_catalog.jsonb_agg(k) FROM ( \
           SELECT {row_key} AS k FROM {table} r \
           UNION SELECT row_key FROM {ext}.indexnow_sources WHERE watch_id = $1) x",
        row_key = statements::row_key(&key::names(watch.oid), "r"),
        table = watch.table,
        ext = watch.ext,
    );
    let keys: Option<JsonB> = Spi::connect(|client| {
        plan_cache::read(client, &sql, &[watch.id.into()])?
            .first()
            .get_one()
    })
    .unwrap_or_else(|e| error!("indexnow: reading the keys of {}: {e}", watch.table));
    match keys {
        Some(JsonB(Value::Array(keys))) => keys,
        _ => vec![],
    }
}

fn warn(watch: &Watch, message: String) {
    ErrorReport::new(PgSqlErrorCode::ERRCODE_WARNING, message, "indexnow")
        .set_hint(format!(
            "Only these rows were skipped; a write that caused this succeeded. Fix the watch with \
             indexnow_watch() (which catches up by itself), or the rows, then run \
             indexnow_reconcile('{}').",
            watch.table.replace('\'', "''")
        ))
        .report(PgLogLevel::WARNING);
}

/// A watch that fails for every row, met by `indexnow_watch()`, `indexnow_reconcile()` or a re-read
/// at send time: nothing was derived.
fn warn_broken(watch: &Watch, message: String) {
    ErrorReport::new(PgSqlErrorCode::ERRCODE_WARNING, message, "indexnow")
        .set_hint(format!(
            "Nothing was derived: the watch fails for every row. Make it again with \
             indexnow_watch() if a column it names is gone, or give back what its maker lost \
             (a privilege; row-level security applying to the maker), then run \
             indexnow_reconcile('{}').",
            watch.table.replace('\'', "''")
        ))
        .report(PgLogLevel::WARNING);
}

fn warn_kept(message: String) {
    ErrorReport::new(PgSqlErrorCode::ERRCODE_WARNING, message, "indexnow")
        .set_hint(
            "The write succeeded, and its change is kept: it is derived once the watch can read \
             its rows again. Make the watch again with indexnow_watch() if a column it names is \
             gone, or give back what its maker lost (a privilege; row-level security applying \
             to the maker).",
        )
        .report(PgLogLevel::WARNING);
}

thread_local! {
    /// The broken watches' WARNINGs this session has given, by watch.
    static WARNED: std::cell::RefCell<std::collections::HashMap<i32, String>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Whether `warning` about `watch` is new to this session (a watch broken another way is).
fn first_warning(watch: i32, warning: &str) -> bool {
    WARNED.with_borrow_mut(|warned| {
        warned.insert(watch, warning.to_string()).as_deref() != Some(warning)
    })
}

/// Derives the oldest change set not locked by another (or, with [`Waiting::Wait`], waits for
/// it), together with small ones after it of the same table and watches (`most` change sets in
/// all at most), and deletes them. Returns how many it derived: 0 when there was none.
/// Those of a watch that cannot derive now are passed over (added to `passed_over`).
pub fn derive_one_change_set(
    ext: &str,
    waiting: Waiting,
    most: usize,
    passed_over: &mut Vec<i64>,
) -> usize {
    loop {
        match derive_taken(ext, waiting, most, &[], passed_over, None) {
            Ok(derived) => return derived,
            Err(stuck) if stuck.broken => passed_over.extend(stuck.ids),
            // The change set stays: this transaction ends, and it is derived again.
            Err(stuck) => error!(
                "indexnow: deriving a change set of {} failed, it is kept for the next try: {}",
                stuck.table, stuck.message
            ),
        }
    }
}

/// As [`derive_one_change_set`], with `settings` for its derivations, leaving out the change
/// sets `passed_over`; a derivation that fails for a reason that is gone if it is tried again (a
/// lock wait `lock_timeout` ended) leaves the change sets in place and says which table's they
/// were, why, and their ids.
fn derive_taken(
    ext: &str,
    waiting: Waiting,
    most: usize,
    settings: &[(&'static str, String)],
    passed_over: &[i64],
    at_most: Option<std::time::Duration>,
) -> Result<usize, Stuck> {
    // A read first: an idle worker's pass takes no transaction id.
    if most == 0 || !change_sets::waiting(ext) || !may_derive_here() {
        return Ok(0);
    }
    // A worker derives a table's changed rows in slices no larger than it last found to fit in
    // `at_most` ([`SLICES`]): no change sets merged then.
    let most = match at_most {
        Some(_) if slice_of_some_table_is_cut() => 1,
        _ => most,
    };
    let Some(mut taken) = change_sets::take(ext, waiting, most, passed_over) else {
        return Ok(0);
    };
    if taken.keys.is_none() && unfold(ext, &taken, settings)? {
        change_sets::remove(ext, &taken.ids);
        return Ok(taken.ids.len());
    }
    let sliced = at_most.and_then(|_| cut_to_slice(&mut taken));
    // What it queues is held for the transaction that recorded it (`crate::queue::HELD_BY_SQL`).
    let mut settings = settings.to_vec();
    settings.push((
        crate::guc::DERIVING_FOR_NAME,
        change_sets::recorded_by(ext, &taken.ids),
    ));
    let settings = &settings[..];
    // A worker's derivation of changed rows is given `at_most`: a slow watch expression must not
    // stop its sending (the change sets are taken, and locked, outside the time it is given).
    let wrote = match (at_most, &taken.keys) {
        (Some(at_most), Some(_)) => {
            let started = std::time::Instant::now();
            match subtransaction::run_within(at_most, || derive_watches(ext, &taken, settings)) {
                Ok(derived) => {
                    let derived = derived?;
                    slice_fitted(&taken, started.elapsed(), at_most);
                    derived
                }
                Err(subtransaction::Ended::OutOfTime) => return Err(out_of_time(taken, at_most)),
                Err(subtransaction::Ended::Failed(failure)) => {
                    error!(
                        "indexnow: deriving the recorded changes: {}",
                        failure.message
                    )
                }
            }
        }
        _ => derive_watches(ext, &taken, settings)?,
    };
    let (wrote, derived) = wrote;
    if let Some(columns) = &taken.columns {
        let queued = derived.created + derived.changed + derived.removed;
        column_changes::count(ext, taken.table, columns, queued > 0);
    }
    if taken.keys.is_none() {
        vacate_inactive(ext, taken.table, Reason::Deleted);
    }
    match sliced {
        Some(derived) => change_sets::remove_first_keys(ext, taken.ids[0], derived),
        None => change_sets::remove(ext, &taken.ids),
    }
    if wrote {
        crate::wake::worker_at_commit();
    }
    Ok(taken.ids.len())
}

/// Turns the whole-table change set `taken` of a big table into keyed change sets
/// (`change_sets::unfold_whole_table`), derived after it like any others: a slice at a time, a
/// worker sending between slices, its memory that of one slice. Whether it did; when it did not,
/// the caller derives the table whole (a small table, a watch that cannot derive now, a source
/// whose key is not the table's key now, unwatched watches whose removals are decided by the
/// whole table's derivation, a table this role cannot read unhindered).
///
/// A watch that cannot derive now (`broken`) is left out of the keyed change sets and owes the
/// whole table instead, as its derivation of them would have made it: a table whose every watch
/// is broken is derived whole, which passes it over until one can derive (a broken watch's keyed
/// change sets, each owing the whole table again, would make the table unfolded again and again).
fn unfold(
    ext: &str,
    taken: &change_sets::Taken,
    settings: &[(&'static str, String)],
) -> Result<bool, Stuck> {
    if has_unwatched(ext, taken.table) {
        return Ok(false);
    }
    let mut settings = settings.to_vec();
    settings.extend(pinned_settings());
    let stuck = |message: String| Stuck {
        table: table_name(taken.table),
        message,
        ids: taken.ids.clone(),
        broken: false,
        slow: false,
    };
    let (mut sound, mut broken) = (vec![], vec![]);
    for watch in watches_of(ext, taken.table) {
        if !taken.covers(watch.id) {
            continue;
        }
        let no_rows = Rows::Keyed(Value::Array(vec![]));
        match with_settings(&settings, || {
            run_statement(&watch, &no_rows, Reason::Deleted)
        }) {
            Ok(_) => sound.push(watch.id),
            Err(failure) if failure.transient => return Err(stuck(failure.message)),
            Err(_) => broken.push(watch.id),
        }
    }
    if sound.is_empty() {
        return Ok(false);
    }
    let key = key::columns(taken.table);
    let watches = if broken.is_empty() {
        taken.watches.clone()
    } else {
        Some(sound.clone())
    };
    settings.push(("row_security", "off".into()));
    crate::process::report_activity(
        &format!(
            "indexnow: reading the keys of every row of {}",
            table_name(taken.table)
        ),
        true,
    );
    let unfolded = subtransaction::run(|| {
        with_settings(&settings, || {
            change_sets::unfold_whole_table(ext, taken.ids[0], taken.table, &key, watches, &sound)
        })
    });
    match unfolded {
        Ok(Ok(0)) => Ok(false),
        Ok(Ok(_)) => {
            for watch in broken {
                change_sets::owe_whole_table(ext, taken.table, watch);
            }
            Ok(true)
        }
        // (read as the table's whole derivation reads it, it fails there too, and is said there)
        Ok(Err(_)) => Ok(false),
        Err(failure) if failure.transient => Err(stuck(failure.message)),
        Err(_) => Ok(false),
    }
}

/// The table `table` by name, for messages.
fn table_name(table: pg_sys::Oid) -> String {
    plan_cache::get_one::<String>(
        "SELECT $1::pg_catalog.regclass::pg_catalog.text",
        &[table.into()],
    )
    .ok()
    .flatten()
    .unwrap_or_else(|| format!("table {}", table.to_u32()))
}

thread_local! {
    /// How many changed rows of each table a worker derives in one slice: every change set's
    /// keys ([`change_sets::KEYS_AT_MOST`]) until a derivation of that table runs out of time,
    /// then half as many at each time out, down to one row, and twice as many again after each
    /// slice derived in under a quarter of its time. A slow watch expression (a user's function
    /// of 50 ms a row) or a big change (a migration of a million rows) is derived a slice at a
    /// time, the worker sending between slices, and what a slice derived stays derived (a change
    /// set cut short and split in two was derived from the start again, every half still too
    /// large: nothing was ever derived).
    static SLICES: std::cell::RefCell<std::collections::HashMap<pg_sys::Oid, usize>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Whether some table is derived in slices smaller than a change set now.
fn slice_of_some_table_is_cut() -> bool {
    SLICES.with_borrow(|slices| !slices.is_empty())
}

/// Keeps the first keys of `taken` (one change set) that its table's slice allows, when it has
/// more; how many it kept, when it cut.
fn cut_to_slice(taken: &mut change_sets::Taken) -> Option<usize> {
    let slice = SLICES.with_borrow(|slices| slices.get(&taken.table).copied())?;
    let Some(Value::Array(keys)) = &mut taken.keys else {
        return None;
    };
    if taken.ids.len() != 1 || keys.len() <= slice {
        return None;
    }
    keys.truncate(slice);
    Some(slice)
}

/// A slice of `taken`'s table was derived in `took` of the `at_most` it had: one well within its
/// time lets the next be twice as large.
fn slice_fitted(
    taken: &change_sets::Taken,
    took: std::time::Duration,
    at_most: std::time::Duration,
) {
    if took * 4 > at_most {
        return;
    }
    SLICES.with_borrow_mut(|slices| {
        if let Some(slice) = slices.get_mut(&taken.table) {
            *slice = slice.saturating_mul(2);
            if *slice >= change_sets::KEYS_AT_MOST {
                slices.remove(&taken.table);
            }
        }
    });
}

/// Derives the change sets `taken` for each of their watches; whether it wrote to the queue, and
/// what it queued.
fn derive_watches(
    ext: &str,
    taken: &change_sets::Taken,
    settings: &[(&'static str, String)],
) -> Result<(bool, Derived), Stuck> {
    let mut wrote = false;
    let mut queued = Derived::default();
    for watch in watches_of(ext, taken.table) {
        if !taken.covers(watch.id) {
            continue;
        }
        let rows = match &taken.keys {
            Some(keys) => Rows::Keyed(keys.clone()),
            None => Rows::All,
        };
        // What a worker shows in pg_stat_activity meanwhile (a slow watch expression is seen
        // there, by its table and pattern).
        let what = match &taken.keys {
            Some(Value::Array(keys)) => format!("{} changed rows", keys.len()),
            Some(_) => "changed rows".to_string(),
            None => "every row".to_string(),
        };
        crate::process::report_activity(
            &format!(
                "indexnow: deriving {what} of {} for {}",
                watch.table, watch.pattern
            ),
            true,
        );
        match derive_with(&watch, rows, Reason::Deleted, Deriver::ChangeSet(settings)) {
            Ok((derived, w)) => {
                wrote |= w;
                queued += derived;
            }
            Err(unfinished) => {
                // A watch that cannot derive now owes a derivation of the whole table, which
                // stands for every change recorded for it meanwhile (one, however many writes).
                let owed_already = unfinished.broken
                    && taken.keys.is_none()
                    && taken.watches.as_deref() == Some(&[watch.id][..]);
                if unfinished.broken && !owed_already {
                    change_sets::owe_whole_table(ext, taken.table, watch.id);
                    continue;
                }
                if owed_already {
                    // (others of its kind, recorded by other transactions meanwhile: one stays)
                    change_sets::drop_owed_twice(ext, taken.table, watch.id, &taken.ids);
                }
                if wrote {
                    crate::wake::worker_at_commit();
                }
                return Err(Stuck {
                    table: watch.table,
                    message: unfinished.message,
                    ids: taken.ids.clone(),
                    broken: unfinished.broken,
                    slow: false,
                });
            }
        }
    }
    Ok((wrote, queued))
}

/// A worker's derivation of `taken` took longer than `at_most` and was rolled back: its table is
/// derived in slices of half as many rows from now on ([`SLICES`]), the first tried by the next
/// pass; a row that alone takes that long is passed over by this pass and tried by the next.
/// Either way the worker goes on to send.
fn out_of_time(taken: change_sets::Taken, at_most: std::time::Duration) -> Stuck {
    let table = table_name(taken.table);
    let rows = match &taken.keys {
        Some(Value::Array(keys)) => keys.len(),
        _ => 0,
    };
    let half = rows / 2;
    let then = if half > 0 {
        SLICES.with_borrow_mut(|slices| slices.insert(taken.table, half));
        format!("derived from now on in slices of {half} rows")
    } else {
        "left for the next pass".to_string()
    };
    Stuck {
        message: format!(
            "deriving {rows} changed rows of {table} took longer than {} s (a slow or blocking \
             watch expression): {then}; sending goes on",
            at_most.as_secs_f64()
        ),
        table,
        ids: if half > 0 { vec![] } else { taken.ids },
        broken: false,
        slow: true,
    }
}

/// How long a worker's derivation waits for a queue row or source another transaction holds
/// before it leaves the change set for its next pass and goes on to send what is due: a
/// transaction left open, or prepared and never committed, must not stop a database's sending.
/// (Longer than a reader's: a worker is in no one's way, and a reconcile holds rows for longer.)
const WORKER_WAITS_AT_MOST: &str = "2s";

/// Change sets left for a later try: their derivation waited too long for another transaction,
/// or (`broken`) their watch cannot derive now (a WARNING said why). Their table, why, and ids.
pub struct Stuck {
    pub table: String,
    pub message: String,
    pub ids: Vec<i64>,
    pub broken: bool,
    /// The derivation took longer than a worker gives it (see [`out_of_time`]).
    pub slow: bool,
}

/// Derives the oldest change set no other sender holds, leaving out those `passed_over` in this
/// pass, as a worker does, one a transaction, in at most `at_most` when they are changed rows
/// (a whole table's derivation is not cut short): how many it derived, or the change sets that
/// waited too long for another transaction's lock or took too long (they stay, for the next
/// pass, which derives a smaller slice of them: [`out_of_time`], [`SLICES`]). Small change sets
/// after it are taken with it, unless some table is derived in slices.
pub fn derive_one_change_set_for_worker(
    ext: &str,
    passed_over: &[i64],
    at_most: std::time::Duration,
) -> Result<usize, Stuck> {
    derive_taken(
        ext,
        Waiting::Skip,
        MERGED_AT_MOST,
        &[("lock_timeout", WORKER_WAITS_AT_MOST.to_string())],
        passed_over,
        Some(at_most),
    )
}

/// How long a reader (`indexnow_push_now()`; `indexnow_status()` derives nothing) waits for a
/// queue row or source that another transaction holds before it leaves the change sets to the
/// workers: a transaction left open, or prepared and never committed, must not hang the caller.
const READER_WAITS_AT_MOST: &str = "1s";

/// Derives every change set there is, as [`derive_all_change_sets`], for a reader that reports
/// or sends what is derived: a change set whose derivation waits longer than
/// [`READER_WAITS_AT_MOST`] for another transaction's lock, and those after it, are left for the
/// workers (derived once that transaction ends), with a NOTICE.
pub fn derive_change_sets_for_reader(ext: &str) -> i64 {
    let settings = [("lock_timeout", READER_WAITS_AT_MOST.to_string())];
    let mut n = 0;
    let mut passed_over = vec![];
    loop {
        // Set around the whole step, the bound holds for taking the change set too (another
        // transaction deriving it, left open): that wait ends this reader's deriving the same way.
        let taken = subtransaction::run(|| {
            with_settings(&settings, || {
                derive_taken(ext, Waiting::Wait, MERGED_AT_MOST, &[], &passed_over, None)
            })
        })
        .unwrap_or_else(|failure| {
            if !failure.transient {
                error!(
                    "indexnow: deriving the recorded changes: {}",
                    failure.message
                );
            }
            Err(Stuck {
                table: "a watched table".into(),
                message: failure.message,
                ids: vec![],
                broken: false,
                slow: false,
            })
        });
        match taken {
            Ok(0) => return n,
            Ok(derived) => n += derived as i64,
            // (its watch cannot derive now: the WARNING said so)
            Err(stuck) if stuck.broken => passed_over.extend(stuck.ids),
            Err(stuck) => {
                notice!(
                    "indexnow: the changes recorded for {} are left to the workers: {} (another \
                     transaction holds what they would write; they are derived once it ends)",
                    stuck.table,
                    stuck.message
                );
                return n;
            }
        }
    }
}

/// Whether this transaction may derive: it can write, and it reads at READ COMMITTED (a snapshot
/// taken earlier would make the queue upserts fail against a sender's updates, as a writer's
/// would). Elsewhere a reader reports what the workers derived.
fn may_derive_here() -> bool {
    // SAFETY: a plain read of this backend's transaction state.
    crate::extension::writable()
        && unsafe { pg_sys::XactIsoLevel } == pg_sys::XACT_READ_COMMITTED as i32
}

/// Takes what watch `watch_id`'s fingerprint covers now as known to search engines, for the rows
/// unchanged since they were derived (`statements::WatchDefinition::fingerprints_taken_as_known`):
/// `before` turns the columns the fingerprint covers now into those it covered until now. Returns
/// how many sources took the new fingerprint, or why none did (nothing is then changed).
pub fn take_fingerprints_as_known(
    ext: &str,
    watch_id: i32,
    before: impl FnOnce(&statements::WatchDefinition) -> statements::Counted,
) -> Result<i64, String> {
    let definition = generated::definition_of(ext, watch_id)?;
    let sql = definition.fingerprints_taken_as_known(&before(&definition));
    subtransaction::run(|| {
        owner::as_extension_owner(|| {
            with_settings(&pinned_settings(), || Spi::get_one::<i64>(&sql))
        })
    })
    .map_err(|failure| failure.message)?
    .map(|n| n.unwrap_or(0))
    .map_err(|e| e.to_string())
}

/// For a reader that derives every change set: takes (locks) all those recorded now first, waiting
/// for any a worker is deriving, before it writes anything; then it derives them, leaving those
/// recorded and taken by a worker since. A reader that waited for a worker's change set after
/// deriving others held queue rows and sources that worker's derivation needed: the two
/// deadlocked (seen in the tests: a watch's whole-table change set, derived by the worker while
/// a session called `indexnow_derive()`).
pub fn take_all_recorded(ext: &str) {
    if change_sets::waiting(ext) && may_derive_here() {
        change_sets::lock_all(ext);
    }
}

/// Records the rows whose time has come as changed (`change_sets::record_woken`), when this
/// transaction may derive.
pub fn record_woken(ext: &str) {
    if may_derive_here() {
        change_sets::record_woken(ext);
    }
}

/// Derives every change set there is, in the calling transaction (a reader). Returns how many.
pub fn derive_all_change_sets(ext: &str) -> i64 {
    take_all_recorded(ext);
    let mut n = 0;
    let mut passed_over = vec![];
    loop {
        let derived = derive_one_change_set(ext, Waiting::Skip, MERGED_AT_MOST, &mut passed_over);
        if derived == 0 {
            return n;
        }
        n += derived as i64;
    }
}

/// The URLs of the table's unwatched watches: their sources are given up, and each URL no other
/// watch gives is removed (`reason`) if search engines were told of it (or may have been: a
/// request tried since, its answer lost), else its request is cancelled, as a derivation decides
/// (`statements`). Run by TRUNCATE and reconcile, which are when a table's whole content
/// is known.
pub fn vacate_inactive(ext: &str, table: pg_sys::Oid, reason: Reason) -> i64 {
    // Most tables have no unwatched watch: then nothing is written (a write to the watch table
    // makes every backend read its watches again, `crate::capture::cache`).
    if !has_unwatched(ext, table) {
        return 0;
    }
    let told_of = crate::queue::told_of_since("u", "g.since");
    let sql = format!(
        "WITH w AS (SELECT id FROM {ext}.indexnow_watches \
                     WHERE tbl = $1::pg_catalog.oid::pg_catalog.regclass AND NOT active), \
         gs AS (DELETE FROM {ext}.indexnow_sources s USING w WHERE s.watch_id = w.id \
                RETURNING s.url_hash, s.since), \
         gone AS ( \
           SELECT DISTINCT ON (g.url_hash) g.url_hash, u.url, u.host, u.request_seq, \
                  {told_of} AS announced \
             FROM gs g JOIN {ext}.indexnow_urls u ON u.url_hash = g.url_hash \
            WHERE NOT EXISTS (SELECT FROM {ext}.indexnow_sources s \
                               WHERE s.url_hash = g.url_hash \
                                 AND s.watch_id NOT IN (SELECT id FROM w)) \
            ORDER BY g.url_hash, g.since), \
         q AS ( \
           INSERT INTO {ext}.indexnow_urls AS u \
             (url, url_hash, host, reason, changed_at, queued_at, available_at) \
           SELECT url, url_hash, host, $2, now(), now(), now() FROM gone WHERE announced \
           {on_conflict} RETURNING 1), \
         c AS ( \
           UPDATE {ext}.indexnow_urls u SET settled_seq = u.request_seq, reason = $2 \
             FROM gone g WHERE NOT g.announced AND u.url_hash = g.url_hash \
              AND u.request_seq = g.request_seq AND u.request_seq > u.settled_seq RETURNING 1), \
         d AS (DELETE FROM {ext}.indexnow_watches x USING w WHERE x.id = w.id RETURNING 1), \
         r AS (DELETE FROM {ext}.indexnow_relations x USING w WHERE x.watch_id = w.id RETURNING 1) \
         SELECT (SELECT count(*) FROM q) \
                + 0 * ((SELECT count(*) FROM c) + (SELECT count(*) FROM d) + (SELECT count(*) FROM r))",
        on_conflict = crate::queue::ON_CONFLICT_SQL,
    );
    Spi::connect_mut(|client| {
        client
            .update(&sql, None, &[table.into(), reason.as_str().into()])?
            .first()
            .get_one::<i64>()
    })
    .unwrap_or_else(|e| error!("indexnow: giving up the URLs of unwatched watches: {e}"))
    .unwrap_or(0)
}

/// Whether `table` has unwatched watches whose URLs are still to be given up.
fn has_unwatched(ext: &str, table: pg_sys::Oid) -> bool {
    plan_cache::get_one::<bool>(
        &format!(
            "SELECT EXISTS (SELECT FROM {ext}.indexnow_watches \
                             WHERE tbl = $1::pg_catalog.oid::pg_catalog.regclass AND NOT active)"
        ),
        &[table.into()],
    )
    .unwrap_or_else(|e| error!("indexnow: looking for unwatched watches: {e}"))
        == Some(true)
}
