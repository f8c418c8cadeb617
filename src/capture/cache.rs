//! What the capture trigger knows about a written table, kept per backend: the watches that
//! capture its rows (its own, and those of the watched tables above and below it in a tree of
//! partitions or inheritance children), the related-table watches that read it, and the keys.
//!
//! Why: every save of a watched table runs the trigger, and reading this from the extension's
//! tables took three statements a save — more than recording the save itself (measured with
//! `pg_stat_statements`: 14 µs of reads against a plain single-row UPDATE of 17 µs), and a save
//! derived in its statement read its watches' statements once more (planned afresh each time:
//! 0.2 ms).
//!
//! An entry is kept right the way PostgreSQL keeps its own relation cache right, by invalidation
//! messages (a relcache callback):
//! - an entry is dropped when its table, or a watched table above or below it, is invalidated: any
//!   `ALTER TABLE`, `CREATE`/`DROP TRIGGER` (so watching and unwatching), `ATTACH`/`DETACH
//!   PARTITION`, a change of its primary key;
//! - the whole cache is dropped when `indexnow_watches` or `indexnow_relations` is written: their
//!   statement trigger `_indexnow_watches_changed()` invalidates the written table, which every
//!   backend hears after that transaction commits (the writing backend at its next command).
//!
//! The trigger takes in pending invalidations at each call (PostgreSQL does so only when a lock
//! is newly taken), so a transaction that already holds its locks sees, from its next statement,
//! a watch another session changed, as it did when the trigger read the watches with each
//! statement's snapshot. An entry read at REPEATABLE READ or SERIALIZABLE (the transaction's
//! snapshot, which may predate a watch) serves that statement and is not kept. Kept plans over a
//! table's transition tables are tagged with the table and forgotten with its entry.

use super::{partitions, related};
use crate::derive::key;
use crate::derive::{self, Watch};
use crate::invalidation;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::rc::Rc;

/// What capture knows about one written table.
pub struct Table {
    /// The extension's schema, quoted.
    pub ext: String,
    /// The watched tables whose rows the written rows are (see [`Capture`]).
    pub captures: Vec<Capture>,
    /// The related-table watches that read the written table, a table above it (a partition
    /// written directly) or below it (written through its parent).
    pub relations: Vec<Relation>,
    /// The attribute numbers the UPDATE gate compares for the related-table watches (the
    /// written table's primary key and every column, but those every tree relation ignores).
    pub related_compared: Vec<i16>,
    /// Begins the text of every kept statement that reads this table's transition tables: the
    /// same text serves tables whose key columns have the same names and other types, and the tag
    /// keeps their plans apart. (A table's own DDL needs nothing here: a transition table carries
    /// its table's OID into the plan, and PostgreSQL replans when that table is altered.)
    pub plan_tag: String,
}

/// A watched table whose rows the written rows are: the written table itself, a watched table
/// above it (a partition or inheritance child written directly: its rows are the parent's too),
/// or a watched table below it (written through its parent: a statement fires the triggers of
/// the table it names only, so the parent's trigger captures for the partition's watches).
pub struct Capture {
    pub watched: pg_sys::Oid,
    /// Its active watches, with their statements (a small save is derived in the writing
    /// statement with them).
    pub watches: Vec<Watch>,
    /// The names of its key columns, in the key's order.
    pub key: Vec<String>,
    /// The key's columns in the written table, when every one is of a type whose recorded form
    /// is built here (else the keys are read by SQL).
    pub key_columns: Option<Vec<KeyColumn>>,
    /// The key's attribute numbers in the written table; `None` when the written table (a
    /// parent) lacks one of them (an inheritance child's own key column), or the watched table
    /// has no primary key now: then every event records the whole watched table.
    pub key_attnums: Option<Vec<i16>>,
    /// For each watch, the attribute numbers the UPDATE gate compares (the key and every column
    /// the watch does not ignore).
    pub compared: Vec<Vec<i16>>,
}

/// A watch that reads the written table as a related table.
pub struct Relation {
    /// The query from the written rows to the watch's rows (`super::related`).
    pub dependents: String,
    pub watch: Watch,
    /// The written table (a parent of the related table) lacks a column the query reads, or the
    /// query cannot be planned now: a write records the watch's whole table.
    pub whole_table: bool,
}

/// A key column of the written table, and how its value is written in a recorded key.
#[derive(Clone, Copy)]
pub struct KeyColumn {
    pub attnum: i16,
    pub kind: KeyKind,
}

/// The key types recorded without SQL, each written as `jsonb_build_array()` writes it.
#[derive(Clone, Copy)]
pub enum KeyKind {
    Int2,
    Int4,
    Int8,
    /// `text` or `varchar`, in a UTF-8 database (a JSON string as it is stored).
    Text,
}

