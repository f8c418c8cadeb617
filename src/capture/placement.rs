//! Where the capture triggers go: the one rule, and the one place that puts them on and takes
//! them off.
//!
//! **The rule.** A table carries the capture triggers (`super::triggers`) when it is in the tree
//! of a table that an active watch watches or reads as a related table: that table itself, every
//! table below it (partitions, inheritance children), and every table above it that has no
//! foreign table below it (`super::partitions::tree_of`). A statement fires the triggers of the
//! table it names only, so each table a statement can write the watched rows through carries
//! them; a table above with a foreign table below it cannot (PostgreSQL would refuse every
//! UPDATE and DELETE through it), and writes through it go unseen.
//!
//! **How they fire.** A table's capture triggers fire in replica mode too (`ENABLE ALWAYS`) when
//! an active watch whose tree it is in asks for it (`indexnow_watch(..., replica_writes =>
//! true)`), else only where writes originate, PostgreSQL's default ([`fires_always`]).
//!
//! Everything that changes what the rule says calls in here: making a watch and ending it
//! (`super::watch`), the end of `CREATE TABLE` and `ALTER TABLE` (`super::after_ddl`), a dropped
//! table (`super::dropped`). The triggers taken off a table for the moment it joins a tree, and
//! put back at the end of its `ALTER TABLE`, are no decision of placement
//! (`super::partitions::before_joining`).

use super::partitions::{exists, foreign_below, in_role, tree_of, whole_tree, Role};
use super::triggers;
use pgrx::prelude::*;

/// The tables of the trees of `roots` (watched or related tables), each once, every tree top
/// first: the order PostgreSQL locks a tree in.
pub fn trees(roots: &[pg_sys::Oid]) -> Vec<pg_sys::Oid> {
    let mut all: Vec<pg_sys::Oid> = vec![];
    for t in roots.iter().flat_map(|r| tree_of(*r)) {
        if !all.contains(&t) {
            all.push(t);
        }
    }
    all
}

/// Whether `table` carries the capture triggers by the rule: an active watch watches it or reads
/// it, or a table above or below it (and then, unless a watch has it itself, no foreign table is
/// below it).
pub fn needed(ext: &str, table: pg_sys::Oid) -> bool {
    if !in_role(ext, &[table], Role::Either).is_empty() {
        return true;
    }
    foreign_below(table).is_none()
        && !in_role(ext, &whole_tree(table)[1..], Role::Either).is_empty()
}

/// How [`put_on`] treats a table that carries the triggers already.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Makes them again (`CREATE OR REPLACE`): making a watch puts them on as they are meant to
    /// be, whatever was done to them by hand.
    Remake,
    /// Leaves them: making them again would lock the tables above a written one after it,
    /// against a write through them that locks them first.
    Keep,
}

/// Puts the capture triggers on every table of the trees of `roots`, firing as [`fires_always`]
/// says.
pub fn put_on(ext: &str, roots: &[pg_sys::Oid], existing: Existing) {
    for t in trees(roots) {
        if existing == Existing::Remake || !triggers::on(t) {
            triggers::install(ext, &triggers::table_qualified(t));
        }
        fire_as_ruled(ext, t);
    }
}

/// Makes the capture triggers of `table` fire as [`fires_always`] says. Not between a server's
/// restart onto a new library and `ALTER EXTENSION indexnow UPDATE` (nor during the update): the
/// watches' tables may not have what the rule reads yet, and the triggers are left as they are.
fn fire_as_ruled(ext: &str, table: pg_sys::Oid) {
    if crate::extension::version_mismatch().is_none() {
        triggers::fire_always(table, fires_always(ext, table));
    }
}

/// Whether the capture triggers of `table` fire in replica mode too: an active watch whose
/// watched or related table is in `table`'s tree asks for it.
pub fn fires_always(ext: &str, table: pg_sys::Oid) -> bool {
    crate::plan_cache::get_one::<bool>(
        &format!(
            "SELECT EXISTS (SELECT FROM {ext}.indexnow_watches w \
                             WHERE w.active AND w.replica_writes \
                               AND (w.tbl::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1) \
                                    OR EXISTS (SELECT FROM {ext}.indexnow_relations r \
                                                WHERE r.watch_id = w.id \
                                                  AND r.tbl::pg_catalog.oid OPERATOR(pg_catalog.=) ANY ($1))))"
        ),
        &[whole_tree(table).into()],
    )
    .unwrap_or_else(|e| error!("indexnow: reading how a table's triggers fire: {e}"))
        == Some(true)
}

