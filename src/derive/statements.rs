//! The SQL a watch runs, generated from its definition (`super::generated`, where they are used:
//! nothing generated is stored): statements that derive the watch's URLs from rows of the table
//! as they are now, and turn the difference from what the watch last derived from those rows
//! (`indexnow_sources`) into queue requests.
//!
//! One derivation serves every path: a trigger event, a change set after commit, TRUNCATE,
//! `indexnow_reconcile()` and the send-time re-read of scheduled pages. For each row it reads the
//! row (absent, hidden, or public: live or scheduled), builds its URL and the fingerprint of its
//! public columns, and compares with the row's source:
//!
//! | now \ before          | no source                 | source with URL `a`                      |
//! |-----------------------|---------------------------|------------------------------------------|
//! | absent or hidden      | nothing                   | `a` removed (`deleted`/`gone`, or the    |
//! |                       |                           | watch's `hidden_reason`)                 |
//! | public at URL `a`     | `a` `created`             | `a` `changed` if fingerprint or          |
//! |                       |                           | publication time differ, else nothing    |
//! | public at URL `b`     | `b` `created`             | `b` queued, `a` removed as `moved`       |
//!
//! - A live request is `changed` when search engines were last told the URL is live, else
//!   `created`; a scheduled one waits for its publication time (`available_at`).
//! - A row past its `expire_at` is hidden (the clock is read here, never at a write). A public
//!   row with an expiry to come keeps it in its source's `wake_at`, and the workers derive it
//!   again at that time (`change_sets::record_woken`): its removal is owed without a write.
//! - A row public at a URL search engines know as live whose publication time is in the future
//!   (a live page rescheduled), and that no other row gives live, is *withdrawn*: its URL's
//!   removal (the watch's `hidden_reason`) is queued now, and its source, marked `withdrawn`, wakes at the publication time, when the
//!   row is announced again (`created`, or `changed` if the removal never went out).
//! - A removal is sent only when search engines were told of the URL while this row gave it (its
//!   last push is later than the source's `since`, a clock time), or may have been: a worker
//!   claimed it to send since then (`tried_at`; the answer may be lost with a killed worker, or
//!   the request may have arrived before a timeout).
//!   A row that starts giving a URL search engines know as live (a page republished before its
//!   removal went out, a second row or a new key giving the URL, a page moved to another watched
//!   table) takes `since` from that URL's last push (`-infinity` for a URL known from the
//!   watch's baseline): its removal is owed whichever row gave the URL when they were told.
//!   Otherwise the URL was never public as far as they know: its pending request is cancelled
//!   (settled unsent). An ORM's insert-then-rename, a draft, a scheduled post cancelled before
//!   its time announce nothing.
//! - A URL another row or another watch still gives is not removed.
//! - A row whose URL cannot be built or is invalid is skipped; the statement returns how many and
//!   the first few, and the caller warns once.
//! - Everything that turns values into text (templates, fingerprints) is computed with output
//!   settings pinned by the caller (`crate::derive`), and a `publish_at` without time zone
//!   is read in the time zone the watch was made in, so a session's `TimeZone` or `DateStyle`
//!   changes no URL, no fingerprint and no publication time.
//!
//! A statement reads or writes the extension's tables for a set of rows it computed (a CTE) only
//! through that set: `= ANY (ARRAY(SELECT ...))` on an index; `INSERT ... ON CONFLICT`, which
//! probes the index once a row; or a correlated `EXISTS` kept a look-up of each row by `OFFSET 0`
//! (which the planner neither turns into a join nor plans without its key). A CTE against another
//! is `NOT IN`, which the planner hashes. Never a join of a table with a CTE: a join's plan follows
//! the statistics, and a table that held no rows when it was last vacuumed or analyzed counts as
//! empty to the planner, whatever it holds now (PostgreSQL's estimate is the pages it has now times
//! the rows a page it had then). With such statistics the planner made a nested loop that read the
//! whole CTE again for each of the table's rows: a derivation of 4,000 keys took 14 s instead of
//! 0.2 s, one of 50,000 rows hours. (A server analyzes committed rows within a minute; a derivation
//! in the transaction that wrote them, or a long one started before, plans with what was there.)
//! `the_statements_stay_linear_when_the_statistics_take_the_queue_for_empty` (src/capture_tests.rs)
//! fakes such statistics.
//!
//! The statements take `$1` the keys (`derive_keys`: a jsonb array of key arrays) and `$2` the
//! reason for a row that no longer exists (`deleted` for a write, `gone` for reconcile), and
//! return one row: created, changed, removed, problems (count), problem (the first few, text).

use super::template::Part;
use crate::queue::{
    known_live, removal_list, removal_unsent_of_live, told_of_since, Reason, HELD_BY_SQL,
    ON_CONFLICT_SQL,
};
use crate::quote::{quote_ident, quote_literal};

/// A watch as `indexnow_watch()` checked it: everything the statements are generated from.
pub struct WatchDefinition {
    pub watch_id: i32,
    /// The extension's schema, quoted.
    pub ext: String,
    /// The watched table, schema-qualified and quoted.
    pub table: String,
    /// The primary key: (column name, SQL type).
    pub key: Vec<(String, String)>,
    /// The columns whose change is a content change: all but the ignored ones.
    pub public: Vec<String>,
    pub url: UrlSource,
    pub visible: Option<String>,
    pub publish_at: Option<PublishAt>,
    /// When a public row stops being public, without a write.
    pub expire_at: Option<PublishAt>,
    pub hidden_reason: Reason,
    /// Related tables keyed by the watched row, whose row is part of it (`generated::BodyTable`).
    pub bodies: Vec<Body>,
}