thread_local! {
    static TABLES: RefCell<HashMap<pg_sys::Oid, Rc<Table>>> = RefCell::new(HashMap::new());
    static WATCH_TABLES: RefCell<Vec<pg_sys::Oid>> = const { RefCell::new(Vec::new()) };
    /// Watched (or related) tables above or below a cached table: an invalidation of one drops
    /// the whole cache.
    static IN_TREE: RefCell<Vec<pg_sys::Oid>> = const { RefCell::new(Vec::new()) };
}

/// What capture knows about `written`, whose capture trigger function is `function`.
pub fn table(function: pg_sys::Oid, relation: pg_sys::Relation) -> Rc<Table> {
    // SAFETY: a trigger's relation is open for the duration of the call. Invalidations are
    // otherwise heard only when a lock is newly taken: a transaction that already holds the
    // table's must still see a watch changed since its last statement, as it did when the
    // trigger read the watches with each statement's snapshot.
    let written = unsafe {
        pg_sys::AcceptInvalidationMessages();
        (*relation).rd_id
    };
    if let Some(table) = TABLES.with(|t| t.borrow().get(&written).cloned()) {
        return table;
    }
    invalidation::listen(invalidated);
    let plan_tag = format!("/* indexnow: transition tables of {} */ ", written.to_u32());
    let (table, keep) = invalidation::built(|| Rc::new(build(function, relation, plan_tag)));
    if keep {
        TABLES.with(|t| t.borrow_mut().insert(written, table.clone()));
    }
    table
}

/// The columns whose change re-derives no related watch's rows: none, unless every relation
/// reading the written table is a watch's tree of its own rows (`super::related`; `own`: the
/// written table and the tables above and below it), whose ignored columns are ignored for the rows below
/// a written row too.
fn ignored_by_every_relation(relations: &[Relation], own: &[pg_sys::Oid]) -> Vec<String> {
    let mut each = relations.iter().map(|r| {
        if own.contains(&r.watch.oid) {
            r.watch.ignore.clone()
        } else {
            vec![]
        }
    });
    let first = each.next().unwrap_or_default();
    each.fold(first, |mut all, ignore| {
        all.retain(|c| ignore.contains(c));
        all
    })
}