/// Takes the capture triggers off those of `tables` that carry them and that the rule no longer
/// asks for (a watch ended, a related table no longer read).
pub fn take_off_unneeded(ext: &str, tables: &[pg_sys::Oid]) {
    for &t in tables {
        // (a table dropped with its triggers, or in the same statement, has none)
        if exists(t) && !needed(ext, t) {
            triggers::drop(&triggers::table_qualified(t));
        } else if exists(t) {
            fire_as_ruled(ext, t);
        }
    }
}

/// [`take_off_unneeded`] for every table that carries the triggers (a table left a watched tree,
/// a watched table below it was dropped: the catalog no longer says which tables were in it). It
/// trusts `indexnow_watches` and `indexnow_relations` as they are now: only after DDL that can
/// change a tree (never in the data and post-data steps of a restore, which may not have loaded
/// them yet: `super::after_ddl`).
pub fn take_off_all_unneeded(ext: &str) {
    take_off_unneeded(ext, &triggers::carried());
}

/// Where the rule cannot be kept now, for `indexnow_status()`: each watched or related table (or
/// table below one that carries the triggers) whose writes the capture triggers do not see — it
/// lacks them (a restore makes them last; dropped by hand), one is disabled, it is a logical
/// replication subscription's table (its apply worker fires no statement trigger), or the
/// database or a role sets `session_replication_role = replica` for its sessions (`ALTER
/// DATABASE ... SET`), whose writes fire only triggers enabled `ALWAYS` (a watch's
/// `replica_writes`) — as `table: why`, joined by `; `. NULL when there is none.
pub fn gaps(ext: &str) -> Option<String> {
    crate::plan_cache::get_one::<String>(
        &format!(
            "WITH watched AS ( \
               SELECT w.tbl::pg_catalog.oid AS t FROM {ext}.indexnow_watches w WHERE w.active \
               UNION SELECT r.tbl::pg_catalog.oid FROM {ext}.indexnow_relations r \
                 JOIN {ext}.indexnow_watches w ON w.id = r.watch_id WHERE w.active), \
             carrying AS ( \
               SELECT g.tgrelid AS t, pg_catalog.bool_or(g.tgenabled = 'D') AS disabled, \
                      pg_catalog.bool_and(g.tgenabled = 'A') AS always \
                 FROM pg_catalog.pg_trigger g WHERE g.tgname LIKE 'indexnow\\_capture\\_%' \
                GROUP BY g.tgrelid), \
             replica AS ( \
               SELECT pg_catalog.string_agg(DISTINCT CASE WHEN s.setrole = 0 AND s.setdatabase = 0 \
                                                          THEN 'every role' \
                                                          WHEN s.setrole = 0 THEN 'the database' \
                                                          ELSE 'role ' || s.setrole::pg_catalog.regrole::pg_catalog.text END, \
                                           ', ') AS who \
                 FROM pg_catalog.pg_db_role_setting s, pg_catalog.unnest(s.setconfig) v \
                WHERE v = 'session_replication_role=replica' \
                  AND s.setdatabase IN (0, (SELECT d.oid FROM pg_catalog.pg_database d \
                                             WHERE d.datname = pg_catalog.current_database()))), \
             gap AS ( \
               SELECT w.t, 'no capture triggers' AS why FROM watched w \
                WHERE NOT EXISTS (SELECT FROM carrying c WHERE c.t = w.t) \
                  AND EXISTS (SELECT FROM pg_catalog.pg_class k WHERE k.oid = w.t) \
               UNION ALL SELECT c.t, 'capture triggers disabled' FROM carrying c WHERE c.disabled \
               UNION ALL SELECT c.t, pg_catalog.format('sessions of %s run with \
                              session_replication_role = replica, whose writes fire no capture \
                              trigger (watch with replica_writes => true, or RESET it)', r.who) \
                 FROM carrying c, replica r \
                WHERE r.who IS NOT NULL AND NOT c.disabled AND NOT c.always \
               UNION ALL SELECT sr.srrelid, pg_catalog.format('written by subscription %s, whose \
                              applied changes fire no statement trigger', s.subname) \
                 FROM pg_catalog.pg_subscription_rel sr \
                 JOIN pg_catalog.pg_subscription s ON s.oid = sr.srsubid \
                WHERE sr.srrelid IN (SELECT t FROM watched UNION SELECT t FROM carrying)) \
             SELECT pg_catalog.string_agg(pg_catalog.format('%s: %s', gap.t::pg_catalog.regclass, \
                                                            gap.why), '; ' \
                                          ORDER BY gap.t::pg_catalog.regclass::pg_catalog.text, gap.why) \
               FROM gap"
        ),
        &[],
    )
    .unwrap_or_else(|e| error!("indexnow: finding what the capture triggers cannot see: {e}"))
}
