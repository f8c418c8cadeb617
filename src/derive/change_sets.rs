//! Change sets (`indexnow_changes`): which rows of a watched table a statement touched, recorded
//! by the writing statement and taken by a deriver after it commits (`super`). Every
//! statement that reads or writes that table is here, with the SQL that reads a trigger event's
//! keys for them.
//!
//! A change set names its table, the watches to derive (NULL: all of the table's), and the keys of
//! the rows (`[[k0, ...], ...]`, at most [`KEYS_AT_MOST`]), or no keys for the whole table (a
//! TRUNCATE, a partition attached or detached: capture's `partitions`).
//!
//! Keys come from three places: read from the transition tables in Rust (capture's `transition`,
//! integer and text keys), each full change set inserted by [`record`]; read by SQL over them
//! (other key types), [`recording_sql`]; or found by a related-table query, or given back by a
//! derivation that could not run in the statement, [`record_keys`].

use super::statements::row_key;
use crate::plan_cache;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use serde_json::Value;

/// At most this many keys in one change set: a derivation takes one at a time, in a transaction
/// of its own when a worker runs it.
pub const KEYS_AT_MOST: usize = 10_000;

/// At most this many change sets are derived together.
pub const MERGED_AT_MOST: usize = 100;

/// Records one change set of `tbl` for the watches `watches` (NULL: all) whose keys are `keys`, a
/// JSON array written as text (read from a transition table by capture's `transition`), and, for
/// a single-row UPDATE tracked (`indexnow.track_columns`), the columns it changed.
pub fn record(
    client: &mut SpiClient<'_>,
    ext: &str,
    tbl: pg_sys::Oid,
    watches: Option<Vec<i32>>,
    keys: String,
    columns: &Option<Vec<String>>,
) -> Result<(), pgrx::spi::Error> {
    match columns {
        None => plan_cache::write(
            client,
            &format!(
                "INSERT INTO {ext}.indexnow_changes (tbl, watches, keys) \
                 VALUES ($1, $2, $3::pg_catalog.text::pg_catalog.jsonb)"
            ),
            &[tbl.into(), watches.into(), keys.into()],
        ),
        Some(columns) => plan_cache::write(
            client,
            &format!(
                "INSERT INTO {ext}.indexnow_changes (tbl, watches, keys, columns) \
                 VALUES ($1, $2, $3::pg_catalog.text::pg_catalog.jsonb, $4)"
            ),
            &[
                tbl.into(),
                watches.into(),
                keys.into(),
                columns.clone().into(),
            ],
        ),
    }
    .map(|_| ())
}

/// Records `keys` (`[[k0, ...], ...]`) of `tbl` for `watches`, cut into change sets.
pub fn record_keys(ext: &str, tbl: pg_sys::Oid, watches: Option<Vec<i32>>, keys: Value) {
    let Value::Array(keys) = keys else {
        error!("indexnow: the keys of a change set are not a JSON array: {keys}")
    };
    Spi::connect_mut(|client| {
        for chunk in keys.chunks(KEYS_AT_MOST) {
            let text = serde_json::to_string(chunk).expect("JSON values are written");
            record(client, ext, tbl, watches.clone(), text, &None)?;
        }
        Ok::<_, pgrx::spi::Error>(())
    })
    .unwrap_or_else(|e| error!("indexnow: could not record the rows this statement changed: {e}"));
}