fn build(function: pg_sys::Oid, relation: pg_sys::Relation, plan_tag: String) -> Table {
    let ext = crate::extension::schema_of_function(function);
    // SAFETY: a trigger's relation is open for the duration of the call.
    let written = unsafe { (*relation).rd_id };
    remember_watch_tables(function);
    let above = partitions::ancestors(written);
    // Each relation reading the written rows, and whether a write records the watch's whole
    // table instead of running it.
    let of_table = |table| related::of_table(&ext, table).into_iter();
    let mut dependents: Vec<(related::Dependents, bool)> =
        of_table(written).map(|d| (d, false)).collect();
    // A partition (or child) written directly: its rows are those of the tables above it, for
    // the watches that read one of them as a related table (a partitioned category table, or a
    // partitioned tree's own watch).
    for &table in &above {
        let before = dependents.len();
        dependents.extend(of_table(table).map(|d| (d, false)));
        if dependents.len() > before {
            depend_on(table);
        }
    }
    // A partitioned (or inherited) table written through: the rows it wrote in a related
    // partition or child below are that table's written rows too. Its dependents query reads the
    // written rows' referenced columns: a parent that lacks one (an inheritance child's own
    // column) records the whole watched table instead.
    // (a table that never had a child has none: no statement planned for it)
    // SAFETY: the trigger's relation is open.
    let below = if unsafe { (*(*relation).rd_rel).relhassubclass } {
        partitions::descendants(written)
    } else {
        vec![]
    };
    for &table in &below {
        let reading: Vec<_> = of_table(table).collect();
        if !reading.is_empty() {
            let whole_table = !related::referenced_columns_in(table, written);
            dependents.extend(reading.into_iter().map(|d| (d, whole_table)));
        }
    }
    let watches_reading = if dependents.is_empty() {
        vec![]
    } else {
        derive::watches_by_id(&ext, dependents.iter().map(|(d, _)| d.watch_id).collect())
    };
    let relations: Vec<Relation> = dependents
        .into_iter()
        .filter_map(|(d, whole_table)| {
            Some(Relation {
                watch: watches_reading.iter().find(|w| w.id == d.watch_id)?.clone(),
                whole_table: whole_table || d.dependents.is_none(),
                dependents: d.dependents.unwrap_or_default(),
            })
        })
        .collect();
    // SAFETY: the relation, its descriptor and its key's attribute set belong to the open relation.
    let (primary_key, attributes) =
        unsafe { (primary_key(relation), attributes((*relation).rd_att)) };
    let computed_from = virtual_sources(written, &attributes);
    let compared = |key: &[i16], ignore: &[String]| {
        let mut columns: Vec<i16> = attributes
            .iter()
            .filter(|a| key.contains(&a.attnum) || !ignore.contains(&a.name))
            .map(|a| a.attnum)
            .collect();
        for (generated, sources) in &computed_from {
            if columns.contains(generated) {
                columns.extend(
                    sources
                        .iter()
                        .filter(|s| !columns.contains(s))
                        .copied()
                        .collect::<Vec<_>>(),
                );
            }
        }
        columns.sort_unstable();
        columns
    };
    let mut own = vec![written];
    own.extend(&above);
    own.extend(&below);
    let related_compared = compared(&primary_key, &ignored_by_every_relation(&relations, &own));
    // Any change to the tree (a table attached or detached anywhere in it) may change what this
    // entry captures: an invalidation of any table of it drops the cache.
    for &table in above.iter().chain(&below) {
        depend_on(table);
    }
    let mut captured = vec![written];
    captured.extend(&above);
    captured.extend(below);
    let captures = captured
        .into_iter()
        .filter_map(|watched| {
            let watches = derive::watches_of(&ext, watched);
            if watches.is_empty() {
                return None;
            }
            let key = if watched == written {
                // SAFETY: the trigger's relation is open.
                unsafe { key::names_of_open(relation) }
            } else {
                depend_on(watched);
                key::names(watched)
            };
            let found: Vec<Option<&Attribute>> = key
                .iter()
                .map(|name| attributes.iter().find(|a| &a.name == name))
                .collect();
            // A table that lost its primary key (a migration between two keys) has its rows
            // known by reading it: its writes record the whole table, as a parent's do.
            let key_attnums: Option<Vec<i16>> = found
                .iter()
                .map(|a| a.map(|a| a.attnum))
                .collect::<Option<Vec<_>>>()
                .filter(|attnums| !attnums.is_empty());
            let key_columns = found
                .iter()
                .map(|a| {
                    let a = (*a)?;
                    Some(KeyColumn {
                        attnum: a.attnum,
                        kind: key_kind(a.type_oid)?,
                    })
                })
                .collect();
            let compared = watches
                .iter()
                .map(|w| compared(key_attnums.as_deref().unwrap_or(&[]), &w.ignore))
                .collect();
            Some(Capture {
                watched,
                watches,
                key,
                key_columns,
                key_attnums,
                compared,
            })
        })
        .collect();
    Table {
        ext,
        captures,
        relations,
        related_compared,
        plan_tag,
    }
}

pub(crate) fn key_kind(type_oid: pg_sys::Oid) -> Option<KeyKind> {
    match type_oid {
        pg_sys::INT2OID => Some(KeyKind::Int2),
        pg_sys::INT4OID => Some(KeyKind::Int4),
        pg_sys::INT8OID => Some(KeyKind::Int8),
        // SAFETY: reads the database's encoding.
        pg_sys::TEXTOID | pg_sys::VARCHAROID
            if unsafe { pg_sys::GetDatabaseEncoding() } == pg_sys::pg_enc::PG_UTF8 as i32 =>
        {
            Some(KeyKind::Text)
        }
        _ => None,
    }
}

fn depend_on(table: pg_sys::Oid) {
    IN_TREE.with(|a| {
        let mut a = a.borrow_mut();
        if !a.contains(&table) {
            a.push(table);
        }
    });
}

/// The oids of `indexnow_watches` and `indexnow_relations`, whose invalidation drops every entry:
/// in the schema of `function`, the capture trigger's (found in the catalog's caches, without a
/// statement: the first save of every session does this).
fn remember_watch_tables(function: pg_sys::Oid) {
    if WATCH_TABLES.with(|w| !w.borrow().is_empty()) {
        return;
    }
    // SAFETY: syscache lookups of the running function's schema and of two names in it.
    let oids: Vec<pg_sys::Oid> = unsafe {
        let schema = pg_sys::get_func_namespace(function);
        [c"indexnow_watches", c"indexnow_relations"]
            .iter()
            .map(|t| pg_sys::get_relname_relid(t.as_ptr(), schema))
            .filter(|oid| *oid != pg_sys::InvalidOid)
            .collect()
    };
    WATCH_TABLES.with(|w| *w.borrow_mut() = oids);
}

