//! Partitions and inheritance children of a watched or related table, and the parents of a watched
//! one.
//!
//! A statement that names a partitioned (or inherited) table fires that table's statement
//! triggers, with the rows of every partition it touched in the transition tables; a statement
//! that names a partition directly fires only the partition's. So the capture triggers are put on
//! the watched table and on every table below it, and a trigger on a table below derives (or
//! records) its rows for the watched table above it: the watch reads the watched table, which
//! includes them. `TRUNCATE ONLY parent` leaves the children's rows, and the derivation of the whole
//! table sees them still there. A watched partition or child gets the triggers on the tables above
//! it too, whose triggers capture for its watches the rows written through them
//! (`super::cache::Capture`). So too around a related table: a partition's written rows find the
//! watched rows that reference them with the relation of the related table above it, and the rows
//! written through a table above a related partition with the relation of the partition.
//!
//! A table that joins or leaves the tree later (`CREATE TABLE ... PARTITION OF`, `ATTACH` and
//! `DETACH PARTITION`, `ALTER TABLE ... [NO] INHERIT`) is seen by an event trigger at the end of
//! every `CREATE TABLE` and `ALTER TABLE` (sql/capture.sql): a table that joined gets the triggers,
//! one that left loses them, and an `ALTER TABLE` anywhere in a watched tree re-derives the whole
//! watched table (rows that came with an attached partition are announced, rows that left with a
//! detached one are removed).

use super::triggers;
use pgrx::prelude::*;
use std::cell::RefCell;

thread_local! {
    /// The tables whose capture triggers [`before_joining`] took off, with the transaction that
    /// took them off: the end of its `ALTER TABLE` puts them back.
    static TAKEN_OFF: RefCell<(pg_sys::TransactionId, Vec<pg_sys::Oid>)> =
        const { RefCell::new((pg_sys::InvalidTransactionId, Vec::new())) };
}

/// Before `table` joins a tree (`ATTACH PARTITION`, `INHERIT`): its capture triggers are taken
/// off, to be put back at the end of the `ALTER TABLE` (`super::after_ddl`). Minor
/// releases without PostgreSQL's fix refuse a table joining a tree while any trigger of it has
/// transition tables. Nothing is missed in between: the ALTER holds the table's lock to commit.
pub fn before_joining(table: pg_sys::Oid) {
    if !triggers::on(table) {
        return;
    }
    triggers::drop(&triggers::table_qualified(table));
    // (the drop gave the transaction its id)
    let xact = unsafe { pg_sys::GetTopTransactionIdIfAny() };
    TAKEN_OFF.with_borrow_mut(|(taken_in, tables)| {
        if *taken_in != xact {
            *taken_in = xact;
            tables.clear();
        }
        tables.push(table);
    });
}

/// Before a table stops inheriting from `parent` (`ALTER TABLE ... NO INHERIT`): its rows leave
/// the tables at and above `parent`. A whole-table change set is recorded for each of them that
/// is watched, and for the watches that read one as a related table: derived after the commit,
/// the rows that left are removed (or hidden) from those watches. The end of the ALTER names the
/// child, from which the parent is no longer found.
pub fn before_leaving(ext: &str, parent: pg_sys::Oid) {
    let mut tree = vec![parent];
    tree.extend(ancestors(parent));
    let sql = format!(
        "SELECT w.tbl::pg_catalog.oid, \
                CASE WHEN w.tbl::pg_catalog.oid = ANY ($1) THEN NULL \
                     ELSE pg_catalog.array_agg(w.id ORDER BY w.id) END \
           FROM {ext}.indexnow_watches w \
          WHERE w.active AND (w.tbl::pg_catalog.oid = ANY ($1) \
                OR EXISTS (SELECT FROM {ext}.indexnow_relations r \
                            WHERE r.watch_id = w.id AND r.tbl::pg_catalog.oid = ANY ($1))) \
          GROUP BY w.tbl ORDER BY 1"
    );
    let affected: Vec<(pg_sys::Oid, Option<Vec<i32>>)> = Spi::connect(|client| {
        client
            .select(&sql, None, &[tree.into()])?
            .map(|r| Ok((r.get::<pg_sys::Oid>(1)?.unwrap(), r.get(2)?)))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: finding the watches of a table's parent: {e}"));
    for (watched, watches) in affected {
        crate::derive::change_sets::record_whole_table(ext, watched, watches);
        crate::wake::worker_at_commit();
    }
}

/// Whether `table` exists (still, or yet).
pub(super) fn exists(table: pg_sys::Oid) -> bool {
    crate::plan_cache::get_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_class WHERE oid = $1)",
        &[table.into()],
    )
    .unwrap_or_else(|e| error!("indexnow: looking for a table: {e}"))
        == Some(true)
}

