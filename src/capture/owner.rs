//! A watch's own SQL runs with the rights of the role that made it.
//!
//! `visible`, `url_sql`, `publish_at` and the template's columns are SQL the watch's maker wrote.
//! The capture trigger runs as the extension's owner (it must write the queue whoever saves), and
//! the workers as the bootstrap superuser: evaluated there, that SQL would have their rights, and
//! a table owner allowed to watch its table could read keys or become superuser through an
//! expression. So the rows a derivation needs are read by `indexnow_watch_rows()`, which switches
//! to the watch's owner for the one statement that evaluates them, in a security-restricted
//! operation (no `SET ROLE`, no temporary objects), as PostgreSQL does for `REFRESH MATERIALIZED
//! VIEW` and for index expressions during maintenance. The derivation statements themselves hold
//! none of the watch's SQL (`super::statements`).
//!
//! The owner is kept by name, not OID: a dump restored into another cluster finds the role of
//! that name (or none: the derivation then fails with an error naming it).

use crate::kept;
use pgrx::prelude::*;
use pgrx::JsonB;

type WatchRow = (
    Option<String>,
    bool,
    Option<String>,
    Option<bool>,
    Option<TimestampWithTimeZone>,
    Option<String>,
);

/// The rows of watch `watch_id` whose keys are in `keys` (all rows when NULL), with what each
/// derives to, evaluated with the rights of the role that made the watch.
#[pg_extern(stable, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn indexnow_watch_rows(
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
        name!(fp, Option<String>),
    ),
> {
    let ext = crate::extension::schema();
    let found: Option<(Option<pg_sys::Oid>, String, String)> = Spi::connect(|client| {
        let t = kept::read(
            client,
            &format!(
                "SELECT r.oid, w.owner::text, \
                        CASE WHEN $2 THEN w.rows_keys ELSE w.rows_all END \
                   FROM {ext}.indexnow_watches w \
                   LEFT JOIN pg_catalog.pg_roles r ON r.rolname = w.owner \
                  WHERE w.id = $1"
            ),
            &[watch_id.into(), keys.is_some().into()],
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
    let Some((role, owner, sql)) = found else {
        error!("indexnow: there is no watch {watch_id}");
    };
    let Some(role) = role else {
        error!(
            "indexnow: the role {owner} that made watch {watch_id} does not exist: make the watch \
             again with indexnow_watch() as a role that owns the table"
        );
    };
    let rows = as_role(role, || {
        Spi::connect(|client| {
            kept::read(client, &sql, &[keys.into()])?
                .map(|r| {
                    Ok((
                        r.get::<String>(1)?,
                        r.get::<bool>(2)?.unwrap_or(false),
                        r.get::<String>(3)?,
                        r.get::<bool>(4)?,
                        r.get::<TimestampWithTimeZone>(5)?,
                        r.get::<String>(6)?,
                    ))
                })
                .collect::<Result<Vec<WatchRow>, pgrx::spi::Error>>()
        })
        .unwrap_or_else(|e| error!("{e}"))
    });
    TableIterator::new(rows)
}

/// Runs `f` as `role`, in a security-restricted operation, and switches back after it, also when
/// it raises an ERROR.
pub fn as_role<R>(role: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let (mut user, mut context) = (pg_sys::InvalidOid, 0);
    // SAFETY: reads and sets this backend's current user, as PostgreSQL's own callers do.
    unsafe { pg_sys::GetUserIdAndSecContext(&mut user, &mut context) };
    let restricted = context
        | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
        | pg_sys::SECURITY_RESTRICTED_OPERATION as i32;
    unsafe { pg_sys::SetUserIdAndSecContext(role, restricted) };
    let f = std::panic::AssertUnwindSafe(f);
    pgrx::PgTryBuilder::new(move || {
        let f = f;
        (f.0)()
    })
    .finally(|| unsafe { pg_sys::SetUserIdAndSecContext(user, context) })
    .execute()
}

/// The role at the keyboard: the session's current role (after `SET ROLE`), whatever SECURITY
/// DEFINER function is running. It is who makes a watch, and who must own the table.
pub fn caller() -> pg_sys::Oid {
    // SAFETY: reads this backend's outer user.
    unsafe { pg_sys::GetOuterUserId() }
}
