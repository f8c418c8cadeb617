//! The end of every `CREATE TABLE` and `ALTER TABLE` (the event trigger in sql/capture.sql): a
//! table that joined a watched or related tree gets the capture triggers, one that left loses
//! them, and an `ALTER TABLE` in a watched tree, or of a table a watch reads, makes the watches
//! again for the new definition and derives the watched table whole when rows may have changed.

use super::partitions::{in_role, put_back_taken_off, whole_tree, Role};
use super::placement::{self, Existing};
use super::{before_ddl, triggers, watch};
use pgrx::prelude::*;

/// For the event trigger (sql/capture.sql): `table` was created or altered by `tag`. Puts the
/// capture triggers on every table of each watched tree it belongs to, takes them off tables that
/// left one, and after an `ALTER TABLE` makes each such watched table's watches again for its new
/// definition (`watch::follow_alter_table`) and records a whole-table change set for it
/// (one per transaction, `crate::derive::change_sets::record_whole_table`); so too for the watches that
/// read the altered table as a related table.
#[pg_extern(name = "_indexnow_table_changed", volatile, parallel_unsafe)]
fn indexnow_table_changed(table: pg_sys::Oid, tag: &str) {
    before_ddl::following(|| table_changed(table, tag))
}

fn table_changed(table: pg_sys::Oid, tag: &str) {
    let ext = crate::extension::schema();
    put_back_taken_off(&ext);
    // An ALTER that leaves the rows, the tree and every constraint a watch is made from as they
    // were (a constraint or an index added, a trigger enabled, the owner) has nothing to follow,
    // and its end does nothing: it makes no trigger, takes no lock on any table and derives
    // nothing. That is every ALTER of a restore's data and post-data sections, which run in
    // parallel sessions (`pg_restore -j`): following them made the capture triggers the dump
    // makes itself later ("trigger already exists") and locked tables other jobs were loading
    // (deadlocks). See docs/operations.md, "Back up and restore".
    if tag == "ALTER TABLE" && before_ddl::leaves_watches() {
        return;
    }
    let tree = whole_tree(table);
    // Every tree around a watched or related table the table is in gets the triggers where it
    // lacks them: a write straight to a partition, or through a parent, fires only the triggers
    // of the table it names. Only at a CREATE TABLE or an ALTER that may change a tree (a
    // partition attached, an inheritance added): a restore runs those in its pre-data section
    // alone, before any capture trigger of its dump is made and before `indexnow_watches` has a
    // row, so the triggers are made there by the dump only. Not a tree whose watched or related
    // table has none: triggers taken off by hand stay off until `indexnow_watch()`.
    let roots: Vec<pg_sys::Oid> = in_role(&ext, &tree, Role::Either)
        .into_iter()
        .filter(|t| triggers::on(*t))
        .collect();
    placement::put_on(&ext, &roots, Existing::Keep);
    for w in &in_role(&ext, &tree, Role::Watched) {
        if tag == "ALTER TABLE" {
            let same =
                watch::follow_alter_table(&ext, *w, before_ddl::only_adds()) && key_as_before(*w);
            if same {
                fingerprints_follow_columns_added(&ext, *w);
            }
            if needs_deriving_after_alter(*w, same) {
                crate::derive::change_sets::record_whole_table(&ext, *w, None);
                crate::wake::worker_at_commit();
            }
        }
    }
    if tag == "ALTER TABLE" {
        follow_related_table_altered(&ext, table);
    }
    // Tables that left a watched tree (detached, no longer inheriting) lose the triggers. Not
    // after an ALTER TABLE that changes no row (a key, a foreign key, an index, a default, the
    // owner: `before_ddl::changes_no_rows`): it takes no table out of a tree nor puts a foreign
    // table below one, so it leaves no table without a use for its triggers. Those are the only
    // ALTERs a parallel `pg_restore` runs once it loads data, while another job may not have
    // loaded `indexnow_watches` or `indexnow_relations` yet (or not committed the load): the
    // sweep then found the dump's triggers, already made on a watched table, used by no watch,
    // and dropped them unsaid (nothing makes a lone watched table's triggers again).
    if !(tag == "ALTER TABLE" && before_ddl::changes_no_rows()) {
        placement::take_off_all_unneeded(&ext);
    }
}

/// Whether the `ALTER TABLE` ending now left the primary key of `watched` as it was, or gave it one
/// where it had none: the key is the one input of a watch's statements
/// (`crate::derive::generated`) that an ALTER changing no row can change. A key swapped for
/// another, or dropped, changes how every row is known; a key added to a table without one
/// changes nothing that is owed: a restore adds it to the rows the dump had, and writes made
/// while a table had none recorded the whole table themselves.
fn key_as_before(watched: pg_sys::Oid) -> bool {
    before_ddl::key_before(watched)
        .is_none_or(|key| key.is_empty() || key == crate::derive::key::columns(watched))
}

