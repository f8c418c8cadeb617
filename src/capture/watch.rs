//! `indexnow_watch()`, `indexnow_unwatch()`, `indexnow_reconcile()`, `indexnow_derive()`:
//! registering a content table, checking every argument against the table when called, and
//! installing the triggers.
//!
//! The triggers (statement-level, with transition tables, plus TRUNCATE) all call one function of
//! the extension, `_indexnow_capture()` (`super::trigger_function`). Because the triggers depend on an
//! extension member, `DROP EXTENSION` refuses while a table is watched (CASCADE drops the triggers
//! too), and `pg_dump` restores them after `CREATE EXTENSION` recreates the function.
//!
//! Who may watch: a role with the TRIGGER privilege on the table (its owner has it) and on every
//! related table, given EXECUTE on these functions (`indexnow_grant_watching()` in
//! sql/security.sql does it in one step). They run as their caller: the arguments and the watch's
//! own SQL are checked with the caller's rights and `search_path` (which the watch keeps for its
//! expressions, with the caller's `TimeZone` for a `publish_at` without zone), and the watch's SQL
//! is later evaluated with the maker's rights; then the extension's part (its tables, its
//! triggers) runs as the extension's owner (`crate::derive::owner`).
//!
//! Watching again, unwatching, recovering:
//! - The first watch of a table and pattern records the rows public now as known to search
//!   engines (they are not announced; scheduled ones are queued for their time).
//! - Watching the same table and pattern again (to change it, or to repair it after an `ALTER
//!   TABLE` broke it) keeps what the watch derived before and derives every row again: a page
//!   created, changed or removed meanwhile is queued, an unchanged one is not.
//! - `indexnow_unwatch()` keeps an unwatched watch's sources while it gave URLs: the next
//!   TRUNCATE or reconcile of the table removes those URLs no other watch gives (if search engines
//!   were told of them), and watching the same pattern again takes them back.

use super::placement::{self, Existing};
use super::{related, triggers};
use crate::derive::change_sets::{Waiting, MERGED_AT_MOST};
use crate::derive::owner;
use crate::derive::statements::UrlSource;
use crate::derive::{self, generated, template, Derivation, Rows};
use crate::error::{invalid_parameter, required, shown};
use crate::queue::{url_hash, Reason, UnknownReason};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::PgRelation;

/// The columns ignored when `ignore` is not given: the SQL defaults of `indexnow_watch()` and
/// `indexnow_fingerprint()` name the same (a literal each, as pgrx takes defaults; a test checks
/// that they agree).
pub(crate) const DEFAULT_IGNORE: [&str; 2] = ["created_at", "updated_at"];

fn watch_error(message: String) -> ! {
    invalid_parameter(format!("indexnow_watch: {message}"))
}

fn spi<T>(what: &str, r: Result<T, pgrx::spi::Error>) -> T {
    r.unwrap_or_else(|e| error!("indexnow: {what}: {e}"))
}

struct Table {
    qualified: String,
    label: String,
    /// (name, type oid)
    columns: Vec<(String, pg_sys::Oid)>,
    /// (name, SQL type)
    key: Vec<(String, String)>,
    /// (name, type oid) of the key columns
    key_types: Vec<(String, pg_sys::Oid)>,
}

fn describe(oid: pg_sys::Oid) -> Table {
    let (qualified, label, columns) = Spi::connect(|client| {
        let row = client
            .select(
                "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname), pg_catalog.format('%s.%s', n.nspname, c.relname), \
                        c.relkind::text, \
                        EXISTS (SELECT FROM pg_catalog.pg_depend d \
                                  JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
                                 WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass \
                                   AND d.objid = c.oid AND d.deptype = 'e' \
                                   AND e.extname = 'indexnow')::text \
                   FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                  WHERE c.oid = $1",
                None,
                &[oid.into()],
            )?
            .first();
        let (qualified, label, kind, own) = (
            row.get::<String>(1)?.unwrap(),
            row.get::<String>(2)?.unwrap(),
            row.get::<String>(3)?.unwrap(),
            row.get::<String>(4)?.unwrap(),
        );
        if kind != "r" && kind != "p" {
            watch_error(format!("{label} is not a table: only tables can be watched"));
        }
        if own == "true" {
            watch_error(format!(
                "{label} is one of indexnow's own tables: watching it would capture the queue's own writes"
            ));
        }
        let columns = client
            .select(
                "SELECT attname::text, atttypid FROM pg_catalog.pg_attribute \
                  WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                None,
                &[oid.into()],
            )?
            .map(|r| Ok((r.get::<String>(1)?.unwrap(), r.get::<pg_sys::Oid>(2)?.unwrap())))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()?;
        Ok::<_, pgrx::spi::Error>((qualified, label, columns))
    })
    .unwrap_or_else(|e| error!("indexnow: reading the table's columns: {e}"));
    let key = crate::derive::key::columns(oid);
    let key_types = key
        .iter()
        .map(|(k, _)| {
            let typ = columns.iter().find(|(c, _)| c == k).map(|(_, t)| *t);
            (k.clone(), typ.unwrap_or(pg_sys::InvalidOid))
        })
        .collect();
    Table {
        qualified,
        label,
        columns,
        key,
        key_types,
    }
}

/// The type of `expr` over a row of `table` (checked in a subtransaction: an expression that does
/// not parse is an ERROR naming the argument), which must be one expression
/// ([`check_one_expression`]).
fn expression_type(ext: &str, table: &Table, expr: &str, what: &str) -> String {
    let ty = spi(
        "checking an expression",
        Spi::get_one_with_args::<String>(
            &format!("SELECT {ext}._indexnow_expression_type($1, $2, $3)"),
            &[table.qualified.as_str().into(), expr.into(), what.into()],
        ),
    )
    .unwrap_or_default();
    // (valid in parentheses: may it be more than one?)
    check_one_expression(expr, what);
    check_no_clock(table, expr, what);
    ty
}

/// Refuses `expr` (the argument `what`) unless it is one SQL expression. The statements use it in
/// parentheses, where text that closes them would read as more (`status = 'published') OR
/// (true` is `(status = 'published') OR (true)`: every row public): `SELECT <expr>` must parse as
/// one statement selecting one value, and nothing else.
fn check_one_expression(expr: &str, what: &str) {
    let sql = std::ffi::CString::new(format!("SELECT {expr}"))
        .unwrap_or_else(|_| watch_error(format!("{what} contains a NUL character")));
    // SAFETY: the raw parser reads the string, which lives across the call, and allocates the
    // tree in the subtransaction's memory, which it is read in; a syntax error is an ERROR,
    // caught by the subtransaction.
    let one = crate::subtransaction::run(|| unsafe {
        let statements = pgrx::PgList::<pg_sys::RawStmt>::from_pg(pg_sys::raw_parser(
            sql.as_ptr(),
            pg_sys::RawParseMode::RAW_PARSE_DEFAULT,
        ));
        let Some(raw) = statements.get_ptr(0).filter(|_| statements.len() == 1) else {
            return false;
        };
        let statement = (*raw).stmt;
        if !pgrx::is_a(statement, pg_sys::NodeTag::T_SelectStmt) {
            return false;
        }
        let select = &*(statement as *mut pg_sys::SelectStmt);
        pgrx::PgList::<pg_sys::Node>::from_pg(select.targetList).len() == 1
            && select.op == pg_sys::SetOperation::SETOP_NONE
            && select.distinctClause.is_null()
            && select.intoClause.is_null()
            && select.fromClause.is_null()
            && select.whereClause.is_null()
            && select.groupClause.is_null()
            && select.havingClause.is_null()
            && select.windowClause.is_null()
            && select.valuesLists.is_null()
            && select.sortClause.is_null()
            && select.limitOffset.is_null()
            && select.limitCount.is_null()
            && select.lockingClause.is_null()
            && select.withClause.is_null()
    });
    if !matches!(one, Ok(true)) {
        watch_error(format!(
            "{what} must be one SQL expression over the row; {} is not",
            shown(expr)
        ));
    }
}

