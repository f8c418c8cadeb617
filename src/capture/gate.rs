//! `indexnow_capture()`: the trigger function on every watched table, and the UPDATE gate in front
//! of the capture statements.
//!
//! Every capture trigger (statement-level, with transition tables, plus TRUNCATE) calls this
//! function. It hands the event to `indexnow_capture_statements()` (sql/capture.sql), which runs,
//! for each watch of the table, the set-based statement `indexnow_watch()` generated
//! (`super::plan`) — except that for an UPDATE it first asks which watches have anything to do.
//!
//! Why: a bulk UPDATE that changes only ignored columns (a view counter, `sort_order`,
//! `updated_at`) is common and must stay cheap, and the capture statement pays for pairing every
//! old row with its new row by key (a hash join over both transition tables) before it can see
//! that nothing public changed. Here the two transition tables are read side by side, row by row,
//! comparing only the columns a watch cares about (its key and every column not in its `ignore`
//! list): no SQL, no join, and a stop at the first difference. A watch whose columns are equal
//! in every row has nothing to queue, so its statement is not run.
//!
//! The comparison only decides whether the statement runs, never what it queues, so it may err
//! towards running it, and it does: values are compared as stored (`datum_image_eq`, which
//! detoasts), so two values a type calls equal but stores differently count as different and the
//! statement decides as before. It needs no assumption about row order either: if for every
//! position the old and new rows agree on the key and the compared columns, then every key has
//! the same compared columns before and after, which is exactly "the statement's pairs are all
//! unchanged". (PostgreSQL does write each updated row's old and new versions at the same
//! position, so in practice the first changed row is found where it is.)
//!
//! The statements themselves stay in plpgsql: each runs in its own subtransaction so that a
//! failing watch becomes a WARNING and the user's write succeeds; plpgsql's exception blocks do
//! that well. This function calls it through the function manager with the same trigger data and
//! the ids of the watches to run as the trigger's arguments (`TG_ARGV`).

use super::plan::quote_ident;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::OwnedPreparedStatement;
use pgrx::PgOid;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString};

unsafe extern "C-unwind" {
    // utils/datum.h (not in pgrx's bindings): equal stored images, toasted values detoasted.
    // Called through `pg_guard_ffi_boundary` (detoasting can raise an ERROR).
    fn datum_image_eq(
        value1: pg_sys::Datum,
        value2: pg_sys::Datum,
        typbyval: bool,
        typlen: i32,
    ) -> bool;
}

/// The watches of the table (`$1`) and their ignored columns.
const WATCHES_SQL: &str =
    "SELECT id, ignore FROM indexnow_watches WHERE tbl = $1::pg_catalog.regclass ORDER BY id";

#[pg_trigger]
fn indexnow_capture<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    let data = trigger.trigger_data();
    let is_update = data.tg_event & pg_sys::TRIGGER_EVENT_OPMASK == pg_sys::TRIGGER_EVENT_UPDATE;
    if is_update && !data.tg_oldtable.is_null() && !data.tg_newtable.is_null() {
        let watches = watches_with_changes(data);
        if !watches.is_empty() {
            run_statements(data, &watches);
        }
    } else {
        run_statements(data, &[]);
    }
    Ok(None)
}

thread_local! {
    /// [`WATCHES_SQL`] planned once per backend and extension schema: a single-row save of a
    /// watched table runs it every time, and planning took longer than running it.
    static WATCHES_PLANS: RefCell<HashMap<String, OwnedPreparedStatement>> =
        RefCell::new(HashMap::new());
}