/// Records the rows whose time has come as changed: a watched row past its `expire_at`, and a
/// withdrawn page (one whose publication time moved into the future after search engines knew
/// it) at its new publication time (their sources' `wake_at`, set by the derivation). Nothing
/// writes these rows; the derivation that follows reads the clock and queues the removal, or the
/// announcement. A source is woken once (its `wake_at` cleared here, set again by the derivation
/// when the row still has a time to come); one another transaction holds is left for the next
/// pass. Run by every deriver before it takes the change sets (the workers each pass,
/// `indexnow_push_now()`). Returns how many rows.
pub fn record_woken(ext: &str) -> i64 {
    // A read first (the partial index of the times to come): an idle pass writes nothing.
    let due = plan_cache::get_one::<bool>(
        &format!(
            "SELECT EXISTS (SELECT FROM {ext}.indexnow_sources \
                             WHERE wake_at <= pg_catalog.now())"
        ),
        &[],
    )
    .unwrap_or_else(|e| error!("indexnow: reading the rows whose time has come: {e}"));
    if due != Some(true) {
        return 0;
    }
    let sql = format!(
        "WITH woken AS ( \
           UPDATE {ext}.indexnow_sources s SET wake_at = NULL \
            WHERE (s.watch_id, s.row_key) IN ( \
                    SELECT watch_id, row_key FROM {ext}.indexnow_sources \
                     WHERE wake_at <= pg_catalog.now() ORDER BY wake_at \
                     LIMIT {KEYS_AT_MOST} FOR UPDATE SKIP LOCKED) \
           RETURNING s.watch_id, s.row_key), \
         recorded AS ( \
           INSERT INTO {ext}.indexnow_changes (tbl, watches, keys) \
           SELECT w.tbl::pg_catalog.oid, ARRAY[w.id], pg_catalog.jsonb_agg(woken.row_key) \
             FROM woken JOIN {ext}.indexnow_watches w ON w.id = woken.watch_id \
            GROUP BY w.tbl, w.id \
           RETURNING 1) \
         SELECT count(*) FROM woken"
    );
    Spi::connect_mut(|client| {
        plan_cache::write(client, &sql, &[])?
            .first()
            .get_one::<i64>()
            .map(|n| n.unwrap_or(0))
    })
    .unwrap_or_else(|e| error!("indexnow: could not record the rows whose time has come: {e}"))
}

/// Records that the whole of `tbl` changed (its rows are known only by reading it: a TRUNCATE, a
/// partition attached or detached), once per transaction: a TRUNCATE of a partitioned table fires
/// the triggers of the table and of every partition, and one change set covers them all.
pub fn record_whole_table(ext: &str, tbl: pg_sys::Oid, watches: Option<Vec<i32>>) {
    let this_transaction = format!(
        "AND {ext}.{}(c.xmin::text::bigint)",
        crate::extension::written_by_this_transaction()
    );
    insert_whole_table(ext, tbl, watches, &this_transaction);
}

/// Records that `watch` of `tbl` owes a derivation of the whole table (it could not derive the
/// changes recorded for it), unless one is owed already, by any transaction.
pub fn owe_whole_table(ext: &str, tbl: pg_sys::Oid, watch: i32) {
    insert_whole_table(ext, tbl, Some(vec![watch]), "");
}

/// A whole-table change set of `tbl` for `watches`, unless there is one already (`and_also`: of
/// which transaction).
fn insert_whole_table(ext: &str, tbl: pg_sys::Oid, watches: Option<Vec<i32>>, and_also: &str) {
    let sql = format!(
        "INSERT INTO {ext}.indexnow_changes (tbl, watches, keys) \
         SELECT $1, $2, NULL WHERE NOT EXISTS ( \
           SELECT FROM {ext}.indexnow_changes c \
            WHERE c.tbl = $1 AND c.keys IS NULL AND c.watches IS NOT DISTINCT FROM $2 \
              {and_also})"
    );
    Spi::connect_mut(|client| {
        plan_cache::write(client, &sql, &[tbl.into(), watches.into()]).map(|_| ())
    })
    .unwrap_or_else(|e| error!("indexnow: could not record a change of the whole of a table: {e}"));
}

