//! `_indexnow_capture()`: the trigger function on every watched table.
//!
//! Every capture trigger (statement-level, with transition tables, plus TRUNCATE) calls this
//! function. For each event it takes what this backend knows of the table (`super::cache`: the
//! watched tables whose rows it writes, each with its watches and key, and the related-table
//! watches that read it), and for an UPDATE first asks which
//! watches have anything to do (the UPDATE gate); then it derives the event in the statement
//! (small events at READ COMMITTED, `indexnow.derive_at_write`) or records its keys as change
//! sets, and finds the watched rows that read the written rows (related tables).
//!
//! The UPDATE gate. A bulk UPDATE that changes only ignored columns (a view counter,
//! `sort_order`, `updated_at`) is common and must stay cheap. The two transition tables are read
//! side by side, row by row (`super::transition`), comparing only the columns a watch cares
//! about (its key and every column not in its `ignore` list): no SQL, no join, and a stop at the
//! first difference. A watch whose columns are equal in every row has nothing to derive and is
//! skipped.
//!
//! The comparison only decides whether the watch derives, never what it queues, so it may err
//! towards deriving, and it does: values are compared as stored (`datum_image_eq`, which
//! detoasts), so two values a type calls equal but stores differently count as different and the
//! derivation decides. It needs no assumption about row order either: if for every position the
//! old and new rows agree on the key and the compared columns, then every key has the same
//! compared columns before and after. (PostgreSQL does write each updated row's old and new
//! versions at the same position, so in practice the first changed row is found where it is.)

use super::{cache, related, transition};
use crate::derive::change_sets;
use crate::derive::{self, Watch};
use crate::{plan_cache, wake};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::JsonB;