/// The ids of the watches for which some row of this UPDATE differs in a compared column: the
/// primary key and every column the watch does not ignore. Columns added to the table after the
/// watch are compared too: comparing more than the watch's statement does only makes it run.
fn watches_with_changes(data: &pg_sys::TriggerData) -> Vec<i32> {
    let relation = data.tg_relation;
    // SAFETY: a trigger's relation is open for the duration of the call.
    let relid = unsafe { (*relation).rd_id };
    let schema = own_schema(data);
    let watches: Vec<(i32, Vec<String>)> = WATCHES_PLANS
        .with(|plans| {
            let mut plans = plans.borrow_mut();
            Spi::connect(|client| {
                if !plans.contains_key(&schema) {
                    // Named with its schema: a kept plan would otherwise look for the table where
                    // the extension was when it was planned.
                    let sql = WATCHES_SQL.replace(
                        "FROM indexnow_watches",
                        &format!("FROM {}.indexnow_watches", quote_ident(&schema)),
                    );
                    let plan = client.prepare(sql.as_str(), &[PgOid::from(pg_sys::OIDOID)])?;
                    plans.insert(schema.clone(), plan.keep());
                }
                client
                    .select(&plans[&schema], None, &[relid.into()])?
                    .map(|row| {
                        Ok((
                            row.get::<i32>(1)?.unwrap_or(0),
                            row.get(2)?.unwrap_or_default(),
                        ))
                    })
                    .collect::<Result<_, pgrx::spi::Error>>()
            })
        })
        .unwrap_or_else(|e| error!("indexnow: reading the watches of the table: {e}"));
    // SAFETY: as above; the descriptor and the key's attribute set belong to the open relation.
    let (key, attributes) = unsafe { (primary_key(relation), attributes((*relation).rd_att)) };
    let compared: Vec<Vec<i16>> = watches
        .iter()
        .map(|(_, ignore)| {
            attributes
                .iter()
                .filter(|(att, name)| key.contains(att) || !ignore.contains(name))
                .map(|(att, _)| *att)
                .collect()
        })
        .collect();
    let columns: Vec<&[i16]> = compared.iter().map(Vec::as_slice).collect();
    // SAFETY: both transition tables and the relation's descriptor belong to this trigger call.
    let changed = unsafe {
        differing_sets(
            data.tg_oldtable,
            data.tg_newtable,
            (*data.tg_relation).rd_att,
            &columns,
        )
    };
    watches
        .iter()
        .zip(changed)
        .filter(|(_, changed)| *changed)
        .map(|((id, _), _)| *id)
        .collect()
}

/// For each set of attribute numbers, whether some row differs between `old` and `new` (read side
/// by side) in one of them. Stops reading when every set has a difference.
unsafe fn differing_sets(
    old: *mut pg_sys::Tuplestorestate,
    new: *mut pg_sys::Tuplestorestate,
    desc: pg_sys::TupleDesc,
    sets: &[&[i16]],
) -> Vec<bool> {
    if pg_sys::tuplestore_tuple_count(old) != pg_sys::tuplestore_tuple_count(new) {
        return vec![true; sets.len()];
    }
    // A set with no column cannot see a change: it counts as changed, so its statement runs.
    let mut changed: Vec<bool> = sets.iter().map(|s| s.is_empty()).collect();
    let mut unchanged = changed.iter().filter(|c| !**c).count();
    let last = sets
        .iter()
        .flat_map(|s| s.iter())
        .copied()
        .max()
        .unwrap_or(0);
    if unchanged == 0 {
        return changed;
    }
    let old_rows = Reader::new(old, desc);
    let new_rows = Reader::new(new, desc);
    while unchanged > 0 {
        let (has_old, has_new) = (old_rows.next(last), new_rows.next(last));
        if !has_old || !has_new {
            if has_old != has_new {
                changed.iter_mut().for_each(|c| *c = true);
            }
            break;
        }
        for (set, changed) in sets.iter().zip(changed.iter_mut()) {
            if !*changed && set.iter().any(|&att| !old_rows.same(&new_rows, att)) {
                *changed = true;
                unchanged -= 1;
            }
        }
    }
    changed
}

/// A read of one transition table from its start, on a read pointer of its own (the statements
/// read it again afterwards with theirs).
struct Reader {
    store: *mut pg_sys::Tuplestorestate,
    slot: *mut pg_sys::TupleTableSlot,
    desc: pg_sys::TupleDesc,
}

impl Reader {
    unsafe fn new(store: *mut pg_sys::Tuplestorestate, desc: pg_sys::TupleDesc) -> Self {
        let pointer = pg_sys::tuplestore_alloc_read_pointer(store, pg_sys::EXEC_FLAG_REWIND as i32);
        pg_sys::tuplestore_select_read_pointer(store, pointer);
        pg_sys::tuplestore_rescan(store);
        let slot = pg_sys::MakeSingleTupleTableSlot(desc, &pg_sys::TTSOpsMinimalTuple);
        Reader { store, slot, desc }
    }

    /// Reads the next row and deforms its first `last` columns; false at the end.
    unsafe fn next(&self, last: i16) -> bool {
        if !pg_sys::tuplestore_gettupleslot(self.store, true, false, self.slot) {
            return false;
        }
        pg_sys::slot_getsomeattrs_int(self.slot, last.into());
        true
    }

