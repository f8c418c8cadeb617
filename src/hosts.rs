//! The sites we may speak for: `indexnow_add_host()` and the key rules it enforces, switching a
//! host off and on, and the rule that a copy of the database speaks for no one until confirmed.
//!
//! Keys are readable only by the extension's owner (see `sql/security.sql`): a key lets anyone
//! submit URLs in the site's name.
//!
//! A host's row remembers its home: the database it was added in, as the cluster's system
//! identifier and the database's OID. A copy of the database carries the row, keys and queue
//! included, and is not its home: a production dump restored on a staging server (another
//! cluster: another system identifier), or `CREATE DATABASE staging TEMPLATE site` (another OID).
//! Such a copy queues as usual but sends nothing for that host until an administrator runs
//! `indexnow_confirm_copy()` in it; `indexnow_status()` says why it is held. A physical standby
//! is the same cluster (pg_basebackup keeps the system identifier) and the same database: once
//! promoted, it goes on sending. (`pg_upgrade` makes a new system identifier: after an upgrade,
//! confirm once.)

use crate::error::{invalid_parameter, required, shown};
use crate::plan_cache::qualified;
use crate::queue::due::{FAILED_SQL, KEY_FAILED_SQL};
use pgrx::prelude::*;

/// This database, as a host's home is written: (system identifier, database OID).
pub fn here() -> (i64, u32) {
    // SAFETY: reads the control file's copy in shared memory, and this backend's database.
    unsafe {
        (
            pg_sys::GetSystemIdentifier() as i64,
            pg_sys::MyDatabaseId.to_u32(),
        )
    }
}

/// The SQL condition "the host `h` (a row of `indexnow_hosts`) is at home in this database".
/// The values are this backend's, written into the statement: its text stays the same for the
/// life of the backend, so a kept plan of it is planned once.
pub fn at_home_sql() -> String {
    let (system, database) = here();
    format!(
        "(h.home_system = {system}::pg_catalog.int8 \
          AND h.home_database = '{database}'::pg_catalog.oid)"
    )
}

/// The hold rule, in the one place it is written: why nothing goes out for a host however long
/// one waits — no key, switched off, sending off, or a copy's — as a SQL text expression over `h`
/// (its `indexnow_hosts` row, all NULL when it has no key) and `name` (its name); NULL when the
/// host may send. `sending_on` is a SQL boolean: whether `indexnow.enabled` is on.
/// `indexnow_status().held` shows it; a pass sends only for hosts where it is NULL. (A pause is
/// not a hold: it ends by itself.)
pub fn held_sql(name: &str, sending_on: &str) -> String {
    format!(
        "CASE WHEN h.host IS NULL THEN \
                'no key: nothing is sent for this host until SELECT indexnow_add_host(' \
                || pg_catalog.quote_literal({name}) || ', <key>) is run' \
              WHEN NOT h.enabled THEN \
                'disabled: nothing is sent for this host until SELECT indexnow_enable_host(' \
                || pg_catalog.quote_literal({name}) || ') is run' \
              WHEN NOT {sending_on} THEN \
                CASE WHEN NOT pg_catalog.current_setting('indexnow.server_enabled')::boolean THEN \
                  'indexnow.server_enabled is off: nothing is sent from this server' \
                ELSE 'indexnow.enabled is off: nothing is sent from this database' END \
              WHEN NOT {at_home} THEN \
                'this database is a copy (the key was added in database ' || h.home_database \
                || ' of system ' || h.home_system || '): nothing is sent for this host until \
                SELECT indexnow_confirm_copy() is run here' END",
        at_home = at_home_sql()
    )
}

/// Add a host with its key, or replace the key of a host already added. A new key keeps what
/// was set for the host: whether it is enabled, and its key location unless a new one is given
/// (`indexnow_set_key_location()` removes it). A new key is `unused` until an answer says more
/// (`indexnow_hosts.key_state`). Replacing the key requests again the host's URLs that failed
/// because of the old one (`KEY_FAILED_SQL`): they were failed "until requested again", and a
/// key rotation is what asks for them again.
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_add_host(
    host: Option<&str>,
    key: Option<&str>,
    key_location: default!(Option<&str>, "NULL"),
) {
    let host = required("indexnow_add_host", "the host", host);
    let key = required("indexnow_add_host", "the key", key);
    crate::extension::require_writable("indexnow_add_host");
    // It writes the key's state, a column of this release's table.
    crate::extension::require_current_version();
    let host = normal_host(host);
    indexnow_protocol::check_key(key)
        .unwrap_or_else(|e| invalid_parameter(format!("indexnow: key for {host}: {e}")));
    let key_location = key_location.map(|loc| checked_key_location(&host, loc));
    let (system, database) = here();
    // The key it had, locked until the end of the transaction: a key changed meanwhile by another
    // call is the one compared.
    let previous: Option<String> = Spi::connect_mut(|client| {
        let old = client.update(
            &*qualified("SELECT key FROM @extschema@.indexnow_hosts WHERE host = $1 FOR UPDATE"),
            Some(1),
            &[host.as_str().into()],
        )?;
        if old.is_empty() {
            return Ok(None);
        }
        old.first().get_one()
    })
    .unwrap_or_else(|e| error!("indexnow: could not read host {host}: {e}"));
    Spi::run_with_args(
        &qualified(
            "INSERT INTO @extschema@.indexnow_hosts AS h (host, key, key_location, home_system, home_database) \
         VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (host) DO UPDATE \
            SET key = excluded.key, \
                key_location = coalesce(excluded.key_location, h.key_location), \
                key_state = CASE WHEN h.key = excluded.key THEN h.key_state ELSE 'unused' END, \
                key_state_at = CASE WHEN h.key = excluded.key THEN h.key_state_at \
                                    ELSE clock_timestamp() END, \
                key_state_note = CASE WHEN h.key = excluded.key THEN h.key_state_note END",
        ),
        &[
            host.as_str().into(),
            key.into(),
            key_location.into(),
            system.into(),
            pg_sys::Oid::from(database).into(),
        ],
    )
    .unwrap_or_else(|e| error!("indexnow: could not add host {host}: {e}"));
    let replaced = previous.is_some_and(|p| p != key);
    if replaced {
        request_key_failures_again(&host);
    }
}