/// After an `ALTER TABLE` that only adds columns (`before_ddl::columns_added`) to the watched
/// table `watched`, its key as it was: each of its watches takes the columns added as counted in
/// the fingerprints of the rows unchanged since they were derived, so that a column added with a
/// default (as Django adds one) announces no page. The table is still derived whole after it (a
/// row whose values changed unseen, in a `DISABLE TRIGGER` window, is caught up then, as after
/// any ALTER that may change rows). A watch whose statement fails is said in a WARNING: its pages
/// are then announced as changed, as before.
fn fingerprints_follow_columns_added(ext: &str, watched: pg_sys::Oid) {
    let added = before_ddl::columns_added();
    let key = crate::derive::key::columns(watched);
    if added.is_empty() || key.is_empty() || before_ddl::key_before(watched) != Some(key) {
        return;
    }
    for w in crate::derive::watches_of(ext, watched) {
        let followed = crate::derive::take_fingerprints_as_known(ext, w.id, |definition| {
            let mut before = definition.counted();
            before.columns.retain(|c| !added.contains(c));
            before
        });
        if let Err(e) = followed {
            warning!(
                "indexnow: the watch of {} for {} could not take the columns added as known \
                 ({e}): its pages are announced as changed",
                w.table,
                w.pattern
            );
        }
    }
}

/// After an `ALTER TABLE` that only adds columns to `table`, a body table of the watches `ids`
/// (`crate::derive::generated::BodyTable`: its columns count in their fingerprints): as
/// [`fingerprints_follow_columns_added`] does for the watched table, the pages unchanged since
/// they were derived take the columns added as counted, so that a field Django adds to a page
/// model announces no page.
fn body_fingerprints_follow_columns_added(ext: &str, table: pg_sys::Oid, ids: &[i32]) {
    let added = before_ddl::columns_added();
    let body = triggers::table_qualified(table);
    if added.is_empty() {
        return;
    }
    for id in ids {
        let followed = crate::derive::take_fingerprints_as_known(ext, *id, |definition| {
            let mut before = definition.counted();
            for b in before.bodies.iter_mut().filter(|b| b.table == body) {
                b.public.retain(|c| !added.contains(c));
            }
            before
        });
        if let Err(e) = followed {
            warning!(
                "indexnow: watch {id} could not take the columns added to {body} as known ({e}): \
                 its pages are announced as changed"
            );
        }
    }
}

/// Whether the watched table `watched` is derived whole after an `ALTER TABLE` in its tree or of
/// a table it reads (`same`: its watches were made again, and its key is as it was). Not when the ALTER changed no row
/// and no watch (`super::before_ddl::changes_no_rows`), nor while the table has no capture
/// triggers: a restore makes them last, after the keys and partitions it attaches, while (with
/// `pg_restore -j`) other jobs still load the table's rows or what the watch derived from them
/// (`indexnow_sources`), and a derivation then announced every page again, or removed them.
fn needs_deriving_after_alter(watched: pg_sys::Oid, same: bool) -> bool {
    triggers::on(watched) && !(same && before_ddl::changes_no_rows())
}

/// After an `ALTER TABLE` of `table`, the watches of other tables that read it as a related table
/// (a tree's own watch is followed as the watched table's): made again
/// (their dependents queries name the tables of the path: a rename must not break them), and a
/// whole-table change set recorded for each (an ALTER can rewrite the values their URLs read,
/// `ALTER COLUMN ... TYPE ... USING`, without firing a trigger).
fn follow_related_table_altered(ext: &str, table: pg_sys::Oid) {
    let readers: Vec<(pg_sys::Oid, Vec<i32>)> = Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT w.tbl::pg_catalog.oid, pg_catalog.array_agg(w.id ORDER BY w.id) \
                       FROM {ext}.indexnow_watches w \
                      WHERE w.active AND w.tbl <> $1::pg_catalog.oid::pg_catalog.regclass \
                        AND EXISTS (SELECT FROM {ext}.indexnow_relations r \
                                     WHERE r.watch_id = w.id AND r.tbl = $1::pg_catalog.oid::pg_catalog.regclass) \
                      GROUP BY 1 ORDER BY 1"
                ),
                None,
                &[table.into()],
            )?
            .map(|r| Ok((r.get::<pg_sys::Oid>(1)?.unwrap(), r.get(2)?.unwrap_or_default())))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: finding the watches that read an altered table: {e}"));
    for (watched, ids) in readers {
        let same = watch::follow_alter_table(ext, watched, before_ddl::only_adds())
            && key_as_before(watched);
        if same {
            body_fingerprints_follow_columns_added(ext, table, &ids);
        }
        if needs_deriving_after_alter(watched, same) {
            crate::derive::change_sets::record_whole_table(ext, watched, Some(ids));
            crate::wake::worker_at_commit();
        }
    }
}
