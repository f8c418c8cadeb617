//! `_indexnow_capture()`: the trigger function on every watched table, and the UPDATE gate in front
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

use super::derive::{self, Rows, Watch};
use super::statements::{event_keys, record_change_set};
use super::{partitions, related};
use crate::queue::Reason;
use crate::{plan_cache, wake};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::JsonB;
use std::ffi::CStr;

/// At most this many rows in each transition table: the recording statement's plan is kept per
/// backend (a plan made for one row must not meet a million).
const KEEP_PLAN_ROWS: i64 = 100;

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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Event {
    Insert,
    Update,
    Delete,
    Truncate,
}

impl Event {
    fn of(data: &pg_sys::TriggerData) -> Event {
        match data.tg_event & pg_sys::TRIGGER_EVENT_OPMASK {
            pg_sys::TRIGGER_EVENT_INSERT => Event::Insert,
            pg_sys::TRIGGER_EVENT_UPDATE => Event::Update,
            pg_sys::TRIGGER_EVENT_DELETE => Event::Delete,
            _ => Event::Truncate,
        }
    }
}

// Its SQL name starts with `_` as every internal function's does; `#[pg_trigger]` takes no name,
// so the declaration is written out (as pgrx generates it, under that name).
#[pg_trigger(sql = r#"
CREATE FUNCTION "_indexnow_capture"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'indexnow_capture_wrapper';
"#)]
fn indexnow_capture<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    let data = trigger.trigger_data();
    // SAFETY: the trigger's own function exists while it runs.
    let ext = crate::extension::schema_of_function(unsafe { (*data.tg_trigger).tgfoid });
    // SAFETY: a trigger's relation is open for the duration of the call.
    let written = unsafe { (*data.tg_relation).rd_id };
    let mut watches = derive::watch_heads_of(&ext, written);
    // A partition or inheritance child written directly: its rows are the watched table's above.
    let mut relid = written;
    if watches.is_empty() {
        if let Some(above) = partitions::watched_ancestor(&ext, written) {
            watches = derive::watch_heads_of(&ext, above);
            relid = above;
        }
    }
    let relations = related::of_table(&ext, written);
    let event = Event::of(data);
    // SAFETY: the transition tables, when there are any, belong to this trigger call.
    let rows = unsafe {
        [data.tg_oldtable, data.tg_newtable]
            .iter()
            .filter(|t| !t.is_null())
            .map(|t| pg_sys::tuplestore_tuple_count(*t))
            .max()
            .unwrap_or(0)
    };
    if (watches.is_empty() && relations.is_empty()) || (event != Event::Truncate && rows == 0) {
        return Ok(None);
    }
    let mut key_changed = false;
    let mut any_changed = true;
    if event == Event::Update {
        // The watches' own columns, and every column for the watches that read this table.
        let mut ignores: Vec<&[String]> = watches.iter().map(|w| w.ignore.as_slice()).collect();
        ignores.push(&[]);
        let (mut changed, key) = changed(data, &ignores);
        key_changed = key;
        any_changed = changed.pop().unwrap_or(true);
        let mut each = changed.iter();
        watches.retain(|_| *each.next().expect("one flag per watch"));
    }
    // SAFETY: a plain read of this backend's isolation level.
    let read_committed = unsafe { pg_sys::XactIsoLevel } == pg_sys::XACT_READ_COMMITTED as i32;
    if !watches.is_empty() {
        capture_own_rows(
            data,
            &ext,
            relid,
            &watches,
            event,
            rows,
            key_changed,
            read_committed,
        );
    }
    if !relations.is_empty() && any_changed && event != Event::Truncate {
        capture_dependents(data, &ext, &relations, event, read_committed);
    }
    crate::queue::note_own_request();
    // The workers look at the queue (or derive the change set) when, and if, this transaction
    // commits. Waking when nothing was queued (a draft saved) costs the worker one idle pass.
    wake::worker_at_commit();
    Ok(None)
}