/// A table keyed by the watched row: its row's public columns count in the row's fingerprint.
#[derive(Clone)]
pub struct Body {
    /// Schema-qualified and quoted.
    pub table: String,
    /// (its column, the watched table's column it references)
    pub on: Vec<(String, String)>,
    /// Its columns that are content: not the key, not ignored.
    pub public: Vec<String>,
    /// Its columns but the key, ignored or not.
    pub all: Vec<String>,
}

/// What a fingerprint counts: the watched row's columns, and each body table's.
pub struct Counted {
    pub columns: Vec<String>,
    pub bodies: Vec<Body>,
}

#[derive(Clone)]
pub enum UrlSource {
    Template(Vec<Part>),
    Sql(String),
}

/// A point in time of the row (its publication, its expiry): a column, or an expression over the
/// row such as a parent's column.
#[derive(Clone)]
pub struct PublishAt {
    /// SQL over the row `r`: `r."published_at"`, or `(expression)`.
    pub sql: String,
    /// The watcher's `TimeZone`, for a value without time zone.
    pub time_zone: String,
}

/// The generated statements of one watch.
///
/// The watch's own expressions (`url_sql`, `visible`, `publish_at`, and the template's columns)
/// appear only in `rows_keys` and `rows_all`, which `_indexnow_watch_rows()` runs with the rights of
/// the role that made the watch (`super::owner`); the derivation statements read their rows
/// through it and hold none of the watch's SQL.
pub struct Statements {
    /// The rows whose keys are in `$1`: each key (normalised), whether a row has it, and that
    /// row's URL, visibility, publication time and fingerprint.
    pub rows_keys: String,
    /// The same for every row of the table.
    pub rows_all: String,
    /// Derives the rows whose keys are in `$1`.
    pub derive_keys: String,
    /// Derives every row of the table and every row the watch has a source for.
    pub derive_all: String,
    /// Records the rows public now as known to search engines (not announced); scheduled ones are
    /// queued for their time. For a watch with no sources yet. Returns what the derive statements
    /// return.
    pub baseline: String,
    /// The same for the rows whose keys are in `$1` (to find the rows that fail).
    pub baseline_keys: String,
}

/// The reason and time of the live request for a row public at URL `ch.new_hash` (publication
/// time `ch.new_pub_at`), given that URL's queue row `u`: `changed` when search engines were last
/// told the URL is live, else `created`; a scheduled one waits for its publication time.
fn live_request() -> String {
    format!(
        "CASE WHEN {} THEN 'changed' ELSE 'created' END AS reason, \
         greatest(ch.new_pub_at, now()) AS available_at",
        known_live("u")
    )
}

/// Derives one row edited in place, the commonest save: a row there, public now at a valid URL,
/// with a source of that URL whose fingerprint or publication time differ (not its expiry, not
/// withdrawn: see `WatchDefinition::derive`). For that row it does
/// what a watch's `derive_keys` does (the URL queued live, the source given the new fingerprint
/// and publication time, its `since` kept), in a statement a fraction of the size: a save that
/// derives in its statement pays for starting the statement up as much as for running it. Any
/// other row (no source, another URL, hidden, gone, a URL that cannot be built, nothing changed)
/// is left alone: the statement says it did nothing, and the caller runs `derive_keys`.
///
/// `$1` the key (as `derive_keys` takes it, one key), `$2` the watch. Returns created and
/// changed (counts), and whether the row was derived.
pub fn edited_in_place(ext: &str) -> String {
    format!(
        "WITH w AS (SELECT row_key::pg_catalog.jsonb AS row_key, url, vis, pub_at, exp_at, fp \
                      FROM {ext}._indexnow_watch_rows($2, $1) WHERE present), \
         c AS (SELECT w.row_key, x.url, x.url_hash, x.host, w.pub_at, w.exp_at, w.fp \
                 FROM w CROSS JOIN LATERAL {ext}._indexnow_capture_target(w.url, w.vis) x), \
         ch AS ( \
           UPDATE {ext}.indexnow_sources s SET fingerprint64 = c.fp, publish_at = c.pub_at, \
                  {OLDER_DUMPS_COLUMNS_CLEARED} \
             FROM c \
            WHERE s.watch_id = $2 AND s.row_key = c.row_key AND s.url_hash = c.url_hash \
              AND ({kept} IS DISTINCT FROM c.fp OR s.publish_at IS DISTINCT FROM c.pub_at) \
              AND NOT s.withdrawn AND s.wake_at IS NOT DISTINCT FROM c.exp_at \
              AND NOT coalesce(c.pub_at > now(), false) \
           RETURNING c.url AS new_url, c.url_hash AS new_hash, c.host AS new_host, \
                     c.pub_at AS new_pub_at), \
         q AS ( \
           INSERT INTO {ext}.indexnow_urls AS u \
             (url, url_hash, host, reason, changed_at, queued_at, available_at, watch_id, \
              held_by) \
           SELECT e.url, e.url_hash, e.host, e.reason, now(), now(), e.available_at, $2, \
                  {HELD_BY_SQL} \
             FROM (SELECT ch.new_url AS url, ch.new_hash AS url_hash, ch.new_host AS host, \
                          {live_request} \
                     FROM ch LEFT JOIN {ext}.indexnow_urls u ON u.url_hash = ch.new_hash) e \
           {ON_CONFLICT_SQL} \
           RETURNING u.reason) \
         SELECT (SELECT count(*) FROM q WHERE reason = 'created'), \
                (SELECT count(*) FROM q WHERE reason = 'changed'), \
                EXISTS (SELECT FROM ch)",
        live_request = live_request(),
        kept = kept_fingerprint("s"),
    )
}

