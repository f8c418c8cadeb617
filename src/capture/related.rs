//! Related tables: a watch whose URL, visibility or publication time comes from tables its rows
//! reference (`indexnow_watch(..., related => '{articles,categories}')` on a translation table).
//!
//! A write to a related table changes what the watched rows that reference the written rows
//! derive to, so it re-derives exactly those rows: the capture trigger on the related table runs
//! the relation's `dependents` query, which joins from the watched table along foreign keys to the
//! written rows (`article_translations → articles → categories`), and derives (or records) the
//! keys it finds, as a write to the watched table would. The path is found from the catalog when
//! the watch is made: each related table must be reachable from the watched table through foreign
//! keys among the watched and related tables, or the watch is refused. The query is not stored:
//! it is planned again from the related tables `indexnow_relations` lists and the catalog when a
//! backend first captures a write of the related table ([`of_table`]).
//!
//! The watched table may name itself when it has a foreign key to itself (a tree of pages, each
//! URL made of its ancestors' slugs): the query then follows that key down, recursively, and a
//! written row re-derives every row below it.
//!
//! A deleted parent row takes its children with it only where the foreign key cascades; then the
//! children's own triggers see their rows go. Where it does not, the children stay and are derived
//! again (a `visible` that reads the parent then hides them).

use crate::derive::statements::row_key;
use crate::quote::quote_ident;
use pgrx::prelude::*;
use std::collections::HashMap;

/// Where the written rows' keys go in a `dependents` query: replaced by the trigger with a
/// query over its transition tables.
pub const CHANGED: &str = "indexnow_changed_rows";

/// One foreign key: `child (child_cols) REFERENCES parent (parent_cols)`.
#[derive(Clone, Debug)]
struct ForeignKey {
    child: pg_sys::Oid,
    child_cols: Vec<String>,
    parent: pg_sys::Oid,
    parent_cols: Vec<String>,
    /// Whether the child's and the parent's columns are all of built-in types (the queries that
    /// join along the key run as the extension's owner).
    built_in_types: bool,
}

/// One step of a path from the watched table to a related table, along a foreign key either way:
/// up, from the referencing row to the row it references (a translation to its article, a page
/// to its category), or down, from a row to the rows that reference it (a page to its body row
/// keyed by the page, to its access restrictions, to the site whose root it is).
#[derive(Clone, Debug)]
struct Hop {
    fk: ForeignKey,
    up: bool,
}

impl Hop {
    /// The table the step goes to.
    fn to(&self) -> pg_sys::Oid {
        if self.up {
            self.fk.parent
        } else {
            self.fk.child
        }
    }

    /// The columns of the key on the side the step leaves.
    fn near_cols(&self) -> &[String] {
        if self.up {
            &self.fk.child_cols
        } else {
            &self.fk.parent_cols
        }
    }

    /// The columns of the key on the side the step reaches.
    fn far_cols(&self) -> &[String] {
        if self.up {
            &self.fk.parent_cols
        } else {
            &self.fk.child_cols
        }
    }
}

/// A related table and the query from its written rows to the watched rows' keys.
pub struct Relation {
    pub table: pg_sys::Oid,
    /// `schema.name`, for messages.
    pub label: String,
    pub dependents: String,
}

/// The relations of a watch of `watched` (key `key`) that reads `related`, or an error message.
pub fn plan(
    watched: pg_sys::Oid,
    key: &[String],
    related: &[String],
) -> Result<Vec<Relation>, String> {
    let mut tables: Vec<Table> = vec![];
    for name in related {
        tables.push(named(name)?);
    }
    let mut all: Vec<pg_sys::Oid> = tables.iter().map(|t| t.oid).collect();
    all.push(watched);
    let keys = foreign_keys(&all).map_err(|e| e.to_string())?;
    let watched = Table {
        oid: watched,
        name: super::triggers::table_qualified(watched),
        label: String::new(),
    };
    relations(&watched, key, &tables, &keys)
}

