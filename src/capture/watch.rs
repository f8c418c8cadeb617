//! `indexnow_watch()`, `indexnow_unwatch()`, `indexnow_reconcile()`: registering a content table,
//! checking every argument against the table when called, and installing the triggers.
//!
//! The triggers (statement-level, with transition tables, plus TRUNCATE) all call one function of
//! the extension, `indexnow_capture()` (`super::gate`, then sql/capture.sql), which runs the
//! statements generated here for each watch of the table. Because the triggers depend on an
//! extension member, `DROP EXTENSION` refuses while a table is watched (CASCADE drops the triggers
//! too), and `pg_dump` restores them after `CREATE EXTENSION` recreates the function.
//!
//! `indexnow_watch` runs as its caller, with the caller's `search_path`: `visible` and `url_sql`
//! are resolved with it, and the watch keeps it for the triggers. Its own SQL names the extension's
//! schema explicitly.

use super::plan::{quote_ident, UrlSource, WatchPlan};
use super::template;
use crate::error::invalid_parameter;
use crate::queue::{url_hash, Reason, UnknownReason};
use pgrx::prelude::*;
use pgrx::PgRelation;

const EVENTS: [(&str, &str, &str); 4] = [
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

const DEFAULT_IGNORE: [&str; 2] = ["created_at", "updated_at"];

fn watch_error(message: String) -> ! {
    invalid_parameter(format!("indexnow_watch: {message}"))
}

fn spi<T>(what: &str, r: Result<T, pgrx::spi::Error>) -> T {
    r.unwrap_or_else(|e| error!("indexnow: {what}: {e}"))
}

/// The first column of the first row, or None when there is no row.
fn first_or_none<T: FromDatum + IntoDatum>(
    sql: &str,
    args: &[pgrx::datum::DatumWithOid],
) -> Option<T> {
    match Spi::get_one_with_args::<T>(sql, args) {
        Err(pgrx::spi::Error::InvalidPosition) => None,
        other => spi("querying", other),
    }
}

/// The extension's schema, quoted.
fn ext_schema() -> String {
    let name = spi(
        "finding the extension's schema",
        Spi::get_one::<String>(
            "SELECT n.nspname::text FROM pg_catalog.pg_extension e \
               JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace \
              WHERE e.extname = 'indexnow'",
        ),
    )
    .unwrap_or_else(|| error!("indexnow: the extension is not installed in this database"));
    quote_ident(&name)
}

struct Table {
    qualified: String,
    label: String,
    /// (name, type oid)
    columns: Vec<(String, pg_sys::Oid)>,
    key: Vec<String>,
}

fn describe(oid: pg_sys::Oid) -> Table {
    Spi::connect(|client| {
        let row = client
            .select(
                "SELECT format('%I.%I', n.nspname, c.relname), format('%s.%s', n.nspname, c.relname), \
                        c.relkind::text \
                   FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                  WHERE c.oid = $1",
                None,
                &[oid.into()],
            )?
            .first()
            .get_three::<String, String, String>()?;
        let (qualified, label, kind) = (row.0.unwrap(), row.1.unwrap(), row.2.unwrap());
        if kind != "r" && kind != "p" {
            watch_error(format!("{label} is not a table: only tables can be watched"));
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
        let key = client
            .select(
                "SELECT a.attname::text FROM pg_catalog.pg_index i \
                   JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
                  WHERE i.indrelid = $1 AND i.indisprimary \
                  ORDER BY array_position(i.indkey::int2[], a.attnum)",
                None,
                &[oid.into()],
            )?
            .map(|r| Ok(r.get::<String>(1)?.unwrap()))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()?;
        Ok::<_, pgrx::spi::Error>(Table { qualified, label, columns, key })
    })
    .unwrap_or_else(|e| error!("indexnow: reading the table's columns: {e}"))
}

/// The type of `expr` over a row of `table` (checked in a subtransaction: an expression that does
/// not parse is an ERROR naming the argument).
fn expression_type(ext: &str, table: &Table, expr: &str, what: &str) -> String {
    spi(
        "checking an expression",
        Spi::get_one_with_args::<String>(
            &format!("SELECT {ext}.indexnow_expression_type($1, $2, $3)"),
            &[table.qualified.as_str().into(), expr.into(), what.into()],
        ),
    )
    .unwrap_or_default()
}

/// Watch `tbl` for one URL pattern: install the capture triggers (once per table), store the
/// watch, and record the rows public now as known (they are not announced; scheduled ones are
/// queued for their time).
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::too_many_arguments)]
fn indexnow_watch(
    tbl: PgRelation,
    url: default!(Option<&str>, "NULL"),
    visible: default!(Option<&str>, "NULL"),
    ignore: default!(Option<Vec<String>>, "'{created_at,updated_at}'"),
    publish_at: default!(Option<&str>, "NULL"),
    hidden_reason: default!(&str, "'unpublished'"),
    url_sql: default!(Option<&str>, "NULL"),
) {
    let ext = ext_schema();
    let table = describe(tbl.oid());
    drop(tbl);
    let label = &table.label;
    let has_column = |c: &str| table.columns.iter().any(|(name, _)| name == c);

    if table.key.is_empty() {
        watch_error(format!(
            "{label} has no primary key: indexnow pairs each row's old and new version by it"
        ));
    }
    let (pattern, source) = match (url, url_sql) {
        (Some(t), None) => {
            let parts = template::parse(t).unwrap_or_else(|e| watch_error(e));
            if let Some(c) = template::columns(&parts).find(|c| !has_column(c)) {
                watch_error(format!(
                    "url template {t:?} names column \"{c}\", which {label} does not have"
                ));
            }
            (t.to_string(), UrlSource::Template(parts))
        }
        (None, Some(sql)) => {
            expression_type(&ext, &table, sql, "url_sql");
            (sql.to_string(), UrlSource::Sql(sql.to_string()))
        }
        (Some(_), Some(_)) => watch_error("give url or url_sql, not both".into()),
        (None, None) => {
            watch_error("give the URL: url => 'https://host/path/{column}', or url_sql".into())
        }
    };
    // The default list names created_at and updated_at, which many tables lack: those two may be
    // absent; any other unknown name is a mistake worth an error.
    let mut ignore = ignore.unwrap_or_default();
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
    if let Some(v) = visible {
        let ty = expression_type(&ext, &table, v, "visible");
        if ty != "boolean" {
            watch_error(format!(
                "visible must be a boolean expression over {label}; {v:?} is {ty}"
            ));
        }
    }
    if let Some(c) = publish_at {
        let ty = table
            .columns
            .iter()
            .find(|(name, _)| name == c)
            .map(|(_, ty)| *ty)
            .unwrap_or_else(|| {
                watch_error(format!(
                    "publish_at names column \"{c}\", which {label} does not have"
                ))
            });
        if ![
            pg_sys::TIMESTAMPTZOID,
            pg_sys::TIMESTAMPOID,
            pg_sys::DATEOID,
        ]
        .contains(&ty)
        {
            watch_error(format!(
                "publish_at column \"{c}\" is not a timestamp (timestamptz, timestamp or date)"
            ));
        }
        if ignore.iter().any(|i| i == c) {
            watch_error(format!(
                "publish_at column \"{c}\" is in ignore: rescheduling would go unseen"
            ));
        }
    }
    let hidden_reason: Reason = hidden_reason
        .parse()
        .unwrap_or_else(|e: UnknownReason| watch_error(e.to_string()));
    if !hidden_reason.is_removal() {
        watch_error(format!(
            "hidden_reason {:?} is not a removal reason (moved, unpublished, deleted, gone, untranslated)",
            hidden_reason.as_str()
        ));
    }
    let public: Vec<String> = table
        .columns
        .iter()
        .map(|(name, _)| name.clone())
        .filter(|c| !ignore.contains(c))
        .collect();

    // Replace an earlier watch of the same table and pattern; the new one gets a new id.
    let search_path = spi(
        "reading search_path",
        Spi::get_one::<String>(
            "SELECT concat_ws(', ', string_agg(quote_ident(s), ', '), 'pg_temp') \
               FROM unnest(current_schemas(false)) s",
        ),
    )
    .unwrap_or_else(|| "pg_temp".into());
    let previous: Option<i32> = first_or_none(
        &format!("DELETE FROM {ext}.indexnow_watches WHERE tbl = $1::regclass AND pattern = $2 RETURNING id"),
        &[table.qualified.as_str().into(), pattern.as_str().into()],
    );
    let watch_id: i32 = spi(
        "storing the watch",
        Spi::get_one_with_args(
            &format!(
                "INSERT INTO {ext}.indexnow_watches (tbl, url, url_sql, visible, ignore, \
                   publish_at, hidden_reason, search_path, on_insert, on_update, on_delete, \
                   on_truncate, reconcile, recheck) \
                 VALUES ($1::regclass, $2, $3, $4, $5, $6, $7, $8, '', '', '', '', '', '') \
                 RETURNING id"
            ),
            &[
                table.qualified.as_str().into(),
                url.into(),
                url_sql.into(),
                visible.into(),
                ignore.clone().into(),
                publish_at.into(),
                hidden_reason.as_str().into(),
                search_path.as_str().into(),
            ],
        ),
    )
    .unwrap();
    let plan = WatchPlan {
        watch_id,
        ext: ext.clone(),
        table: table.qualified.clone(),
        table_label: table.label.clone(),
        key: table.key.clone(),
        public,
        url: source,
        visible: visible.map(str::to_string),
        publish_at: publish_at.map(str::to_string),
        hidden_reason,
    };
    let sql = plan.statements();
    spi(
        "storing the watch",
        Spi::run_with_args(
            &format!(
                "UPDATE {ext}.indexnow_watches SET on_insert = $2, on_update = $3, on_delete = $4, \
                   on_truncate = $5, reconcile = $6, recheck = $7 WHERE id = $1"
            ),
            &[
                watch_id.into(),
                sql.on_insert.as_str().into(),
                sql.on_update.as_str().into(),
                sql.on_delete.as_str().into(),
                sql.on_truncate.as_str().into(),
                sql.reconcile.as_str().into(),
                sql.recheck.as_str().into(),
            ],
        ),
    );
    if let Some(old) = previous {
        // The URLs the replaced watch derived are this watch's now.
        spi(
            "replacing the watch",
            Spi::run_with_args(
                &format!("UPDATE {ext}.indexnow_urls SET watch_id = $1 WHERE watch_id = $2"),
                &[watch_id.into(), old.into()],
            ),
        );
    }
    for (name, event, referencing) in EVENTS {
        spi(
            "installing the capture triggers",
            Spi::run(&format!(
                "CREATE OR REPLACE TRIGGER {name} AFTER {event} ON {t} {referencing} \
                 FOR EACH STATEMENT EXECUTE FUNCTION {ext}.indexnow_capture()",
                t = table.qualified
            )),
        );
    }
    spi("recording the rows public now", Spi::run(&sql.baseline));
}