/// At most this many rows in each transition table: the recording statement's plan is kept per
/// backend (a plan made for one row must not meet a million).
const KEEP_PLAN_ROWS: i64 = 100;

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
    let table = cache::table(unsafe { (*data.tg_trigger).tgfoid }, data.tg_relation);
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
    if (table.captures.is_empty() && table.relations.is_empty())
        || (event != Event::Truncate && rows == 0)
    {
        return Ok(None);
    }
    let gate = if event == Event::Update {
        Some(changed(data, &table))
    } else {
        None
    };
    // SAFETY: a plain read of this backend's isolation level.
    let read_committed = unsafe { pg_sys::XactIsoLevel } == pg_sys::XACT_READ_COMMITTED as i32;
    for (i, capture) in table.captures.iter().enumerate() {
        let (watches, key_changed): (Vec<&Watch>, bool) = match &gate {
            Some(gate) => {
                let mut each = gate.watches[i].iter();
                let watches = capture
                    .watches
                    .iter()
                    .filter(|_| *each.next().expect("one flag per watch"))
                    .collect();
                (watches, gate.key_set[i])
            }
            None => (capture.watches.iter().collect(), false),
        };
        if !watches.is_empty() {
            capture_own_rows(
                data,
                &table,
                capture,
                &watches,
                event,
                rows,
                key_changed,
                read_committed,
            );
        }
    }
    let related_changed = gate.as_ref().is_none_or(|g| g.related);
    if !table.relations.is_empty() && related_changed && event != Event::Truncate {
        capture_dependents(
            data,
            &table.ext,
            &table.plan_tag,
            &table.relations,
            event,
            rows,
            read_committed,
        );
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

/// At most this many rows (`indexnow.derive_at_write`, 0 by default), written at READ COMMITTED:
/// the event is derived in the writing statement, so a save is in the queue when it commits (its
/// plan kept per backend). Every other event, so every event by default (the cheapest writes: a
/// save then costs its change set's insert), and every event at REPEATABLE READ or SERIALIZABLE
/// (whose snapshot would make the queue upsert fail against a sender's updates), is recorded as
/// change sets and derived after the commit by a worker its commit wakes.
///
/// Not between a server's restart onto a new library and `ALTER EXTENSION indexnow UPDATE`: the
/// new library's statements may name columns the old tables lack; recording works with both.
fn derive_at_write() -> i64 {
    let rows = i64::from(crate::guc::DERIVE_AT_WRITE.get());
    if rows > 0 && crate::extension::version_mismatch().is_some() {
        return 0;
    }
    rows
}

/// The written rows, as rows of one watched table (`capture`): derived at once when the event
/// is small and the writer at READ COMMITTED, else recorded as a change set.
#[allow(clippy::too_many_arguments)]
fn capture_own_rows(
    data: &pg_sys::TriggerData,
    table: &cache::Table,
    capture: &cache::Capture,
    watches: &[&Watch],
    event: Event,
    rows: i64,
    key_changed: bool,
    read_committed: bool,
) {
    let ext = &table.ext;
    let (old, new) = (data.tg_oldtable, data.tg_newtable);
    let (sources, stores): (&[&str], Vec<_>) = match event {
        Event::Insert => (&["indexnow_new"], vec![new]),
        Event::Delete => (&["indexnow_old"], vec![old]),
        Event::Update if key_changed => (&["indexnow_new", "indexnow_old"], vec![new, old]),
        Event::Update => (&["indexnow_new"], vec![new]),
        Event::Truncate => (&[], vec![]),
    };
    let ids: Option<Vec<i32>> =
        (event == Event::Update).then(|| watches.iter().map(|w| w.id).collect());
    let relid = capture.watched;
    // (a parent written without a key column of the watched table below it: its rows are
    // known only by reading that table)
    if event == Event::Truncate || capture.key_attnums.is_none() {
        change_sets::record_whole_table(ext, relid, ids);
        return;
    }
    let in_statement = rows <= derive_at_write() && read_committed;
    // SAFETY: the relation's descriptor belongs to this trigger call.
    let desc = unsafe { (*data.tg_relation).rd_att };
    // (counted when its change set is derived: `crate::derive::column_changes`)
    let columns = (event == Event::Update && rows == 1 && !in_statement)
        .then(|| tracked_columns(data))
        .flatten();
    let keys: Option<serde_json::Value> = if in_statement {
        match &capture.key_columns {
            // The keys, read here when their types allow (else by SQL over the transition tables).
            Some(columns) => {
                let mut keys = None;
                // SAFETY: the transition tables and the descriptor belong to this trigger call.
                let _ = unsafe {
                    transition::event_keys(&stores, desc, columns, usize::MAX, true, |array| {
                        keys = Some(parse_keys(&array));
                        Ok::<_, ()>(())
                    })
                };
                keys
            }
            None => with_transition_tables(data, |client| {
                let sql = format!(
                    "{}{}",
                    table.plan_tag,
                    change_sets::event_keys_sql(&capture.key, sources)
                );
                plan_cache::write(client, &sql, &[])?
                    .first()
                    .get_one::<JsonB>()
            })
            .map(|JsonB(keys)| keys),
        }
    } else {
        match &capture.key_columns {
            Some(key_columns) => record_keys_read_here(
                ext,
                relid,
                ids.clone(),
                &stores,
                desc,
                key_columns,
                &columns,
            ),
            None => with_transition_tables(data, |client| {
                let sql = format!(
                    "{}{}",
                    table.plan_tag,
                    change_sets::recording_sql(ext, &capture.key, sources, columns.is_some())
                );
                let mut args = vec![relid.into(), ids.clone().into()];
                if let Some(columns) = &columns {
                    args.push(columns.clone().into());
                }
                if rows <= KEEP_PLAN_ROWS {
                    plan_cache::write(client, &sql, &args)?;
                } else {
                    client.update(sql.as_str(), None, &args)?;
                }
                Ok(())
            }),
        }
        None
    };
    if let Some(keys) = keys {
        let edited = event == Event::Update && !key_changed;
        for watch in watches {
            if derive::derive_at_write(watch, keys.clone(), edited).is_err() {
                // a deadlock or the like, or rows a deferred key leaves without a URL: derived
                // later
                change_sets::record_keys(ext, watch.oid, Some(vec![watch.id]), keys.clone());
            }
        }
    }
}

/// The columns a single-row UPDATE changed, when `indexnow.track_columns` is on and this
/// database's SQL is this library's (between a restart onto a new library and the update, its
/// change sets have no place for them).
fn tracked_columns(data: &pg_sys::TriggerData) -> Option<Vec<String>> {
    if !crate::guc::TRACK_COLUMNS.get() || crate::extension::version_mismatch().is_some() {
        return None;
    }
    // SAFETY: both transition tables and the relation's descriptor belong to this trigger call.
    Some(unsafe {
        transition::changed_columns(
            data.tg_oldtable,
            data.tg_newtable,
            (*data.tg_relation).rd_att,
        )
    })
}

/// Keys written by `transition::event_keys` (valid JSON by construction).
fn parse_keys(array: &str) -> serde_json::Value {
    serde_json::from_str(array)
        .unwrap_or_else(|e| error!("indexnow: a key read from a transition table: {e}"))
}

/// Records change sets of `relid` for the watches `ids` (NULL: all): the keys of the rows in
/// `stores`, read here, each change set inserted as soon as it is full.
fn record_keys_read_here(
    ext: &str,
    relid: pg_sys::Oid,
    ids: Option<Vec<i32>>,
    stores: &[*mut pg_sys::Tuplestorestate],
    desc: pg_sys::TupleDesc,
    key_columns: &[cache::KeyColumn],
    changed: &Option<Vec<String>>,
) {
    Spi::connect_mut(|client| {
        // SAFETY: the transition tables and the descriptor belong to this trigger call.
        unsafe {
            transition::event_keys(
                stores,
                desc,
                key_columns,
                change_sets::KEYS_AT_MOST,
                false,
                |keys| change_sets::record(client, ext, relid, ids.clone(), keys, changed),
            )
        }
    })
    .unwrap_or_else(|e| error!("indexnow: could not record the rows this statement changed: {e}"));
}

/// The watched rows that read the written rows (`super::related`): found through foreign keys,
/// then derived or recorded as the watched table's own writes are.
fn capture_dependents(
    data: &pg_sys::TriggerData,
    ext: &str,
    plan_tag: &str,
    relations: &[cache::Relation],
    event: Event,
    rows: i64,
    read_committed: bool,
) {
    let sources: &[&str] = match event {
        Event::Insert => &["indexnow_new"],
        Event::Delete => &["indexnow_old"],
        _ => &["indexnow_new", "indexnow_old"],
    };
    let changed = related::changed_rows(sources);
    for relation in relations {
        let watch = &relation.watch;
        if relation.whole_table {
            change_sets::record_whole_table(ext, watch.oid, Some(vec![watch.id]));
            continue;
        }
        let sql = format!(
            "{plan_tag}SELECT pg_catalog.jsonb_agg(DISTINCT x.k) FROM ({}) x",
            relation.dependents.replace(related::CHANGED, &changed)
        );
        // The query joins the tables between the written one and the watched one by name: one
        // renamed behind the event trigger's back (or a watch that could not follow an ALTER)
        // makes it fail. The write goes on, and the watch derives every row instead.
        let found = crate::subtransaction::run(|| {
            with_transition_tables(data, |client| {
                let table = if rows <= KEEP_PLAN_ROWS {
                    plan_cache::write(client, &sql, &[])?
                } else {
                    client.update(sql.as_str(), None, &[])?
                };
                table.first().get_one::<JsonB>()
            })
        });
        let keys = match found {
            Ok(Some(JsonB(keys))) => keys,
            Ok(None) => continue,
            // A deadlock or serialization failure is the writer's to retry, as without indexnow.
            Err(failure) if failure.transient => {
                ereport!(ERROR, failure.code, failure.message);
            }
            Err(failure) => {
                dependents_failed(data, watch, &failure);
                change_sets::record_whole_table(ext, watch.oid, Some(vec![watch.id]));
                continue;
            }
        };
        let n = keys.as_array().map_or(0, Vec::len) as i64;
        if read_committed && n <= derive_at_write() {
            if derive::derive_at_write(watch, keys.clone(), false).is_err() {
                // a deadlock or the like, or rows a deferred key leaves without a URL: derived
                // later
                change_sets::record_keys(ext, watch.oid, Some(vec![watch.id]), keys);
            }
        } else {
            change_sets::record_keys(ext, watch.oid, Some(vec![watch.id]), keys);
        }
    }
}

/// The one WARNING of a related table's write whose watched rows could not be found.
fn dependents_failed(
    data: &pg_sys::TriggerData,
    watch: &Watch,
    failure: &crate::subtransaction::Failure,
) {
    // SAFETY: the written relation belongs to this trigger call.
    let written = unsafe { (*data.tg_relation).rd_id };
    let label = crate::plan_cache::get_one::<String>(
        "SELECT $1::pg_catalog.oid::pg_catalog.regclass::pg_catalog.text",
        &[written.into()],
    )
    .ok()
    .flatten()
    .unwrap_or_else(|| written.to_u32().to_string());
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!(
            "indexnow: the watch of {} for {} could not find the rows that read {label}: {}; \
             every row of the watch is derived again",
            watch.table, watch.pattern, failure.message
        ),
        "indexnow",
    )
    .set_hint(
        "The write succeeded. Make the watch again with indexnow_watch() for the tables as they \
         are now; until then each write to a related table derives the whole watched table.",
    )
    .report(PgLogLevel::WARNING);
}

