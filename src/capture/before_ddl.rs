//! DDL seen before it runs, from the `ddl_command_start` event trigger `indexnow_before_ddl`
//! (sql/capture.sql): what only the statement tells, since the catalog changes under it.
//!
//! - A column of a watched table renamed (`ALTER TABLE ... RENAME COLUMN`): the watches' URL
//!   templates and `ignore` lists that name it are renamed with it. The event trigger at the end
//!   of the ALTER then makes the watches again (`super::watch::follow_alter_table`), with the new
//!   names. A watch keeps its id, sources and queue, and its pattern (the template) takes the
//!   new name: `indexnow_unwatch()` names it so. `visible`, `url_sql` and `publish_at` are the
//!   maker's SQL text: one that is the column alone (`visible => 'published'`) is renamed, any
//!   other is not rewritten, and a watch whose expression names the column breaks with a
//!   WARNING, as for a column dropped. A rename through a parent table (not `ONLY`) renames the
//!   column in the tables below it too, and their watches follow.
//! - A partition or inheritance child of a watched table dropped (`DROP TABLE`, or with its
//!   schema, `DROP SCHEMA ... CASCADE`, or its owner's objects, `DROP OWNED BY`): a whole-table
//!   change set is recorded for the watched table above it, derived after the commit, when the
//!   child's rows are gone (their pages removed). At the end of the DROP the child is no longer
//!   in the catalog, so nothing would tell which watched table it was under.
//!
//! - A table that stops inheriting (`ALTER TABLE child NO INHERIT parent`): its rows leave the
//!   parent, but the end of the ALTER names the child, which no longer reaches it; a whole-table
//!   change set is recorded for the watched tables at and above the parent, and for the watches
//!   that read such a table as a related table (`super::partitions::before_leaving`).
//! - A table with capture triggers about to join a tree (`ALTER TABLE ... ATTACH PARTITION`,
//!   `ALTER TABLE ... INHERIT`): its triggers are taken off, and the end of the ALTER puts them
//!   back (`super::partitions::before_joining`). Minor releases before the fix (16.2 among them)
//!   refuse any trigger with transition tables on a table joining a tree ("trigger
//!   indexnow_capture_delete prevents table ... from becoming a partition"), statement triggers
//!   included, though they allow making one on a partition.
//!
//! - A foreign table joining the tree of a watched or related table (`CREATE FOREIGN TABLE ...
//!   PARTITION OF` or `INHERITS`, `ATTACH PARTITION` of one, `ALTER FOREIGN TABLE ... INHERIT`) is
//!   refused: PostgreSQL would refuse every UPDATE and DELETE through the tree (a watch of such a
//!   table is refused as well).
//!
//! - An `ALTER TABLE` whose every subcommand leaves the rows as they are (a constraint or index
//!   added or dropped, a default, statistics, storage, options, the owner: [`changes_no_rows`])
//!   is noted, so that its end records no whole-table change set when the watches come out the
//!   same. A `pg_restore -j` adds the watched tables' primary keys while another job still loads
//!   `indexnow_sources`: a derivation then found no sources, announced every page again, and
//!   took the time of the restore as when each row began to give its URL (removals were lost).
//!   Nor does its end take capture triggers off tables no watch seems to use
//!   (`super::placement::take_off_all_unneeded`): such an ALTER takes no table out of a tree, and
//!   another job may not have loaded `indexnow_watches` yet (a watched table lost the triggers
//!   the restore had just made on it).
//!
//! PostgreSQL gives an event trigger its statement only in C, hence a C function here.

use crate::derive::template::{self, Part};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::ffi::CStr;