/// Records, for the whole-table change set `whole` of `tbl`, the same change as keyed change
/// sets for `watches` (their ids in `sources_of`): every key of the table and every key those
/// watches have a source for, in key order, [`KEYS_AT_MOST`] a change set, with `whole`'s
/// transaction and age. Returns how many it recorded; none (and nothing written) when neither
/// the table's rows nor the keys of its sources are more than one change set holds (a table of
/// 5,000 rows and two watches has 10,000 sources, of 5,000 keys), or when a source's key is not
/// the table's key as it is now (its key columns or their types changed since it was derived:
/// only a derivation of the whole table compares such keys).
///
/// Why: a whole table derived in one statement is read whole into the deriver's memory (the
/// watch's rows are evaluated with its maker's rights, then handed back), and is not cut short;
/// keyed change sets are derived a slice at a time, each in a transaction of its own, and a
/// worker sends between them. The same keys give the same derivation: a key with a row is
/// derived from it, a key with only a source is a row gone.
///
/// `key` is the table's primary key (name, type). Run under the derivation's pinned settings (a
/// key's text, a `timestamptz` with its offset, is the derivation's), reading the table directly:
/// with `row_security = off`, a table whose policies would hide rows from this role fails it, as
/// does a table this role may not read. The caller then derives the table whole.
pub fn unfold_whole_table(
    ext: &str,
    whole: i64,
    tbl: pg_sys::Oid,
    key: &[(String, String)],
    watches: Option<Vec<i32>>,
    sources_of: &[i32],
) -> Result<i64, pgrx::spi::Error> {
    let table = plan_cache::get_one::<String>(
        "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) \
           FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
          WHERE c.oid = $1",
        &[tbl.into()],
    )?
    .unwrap_or_default();
    let names: Vec<String> = key.iter().map(|(name, _)| name.clone()).collect();
    let normal = key
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| format!("(s.row_key OPERATOR(pg_catalog.->>) {i})::{ty}"))
        .collect::<Vec<_>>()
        .join(", ");
    let more = KEYS_AT_MOST + 1;
    // (The conditions are the INSERT's own: a data-modifying WITH runs whatever the statement
    // around it keeps; evaluated first, they leave a small table's statement reading no more.)
    let sql = format!(
        "WITH \
         sources AS (SELECT s.row_key FROM {ext}.indexnow_sources s WHERE s.watch_id = ANY ($2)), \
         keys AS (SELECT {row_key} AS k FROM {table} r UNION SELECT row_key FROM sources), \
         chunked AS ( \
           SELECT k, (pg_catalog.row_number() OVER (ORDER BY k) - 1) / {KEYS_AT_MOST} AS chunk \
             FROM keys), \
         whole AS (SELECT xact, recorded_at FROM {ext}.indexnow_changes WHERE id = $1), \
         recorded AS ( \
           INSERT INTO {ext}.indexnow_changes (tbl, watches, keys, recorded_at, xact) \
           SELECT $3, $4, pg_catalog.jsonb_agg(c.k ORDER BY c.k), w.recorded_at, w.xact \
             FROM chunked c, whole w \
            WHERE greatest( \
                    (SELECT count(*) FROM (SELECT FROM {table} LIMIT {more}) t), \
                    (SELECT count(*) FROM (SELECT DISTINCT row_key FROM sources LIMIT {more}) s)) \
                  > {KEYS_AT_MOST} \
              AND NOT EXISTS ( \
                    SELECT FROM sources s \
                     WHERE s.row_key IS DISTINCT FROM pg_catalog.jsonb_build_array({normal})) \
            GROUP BY c.chunk, w.recorded_at, w.xact ORDER BY c.chunk \
           RETURNING 1) \
         SELECT count(*) FROM recorded",
        row_key = row_key(&names, "r"),
    );
    // Planned afresh: it runs rarely, and its plan depends on the table's size.
    let recorded = Spi::connect_mut(|client| {
        client
            .update(
                &sql,
                None,
                &[
                    whole.into(),
                    sources_of.to_vec().into(),
                    tbl.into(),
                    watches.into(),
                ],
            )?
            .first()
            .get_one::<i64>()
    })?
    .unwrap_or(0);
    Ok(recorded)
}

/// Deletes the whole-table change sets owed by `watch` of `tbl` other than `kept` (and than those
/// another transaction holds): one derivation of the whole table stands for them all.
pub fn drop_owed_twice(ext: &str, tbl: pg_sys::Oid, watch: i32, kept: &[i64]) {
    let sql = format!(
        "DELETE FROM {ext}.indexnow_changes WHERE id IN ( \
           SELECT c.id FROM {ext}.indexnow_changes c \
            WHERE c.tbl = $1 AND c.keys IS NULL AND c.watches = ARRAY[$2] \
              AND c.id <> ALL ($3) \
              FOR UPDATE SKIP LOCKED)"
    );
    Spi::connect_mut(|client| {
        plan_cache::write(
            client,
            &sql,
            &[tbl.into(), watch.into(), kept.to_vec().into()],
        )
        .map(|_| ())
    })
    .unwrap_or_else(|e| error!("indexnow: could not merge owed derivations of a table: {e}"));
}