/// The row key of `alias` as stored in change sets and sources: `jsonb_build_array(k0, ...)`.
pub fn row_key(key: &[String], alias: &str) -> String {
    let cols = key
        .iter()
        .map(|k| format!("{alias}.{}", quote_ident(k)))
        .collect::<Vec<_>>()
        .join(", ");
    format!("pg_catalog.jsonb_build_array({cols})")
}

/// A jsonb object of the values of `columns` of row `alias`, keys in jsonb's order (the
/// columns' order counts for nothing).
fn columns_object(columns: &[String], alias: &str) -> String {
    if columns.is_empty() {
        return "'{}'::pg_catalog.jsonb".into();
    }
    // jsonb_build_object takes at most 100 arguments: 50 columns a call.
    columns
        .chunks(50)
        .map(|cols| {
            let pairs = cols
                .iter()
                .map(|c| format!("{}, {alias}.{}", quote_literal(c), quote_ident(c)))
                .collect::<Vec<_>>()
                .join(", ");
            format!("pg_catalog.jsonb_build_object({pairs})")
        })
        .collect::<Vec<_>>()
        .join(" || ")
}

/// The fingerprint of row `r` over `columns` and `more` (jsonb objects): the first 8 bytes of
/// the md5 of one jsonb object, NULLs left out (a column added without a default changes no
/// fingerprint), as a bigint: a source is one row a page, and 8 bytes tell a change from none as
/// well as 16 (a change missed once in 2^64). md5 and not a built-in hash: its value is the same
/// on every platform and version, so a restored or upgraded database takes no page for changed.
/// 0 when nothing is counted.
fn fingerprint_of(columns: &[String], more: &[String]) -> String {
    if columns.is_empty() && more.is_empty() {
        return "0::pg_catalog.int8".into();
    }
    let objects = std::iter::once(columns_object(columns, "r"))
        .filter(|_| !columns.is_empty())
        .chain(more.iter().cloned())
        .collect::<Vec<_>>()
        .join(" || ");
    first_8_bytes(&format!(
        "pg_catalog.md5(pg_catalog.jsonb_strip_nulls({objects})::text)"
    ))
}

/// The first 8 bytes of the md5 (as hex text) `md5`, as a bigint.
fn first_8_bytes(md5: &str) -> String {
    format!(
        "('x' OPERATOR(pg_catalog.||) pg_catalog.left({md5}, 16))::pg_catalog.bit(64)::pg_catalog.int8"
    )
}

/// The fingerprint source `alias` holds: `fingerprint64`, or for a source restored from a dump of
/// 0.7.0 or earlier (whose `COPY` fills the text columns, kept for it) the same 8 bytes of its
/// md5 text, so that a restore of an older dump takes no page for changed.
fn kept_fingerprint(alias: &str) -> String {
    format!(
        "coalesce({alias}.fingerprint64, CASE WHEN {alias}.fingerprint = '' THEN 0::pg_catalog.int8 \
                                              ELSE {} END)",
        first_8_bytes(&format!("{alias}.fingerprint"))
    )
}

/// A source written now drops what a dump of 0.7.0 or earlier put in its text columns.
const OLDER_DUMPS_COLUMNS_CLEARED: &str = "url = NULL, host = NULL, fingerprint = NULL";

impl WatchDefinition {
    pub fn statements(&self) -> Statements {
        Statements {
            rows_keys: self.rows(true),
            rows_all: self.rows(false),
            derive_keys: self.derive(true),
            derive_all: self.derive(false),
            baseline: self.baseline(false),
            baseline_keys: self.baseline(true),
        }
    }