/// Runs `f` on `expr` analyzed as PostgreSQL analyzes `SELECT (expr) FROM table r` (the query,
/// and its text): no object is made, nothing is run. `None` when it does not analyze (an ERROR,
/// caught) or `f` finds nothing to say.
fn analyzed<R>(
    table: &Table,
    expr: &str,
    f: impl FnOnce(*mut pg_sys::Query, &str) -> Option<R>,
) -> Option<R> {
    let text = format!("SELECT ({expr}) FROM {} r", table.qualified);
    let sql = std::ffi::CString::new(text.as_str()).ok()?;
    // SAFETY: the parser and the analyzer read the string, which lives across the calls, and
    // allocate in the subtransaction's memory, which `f` reads the tree in; an ERROR is caught by
    // the subtransaction.
    crate::subtransaction::run(|| unsafe {
        let statements = pgrx::PgList::<pg_sys::RawStmt>::from_pg(pg_sys::raw_parser(
            sql.as_ptr(),
            pg_sys::RawParseMode::RAW_PARSE_DEFAULT,
        ));
        let query = pg_sys::parse_analyze_fixedparams(
            statements.get_ptr(0)?,
            sql.as_ptr(),
            std::ptr::null(),
            0,
            std::ptr::null_mut(),
        );
        f(query, &text)
    })
    .ok()
    .flatten()
}

/// The columns of `table` (`oid`) that `expr` reads, inside a subquery too (`None` when that
/// cannot be known: it reads the whole row, `is_public(r)`, and which columns a function reads is
/// not recorded). Found by parse analysis of the expression over the row, as PostgreSQL records a
/// view's dependencies, but with no view made: a temporary one made `PREPARE TRANSACTION` fail
/// for the transaction that watched a table, or altered a watched one.
fn expression_columns(oid: pg_sys::Oid, table: &Table, expr: &str) -> Option<Vec<String>> {
    // SAFETY: the query is the analyzer's, read in the memory it was made in.
    analyzed(table, expr, |query, _| unsafe {
        // Every Var of the query's own level, those in subqueries that refer to it included;
        // the row `r` is its one table, range-table entry 1.
        let vars = pgrx::PgList::<pg_sys::Node>::from_pg(pg_sys::pull_vars_of_level(
            (*query).targetList as *mut pg_sys::Node,
            0,
        ));
        let mut columns: Vec<String> = vec![];
        for node in vars.iter_ptr() {
            if !pgrx::is_a(node, pg_sys::NodeTag::T_Var) {
                return None;
            }
            let var = &*(node as *mut pg_sys::Var);
            if var.varno as i64 != 1 || var.varattno < 0 {
                continue;
            }
            if var.varattno == 0 {
                return None;
            }
            let name = std::ffi::CStr::from_ptr(pg_sys::get_attname(oid, var.varattno, false))
                .to_string_lossy()
                .into_owned();
            if !columns.contains(&name) {
                columns.push(name);
            }
        }
        columns.sort();
        Some(columns)
    })
}

/// Refuses `expr` (the argument `what`) when it reads the clock, or calls a volatile function of
/// PostgreSQL's ([`Unfollowed`]): a watch's expressions are
/// evaluated when a row is written, so a page whose `visible` says `published_at <= now()` would
/// never become public at that time, nor an expired one stop being public, without a write.
/// Found in the analyzed expression: a call of `now()`, `current_timestamp` and its kin,
/// `clock_timestamp()`, `statement_timestamp()`, `transaction_timestamp()`, `timeofday()`, the
/// one-argument `age()`, and a date or time literal the parser reads as the clock (`'now'`,
/// `'today'`, `'tomorrow'`, `'yesterday'`). (A function of the user's that reads the clock
/// inside is not seen.)
fn check_no_clock(table: &Table, expr: &str, what: &str) {
    // SAFETY: the query is the analyzer's, read in the memory it was made in.
    let clock = analyzed(table, expr, |query, text| unsafe {
        let tree = std::ffi::CStr::from_ptr(pg_sys::nodeToString(
            (*query).targetList as *const std::ffi::c_void,
        ))
        .to_string_lossy()
        .into_owned();
        clock_read_in(&tree, text)
    });
    match clock {
        Some(Unfollowed::Clock(clock)) => watch_error(format!(
            "{what} reads the clock ({clock}): a watch evaluates it when a row is written, so a \
             page would not become public, or stop being public, at that time without a write; \
             give the time as publish_at or expire_at (a column or an expression of the row), \
             which indexnow follows by itself"
        )),
        Some(Unfollowed::Volatile(function)) => watch_error(format!(
            "{what} calls {function}, a volatile function: its value changes without any write, \
             so what a row derives to would change unseen (and differ between two derivations \
             of the same row); give the watch an expression of the row's values (for time, \
             publish_at or expire_at)"
        )),
        None => {}
    }
}

/// The single-quoted literals of `sql`, from its start (`''` read as a quote).
fn quoted_literals(sql: &str) -> Vec<String> {
    let mut literals = vec![];
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            continue;
        }
        let mut literal = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\'' if chars.peek() == Some(&'\'') => {
                    chars.next();
                    literal.push('\'');
                }
                '\'' => break,
                c => literal.push(c),
            }
        }
        literals.push(literal);
    }
    literals
}

/// What a watch's expression may read that no write follows.
enum Unfollowed {
    /// The clock: `now()`, `current_date`, `'today'`.
    Clock(String),
    /// A volatile function of PostgreSQL's: `random()`, `nextval()`.
    Volatile(String),
}

/// The first clock or volatile built-in function an analyzed expression (`tree`, as
/// `nodeToString` prints it; `text`, the statement its locations are in) reads: see
/// [`check_no_clock`].
fn clock_read_in(tree: &str, text: &str) -> Option<Unfollowed> {
    // (`current_date` and its kin are functions from PostgreSQL 16 on, SQL value functions
    // before)
    const CLOCK_FUNCTIONS: [&str; 10] = [
        "now",
        "clock_timestamp",
        "statement_timestamp",
        "transaction_timestamp",
        "timeofday",
        "current_date",
        "current_time",
        "current_timestamp",
        "localtime",
        "localtimestamp",
    ];
    const CLOCK_WORDS: [&str; 4] = ["now", "today", "tomorrow", "yesterday"];
    let time_types = [
        pg_sys::DATEOID,
        pg_sys::TIMEOID,
        pg_sys::TIMETZOID,
        pg_sys::TIMESTAMPOID,
        pg_sys::TIMESTAMPTZOID,
    ];
    let tokens: Vec<&str> = tree
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | '}'))
        .filter(|t| !t.is_empty())
        .collect();
    let value_after = |from: usize, field: &str| -> Option<i64> {
        tokens[from..]
            .iter()
            .position(|t| *t == field)
            .and_then(|at| tokens.get(from + at + 1))
            .and_then(|v| v.parse().ok())
    };
    for (i, token) in tokens.iter().enumerate() {
        match *token {
            ":funcid" | ":opfuncid" => {
                let Some(oid) = tokens.get(i + 1).and_then(|v| v.parse::<u32>().ok()) else {
                    continue;
                };
                let oid = pg_sys::Oid::from(oid);
                // SAFETY: syscache lookups of a function the analyzer resolved.
                let (name, args, in_catalog, volatile) = unsafe {
                    let name = pg_sys::get_func_name(oid);
                    if name.is_null() {
                        continue;
                    }
                    (
                        std::ffi::CStr::from_ptr(name)
                            .to_string_lossy()
                            .into_owned(),
                        pg_sys::get_func_nargs(oid),
                        pg_sys::get_func_namespace(oid)
                            == pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE),
                        pg_sys::func_volatile(oid)
                            == pg_sys::PROVOLATILE_VOLATILE as std::ffi::c_char,
                    )
                };
                if in_catalog
                    && (CLOCK_FUNCTIONS.contains(&name.as_str()) || (name == "age" && args == 1))
                {
                    return Some(Unfollowed::Clock(format!("{name}()")));
                }
                // (random(), nextval(), gen_random_uuid(): a value of their own each call; a
                // function of the user's, volatile by default, may well read the row alone)
                if in_catalog && volatile {
                    return Some(Unfollowed::Volatile(format!("{name}()")));
                }
            }
            "{SQLVALUEFUNCTION" => {
                let Some(op) = value_after(i, ":op") else {
                    continue;
                };
                if op <= pg_sys::SQLValueFunctionOp::SVFOP_LOCALTIMESTAMP_N as i64 {
                    return Some(Unfollowed::Clock(
                        "current_date, current_time, current_timestamp, localtime or \
                         localtimestamp"
                            .into(),
                    ));
                }
            }
            "{CONST" => {
                let (Some(ty), Some(at)) =
                    (value_after(i, ":consttype"), value_after(i, ":location"))
                else {
                    continue;
                };
                if !time_types.iter().any(|t| t.to_u32() as i64 == ty) {
                    continue;
                }
                // The literal the constant was read from: at its location, or (where the
                // analyzer keeps none, PostgreSQL 18) any literal of the expression.
                let literals = if at >= 0 {
                    quoted_literals(text.get(at as usize..).unwrap_or_default())
                        .into_iter()
                        .take(1)
                        .collect()
                } else {
                    quoted_literals(text)
                };
                if let Some(word) = literals
                    .into_iter()
                    .map(|w| w.trim().to_ascii_lowercase())
                    .find(|w| CLOCK_WORDS.contains(&w.as_str()))
                {
                    return Some(Unfollowed::Clock(format!("'{word}'")));
                }
            }
            _ => {}
        }
    }
    None
}