/// What the UPDATE gate found.
struct Gate {
    /// Per capture, per watch: whether some row differs in a column the watch compares.
    watches: Vec<Vec<bool>>,
    /// Per capture: whether a row's key may have changed (then the old keys are recorded too:
    /// their rows are gone).
    key_set: Vec<bool>,
    /// Whether some row differs in a column the related-table watches compare.
    related: bool,
}

/// For each watch of each capture, whether some row of this UPDATE differs in a column it
/// compares: its key and every column the watch does not ignore (columns added to the table
/// after the watch are compared too: comparing more than the watch's statement does only makes
/// it derive); whether a row's key may have changed; and the same for the related-table watches.
///
/// The key counts as changed when the UPDATE's SET list names a key column (PostgreSQL's
/// `tg_updatedcols`): reading both transition tables to their end to prove every key equal cost
/// a bulk UPDATE more than recording its keys. A key changed by a BEFORE trigger alone is not seen
/// (the old row's URL then waits for the next reconcile).
fn changed(data: &pg_sys::TriggerData, table: &cache::Table) -> Gate {
    let mut columns: Vec<&[i16]> = table
        .captures
        .iter()
        .flat_map(|c| c.compared.iter().map(Vec::as_slice))
        .collect();
    columns.push(&table.related_compared);
    // SAFETY: both transition tables and the relation's descriptor belong to this trigger call.
    let mut flags = unsafe {
        transition::differing_sets(
            data.tg_oldtable,
            data.tg_newtable,
            (*data.tg_relation).rd_att,
            &columns,
        )
    }
    .into_iter();
    let watches = table
        .captures
        .iter()
        .map(|c| flags.by_ref().take(c.compared.len()).collect())
        .collect();
    let related = flags.next().unwrap_or(true);
    let key_set = table
        .captures
        .iter()
        .map(|c| match &c.key_attnums {
            // SAFETY: the set of updated columns belongs to this trigger call (NULL: unknown).
            Some(key) => unsafe {
                data.tg_updatedcols.is_null()
                    || key.iter().any(|&att| {
                        pg_sys::bms_is_member(
                            i32::from(att) - pg_sys::FirstLowInvalidHeapAttributeNumber,
                            data.tg_updatedcols,
                        )
                    })
            },
            None => true,
        })
        .collect();
    Gate {
        watches,
        key_set,
        related,
    }
}