    /// The keys `$1` (a jsonb array of key arrays), each rebuilt from its typed values under the
    /// derivation's pinned settings: a key recorded by a writer whose `TimeZone` or
    /// `bytea_output` differs (a `timestamptz` key's offset) compares equal to the source's.
    fn normal_keys(&self) -> String {
        let cols = self
            .key
            .iter()
            .enumerate()
            .map(|(i, (_, ty))| format!("(e ->> {i})::{ty}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "SELECT DISTINCT pg_catalog.jsonb_build_array({cols}) AS row_key \
               FROM pg_catalog.jsonb_array_elements($1) e"
        )
    }

    fn key_names(&self) -> Vec<String> {
        self.key.iter().map(|(k, _)| k.clone()).collect()
    }

    fn url_expr(&self) -> String {
        match &self.url {
            UrlSource::Template(parts) => parts
                .iter()
                .map(|p| match p {
                    Part::Literal(text) => quote_literal(text),
                    Part::Column(c) => {
                        format!(
                            "{}._indexnow_url_part(r.{}::text)",
                            self.ext,
                            quote_ident(c)
                        )
                    }
                })
                .collect::<Vec<_>>()
                .join(" || "),
            UrlSource::Sql(sql) => format!("(({sql}))::text"),
        }
    }

    /// A point in time of the row (`publish_at`, `expire_at`), as a timestamptz.
    fn time_expr(&self, time: &Option<PublishAt>) -> String {
        match time {
            None => "NULL::timestamptz".into(),
            // (its type picks the overload of `_indexnow_publish_time()`, sql/capture.sql: the
            // statement needs no knowledge of it, and follows a column retyped)
            Some(p) => format!(
                "{}._indexnow_publish_time({}, {})",
                self.ext,
                p.sql,
                quote_literal(&p.time_zone)
            ),
        }
    }

    /// The fingerprint of the public columns: md5 of a jsonb object of them, NULLs left out (so a
    /// column added later, NULL in every row, changes no fingerprint when the watch is made again),
    /// and keys sorted by jsonb itself. Values keep their stored text (numeric scale, case), so a
    /// change of value is a change even where the type's equality would call the two equal.
    fn fingerprint_expr(&self) -> String {
        self.fingerprint_over(&self.counted())
    }

    /// What the watch's fingerprint counts now.
    pub fn counted(&self) -> Counted {
        Counted {
            columns: self.public.clone(),
            bodies: self.bodies.clone(),
        }
    }

    /// The column named by `expire_at`, if it names one (no content, whatever `ignore` says).
    pub fn expire_column(&self) -> Option<String> {
        self.expire_at.as_ref().and_then(|e| {
            e.sql
                .strip_prefix("r.\"")
                .and_then(|c| c.strip_suffix('"'))
                .map(|c| c.replace("\"\"", "\""))
        })
    }

    /// The fingerprint over what `counted` names: the watched row's columns and the public
    /// columns of its body rows, each body's under its table's name (`public.blog_blogpage`: no
    /// column has that name), so a row without a body row has the fingerprint it had before the
    /// body table was related.
    fn fingerprint_over(&self, counted: &Counted) -> String {
        let bodies = counted
            .bodies
            .iter()
            .map(|b| {
                let on =
                    b.on.iter()
                        .map(|(child, parent)| {
                            format!("b.{} = r.{}", quote_ident(child), quote_ident(parent))
                        })
                        .collect::<Vec<_>>()
                        .join(" AND ");
                let name = b.table.replace('"', "");
                format!(
                    "pg_catalog.jsonb_build_object({}, (SELECT {} FROM {} b WHERE {on}))",
                    quote_literal(&name),
                    columns_object(&b.public, "b"),
                    b.table
                )
            })
            .collect::<Vec<_>>();
        fingerprint_of(&counted.columns, &bodies)
    }

    /// Takes what the watch's fingerprint covers now as known: each source whose fingerprint is
    /// its row's over what `before` counts (what the fingerprint covered until now) takes its
    /// row's fingerprint over what the watch counts now, so that no row is announced for the
    /// change of what is counted alone (a column added with a default, to the table or to a body
    /// table; a changed `ignore`). A source whose row changed since it was derived (a change
    /// recorded, not yet derived) keeps its fingerprint: that row is still derived as changed.
    /// Returns the number of sources.
    pub fn fingerprints_taken_as_known(&self, before: &Counted) -> String {
        let now = self.fingerprint_expr();
        format!(
            "WITH f AS ( \
               UPDATE {ext}.indexnow_sources s SET fingerprint64 = {now}, \
                      {OLDER_DUMPS_COLUMNS_CLEARED} \
                 FROM {table} r \
                WHERE s.watch_id = {id} AND s.row_key = {row_key} \
                  AND {kept} = {before} AND {kept} <> {now} \
               RETURNING 1) \
             SELECT count(*) FROM f",
            ext = self.ext,
            table = self.table,
            id = self.watch_id,
            row_key = row_key(&self.key_names(), "r"),
            before = self.fingerprint_over(before),
            kept = kept_fingerprint("s"),
        )
    }

    /// Per row of the table: its key (as text), whether it is there, its URL, visibility,
    /// publication time and fingerprint. With `keyed`, one row per key in `$1`, the absent ones
    /// with `present` false. No row lock is taken: a derivation never makes a save wait (a row
    /// and its source are written in one transaction, so a snapshot sees both or neither; see
    /// docs/design.md for the one interleaving that leaves a stale source).
    fn rows(&self, keyed: bool) -> String {
        let expire_at = self.time_expr(&self.expire_at);
        // An expired row is hidden: the clock is read here, at derivation, never at a write.
        let visible = match (&self.visible, &self.expire_at) {
            (Some(v), None) => format!("coalesce(({v}), false)"),
            (None, None) => "true".to_string(),
            (Some(v), Some(_)) => {
                format!(
                    "coalesce(({v}), false) \
                     AND NOT coalesce({expire_at} OPERATOR(pg_catalog.<=) pg_catalog.now(), false)"
                )
            }
            (None, Some(_)) => {
                format!("NOT coalesce({expire_at} OPERATOR(pg_catalog.<=) pg_catalog.now(), false)")
            }
        };
        let columns = format!(
            "{url} AS url, {visible} AS vis, {pub_at} AS pub_at, {expire_at} AS exp_at, \
             {fp} AS fp",
            url = self.url_expr(),
            pub_at = self.time_expr(&self.publish_at),
            fp = self.fingerprint_expr(),
        );
        if keyed {
            let on = self
                .key
                .iter()
                .enumerate()
                .map(|(i, (k, ty))| {
                    format!(
                        "r.{} = (indexnow_asked.row_key ->> {i})::{ty}",
                        quote_ident(k)
                    )
                })
                .collect::<Vec<_>>()
                .join(" AND ");
            // The keys are a subquery in FROM, not a CTE: a CTE's name would hide a table of the
            // same name from the watch's expressions (a related table called `k`).
            format!(
                "SELECT indexnow_asked.row_key::text, x.row_key IS NOT NULL, x.url, x.vis, \
                        x.pub_at, x.exp_at, x.fp \
                   FROM ({keys}) indexnow_asked LEFT JOIN LATERAL ( \
                        SELECT indexnow_asked.row_key, {columns} FROM {table} r WHERE {on}) x \
                     ON true",
                keys = self.normal_keys(),
                table = self.table
            )
        } else {
            format!(
                "SELECT {row_key}::text, true, {columns} FROM {table} r",
                row_key = row_key(&self.key_names(), "r"),
                table = self.table
            )
        }
    }

    /// The CTEs `k` (the keys asked for; keyed only) and `d` (the rows there, with what they
    /// derive to), read through `_indexnow_watch_rows()` with the watch owner's rights.
    fn read_rows(&self, keyed: bool) -> String {
        let (ext, id) = (&self.ext, self.watch_id);
        if keyed {
            format!(
                "w AS (SELECT row_key::pg_catalog.jsonb AS row_key, present, url, vis, pub_at, \
                              exp_at, fp \
                         FROM {ext}._indexnow_watch_rows({id}, $1)), \
                 k AS (SELECT row_key FROM w), \
                 d AS (SELECT row_key, url, vis, pub_at, exp_at, fp FROM w WHERE present)"
            )
        } else {
            format!(
                "d AS (SELECT row_key::pg_catalog.jsonb AS row_key, url, vis, pub_at, exp_at, fp \
                         FROM {ext}._indexnow_watch_rows({id}, NULL))"
            )
        }
    }

    /// Each row's URL in normal form and its target, when the row is visible; `problem` when its
    /// URL cannot be built or submitted.
    fn current(&self) -> String {
        format!(
            "c AS (SELECT d.row_key, d.vis, x.url, x.url_hash, x.host, x.problem, d.pub_at, \
                          d.exp_at, d.fp \
                     FROM d CROSS JOIN LATERAL {ext}._indexnow_capture_target(d.url, d.vis) x)",
            ext = self.ext
        )
    }

    /// The derivation: rows as they are against what the watch last derived from them (`p`),
    /// queueing what changed and what is gone. The queue rows of the URLs going away are locked
    /// (`gu`) before `announced` is read from them: a sender's claim committing meanwhile (it
    /// notes `tried_at`, the request is on its way) is seen, and the URL gets its removal, where
    /// the statement's own snapshot would not show the claim and cancel the request.
    ///
    /// A row that starts giving a URL (`kept`) gives it `since` a moment search engines may have
    /// heard of it: the URL's last push when they were last told of it as live; when a request
    /// was tried after the last push and never answered (a timeout, a killed worker, a 5xx: it may
    /// have arrived), when it was tried; else now. So a row that takes over a URL (an ORM's new
    /// key, a second row) owes the removal of what may have reached them, and a URL whose last
    /// accepted push was its removal is new again. (A page that went, came back and went again
    /// while its request was under way is owed its removal so: the row that came back took the
    /// claim's `tried_at`. A lease alone says nothing: a dry run's claim and a scheduled page's,
    /// before its re-read, tell search engines nothing.)
    fn derive(&self, keyed: bool) -> String {
        let ext = &self.ext;
        let id = self.watch_id;
        let sources = if keyed {
            format!(
                "SELECT s.* FROM {ext}.indexnow_sources s \
                  WHERE s.watch_id = {id} AND s.row_key = ANY (ARRAY(SELECT row_key FROM k))"
            )
        } else {
            format!("SELECT s.* FROM {ext}.indexnow_sources s WHERE s.watch_id = {id}")
        };
        let removals = removal_list();
        let hidden = quote_literal(self.hidden_reason.as_str());
        format!(
            "WITH {rows}, {current}, \
             p AS ({sources}), \
             pr AS ( \
               SELECT coalesce(c.row_key, p.row_key) AS row_key, c.row_key IS NOT NULL AS present, \
                      coalesce(c.vis, false) AS vis, \
                      c.url AS new_url, c.url_hash AS new_hash, c.host AS new_host, \
                      c.fp AS new_fp, c.pub_at AS new_pub_at, \
                      p.url_hash AS old_hash, \
                      {kept} AS old_fp, p.publish_at AS old_pub_at, p.since, \
                      p.withdrawn AS old_withdrawn, p.wake_at AS old_wake, \
                      CASE WHEN c.pub_at > now() THEN EXISTS ( \
                             SELECT FROM {ext}.indexnow_urls u \
                              WHERE u.url_hash = c.url_hash AND {known_live} OFFSET 0) \
                           AND NOT EXISTS ( \
                             SELECT FROM c o WHERE o.url_hash = c.url_hash \
                                AND o.row_key <> c.row_key AND NOT coalesce(o.pub_at > now(), false)) \
                           AND NOT EXISTS ( \
                             SELECT FROM {ext}.indexnow_sources s \
                              WHERE s.url_hash = c.url_hash AND NOT s.withdrawn \
                                AND NOT coalesce(s.publish_at > now(), false) \
                                AND (s.watch_id <> {id} OR s.row_key <> c.row_key) OFFSET 0) \
                           ELSE false END AS withdraw, \
                      c.exp_at AS new_exp \
                 FROM c FULL JOIN p ON p.row_key = c.row_key), \
             ch AS ( \
               SELECT *, CASE WHEN withdraw THEN least(new_pub_at, new_exp) ELSE new_exp END \
                           AS new_wake, \
                      CASE WHEN withdraw THEN NOT coalesce(old_withdrawn, false) \
                                                OR old_hash IS DISTINCT FROM new_hash \
                           ELSE old_hash IS DISTINCT FROM new_hash \
                                OR old_fp IS DISTINCT FROM new_fp \
                                OR old_pub_at IS DISTINCT FROM new_pub_at \
                                OR coalesce(old_withdrawn, false) END AS requested \
                 FROM pr WHERE new_hash IS NOT NULL \
                  AND (old_hash IS DISTINCT FROM new_hash OR old_fp IS DISTINCT FROM new_fp \
                       OR old_pub_at IS DISTINCT FROM new_pub_at \
                       OR old_withdrawn IS DISTINCT FROM withdraw \
                       OR old_wake IS DISTINCT FROM \
                          CASE WHEN withdraw THEN least(new_pub_at, new_exp) ELSE new_exp END)), \
             live AS ( \
               SELECT DISTINCT ON (ch.new_hash) ch.new_url AS url, ch.new_hash AS url_hash, \
                      ch.new_host AS host, \
                      CASE WHEN ch.withdraw THEN {hidden} \
                           WHEN {known_live} THEN 'changed' ELSE 'created' END AS reason, \
                      CASE WHEN ch.withdraw THEN now() \
                           ELSE greatest(ch.new_pub_at, now()) END AS available_at \
                 FROM ch LEFT JOIN {ext}.indexnow_urls u ON u.url_hash = ch.new_hash \
                WHERE ch.requested \
                ORDER BY ch.new_hash, ch.new_pub_at NULLS FIRST), \
             given AS (SELECT DISTINCT new_hash FROM pr WHERE new_hash IS NOT NULL), \
             gu AS ( \
               SELECT u.url_hash, u.url, u.host, u.request_seq, u.settled_seq, \
                      u.settled_reason, u.last_pushed_at, u.tried_at \
                 FROM {ext}.indexnow_urls u \
                WHERE u.url_hash = ANY (ARRAY(SELECT old_hash FROM pr \
                                               WHERE old_hash IS NOT NULL \
                                                 AND old_hash IS DISTINCT FROM new_hash)) \
                ORDER BY u.url_hash FOR NO KEY UPDATE OF u), \
             gone AS ( \
               SELECT DISTINCT ON (pr.old_hash) pr.old_hash AS url_hash, u.url, u.host, \
                      u.request_seq, \
                      CASE WHEN NOT pr.present THEN $2 WHEN pr.vis THEN 'moved' \
                           ELSE {hidden} END AS reason, \
                      ({told_of}) AND NOT (coalesce(pr.old_withdrawn, false) AND NOT {known_live} \
                                           AND u.request_seq = u.settled_seq) AS announced \
                 FROM pr JOIN gu u ON u.url_hash = pr.old_hash \
                WHERE pr.old_hash IS NOT NULL AND pr.old_hash IS DISTINCT FROM pr.new_hash \
                  AND pr.old_hash NOT IN (SELECT new_hash FROM given) \
                  AND NOT EXISTS ( \
                        SELECT FROM {ext}.indexnow_sources s \
                         WHERE s.url_hash = pr.old_hash \
                           AND (s.watch_id <> {id} OR s.row_key NOT IN (SELECT row_key FROM pr)) \
                        OFFSET 0) \
                ORDER BY pr.old_hash, announced DESC), \
             q AS ( \
               INSERT INTO {ext}.indexnow_urls AS u \
                 (url, url_hash, host, reason, changed_at, queued_at, available_at, watch_id, \
                  held_by) \
               SELECT e.url, e.url_hash, e.host, e.reason, now(), now(), e.available_at, {id}, \
                      {HELD_BY_SQL} \
                 FROM (SELECT url, url_hash, host, reason, available_at FROM live \
                       UNION ALL \
                       SELECT url, url_hash, host, reason, now() FROM gone WHERE announced) e \
               {ON_CONFLICT_SQL} \
               RETURNING u.reason), \
             cancelled AS ( \
               INSERT INTO {ext}.indexnow_urls AS u \
                 (url, url_hash, host, reason, changed_at, queued_at, available_at, \
                  request_seq, settled_seq) \
               SELECT g.url, g.url_hash, g.host, g.reason, now(), now(), now(), \
                      g.request_seq, g.request_seq \
                 FROM gone g WHERE NOT g.announced \
               ON CONFLICT (url_hash) DO UPDATE SET settled_seq = u.request_seq, \
                  reason = excluded.reason \
                WHERE u.request_seq = excluded.request_seq AND u.request_seq > u.settled_seq \
                  AND u.watch_id IS NOT NULL \
               RETURNING 1), \
             kept AS ( \
               INSERT INTO {ext}.indexnow_sources AS s \
                 (watch_id, row_key, url_hash, fingerprint64, publish_at, since, withdrawn, \
                  wake_at) \
               SELECT {id}, ch.row_key, ch.new_hash, ch.new_fp, ch.new_pub_at, \
                      CASE WHEN ch.old_hash = ch.new_hash THEN ch.since \
                           WHEN {known_live} THEN coalesce(u.last_pushed_at, '-infinity') \
                           WHEN u.tried_at > coalesce(u.last_pushed_at, '-infinity') \
                             THEN u.tried_at \
                           ELSE clock_timestamp() END, \
                      ch.withdraw, ch.new_wake \
                 FROM ch LEFT JOIN {ext}.indexnow_urls u ON u.url_hash = ch.new_hash \
               ON CONFLICT (watch_id, row_key) DO UPDATE SET url_hash = excluded.url_hash, \
                  fingerprint64 = excluded.fingerprint64, {OLDER_DUMPS_COLUMNS_CLEARED}, \
                  publish_at = excluded.publish_at, since = excluded.since, \
                  withdrawn = excluded.withdrawn, wake_at = excluded.wake_at \
               RETURNING 1), \
             dropped AS ( \
               DELETE FROM {ext}.indexnow_sources s \
                WHERE s.watch_id = {id} \
                  AND s.row_key = ANY (ARRAY(SELECT row_key FROM pr \
                                             WHERE old_hash IS NOT NULL AND new_hash IS NULL)) \
               RETURNING 1) \
             SELECT (SELECT count(*) FROM q WHERE reason = 'created'), \
                    (SELECT count(*) FROM q WHERE reason = 'changed'), \
                    (SELECT count(*) FROM q WHERE reason IN ({removals})), \
                    (SELECT count(*) FROM c WHERE problem IS NOT NULL), \
                    (SELECT string_agg(x.row_key::text || ': ' || x.problem, '; ') \
                       FROM (SELECT row_key, problem FROM c WHERE problem IS NOT NULL \
                              ORDER BY row_key LIMIT 3) x), \
                    (SELECT count(*) FROM cancelled) + (SELECT count(*) FROM kept) \
                      + (SELECT count(*) FROM dropped)",
            rows = self.read_rows(keyed),
            current = self.current(),
            told_of = told_of_since("u", "pr.since"),
            kept = kept_fingerprint("p"),
            known_live = known_live("u"),
        )
    }

    /// A new watch's baseline: its rows public now taken as known to search engines. Not a
    /// row whose URL the queue holds as removed, or owed a removal (a table dropped and made
    /// again, a page unwatched and watched again): search engines were told otherwise, and the
    /// first column counts those rows, which `indexnow_watch()` then derives as any write. But a
    /// removal no sender has tried yet, of a URL search engines were last told is live, is
    /// withdrawn and its row taken as known (`queue::removal_unsent_of_live`): a table restored
    /// by `pg_restore --clean`, which dropped it first, announces nothing for the pages that come
    /// back. (The queue rows withdrawn here are left out of the insert below: a row updated by
    /// one part of a statement cannot be updated by another's `ON CONFLICT`.)
    fn baseline(&self, keyed: bool) -> String {
        let ext = &self.ext;
        let id = self.watch_id;
        let removals = removal_list();
        format!(
            "WITH {rows}, {current}, \
             withdrawn AS ( \
               UPDATE {ext}.indexnow_urls u \
                  SET settled_seq = u.request_seq, reason = u.settled_reason, \
                      watch_id = coalesce(u.watch_id, {id}) \
                WHERE u.url_hash = ANY (ARRAY(SELECT c.url_hash FROM c \
                                               WHERE c.url_hash IS NOT NULL)) \
                  AND {unsent} \
               RETURNING u.url_hash), \
             told AS (SELECT c.* FROM c WHERE c.url_hash IS NOT NULL \
                         AND c.url_hash NOT IN (SELECT url_hash FROM withdrawn) AND EXISTS ( \
                        SELECT FROM {ext}.indexnow_urls u WHERE u.url_hash = c.url_hash \
                           AND (u.reason IN ({removals}) OR u.settled_reason IN ({removals})) \
                        OFFSET 0)), \
             pub AS (SELECT * FROM c WHERE url_hash IS NOT NULL \
                      AND url_hash NOT IN (SELECT url_hash FROM told)), \
             kept AS ( \
               INSERT INTO {ext}.indexnow_sources \
                 (watch_id, row_key, url_hash, fingerprint64, publish_at, since, wake_at) \
               SELECT {id}, row_key, url_hash, fp, pub_at, \
                      CASE WHEN pub_at > now() THEN clock_timestamp() ELSE '-infinity' END, \
                      exp_at FROM pub \
               ON CONFLICT (watch_id, row_key) DO NOTHING RETURNING 1), \
             urls AS ( \
               SELECT DISTINCT ON (url_hash) url, url_hash, host, \
                      coalesce(pub_at > now(), false) AS scheduled, \
                      greatest(pub_at, now()) AS available_at \
                 FROM pub WHERE url_hash NOT IN (SELECT url_hash FROM withdrawn) \
                ORDER BY url_hash, coalesce(pub_at > now(), false)), \
             q AS ( \
               INSERT INTO {ext}.indexnow_urls AS u \
                 (url, url_hash, host, reason, changed_at, queued_at, available_at, watch_id, \
                  request_seq, settled_seq, settled_reason) \
               SELECT url, url_hash, host, 'created', now(), now(), available_at, {id}, 1, \
                      CASE WHEN scheduled THEN 0 ELSE 1 END, \
                      CASE WHEN scheduled THEN NULL ELSE 'created' END \
                 FROM urls \
               ON CONFLICT (url_hash) DO UPDATE SET watch_id = coalesce(u.watch_id, excluded.watch_id) \
               RETURNING 1) \
             SELECT (SELECT count(*) FROM told), 0::bigint, 0::bigint, \
                    (SELECT count(*) FROM c WHERE problem IS NOT NULL), \
                    (SELECT string_agg(x.row_key::text || ': ' || x.problem, '; ') \
                       FROM (SELECT row_key, problem FROM c WHERE problem IS NOT NULL \
                              ORDER BY row_key LIMIT 3) x), \
                    (SELECT count(*) FROM kept) + (SELECT count(*) FROM q) \
                    + (SELECT count(*) FROM withdrawn)",
            rows = self.read_rows(keyed),
            current = self.current(),
            unsent = removal_unsent_of_live("u"),
        )
    }
}

/// The demo's site (`tests/pages.sql`), for the golden tests.
#[cfg(any(test, feature = "pg_test"))]
pub mod demo_site {
    use super::*;
    use crate::derive::template;

