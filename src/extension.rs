//! The extension's own schema: one way to find it, for every statement that names the extension's
//! objects explicitly (the capture trigger and the derivations run under other search_paths).

use crate::quote::quote_ident;
use pgrx::prelude::*;

/// The schema the extension is installed in, quoted. A read (no transaction id). Where it may be
/// missing (a worker's database may lose the extension), `crate::plan_cache::extension_schema`
/// answers `None`: the query is there, as the statements kept there are filled in with the same
/// schema (`@extschema@`).
pub fn schema() -> String {
    crate::plan_cache::extension_schema()
        .unwrap_or_else(|| error!("indexnow: the extension is not installed in this database"))
}

/// The same schema, found without a query: the schema of one of the extension's own functions
/// (the capture trigger's, which asks on every save). A syscache lookup.
pub fn schema_of_function(function: pg_sys::Oid) -> String {
    // SAFETY: the function exists while it runs; the name is copied out at once.
    let name = unsafe {
        let schema = pg_sys::get_namespace_name(pg_sys::get_func_namespace(function));
        std::ffi::CStr::from_ptr(schema)
            .to_string_lossy()
            .into_owned()
    };
    quote_ident(&name)
}

/// The role that owns the extension: what watching runs as once the caller's rights are checked.
pub fn owner() -> pg_sys::Oid {
    crate::plan_cache::get_one::<pg_sys::Oid>(
        "SELECT extowner FROM pg_catalog.pg_extension WHERE extname = 'indexnow'",
        &[],
    )
    .unwrap_or_else(|e| error!("indexnow: finding the extension's owner: {e}"))
    .unwrap_or_else(|| error!("indexnow: the extension is not installed in this database"))
}

/// The search_path the extension's own statements run under (its workers, its pinned functions,
/// what it does as its owner): `pg_catalog` and `pg_temp` only, so that nothing anyone else can
/// create is a candidate when a name is resolved. The extension's schema is not in it: that
/// schema (`public`, often) may be open to others, and a function of theirs there with a closer
/// argument type (`format(text, name, name)`, `unnest(text[])`) would be chosen over the built-in
/// one, and run with the extension's rights. So every statement names the extension's objects
/// with their schema: as `@extschema@.name`, as in the SQL files (filled in by `crate::plan_cache::qualified`), or
/// as `{ext}.name` in a statement built with the schema at hand.
pub const OWN_SEARCH_PATH: &str = "pg_catalog, pg_temp";

/// The version of this library (the `.so` file). The extension's SQL in a database is another
/// version between installing a new release and `ALTER EXTENSION indexnow UPDATE` there.
pub const LIBRARY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version of the library this server runs (`pg_extension.extversion` is the version of the
/// SQL in a database). An upgrade script creates it first: on a server still running the previous
/// release's library, which has no such function, the update stops before changing anything.
#[pg_extern(stable, parallel_safe)]
fn indexnow_library_version() -> &'static str {
    LIBRARY_VERSION
}

/// The version of the extension's SQL in this database (`pg_extension.extversion`), if installed.
pub fn installed_version() -> Option<String> {
    crate::plan_cache::get_one(
        "SELECT extversion::text FROM pg_catalog.pg_extension WHERE extname = 'indexnow'",
        &[],
    )
    .unwrap_or_else(|e| error!("indexnow: reading the extension's version: {e}"))
}

/// Why this library cannot serve this database yet, when its SQL is another version.
pub fn version_mismatch() -> Option<String> {
    installed_version()
        .filter(|v| v != LIBRARY_VERSION)
        .map(|v| {
            format!(
                "the extension in this database is version {v} and the installed library is \
                 {LIBRARY_VERSION}"
            )
        })
}

/// The extension's tables that are not there though the extension is (a cluster half restored
/// by a failed `pg_upgrade`, a table taken out of the extension and dropped), joined by `, `:
/// nothing of the extension can work then, and a worker waits instead of failing again and
/// again.
pub fn missing_tables() -> Option<String> {
    crate::plan_cache::get_one::<String>(
        "SELECT pg_catalog.string_agg(t, ', ' ORDER BY t) \
           FROM pg_catalog.pg_extension e \
           JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace, \
                pg_catalog.unnest(ARRAY['indexnow_urls', 'indexnow_hosts', 'indexnow_pushes', \
                                        'indexnow_backoff', 'indexnow_watches', 'indexnow_changes', \
                                        'indexnow_sources', 'indexnow_relations']) t \
          WHERE e.extname = 'indexnow' \
            AND pg_catalog.to_regclass(pg_catalog.format('%I.%I', n.nspname, t)) IS NULL",
        &[],
    )
    .unwrap_or_else(|e| error!("indexnow: looking for the extension's tables: {e}"))
}