/// `_indexnow_before_ddl()`: the event trigger function. Declared in sql/capture.sql.
///
/// # Safety
/// Called by PostgreSQL as an event trigger function: `fcinfo.context` is its
/// `EventTriggerData`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn indexnow_before_ddl_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    let context = (*fcinfo).context;
    if context.is_null() || !pgrx::is_a(context, pg_sys::NodeTag::T_EventTriggerData) {
        error!("indexnow: _indexnow_before_ddl() is called by an event trigger only");
    }
    let parsetree = (*(context as *mut pg_sys::EventTriggerData)).parsetree;
    if FOLLOWING.get() == 0 {
        let alter = (!parsetree.is_null()
            && pgrx::is_a(parsetree, pg_sys::NodeTag::T_AlterTableStmt))
        .then(|| &*(parsetree as *mut pg_sys::AlterTableStmt));
        ALTER.set(alter.map_or(Alter::MayChangeRows, |a| alter_kind(a)));
        COLUMNS_ADDED.set(match (alter, ALTER.get()) {
            (Some(a), Alter::AddsColumns) => columns_added_by(a),
            _ => vec![],
        });
        KEY_BEFORE.set(None);
        if let Some(a) = alter.filter(|_| ALTER.get() != Alter::MayChangeRows) {
            note_key_before(a);
        }
    }
    if parsetree.is_null() || crate::extension::version_mismatch().is_some() {
        return pg_sys::Datum::from(0);
    }
    // The statement's names are resolved here, as the user who runs it and with the user's
    // search_path (this function is not SECURITY DEFINER); the extension's part then runs as
    // its owner.
    let seen = if pgrx::is_a(parsetree, pg_sys::NodeTag::T_RenameStmt) {
        column_renamed(&*(parsetree as *mut pg_sys::RenameStmt))
    } else if pgrx::is_a(parsetree, pg_sys::NodeTag::T_DropStmt) {
        tables_dropped(&*(parsetree as *mut pg_sys::DropStmt))
    } else if pgrx::is_a(parsetree, pg_sys::NodeTag::T_DropOwnedStmt) {
        owned_dropped(&*(parsetree as *mut pg_sys::DropOwnedStmt))
    } else if pgrx::is_a(parsetree, pg_sys::NodeTag::T_AlterTableStmt) {
        tables_joining(&*(parsetree as *mut pg_sys::AlterTableStmt))
    } else if pgrx::is_a(parsetree, pg_sys::NodeTag::T_CreateForeignTableStmt) {
        foreign_table_created(&*(parsetree as *mut pg_sys::CreateForeignTableStmt))
    } else if pgrx::is_a(parsetree, pg_sys::NodeTag::T_CreateStmt) {
        unlogged_table_created(&*(parsetree as *mut pg_sys::CreateStmt))
    } else {
        None
    };
    let Some(seen) = seen else {
        return pg_sys::Datum::from(0);
    };
    let ext = crate::extension::schema();
    if let Seen::Tree {
        foreign, unlogged, ..
    } = &seen
    {
        // The DDL refused: a foreign table below would fail every UPDATE and DELETE of the tree;
        // an unlogged table loses its rows at a crash without a trigger.
        crate::derive::owner::as_extension_owner(|| {
            refuse_foreign_joining(&ext, foreign);
            refuse_unlogged_joining(&ext, unlogged);
        });
    }
    // Never fails the user's DDL: a problem is a WARNING (the end of the ALTER then says what
    // the watch could not follow).
    let done = crate::subtransaction::run(|| {
        crate::derive::owner::as_extension_owner(|| match &seen {
            Seen::Renamed { tables, old, new } => {
                for table in tables {
                    follow_rename(&ext, *table, old, new);
                }
            }
            Seen::Dropped(tables) => follow_drops(&ext, tables),
            Seen::DroppedWith { schemas, owners } => {
                follow_drops(&ext, &children_dropped_with(schemas, owners))
            }
            Seen::Tree { joining, left, .. } => {
                joining
                    .iter()
                    .for_each(|t| super::partitions::before_joining(*t));
                left.iter()
                    .for_each(|parent| super::partitions::before_leaving(&ext, *parent));
            }
        })
    });
    if let Err(failure) = done {
        warning!(
            "indexnow: could not follow this statement: {}",
            failure.message
        );
    }
    pg_sys::Datum::from(0)
}

/// What a statement does that the watches follow, with its tables resolved.
enum Seen {
    Renamed {
        tables: Vec<pg_sys::Oid>,
        old: String,
        new: String,
    },
    Dropped(Vec<pg_sys::Oid>),
    /// Schemas dropped (`DROP SCHEMA`), or roles whose objects are (`DROP OWNED`): the tables
    /// in them are found in the subtransaction that follows them, before the drop runs.
    DroppedWith {
        schemas: Vec<pg_sys::Oid>,
        owners: Vec<pg_sys::Oid>,
    },
    /// Tables joining a tree (`ATTACH PARTITION`, `INHERIT`), the parents a table stops
    /// inheriting from (`NO INHERIT`), foreign tables coming below a parent (the foreign table,
    /// the parent), and unlogged tables coming into a tree (the unlogged table, the parent or the
    /// table made unlogged itself).
    Tree {
        joining: Vec<pg_sys::Oid>,
        left: Vec<pg_sys::Oid>,
        foreign: Vec<(String, pg_sys::Oid)>,
        unlogged: Vec<(String, pg_sys::Oid)>,
    },
}

/// The table a statement names, if it exists.
unsafe fn relation_of(relation: *mut pg_sys::RangeVar) -> Option<pg_sys::Oid> {
    let table = pg_sys::RangeVarGetRelidExtended(
        relation,
        pg_sys::NoLock as pg_sys::LOCKMODE,
        pg_sys::RVROption::RVR_MISSING_OK,
        None,
        std::ptr::null_mut(),
    );
    (table != pg_sys::InvalidOid).then_some(table)
}

