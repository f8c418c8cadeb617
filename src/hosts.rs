//! The sites we may speak for: `indexnow_add_host()` and the key rules it enforces.
//!
//! Keys are readable only by the extension's owner (see `sql/security.sql`): a key lets anyone
//! submit URLs in the site's name.

use crate::error::{invalid_parameter, shown};
use pgrx::prelude::*;

/// Add a host with its key, or replace the key (and key location) of a host already added.
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_add_host(host: &str, key: &str, key_location: default!(Option<&str>, "NULL")) {
    let host = indexnow_protocol::normalise_host(host).unwrap_or_else(|e| {
        invalid_parameter(format!("indexnow: host {} is not usable: {e}", shown(host)))
    });
    indexnow_protocol::check_key(key)
        .unwrap_or_else(|e| invalid_parameter(format!("indexnow: key for {host}: {e}")));
    let key_location = key_location.map(|loc| {
        indexnow_protocol::check_key_location(&host, loc)
            .unwrap_or_else(|e| invalid_parameter(format!("indexnow: key for {host}: {e}")))
    });
    Spi::run_with_args(
        "INSERT INTO indexnow_hosts (host, key, key_location) VALUES ($1, $2, $3) \
         ON CONFLICT (host) DO UPDATE \
            SET key = excluded.key, key_location = excluded.key_location, enabled = true",
        &[host.as_str().into(), key.into(), key_location.into()],
    )
    .unwrap_or_else(|e| error!("indexnow: could not add host {host}: {e}"));
}