/// Refuses unless `caller` may put triggers on `table` (`what` names the argument).
fn check_trigger_privilege(caller: pg_sys::Oid, table: pg_sys::Oid, label: &str, what: &str) {
    let may: Option<bool> = spi(
        "checking privileges",
        Spi::get_one_with_args(
            "SELECT pg_catalog.has_table_privilege($1, $2, 'TRIGGER')",
            &[caller.into(), table.into()],
        ),
    );
    if may != Some(true) {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "{what}: permission denied for table {label}: watching it needs the TRIGGER \
                 privilege on it (its owner has it)"
            )
        );
    }
}

/// Refuses a table whose columns the watch's maker may not all read: every derivation reads its
/// rows as the maker, and one that cannot read them derives nothing until it may (and a watch
/// made so took no baseline: then every row was announced as new).
fn check_select_privilege(caller: pg_sys::Oid, table: pg_sys::Oid, label: &str) {
    let may: Option<bool> = spi(
        "checking privileges",
        Spi::get_one_with_args(
            "SELECT pg_catalog.has_table_privilege($1, $2, 'SELECT') \
                 OR coalesce(pg_catalog.bool_and( \
                        pg_catalog.has_column_privilege($1, $2, a.attnum, 'SELECT')), true) \
               FROM pg_catalog.pg_attribute a \
              WHERE a.attrelid = $2 AND a.attnum > 0 AND NOT a.attisdropped",
            &[caller.into(), table.into()],
        ),
    );
    if may != Some(true) {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "indexnow_watch: permission denied for table {label}: a watch reads its rows with \
                 the rights of the role that makes it, which needs SELECT on it"
            )
        );
    }
}

/// Refuses a table whose rows the current role (the watch's maker) could not all read, or that
/// outlives no session, or whose rows a crash takes without a trigger (an unlogged table): every derivation reads the rows as the maker, and a row it cannot see
/// would be taken as removed. Row-level security that applies to the maker is refused here and
/// made an error at each derivation (`row_security = off`, as pg_dump reads), so that a policy
/// added later skips rows with a WARNING instead of queueing removals of live pages.
fn check_every_row_readable(oid: pg_sys::Oid, label: &str) {
    let (temporary, row_security) = spi(
        "checking the table",
        Spi::connect(|client| {
            let t = client.select(
                "SELECT c.relpersistence = 't', pg_catalog.row_security_active(c.oid) \
                   FROM pg_catalog.pg_class c WHERE c.oid = $1",
                None,
                &[oid.into()],
            )?;
            let r = t.first();
            Ok::<_, pgrx::spi::Error>((
                r.get::<bool>(1)?.unwrap_or(false),
                r.get::<bool>(2)?.unwrap_or(false),
            ))
        }),
    );
    if temporary {
        watch_error(format!(
            "{label} is a temporary table: its rows are this session's alone, and the workers \
             that derive and send cannot read them"
        ));
    }
    if let Some(unlogged) = super::partitions::unlogged_at_or_below(oid) {
        watch_error(super::partitions::UnloggedRefused(&unlogged, label).to_string());
    }
    if let Some(foreign) = super::partitions::foreign_below(oid) {
        watch_error(format!(
            "{label} has the foreign table {foreign} below it: PostgreSQL refuses UPDATE and \
             DELETE through a table whose triggers collect the written rows when a foreign \
             table is below it, so the capture triggers would make those writes fail; watch the \
             tables below it instead"
        ));
    }
    if row_security {
        watch_error(format!(
            "row-level security applies to role {} on {label}: a watch reads every row as the \
             role that made it, and a row hidden from it would be taken as removed; make the \
             watch as a role that row-level security does not apply to (the table's owner, \
             unless the table has FORCE ROW LEVEL SECURITY, or a role with BYPASSRLS)",
            current_role_name()
        ));
    }
}

/// A name given in `related`, resolved with the caller's `search_path` (the extension's part
/// runs with its own), as `schema.table`; refused, as the watched table is, where row-level
/// security would hide its rows from the caller, or when it is temporary.
fn related_table(name: &str) -> String {
    let found: Option<(pg_sys::Oid, String, String)> = spi(
        "reading a related table",
        Spi::connect(|client| {
            let t = client.select(
                "SELECT c.oid, pg_catalog.format('%I.%I', n.nspname, c.relname), \
                        pg_catalog.format('%s.%s', n.nspname, c.relname) \
                   FROM pg_catalog.pg_class c \
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                  WHERE c.oid = pg_catalog.to_regclass($1)",
                None,
                &[name.into()],
            )?;
            if t.is_empty() {
                return Ok(None);
            }
            let r = t.first();
            Ok(Some((
                r.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid),
                r.get::<String>(2)?.unwrap_or_default(),
                r.get::<String>(3)?.unwrap_or_default(),
            )))
        }),
    );
    let Some((oid, qualified, label)) = found else {
        watch_error(format!("related table \"{name}\" does not exist"));
    };
    check_every_row_readable(oid, &format!("related table {label}"));
    qualified
}

fn current_role_name() -> String {
    spi(
        "reading the current role",
        Spi::get_one::<String>("SELECT current_user::text"),
    )
    .unwrap_or_default()
}

/// Watch `tbl` for one URL pattern: install the capture triggers (once per table) and store the
/// watch. A new pattern records the rows public now as known (not announced; scheduled ones are
/// queued for their time); a pattern watched before is derived again, row by row, against what it
/// derived then (see the module's comment). With `current_is_known`, a pattern watched before
/// takes what its table holds now as known as far as it can be: a page whose fingerprint differs
/// only by the changed `ignore` list, and a page that `visible` now makes public, are not
/// announced; a page that no longer gives its URL still owes its removal.
///
/// With `expire_at`, a public row stops being public at that time, and its removal is owed then
/// without a write. `related_whole` names tables the watch's expressions read whose write may
/// change any of its rows (a site's host name, an access rule over a subtree): a write to one
/// derives the whole table.
///
/// (Its C symbol is `watch_pattern_wrapper`: earlier releases declared it with fewer arguments,
/// under the symbols of `refused_earlier_declaration!`.)
#[pg_extern(name = "indexnow_watch", volatile, parallel_unsafe)]
#[allow(clippy::too_many_arguments)]
fn watch_pattern(
    tbl: Option<PgRelation>,
    url: default!(Option<&str>, "NULL"),
    visible: default!(Option<&str>, "NULL"),
    ignore: default!(Option<Vec<String>>, "'{created_at,updated_at}'"),
    publish_at: default!(Option<&str>, "NULL"),
    hidden_reason: default!(Option<&str>, "'unpublished'"),
    url_sql: default!(Option<&str>, "NULL"),
    related: default!(Option<Vec<String>>, "NULL"),
    current_is_known: default!(Option<bool>, "false"),
    replica_writes: default!(Option<bool>, "false"),
    expire_at: default!(Option<&str>, "NULL"),
    related_whole: default!(Option<Vec<String>>, "NULL"),
) {
    let tbl = required("indexnow_watch", "the table", tbl);
    let hidden_reason = required("indexnow_watch", "hidden_reason", hidden_reason);
    let current_is_known = required("indexnow_watch", "current_is_known", current_is_known);
    let replica_writes = required("indexnow_watch", "replica_writes", replica_writes);
    crate::extension::require_writable("indexnow_watch");
    owner::refuse_in_restricted_operation("indexnow_watch");
    // The statements it generates call this release's internal functions, by their names.
    crate::extension::require_current_version();
    let caller = owner::caller();
    let ext = crate::extension::schema();
    let oid = tbl.oid();
    drop(tbl);
    let given = Given {
        url,
        url_sql,
        visible,
        ignore,
        publish_at,
        expire_at,
        hidden_reason,
    };
    // As the caller: every argument checked against the table, with the caller's rights.
    let checked = check(&ext, caller, oid, &given);
    // (one table named twice, `{shelves,public.shelves}`, is one related table; one named in
    // both lists is read whole)
    let distinct = |names: Option<Vec<String>>| {
        let mut tables: Vec<String> = vec![];
        for table in names.unwrap_or_default().iter().map(|n| related_table(n)) {
            if !tables.contains(&table) {
                tables.push(table);
            }
        }
        tables
    };
    let whole = distinct(related_whole);
    let related = Related {
        followed: distinct(related)
            .into_iter()
            .filter(|t| !whole.contains(t))
            .collect(),
        whole,
    };
    // The extension's part, as its owner.
    owner::as_extension_owner(|| {
        let label = &checked.table.label;
        // What the table's writes recorded so far is derived under the watches they were made for.
        crate::process::report_phase(&format!(
            "indexnow_watch: deriving the changes recorded before watching {label}"
        ));
        derive::derive_all_change_sets(&ext);
        let (watch_id, previous) = store(&ext, &checked, &given, replica_writes);
        let defined = define(&ext, caller, oid, watch_id, &checked, related, Making::New)
            .unwrap_or_else(|e| watch_error(e));
        let watch = derive::Watch {
            id: watch_id,
            pattern: checked.pattern,
            table: checked.table.qualified.clone(),
            oid,
            derivation: Derivation::Derive,
            ignore: checked.ignore,
            ext: ext.clone(),
        };
        let rows = about_rows(oid);
        if let Some(previous) = previous {
            crate::process::report_phase(&format!(
                "indexnow_watch: deriving the rows of {label} again ({rows}; its writes go on meanwhile)"
            ));
            if current_is_known {
                take_current_as_known(&ext, &watch, &checked.table, &previous.ignore, label);
            }
            // Watched before: every row against what the watch derived then.
            derive::derive(&watch, Rows::All, Reason::Gone)
                .unwrap_or_else(|e| error!("indexnow_watch: deriving the rows of {label}: {e}"));
        } else {
            crate::process::report_phase(&format!(
                "indexnow_watch: recording the rows of {label} public now as known ({rows}; its writes go on \
                 meanwhile)"
            ));
            record_baseline(&ext, watch, label);
        }
        crate::process::report_phase(&format!(
            "indexnow_watch: putting the capture triggers on {label}"
        ));
        defined.put_on(&ext, oid, watch_id);
        crate::process::report_statement_again();
    });
}