/// The host's URLs that failed because of its key are pending again, with the reason they failed
/// with (due by the due rule; their debounce passed long ago). So are the URLs in a sender's
/// hands (leased): their answer is to the old key, and if that answer fails them, the new request
/// keeps them pending.
fn request_key_failures_again(host: &str) {
    let requested = Spi::connect_mut(|client| {
        client
            .update(
                &*qualified(&format!(
                    "UPDATE @extschema@.indexnow_urls SET request_seq = request_seq + 1, queued_at = now() \
                      WHERE host = $1 \
                        AND (({FAILED_SQL} AND {KEY_FAILED_SQL}) \
                             OR claimed_until > clock_timestamp())"
                )),
                None,
                &[host.into()],
            )
            .map(|t| t.len())
    })
    .unwrap_or_else(|e| error!("indexnow: could not request {host}'s failed URLs again: {e}"));
    if requested > 0 {
        crate::wake::worker_at_commit();
    }
}

/// Sets (or, with NULL, removes) the key location of a host already added.
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_set_key_location(host: Option<&str>, key_location: Option<&str>) {
    let host = required("indexnow_set_key_location", "the host", host);
    crate::extension::require_writable("indexnow_set_key_location");
    let host = normal_host(host);
    let key_location = key_location.map(|loc| checked_key_location(&host, loc));
    update_host(
        &host,
        "UPDATE @extschema@.indexnow_hosts SET key_location = $2 WHERE host = $1",
        key_location.into(),
    );
}

/// Stops sending for a host: its URLs are still queued, and wait until it is enabled again.
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_disable_host(host: &str) {
    crate::extension::require_writable("indexnow_disable_host");
    set_enabled(host, false);
}

/// Sends for a host again after `indexnow_disable_host()`.
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_enable_host(host: &str) {
    crate::extension::require_writable("indexnow_enable_host");
    set_enabled(host, true);
}

/// Makes this database the home of every host whose key came with a copy of another database
/// (see the module's comment): from now on it sends for them. Returns how many hosts it took.
#[pg_extern(volatile, parallel_unsafe)]
fn indexnow_confirm_copy() -> i64 {
    crate::extension::require_writable("indexnow_confirm_copy");
    let (system, database) = here();
    let taken = Spi::get_one_with_args::<i64>(
        &qualified(&format!(
            "WITH taken AS (UPDATE @extschema@.indexnow_hosts h SET home_system = $1, home_database = $2 \
                             WHERE NOT {} RETURNING 1) \
             SELECT count(*) FROM taken",
            at_home_sql()
        )),
        &[system.into(), pg_sys::Oid::from(database).into()],
    )
    .unwrap_or_else(|e| error!("indexnow: could not confirm this copy: {e}"))
    .unwrap_or(0);
    if taken > 0 {
        crate::wake::worker_at_commit();
    }
    taken
}

fn set_enabled(host: &str, enabled: bool) {
    let host = normal_host(host);
    update_host(
        &host,
        "UPDATE @extschema@.indexnow_hosts SET enabled = $2 WHERE host = $1",
        enabled.into(),
    );
    if enabled {
        crate::wake::worker_at_commit();
    }
}

/// Runs `sql` (`$1` the host, `$2` the value) on a host's row; an ERROR when there is none.
fn update_host(host: &str, sql: &str, value: pgrx::datum::DatumWithOid<'_>) {
    let found = Spi::connect_mut(|client| {
        client
            .update(
                &*qualified(&format!("{sql} RETURNING 1")),
                None,
                &[host.into(), value],
            )
            .map(|t| t.len())
    })
    .unwrap_or_else(|e| error!("indexnow: could not change host {host}: {e}"));
    if found == 0 {
        invalid_parameter(format!(
            "indexnow: there is no host {host}: add it with indexnow_add_host('{host}', key)"
        ));
    }
}

fn normal_host(host: &str) -> String {
    indexnow_protocol::normalise_host(host).unwrap_or_else(|e| {
        invalid_parameter(format!("indexnow: host {} is not usable: {e}", shown(host)))
    })
}

fn checked_key_location(host: &str, location: &str) -> String {
    indexnow_protocol::check_key_location(host, location)
        .unwrap_or_else(|e| invalid_parameter(format!("indexnow: key for {host}: {e}")))
}
