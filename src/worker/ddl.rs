//! Getting out of the way of the commands that need a database to themselves: `DROP DATABASE`,
//! `ALTER DATABASE ... RENAME TO`, `ALTER DATABASE ... SET TABLESPACE` and `CREATE DATABASE ...
//! TEMPLATE`. A database worker stays connected to its database, and PostgreSQL refuses those
//! commands while others are connected ("database ... is being accessed by other users"). So, in
//! the backend that runs one, the workers of that database are asked to stop (and waited for,
//! briefly) before the command goes ahead; the launcher leaves the database alone for a while
//! (`LEAVE_ALONE_FOR`, a minute), then serves it again under whatever name it has. Queued URLs
//! wait meanwhile. TimescaleDB stops its schedulers the same way. Installed only when preloaded.
//!
//! Only for what will happen: a worker asked to stop leaves the request it has under way (its
//! URLs are sent again), so the workers are not stopped while another session stays connected
//! to the database for the five seconds PostgreSQL would wait for it (PostgreSQL refuses the
//! command then, whatever the workers do), unless the command terminates those sessions itself
//! (`DROP DATABASE ... WITH (FORCE)`); and when the command fails all the same, the database is
//! served again at once. A command refused for another session so takes ten seconds to fail.

use crate::registry;
use pgrx::prelude::*;

static mut PREVIOUS: pg_sys::ProcessUtility_hook_type = None;

pub fn install() {
    unsafe {
        PREVIOUS = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(on_utility);
    }
}

#[pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn on_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    unsafe {
        let mut stopped = None;
        if let Some((name, forced)) = database_wanted_alone((*pstmt).utilityStmt) {
            let db = pg_sys::get_database_oid(name, true);
            if db != pg_sys::InvalidOid && (forced || !others_stay_connected(db)) {
                registry::stop_workers(db.to_u32());
                stopped = Some(db.to_u32());
            }
        }
        let run = move || {
            run_previous(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            )
        };
        match stopped {
            None => run(),
            Some(db) => pgrx::PgTryBuilder::new(run)
                .catch_others(|failure| {
                    registry::serve_again(db);
                    failure.rethrow()
                })
                .execute(),
        }
    }
}

/// Whether a session other than this one stays connected to `db` for five seconds, the time
/// PostgreSQL gives the database's other processes to leave before it refuses the command (a
/// session that is closing, as a client's pool gives its connections back, counts as gone if it
/// goes within it). The workers of indexnow are background workers, not counted.
fn others_stay_connected(db: pg_sys::Oid) -> bool {
    for _ in 0..50 {
        if !others_connected(db) {
            return false;
        }
        // SAFETY: a plain sleep of this backend; interrupts are handled after it.
        unsafe { pg_sys::pg_usleep(100_000) };
        pgrx::check_for_interrupts!();
    }
    true
}

/// Whether a session other than this one is connected to `db` now.
fn others_connected(db: pg_sys::Oid) -> bool {
    // SAFETY: drops this backend's snapshot of the statistics, so that the query reads them now.
    unsafe { pg_sys::pgstat_clear_snapshot() };
    crate::plan_cache::get_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity \
                         WHERE datid = $1 AND backend_type = 'client backend' \
                           AND pid <> pg_catalog.pg_backend_pid())",
        &[db.into()],
    )
    .ok()
    .flatten()
        == Some(true)
}

/// The hook's next in line, or PostgreSQL's own.
#[allow(clippy::too_many_arguments)]
unsafe fn run_previous(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    unsafe {
        // (pgrx wraps standard_ProcessUtility as a Rust function: it cannot stand in for a hook)
        match PREVIOUS {
            Some(previous) => previous(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
            None => pg_sys::standard_ProcessUtility(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        }
    }
}

/// The database a utility statement needs no one else connected to, if any, and whether the
/// statement terminates the other sessions itself (`DROP DATABASE ... WITH (FORCE)`).
unsafe fn database_wanted_alone(
    stmt: *mut pg_sys::Node,
) -> Option<(*const std::ffi::c_char, bool)> {
    use pg_sys::NodeTag::*;
    if stmt.is_null() {
        return None;
    }
    unsafe {
        match (*stmt).type_ {
            T_DropdbStmt => {
                let drop = stmt as *mut pg_sys::DropdbStmt;
                let forced = has_option((*drop).options, c"force");
                Some(((*drop).dbname.cast_const(), forced))
            }
            T_RenameStmt => {
                let rename = stmt as *mut pg_sys::RenameStmt;
                ((*rename).renameType == pg_sys::ObjectType::OBJECT_DATABASE)
                    .then(|| ((*rename).subname.cast_const(), false))
            }
            T_CreatedbStmt => option((*(stmt as *mut pg_sys::CreatedbStmt)).options, c"template")
                .map(|name| (name, false)),
            T_AlterDatabaseStmt => {
                let alter = stmt as *mut pg_sys::AlterDatabaseStmt;
                option((*alter).options, c"tablespace")
                    .map(|_| ((*alter).dbname.cast_const(), false))
            }
            _ => None,
        }
    }
}

/// Whether a `DROP DATABASE` option list has the option `name` (`FORCE`: no value).
unsafe fn has_option(options: *mut pg_sys::List, name: &std::ffi::CStr) -> bool {
    let options = unsafe { pgrx::PgList::<pg_sys::DefElem>::from_pg(options) };
    let found = options
        .iter_ptr()
        .any(|def| unsafe { std::ffi::CStr::from_ptr((*def).defname) == name });
    found
}

/// The value of the option `name` in a `CREATE/ALTER DATABASE` option list, when it has one.
unsafe fn option(
    options: *mut pg_sys::List,
    name: &std::ffi::CStr,
) -> Option<*const std::ffi::c_char> {
    let options = unsafe { pgrx::PgList::<pg_sys::DefElem>::from_pg(options) };
    let found = options.iter_ptr().find_map(|def| unsafe {
        let matches = std::ffi::CStr::from_ptr((*def).defname) == name && !(*def).arg.is_null();
        matches.then(|| pg_sys::defGetString(def).cast_const())
    });
    found
}