/// The table `name` names (`to_regclass`), or why there is none.
fn named(name: &str) -> Result<Table, String> {
    let found: Option<Table> = Spi::connect(|client| {
            let t = client.select(
                "SELECT c.oid, pg_catalog.format('%I.%I', n.nspname, c.relname), pg_catalog.format('%s.%s', n.nspname, c.relname) \
                   FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                  WHERE c.oid = pg_catalog.to_regclass($1)",
                None,
                &[name.into()],
            )?;
            if t.is_empty() {
                return Ok::<_, pgrx::spi::Error>(None);
            }
            let r = t.first();
            Ok(Some(Table {
                oid: r.get::<pg_sys::Oid>(1)?.unwrap(),
                name: r.get::<String>(2)?.unwrap(),
                label: r.get::<String>(3)?.unwrap(),
            }))
        })
        .map_err(|e| e.to_string())?;
    found.ok_or_else(|| format!("related table \"{name}\" does not exist"))
}

/// A related table by its name: its OID and its label for messages, or why it cannot be one.
pub fn table_named(name: &str) -> Result<(pg_sys::Oid, String), String> {
    named(name).map(|t| (t.oid, t.label))
}

/// A table as the relation queries name it (`name`, quoted) and messages do (`label`).
struct Table {
    oid: pg_sys::Oid,
    name: String,
    label: String,
}

