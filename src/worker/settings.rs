//! The settings a database or a role gives a running worker (`ALTER DATABASE site SET
//! indexnow.enabled = off`, `ALTER ROLE ... IN DATABASE ... SET`, and their `RESET`s).
//!
//! PostgreSQL applies those once, when a session connects; a reload (SIGHUP) re-reads only the
//! configuration files. A worker connects once and runs for weeks, so it would go on with what
//! the database said at its start (a staging copy switched off would go on sending). So before
//! each pass the worker compares the `indexnow.*` entries of `pg_db_role_setting` that apply to
//! it (its database, its role, both, and `ALTER ROLE ALL`) with those it started with; when they
//! differ it exits, and the launcher, woken by its exit, starts a new one at once, which connects
//! with the settings as they are now. Nothing is in flight then: it happens between passes.

use pgrx::prelude::*;

/// The `indexnow.*` settings the database and roles give this worker, and
/// `session_replication_role` (a worker started again says at its start which tables' writes
/// that setting hides: `super::tell_capture_gaps`), as one text.
pub fn given_by_database_and_role() -> String {
    // SAFETY: this backend's database and session user.
    let (database, role) = unsafe { (pg_sys::MyDatabaseId, pg_sys::GetSessionUserId()) };
    crate::plan_cache::get_one::<String>(
        "SELECT coalesce(pg_catalog.string_agg( \
                    s.setdatabase || '/' || s.setrole || ' ' || c, ',' \
                    ORDER BY s.setdatabase, s.setrole, c), '') \
           FROM pg_catalog.pg_db_role_setting s, pg_catalog.unnest(s.setconfig) c \
          WHERE s.setdatabase IN (0, $1) AND s.setrole IN (0, $2) \
            AND (c LIKE 'indexnow.%' OR c LIKE 'session\\_replication\\_role=%')",
        &[database.into(), role.into()],
    )
    .unwrap_or_else(|e| error!("indexnow: could not read the database's settings: {e}"))
    .unwrap_or_default()
}
