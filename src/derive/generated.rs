//! A watch's statements, generated where they are used from what `indexnow_watch()` stored (its
//! arguments, as checked) and from its table as the catalog has it now; kept per backend until an
//! invalidation says either changed.
//!
//! Nothing generated is stored, so nothing stored can be stale: an `ALTER TABLE` (a column added,
//! a table renamed), a restore into another database, or a new release's library gets statements
//! for the table and the code as they are. What a watch is made of is in one place, [`definition`];
//! `indexnow_watch()` and a watch made again after DDL check the arguments and store them, and
//! come here for the statements like every other user.
//!
//! An entry is dropped as `crate::capture`'s cache of written tables is, by relation-cache
//! invalidations: of the watched table (any `ALTER TABLE`, a key added or dropped), and of
//! `indexnow_watches` or `indexnow_relations`, whose statement trigger invalidates them on every
//! write, heard by every backend at that transaction's commit (by this one at its next command,
//! and at a rollback). An entry read from a snapshot older than the latest committed state
//! (REPEATABLE READ, SERIALIZABLE) serves its caller and is not kept.

use super::key;
use super::statements::{Body, PublishAt, Statements, UrlSource, WatchDefinition};
use super::template;
use crate::invalidation;
use crate::plan_cache;
use crate::queue::Reason;
use crate::quote::quote_ident;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

thread_local! {
    static GENERATED: RefCell<HashMap<i32, Rc<Statements>>> = RefCell::new(HashMap::new());
    /// The tables whose invalidation drops every entry: the watched tables of the entries, and
    /// `indexnow_watches` and `indexnow_relations`.
    static DEPENDS_ON: RefCell<Vec<pg_sys::Oid>> = const { RefCell::new(Vec::new()) };
}

/// What `indexnow_watch()` stored of a watch, and its table as the catalog has it now.
pub struct Stored {
    pub watch_id: i32,
    /// The table, schema-qualified and quoted (`None`: it is gone).
    pub table: Option<String>,
    pub table_oid: pg_sys::Oid,
    /// Its columns, in order.
    pub columns: Vec<String>,
    /// Its primary key: (column, SQL type).
    pub key: Vec<(String, String)>,
    pub url: Option<String>,
    pub url_sql: Option<String>,
    pub visible: Option<String>,
    pub ignore: Vec<String>,
    pub publish_at: Option<String>,
    pub expire_at: Option<String>,
    pub hidden_reason: String,
    pub time_zone: String,
    /// The related tables keyed by the watched row (see [`BodyTable`]).
    pub bodies: Vec<BodyTable>,
}

/// A related table whose primary key is a foreign key to the watched table: each watched row has
/// at most one row there, which is part of it (a page's body in a per-model table keyed by the
/// page, as Django's multi-table inheritance makes it: `blog_blogpage.page_ptr_id`). Its columns
/// count in the watched row's fingerprint, so that an edit of the body alone is a change.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct BodyTable {
    pub oid: u32,
    /// Schema-qualified and quoted.
    pub table: String,
    /// The key's columns in the body table, and the watched table's columns they reference.
    pub child: Vec<String>,
    pub parent: Vec<String>,
    /// Its other columns.
    pub columns: Vec<String>,
}

/// The statements of watch `watch_id`, or why it has none (its table is gone, it has no primary
/// key now, an argument no longer reads as one): a derivation then finds the watch broken.
pub fn of(ext: &str, watch_id: i32) -> Result<Rc<Statements>, String> {
    // SAFETY: takes in this backend's pending invalidations (a watch changed by another session
    // since this transaction last took a lock is seen now).
    unsafe { pg_sys::AcceptInvalidationMessages() };
    if let Some(found) = GENERATED.with(|g| g.borrow().get(&watch_id).cloned()) {
        return Ok(found);
    }
    invalidation::listen(invalidated);
    let (statements, keep) = invalidation::built(|| -> Result<_, String> {
        let stored = stored(ext, watch_id)?;
        Ok(Rc::new(definition(ext, &stored)?.statements()))
    });
    let statements = statements?;
    if keep {
        GENERATED.with(|g| g.borrow_mut().insert(watch_id, statements.clone()));
    }
    Ok(statements)
}

/// The statements of watch `watch_id` generated afresh, for `indexnow_watch()` and a watch made
/// again: they have just stored its arguments, and must not be served an entry of before.
pub fn again(ext: &str, watch_id: i32) -> Result<Rc<Statements>, String> {
    GENERATED.with(|g| g.borrow_mut().remove(&watch_id));
    of(ext, watch_id)
}