unsafe fn column_renamed(rename: &pg_sys::RenameStmt) -> Option<Seen> {
    if rename.renameType != pg_sys::ObjectType::OBJECT_COLUMN
        || rename.relation.is_null()
        || rename.subname.is_null()
        || rename.newname.is_null()
    {
        return None;
    }
    let table = relation_of(rename.relation)?;
    // A rename recurses to the tables below, unless `ONLY` (watched children have their own
    // watches).
    let mut tables = vec![table];
    if (*rename.relation).inh {
        tables.extend(super::partitions::descendants(table));
    }
    Some(Seen::Renamed {
        tables,
        old: CStr::from_ptr(rename.subname)
            .to_string_lossy()
            .into_owned(),
        new: CStr::from_ptr(rename.newname)
            .to_string_lossy()
            .into_owned(),
    })
}

unsafe fn tables_dropped(drop: &pg_sys::DropStmt) -> Option<Seen> {
    if drop.objects.is_null() {
        return None;
    }
    if drop.removeType == pg_sys::ObjectType::OBJECT_SCHEMA {
        let schemas: Vec<pg_sys::Oid> = pgrx::PgList::<pg_sys::Node>::from_pg(drop.objects)
            .iter_ptr()
            .filter(|n| pgrx::is_a(*n, pg_sys::NodeTag::T_String))
            .map(|n| pg_sys::get_namespace_oid((*(n as *mut pg_sys::String)).sval, true))
            .filter(|oid| *oid != pg_sys::InvalidOid)
            .collect();
        return (!schemas.is_empty()).then_some(Seen::DroppedWith {
            schemas,
            owners: vec![],
        });
    }
    if drop.removeType != pg_sys::ObjectType::OBJECT_TABLE {
        return None;
    }
    let names = pgrx::PgList::<pg_sys::List>::from_pg(drop.objects);
    let tables: Vec<pg_sys::Oid> = names
        .iter_ptr()
        .filter_map(|name| relation_of(pg_sys::makeRangeVarFromNameList(name)))
        .collect();
    (!tables.is_empty()).then_some(Seen::Dropped(tables))
}

/// `DROP OWNED BY` roles: the tables they own in this database go with them.
unsafe fn owned_dropped(drop: &pg_sys::DropOwnedStmt) -> Option<Seen> {
    if drop.roles.is_null() {
        return None;
    }
    let owners: Vec<pg_sys::Oid> = pgrx::PgList::<pg_sys::RoleSpec>::from_pg(drop.roles)
        .iter_ptr()
        .map(|role| pg_sys::get_rolespec_oid(role, true))
        .filter(|oid| *oid != pg_sys::InvalidOid)
        .collect();
    (!owners.is_empty()).then_some(Seen::DroppedWith {
        schemas: vec![],
        owners,
    })
}