/// About how many rows `table` has, as the planner's statistics say (for a message).
fn about_rows(table: pg_sys::Oid) -> String {
    let rows = spi(
        "reading a table's size",
        Spi::get_one_with_args::<f32>(
            "SELECT reltuples FROM pg_catalog.pg_class WHERE oid = $1",
            &[table.into()],
        ),
    )
    .unwrap_or(-1.0);
    if rows < 0.0 {
        "rows not counted yet".into()
    } else {
        format!("about {} rows", rows as i64)
    }
}

/// `indexnow_watch()` as earlier releases declare it, by C symbol: `indexnow_watch_wrapper`
/// (before 0.4.0, eight arguments) and `watch_table_wrapper` (0.4.0, ten). Between a server's
/// restart onto this library and `ALTER EXTENSION indexnow UPDATE`, a watch made would read
/// arguments the call does not have and generate statements for SQL the database does not have
/// yet: refused, as the other functions whose SQL changed are, with the hint to update.
macro_rules! refused_earlier_declaration {
    ($symbol:ident, $finfo:ident) => {
        /// # Safety
        /// Called by PostgreSQL through the version-1 calling convention; reads no argument.
        #[pg_guard]
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub unsafe extern "C-unwind" fn $symbol(
            _fcinfo: pg_sys::FunctionCallInfo,
        ) -> pg_sys::Datum {
            crate::extension::require_current_version();
            error!(
                "indexnow_watch: this database's indexnow_watch() is not this library's: run \
                 ALTER EXTENSION indexnow UPDATE"
            )
        }

        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static pg_sys::Pg_finfo_record {
            const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    };
}
refused_earlier_declaration!(indexnow_watch_wrapper, pg_finfo_indexnow_watch_wrapper);
refused_earlier_declaration!(watch_table_wrapper, pg_finfo_watch_table_wrapper);

/// How a watch is defined: made by `indexnow_watch()`, or made again after DDL.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Making {
    /// Made by its caller, who must have the right to put triggers on every table they go on;
    /// the triggers are made afresh.
    New,
    /// Made again after DDL: the triggers are there since it was made, and a table that joined
    /// its tree above it since gets them as the end of that DDL puts them on.
    Again,
}

/// Defines watch `watch_id`, whose checked arguments are stored, the one path whether the watch
/// is made (`indexnow_watch()`) or made again after DDL ([`make_again`]): the columns its
/// expressions read, its related tables (the right to put triggers on them checked for `caller`),
/// and the capture triggers where the placement rule puts them: made again after DDL, at once;
/// made by `indexnow_watch()`, by the caller once the rows are derived ([`Defined::put_on`]).
/// Fails with why its statements cannot be generated from what is stored
/// (`crate::derive::generated`).
fn define(
    ext: &str,
    caller: pg_sys::Oid,
    oid: pg_sys::Oid,
    watch_id: i32,
    checked: &Checked,
    related: Related,
    making: Making,
) -> Result<Defined, String> {
    spi(
        "storing the watch",
        Spi::run_with_args(
            &format!("UPDATE {ext}.indexnow_watches SET expression_columns = $2 WHERE id = $1"),
            &[watch_id.into(), checked.read_by_expressions.clone().into()],
        ),
    );
    let roots =
        check_and_store_related(ext, caller, oid, &checked.table, watch_id, related, making);
    if making == Making::Again {
        placement::put_on(ext, &roots, Existing::Keep);
    }
    generated::again(ext, watch_id)?;
    // (made again after DDL, its triggers are on already)
    let unseen = making == Making::New
        && placement::trees(&roots)
            .into_iter()
            .any(|t| !triggers::on(t) && !locked_against_writes(t));
    Ok(Defined { roots, unseen })
}

/// A watch defined (its statements can be generated): the tables whose trees carry its capture
/// triggers, and whether one of them may be written unseen until they are on.
struct Defined {
    roots: Vec<pg_sys::Oid>,
    unseen: bool,
}

/// Whether this transaction holds a lock on `table` that keeps every other writer out (SHARE or
/// stronger: it made the table, altered it, or locked it): nothing can be written there unseen.
fn locked_against_writes(table: pg_sys::Oid) -> bool {
    // SAFETY: the relation is looked up in the relation cache and closed again; no lock is taken
    // or needed to ask which locks this backend holds.
    unsafe {
        let relation = pg_sys::RelationIdGetRelation(table);
        if relation.is_null() {
            return false;
        }
        let locked =
            pg_sys::CheckRelationLockedByMe(relation, pg_sys::ShareLock as pg_sys::LOCKMODE, true);
        pg_sys::RelationClose(relation);
        locked
    }
}

impl Defined {
    /// Puts the capture triggers of a watch made by `indexnow_watch()` on, after its rows were
    /// derived: `CREATE TRIGGER` locks a table against writes until the transaction ends, so
    /// they go on last, for a moment, however long the derivation took. Writes made meanwhile to
    /// a table that had no triggers yet (and that this transaction does not keep writers out of,
    /// as one it made) were not seen: the watched table is then derived whole
    /// after the commit, by the workers (a whole-table change set for this watch), which finds
    /// them. Finding them here instead would hold the lock for a scan of the table (8 s with a
    /// million rows, measured: docs/benchmarks.md).
    fn put_on(&self, ext: &str, watched: pg_sys::Oid, watch_id: i32) {
        placement::put_on(ext, &self.roots, Existing::Remake);
        if self.unseen {
            crate::derive::change_sets::record_whole_table(ext, watched, Some(vec![watch_id]));
            crate::wake::worker_at_commit();
        }
    }
}

/// The tables a watch reads besides its own: those whose written rows lead to the watched rows
/// through foreign keys (`related`), and those whose any write may change any watched row
/// (`related_whole`).
struct Related {
    followed: Vec<String>,
    whole: Vec<String>,
}

/// `indexnow_watch()`'s arguments as given.
struct Given<'a> {
    url: Option<&'a str>,
    url_sql: Option<&'a str>,
    visible: Option<&'a str>,
    ignore: Option<Vec<String>>,
    publish_at: Option<&'a str>,
    expire_at: Option<&'a str>,
    hidden_reason: &'a str,
}