/// The definition of watch `watch_id`, from what is stored and the catalog now (never cached: for
/// the few callers that need more than its statements).
pub fn definition_of(ext: &str, watch_id: i32) -> Result<WatchDefinition, String> {
    definition(ext, &stored(ext, watch_id)?)
}

/// What watch `watch_id`'s statements are generated from. The rule that turns it into a
/// definition is [`definition`].
fn stored(ext: &str, watch_id: i32) -> Result<Stored, String> {
    let sql = format!(
        "SELECT w.tbl::pg_catalog.oid, pg_catalog.format('%I.%I', n.nspname, c.relname), \
                ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a \
                       WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid \
                         AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
                       ORDER BY a.attnum), \
                w.url, w.url_sql, w.visible, w.ignore, w.publish_at, w.hidden_reason, \
                w.time_zone, \
                '{ext}.indexnow_watches'::pg_catalog.regclass::pg_catalog.oid, \
                '{ext}.indexnow_relations'::pg_catalog.regclass::pg_catalog.oid, w.expire_at \
           FROM {ext}.indexnow_watches w \
           LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) w.tbl \
           LEFT JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
          WHERE w.id OPERATOR(pg_catalog.=) $1"
    );
    let found = Spi::connect(|client| {
        let rows = plan_cache::read(client, &sql, &[watch_id.into()])?;
        if rows.is_empty() {
            return Ok::<_, pgrx::spi::Error>(None);
        }
        let r = rows.first();
        let table_oid: pg_sys::Oid = r.get(1)?.unwrap_or(pg_sys::InvalidOid);
        let depends_on = [table_oid, r.get(11)?.unwrap(), r.get(12)?.unwrap()];
        Ok(Some((
            Stored {
                watch_id,
                table: r.get(2)?,
                table_oid,
                columns: r.get(3)?.unwrap_or_default(),
                key: vec![],
                url: r.get(4)?,
                url_sql: r.get(5)?,
                visible: r.get(6)?,
                ignore: r.get(7)?.unwrap_or_default(),
                publish_at: r.get(8)?,
                expire_at: r.get(13)?,
                hidden_reason: r.get(9)?.unwrap_or_default(),
                time_zone: r.get(10)?.unwrap_or_default(),
                bodies: vec![],
            },
            depends_on,
        )))
    })
    .unwrap_or_else(|e| error!("indexnow: reading watch {watch_id}: {e}"));
    let Some((mut stored, depends_on)) = found else {
        return Err(format!("there is no watch {watch_id}"));
    };
    DEPENDS_ON.with(|d| {
        let mut d = d.borrow_mut();
        for oid in depends_on {
            if !d.contains(&oid) {
                d.push(oid);
            }
        }
    });
    if stored.table.is_some() {
        stored.key = key::columns(stored.table_oid);
        stored.bodies = bodies(ext, watch_id);
        DEPENDS_ON.with(|d| {
            let mut d = d.borrow_mut();
            for body in &stored.bodies {
                let oid = pg_sys::Oid::from(body.oid);
                if !d.contains(&oid) {
                    d.push(oid);
                }
            }
        });
    }
    Ok(stored)
}