/// The partitions and inheritance children in `schemas` or owned by `owners`: those of them
/// below a watched table take rows of it away with them.
fn children_dropped_with(schemas: &[pg_sys::Oid], owners: &[pg_sys::Oid]) -> Vec<pg_sys::Oid> {
    Spi::connect(|client| {
        client
            .select(
                "SELECT c.oid FROM pg_catalog.pg_class c \
                  WHERE (c.relnamespace = ANY ($1) OR c.relowner = ANY ($2)) \
                    AND c.relkind IN ('r', 'p') \
                    AND EXISTS (SELECT FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid)",
                None,
                &[schemas.to_vec().into(), owners.to_vec().into()],
            )?
            .map(|r| Ok(r.get::<pg_sys::Oid>(1)?.unwrap()))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: listing the tables a drop takes with it: {e}"))
}

/// A foreign table created below existing tables (`CREATE FOREIGN TABLE ... PARTITION OF`,
/// `... INHERITS`).
unsafe fn foreign_table_created(create: &pg_sys::CreateForeignTableStmt) -> Option<Seen> {
    let base = &create.base;
    if base.inhRelations.is_null() || base.relation.is_null() {
        return None;
    }
    let parents = parents_named(base.inhRelations);
    let foreign = range_var_label(base.relation);
    (!parents.is_empty()).then(|| Seen::Tree {
        joining: vec![],
        left: vec![],
        foreign: parents.into_iter().map(|p| (foreign.clone(), p)).collect(),
        unlogged: vec![],
    })
}

/// The existing tables of a `CREATE`'s `PARTITION OF` or `INHERITS` list.
unsafe fn parents_named(parents: *mut pg_sys::List) -> Vec<pg_sys::Oid> {
    pgrx::PgList::<pg_sys::RangeVar>::from_pg(parents)
        .iter_ptr()
        .filter_map(|parent| relation_of(parent))
        .collect()
}

/// An unlogged table made below parents (`CREATE UNLOGGED TABLE ... PARTITION OF`, `INHERITS`).
unsafe fn unlogged_table_created(create: &pg_sys::CreateStmt) -> Option<Seen> {
    if create.relation.is_null()
        || (*create.relation).relpersistence != pg_sys::RELPERSISTENCE_UNLOGGED as std::ffi::c_char
        || create.inhRelations.is_null()
    {
        return None;
    }
    let parents = parents_named(create.inhRelations);
    let unlogged = range_var_label(create.relation);
    (!parents.is_empty()).then(|| Seen::Tree {
        joining: vec![],
        left: vec![],
        foreign: vec![],
        unlogged: parents.into_iter().map(|p| (unlogged.clone(), p)).collect(),
    })
}

/// A table as a statement names it, for messages.
unsafe fn range_var_label(relation: *mut pg_sys::RangeVar) -> String {
    let part = |name: *mut std::ffi::c_char| {
        (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned())
    };
    [part((*relation).schemaname), part((*relation).relname)]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(".")
}

unsafe fn is_foreign(table: pg_sys::Oid) -> bool {
    pg_sys::get_rel_relkind(table) as u8 == pg_sys::RELKIND_FOREIGN_TABLE
}

/// What the DDL statement this backend runs now does to rows, as far as the capture cares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Alter {
    /// Not an `ALTER TABLE`, or one that may change rows.
    MayChangeRows,
    /// An `ALTER TABLE` whose every subcommand leaves the rows alone ([`LEAVING_ROWS_ALONE`]),
    /// one of which drops or alters a constraint (a key, a foreign key a watch reads through).
    LeavesRows,
    /// An `ALTER TABLE` whose every subcommand leaves the rows alone and drops or alters no
    /// constraint: what a watch is made from (columns, key, the foreign keys of its related
    /// tables, its tree) is as it was. All a restore's data and post-data sections run.
    LeavesWatches,
    /// ... and only adds (a constraint, an index: [`ADDING`]).
    OnlyAdds,
    /// An `ALTER TABLE` that adds columns, and otherwise leaves the rows alone: the values there
    /// stay as they were, the new columns hold their defaults.
    AddsColumns,
}

/// A primary key: (column, SQL type) in the key's order.
type Key = Vec<(String, String)>;

thread_local! {
    /// Set at the start of each DDL statement, for its end.
    static ALTER: std::cell::Cell<Alter> = const { std::cell::Cell::new(Alter::MayChangeRows) };
    /// The primary key of the table an `ALTER TABLE` changing no row names, as it was before it
    /// (when the table carries capture triggers), for its end: [`key_before`].
    static KEY_BEFORE: std::cell::RefCell<Option<(pg_sys::Oid, Key)>> =
        const { std::cell::RefCell::new(None) };
    /// The columns an [`Alter::AddsColumns`] adds, for its end: [`columns_added`].
    static COLUMNS_ADDED: std::cell::RefCell<Vec<String>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// How deep this backend is in [`following`].
    static FOLLOWING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Runs `f`, the extension following the end of a user's DDL statement: the statements it runs
/// itself meanwhile (a view that reads an expression's columns, capture triggers made again)
/// leave what [`changes_no_rows`] says of the user's statement as it was.
pub fn following<R>(f: impl FnOnce() -> R) -> R {
    FOLLOWING.set(FOLLOWING.get() + 1);
    let f = std::panic::AssertUnwindSafe(f);
    pgrx::PgTryBuilder::new(move || {
        let f = f;
        (f.0)()
    })
    .finally(|| FOLLOWING.set(FOLLOWING.get() - 1))
    .execute()
}

/// Whether the `ALTER TABLE` ending now changes no row of the tables it alters: every
/// subcommand is one that leaves rows, their values and which table holds them alone.
pub fn changes_no_rows() -> bool {
    matches!(
        ALTER.get(),
        Alter::LeavesRows | Alter::LeavesWatches | Alter::OnlyAdds
    )
}

/// Whether the `ALTER TABLE` ending now leaves the rows and what every watch is made from as
/// they were ([`Alter::LeavesWatches`]): its end has nothing to follow (`super::after_ddl`).
pub fn leaves_watches() -> bool {
    matches!(ALTER.get(), Alter::LeavesWatches | Alter::OnlyAdds)
}

/// The columns the `ALTER TABLE` ending now adds, when adding columns is all it does to rows
/// (empty otherwise): every value there before is there after, so a watch's fingerprints can
/// follow the columns added without announcing anything (`super::after_ddl`).
pub fn columns_added() -> Vec<String> {
    COLUMNS_ADDED.with(|c| c.borrow().clone())
}

/// The names of the columns `alter` adds.
unsafe fn columns_added_by(alter: &pg_sys::AlterTableStmt) -> Vec<String> {
    pgrx::PgList::<pg_sys::AlterTableCmd>::from_pg(alter.cmds)
        .iter_ptr()
        .filter(|command| ADDING_COLUMNS.contains(&(**command).subtype))
        .filter_map(|command| {
            let def = (*command).def;
            (!def.is_null() && pgrx::is_a(def, pg_sys::NodeTag::T_ColumnDef))
                .then(|| (*(def as *mut pg_sys::ColumnDef)).colname)
                .filter(|name| !name.is_null())
                .map(|name| CStr::from_ptr(name).to_string_lossy().into_owned())
        })
        .collect()
}

/// The subcommands that add a column.
const ADDING_COLUMNS: &[pg_sys::AlterTableType::Type] = {
    use pg_sys::AlterTableType as At;
    &[
        At::AT_AddColumn,
        #[cfg(feature = "pg15")]
        At::AT_AddColumnRecurse,
    ]
};

/// The primary key of `table` (columns and types) before the `ALTER TABLE` ending now, when that
/// ALTER changes no row and names `table`: such an ALTER changes a watch's statements only by
/// changing its table's key (a restore adds it; a migration swaps it), and its end derives the
/// table only then.
pub fn key_before(table: pg_sys::Oid) -> Option<Key> {
    KEY_BEFORE.with(|k| {
        k.borrow()
            .as_ref()
            .filter(|(t, _)| *t == table)
            .map(|(_, key)| key.clone())
    })
}

/// Notes the key of the table `alter` names, before it runs (see [`key_before`]).
unsafe fn note_key_before(alter: &pg_sys::AlterTableStmt) {
    if crate::extension::version_mismatch().is_some() {
        return;
    }
    let Some(table) = relation_of(alter.relation) else {
        return;
    };
    if super::triggers::on(table) {
        KEY_BEFORE.set(Some((table, crate::derive::key::columns(table))));
    }
}

/// Whether the `ALTER TABLE` ending now only adds constraints or indexes. It cannot have taken
/// away what a watch needs: a watch that still cannot be made again is on a table being built
/// (a restore adds the keys one by one, the primary key and the foreign keys a related table is
/// reached through), and stays as it was.
pub fn only_adds() -> bool {
    ALTER.get() == Alter::OnlyAdds
}

/// The subcommands of [`LEAVING_ROWS_ALONE`] that add.
const ADDING: &[pg_sys::AlterTableType::Type] = {
    use pg_sys::AlterTableType as At;
    &[
        At::AT_AddConstraint,
        At::AT_ValidateConstraint,
        At::AT_AddIndex,
        At::AT_AddIndexConstraint,
        #[cfg(feature = "pg15")]
        At::AT_AddConstraintRecurse,
        #[cfg(feature = "pg15")]
        At::AT_ValidateConstraintRecurse,
    ]
};

/// The subcommands of [`LEAVING_ROWS_ALONE`] that drop or alter a constraint: a primary key
/// (a watch's key), a foreign key (the path to a related table), a deferrability (a deferrable
/// key is no key to a watch).
const CHANGING_CONSTRAINTS: &[pg_sys::AlterTableType::Type] = {
    use pg_sys::AlterTableType as At;
    &[
        At::AT_DropConstraint,
        At::AT_AlterConstraint,
        #[cfg(feature = "pg15")]
        At::AT_DropConstraintRecurse,
    ]
};

/// The `ALTER TABLE` subcommands that leave every row as it is. Anything else (a column added,
/// dropped or retyped, an expression changed, a partition attached, an inheritance changed) may
/// change rows.
const LEAVING_ROWS_ALONE: &[pg_sys::AlterTableType::Type] = {
    use pg_sys::AlterTableType as At;
    &[
        At::AT_AddConstraint,
        At::AT_ValidateConstraint,
        At::AT_DropConstraint,
        At::AT_AlterConstraint,
        At::AT_AddIndex,
        At::AT_AddIndexConstraint,
        At::AT_ColumnDefault,
        At::AT_SetNotNull,
        At::AT_DropNotNull,
        At::AT_SetStatistics,
        At::AT_SetOptions,
        At::AT_ResetOptions,
        At::AT_SetStorage,
        At::AT_ClusterOn,
        At::AT_DropCluster,
        // (a trigger disabled: a restore disables those its dump had disabled; a capture trigger
        // disabled is a gap `indexnow_status()` names, and enabling it again derives the table)
        At::AT_DisableTrig,
        At::AT_SetRelOptions,
        At::AT_ResetRelOptions,
        At::AT_ReplaceRelOptions,
        At::AT_SetTableSpace,
        At::AT_ReplicaIdentity,
        At::AT_ChangeOwner,
        At::AT_EnableRowSecurity,
        At::AT_DisableRowSecurity,
        At::AT_ForceRowSecurity,
        At::AT_NoForceRowSecurity,
        At::AT_AddIdentity,
        At::AT_SetIdentity,
        At::AT_DropIdentity,
        #[cfg(feature = "pg15")]
        At::AT_AddConstraintRecurse,
        #[cfg(feature = "pg15")]
        At::AT_ValidateConstraintRecurse,
        #[cfg(feature = "pg15")]
        At::AT_DropConstraintRecurse,
    ]
};

/// What `alter` does to rows (see [`Alter`]).
unsafe fn alter_kind(alter: &pg_sys::AlterTableStmt) -> Alter {
    let commands = pgrx::PgList::<pg_sys::AlterTableCmd>::from_pg(alter.cmds);
    let all_in = |kinds: &[pg_sys::AlterTableType::Type]| {
        !commands.is_empty()
            && commands
                .iter_ptr()
                .all(|command| kinds.contains(&(*command).subtype))
    };
    let table = (!alter.relation.is_null())
        .then(|| relation_of(alter.relation))
        .flatten();
    let leaves_rows = |command: *mut pg_sys::AlterTableCmd| {
        LEAVING_ROWS_ALONE.contains(&(*command).subtype)
            || enables_a_trigger_enabled_already(table, &*command)
    };
    let adds_columns = commands
        .iter_ptr()
        .any(|command| ADDING_COLUMNS.contains(&(*command).subtype));
    if all_in(ADDING) {
        Alter::OnlyAdds
    } else if !commands.is_empty() && commands.iter_ptr().all(leaves_rows) {
        if commands
            .iter_ptr()
            .any(|command| CHANGING_CONSTRAINTS.contains(&(*command).subtype))
        {
            Alter::LeavesRows
        } else {
            Alter::LeavesWatches
        }
    } else if adds_columns
        && commands
            .iter_ptr()
            .all(|command| ADDING_COLUMNS.contains(&(*command).subtype) || leaves_rows(command))
    {
        Alter::AddsColumns
    } else {
        Alter::MayChangeRows
    }
}

/// Whether `command` enables, in any mode (`ENABLE`, `ENABLE ALWAYS`, `ENABLE REPLICA TRIGGER
/// name`), a trigger of `table` that is enabled already: no write went unseen by it, so nothing
/// needs catching up (as a restore sets the capture triggers `ALWAYS` right after making them).
/// Enabling a disabled one may end a window of unseen writes: that ALTER derives the table.
unsafe fn enables_a_trigger_enabled_already(
    table: Option<pg_sys::Oid>,
    command: &pg_sys::AlterTableCmd,
) -> bool {
    use pg_sys::AlterTableType as At;
    let enabling = [
        At::AT_EnableTrig,
        At::AT_EnableAlwaysTrig,
        At::AT_EnableReplicaTrig,
    ];
    let (Some(table), false) = (table, command.name.is_null()) else {
        return false;
    };
    if !enabling.contains(&command.subtype) {
        return false;
    }
    let name = CStr::from_ptr(command.name).to_string_lossy().into_owned();
    crate::plan_cache::get_one::<bool>(
        "SELECT tgenabled <> 'D' FROM pg_catalog.pg_trigger WHERE tgrelid = $1 AND tgname = $2",
        &[table.into(), name.into()],
    )
    .ok()
    .flatten()
        == Some(true)
}

/// What an `ALTER TABLE` (or `ALTER FOREIGN TABLE`) does to trees, in every subcommand: the
/// tables it attaches as partitions or makes inheritance children, the parents the named table
/// stops inheriting from, and the foreign tables it brings below a parent (a foreign table
/// attached or inheriting, or one already below the table that joins).
unsafe fn tables_joining(alter: &pg_sys::AlterTableStmt) -> Option<Seen> {
    let kinds = [
        pg_sys::ObjectType::OBJECT_TABLE,
        pg_sys::ObjectType::OBJECT_FOREIGN_TABLE,
    ];
    if !kinds.contains(&alter.objtype) || alter.relation.is_null() {
        return None;
    }
    // (`IF EXISTS` of a table that is not there: nothing happens)
    let named = relation_of(alter.relation)?;
    let (mut joining, mut left, mut foreign, mut unlogged) = (vec![], vec![], vec![], vec![]);
    let mut join = |child: pg_sys::Oid, child_name: *mut pg_sys::RangeVar, parent: pg_sys::Oid| {
        if let Some(table) = super::partitions::unlogged_at_or_below(child) {
            unlogged.push((table, parent));
        }
        if is_foreign(child) {
            foreign.push((range_var_label(child_name), parent));
        } else {
            if let Some(below) = super::partitions::foreign_below(child) {
                foreign.push((below, parent));
            }
            joining.push(child);
        }
    };
    let mut set_unlogged = false;
    let commands = pgrx::PgList::<pg_sys::AlterTableCmd>::from_pg(alter.cmds);
    for command in commands.iter_ptr() {
        let def = (*command).def;
        let parent_named = || {
            (!def.is_null() && pgrx::is_a(def, pg_sys::NodeTag::T_RangeVar))
                .then(|| relation_of(def as *mut pg_sys::RangeVar))
                .flatten()
        };
        match (*command).subtype {
            pg_sys::AlterTableType::AT_AddInherit => {
                if let Some(parent) = parent_named() {
                    join(named, alter.relation, parent);
                }
            }
            pg_sys::AlterTableType::AT_AttachPartition
                if !def.is_null() && pgrx::is_a(def, pg_sys::NodeTag::T_PartitionCmd) =>
            {
                let name = (*(def as *mut pg_sys::PartitionCmd)).name;
                if let Some(partition) = (!name.is_null()).then(|| relation_of(name)).flatten() {
                    join(partition, name, named);
                }
            }
            pg_sys::AlterTableType::AT_DropInherit => left.extend(parent_named()),
            pg_sys::AlterTableType::AT_SetUnLogged => set_unlogged = true,
            _ => {}
        }
    }
    if set_unlogged {
        unlogged.push((super::triggers::table_qualified(named), named));
    }
    let any = !joining.is_empty() || !left.is_empty() || !foreign.is_empty();
    (any || !unlogged.is_empty()).then_some(Seen::Tree {
        joining,
        left,
        foreign,
        unlogged,
    })
}

/// Refuses a foreign table joining the tree of a watched or related table: PostgreSQL refuses
/// every UPDATE and DELETE through a table whose triggers collect transition tables when a
/// foreign table is below it ("cannot collect transition tuples from child foreign tables"), so
/// the tree's writes would fail, or go unseen with the triggers taken off. A table above a watched
/// partition only loses its triggers (`super::placement::take_off_all_unneeded`).
fn refuse_foreign_joining(ext: &str, foreign: &[(String, pg_sys::Oid)]) {
    for (foreign, parent) in foreign {
        let parent = *parent;
        if let Some(watched) = super::partitions::watched_or_related_at_or_above(ext, parent) {
            ErrorReport::new(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "indexnow: foreign table {foreign} cannot join the tree of {watched}, which \
                     indexnow watches or reads for a watch: PostgreSQL refuses UPDATE and DELETE \
                     through a table whose triggers collect the written rows when a foreign \
                     table is below it"
                ),
                "indexnow",
            )
            .set_hint(
                "End the watches of that table, and those that read it, with indexnow_unwatch() \
                 first, or keep the foreign table out of its tree.",
            )
            .report(PgLogLevel::ERROR);
        }
    }
}

/// Refuses an unlogged table coming into the tree of a watched or related table (made below it,
/// attached, inheriting, or the table itself set unlogged): a crash empties an unlogged table
/// without firing a trigger, and the pages of its rows would stay announced.
fn refuse_unlogged_joining(ext: &str, unlogged: &[(String, pg_sys::Oid)]) {
    for (table, at) in unlogged {
        if let Some(watched) = super::partitions::watched_or_related_at_or_above(ext, *at) {
            ErrorReport::new(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "indexnow: {}",
                    super::partitions::UnloggedRefused(table, &watched)
                ),
                "indexnow",
            )
            .set_hint(
                "End the watches of that table, and those that read it, with indexnow_unwatch() \
                 first, or keep the table logged.",
            )
            .report(PgLogLevel::ERROR);
        }
    }
}

