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

/// Puts the capture triggers on every table of the trees of `roots`.
pub fn put_on(ext: &str, roots: &[pg_sys::Oid], existing: Existing) {
    for t in trees(roots) {
        if existing == Existing::Remake || !triggers::on(t) {
            triggers::install(ext, &triggers::table_qualified(t));
        }
    }
}

/// Takes the capture triggers off those of `tables` that carry them and that the rule no longer
/// asks for (a watch ended, a related table no longer read).
pub fn take_off_unneeded(ext: &str, tables: &[pg_sys::Oid]) {
    for &t in tables {
        // (a table dropped with its triggers, or in the same statement, has none)
        if exists(t) && !needed(ext, t) {
            triggers::drop(&triggers::table_qualified(t));
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