/// A watch's arguments checked against its table, and what they mean.
struct Checked {
    table: Table,
    /// The template or url_sql: what names the watch.
    pattern: String,
    /// The ignored columns the table has.
    ignore: Vec<String>,
    /// The columns `visible`, `url_sql` and `publish_at` read (`None`: not known).
    read_by_expressions: Option<Vec<String>>,
    hidden_reason: Reason,
    /// The caller's search_path, resolved, for the watch's expressions.
    search_path: String,
    /// The caller's TimeZone, for a publish_at without time zone.
    time_zone: String,
    /// The role that made the watch: its SQL runs with this role's rights.
    maker: String,
}

/// Checks every argument against the table, as the caller (its rights, its search_path), and
/// refuses with an error naming the problem.
fn check(ext: &str, caller: pg_sys::Oid, oid: pg_sys::Oid, given: &Given) -> Checked {
    let table = describe(oid);
    let label = &table.label;
    check_trigger_privilege(caller, oid, label, "indexnow_watch");
    check_every_row_readable(oid, label);
    let has_column = |c: &str| table.columns.iter().any(|(name, _)| name == c);

    if table.key.is_empty() {
        watch_error(format!(
            "{label} has no primary key (a deferrable one does not count: PostgreSQL does not take \
             it as the table's key): indexnow keeps what it derived from each row by it"
        ));
    }
    if let Some((column, _)) = table.key_types.iter().find(|(_, t)| !owner::built_in(*t)) {
        watch_error(format!(
            "{label}'s primary key column \"{column}\" is of a type defined in the database: key \
             columns must be of built-in types (or domains over them)"
        ));
    }
    // SAFETY: a catalog lookup of a type that exists (the column has it).
    if let Some((column, _)) = table.key_types.iter().find(
        |(_, t)| unsafe { pg_sys::get_element_type(pg_sys::getBaseType(*t)) } != pg_sys::InvalidOid,
    ) {
        watch_error(format!(
            "{label}'s primary key column \"{column}\" is an array: indexnow keeps a row by its \
             key as JSON, where an array does not read back as one; watch a table keyed by \
             scalar columns"
        ));
    }
    check_select_privilege(caller, oid, label);
    let (pattern, source) = checked_url(ext, &table, given);
    // The default list names created_at and updated_at, which many tables lack: those two may be
    // absent; any other unknown name is a mistake worth an error.
    let mut ignore = given.ignore.clone().unwrap_or_default();
    if let Some(c) = ignore
        .iter()
        .find(|c| !has_column(c) && !DEFAULT_IGNORE.contains(&c.as_str()))
    {
        watch_error(format!(
            "ignore names column \"{c}\", which {label} does not have"
        ));
    }
    ignore.retain(|c| has_column(c));
    if let UrlSource::Template(parts) = &source {
        if let Some(c) = template::columns(parts).find(|c| ignore.iter().any(|i| i == c)) {
            watch_error(format!(
                "column \"{c}\" is in the URL and in ignore: a change to it changes the URL"
            ));
        }
    }
    if let Some(v) = given.visible {
        let ty = expression_type(ext, &table, v, "visible");
        if ty != "boolean" {
            watch_error(format!(
                "visible must be a boolean expression over {label}; {v:?} is {ty}"
            ));
        }
    }
    let time_zone = spi(
        "reading TimeZone",
        Spi::get_one::<String>("SELECT pg_catalog.current_setting('TimeZone')"),
    )
    .unwrap_or_else(|| "UTC".into());
    // publish_at names a column, or is an expression over the row (a parent's column).
    if let Some(c) = given.publish_at {
        check_point_in_time(ext, &table, Some(&ignore), c, "publish_at");
    }
    if let Some(c) = given.expire_at {
        check_point_in_time(ext, &table, None, c, "expire_at");
    }
    let hidden_reason: Reason = given
        .hidden_reason
        .parse()
        .unwrap_or_else(|e: UnknownReason| {
            // (its text starts "indexnow: ", which watch_error's prefix replaces)
            watch_error(e.to_string().trim_start_matches("indexnow: ").to_string())
        });
    if !hidden_reason.is_removal() {
        let removals: Vec<&str> = Reason::ALL
            .iter()
            .filter(|r| r.is_removal())
            .map(|r| r.as_str())
            .collect();
        watch_error(format!(
            "hidden_reason {:?} is not a removal reason ({})",
            hidden_reason.as_str(),
            removals.join(", ")
        ));
    }
    // The UPDATE gate skips a write that changed ignored columns only. A column the watch's
    // expressions read may change the URL, the visibility or the publication time (`ignore =>
    // '{noindex}'` with `visible => 'NOT noindex'`: no content change, but an unpublish), which
    // the derivation compares whatever the fingerprint says: the gate compares it all the same
    // (`derive::watches_of`). Not knowing what they read (no right to make a temporary view),
    // the gate compares every column.
    let read_by_expressions: Option<Vec<String>> = [
        given.visible,
        given.url_sql,
        given.publish_at,
        given.expire_at,
    ]
    .into_iter()
    .flatten()
    .try_fold(vec![], |mut all, expr| {
        all.extend(expression_columns(oid, &table, expr)?);
        Some(all)
    });
    // The caller's schemas, as its search_path resolved them, then pg_temp (last: a temporary
    // object never shadows one of the watch's).
    let search_path = spi(
        "reading search_path",
        Spi::get_one::<String>(
            "SELECT pg_catalog.concat_ws(', ', pg_catalog.string_agg(pg_catalog.quote_ident(s), \
                    ', '), 'pg_temp') FROM pg_catalog.unnest(pg_catalog.current_schemas(false)) s",
        ),
    )
    .unwrap_or_else(|| "pg_temp".into());
    let maker: String = spi(
        "reading the caller's name",
        Spi::get_one_with_args(
            "SELECT rolname::text FROM pg_catalog.pg_roles WHERE oid = $1",
            &[caller.into()],
        ),
    )
    .unwrap_or_else(|| error!("indexnow_watch: the calling role has no name"));

    Checked {
        table,
        pattern,
        ignore,
        read_by_expressions,
        hidden_reason,
        search_path,
        time_zone,
        maker,
    }
}

/// The URL: a template whose columns the table has and whose literal text is a URL, or a
/// `url_sql` expression of type text. Returns the pattern (what names the watch) and the source.
fn checked_url(ext: &str, table: &Table, given: &Given) -> (String, UrlSource) {
    let label = &table.label;
    let has_column = |c: &str| table.columns.iter().any(|(name, _)| name == c);
    match (given.url, given.url_sql) {
        (Some(t), None) => {
            let parts = template::parse(t).unwrap_or_else(|e| watch_error(e));
            if let Some(c) = template::columns(&parts).find(|c| !has_column(c)) {
                watch_error(format!(
                    "url template {} names column \"{c}\", which {label} does not have",
                    shown(t)
                ));
            }
            if let Some(problem) = template::literal_problem(&parts) {
                watch_error(format!("url template {} {problem}", shown(t)));
            }
            (t.to_string(), UrlSource::Template(parts))
        }
        (None, Some(sql)) => {
            let ty = expression_type(ext, table, sql, "url_sql");
            if ty != "text" && ty != "character varying" {
                watch_error(format!(
                    "url_sql must be a text expression over {label}; {sql:?} is {ty}"
                ));
            }
            (sql.to_string(), UrlSource::Sql(sql.to_string()))
        }
        (Some(_), Some(_)) => watch_error("give url or url_sql, not both".into()),
        (None, None) => {
            watch_error("give the URL: url => 'https://host/path/{column}', or url_sql".into())
        }
    }
}