/// Puts back the capture triggers [`before_joining`] took off in this transaction, on the tables
/// still there and without them.
pub(super) fn put_back_taken_off(ext: &str) {
    let xact = unsafe { pg_sys::GetTopTransactionIdIfAny() };
    let tables = TAKEN_OFF.with_borrow_mut(|(taken_in, tables)| {
        let mine = *taken_in == xact && xact != pg_sys::InvalidTransactionId;
        let taken = std::mem::take(tables);
        if mine {
            taken
        } else {
            Vec::new()
        }
    });
    for table in tables {
        if exists(table) && !triggers::on(table) {
            triggers::install(ext, &triggers::table_qualified(table));
        }
    }
}

/// What an active watch does with a table: watches it, or either watches it or reads it as a
/// related table.
#[derive(Clone, Copy)]
pub(super) enum Role {
    Watched,
    Either,
}

/// Those of `tables` that an active watch has in `role`, in their order.
pub(super) fn in_role(ext: &str, tables: &[pg_sys::Oid], role: Role) -> Vec<pg_sys::Oid> {
    let (watched, related) = match role {
        Role::Watched => (true, false),
        Role::Either => (true, true),
    };
    let sql = format!(
        "SELECT t.oid FROM pg_catalog.unnest($1::pg_catalog.oid[]) WITH ORDINALITY t(oid, n) \
          WHERE ($2 AND EXISTS (SELECT FROM {ext}.indexnow_watches w \
                                 WHERE w.tbl = t.oid AND w.active)) \
             OR ($3 AND EXISTS (SELECT FROM {ext}.indexnow_relations r \
                                  JOIN {ext}.indexnow_watches w ON w.id = r.watch_id \
                                 WHERE r.tbl = t.oid AND w.active)) \
          ORDER BY t.n"
    );
    Spi::connect(|client| {
        crate::plan_cache::read(
            client,
            &sql,
            &[tables.to_vec().into(), watched.into(), related.into()],
        )?
        .map(|r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap()))
        .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: looking for watched and related tables: {e}"))
}

/// `table` or the first table above it that an active watch watches or reads as a related
/// table, as `schema.name`.
pub fn watched_or_related_at_or_above(ext: &str, table: pg_sys::Oid) -> Option<String> {
    let mut tree = vec![table];
    tree.extend(ancestors(table));
    in_role(ext, &tree, Role::Either)
        .first()
        .map(|t| triggers::table_qualified(*t))
}

/// The tables above `table` with an active watch, nearest first.
pub fn watched_ancestors(ext: &str, table: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    in_role(ext, &ancestors(table), Role::Watched)
}

/// Whether `table` is a partition or an inheritance child: one look in `pg_inherits`'s index, no
/// statement planned. Most watched tables have no parent, and the first save of every session
/// asks (`super::cache`): planning the query of [`ancestors`] took a millisecond of it.
pub fn has_parent(table: pg_sys::Oid) -> bool {
    // The catalog's fixed OIDs (catalog/pg_inherits.h, the same in every release), which pgrx
    // does not export: pg_inherits, its index on (inhrelid, inhseqno), and inhrelid's number.
    const INHERITS: u32 = 2611;
    const INHERITS_RELID_SEQNO_INDEX: u32 = 2680;
    const INHRELID: i16 = 1;
    // SAFETY: a scan of a catalog index under AccessShareLock, closed before returning; the
    // key lives on this stack frame for the scan's duration.
    unsafe {
        let inherits = pg_sys::table_open(
            pg_sys::Oid::from(INHERITS),
            pg_sys::AccessShareLock as pg_sys::LOCKMODE,
        );
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(
            &mut key,
            INHRELID,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::Oid::from(pg_sys::F_OIDEQ),
            pg_sys::Datum::from(table),
        );
        let scan = pg_sys::systable_beginscan(
            inherits,
            pg_sys::Oid::from(INHERITS_RELID_SEQNO_INDEX),
            true,
            std::ptr::null_mut(),
            1,
            &mut key,
        );
        let found = !pg_sys::systable_getnext(scan).is_null();
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(inherits, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        found
    }
}

/// The tables above `table`, nearest first (foreign tables left out: they can have no triggers
/// with transition tables; a write through their parent is still seen there).
pub fn ancestors(table: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    if !has_parent(table) {
        return vec![];
    }
    Spi::connect(|client| {
        client
            .select(
                "WITH RECURSIVE up(oid, depth) AS ( \
                   SELECT i.inhparent, 1 FROM pg_catalog.pg_inherits i WHERE i.inhrelid = $1 \
                   UNION ALL \
                   SELECT i.inhparent, up.depth + 1 FROM pg_catalog.pg_inherits i \
                     JOIN up ON i.inhrelid = up.oid) \
                 SELECT up.oid FROM up JOIN pg_catalog.pg_class c ON c.oid = up.oid \
                  WHERE c.relkind IN ('r', 'p') GROUP BY up.oid ORDER BY pg_catalog.min(up.depth), up.oid",
                None,
                &[table.into()],
            )?
            .map(|r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap()))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: listing the tables above a partition: {e}"))
}

/// `table` and every table above and below it: the tables whose statements write a watched
/// table's rows (a statement fires the triggers of the table it names only).
pub fn tree_of(table: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    // (not a table above with a foreign table below it: PostgreSQL would refuse every UPDATE and
    // DELETE through it; writes through it are then not seen for the watched table below)
    // (top first, the order PostgreSQL locks a tree in)
    let mut all: Vec<pg_sys::Oid> = ancestors(table)
        .into_iter()
        .rev()
        .filter(|t| foreign_below(*t).is_none())
        .collect();
    all.extend(with_descendants(table));
    all
}

/// A foreign table below `table`, as `schema.name`, if there is one. A table whose statement
/// triggers collect transition tables refuses UPDATE and DELETE through it when a foreign table
/// is below it ("cannot collect transition tuples from child foreign tables").
pub fn foreign_below(table: pg_sys::Oid) -> Option<String> {
    first_in_tree(table, Below::Only, "c.relkind = 'f'", "foreign tables")
}

/// An unlogged table at or below `table`, as `schema.name`, if there is one: a crash empties it
/// without firing a trigger, so the pages of its rows would stay announced (watched and related
/// trees refuse them).
pub fn unlogged_at_or_below(table: pg_sys::Oid) -> Option<String> {
    first_in_tree(
        table,
        Below::AndItself,
        "c.relpersistence = 'u'",
        "unlogged tables",
    )
}

/// Which tables of a tree [`first_in_tree`] looks at.
enum Below {
    Only,
    AndItself,
}

/// The first (by name) table below `table` (and `table` itself, with [`Below::AndItself`]) that
/// `condition` (over its `pg_class` row `c`) holds for, as `schema.name`; `what` names what is
/// looked for, in an error.
fn first_in_tree(table: pg_sys::Oid, below: Below, condition: &str, what: &str) -> Option<String> {
    let start = match below {
        Below::Only => "SELECT i.inhrelid FROM pg_catalog.pg_inherits i WHERE i.inhparent = $1",
        Below::AndItself => "SELECT $1",
    };
    crate::plan_cache::get_one::<String>(
        &format!(
            "WITH RECURSIVE down(oid) AS ( \
               {start} \
               UNION \
               SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN down ON i.inhparent = down.oid) \
             SELECT pg_catalog.format('%s.%s', n.nspname, c.relname) FROM down \
               JOIN pg_catalog.pg_class c ON c.oid = down.oid \
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
              WHERE {condition} ORDER BY 1 LIMIT 1"
        ),
        &[table.into()],
    )
    .unwrap_or_else(|e| error!("indexnow: looking for {what} in a tree: {e}"))
}

/// Why an unlogged table is refused in a watched or related tree: `table` in the tree of `tree`.
pub struct UnloggedRefused<'a>(pub &'a str, pub &'a str);

impl std::fmt::Display for UnloggedRefused<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let UnloggedRefused(table, tree) = self;
        let which = if table == tree {
            format!("{table} is an unlogged table")
        } else {
            format!("{table}, in the tree of {tree}, is an unlogged table")
        };
        write!(
            f,
            "{which}: a crash empties it without firing a trigger, and the pages of its rows \
             would stay announced; make it logged (ALTER TABLE ... SET LOGGED)"
        )
    }
}

/// `table` and every table below it.
pub fn with_descendants(table: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    let mut all = vec![table];
    all.extend(descendants(table));
    all
}

/// Every table below `table` (foreign tables left out, as above).
pub fn descendants(table: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    Spi::connect(|client| {
        client
            .select(
                "WITH RECURSIVE down(oid) AS ( \
                   SELECT i.inhrelid FROM pg_catalog.pg_inherits i WHERE i.inhparent = $1 \
                   UNION \
                   SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN down ON i.inhparent = down.oid) \
                 SELECT down.oid FROM down JOIN pg_catalog.pg_class c ON c.oid = down.oid \
                  WHERE c.relkind IN ('r', 'p')",
                None,
                &[table.into()],
            )?
            .map(|r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap()))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: listing the partitions of a table: {e}"))
}

/// `table`, then the tables above it (nearest first), then those below it.
pub(super) fn whole_tree(table: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    let mut all = vec![table];
    all.extend(ancestors(table));
    all.extend(descendants(table));
    all
}