/// Stop watching `tbl` for the pattern `url` (a template or url_sql as given to indexnow_watch),
/// or for every pattern when `url` is NULL. The triggers go with the table's last watch. Queued
/// URLs stay queued.
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_unwatch(tbl: PgRelation, url: default!(Option<&str>, "NULL")) {
    let oid = tbl.oid();
    drop(tbl);
    let table = describe(oid);
    let removed: i64 = spi(
        "removing the watch",
        Spi::get_one_with_args(
            "WITH gone AS (DELETE FROM indexnow_watches WHERE tbl = $1 AND ($2::text IS NULL OR pattern = $2) \
                           RETURNING 1) SELECT count(*) FROM gone",
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
    let remaining: i64 = spi(
        "removing the watch",
        Spi::get_one_with_args(
            "SELECT count(*) FROM indexnow_watches WHERE tbl = $1",
            &[oid.into()],
        ),
    )
    .unwrap_or(0);
    if remaining == 0 {
        for (name, _, _) in EVENTS {
            spi(
                "removing the capture triggers",
                Spi::run(&format!(
                    "DROP TRIGGER IF EXISTS {name} ON {}",
                    table.qualified
                )),
            );
        }
    }
}

/// The safety net: re-derive every URL of `tbl` and queue what the queue does not match — new or
/// republished URLs (`created`), changed content (`changed`), URLs no row gives any more
/// (`gone`). Catches writes the triggers never saw (disabled triggers, replica mode, restores).
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
    let watches: Vec<(String, String, String)> = spi(
        "reading the watches",
        Spi::connect(|c| {
            c.select(
                "SELECT pattern, search_path, reconcile FROM indexnow_watches WHERE tbl = $1 ORDER BY id",
                None,
                &[oid.into()],
            )?
            .map(|r| Ok((r.get(1)?.unwrap(), r.get(2)?.unwrap(), r.get(3)?.unwrap())))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
        }),
    );
    if watches.is_empty() {
        invalid_parameter(format!(
            "indexnow_reconcile: {} is not watched",
            describe(oid).label
        ));
    }
    let rows: Vec<_> = watches
        .into_iter()
        .map(|(pattern, search_path, reconcile)| {
            // Local to this function call: its SET search_path clause restores the caller's.
            spi(
                "setting the watch's search_path",
                Spi::run_with_args(
                    "SELECT pg_catalog.set_config('search_path', $1, true)",
                    &[search_path.into()],
                ),
            );
            let (created, changed, gone) = spi(
                "reconciling",
                Spi::connect_mut(|c| {
                    c.update(&reconcile, None, &[])?
                        .first()
                        .get_three::<i64, i64, i64>()
                }),
            );
            (
                pattern,
                created.unwrap_or(0),
                changed.unwrap_or(0),
                gone.unwrap_or(0),
            )
        })
        .collect();
    TableIterator::new(rows)
}

/// For the capture statements: `url` in normal form with its key and host, or no row (and a
/// WARNING naming the table, the row and the problem) when it cannot be built or submitted.
#[pg_extern(volatile, parallel_safe)]
fn indexnow_capture_target(
    url: Option<&str>,
    tbl: &str,
    row_key: Option<&str>,
) -> TableIterator<
    'static,
    (
        name!(url, String),
        name!(url_hash, Vec<u8>),
        name!(host, String),
    ),
> {
    let row = row_key.unwrap_or("?");
    let Some(url) = url else {
        warning!(
            "indexnow: skipped row {row} of {tbl}: its URL could not be built (a value it needs is NULL)"
        );
        return TableIterator::new(vec![]);
    };
    match indexnow_protocol::submittable_url(url) {
        Ok(t) => {
            let hash = url_hash(&t.url);
            TableIterator::new(vec![(t.url, hash, t.host)])
        }
        Err(problem) => {
            warning!("indexnow: skipped row {row} of {tbl}: cannot queue {url:?}: {problem}");
            TableIterator::new(vec![])
        }
    }
}