/// `publish_at` or `expire_at` (`what`): a column of the table or an expression over the row, of
/// a timestamp type (timestamptz, timestamp or date: each has its reading as a point in time,
/// `_indexnow_publish_time()`). A `publish_at` column may not be in `ignore` (a reschedule must be
/// seen as one); an `expire_at` column may (it is no content, whatever `ignore` says).
fn check_point_in_time(ext: &str, table: &Table, ignore: Option<&[String]>, c: &str, what: &str) {
    let label = &table.label;
    let ty = match table.columns.iter().find(|(name, _)| name == c) {
        Some((_, ty)) => {
            if ignore.is_some_and(|ignore| ignore.iter().any(|i| i == c)) {
                watch_error(format!(
                    "{what} column \"{c}\" is in ignore: rescheduling would go unseen"
                ));
            }
            if ![
                pg_sys::TIMESTAMPTZOID,
                pg_sys::TIMESTAMPOID,
                pg_sys::DATEOID,
            ]
            .contains(ty)
            {
                watch_error(format!(
                    "{what} column \"{c}\" is not a timestamp (timestamptz, timestamp or date)"
                ));
            }
            return;
        }
        None if c.chars().all(|ch| ch.is_alphanumeric() || ch == '_') => watch_error(format!(
            "{what} names column \"{c}\", which {label} does not have"
        )),
        None => expression_type(ext, table, c, what),
    };
    if ![
        "timestamp with time zone",
        "timestamp without time zone",
        "date",
    ]
    .contains(&ty.as_str())
    {
        watch_error(format!(
            "{what} must be a timestamp (timestamptz, timestamp or date); {c:?} is {ty}"
        ));
    }
}

/// Stores the watch: the row of the same table and pattern watched before (active, or unwatched
/// with its sources kept) becomes this watch and keeps what it derived; otherwise a new row.
/// Returns its id, and the previous one's when there was one.
/// The same table and pattern as watched before: its watch, and its `ignore` list then.
struct Previous {
    id: i32,
    ignore: Vec<String>,
}

fn store(
    ext: &str,
    checked: &Checked,
    given: &Given,
    replica_writes: bool,
) -> (i32, Option<Previous>) {
    // The same table and pattern watched before (active, or unwatched with its sources kept):
    // it is this watch now, and keeps what it derived.
    let previous: Option<Previous> = spi(
        "reading the watch",
        Spi::connect(|client| {
            let rows = client.select(
                &format!(
                    "SELECT id, ignore FROM {ext}.indexnow_watches \
                      WHERE tbl = $1::regclass AND pattern = $2 \
                      ORDER BY active DESC, id DESC LIMIT 1"
                ),
                None,
                &[
                    checked.table.qualified.as_str().into(),
                    checked.pattern.as_str().into(),
                ],
            )?;
            if rows.is_empty() {
                return Ok(None);
            }
            let row = rows.first();
            Ok(Some(Previous {
                id: row.get(1)?.unwrap_or_default(),
                ignore: row.get(2)?.unwrap_or_default(),
            }))
        }),
    );
    let args = || -> Vec<pgrx::datum::DatumWithOid> {
        vec![
            checked.table.qualified.as_str().into(),
            given.url.into(),
            given.url_sql.into(),
            given.visible.into(),
            checked.ignore.clone().into(),
            given.publish_at.into(),
            checked.hidden_reason.as_str().into(),
            checked.search_path.as_str().into(),
            checked.time_zone.as_str().into(),
            checked.maker.as_str().into(),
            checked.read_by_expressions.clone().into(),
            replica_writes.into(),
            given.expire_at.into(),
        ]
    };
    let watch_id: i32 = match &previous {
        Some(Previous { id, .. }) => {
            let mut args = args();
            args.push((*id).into());
            spi(
                "storing the watch",
                Spi::run_with_args(
                    &format!(
                        "UPDATE {ext}.indexnow_watches SET tbl = $1::regclass, url = $2, \
                           url_sql = $3, visible = $4, ignore = $5, publish_at = $6, \
                           hidden_reason = $7, search_path = $8, time_zone = $9, owner = $10, \
                           expression_columns = $11, replica_writes = $12, expire_at = $13, \
                           active = true \
                         WHERE id = $14"
                    ),
                    &args,
                ),
            );
            *id
        }
        None => spi(
            "storing the watch",
            Spi::get_one_with_args(
                &format!(
                    "INSERT INTO {ext}.indexnow_watches (tbl, url, url_sql, visible, ignore, \
                       publish_at, hidden_reason, search_path, time_zone, owner, \
                       expression_columns, replica_writes, expire_at) \
                     VALUES ($1::regclass, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
                     RETURNING id"
                ),
                &args(),
            ),
        )
        .unwrap(),
    };
    (watch_id, previous)
}

/// Stores the watch's related tables, checking the caller may put triggers on them and, for a new
/// watch, on the tables above. Returns the tables whose trees carry the watch's capture triggers
/// by the placement rule: the watched table and its related tables.
fn check_and_store_related(
    ext: &str,
    caller: pg_sys::Oid,
    oid: pg_sys::Oid,
    table: &Table,
    watch_id: i32,
    related: Related,
    making: Making,
) -> Vec<pg_sys::Oid> {
    // (the tables above may have other owners: the caller puts triggers on them too)
    let above = |t: pg_sys::Oid| -> Vec<pg_sys::Oid> {
        match making {
            Making::New => super::partitions::tree_of(t)
                .into_iter()
                .take_while(|a| *a != t)
                .collect(),
            Making::Again => vec![],
        }
    };
    for t in above(oid) {
        let label = triggers::table_qualified(t);
        check_trigger_privilege(caller, t, &label, "indexnow_watch: the table above");
    }
    let mut roots = vec![oid];
    for r in store_relations(ext, caller, oid, table, watch_id, related) {
        for t in above(r) {
            let label = triggers::table_qualified(t);
            check_trigger_privilege(
                caller,
                t,
                &label,
                "indexnow_watch: the table above a related table",
            );
        }
        roots.push(r);
    }
    roots
}

/// Stores the watch's related tables, each with the query from its rows to the watch's (checking
/// the caller may put triggers on them). Returns their OIDs.
fn store_relations(
    ext: &str,
    caller: pg_sys::Oid,
    oid: pg_sys::Oid,
    table: &Table,
    watch_id: i32,
    related: Related,
) -> Vec<pg_sys::Oid> {
    let key_names: Vec<String> = table.key.iter().map(|(k, _)| k.clone()).collect();
    let followed =
        related::plan(oid, &key_names, &related.followed).unwrap_or_else(|e| watch_error(e));
    let whole: Vec<(pg_sys::Oid, String)> = related
        .whole
        .iter()
        .map(|name| related::table_named(name).unwrap_or_else(|e| watch_error(e)))
        .collect();
    let relations: Vec<(pg_sys::Oid, &str, bool)> = followed
        .iter()
        .map(|r| (r.table, r.label.as_str(), false))
        .chain(whole.iter().map(|(t, label)| (*t, label.as_str(), true)))
        .collect();
    for (t, label, whole) in &relations {
        let what = if *whole {
            "indexnow_watch: related_whole"
        } else {
            "indexnow_watch: related"
        };
        check_trigger_privilege(caller, *t, label, what);
    }
    let before: Vec<pg_sys::Oid> = spi(
        "storing the watch's related tables",
        Spi::connect_mut(|client| {
            client
                .update(
                    &format!(
                        "DELETE FROM {ext}.indexnow_relations WHERE watch_id = $1 \
                         RETURNING tbl::pg_catalog.oid"
                    ),
                    None,
                    &[watch_id.into()],
                )?
                .map(|r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap()))
                .collect::<Result<Vec<_>, pgrx::spi::Error>>()
        }),
    );
    for (t, _, whole) in &relations {
        spi(
            "storing the watch's related tables",
            Spi::run_with_args(
                &format!(
                    "INSERT INTO {ext}.indexnow_relations (watch_id, tbl, whole) \
                     VALUES ($1, $2::pg_catalog.oid::pg_catalog.regclass, $3)"
                ),
                &[watch_id.into(), (*t).into(), (*whole).into()],
            ),
        );
    }
    // A table the watch no longer reads loses the triggers, unless another watch needs them.
    let unread: Vec<pg_sys::Oid> = before
        .into_iter()
        .filter(|t| !relations.iter().any(|(r, _, _)| r == t))
        .collect();
    placement::take_off_unneeded(ext, &placement::trees(&unread));
    relations.iter().map(|(t, _, _)| *t).collect()
}

