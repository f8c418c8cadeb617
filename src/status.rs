//! `indexnow_status()`: what is pending, due, failed and paused, per host, and what the worker of
//! this database is doing. With no host and nothing queued it returns one row whose `host` is
//! NULL, so the worker's state is always visible. It counts with the same due rule the worker sends by.

use crate::guc;
use crate::queue::due::{DUE_AT_SQL, DUE_SQL};
use pgrx::prelude::*;

type StatusRow = (
    Option<String>,
    bool,
    bool,
    i64,
    i64,
    i64,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<i32>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    String,
);

#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn indexnow_status() -> TableIterator<
    'static,
    (
        name!(host, Option<String>),
        name!(has_key, bool),
        name!(enabled, bool),
        name!(pending, i64),
        name!(due_now, i64),
        name!(failed, i64),
        name!(next_due_at, Option<TimestampWithTimeZone>),
        name!(last_push_at, Option<TimestampWithTimeZone>),
        name!(last_status, Option<i32>),
        name!(backoff_until, Option<TimestampWithTimeZone>),
        name!(held, Option<String>),
        name!(worker, String),
    ),
> {
    // What the capture triggers recorded is derived first (spec behaviour 8) — except on a hot
    // standby, which cannot write: its status counts what the primary had derived.
    let ext = crate::extension::schema();
    // SAFETY: reads shared state.
    if !unsafe { pg_sys::RecoveryInProgress() } && crate::capture::derive::change_sets_waiting(&ext)
    {
        crate::capture::derive::derive_all_change_sets(&ext);
    }
    let worker = crate::worker::state_for_status();
    let [debounce, min_gap, repeat_after] = guc::due_rule().sql_args();
    let held = crate::hosts::held_as_copy_sql();
    let sql = format!(
        "WITH pending AS ( \
             SELECT host, count(*) AS pending, count(*) FILTER (WHERE {DUE_SQL}) AS due_now, \
                    min({DUE_AT_SQL}) AS next_due_at \
               FROM indexnow_urls WHERE request_seq > settled_seq GROUP BY host), \
         failed AS ( \
             SELECT host, count(*) AS failed FROM indexnow_urls \
              WHERE failed_at IS NOT NULL AND request_seq = settled_seq GROUP BY host), \
         names AS ( \
             SELECT host FROM indexnow_hosts UNION SELECT host FROM pending \
             UNION SELECT host FROM failed) \
         SELECT n.host, h.key IS NOT NULL, coalesce(h.enabled, false), \
                coalesce(p.pending, 0), coalesce(p.due_now, 0), coalesce(f.failed, 0), \
                p.next_due_at, lp.pushed_at, lp.status, \
                (SELECT max(b.until) FROM indexnow_backoff b \
                  WHERE b.scope IN ('*', n.host) AND b.until > $1), \
                {held} \
           FROM names n \
           LEFT JOIN indexnow_hosts h USING (host) \
           LEFT JOIN pending p USING (host) \
           LEFT JOIN failed f USING (host) \
           LEFT JOIN LATERAL (SELECT x.pushed_at, x.status FROM indexnow_pushes x \
                               WHERE x.host = n.host ORDER BY x.pushed_at DESC LIMIT 1) lp ON true \
          ORDER BY n.host"
    );
    let rows: Vec<StatusRow> = Spi::connect(|client| {
        let args = [
            now().into(),
            debounce.into(),
            min_gap.into(),
            repeat_after.into(),
        ];
        crate::kept::read(client, &sql, &args)?
            .map(|r| {
                Ok((
                    r.get::<String>(1)?,
                    r.get::<bool>(2)?.unwrap_or(false),
                    r.get::<bool>(3)?.unwrap_or(false),
                    r.get::<i64>(4)?.unwrap_or(0),
                    r.get::<i64>(5)?.unwrap_or(0),
                    r.get::<i64>(6)?.unwrap_or(0),
                    r.get::<TimestampWithTimeZone>(7)?,
                    r.get::<TimestampWithTimeZone>(8)?,
                    r.get::<i32>(9)?,
                    r.get::<TimestampWithTimeZone>(10)?,
                    r.get::<String>(11)?,
                    worker.clone(),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: status query failed: {e}"));
    let rows = if rows.is_empty() {
        // No host and nothing queued yet: still one row, so the worker's state can be seen.
        vec![(
            None, false, false, 0, 0, 0, None, None, None, None, None, worker,
        )]
    } else {
        rows
    };
    TableIterator::new(rows)
}