fn invalidated(relid: pg_sys::Oid) {
    let everything = relid == pg_sys::InvalidOid
        || WATCH_TABLES.with(|w| w.borrow().contains(&relid))
        || IN_TREE.with(|a| a.borrow().contains(&relid));
    // (no borrow of these spans a call into PostgreSQL, so none is held here)
    TABLES.with(|t| {
        if everything {
            t.borrow_mut().clear();
        } else {
            t.borrow_mut().remove(&relid);
        }
    });
    if everything {
        IN_TREE.with(|a| a.borrow_mut().clear());
        WATCH_TABLES.with(|w| w.borrow_mut().clear());
    }
}

/// For the statement triggers on `indexnow_watches` and `indexnow_relations`: every backend drops
/// what it knows about watched tables (at this transaction's commit; this backend at its next
/// command).
#[pg_trigger(sql = r#"
CREATE FUNCTION "_indexnow_watches_changed"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'indexnow_watches_changed_wrapper';
"#)]
fn indexnow_watches_changed<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    // SAFETY: a trigger's relation is open for the duration of the call.
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid((*trigger.trigger_data().tg_relation).rd_id) };
    Ok(None)
}

// Every write to the watch tables, whoever makes it (indexnow_watch(), the derivation, an upgrade
// script, a user), is heard by every backend's cache.
extension_sql!(
    r#"
CREATE TRIGGER indexnow_watches_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON indexnow_watches
    FOR EACH STATEMENT EXECUTE FUNCTION _indexnow_watches_changed();
CREATE TRIGGER indexnow_relations_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON indexnow_relations
    FOR EACH STATEMENT EXECUTE FUNCTION _indexnow_watches_changed();
"#,
    name = "watches_changed_triggers",
    requires = ["schema", indexnow_watches_changed]
);

struct Attribute {
    attnum: i16,
    name: String,
    type_oid: pg_sys::Oid,
    /// A virtual generated column (PostgreSQL 18): computed when read, never stored, so the
    /// UPDATE gate compares the columns it is computed from instead.
    virtual_generated: bool,
}

/// The relation's primary key (attribute numbers).
unsafe fn primary_key(relation: pg_sys::Relation) -> Vec<i16> {
    let set = pg_sys::RelationGetIndexAttrBitmap(
        relation,
        pg_sys::IndexAttrBitmapKind::INDEX_ATTR_BITMAP_PRIMARY_KEY,
    );
    let mut key = vec![];
    let mut member = -1;
    loop {
        member = pg_sys::bms_next_member(set, member);
        if member < 0 {
            return key;
        }
        // members are offset so that system columns fit (see RelationGetIndexAttrBitmap)
        key.push((member + pg_sys::FirstLowInvalidHeapAttributeNumber) as i16);
    }
}

/// The relation's columns that are not dropped.
unsafe fn attributes(desc: pg_sys::TupleDesc) -> Vec<Attribute> {
    let natts = (*desc).natts as usize;
    (0..natts)
        .map(|i| crate::compat::attribute(desc, i))
        .filter(|a| !a.attisdropped)
        .map(|a| Attribute {
            attnum: a.attnum,
            name: CStr::from_ptr(a.attname.data.as_ptr())
                .to_string_lossy()
                .into_owned(),
            type_oid: a.atttypid,
            virtual_generated: a.attgenerated as u8 == b'v',
        })
        .collect()
}

/// For each virtual generated column of `table`, the columns its expression reads.
fn virtual_sources(table: pg_sys::Oid, attributes: &[Attribute]) -> Vec<(i16, Vec<i16>)> {
    if !attributes.iter().any(|a| a.virtual_generated) {
        return vec![];
    }
    Spi::connect(|client| {
        client
            .select(
                "SELECT ad.adnum, pg_catalog.array_agg(d.refobjsubid::int2 ORDER BY d.refobjsubid) \
                   FROM pg_catalog.pg_attrdef ad \
                   JOIN pg_catalog.pg_depend d \
                     ON d.classid = 'pg_catalog.pg_attrdef'::pg_catalog.regclass AND d.objid = ad.oid \
                    AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass \
                    AND d.refobjid = ad.adrelid AND d.refobjsubid > 0 \
                  WHERE ad.adrelid = $1 GROUP BY ad.adnum",
                None,
                &[table.into()],
            )?
            .map(|r| Ok((r.get::<i16>(1)?.unwrap_or(0), r.get(2)?.unwrap_or_default())))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading a table's generated columns: {e}"))
    .into_iter()
    .filter(|(attnum, _)| {
        attributes
            .iter()
            .any(|a| a.attnum == *attnum && a.virtual_generated)
    })
    .collect()
}