/// A new watch's baseline: the rows public now recorded as known to search engines (not
/// announced), scheduled ones queued for their time. It runs as a derivation does (a row that
/// fails is skipped alone).
/// For a watch made again with `current_is_known` (`ignore_before`: its `ignore` list until now):
/// the fingerprints follow the columns it counts now, and the rows public now that have no source
/// (made public by a changed `visible`) are recorded as known, as a new watch's are; what is
/// left to derive then is what changed otherwise (a URL no row gives any more, a change recorded
/// and not yet derived).
fn take_current_as_known(
    ext: &str,
    watch: &derive::Watch,
    table: &Table,
    ignore_before: &[String],
    label: &str,
) {
    let counted_before = |definition: &crate::derive::statements::WatchDefinition| {
        let mut before = definition.counted();
        let expire = definition.expire_column();
        before.columns = table
            .columns
            .iter()
            .map(|(c, _)| c.clone())
            .filter(|c| !ignore_before.contains(c) && Some(c) != expire.as_ref())
            .collect();
        for body in &mut before.bodies {
            body.public = body
                .all
                .iter()
                .filter(|c| !ignore_before.contains(c))
                .cloned()
                .collect();
        }
        before
    };
    derive::take_fingerprints_as_known(ext, watch.id, counted_before)
        .unwrap_or_else(|e| error!("indexnow_watch: taking the rows of {label} as known: {e}"));
    let baseline = derive::Watch {
        derivation: Derivation::Baseline,
        ..watch.clone()
    };
    derive::derive(&baseline, Rows::All, Reason::Gone)
        .unwrap_or_else(|e| error!("indexnow_watch: recording the rows of {label}: {e}"));
}

fn record_baseline(ext: &str, watch: derive::Watch, label: &str) {
    let baseline = derive::Watch {
        derivation: Derivation::Baseline,
        ..watch.clone()
    };
    let (recorded, _) = derive::derive(&baseline, Rows::All, Reason::Gone)
        .unwrap_or_else(|e| error!("indexnow_watch: recording the rows of {label}: {e}"));
    // Rows whose URL search engines were told is removed (or is owed a removal) are not taken
    // as known: derived as a write of them would be (they are announced again).
    if recorded.created > 0 {
        derive::derive(&watch, Rows::All, Reason::Gone)
            .unwrap_or_else(|e| error!("indexnow_watch: deriving the rows of {label}: {e}"));
    }
    // A large table's baseline wrote many rows: give the planner their statistics now rather
    // than at autovacuum's next look. Not for a small one: ANALYZE holds its lock on the two
    // tables until the watch's transaction ends, and two transactions that each watched a table
    // and went on could deadlock on them (seen in the tests, which never commit).
    let large = spi(
        "reading a table's size",
        Spi::get_one_with_args::<bool>(
            "SELECT pg_catalog.pg_total_relation_size($1) >= $2",
            &[watch.oid.into(), ANALYZED_FROM_BYTES.into()],
        ),
    );
    if large == Some(true) {
        spi(
            "analyzing the queue",
            Spi::run(&format!(
                "ANALYZE {ext}.indexnow_sources, {ext}.indexnow_urls"
            )),
        );
    }
}

/// The size from which a watched table's baseline is followed by `ANALYZE` of the queue (about
/// 50,000 rows of a typical page table).
const ANALYZED_FROM_BYTES: i64 = 8 << 20;

/// Stop watching `tbl` for the pattern `url` (a template or url_sql as given to indexnow_watch),
/// or for every pattern when `url` is NULL. The triggers go with the table's last watch. Queued
/// URLs stay queued; the URLs the watch gave stay known (see the module's comment).
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_unwatch(tbl: Option<PgRelation>, url: default!(Option<&str>, "NULL")) {
    let oid = required("indexnow_unwatch", "the table", tbl).oid();
    crate::extension::require_writable("indexnow_unwatch");
    owner::refuse_in_restricted_operation("indexnow_unwatch");
    let ext = crate::extension::schema();
    let table = describe(oid);
    check_trigger_privilege(owner::caller(), oid, &table.label, "indexnow_unwatch");
    owner::as_extension_owner(|| unwatch(&ext, oid, &table, url));
}

/// The extension's part of `indexnow_unwatch()`, as its owner.
fn unwatch(ext: &str, oid: pg_sys::Oid, table: &Table, url: Option<&str>) {
    derive::derive_all_change_sets(ext);
    let removed: i64 = spi(
        "removing the watch",
        Spi::get_one_with_args(
            &format!(
                "WITH off AS (UPDATE {ext}.indexnow_watches SET active = false \
                               WHERE tbl = $1 AND active AND ($2::text IS NULL OR pattern = $2) \
                               RETURNING id) \
                 SELECT pg_catalog.count(*) FROM off"
            ),
            &[oid.into(), url.into()],
        ),
    )
    .unwrap_or(0);
    if removed == 0 {
        invalid_parameter(match url {
            Some(u) => format!("indexnow_unwatch: {} is not watched for {u:?}", table.label),
            None => format!("indexnow_unwatch: {} is not watched", table.label),
        });
    }
    let mut roots = vec![oid];
    roots.extend(related::tables_of_ended_watches(ext, oid));
    placement::take_off_unneeded(ext, &placement::trees(&roots));
}

/// The safety net: derive every row of `tbl` again and queue what differs from what each watch
/// derived before — new or republished URLs (`created`), changed content (`changed`), URLs no row
/// gives any more (`gone`, when search engines were told of them). Catches writes the triggers
/// never saw (disabled triggers, replica mode, restores) and repairs what a broken watch missed.
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_reconcile(
    tbl: PgRelation,
) -> TableIterator<
    'static,
    (
        name!(pattern, String),
        name!(created, i64),
        name!(changed, i64),
        name!(gone, i64),
    ),
> {
    let oid = tbl.oid();
    drop(tbl);
    crate::extension::require_writable("indexnow_reconcile");
    owner::refuse_in_restricted_operation("indexnow_reconcile");
    let ext = crate::extension::schema();
    check_trigger_privilege(
        owner::caller(),
        oid,
        &describe(oid).label,
        "indexnow_reconcile",
    );
    TableIterator::new(owner::as_extension_owner(|| reconcile(&ext, oid)))
}

/// The extension's part of `indexnow_reconcile()`, as its owner: per pattern, what it queued.
fn reconcile(ext: &str, oid: pg_sys::Oid) -> Vec<(String, i64, i64, i64)> {
    let ext = ext.to_string();
    derive::derive_all_change_sets(&ext);
    let watches = derive::watches_of(&ext, oid);
    if watches.is_empty() {
        invalid_parameter(format!(
            "indexnow_reconcile: {} is not watched",
            describe(oid).label
        ));
    }
    let mut rows: Vec<_> = watches
        .iter()
        .map(|watch| {
            let (d, _) = derive::derive(watch, Rows::All, Reason::Gone)
                .unwrap_or_else(|e| error!("indexnow_reconcile: deriving {}: {e}", watch.table));
            (watch.pattern.clone(), d.created, d.changed, d.removed)
        })
        .collect();
    let owed = derive::vacate_inactive(&ext, oid, Reason::Gone);
    if owed > 0 {
        rows.push(("(unwatched)".into(), 0, 0, owed));
    }
    rows
}

/// Derives the change sets the capture triggers recorded and no one has derived yet, oldest
/// first: all of them, or at most `change_sets` (the workers do this after each commit, one
/// change set a transaction; this is for a session that must see the queue now). Returns how many
/// change sets it derived.
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_derive(change_sets: default!(Option<i64>, "NULL")) -> i64 {
    let ext = crate::extension::schema();
    derive::take_all_recorded(&ext);
    let mut n = 0;
    let mut passed_over = vec![];
    loop {
        let most = change_sets.map_or(MERGED_AT_MOST, |most| {
            usize::try_from(most - n).unwrap_or(0).min(MERGED_AT_MOST)
        });
        let derived = derive::derive_one_change_set(&ext, Waiting::Skip, most, &mut passed_over);
        if derived == 0 {
            return n;
        }
        n += derived as i64;
    }
}

/// For the derive statements: `url` in normal form with its key and host when the row is
/// visible and its URL can be submitted; `problem` says why not when it is visible and cannot.
/// One row always.
#[pg_extern(name = "_indexnow_capture_target", immutable, parallel_safe)]
#[allow(clippy::type_complexity)]
fn indexnow_capture_target(
    url: Option<&str>,
    visible: Option<bool>,
) -> TableIterator<
    'static,
    (
        name!(url, Option<String>),
        name!(url_hash, Option<Vec<u8>>),
        name!(host, Option<String>),
        name!(problem, Option<String>),
    ),
> {
    if visible != Some(true) {
        return TableIterator::new(vec![(None, None, None, None)]);
    }
    let row = match url {
        None => (
            None,
            None,
            None,
            Some(
                "its URL could not be built (a value it needs is NULL, empty, \".\" or \"..\")"
                    .to_string(),
            ),
        ),
        Some(url) => match indexnow_protocol::submittable_url(url) {
            Ok(t) => {
                let hash = url_hash(&t.url);
                (Some(t.url), Some(hash), Some(t.host), None)
            }
            Err(problem) => (
                None,
                None,
                None,
                Some(format!("cannot queue {}: {problem}", shown(url))),
            ),
        },
    };
    TableIterator::new(vec![row])
}