/// The statement that records, by SQL, the keys of one trigger event (key types not read in
/// Rust): `$1` the table's oid, `$2` the watches to derive (int[], NULL for all), and with
/// `columns`, `$3` the columns a tracked single-row UPDATE changed. `sources` are the transition
/// tables whose keys count (`indexnow_new`, `indexnow_old`, or both when an UPDATE changed a key).
pub fn recording_sql(ext: &str, key: &[String], sources: &[&str], columns: bool) -> String {
    let (column, value) = if columns {
        (", columns", ", $3")
    } else {
        ("", "")
    };
    format!(
        "INSERT INTO {ext}.indexnow_changes (tbl, watches, keys{column}) \
         SELECT $1, $2, pg_catalog.jsonb_agg(x.k){value} \
           FROM (SELECT k, (pg_catalog.row_number() OVER () - 1) / {KEYS_AT_MOST} AS chunk \
                   FROM ({}) t) x \
          GROUP BY x.chunk",
        keys_of(key, sources)
    )
}

/// The keys of one trigger event as one jsonb array, by SQL (key types not read in Rust), for a
/// derivation in the writing statement.
pub fn event_keys_sql(key: &[String], sources: &[&str]) -> String {
    format!(
        "SELECT pg_catalog.jsonb_agg(DISTINCT t.k) FROM ({}) t",
        keys_of(key, sources)
    )
}

/// The keys of the rows in the transition tables `sources`, as the column `k`.
fn keys_of(key: &[String], sources: &[&str]) -> String {
    sources
        .iter()
        .map(|t| format!("SELECT {} AS k FROM {t} r", row_key(key, "r")))
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

/// Whether any change set waits to be derived (a read: assigns no transaction id).
pub fn waiting(ext: &str) -> bool {
    plan_cache::get_one::<bool>(
        &format!("SELECT EXISTS (SELECT FROM {ext}.indexnow_changes)"),
        &[],
    )
    .ok()
    .flatten()
    .unwrap_or(false)
}

/// What the capture triggers recorded and no derivation has turned into queue rows yet: how many
/// rows (a change of a whole table — TRUNCATE, a derivation owed — counts as the table's
/// estimated rows, at least one), and how long the oldest change has waited (`None` when nothing waits). Read
/// by `indexnow_status()`, which derives nothing: monitoring answers at once whatever waits.
pub fn waiting_summary(ext: &str) -> (i64, Option<Interval>) {
    let sql = format!(
        "SELECT coalesce(sum(CASE WHEN c.keys IS NULL \
                                  THEN greatest(t.reltuples, 1)::int8 \
                                  ELSE pg_catalog.jsonb_array_length(c.keys) END), 0)::int8, \
                CASE WHEN count(*) > 0 \
                     THEN greatest(now() - min(c.recorded_at), interval '0') END \
           FROM {ext}.indexnow_changes c LEFT JOIN pg_catalog.pg_class t ON t.oid = c.tbl"
    );
    Spi::connect(|client| {
        let row = plan_cache::read(client, &sql, &[])?.first();
        Ok::<_, pgrx::spi::Error>((row.get::<i64>(1)?.unwrap_or(0), row.get::<Interval>(2)?))
    })
    .unwrap_or_else(|e| error!("indexnow: reading the recorded changes failed: {e}"))
}

/// Whether a sender that finds a change set locked by another waits for it or skips it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// A worker: another sender is deriving it.
    Skip,
    /// A reader that must see everything.
    Wait,
}

/// Change sets taken together for one derivation, locked until the transaction ends.
pub struct Taken {
    pub ids: Vec<i64>,
    pub table: pg_sys::Oid,
    /// The watches to derive (None: all of the table's).
    pub watches: Option<Vec<i32>>,
    /// Their keys (None: the whole table).
    pub keys: Option<Value>,
    /// The columns a single-row UPDATE changed, when tracked (`indexnow.track_columns`): such a
    /// change set is derived alone, so that what it queued is its own (`super::column_changes`).
    pub columns: Option<Vec<String>>,
}

