//! `indexnow_capture()`: the trigger function on every watched table, and the UPDATE gate in front
//! of the capture statements.
//!
//! Every capture trigger (statement-level, with transition tables, plus TRUNCATE) calls this
//! function. It hands the event to `super::runner`, which runs, for each watch of the table, the
//! set-based statement `indexnow_watch()` generated (`super::plan`) — except that for an UPDATE
//! it first asks which watches have anything to do.
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

use super::runner::{self, Event, Watch};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;

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

#[pg_trigger]
fn indexnow_capture<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    let data = trigger.trigger_data();
    let mut watches = runner::watches(data);
    let is_update = Event::of(data) == Event::Update;
    if is_update && !data.tg_oldtable.is_null() && !data.tg_newtable.is_null() {
        let changed = changed(data, &watches);
        let mut each = changed.iter();
        watches.retain(|_| *each.next().expect("one flag per watch"));
    }
    if !watches.is_empty() {
        runner::run(data, &watches);
    }
    Ok(None)
}

/// For each watch, whether some row of this UPDATE differs in a column it compares: the primary
/// key and every column the watch does not ignore. Columns added to the table after the watch are
/// compared too: comparing more than the watch's statement does only makes it run.
fn changed(data: &pg_sys::TriggerData, watches: &[Watch]) -> Vec<bool> {
    let relation = data.tg_relation;
    // SAFETY: the descriptor and the key's attribute set belong to the open relation.
    let (key, attributes) = unsafe { (primary_key(relation), attributes((*relation).rd_att)) };
    let compared: Vec<Vec<i16>> = watches
        .iter()
        .map(|watch| {
            attributes
                .iter()
                .filter(|(att, name)| key.contains(att) || !watch.ignore.contains(name))
                .map(|(att, _)| *att)
                .collect()
        })
        .collect();
    let columns: Vec<&[i16]> = compared.iter().map(Vec::as_slice).collect();
    // SAFETY: both transition tables and the relation's descriptor belong to this trigger call.
    unsafe {
        differing_sets(
            data.tg_oldtable,
            data.tg_newtable,
            (*data.tg_relation).rd_att,
            &columns,
        )
    }
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
pub(super) fn own_schema(data: &pg_sys::TriggerData) -> String {
    // SAFETY: the trigger's function exists while it runs; the name is copied out at once.
    unsafe {
        let schema =
            pg_sys::get_namespace_name(pg_sys::get_func_namespace((*data.tg_trigger).tgfoid));
        CStr::from_ptr(schema).to_string_lossy().into_owned()
    }
}