/// Each dropped table under a watched table: a whole-table change set for each watched table
/// above it (its rows were theirs; its own watches are followed at the end, `super::dropped`).
fn follow_drops(ext: &str, tables: &[pg_sys::Oid]) {
    for &table in tables {
        for above in super::partitions::watched_ancestors(ext, table) {
            crate::derive::change_sets::record_whole_table(ext, above, None);
            crate::wake::worker_at_commit();
        }
    }
}

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_indexnow_before_ddl_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// What of a watch names columns: its template, ignore list, the columns its expressions read,
/// and the expressions themselves.
struct Names {
    id: i32,
    url: Option<String>,
    ignore: Vec<String>,
    read: Option<Vec<String>>,
    url_sql: Option<String>,
    visible: Option<String>,
    publish_at: Option<String>,
}

/// Renames `old` to `new` in the templates and ignore lists of the watches of `table`, and in
/// the expressions that are that column alone (`visible => 'published'`).
fn follow_rename(ext: &str, table: pg_sys::Oid, old: &str, new: &str) {
    let watches: Vec<Names> = Spi::connect(|client| {
        client
            .select(
                &format!(
                    "SELECT id, url, ignore, expression_columns, url_sql, visible, publish_at \
                       FROM {ext}.indexnow_watches \
                      WHERE tbl = $1::pg_catalog.oid::pg_catalog.regclass ORDER BY id"
                ),
                None,
                &[table.into()],
            )?
            .map(|r| {
                Ok(Names {
                    id: r.get(1)?.unwrap_or_default(),
                    url: r.get(2)?,
                    ignore: r.get(3)?.unwrap_or_default(),
                    read: r.get(4)?,
                    url_sql: r.get(5)?,
                    visible: r.get(6)?,
                    publish_at: r.get(7)?,
                })
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow: reading the watches of a table: {e}"));
    let rename = |c: &String| if c == old { new.to_string() } else { c.clone() };
    let bare = |e: Option<String>| e.map(|e| renamed_bare_column(&e, old, new).unwrap_or(e));
    for w in watches {
        let id = w.id;
        let url = w.url.map(|u| renamed_template(&u, old, new).unwrap_or(u));
        let ignore: Vec<String> = w.ignore.iter().map(rename).collect();
        let read: Option<Vec<String>> = w.read.map(|r| r.iter().map(rename).collect());
        let (url_sql, visible, publish_at) = (bare(w.url_sql), bare(w.visible), bare(w.publish_at));
        Spi::run_with_args(
            &format!(
                "UPDATE {ext}.indexnow_watches \
                    SET url = $2, ignore = $3, expression_columns = $4, url_sql = $5, \
                        visible = $6, publish_at = $7 \
                  WHERE id = $1 AND (url, ignore, expression_columns, url_sql, visible, publish_at) \
                                    IS DISTINCT FROM ($2, $3, $4, $5, $6, $7)"
            ),
            &[
                id.into(),
                url.into(),
                ignore.into(),
                read.into(),
                url_sql.into(),
                visible.into(),
                publish_at.into(),
            ],
        )
        .unwrap_or_else(|e| error!("indexnow: renaming a column in watch {id}: {e}"));
    }
}

/// `expression` naming `new` when it is the column `old` alone (`published`, `"Published"`,
/// `r.published`); an expression that does more is the maker's SQL, not rewritten.
fn renamed_bare_column(expression: &str, old: &str, new: &str) -> Option<String> {
    let e = expression.trim();
    let (prefix, name) = match e.strip_prefix("r.") {
        Some(rest) => ("r.", rest),
        None => ("", e),
    };
    let column = match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
        Some(quoted) if !quoted.replace("\"\"", "").contains('"') => quoted.replace("\"\"", "\""),
        Some(_) => return None,
        None if !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit() || c == '$')
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '$') =>
        {
            // (PostgreSQL folds A-Z only)
            name.to_ascii_lowercase()
        }
        None => return None,
    };
    (column == old).then(|| format!("{prefix}{}", crate::quote::quote_ident(new)))
}

/// `template` with its `{old}` parts naming `new`, when it has any and `new` can be written
/// in a template (no brace).
fn renamed_template(template: &str, old: &str, new: &str) -> Option<String> {
    if new.contains(['{', '}']) || new.trim() != new {
        return None;
    }
    let parts = template::parse(template).ok()?;
    if !parts
        .iter()
        .any(|p| matches!(p, Part::Column(c) if c == old))
    {
        return None;
    }
    Some(template::unparse(parts.into_iter().map(|p| match p {
        Part::Column(c) if c == old => Part::Column(new.to_string()),
        p => p,
    })))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_expression_that_is_a_column_alone_follows_its_column_renamed() {
        use super::renamed_bare_column as r;
        assert_eq!(r("published", "published", "live"), Some("\"live\"".into()));
        assert_eq!(
            r(" r.published ", "published", "live"),
            Some("r.\"live\"".into())
        );
        assert_eq!(r("\"Pub\"", "Pub", "Is Live"), Some("\"Is Live\"".into()));
        assert_eq!(r("Published", "published", "live"), Some("\"live\"".into()));
        assert_eq!(r("Published", "Published", "live"), None);
        assert_eq!(
            r("Öffentlich", "Öffentlich", "live"),
            Some("\"live\"".into())
        );
        assert_eq!(r("NOT published", "published", "live"), None);
        assert_eq!(r("published_at", "published", "live"), None);
        assert_eq!(r("\"a\"b\"", "a", "x"), None);
    }

    #[test]
    fn a_template_follows_its_column_renamed() {
        assert_eq!(
            super::renamed_template(
                "https://x.example/{{a}}/{slug}/{ id }-{slug}",
                "slug",
                "path"
            ),
            Some("https://x.example/{{a}}/{path}/{id}-{path}".into())
        );
        assert_eq!(
            super::renamed_template("https://x.example/{slug}", "title", "t"),
            None
        );
        assert_eq!(
            super::renamed_template("https://x.example/{slug}", "slug", "a}b"),
            None
        );
    }
}
