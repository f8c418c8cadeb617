//! Getting out of the way of the commands that need a database to themselves: `DROP DATABASE`,
//! `ALTER DATABASE ... RENAME TO`, `ALTER DATABASE ... SET TABLESPACE` and `CREATE DATABASE ...
//! TEMPLATE`. A database worker stays connected to its database, and PostgreSQL refuses those
//! commands while others are connected ("database ... is being accessed by other users"). So, in
//! the backend that runs one, the workers of that database are asked to stop (and waited for,
//! briefly) before the command goes ahead; the launcher leaves the database alone for a while
//! (`LEAVE_ALONE_FOR`, a minute), then serves it again under whatever name it has. Queued URLs
//! wait meanwhile. TimescaleDB stops its schedulers the same way. Installed only when preloaded.

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
        if let Some(name) = database_wanted_alone((*pstmt).utilityStmt) {
            let db = pg_sys::get_database_oid(name, true);
            if db != pg_sys::InvalidOid {
                registry::stop_workers(db.to_u32());
            }
        }
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

/// The database a utility statement needs no one else connected to, if any.
unsafe fn database_wanted_alone(stmt: *mut pg_sys::Node) -> Option<*const std::ffi::c_char> {
    use pg_sys::NodeTag::*;
    if stmt.is_null() {
        return None;
    }
    unsafe {
        match (*stmt).type_ {
            T_DropdbStmt => Some((*(stmt as *mut pg_sys::DropdbStmt)).dbname),
            T_RenameStmt => {
                let rename = stmt as *mut pg_sys::RenameStmt;
                ((*rename).renameType == pg_sys::ObjectType::OBJECT_DATABASE)
                    .then(|| (*rename).subname.cast_const())
            }
            T_CreatedbStmt => option((*(stmt as *mut pg_sys::CreatedbStmt)).options, c"template"),
            T_AlterDatabaseStmt => {
                let alter = stmt as *mut pg_sys::AlterDatabaseStmt;
                option((*alter).options, c"tablespace").map(|_| (*alter).dbname.cast_const())
            }
            _ => None,
        }
    }
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