/// The relations of a watch of `watched` (key `key`) that reads `tables`, given the foreign keys
/// among them, or an error message. Reads nothing: the golden test pins what it generates.
fn relations(
    watched: &Table,
    key: &[String],
    tables: &[Table],
    keys: &[ForeignKey],
) -> Result<Vec<Relation>, String> {
    let names: HashMap<pg_sys::Oid, String> =
        tables.iter().map(|t| (t.oid, t.name.clone())).collect();
    let watched_name = &watched.name;
    let relations = tables
        .iter()
        .map(|Table { oid, label, .. }| {
            if *oid == watched.oid {
                return Ok(Related {
                    relation: below(keys, watched.oid, watched_name, key, label)?,
                    rows: String::new(),
                });
            }
            let paths = paths(keys, watched.oid, *oid, PATHS_AT_MOST + 1).unwrap_or_else(|| {
                // (too many partial chains to search: as good as too many chains)
                vec![vec![]; PATHS_AT_MOST + 1]
            });
            if paths.len() > PATHS_AT_MOST {
                return Err(format!(
                    "more than {PATHS_AT_MOST} chains of foreign keys lead from {watched_name} to \
                     related table {label}: a watch follows every one, at most {PATHS_AT_MOST}; \
                     name fewer related tables (the ones between them make the chains)"
                ));
            }
            if paths.is_empty() {
                return Err(format!(
                    "related table {label} is not reachable from {} through foreign keys among \
                     the watched and related tables",
                    watched_name
                ));
            }
            // The dependents query joins along these keys as the extension's owner.
            if paths.iter().flatten().any(|hop| !hop.fk.built_in_types) {
                return Err(format!(
                    "the foreign keys from {watched_name} to related table {label} use a type \
                     defined in the database: their columns must be of built-in types"
                ));
            }
            // Every path is followed (an article's main and second category, an author and an
            // editor): a row reached by one its expressions do not read is derived for nothing.
            // A related table that is a tree itself (nested categories): the rows below a
            // written row are written rows too (a category path reads its ancestors).
            let written = below_written(keys, *oid, &names[oid], &paths);
            let found = |select: &str| {
                paths
                    .iter()
                    .map(|path| dependents(watched_name, select, path, &names))
                    .collect::<Vec<_>>()
                    .join(" UNION ALL ")
                    .replace(CHANGED, &written)
            };
            Ok(Related {
                relation: Relation {
                    table: *oid,
                    label: label.clone(),
                    dependents: found(&format!("{} AS k", row_key(key, "t0"))),
                },
                rows: found("t0.*"),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    // In a tree, the pages found through another related table take the pages below them along
    // (a section set on a top page and inherited by its subtree).
    let tree = relations
        .iter()
        .find(|r| r.relation.table == watched.oid)
        .map(|r| r.relation.dependents.clone());
    Ok(relations
        .into_iter()
        .map(|r| match &tree {
            Some(below) if r.relation.table != watched.oid => Relation {
                dependents: format!(
                    "SELECT a.k FROM ({}) a UNION ALL {}",
                    r.relation.dependents,
                    below.replace(CHANGED, &format!("({})", r.rows))
                ),
                ..r.relation
            },
            _ => r.relation,
        })
        .collect())
}

/// A relation as planned, with the query of the watched rows themselves (not their keys) that
/// reference the written rows: a tree's pages below them are found from those.
struct Related {
    relation: Relation,
    rows: String,
}

/// At most this many paths from the watched table to one related table are followed (a watch
/// with more is refused).
const PATHS_AT_MOST: usize = 16;

/// The chains of foreign keys from `from` to `to`, each key followed either way, that pass no
/// table twice, shortest first, at most `at_most`; `None` when there are too many partial chains
/// to search. A table's key to itself is no step (a tree is followed by [`below`] and
/// [`below_written`]). Searched breadth first, so a dense graph of foreign keys among many
/// related tables is not walked to its end (its simple paths grow as a factorial).
fn paths(
    keys: &[ForeignKey],
    from: pg_sys::Oid,
    to: pg_sys::Oid,
    at_most: usize,
) -> Option<Vec<Vec<Hop>>> {
    let mut found = vec![];
    let mut cut = false;
    let mut chains: Vec<(pg_sys::Oid, Vec<Hop>)> = vec![(from, vec![])];
    while !chains.is_empty() && found.len() < at_most {
        let mut longer = vec![];
        for (at, chain) in chains {
            let steps = keys.iter().filter(|k| k.child != k.parent).filter_map(|k| {
                if k.child == at {
                    Some(Hop {
                        fk: k.clone(),
                        up: true,
                    })
                } else if k.parent == at {
                    Some(Hop {
                        fk: k.clone(),
                        up: false,
                    })
                } else {
                    None
                }
            });
            for hop in steps {
                let seen = hop.to() == from || chain.iter().any(|c| c.to() == hop.to());
                if seen {
                    continue;
                }
                let mut next = chain.clone();
                let reached = hop.to();
                next.push(hop);
                if reached == to {
                    found.push(next);
                } else if longer.len() < at_most * keys.len() {
                    longer.push((reached, next));
                } else {
                    cut = true;
                }
            }
        }
        chains = longer;
    }
    // (chains left unsearched may reach `to`: too many to follow, not none)
    if cut && found.len() < at_most {
        return None;
    }
    found.truncate(at_most);
    Some(found)
}

/// The written rows of related table `table` as the dependents queries read them: the rows of
/// the trigger's transition tables, and, when the table has foreign keys to itself (of built-in
/// types), every row below them, recursively (`UNION` ends a cycle).
fn below_written(
    keys: &[ForeignKey],
    table: pg_sys::Oid,
    name: &str,
    paths: &[Vec<Hop>],
) -> String {
    let own: Vec<&ForeignKey> = keys
        .iter()
        .filter(|k| k.child == table && k.parent == table)
        .filter(|k| k.built_in_types)
        .collect();
    if own.is_empty() {
        return CHANGED.to_string();
    }
    let mut carried: Vec<&String> = vec![];
    let last_hops = paths.iter().filter_map(|p| p.last());
    for c in last_hops
        .flat_map(|hop| hop.far_cols())
        .chain(own.iter().flat_map(|fk| &fk.parent_cols))
    {
        if !carried.contains(&c) {
            carried.push(c);
        }
    }
    let list = |alias: &str| {
        carried
            .iter()
            .map(|c| format!("{alias}.{}", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let on = below_parent(&own);
    format!(
        "(WITH RECURSIVE d AS (SELECT {first} FROM {CHANGED} r \
           UNION SELECT {next} FROM {name} c JOIN d ON {on}) SELECT * FROM d)",
        first = list("r"),
        next = list("c"),
    )
}

/// The join of a row `c` to its parent row `d` along any of a table's foreign keys to itself.
fn below_parent(own: &[&ForeignKey]) -> String {
    own.iter()
        .map(|fk| {
            let on = fk
                .child_cols
                .iter()
                .zip(&fk.parent_cols)
                .map(|(c, p)| format!("c.{} = d.{}", quote_ident(c), quote_ident(p)))
                .collect::<Vec<_>>()
                .join(" AND ");
            format!("({on})")
        })
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The watched table as its own related table: a tree (a page and its parent page). A written
/// row re-derives every row below it, along the table's foreign key to itself, to any depth.
fn below(
    keys: &[ForeignKey],
    watched: pg_sys::Oid,
    watched_name: &str,
    key: &[String],
    label: &str,
) -> Result<Relation, String> {
    // Every foreign key to itself is followed (a parent, and say a translation's original): a
    // row reached through one that does not shape URLs is derived for nothing, never missed.
    let own: Vec<&ForeignKey> = keys
        .iter()
        .filter(|k| k.child == watched && k.parent == watched)
        .collect();
    if own.is_empty() {
        return Err(format!(
            "related names the watched table {label} itself, which has no foreign key to \
             itself (a parent column): only a tree of rows can be its own related table"
        ));
    }
    if !own.iter().all(|fk| fk.built_in_types) {
        return Err(format!(
            "a foreign key of {label} to itself uses a type defined in the database: its \
             columns must be of built-in types"
        ));
    }
    Ok(Relation {
        table: watched,
        label: label.to_string(),
        dependents: descendants(watched_name, key, &own),
    })
}

/// `WITH RECURSIVE d AS (the rows whose parent is a written row, UNION the rows whose parent is
/// in d) SELECT jsonb_build_array(d.key...) AS k FROM d`, along each of the table's foreign keys
/// to itself: `UNION` ends a cycle.
fn descendants(watched: &str, key: &[String], own: &[&ForeignKey]) -> String {
    let mut carried: Vec<&String> = key.iter().collect();
    for fk in own {
        for c in &fk.parent_cols {
            if !carried.contains(&c) {
                carried.push(c);
            }
        }
    }
    let list = |alias: &str, cols: &[String]| {
        cols.iter()
            .map(|c| format!("{alias}.{}", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let carried: Vec<String> = carried.into_iter().cloned().collect();
    let written = own
        .iter()
        .map(|fk| {
            format!(
                "({}) IN (SELECT {} FROM {CHANGED} r)",
                list("t0", &fk.child_cols),
                list("r", &fk.parent_cols)
            )
        })
        .collect::<Vec<_>>()
        .join(" OR ");
    let below = below_parent(own);
    format!(
        "SELECT {k} AS k FROM (WITH RECURSIVE d AS ( \
           SELECT {first} FROM {watched} t0 WHERE {written} \
           UNION SELECT {next} FROM {watched} c JOIN d ON {below}) \
         SELECT * FROM d) d",
        k = row_key(key, "d"),
        first = list("t0", &carried),
        next = list("c", &carried),
    )
}

/// `SELECT select FROM watched t0 JOIN ... WHERE (the last step's columns on this side) IN
/// (SELECT its columns on the written table's side FROM indexnow_changed_rows r)`: `select` is the keys
/// (`jsonb_build_array(t0.key...) AS k`) or the rows (`t0.*`).
fn dependents(
    watched: &str,
    select: &str,
    path: &[Hop],
    names: &HashMap<pg_sys::Oid, String>,
) -> String {
    let cols = |alias: &str, cols: &[String]| {
        cols.iter()
            .map(|c| format!("{alias}.{}", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut from = format!("{watched} t0");
    for (i, hop) in path.iter().enumerate().take(path.len() - 1) {
        let on = hop
            .near_cols()
            .iter()
            .zip(hop.far_cols())
            .map(|(c, p)| format!("t{i}.{} = t{}.{}", quote_ident(c), i + 1, quote_ident(p)))
            .collect::<Vec<_>>()
            .join(" AND ");
        from.push_str(&format!(" JOIN {} t{} ON {on}", names[&hop.to()], i + 1));
    }
    let last = path.last().expect("a path has a foreign key");
    let n = path.len() - 1;
    format!(
        "SELECT {select} FROM {from} WHERE ({near}) IN (SELECT {far} FROM {CHANGED} r)",
        near = cols(&format!("t{n}"), last.near_cols()),
        far = cols("r", last.far_cols()),
    )
}

fn foreign_keys(tables: &[pg_sys::Oid]) -> Result<Vec<ForeignKey>, pgrx::spi::Error> {
    Spi::connect(|client| {
        client
            .select(
                "SELECT c.conrelid, c.confrelid, \
                        ARRAY(SELECT a.attname::text FROM pg_catalog.unnest(c.conkey) WITH ORDINALITY k(n, i) \
                                JOIN pg_catalog.pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n \
                               ORDER BY k.i), \
                        ARRAY(SELECT a.attname::text FROM pg_catalog.unnest(c.confkey) WITH ORDINALITY k(n, i) \
                                JOIN pg_catalog.pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n \
                               ORDER BY k.i), \
                        ARRAY(SELECT a.atttypid FROM pg_catalog.unnest(c.conkey OPERATOR(pg_catalog.||) c.confkey) WITH ORDINALITY k(n, i) \
                                JOIN pg_catalog.pg_attribute a \
                                  ON a.attrelid = CASE WHEN k.i <= pg_catalog.cardinality(c.conkey) \
                                                       THEN c.conrelid ELSE c.confrelid END \
                                 AND a.attnum = k.n) \
                   FROM pg_catalog.pg_constraint c \
                  WHERE c.contype = 'f' AND c.conrelid = ANY ($1) AND c.confrelid = ANY ($1) \
                  ORDER BY c.oid",
                None,
                &[tables.to_vec().into()],
            )?
            .map(|r| {
                Ok(ForeignKey {
                    child: r.get(1)?.unwrap(),
                    parent: r.get(2)?.unwrap(),
                    child_cols: r.get(3)?.unwrap_or_default(),
                    parent_cols: r.get(4)?.unwrap_or_default(),
                    built_in_types: r
                        .get::<Vec<pg_sys::Oid>>(5)?
                        .unwrap_or_default()
                        .into_iter()
                        .all(crate::derive::owner::built_in),
                })
            })
            .collect()
    })
}

/// The written rows of a trigger event as the `dependents` query reads them: the parent key
/// columns of every row in `sources` (transition tables).
pub fn changed_rows(sources: &[&str]) -> String {
    let rows = sources
        .iter()
        .map(|t| format!("SELECT * FROM {t}"))
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    format!("({rows})")
}

/// A relation of an active watch on the trigger's table.
pub struct Dependents {
    pub watch_id: i32,
    /// The query from the written rows to the keys of the watched rows that read them; `None`
    /// when it cannot be planned now (a foreign key of the path dropped, the watched table
    /// without a primary key): a write then records the watch's whole table.
    pub dependents: Option<String>,
}

/// The relations of active watches that read the table `table`, each planned from the watch's
/// related tables (as `indexnow_watch()` stored them) and the foreign keys the catalog has now;
/// none for a table the watch reads whole (`related_whole`).
pub fn of_table(ext: &str, table: pg_sys::Oid) -> Vec<Dependents> {
    // (`whole` read from the row as jsonb: the capture trigger runs this between a restart onto
    // this library and the update, while the database's `indexnow_relations` has no such column)
    let whole = |alias: &str| {
        format!("coalesce((pg_catalog.to_jsonb({alias}) ->> 'whole')::pg_catalog.bool, false)")
    };
    let (whole_a, whole_r) = (whole("a"), whole("r"));
    let sql = format!(
        "SELECT r.watch_id, w.tbl::pg_catalog.oid, \
                ARRAY(SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) \
                        FROM {ext}.indexnow_relations a \
                        JOIN pg_catalog.pg_class c ON c.oid = a.tbl \
                        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                       WHERE a.watch_id = r.watch_id AND NOT {whole_a} ORDER BY a.tbl), \
                {whole_r} \
           FROM {ext}.indexnow_relations r \
           JOIN {ext}.indexnow_watches w ON w.id = r.watch_id \
          WHERE r.tbl = $1::pg_catalog.oid::pg_catalog.regclass AND w.active ORDER BY r.watch_id"
    );
    let watches: Vec<(i32, pg_sys::Oid, Vec<String>, bool)> = Spi::connect(|client| {
        crate::plan_cache::read(client, &sql, &[table.into()])?
            .map(|r| {
                Ok((
                    r.get(1)?.unwrap_or_default(),
                    r.get(2)?.unwrap_or(pg_sys::InvalidOid),
                    r.get(3)?.unwrap_or_default(),
                    r.get(4)?.unwrap_or_default(),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading the relations of a table: {e}"));
    watches
        .into_iter()
        .map(|(watch_id, watched, related, whole)| {
            let key = crate::derive::key::names(watched);
            // (read whole: a write derives the whole watched table)
            let dependents = if key.is_empty() || whole {
                None
            } else {
                plan(watched, &key, &related).ok().and_then(|relations| {
                    relations
                        .into_iter()
                        .find(|r| r.table == table)
                        .map(|r| r.dependents)
                })
            };
            Dependents {
                watch_id,
                dependents,
            }
        })
        .collect()
}

/// Whether `written` (a table above related table `related`) has every column of `related` that
/// a foreign key references or that references another table: the columns the dependents
/// queries may read from the written rows.
pub fn referenced_columns_in(related: pg_sys::Oid, written: pg_sys::Oid) -> bool {
    crate::plan_cache::get_one::<bool>(
        "SELECT pg_catalog.bool_and(EXISTS ( \
                  SELECT FROM pg_catalog.pg_attribute w \
                   WHERE w.attrelid = $2 AND w.attname = a.attname AND NOT w.attisdropped)) \
           FROM (SELECT c.confkey AS cols FROM pg_catalog.pg_constraint c \
                  WHERE c.contype = 'f' AND c.confrelid = $1 \
                 UNION ALL \
                 SELECT c.conkey FROM pg_catalog.pg_constraint c \
                  WHERE c.contype = 'f' AND c.conrelid = $1) c \
           CROSS JOIN LATERAL pg_catalog.unnest(c.cols) k(attnum) \
           JOIN pg_catalog.pg_attribute a ON a.attrelid = $1 AND a.attnum = k.attnum",
        &[related.into(), written.into()],
    )
    .unwrap_or_else(|e| error!("indexnow: reading the columns of a related table: {e}"))
    .unwrap_or(true)
}

/// The related tables of the inactive watches of `table` (the ones `indexnow_unwatch()` or a
/// drop just ended): their capture triggers may be unused now.
pub fn tables_of_ended_watches(ext: &str, table: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT DISTINCT r.tbl::pg_catalog.oid FROM {ext}.indexnow_relations r \
                       JOIN {ext}.indexnow_watches w ON w.id = r.watch_id \
                      WHERE w.tbl = $1::pg_catalog.oid::pg_catalog.regclass AND NOT w.active"
                ),
                None,
                &[table.into()],
            )?
            .map(|r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap()))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading the related tables of ended watches: {e}"))
}

#[cfg(test)]
mod tests {
    use super::{paths, ForeignKey, PATHS_AT_MOST};
    use pgrx::pg_sys::Oid;

    fn fk(child: u32, parent: u32) -> ForeignKey {
        ForeignKey {
            child: Oid::from(child),
            child_cols: vec![format!("to_{parent}")],
            parent: Oid::from(parent),
            parent_cols: vec!["id".into()],
            built_in_types: true,
        }
    }

    #[test]
    fn paths_are_found_shortest_first_and_the_search_ends_on_a_dense_graph() {
        // Every one of 16 tables references every other: about 10^12 simple paths from 1 to 2.
        let keys: Vec<ForeignKey> = (1..=16)
            .flat_map(|a| (1..=16).filter(move |b| *b != a).map(move |b| fk(a, b)))
            .collect();
        let found = paths(&keys, Oid::from(1), Oid::from(2), PATHS_AT_MOST).unwrap();
        assert_eq!(found.len(), PATHS_AT_MOST);
        assert_eq!(found[0].len(), 1);
        assert!(found.windows(2).all(|w| w[0].len() <= w[1].len()));
        for path in &found {
            let first = &path[0];
            assert_eq!(
                if first.up {
                    first.fk.child
                } else {
                    first.fk.parent
                },
                Oid::from(1)
            );
            assert_eq!(path.last().unwrap().to(), Oid::from(2));
            assert!(path.windows(2).all(|w| {
                let from = if w[1].up {
                    w[1].fk.child
                } else {
                    w[1].fk.parent
                };
                w[0].to() == from
            }));
        }
        // A chain that comes back through the table it started from is no path.
        let keys = vec![fk(1, 3), fk(3, 1), fk(1, 2)];
        assert_eq!(
            paths(&keys, Oid::from(1), Oid::from(2), PATHS_AT_MOST)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn a_table_that_references_the_watched_one_is_reached_back_along_its_key() {
        // 3 (a body table) and 4 (restrictions) reference 1 (pages); 2 (sections) is referenced.
        let keys = vec![fk(3, 1), fk(4, 1), fk(1, 2)];
        let reached = |to| paths(&keys, Oid::from(1), Oid::from(to), PATHS_AT_MOST).unwrap();
        let body = reached(3);
        assert_eq!(body.len(), 1);
        assert!(
            !body[0][0].up,
            "down, from the page to the rows that reference it"
        );
        assert_eq!(body[0][0].near_cols(), ["id"]);
        assert_eq!(body[0][0].far_cols(), ["to_1"]);
        // Restrictions of the section's other pages are not reached through the section.
        assert_eq!(reached(4).len(), 1);
        // From a body table to the section: down to pages, then up.
        let up_again = paths(&keys, Oid::from(3), Oid::from(2), PATHS_AT_MOST).unwrap();
        assert_eq!(up_again.len(), 1);
        assert_eq!(
            up_again[0].iter().map(|h| h.up).collect::<Vec<_>>(),
            [true, true]
        );
        // A table's key to itself is no step of a path.
        let keys = vec![fk(1, 1), fk(3, 1)];
        assert_eq!(
            paths(&keys, Oid::from(1), Oid::from(3), PATHS_AT_MOST)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn a_search_that_cannot_look_at_every_chain_says_so() {
        // Ten tables that all reference each other, and a related table none of them reaches:
        // with room for one path the search stops early, and does not answer "no chain".
        let keys: Vec<ForeignKey> = (1..=10)
            .flat_map(|a| (1..=10).filter(move |b| *b != a).map(move |b| fk(a, b)))
            .collect();
        assert!(paths(&keys, Oid::from(1), Oid::from(50), 1).is_none());
    }
}

#[cfg(test)]
mod golden {
    use super::{relations, ForeignKey, Table};
    use pgrx::pg_sys::Oid;

    fn table(oid: u32, name: &str) -> Table {
        Table {
            oid: Oid::from(oid),
            name: format!("public.{name}"),
            label: format!("public.{name}"),
        }
    }

    fn fk(child: u32, child_col: &str, parent: u32) -> ForeignKey {
        ForeignKey {
            child: Oid::from(child),
            child_cols: vec![child_col.into()],
            parent: Oid::from(parent),
            parent_cols: vec!["id".into()],
            built_in_types: true,
        }
    }

    /// The related-table lookups of the shapes capture follows, pinned by a golden file
    /// (`crate::golden`): a translation whose URL reads its article and the article's category
    /// (a tree of categories, a second path through the article's second category), and a tree
    /// of pages that is its own related table and reads its section, its body table (keyed by the
    /// page) and its restrictions (which reference it).
    #[test]
    fn the_related_table_lookups_are_the_golden_ones() {
        const TRANSLATIONS: u32 = 1;
        const ARTICLES: u32 = 2;
        const CATEGORIES: u32 = 3;
        const PAGES: u32 = 4;
        const SECTIONS: u32 = 5;
        const BODIES: u32 = 6;
        const RESTRICTIONS: u32 = 7;
        let keys = vec![
            fk(BODIES, "page_ptr_id", PAGES),
            fk(RESTRICTIONS, "page_id", PAGES),
            fk(TRANSLATIONS, "article_id", ARTICLES),
            fk(ARTICLES, "category_id", CATEGORIES),
            fk(ARTICLES, "second_category_id", CATEGORIES),
            fk(CATEGORIES, "parent_id", CATEGORIES),
            fk(PAGES, "parent_id", PAGES),
            fk(PAGES, "section_id", SECTIONS),
        ];
        let key = ["article_id".to_string(), "lang".to_string()];
        let translations = relations(
            &table(TRANSLATIONS, "article_translations"),
            &key,
            &[table(ARTICLES, "articles"), table(CATEGORIES, "categories")],
            &keys,
        )
        .unwrap();
        let pages = relations(
            &table(PAGES, "pages"),
            &["id".to_string()],
            &[
                table(PAGES, "pages"),
                table(SECTIONS, "sections"),
                table(BODIES, "blog_pages"),
                table(RESTRICTIONS, "restrictions"),
            ],
            &keys,
        )
        .unwrap();
        let named: Vec<(String, &str)> = translations
            .iter()
            .map(|r| {
                (
                    format!("article_translations from {}", r.label),
                    &r.dependents,
                )
            })
            .chain(
                pages
                    .iter()
                    .map(|r| (format!("pages from {}", r.label), &r.dependents)),
            )
            .map(|(n, d)| (n, d.as_str()))
            .collect();
        let named: Vec<(&str, &str)> = named.iter().map(|(n, d)| (n.as_str(), *d)).collect();
        crate::golden::check(
            "related.sql",
            &crate::golden::file("src/capture/related.rs", "related tables", &named),
        );
    }
}
