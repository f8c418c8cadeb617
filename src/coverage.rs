//! `indexnow_coverage(tbl)`: has every page of the site been announced? Per watch, counted from
//! what the derivation last made of each row (`indexnow_sources`, the state reconcile compares
//! against) and the queue, with the senders' own rules (`queue::due`, `send::sql`, `hosts`):
//! nothing is derived or written, so it answers at once; changes recorded and not derived yet are
//! counted apart (`indexnow_derive()` first, for the counts as they will be).

use crate::plan_cache;
use crate::queue::due::{DUE_SQL, PENDING_SQL};
use crate::queue::{known_live, removal_list};
use pgrx::prelude::*;
use pgrx::PgRelation;

/// Per active watch (of `tbl`, or every table): its pages public now, scheduled (or withdrawn
/// until their time), told to search engines since their last change, pending, due now, never
/// announced and of those the ones whose host is held and the ones the endpoint refused, the
/// removals owed, and the change sets waiting for its table.
#[pg_extern(name = "indexnow_coverage", stable, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn indexnow_coverage(
    tbl: default!(Option<PgRelation>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(tbl, String),
        name!(pattern, String),
        name!(public, i64),
        name!(scheduled, i64),
        name!(told, i64),
        name!(pending, i64),
        name!(due_now, i64),
        name!(never_announced, i64),
        name!(held, i64),
        name!(failed, i64),
        name!(removals_owed, i64),
        name!(changes_waiting, i64),
    ),
> {
    crate::extension::require_current_version();
    let tbl: Option<pg_sys::Oid> = tbl.map(|t| t.oid());
    let sql = statement();
    let rows = Spi::connect(|client| {
        plan_cache::read(client, &sql, &arguments(tbl))?
            .map(|r| {
                Ok((
                    r.get::<String>(1)?.unwrap_or_default(),
                    r.get::<String>(2)?.unwrap_or_default(),
                    r.get::<i64>(3)?.unwrap_or_default(),
                    r.get::<i64>(4)?.unwrap_or_default(),
                    r.get::<i64>(5)?.unwrap_or_default(),
                    r.get::<i64>(6)?.unwrap_or_default(),
                    r.get::<i64>(7)?.unwrap_or_default(),
                    r.get::<i64>(8)?.unwrap_or_default(),
                    r.get::<i64>(9)?.unwrap_or_default(),
                    r.get::<i64>(10)?.unwrap_or_default(),
                    r.get::<i64>(11)?.unwrap_or_default(),
                    r.get::<i64>(12)?.unwrap_or_default(),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow_coverage: {e}"));
    TableIterator::new(rows)
}

/// The statement behind `indexnow_coverage()`, taking [`arguments`].
pub(crate) fn statement() -> String {
    let ext = crate::extension::schema();
    let claimable = crate::send::sql::claimable_with_dry_run_in(6);
    let held = crate::hosts::held_sql("u.host", "$5");
    let paused = crate::send::sql::paused_until("u.host");
    let live_now = "NOT s.withdrawn AND NOT coalesce(s.publish_at > $1, false)";
    let told = known_live("u");
    let removals = removal_list();
    // Each source's queue row is looked up through the index (`LATERAL ... OFFSET 0`), never
    // joined: a join's plan follows the statistics, and with the queue taken for empty (see
    // `crate::derive::statements`) the planner read the whole queue again for every source.
    format!(
        "WITH w AS ( \
           SELECT id, tbl, pattern FROM {ext}.indexnow_watches \
            WHERE active AND ($7::pg_catalog.oid IS NULL OR tbl = $7::pg_catalog.oid::pg_catalog.regclass)), \
         s AS ( \
           SELECT s.watch_id, {live_now} AS live, u.url_hash IS NOT NULL AND u.{PENDING_SQL} AS pending, \
                  coalesce({told}, false) AS told, \
                  u.url_hash IS NOT NULL AND {DUE_SQL} AND {claimable} AND {paused} IS NULL AS due, \
                  u.last_pushed_at IS NULL AND NOT coalesce({told}, false) AS unannounced, \
                  u.failed_at IS NOT NULL AS failed, u.host AS host \
             FROM {ext}.indexnow_sources s JOIN w ON w.id = s.watch_id \
             LEFT JOIN LATERAL (SELECT u.* FROM {ext}.indexnow_urls u \
                                 WHERE u.url_hash = s.url_hash OFFSET 0) u ON true), \
         h AS ( \
           SELECT DISTINCT u.host, {held} IS NOT NULL AS held \
             FROM (SELECT DISTINCT host FROM s WHERE host IS NOT NULL) u \
             LEFT JOIN {ext}.indexnow_hosts h ON h.host = u.host) \
         SELECT w.tbl::pg_catalog.text, w.pattern, \
                count(*) FILTER (WHERE s.live), \
                count(*) FILTER (WHERE NOT s.live), \
                count(*) FILTER (WHERE s.live AND s.told AND NOT s.pending), \
                count(*) FILTER (WHERE s.live AND s.pending), \
                count(*) FILTER (WHERE s.live AND s.due AND NOT coalesce(h.held, false)), \
                count(*) FILTER (WHERE s.live AND s.unannounced), \
                count(*) FILTER (WHERE s.live AND s.unannounced AND coalesce(h.held, false)), \
                count(*) FILTER (WHERE s.live AND s.failed AND NOT s.pending), \
                (SELECT count(*) FROM {ext}.indexnow_urls u \
                  WHERE u.watch_id = w.id AND u.{PENDING_SQL} AND u.reason IN ({removals})), \
                (SELECT count(*) FROM {ext}.indexnow_changes c \
                  WHERE c.tbl = w.tbl::pg_catalog.oid AND (c.watches IS NULL OR w.id = ANY (c.watches))) \
           FROM w LEFT JOIN s ON s.watch_id = w.id LEFT JOIN h ON h.host = s.host \
          GROUP BY w.id, w.tbl, w.pattern ORDER BY w.tbl::pg_catalog.text, w.id"
    )
    .replace("@extschema@", &ext)
}

/// What [`statement`] takes: the readers' arguments (`crate::status::reader_args`), then `tbl`.
pub(crate) fn arguments(tbl: Option<pg_sys::Oid>) -> Vec<pgrx::datum::DatumWithOid<'static>> {
    let mut args = crate::status::reader_args(crate::send::now());
    args.push(tbl.into());
    args
}
