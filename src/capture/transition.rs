//! Reading a capture trigger's transition tables straight from their tuplestores, without SQL:
//! the UPDATE gate's side-by-side comparison of old and new rows, and the keys of an event.
//!
//! Why without SQL: a statement over a transition table costs its executor start-up, which for a
//! single-row save was more than the save (a window and a group to cut the keys into change sets);
//! and the gate must stop at the first difference, which a join cannot.

use super::cache::{KeyColumn, KeyKind};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashSet;
use std::fmt::Write;

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

/// For each set of attribute numbers, whether some row differs between `old` and `new` (read side
/// by side) in one of them. Stops reading when every set has a difference.
pub unsafe fn differing_sets(
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

/// The names of the columns whose value differs between the one row of `old` and the one row of
/// `new` (a single-row UPDATE), in the table's order; every column is compared (dropped ones
/// aside).
pub unsafe fn changed_columns(
    old: *mut pg_sys::Tuplestorestate,
    new: *mut pg_sys::Tuplestorestate,
    desc: pg_sys::TupleDesc,
) -> Vec<String> {
    let natts = (*desc).natts as i16;
    let (old_row, new_row) = (Reader::new(old, desc), Reader::new(new, desc));
    if !old_row.next(natts) || !new_row.next(natts) {
        return vec![];
    }
    (1..=natts)
        .filter(|&att| {
            let attr = crate::compat::attribute(desc, (att - 1) as usize);
            !attr.attisdropped && !old_row.same(&new_row, att)
        })
        .map(|att| {
            let attr = crate::compat::attribute(desc, (att - 1) as usize);
            std::ffi::CStr::from_ptr(attr.attname.data.as_ptr())
                .to_string_lossy()
                .into_owned()
        })
        .collect()
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
        let attr = crate::compat::attribute(self.desc, i);
        let (a, b) = (
            *(*self.slot).tts_values.add(i),
            *(*other.slot).tts_values.add(i),
        );
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            datum_image_eq(a, b, attr.attbyval, attr.attlen.into())
        })
    }

    /// Appends the current row's value of key column `column` as JSON (a key is never NULL).
    unsafe fn write_value(&self, column: &KeyColumn, out: &mut String) {
        let i = (column.attnum - 1) as usize;
        let value = *(*self.slot).tts_values.add(i);
        let _ = match column.kind {
            KeyKind::Int2 => write!(out, "{}", value.value() as i16),
            KeyKind::Int4 => write!(out, "{}", value.value() as i32),
            KeyKind::Int8 => write!(out, "{}", value.value() as i64),
            KeyKind::Text => {
                let text =
                    <&str as FromDatum>::from_polymorphic_datum(value, false, pg_sys::TEXTOID)
                        .unwrap_or_default();
                write!(out, "{}", serde_json::Value::from(text))
            }
        };
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

/// The keys of the rows in `stores` (transition tables of a relation with descriptor `desc`), each
/// written as `jsonb_build_array()` writes it (`[1]`, `[1,"fr"]`), handed to `each` as JSON arrays
/// of at most `per_array` keys as soon as one is full (a bulk statement's keys are never all in
/// memory at once). `distinct`: each key once.
pub unsafe fn event_keys<E>(
    stores: &[*mut pg_sys::Tuplestorestate],
    desc: pg_sys::TupleDesc,
    columns: &[KeyColumn],
    per_array: usize,
    distinct: bool,
    mut each: impl FnMut(String) -> Result<(), E>,
) -> Result<(), E> {
    let last = columns.iter().map(|c| c.attnum).max().unwrap_or(0);
    let (mut array, mut in_array) = (String::new(), 0);
    let mut key = String::new();
    let mut seen = HashSet::new();
    for &store in stores {
        let rows = Reader::new(store, desc);
        while rows.next(last) {
            key.clear();
            key.push('[');
            for (i, column) in columns.iter().enumerate() {
                if i > 0 {
                    key.push(',');
                }
                rows.write_value(column, &mut key);
            }
            key.push(']');
            if distinct && !seen.insert(key.clone()) {
                continue;
            }
            array.push(if in_array == 0 { '[' } else { ',' });
            array.push_str(&key);
            in_array += 1;
            if in_array == per_array {
                array.push(']');
                each(std::mem::take(&mut array))?;
                in_array = 0;
            }
        }
    }
    if in_array > 0 {
        array.push(']');
        each(array)?;
    }
    Ok(())
}
