//! The extension's own schema: one way to find it, for every statement that names the extension's
//! objects explicitly (the capture trigger and the derivations run under other search_paths).

use crate::capture::statements::quote_ident;
use pgrx::prelude::*;

/// The schema the extension is installed in, quoted. A read (no transaction id).
pub fn schema() -> String {
    let name: Option<String> = crate::kept::get_one(
        "SELECT n.nspname::text FROM pg_catalog.pg_extension e \
           JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace \
          WHERE e.extname = 'indexnow'",
        &[],
    )
    .unwrap_or_else(|e| error!("indexnow: finding the extension's schema: {e}"));
    quote_ident(
        &name
            .unwrap_or_else(|| error!("indexnow: the extension is not installed in this database")),
    )
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
    crate::kept::get_one::<pg_sys::Oid>(
        "SELECT extowner FROM pg_catalog.pg_extension WHERE extname = 'indexnow'",
        &[],
    )
    .unwrap_or_else(|e| error!("indexnow: finding the extension's owner: {e}"))
    .unwrap_or_else(|| error!("indexnow: the extension is not installed in this database"))
}

/// The search_path the extension's own statements run under when they run as its owner:
/// `pg_catalog` first, so no object of anyone's shadows a built-in.
pub fn own_search_path(ext: &str) -> String {
    format!("pg_catalog, {ext}, pg_temp")
}
