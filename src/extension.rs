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