/// Whether this transaction can write: not on a hot standby, not read-only.
pub fn writable() -> bool {
    // SAFETY: plain reads of this backend's transaction state.
    unsafe { !pgrx::pg_sys::XactReadOnly && !pgrx::pg_sys::RecoveryInProgress() }
}

/// Refuses `function` (a function that writes) on a hot standby or in a read-only transaction,
/// with a message saying so: without it, the first write inside fails with an internal error
/// ("cannot assign TransactionIds during recovery").
pub fn require_writable(function: &str) {
    if writable() {
        return;
    }
    // SAFETY: reads shared state.
    let standby = unsafe { pgrx::pg_sys::RecoveryInProgress() };
    let (why, hint) = if standby {
        (
            "this server is a hot standby",
            "Call it on the primary: a standby has the primary's queue, and its worker starts \
             when it is promoted.",
        )
    } else {
        (
            "the transaction is read-only",
            "Call it in a read-write transaction (SET TRANSACTION READ WRITE, or \
             default_transaction_read_only = off).",
        )
    };
    pgrx::pg_sys::panic::ErrorReport::new(
        PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
        format!("indexnow: {function}() writes, and {why}"),
        "indexnow",
    )
    .set_hint(hint)
    .report(PgLogLevel::ERROR);
}

/// Refuses a call whose SQL declaration may differ from the library's (a function's result
/// columns change between releases) until the database is updated.
pub fn require_current_version() {
    if let Some(why) = version_mismatch() {
        pgrx::pg_sys::panic::ErrorReport::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("indexnow: {why}"),
            "indexnow",
        )
        .set_hint("Run ALTER EXTENSION indexnow UPDATE in this database.")
        .report(PgLogLevel::ERROR);
    }
}

/// The SQL name of `_indexnow_written_by_this_transaction()` in this database. Between a server's
/// restart with this library and `ALTER EXTENSION indexnow UPDATE`, a database of 0.2.0 or
/// earlier still has it under its name of then, and the capture trigger must go on working there.
pub fn written_by_this_transaction() -> &'static str {
    let before_0_3 = installed_version().is_some_and(|v| {
        let parts: Vec<u32> = v.split('.').filter_map(|p| p.parse().ok()).collect();
        parts < vec![0, 3]
    });
    if before_0_3 {
        "indexnow_written_by_this_transaction"
    } else {
        "_indexnow_written_by_this_transaction"
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn requests_name_this_release_in_their_user_agent() {
        assert_eq!(
            indexnow_protocol::client::USER_AGENT,
            format!("indexnow-postgres/{}", super::LIBRARY_VERSION)
        );
    }

    /// The README and the install and upgrade steps name this release (the version changes only
    /// in a release commit: docs/releases.md), so a user following them installs what the
    /// repository is. Only the way back names an older one: 0.1.0, which has no install script.
    #[test]
    fn the_docs_name_this_release() {
        let version = super::LIBRARY_VERSION;
        let readme = include_str!("../README.md");
        assert!(
            readme.contains(&format!("**The last release is {version} (")),
            "README.md does not say the last release is {version}"
        );
        let operations = include_str!("../docs/operations.md");
        assert!(
            operations.contains(&format!("The current release is **{version}**")),
            "docs/operations.md does not name {version} as the current release"
        );
        let checkouts: Vec<&str> = operations
            .split("git checkout v")
            .skip(1)
            .map(|rest| {
                rest.split(|c: char| !c.is_ascii_digit() && c != '.')
                    .next()
                    .unwrap_or("")
            })
            .map(|v| v.trim_end_matches('.'))
            .collect();
        assert!(
            checkouts.contains(&version),
            "no `git checkout v{version}` in docs/operations.md"
        );
        for v in checkouts {
            assert!(
                v == version || v == "0.1.0",
                "docs/operations.md tells users to check out v{v}, not v{version}"
            );
        }
        let changelog = include_str!("../docs/releases.md");
        assert!(
            changelog.contains(&format!("\n### {version} (")),
            "docs/releases.md has no changelog section for {version}"
        );
    }
}
