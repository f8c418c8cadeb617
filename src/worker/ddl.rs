//! Getting out of the way of `DROP DATABASE`: a database worker stays connected to its database,
//! and PostgreSQL refuses to drop a database others are connected to. So, in the backend that runs
//! `DROP DATABASE`, the worker of that database is asked to stop (and waited for, briefly) before
//! the drop goes ahead; the launcher leaves the database alone for a while. TimescaleDB stops its
//! schedulers the same way. Installed only when preloaded.

use super::registry;
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
        let stmt = (*pstmt).utilityStmt;
        if !stmt.is_null() && (*stmt).type_ == pg_sys::NodeTag::T_DropdbStmt {
            let drop = stmt as *mut pg_sys::DropdbStmt;
            let db = pg_sys::get_database_oid((*drop).dbname, true);
            if db != pg_sys::InvalidOid {
                registry::stop_worker(db.to_u32());
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