    /// Whether attribute `att` (1-based) of the current rows of `self` and `other` is the same.
    unsafe fn same(&self, other: &Reader, att: i16) -> bool {
        let i = (att - 1) as usize;
        let (a_null, b_null) = (
            *(*self.slot).tts_isnull.add(i),
            *(*other.slot).tts_isnull.add(i),
        );
        if a_null || b_null {
            return a_null == b_null;
        }
        let attr = &*(*self.desc).attrs.as_ptr().add(i);
        let (a, b) = (
            *(*self.slot).tts_values.add(i),
            *(*other.slot).tts_values.add(i),
        );
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            datum_image_eq(a, b, attr.attbyval, attr.attlen.into())
        })
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // SAFETY: the slot was made by `new` and is used by nobody else; read pointer 0 is the
        // one the tuplestore had active before.
        unsafe {
            pg_sys::ExecDropSingleTupleTableSlot(self.slot);
            pg_sys::tuplestore_select_read_pointer(self.store, 0);
        }
    }
}

/// Runs `indexnow_capture_statements()` for this trigger event, as if it were the trigger
/// function, with `watches` (none: all of the table's) as its arguments.
fn run_statements(data: &pg_sys::TriggerData, watches: &[i32]) {
    // In this function's own schema, the extension's; a catalog cache lookup, not a query (this
    // runs for every statement that writes a watched table).
    let schema = CString::new(own_schema(data)).expect("a schema name has no NUL");
    // SAFETY: catalog lookup by name; the list is built for the call.
    let function = unsafe {
        let mut name = pgrx::PgList::<pg_sys::Node>::new();
        name.push(pg_sys::makeString(schema.as_ptr().cast_mut()).cast());
        name.push(pg_sys::makeString(c"indexnow_capture_statements".as_ptr().cast_mut()).cast());
        pg_sys::LookupFuncName(name.into_pg(), 0, std::ptr::null(), false)
    };
    let args: Vec<CString> = watches
        .iter()
        .map(|id| CString::new(id.to_string()).expect("digits"))
        .collect();
    let mut argv: Vec<*mut std::ffi::c_char> = args.iter().map(|a| a.as_ptr().cast_mut()).collect();
    // SAFETY: everything passed lives until the call returns; the callee reads the trigger data
    // and its arguments only during the call (plpgsql copies TG_ARGV).
    unsafe {
        let mut flinfo: pg_sys::FmgrInfo = std::mem::zeroed();
        pg_sys::fmgr_info(function, &mut flinfo);
        let mut trigger: pg_sys::Trigger = *data.tg_trigger;
        trigger.tgnargs = argv.len() as i16;
        trigger.tgargs = if argv.is_empty() {
            std::ptr::null_mut()
        } else {
            argv.as_mut_ptr()
        };
        let mut event: pg_sys::TriggerData = *data;
        event.tg_trigger = &mut trigger;
        let mut fcinfo = pg_sys::FunctionCallInfoBaseData {
            flinfo: &mut flinfo,
            context: (&mut event as *mut pg_sys::TriggerData).cast(),
            ..Default::default()
        };
        let call = flinfo.fn_addr.expect("a function manager entry");
        pg_sys::ffi::pg_guard_ffi_boundary(|| call(&mut fcinfo));
    }
}

/// The attribute numbers of the relation's primary key.
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

/// The relation's columns that are not dropped: (attribute number, name).
unsafe fn attributes(desc: pg_sys::TupleDesc) -> Vec<(i16, String)> {
    let natts = (*desc).natts as usize;
    (0..natts)
        .map(|i| &*(*desc).attrs.as_ptr().add(i))
        .filter(|a| !a.attisdropped)
        .map(|a| {
            let name = CStr::from_ptr(a.attname.data.as_ptr())
                .to_string_lossy()
                .into_owned();
            (a.attnum, name)
        })
        .collect()
}

/// The schema of the trigger's function: the extension's.
fn own_schema(data: &pg_sys::TriggerData) -> String {
    // SAFETY: the trigger's function exists while it runs; the name is copied out at once.
    unsafe {
        let schema =
            pg_sys::get_namespace_name(pg_sys::get_func_namespace((*data.tg_trigger).tgfoid));
        CStr::from_ptr(schema).to_string_lossy().into_owned()
    }
}