/// The related tables of watch `watch_id` keyed by its rows ([`BodyTable`]), as the catalog has
/// them now: followed through a foreign key (not read whole), whose columns are exactly the
/// table's primary key.
fn bodies(ext: &str, watch_id: i32) -> Vec<BodyTable> {
    let names = |rel: &str, cols: &str| {
        format!(
            "ARRAY(SELECT t.attname::pg_catalog.text \
                     FROM pg_catalog.unnest(k.{cols}) WITH ORDINALITY u(n, i) \
                     JOIN pg_catalog.pg_attribute t ON t.attrelid OPERATOR(pg_catalog.=) k.{rel} \
                      AND t.attnum OPERATOR(pg_catalog.=) u.n ORDER BY u.i)"
        )
    };
    let sql = format!(
        "SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object( \
                  'oid', k.conrelid::pg_catalog.int8, \
                  'table', pg_catalog.format('%I.%I', n.nspname, c.relname), \
                  'child', {child}, 'parent', {parent}, \
                  'columns', ARRAY(SELECT t.attname::pg_catalog.text FROM pg_catalog.pg_attribute t \
                                    WHERE t.attrelid OPERATOR(pg_catalog.=) k.conrelid \
                                      AND t.attnum OPERATOR(pg_catalog.>) 0 AND NOT t.attisdropped \
                                      AND t.attnum OPERATOR(pg_catalog.<>) ALL (k.conkey) \
                                    ORDER BY t.attnum)) ORDER BY k.conrelid) \
           FROM {ext}.indexnow_relations a \
           JOIN {ext}.indexnow_watches w ON w.id OPERATOR(pg_catalog.=) a.watch_id \
           JOIN pg_catalog.pg_constraint k ON k.conrelid OPERATOR(pg_catalog.=) a.tbl \
            AND k.confrelid OPERATOR(pg_catalog.=) w.tbl AND k.contype OPERATOR(pg_catalog.=) 'f' \
           JOIN pg_catalog.pg_index i ON i.indrelid OPERATOR(pg_catalog.=) k.conrelid \
            AND i.indisprimary \
           JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) k.conrelid \
           JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
          WHERE a.watch_id OPERATOR(pg_catalog.=) $1 AND NOT a.whole \
            AND ARRAY(SELECT x FROM pg_catalog.unnest(k.conkey) x ORDER BY x) \
                OPERATOR(pg_catalog.=) \
                ARRAY(SELECT x FROM pg_catalog.unnest(i.indkey::pg_catalog.int2[]) x ORDER BY x)",
        child = names("conrelid", "conkey"),
        parent = names("confrelid", "confkey"),
    );
    let found = Spi::connect(|client| {
        plan_cache::read(client, &sql, &[watch_id.into()])?
            .first()
            .get_one::<pgrx::JsonB>()
    })
    .unwrap_or_else(|e| {
        error!("indexnow: reading the tables keyed by watch {watch_id}'s rows: {e}")
    });
    found
        .map(|j| {
            serde_json::from_value(j.0).unwrap_or_else(|e| {
                error!("indexnow: reading the tables keyed by a watch's rows: {e}")
            })
        })
        .unwrap_or_default()
}

/// The definition a watch's statements are generated from: its stored arguments over its table
/// as it is now. Every content column is one the watch does not ignore, nor its `expire_at` (a
/// changed expiry re-times the removal, and is no news to search engines); a `publish_at` or
/// `expire_at` that names a column reads it, any other is an expression over the row.
pub fn definition(ext: &str, stored: &Stored) -> Result<WatchDefinition, String> {
    let table = stored
        .table
        .clone()
        .ok_or_else(|| "its table is gone".to_string())?;
    if stored.key.is_empty() {
        return Err(format!(
            "{table} has no primary key now: its rows are derived once it has one again"
        ));
    }
    let url = match (&stored.url, &stored.url_sql) {
        (Some(template), _) => UrlSource::Template(template::parse(template)?),
        (None, Some(sql)) => UrlSource::Sql(sql.clone()),
        (None, None) => return Err("it has no URL".into()),
    };
    let time = |given: &String| PublishAt {
        sql: if stored.columns.contains(given) {
            format!("r.{}", quote_ident(given))
        } else {
            format!("({given})")
        },
        time_zone: stored.time_zone.clone(),
    };
    let publish_at = stored.publish_at.as_ref().map(time);
    let expire_at = stored.expire_at.as_ref().map(time);
    let hidden_reason: Reason = stored
        .hidden_reason
        .parse()
        .map_err(|e: crate::queue::UnknownReason| e.to_string())?;
    Ok(WatchDefinition {
        watch_id: stored.watch_id,
        ext: ext.to_string(),
        table,
        key: stored.key.clone(),
        public: stored
            .columns
            .iter()
            .filter(|c| !stored.ignore.contains(c) && stored.expire_at.as_ref() != Some(c))
            .cloned()
            .collect(),
        url,
        visible: stored.visible.clone(),
        publish_at,
        expire_at,
        hidden_reason,
        bodies: stored
            .bodies
            .iter()
            .map(|b| Body {
                table: b.table.clone(),
                on: b
                    .child
                    .iter()
                    .cloned()
                    .zip(b.parent.iter().cloned())
                    .collect(),
                public: b
                    .columns
                    .iter()
                    .filter(|c| !stored.ignore.contains(c))
                    .cloned()
                    .collect(),
                all: b.columns.clone(),
            })
            .collect(),
    })
}

fn invalidated(relid: pg_sys::Oid) {
    let dropped = relid == pg_sys::InvalidOid || DEPENDS_ON.with(|d| d.borrow().contains(&relid));
    if dropped {
        // (no borrow of these spans a call into PostgreSQL, so none is held here)
        GENERATED.with(|g| g.borrow_mut().clear());
        DEPENDS_ON.with(|d| d.borrow_mut().clear());
    }
}