/// For the event trigger (sql/capture.sql): schema `schema` was renamed. The statements of every
/// watch whose table, or one of whose related tables, is in it name the old schema: each such
/// watch is made again as after an `ALTER TABLE` ([`follow_alter_table`]). No row changed, so
/// nothing is recorded.
#[pg_extern(name = "_indexnow_schema_renamed", volatile, parallel_unsafe)]
fn indexnow_schema_renamed(schema: pg_sys::Oid) {
    let ext = crate::extension::schema();
    let tables: Vec<pg_sys::Oid> = Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT DISTINCT w.tbl::pg_catalog.oid FROM {ext}.indexnow_watches w \
                      WHERE w.active AND ( \
                        EXISTS (SELECT FROM pg_catalog.pg_class c \
                                 WHERE c.oid = w.tbl AND c.relnamespace = $1) \
                        OR EXISTS (SELECT FROM {ext}.indexnow_relations r \
                                     JOIN pg_catalog.pg_class c ON c.oid = r.tbl \
                                    WHERE r.watch_id = w.id AND c.relnamespace = $1)) \
                      ORDER BY 1"
                ),
                None,
                &[schema.into()],
            )?
            .map(|r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap()))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: finding the watches of a renamed schema: {e}"));
    for table in tables {
        follow_alter_table(&ext, table, false);
    }
}

/// Makes the active watches of `table` again for the table as it is after an `ALTER TABLE`
/// (`super::after_ddl`): each is checked as `indexnow_watch()` checked it, as the role that made
/// it, with its `search_path` and `TimeZone`, and its related tables are planned again. Its
/// statements are generated from its arguments and the catalog wherever they are used
/// (`crate::derive::generated`), so they follow the table by themselves: a column added counts as
/// content, and a column dropped or renamed that a watch does not name, or the table renamed or
/// moved to another schema, does not break it. Nothing is derived here (the table is locked for
/// the ALTER): the whole-table change set the same event records is derived by the workers after
/// the commit, and queues what the new definition changes (a URL, a visibility; a column added
/// with a default, or dropped, changes every row's fingerprint: every page is then announced as
/// changed). A watch that can no longer be made (a column it names is gone) gets a WARNING that
/// says how to mend it, and is broken until then; the ALTER goes on.
///
/// Not before `ALTER EXTENSION indexnow UPDATE`: a database on the SQL of an earlier release may
/// lack what this release's statements call.
/// Returns whether every watch of the table was made again, or needed not be (no triggers on the
/// table: a restore that has not made them yet). With `only_adds` (the ALTER only added
/// constraints or indexes, `super::before_ddl::only_adds`), a watch that cannot be made again is
/// not said: its table is being built (a restore adds its keys one by one).
pub fn follow_alter_table(ext: &str, table: pg_sys::Oid, only_adds: bool) -> bool {
    if crate::extension::version_mismatch().is_some() || !triggers::on(table) {
        return true;
    }
    let mut made_again = true;
    let watches: Vec<(i32, String)> = Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT id, pattern FROM {ext}.indexnow_watches \
                      WHERE tbl = $1::pg_catalog.oid::pg_catalog.regclass AND active ORDER BY id"
                ),
                None,
                &[table.into()],
            )?
            .map(|r| Ok((r.get(1)?.unwrap_or_default(), r.get(2)?.unwrap_or_default())))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading the watches of an altered table: {e}"));
    for (id, pattern) in watches {
        if let Err(message) = crate::subtransaction::run(|| make_again(ext, id, table)) {
            if only_adds {
                continue;
            }
            made_again = false;
            ErrorReport::new(
                PgSqlErrorCode::ERRCODE_WARNING,
                format!(
                    "indexnow: after this ALTER TABLE, the watch of {} for {pattern} cannot \
                     derive its URLs: {}",
                    describe(table).label,
                    message.message.trim_start_matches("indexnow_watch: ")
                ),
                "indexnow",
            )
            .set_hint(
                "Make the watch again with indexnow_watch() for the table as it is now; it \
                 catches up by itself.",
            )
            .report(PgLogLevel::WARNING);
        }
    }
    made_again
}

/// Makes watch `id` again (see [`follow_alter_table`]).
fn make_again(ext: &str, id: i32, table: pg_sys::Oid) {
    type Stored = (
        Option<String>,
        Option<String>,
        Option<String>,
        Vec<String>,
        Option<String>,
        String,
        String,
        String,
        Option<pg_sys::Oid>,
        Option<Vec<String>>,
        Option<String>,
    );
    let stored: Stored = Spi::connect(|client| {
        let t = client.select(
            &format!(
                "SELECT w.url, w.url_sql, w.visible, w.ignore, w.publish_at, w.hidden_reason, \
                        w.search_path, w.time_zone, r.oid, w.expression_columns, w.expire_at \
                   FROM {ext}.indexnow_watches w \
                   LEFT JOIN pg_catalog.pg_roles r ON r.rolname = w.owner WHERE w.id = $1"
            ),
            None,
            &[id.into()],
        )?;
        let r = t.first();
        Ok::<_, pgrx::spi::Error>((
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?.unwrap_or_default(),
            r.get(5)?,
            r.get(6)?.unwrap_or_default(),
            r.get(7)?.unwrap_or_default(),
            r.get(8)?.unwrap_or_default(),
            r.get(9)?,
            r.get(10)?,
            r.get(11)?,
        ))
    })
    .unwrap_or_else(|e| error!("indexnow: reading watch {id}: {e}"));
    let (url, url_sql, visible, ignore, publish_at, hidden_reason, search_path, time_zone) = (
        stored.0, stored.1, stored.2, stored.3, stored.4, stored.5, stored.6, stored.7,
    );
    let Some(maker) = stored.8 else {
        error!("the role that made it does not exist");
    };
    let columns = describe(table).columns;
    // An ignored column dropped or renamed since is no longer there to ignore (under a new name
    // it is content: said, since the watch's maker may want it ignored again).
    let (ignore, gone): (Vec<String>, Vec<String>) = ignore
        .into_iter()
        .partition(|c| columns.iter().any(|(name, _)| name == c));
    if let Some(c) = gone.iter().find(|c| !DEFAULT_IGNORE.contains(&c.as_str())) {
        warning!(
            "indexnow: the watch of {} for {} ignored column \"{c}\", which the table no longer \
             has: a column renamed from it counts as content; make the watch again with \
             indexnow_watch(..., ignore => ...) to ignore it",
            describe(table).label,
            url.as_deref().or(url_sql.as_deref()).unwrap_or_default()
        );
    }
    let given = Given {
        url: url.as_deref(),
        url_sql: url_sql.as_deref(),
        visible: visible.as_deref(),
        ignore: Some(ignore),
        publish_at: publish_at.as_deref(),
        expire_at: stored.10.as_deref(),
        hidden_reason: &hidden_reason,
    };
    let settings = [("search_path", search_path), ("TimeZone", time_zone)];
    let mut checked = owner::switched_to(maker, true, || {
        crate::guc::with_settings(&settings, || check(ext, maker, table, &given))
    });
    // Not known now (an expression reads the whole row): what was found when the watch was
    // made stands.
    if checked.read_by_expressions.is_none() {
        checked.read_by_expressions = stored.9;
    }
    // The related tables' queries name the table and its key: planned again.
    let related: Vec<(String, bool)> = Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname), r.whole \
                       FROM {ext}.indexnow_relations r \
                       JOIN pg_catalog.pg_class c ON c.oid = r.tbl \
                       JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                      WHERE r.watch_id = $1 ORDER BY r.tbl"
                ),
                None,
                &[id.into()],
            )?
            .map(|r| {
                Ok((
                    r.get::<String>(1)?.unwrap_or_default(),
                    r.get::<bool>(2)?.unwrap_or_default(),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading the related tables of watch {id}: {e}"));
    let (whole, followed): (Vec<_>, Vec<_>) = related.into_iter().partition(|(_, whole)| *whole);
    let related = Related {
        followed: followed.into_iter().map(|(t, _)| t).collect(),
        whole: whole.into_iter().map(|(t, _)| t).collect(),
    };
    // (The triggers are there since the watch was made: kept as they are.)
    define(ext, maker, table, id, &checked, related, Making::Again)
        .unwrap_or_else(|e| error!("{e}"));
}
