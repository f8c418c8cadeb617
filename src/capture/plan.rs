//! The SQL a watch runs: one set-based statement per trigger event, generated once by
//! `indexnow_watch()` from the table's columns and stored in `indexnow_watches`.
//!
//! Each statement reads the transition tables (`indexnow_old`, `indexnow_new`), derives for every
//! row its URL and its state, and turns each (old row, new row) pair into queue events:
//!
//! | state       | meaning                                                     |
//! |-------------|-------------------------------------------------------------|
//! | `live`      | visible, and its `publish_at` (if any) has passed           |
//! | `scheduled` | visible, `publish_at` still in the future                   |
//! | `hidden`    | not visible (draft, noindex, untranslated, ...)             |
//! | `absent`    | no such row (the old side of an INSERT, new side of a DELETE)|
//!
//! - An UPDATE pair whose non-ignored columns are all equal makes no event (ignored-only saves).
//! - The new URL, when the new row is live or scheduled: `changed` if the old row was live,
//!   else `created`; a scheduled one with `available_at` = its `publish_at`.
//! - The old URL, when it stops being that row's public URL (row deleted, hidden, or URL changed):
//!   if it was live, `deleted` (row gone), `moved` (URL changed, row still public) or the watch's
//!   `hidden_reason`; if it was only scheduled, the pending request is *cancelled*: never public,
//!   never sent — unless search engines were already told it is live, then it becomes a removal.
//! - Several events for one URL in one statement (two rows swapping slugs): a live page wins over a
//!   removal, and a removal over a cancellation — one row per URL, the last state wins.
//! - A URL that cannot be built or is invalid is skipped with a WARNING naming the table and row.
//!
//! Column comparisons name the columns (cheaper than jsonb fingerprints, see
//! shared/notes/trigger-costs.md); the md5 fingerprint is computed only for rows that changed.

use super::template::Part;
use crate::queue::{Reason, ON_CONFLICT_SQL};

pub struct WatchPlan {
    pub watch_id: i32,
    /// The extension's schema, quoted.
    pub ext: String,
    /// The watched table, schema-qualified and quoted.
    pub table: String,
    /// The table's name for messages (`public.pages`).
    pub table_label: String,
    pub key: Vec<String>,
    /// The columns whose change is a content change: all but the ignored ones.
    pub public: Vec<String>,
    pub url: UrlSource,
    pub visible: Option<String>,
    pub publish_at: Option<String>,
    pub hidden_reason: Reason,
}

pub enum UrlSource {
    Template(Vec<Part>),
    Sql(String),
}

/// The generated statements of one watch.
pub struct Statements {
    pub on_insert: String,
    pub on_update: String,
    pub on_delete: String,
    pub on_truncate: String,
    /// Returns one row: (created, changed, gone).
    pub reconcile: String,
    /// The send-time re-read of scheduled pages (spec behaviour 7): given `$1` url_hash[], returns
    /// for each the state the table gives that URL now (`live`, `scheduled`, or NULL: no row makes
    /// it public) and the publication time.
    pub recheck: String,
    /// Records the rows public now as known (so they are not announced), queues scheduled ones.
    pub baseline: String,
}

pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Search engines were last told the queue row `alias` is live (or, for a watch's baseline, are
/// taken to know it): a cancelled request for it must become a removal, not vanish.
pub fn known_live(alias: &str) -> String {
    format!(
        "coalesce({alias}.settled_reason NOT IN ({}), false)",
        removal_list()
    )
}

pub fn removal_list() -> String {
    Reason::ALL
        .iter()
        .filter(|r| r.is_removal())
        .map(|r| quote_literal(r.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

impl WatchPlan {
    pub fn statements(&self) -> Statements {
        Statements {
            on_insert: self.on_insert(),
            on_update: self.on_update(),
            on_delete: self.on_delete(),
            on_truncate: self.on_truncate(),
            reconcile: self.reconcile(),
            recheck: self.recheck(),
            baseline: self.baseline(),
        }
    }

    fn url_expr(&self) -> String {
        match &self.url {
            UrlSource::Template(parts) => parts
                .iter()
                .map(|p| match p {
                    Part::Literal(text) => quote_literal(text),
                    Part::Column(c) => {
                        format!("{}.indexnow_url_part(r.{}::text)", self.ext, quote_ident(c))
                    }
                })
                .collect::<Vec<_>>()
                .join(" || "),
            UrlSource::Sql(sql) => format!("(({sql}))::text"),
        }
    }

    fn key_cols(&self, prefix: &str) -> String {
        self.key
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{prefix}{} AS k{i}", quote_ident(k)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Per row of `source` (a transition table or the table itself): keys k0.., `url`, `vis`,
    /// `pub_at`, and the public columns c0.. (compared one by one: a comparison of two records
    /// goes through the generic record code and measured 5 times slower).
    fn derive(&self, source: &str) -> String {
        let visible = match &self.visible {
            Some(v) => format!("coalesce(({v}), false)"),
            None => "true".to_string(),
        };
        let publish_at = match &self.publish_at {
            Some(c) => format!("r.{}::timestamptz", quote_ident(c)),
            None => "NULL::timestamptz".to_string(),
        };
        let public = self
            .public
            .iter()
            .enumerate()
            .map(|(i, c)| format!("r.{} AS c{i}", quote_ident(c)))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "SELECT {keys}, {url} AS url, {visible} AS vis, {publish_at} AS pub_at, {public} \
               FROM {source} r",
            keys = self.key_cols("r."),
            url = self.url_expr(),
        )
    }

    /// The public columns of `alias` as a row constructor: `ROW(n.c0, n.c1, ...)`.
    fn public_row(&self, alias: &str) -> String {
        let cols = (0..self.public.len())
            .map(|i| format!("{alias}.c{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!("ROW({cols})")
    }

    /// The fingerprint stored per URL (for reconcile): md5 of the public columns' text.
    fn fingerprint(&self, alias: &str) -> String {
        format!("md5({}::text)", self.public_row(alias))
    }

    fn state(alias: &str) -> String {
        format!(
            "CASE WHEN NOT {alias}.vis THEN 'hidden' WHEN {alias}.pub_at > now() THEN 'scheduled' \
             ELSE 'live' END"
        )
    }

    fn key_text(&self, alias: &str) -> String {
        let keys = (0..self.key.len())
            .map(|i| format!("{alias}.k{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let names = self.key.join(", ");
        format!("'({names})=' || ROW({keys})::text")
    }

    /// The queue upsert every capture statement ends in: `source` yields url, url_hash, host,
    /// reason, available_at and fp; the conflict rule is the one all writers share.
    fn upsert(&self, source: &str) -> String {
        format!(
            "INSERT INTO {ext}.indexnow_urls AS u \
               (url, url_hash, host, reason, changed_at, queued_at, available_at, watch_id, \
                fingerprint) \
             SELECT url, url_hash, host, reason, now(), now(), available_at, {id}, fp \
               FROM {source} \
             {ON_CONFLICT_SQL}",
            ext = self.ext,
            id = self.watch_id,
        )
    }

    /// Turns pairs `p` (k0.., old_url, old_state, new_url, new_state, new_pub_at, new_fp) into the
    /// queue writes: upserts for `queue` events, settlements for `cancel` events. The events of the
    /// new URL and of the old URL are two branches of a UNION ALL over `p` (a per-row
    /// `LATERAL (VALUES ...)` measured 2.5 times slower).
    fn apply_pairs(&self, pairs_cte: &str) -> String {
        let ext = &self.ext;
        let hidden = quote_literal(self.hidden_reason.as_str());
        format!(
            "WITH {pairs_cte}, \
             e AS ( \
               SELECT p.new_url AS url, \
                      CASE WHEN p.old_state = 'live' THEN 'changed' ELSE 'created' END AS reason, \
                      CASE WHEN p.new_state = 'scheduled' THEN p.new_pub_at ELSE now() END \
                        AS available_at, \
                      p.new_fp AS fp, 'queue' AS action, 1 AS prio, {key_text} AS key_text \
                 FROM p WHERE p.new_state IN ('live', 'scheduled') \
               UNION ALL \
               SELECT p.old_url, \
                      CASE WHEN p.new_state = 'absent' THEN 'deleted' \
                           WHEN p.new_state <> 'hidden' THEN 'moved' ELSE {hidden} END, \
                      now(), NULL::text, \
                      CASE p.old_state WHEN 'live' THEN 'queue' ELSE 'cancel' END, 2, {key_text} \
                 FROM p WHERE p.old_state IN ('live', 'scheduled') \
                  AND (p.new_state IN ('absent', 'hidden') OR p.new_url IS DISTINCT FROM p.old_url)), \
             t AS ( \
               SELECT DISTINCT ON (x.url_hash) x.url, x.url_hash, x.host, e.reason, \
                      e.available_at, e.fp, e.action \
                 FROM e CROSS JOIN LATERAL \
                      {ext}.indexnow_capture_target(e.url, {label}, e.key_text) x \
                ORDER BY x.url_hash, e.prio, e.action DESC), \
             queued AS ({upsert}) \
             UPDATE {ext}.indexnow_urls u SET \
                    settled_seq = CASE WHEN {known_live} THEN u.settled_seq ELSE u.request_seq END, \
                    reason = CASE WHEN {known_live} THEN t.reason ELSE u.reason END, \
                    changed_at = CASE WHEN {known_live} THEN now() ELSE u.changed_at END, \
                    available_at = now() \
               FROM t \
              WHERE t.action = 'cancel' AND u.url_hash = t.url_hash \
                AND u.request_seq > u.settled_seq AND u.available_at > now()",
            key_text = self.key_text("p"),
            label = quote_literal(&self.table_label),
            upsert = self.upsert("t WHERE action = 'queue'"),
            known_live = known_live("u"),
        )
    }

    fn on_insert(&self) -> String {
        let keys = (0..self.key.len())
            .map(|i| format!("n.k{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.apply_pairs(&format!(
            "n AS ({derive}), \
             p AS (SELECT {keys}, NULL::text AS old_url, 'absent' AS old_state, \
                          n.url AS new_url, {state} AS new_state, n.pub_at AS new_pub_at, \
                          {fp} AS new_fp \
                     FROM n)",
            derive = self.derive("indexnow_new"),
            state = Self::state("n"),
            fp = self.fingerprint("n"),
        ))
    }

    fn on_delete(&self) -> String {
        let keys = (0..self.key.len())
            .map(|i| format!("o.k{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.apply_pairs(&format!(
            "o AS ({derive}), \
             p AS (SELECT {keys}, o.url AS old_url, {state} AS old_state, \
                          NULL::text AS new_url, 'absent' AS new_state, \
                          NULL::timestamptz AS new_pub_at, NULL::text AS new_fp \
                     FROM o)",
            derive = self.derive("indexnow_old"),
            state = Self::state("o"),
        ))
    }

    fn on_update(&self) -> String {
        let n = self.key.len();
        let keys = (0..n)
            .map(|i| format!("coalesce(n.k{i}, o.k{i}) AS k{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let join = (0..n)
            .map(|i| format!("o.k{i} = n.k{i}"))
            .collect::<Vec<_>>()
            .join(" AND ");
        // A FULL JOIN: an UPDATE that changes the key is a delete of the old row and an insert of
        // the new one.
        self.apply_pairs(&format!(
            "o AS ({old}), n AS ({new}), \
             p AS (SELECT {keys}, \
                          o.url AS old_url, \
                          CASE WHEN o.k0 IS NULL THEN 'absent' ELSE {old_state} END AS old_state, \
                          n.url AS new_url, \
                          CASE WHEN n.k0 IS NULL THEN 'absent' ELSE {new_state} END AS new_state, \
                          n.pub_at AS new_pub_at, {fp} AS new_fp \
                     FROM o FULL JOIN n ON {join} \
                    WHERE o.k0 IS NULL OR n.k0 IS NULL OR {changed})",
            old = self.derive("indexnow_old"),
            new = self.derive("indexnow_new"),
            old_state = Self::state("o"),
            new_state = Self::state("n"),
            fp = self.fingerprint("n"),
            changed = (0..self.public.len())
                .map(|i| format!("o.c{i} IS DISTINCT FROM n.c{i}"))
                .collect::<Vec<_>>()
                .join(" OR "),
        ))
    }

    /// Every URL this watch knows as public becomes `deleted`; scheduled ones that were never
    /// public are cancelled.
    fn on_truncate(&self) -> String {
        let ext = &self.ext;
        let removals = removal_list();
        format!(
            "WITH known AS ( \
               SELECT u.url, u.url_hash, u.host, \
                      (u.request_seq > u.settled_seq AND u.available_at > now() \
                       AND NOT {known_live}) AS never_public \
                 FROM {ext}.indexnow_urls u \
                WHERE u.watch_id = {id} AND u.reason NOT IN ({removals})), \
             queued AS ({upsert}) \
             UPDATE {ext}.indexnow_urls u SET settled_seq = u.request_seq \
               FROM known k WHERE k.never_public AND u.url_hash = k.url_hash",
            id = self.watch_id,
            known_live = known_live("u"),
            upsert = self.upsert(
                "(SELECT url, url_hash, host, 'deleted' AS reason, now() AS available_at, \
                         NULL::text AS fp FROM known WHERE NOT never_public) gone"
            ),
        )
    }

    /// The table's current public URLs, one per URL: url, url_hash, host, state, pub_at, fp.
    fn current_urls(&self) -> String {
        format!(
            "d AS ({derive}), \
             s AS ( \
               SELECT DISTINCT ON (x.url_hash) x.url, x.url_hash, x.host, d.state, d.pub_at, d.fp \
                 FROM (SELECT d.*, {state} AS state, {fp} AS fp, \
                              {key_text} AS key_text FROM d) d \
                 CROSS JOIN LATERAL {ext}.indexnow_capture_target(d.url, {label}, d.key_text) x \
                WHERE d.state <> 'hidden' \
                ORDER BY x.url_hash, d.state = 'live' DESC)",
            derive = self.derive(&self.table),
            state = Self::state("d"),
            key_text = self.key_text("d"),
            fp = self.fingerprint("d"),
            ext = self.ext,
            label = quote_literal(&self.table_label),
        )
    }

    fn recheck(&self) -> String {
        format!(
            "WITH {current} \
             SELECT c.url_hash, s.state, s.pub_at \
               FROM unnest($1::bytea[]) AS c(url_hash) LEFT JOIN s ON s.url_hash = c.url_hash",
            current = self.current_urls(),
        )
    }

    fn reconcile(&self) -> String {
        let ext = &self.ext;
        let removals = removal_list();
        format!(
            "WITH {current}, \
             ev AS ( \
               SELECT s.url, s.url_hash, s.host, \
                      CASE WHEN u.url_hash IS NULL OR u.reason IN ({removals}) THEN 'created' \
                           ELSE 'changed' END AS reason, \
                      CASE WHEN s.state = 'scheduled' THEN s.pub_at ELSE now() END AS available_at, \
                      s.fp \
                 FROM s LEFT JOIN {ext}.indexnow_urls u ON u.url_hash = s.url_hash \
                WHERE u.url_hash IS NULL OR u.reason IN ({removals}) \
                   OR u.fingerprint IS DISTINCT FROM s.fp \
                   OR (s.state = 'scheduled' AND u.available_at IS DISTINCT FROM s.pub_at) \
               UNION ALL \
               SELECT u.url, u.url_hash, u.host, 'gone', now(), NULL \
                 FROM {ext}.indexnow_urls u \
                WHERE u.watch_id = {id} AND u.reason NOT IN ({removals}) \
                  AND NOT EXISTS (SELECT 1 FROM s WHERE s.url_hash = u.url_hash)), \
             queued AS ({upsert} RETURNING u.reason) \
             SELECT count(*) FILTER (WHERE reason = 'created'), \
                    count(*) FILTER (WHERE reason = 'changed'), \
                    count(*) FILTER (WHERE reason = 'gone') \
               FROM queued",
            current = self.current_urls(),
            id = self.watch_id,
            upsert = self.upsert("ev"),
        )
    }

    fn baseline(&self) -> String {
        let ext = &self.ext;
        format!(
            "WITH {current} \
             INSERT INTO {ext}.indexnow_urls AS u \
               (url, url_hash, host, reason, changed_at, queued_at, available_at, watch_id, \
                fingerprint, request_seq, settled_seq, settled_reason) \
             SELECT url, url_hash, host, 'created', now(), now(), \
                    CASE WHEN state = 'scheduled' THEN pub_at ELSE now() END, {id}, fp, 1, \
                    CASE WHEN state = 'live' THEN 1 ELSE 0 END, \
                    CASE WHEN state = 'live' THEN 'created' END \
               FROM s \
             ON CONFLICT (url_hash) DO UPDATE \
                SET watch_id = excluded.watch_id, fingerprint = excluded.fingerprint \
              WHERE u.watch_id IS NULL OR u.watch_id = excluded.watch_id",
            current = self.current_urls(),
            id = self.watch_id,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::template;

    fn plan() -> WatchPlan {
        WatchPlan {
            watch_id: 7,
            ext: "\"public\"".into(),
            table: "\"public\".\"pages\"".into(),
            table_label: "public.pages".into(),
            key: vec!["id".into()],
            public: vec!["id".into(), "slug".into(), "body".into()],
            url: UrlSource::Template(template::parse("https://www.example.com/th/{slug}").unwrap()),
            visible: Some("status = 'published'".into()),
            publish_at: Some("published_at".into()),
            hidden_reason: Reason::Unpublished,
        }
    }

    #[test]
    fn statements_name_columns_and_the_watch() {
        let s = plan().statements();
        assert!(s.on_update.contains(
            "'https://www.example.com/th/' || \"public\".indexnow_url_part(r.\"slug\"::text)"
        ));
        assert!(s
            .on_update
            .contains("r.\"id\" AS c0, r.\"slug\" AS c1, r.\"body\" AS c2"));
        assert!(s
            .on_update
            .contains("md5(ROW(n.c0, n.c1, n.c2)::text) AS new_fp"));
        assert!(s.on_update.contains("FROM indexnow_old r"));
        assert!(s.on_update.contains("FROM indexnow_new r"));
        assert!(s.on_update.contains(
            "o.c0 IS DISTINCT FROM n.c0 OR o.c1 IS DISTINCT FROM n.c1 OR o.c2 IS DISTINCT FROM n.c2"
        ));
        assert!(s
            .on_update
            .contains("md5(ROW(n.c0, n.c1, n.c2)::text) AS new_fp"));
        assert!(s
            .on_update
            .contains("coalesce((status = 'published'), false) AS vis"));
        assert!(s
            .on_update
            .contains("r.\"published_at\"::timestamptz AS pub_at"));
        assert!(
            s.on_insert.contains("FROM indexnow_new r") && !s.on_insert.contains("indexnow_old")
        );
        assert!(
            s.on_delete.contains("FROM indexnow_old r") && !s.on_delete.contains("indexnow_new")
        );
        assert!(s.on_truncate.contains("u.watch_id = 7"));
        assert!(s.reconcile.contains("FROM \"public\".\"pages\" r"));
        for sql in [&s.on_insert, &s.on_update, &s.on_delete] {
            assert!(sql.contains("'unpublished'"));
            assert!(sql.contains("ON CONFLICT (url_hash)"));
            assert!(sql.contains("'public.pages'"));
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
        let mut p = plan();
        p.url = UrlSource::Template(template::parse("https://x.com/o'neil/{slug}").unwrap());
        assert!(p
            .statements()
            .on_insert
            .contains("'https://x.com/o''neil/'"));
    }
}