impl Taken {
    /// Whether these change sets are to be derived for watch `watch`.
    pub fn covers(&self, watch: i32) -> bool {
        self.watches.as_ref().is_none_or(|ids| ids.contains(&watch))
    }
}

/// Takes the oldest change set not locked by another (or, with [`Waiting::Wait`], waits for it),
/// together with small ones after it of the same table and watches (`most` change sets in all at
/// most, [`KEYS_AT_MOST`] keys), leaving out the change sets `passed_over` (a worker's, whose
/// derivation waited too long for another transaction this pass: the ones after them are not
/// held back by them, and derivation reads the rows as they are now, so order does not matter).
pub fn take(ext: &str, waiting: Waiting, most: usize, passed_over: &[i64]) -> Option<Taken> {
    let lock = match waiting {
        Waiting::Skip => "FOR UPDATE SKIP LOCKED",
        Waiting::Wait => "FOR UPDATE",
    };
    let take = format!(
        "SELECT id, tbl, watches, keys, columns FROM {ext}.indexnow_changes \
          WHERE id <> ALL ($1) ORDER BY id LIMIT 1 {lock}"
    );
    let oldest = Spi::connect_mut(|client| {
        let table = plan_cache::write(client, &take, &[passed_over.to_vec().into()])?;
        if table.is_empty() {
            return Ok(None);
        }
        let row = table.first();
        Ok::<_, pgrx::spi::Error>(Some(Taken {
            ids: vec![row.get::<i64>(1)?.unwrap_or_default()],
            table: row.get::<pg_sys::Oid>(2)?.unwrap_or(pg_sys::InvalidOid),
            watches: row.get::<Vec<i32>>(3)?,
            keys: row.get::<JsonB>(4)?.map(|JsonB(keys)| keys),
            columns: row.get::<Vec<String>>(5)?,
        }))
    })
    .unwrap_or_else(|e| error!("indexnow: reading a change set: {e}"))?;
    if oldest.columns.is_some() {
        return Some(oldest);
    }
    Some(with_small_ones_after(
        ext,
        oldest,
        most.saturating_sub(1),
        passed_over,
    ))
}

/// Locks every change set recorded now, in order, waiting for those another transaction holds
/// (a worker deriving them): for a reader that derives them all, before it writes anything.
pub fn lock_all(ext: &str) {
    Spi::run(&format!(
        "SELECT FROM (SELECT id FROM {ext}.indexnow_changes ORDER BY id FOR UPDATE) x"
    ))
    .unwrap_or_else(|e| error!("indexnow: reading the change sets: {e}"));
}

/// `taken` and the next change sets of the same table and watches that no one else is deriving,
/// as long as their keys add up to at most a change set's. Why: a site whose saves are recorded
/// (`indexnow.derive_at_write = 0`, or a save that met a worker's lock) leaves one change set of
/// one key per save, and deriving each alone cost a statement each (about 1 ms: more than the
/// save); derived together they cost one.
fn with_small_ones_after(
    ext: &str,
    mut taken: Taken,
    more_at_most: usize,
    passed_over: &[i64],
) -> Taken {
    let Some(Value::Array(all)) = &mut taken.keys else {
        return taken;
    };
    if all.len() >= KEYS_AT_MOST || more_at_most == 0 {
        return taken;
    }
    let more = format!(
        "SELECT id, keys FROM {ext}.indexnow_changes \
          WHERE tbl = $1 AND watches IS NOT DISTINCT FROM $2 AND keys IS NOT NULL AND id > $3 \
            AND id <> ALL ($5) AND columns IS NULL \
          ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED"
    );
    let limit = i64::try_from(more_at_most.min(MERGED_AT_MOST - 1)).expect("a small number");
    Spi::connect_mut(|client| {
        let rows = plan_cache::write(
            client,
            &more,
            &[
                taken.table.into(),
                taken.watches.clone().into(),
                taken.ids[0].into(),
                limit.into(),
                passed_over.to_vec().into(),
            ],
        )?;
        for row in rows {
            let (Some(next), Some(JsonB(Value::Array(keys)))) =
                (row.get::<i64>(1)?, row.get::<JsonB>(2)?)
            else {
                continue;
            };
            if all.len() + keys.len() > KEYS_AT_MOST {
                break; // (the rest stay locked until this transaction ends: derived next)
            }
            taken.ids.push(next);
            all.extend(keys);
        }
        Ok::<_, pgrx::spi::Error>(())
    })
    .unwrap_or_else(|e| error!("indexnow: reading change sets: {e}"));
    taken
}