    /// The watch of `tests/pages.sql` for `lang` (`th` or `en`) as `indexnow_watch()` must read it
    /// from the catalog, built by hand: the golden test generates its statements from this, and
    /// `a_watch_generates_the_golden_statements` (src/capture_tests.rs) checks that a real watch of
    /// that table generates the same ones.
    pub fn pages(lang: &str, watch_id: i32) -> WatchDefinition {
        let (ignored, visible, hidden) = match lang {
            "th" => (
                [
                    "sort_order",
                    "is_featured",
                    "keywords",
                    "created_at",
                    "updated_at",
                    "title_en",
                    "body_en",
                ],
                "status = 'published' AND NOT noindex",
                Reason::Unpublished,
            ),
            _ => (
                [
                    "sort_order",
                    "is_featured",
                    "keywords",
                    "created_at",
                    "updated_at",
                    "title",
                    "body",
                ],
                "status = 'published' AND NOT noindex AND title_en IS NOT NULL",
                Reason::Untranslated,
            ),
        };
        let columns = [
            "id",
            "slug",
            "category",
            "title",
            "body",
            "title_en",
            "body_en",
            "status",
            "noindex",
            "sort_order",
            "is_featured",
            "keywords",
            "created_at",
            "updated_at",
            "published_at",
        ];
        WatchDefinition {
            watch_id,
            ext: "\"public\"".into(),
            table: "public.pages".into(),
            key: vec![("id".into(), "integer".into())],
            public: columns
                .iter()
                .filter(|c| !ignored.contains(c))
                .map(|c| c.to_string())
                .collect(),
            url: UrlSource::Template(
                template::parse(&format!("https://www.example.com/{lang}/{{slug}}")).unwrap(),
            ),
            visible: Some(visible.into()),
            publish_at: Some(PublishAt {
                sql: "r.\"published_at\"".into(),
                time_zone: "UTC".into(),
            }),
            expire_at: None,
            hidden_reason: hidden,
            bodies: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::template;

    fn definition() -> WatchDefinition {
        WatchDefinition {
            watch_id: 7,
            ext: "\"public\"".into(),
            table: "\"public\".\"pages\"".into(),
            key: vec![("id".into(), "integer".into())],
            public: vec!["id".into(), "slug".into(), "body".into()],
            url: UrlSource::Template(template::parse("https://www.example.com/th/{slug}").unwrap()),
            visible: Some("status = 'published'".into()),
            publish_at: Some(PublishAt {
                sql: "r.\"published_at\"".into(),
                time_zone: "Asia/Bangkok".into(),
            }),
            expire_at: None,
            hidden_reason: Reason::Unpublished,
            bodies: vec![],
        }
    }

    #[test]
    fn statements_name_columns_and_the_watch() {
        let s = definition().statements();
        assert!(s.rows_keys.contains(
            "'https://www.example.com/th/' || \"public\"._indexnow_url_part(r.\"slug\"::text)"
        ));
        assert!(s.rows_keys.contains(
            "pg_catalog.md5(pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object('id', r.\"id\", \
             'slug', r.\"slug\", 'body', r.\"body\"))::text)"
        ));
        assert!(s
            .rows_keys
            .contains("r.\"id\" = (indexnow_asked.row_key ->> 0)::integer"));
        assert!(s
            .rows_keys
            .contains("coalesce((status = 'published'), false) AS vis"));
        assert!(s
            .rows_keys
            .contains("_indexnow_publish_time(r.\"published_at\", 'Asia/Bangkok') AS pub_at"));
        assert!(s.rows_all.contains("FROM \"public\".\"pages\" r"));
        assert!(!s.rows_all.contains("jsonb_array_elements"));
        for sql in [&s.derive_keys, &s.derive_all] {
            assert!(sql.contains("'unpublished'"));
            assert!(sql.contains("ON CONFLICT (url_hash)"));
            assert!(sql.contains("s.watch_id = 7"));
            assert!(sql.contains("\"public\"._indexnow_watch_rows(7, "));
            // The watch's own SQL runs only through _indexnow_watch_rows(), as its owner.
            assert!(!sql.contains("status = 'published'"), "{sql}");
            assert!(!sql.contains("r.\"slug\""), "{sql}");
        }
        assert!(s.baseline.contains("'-infinity'"));
        assert!(!s.baseline.contains("status = 'published'"));
    }

    #[test]
    fn quoting() {
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
        let mut d = definition();
        d.url = UrlSource::Template(template::parse("https://x.com/o'neil/{slug}").unwrap());
        assert!(d
            .statements()
            .rows_keys
            .contains("'https://x.com/o''neil/'"));
    }

    /// The statements generated for the demo's two-language `pages` table (`tests/pages.sql`: one
    /// watch per language) and the edited-in-place save, pinned by golden files
    /// (`crate::golden`).
    mod golden {
        use super::*;

        fn file_of(d: &WatchDefinition) -> String {
            let s = d.statements();
            crate::golden::file(
                "src/derive/statements.rs",
                "the demo's pages table",
                &[
                    ("rows_keys", &s.rows_keys),
                    ("rows_all", &s.rows_all),
                    ("derive_keys", &s.derive_keys),
                    ("derive_all", &s.derive_all),
                    ("baseline", &s.baseline),
                    ("baseline_keys", &s.baseline_keys),
                ],
            )
        }

        /// The demo creates and watches the site of `tests/pages.sql` word for word (its
        /// statements end in `\g /dev/null` where the file's end in `;`).
        #[test]
        fn the_demo_watches_the_golden_site() {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            let site = std::fs::read_to_string(root.join("tests/pages.sql")).unwrap();
            let demo = std::fs::read_to_string(root.join("scripts/demo.sh")).unwrap();
            let site: String = site
                .lines()
                .filter(|l| !l.starts_with("--"))
                .map(|l| format!("{l}\n"))
                .collect();
            let statements: Vec<&str> = site
                .split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            assert_eq!(statements.len(), 3, "{statements:?}");
            for statement in statements {
                assert!(
                    demo.contains(statement),
                    "scripts/demo.sh does not have this statement of tests/pages.sql:\n{statement}"
                );
            }
        }

        #[test]
        fn the_generated_statements_are_the_golden_ones() {
            for (lang, watch_id) in [("th", 1), ("en", 2)] {
                let now = file_of(&demo_site::pages(lang, watch_id));
                crate::golden::check(&format!("pages_{lang}.sql"), &now);
            }
            // The commonest save, derived in a statement of its own.
            crate::golden::check(
                "edited_in_place.sql",
                &crate::golden::file(
                    "src/derive/statements.rs",
                    "any watch (the extension in schema public)",
                    &[("edited_in_place", &edited_in_place("\"public\""))],
                ),
            );
        }
    }
}