/// Runs `f` in an SPI connection where the trigger's transition tables are visible as
/// `indexnow_old` and `indexnow_new`.
fn with_transition_tables<R>(
    data: &pg_sys::TriggerData,
    f: impl FnOnce(&mut pgrx::spi::SpiClient<'_>) -> Result<R, pgrx::spi::Error>,
) -> R {
    Spi::connect_mut(|client| {
        // SAFETY: the trigger data outlives this connection.
        let registered =
            unsafe { pg_sys::SPI_register_trigger_data(std::ptr::from_ref(data).cast_mut()) };
        if registered < 0 {
            error!("indexnow: could not register the transition tables ({registered})");
        }
        f(client)
    })
    .unwrap_or_else(|e| error!("indexnow: could not record the rows this statement changed: {e}"))
}

/// At most this many rows (`indexnow.derive_at_write`), written at READ COMMITTED: the event is
/// derived in the writing statement, so a save is in the queue when it commits (its plan kept per
/// backend). Larger events, every event when the setting is 0 (the cheapest writes: a save
/// then costs its change set's insert), and every event at REPEATABLE READ or SERIALIZABLE (whose
/// snapshot would make the queue upsert fail against a sender's updates) are recorded as change
/// sets and derived after the commit.
fn derive_at_write() -> i64 {
    i64::from(crate::guc::DERIVE_AT_WRITE.get())
}

/// The rows of the written table itself: derived at once when the event is small and the writer
/// at READ COMMITTED, else recorded as a change set.
#[allow(clippy::too_many_arguments)]
fn capture_own_rows(
    data: &pg_sys::TriggerData,
    ext: &str,
    relid: pg_sys::Oid,
    watches: &[Watch],
    event: Event,
    rows: i64,
    key_changed: bool,
    read_committed: bool,
) {
    let key = if relid == unsafe { (*data.tg_relation).rd_id } {
        // SAFETY: a trigger's relation is open for the duration of the call.
        unsafe { key_names(data.tg_relation) }
    } else {
        partitions::key_names(relid)
    };
    let sources: &[&str] = match event {
        Event::Insert => &["indexnow_new"],
        Event::Delete => &["indexnow_old"],
        Event::Update if key_changed => &["indexnow_new", "indexnow_old"],
        Event::Update => &["indexnow_new"],
        Event::Truncate => &[],
    };
    let in_statement = event != Event::Truncate && rows <= derive_at_write() && read_committed;
    let ids: Option<Vec<i32>> =
        (event == Event::Update).then(|| watches.iter().map(|w| w.id).collect());
    let keys = with_transition_tables(data, |client| {
        if in_statement {
            return plan_cache::write(client, &event_keys(&key, sources), &[])?
                .first()
                .get_one::<JsonB>();
        }
        if event == Event::Truncate {
            plan_cache::write(
                client,
                // (once per transaction: a TRUNCATE of a partitioned table fires the triggers of
                // the table and of every partition)
                &format!(
                    "INSERT INTO {ext}.indexnow_changes (tbl, watches, keys) \
                     SELECT $1, $2, NULL WHERE NOT EXISTS ( \
                       SELECT FROM {ext}.indexnow_changes c \
                        WHERE c.tbl = $1 AND c.keys IS NULL AND c.watches IS NOT DISTINCT FROM $2 \
                          AND {ext}.{}(c.xmin::text::bigint))",
                    crate::extension::written_by_this_transaction()
                ),
                &[relid.into(), ids.clone().into()],
            )?;
        } else {
            let sql = record_change_set(ext, &key, sources);
            if rows <= KEEP_PLAN_ROWS {
                plan_cache::write(client, &sql, &[relid.into(), ids.clone().into()])?;
            } else {
                client.update(sql.as_str(), None, &[relid.into(), ids.clone().into()])?;
            }
        }
        Ok(None)
    });
    if let Some(JsonB(keys)) = keys {
        let ids = watches.iter().map(|w| w.id).collect();
        for watch in derive::watches_by_id(ext, ids) {
            if derive::derive(&watch, Rows::Keyed(keys.clone()), Reason::Deleted).is_err() {
                record_keys(ext, &watch, keys.clone()); // a deadlock or the like: derived later
            }
        }
    }
}

/// The watched rows that read the written rows (`super::related`): found through foreign keys,
/// then derived or recorded as the watched table's own writes are.
fn capture_dependents(
    data: &pg_sys::TriggerData,
    ext: &str,
    relations: &[related::Dependents],
    event: Event,
    read_committed: bool,
) {
    let sources: &[&str] = match event {
        Event::Insert => &["indexnow_new"],
        Event::Delete => &["indexnow_old"],
        _ => &["indexnow_new", "indexnow_old"],
    };
    let changed = related::changed_rows(sources);
    let found: Vec<(i32, Option<JsonB>)> = with_transition_tables(data, |client| {
        let mut found = vec![];
        for r in relations {
            let sql = format!(
                "SELECT pg_catalog.jsonb_agg(DISTINCT x.k) FROM ({}) x",
                r.dependents.replace(related::CHANGED, &changed)
            );
            found.push((
                r.watch_id,
                client
                    .update(sql.as_str(), None, &[])?
                    .first()
                    .get_one::<JsonB>()?,
            ));
        }
        Ok(found)
    });
    for (watch_id, keys) in found {
        let Some(JsonB(keys)) = keys else { continue };
        let n = keys.as_array().map_or(0, Vec::len) as i64;
        let Some(watch) = derive::watches_by_id(ext, vec![watch_id]).pop() else {
            continue;
        };
        if read_committed && n <= derive_at_write() {
            if derive::derive(&watch, Rows::Keyed(keys.clone()), Reason::Deleted).is_err() {
                record_keys(ext, &watch, keys); // a deadlock or the like: derived later
            }
        } else {
            record_keys(ext, &watch, keys);
        }
    }
}

/// For each watch, whether some row of this UPDATE differs in a column it compares: the primary
/// key and every column the watch does not ignore (columns added to the table after the watch are
/// compared too: comparing more than the watch's statement does only makes it derive); and
/// whether a row's key may have changed (then the old keys are recorded too: their rows are gone).
///
/// The key counts as changed when the UPDATE's SET list names a key column (PostgreSQL's
/// `tg_updatedcols`): reading both transition tables to their end to prove every key equal cost
/// a bulk UPDATE more than recording its keys. A key changed by a BEFORE trigger alone is not seen
/// (the old row's URL then waits for the next reconcile).
fn changed(data: &pg_sys::TriggerData, ignores: &[&[String]]) -> (Vec<bool>, bool) {
    let relation = data.tg_relation;
    // SAFETY: the descriptor and the key's attribute set belong to the open relation.
    let (key, attributes) = unsafe { (primary_key(relation), attributes((*relation).rd_att)) };
    let compared: Vec<Vec<i16>> = ignores
        .iter()
        .map(|ignore| {
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
    // SAFETY: the set of updated columns belongs to this trigger call (NULL: unknown).
    let key_set = unsafe {
        data.tg_updatedcols.is_null()
            || key.iter().any(|&att| {
                pg_sys::bms_is_member(
                    i32::from(att) - pg_sys::FirstLowInvalidHeapAttributeNumber,
                    data.tg_updatedcols,
                )
            })
    };
    (changed, key_set)
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
        let attr = crate::compat::attribute(self.desc, i);
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
        .map(|i| crate::compat::attribute(desc, i))
        .filter(|a| !a.attisdropped)
        .map(|a| {
            let name = CStr::from_ptr(a.attname.data.as_ptr())
                .to_string_lossy()
                .into_owned();
            (a.attnum, name)
        })
        .collect()
}

/// The names of the relation's primary key columns, in the key's order.
unsafe fn key_names(relation: pg_sys::Relation) -> Vec<String> {
    let index = crate::compat::primary_key_index(relation);
    if index == pg_sys::InvalidOid {
        error!("indexnow: a watched table has no primary key any more");
    }
    let desc = (*relation).rd_att;
    let index_rel = pg_sys::index_open(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    let form = &*(*index_rel).rd_index;
    let names = form
        .indkey
        .values
        .as_slice(form.indnkeyatts as usize)
        .iter()
        .map(|&att| {
            let a = crate::compat::attribute(desc, att as usize - 1);
            CStr::from_ptr(a.attname.data.as_ptr())
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    pg_sys::index_close(index_rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    names
}

/// Records `keys` (`[[k0, ...], ...]`) of `watch`'s table as change sets for that watch.
fn record_keys(ext: &str, watch: &Watch, keys: serde_json::Value) {
    let sql = format!(
        "INSERT INTO {ext}.indexnow_changes (tbl, watches, keys) \
         SELECT $1::pg_catalog.regclass::pg_catalog.oid, ARRAY[$2], pg_catalog.jsonb_agg(e) \
           FROM pg_catalog.jsonb_array_elements($3) WITH ORDINALITY AS a(e, n) \
          GROUP BY (n - 1) / {}",
        super::statements::CHANGE_SET_KEYS
    );
    Spi::run_with_args(
        &sql,
        &[
            watch.table.as_str().into(),
            watch.id.into(),
            JsonB(keys).into(),
        ],
    )
    .unwrap_or_else(|e| error!("indexnow: could not record the rows this statement changed: {e}"));
}