/// Deletes the change sets `ids`, derived in this transaction.
pub fn remove(ext: &str, ids: &[i64]) {
    Spi::connect_mut(|client| {
        plan_cache::write(
            client,
            &format!("DELETE FROM {ext}.indexnow_changes WHERE id = ANY ($1)"),
            &[ids.to_vec().into()],
        )
        .map(|_| ())
    })
    .unwrap_or_else(|e| error!("indexnow: removing a derived change set: {e}"));
}

/// The transaction that recorded the change sets `ids` (held by this transaction), for what
/// their derivation queues to be held by (`crate::queue::HELD_BY_SQL`): of the transactions that
/// recorded them, one that has other change sets still waiting, else the first. (Change sets of
/// several transactions are derived together only when small: a request of one that is complete
/// may wait for another's, never the reverse.)
pub fn recorded_by(ext: &str, ids: &[i64]) -> String {
    plan_cache::get_one::<String>(
        &format!(
            "SELECT coalesce( \
               (SELECT c.xact::pg_catalog.text FROM {ext}.indexnow_changes c \
                 WHERE c.xact IN (SELECT t.xact FROM {ext}.indexnow_changes t WHERE t.id = ANY ($1)) \
                   AND c.id <> ALL ($1) LIMIT 1), \
               (SELECT t.xact::pg_catalog.text FROM {ext}.indexnow_changes t \
                 WHERE t.id = ANY ($1) ORDER BY t.id LIMIT 1))"
        ),
        &[ids.to_vec().into()],
    )
    .unwrap_or_else(|e| error!("indexnow: reading which transaction recorded a change set: {e}"))
    .unwrap_or_default()
}

/// Removes the first `derived` keys of the change set `id` (held by this transaction), derived in
/// it: a worker derives a long change set in slices (`super::derive_taken`), and what each slice
/// derived stays derived while the rest keeps the change set's place, its transaction and its
/// age. The change set goes when no key is left.
pub fn remove_first_keys(ext: &str, id: i64, derived: usize) {
    let derived = i64::try_from(derived).expect("a change set's size");
    Spi::connect_mut(|client| {
        plan_cache::write(
            client,
            &format!(
                "WITH rest AS ( \
                   UPDATE {ext}.indexnow_changes c \
                      SET keys = (SELECT pg_catalog.jsonb_agg(k.key ORDER BY k.n) \
                                    FROM pg_catalog.jsonb_array_elements(c.keys) \
                                         WITH ORDINALITY k (key, n) WHERE k.n > $2) \
                    WHERE c.id = $1 AND pg_catalog.jsonb_array_length(c.keys) > $2 \
                   RETURNING c.id) \
                 DELETE FROM {ext}.indexnow_changes c \
                  WHERE c.id = $1 AND NOT EXISTS (SELECT FROM rest)"
            ),
            &[id.into(), derived.into()],
        )
        .map(|_| ())
    })
    .unwrap_or_else(|e| error!("indexnow: removing what a slice of a change set derived: {e}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_sets_name_the_key_and_are_chunked() {
        let sql = recording_sql("\"x\"", &["a".into(), "b".into()], &["indexnow_new"], false);
        assert!(
            sql.contains("pg_catalog.jsonb_build_array(r.\"a\", r.\"b\") AS k FROM indexnow_new r")
        );
        assert!(sql.contains(&format!("/ {KEYS_AT_MOST} AS chunk")));
        let both = event_keys_sql(&["id".into()], &["indexnow_new", "indexnow_old"]);
        assert!(both.contains("UNION ALL SELECT"));
    }
}
