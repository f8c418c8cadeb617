//! indexnow: keeps search engines told, through the IndexNow protocol, about every page a
//! Postgres-backed site adds, changes or removes, with the whole queue inside the database.
//!
//! Where things are:
//! - `guc`          every setting
//! - `queue`        `indexnow_queue()`, the reasons, and the due rule (`queue/due.rs`)
//! - `hosts`        `indexnow_add_host()`, key rules, switching a host off and on, and the home
//!   rule: a copy of the database sends nothing until `indexnow_confirm_copy()`
//! - `capture`      from writes to content tables to queue requests: watches, change sets,
//!   derivations, related tables, partitions (its `mod.rs` lists its files)
//! - `status`       `indexnow_status()`
//! - `send`         one sending pass (claim, POST, record), `indexnow_push_now()`
//! - `worker`       the launcher and the per-database workers, waking them at commit, the
//!   database and role settings they follow
//! - `kept`         statements planned once per backend (SPI_keepplan)
//! - `subtransaction`  work that may fail alone (a watch's statement, a re-read)
//! - `extension`    the extension's own schema and owner
//! - `error`        how bad input is refused
//! - `compat`       what differs between PostgreSQL 15, 16 and 18
//! - `sql/`         tables (`schema.sql`), `indexnow_watch()`'s expression check and the event
//!   trigger for partitions (`capture.sql`), grants and search_path pins (`security.sql`)
//! - `crates/protocol`  the IndexNow protocol's rules in plain Rust (URLs, keys, the request,
//!   what an answer means, the HTTP client)

use pgrx::prelude::*;

mod capture;
mod compat;
mod error;
mod extension;
mod guc;
mod hosts;
mod kept;
mod queue;
mod send;
mod status;
mod subtransaction;
mod worker;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!(
    "../sql/capture.sql",
    name = "capture",
    requires = ["schema"]
);
extension_sql_file!("../sql/security.sql", name = "security", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::register();
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        worker::register_at_preload();
    }
}

// #[pg_schema] takes only an inline module, so the tests' file is included into one.
#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    include!("tests.rs");
    include!("capture_tests.rs");
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
