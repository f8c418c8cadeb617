//! `indexnow_explain(url)`: why a URL is or is not sent, one fact a row, in plain words, for a
//! site owner who asks "why was this page not sent?".
//!
//! Every fact is read from the rule that decides it, never from a copy of it: the URL's normal
//! form and refusal from the protocol crate (as `indexnow_queue()` and a watch read it), which
//! rows give it from `indexnow_sources` and the row as it is now through the watch's own
//! statement (`_indexnow_watch_rows()`, with its maker's rights), when it is due from the due
//! rule's SQL (`queue::due`: `DUE_SQL`, and the terms `DUE_AT_SQL` is made of), whether a sender
//! may take it from the senders' own conditions (`send::sql`: the lease, a dry run's decision,
//! pauses) and the hold rule (`hosts::held_sql`), and what was sent from `indexnow_pushes.urls`.
//! It writes nothing, and derives nothing: a change recorded and not derived yet is named as such.

use crate::plan_cache;
use crate::queue::due::{DUE_AT_SQL, DUE_SQL, GAP_AT_SQL, NEWS_SQL, QUIET_AT_SQL};
use pgrx::prelude::*;

/// One fact: what it is about (`url`, `source`, `queue`, `due`, `host`, `change`, `request`,
/// `refused`), and what it says.
type Fact = (String, String);

/// Why `url` is or is not sent: one row per fact (see the module's comment).
#[pg_extern(name = "indexnow_explain", stable, parallel_unsafe)]
fn indexnow_explain(
    url: Option<&str>,
) -> TableIterator<'static, (name!(topic, String), name!(says, String))> {
    let Some(url) = url else {
        error!("indexnow_explain: the URL must not be NULL");
    };
    crate::extension::require_current_version();
    let ext = crate::extension::schema();
    let mut facts: Vec<Fact> = vec![];
    let fact = |facts: &mut Vec<Fact>, topic: &str, says: String| {
        facts.push((topic.to_string(), says));
    };
    let target = match indexnow_protocol::submittable_url(url) {
        Ok(t) => t,
        Err(e) => {
            fact(
                &mut facts,
                "url",
                format!("refused: {e}; no watch queues it, and indexnow_queue() refuses it"),
            );
            return TableIterator::new(facts);
        }
    };
    let hash = crate::queue::url_hash(&target.url);
    if target.url != url {
        fact(
            &mut facts,
            "url",
            format!("read as {} (its normal form)", target.url),
        );
    }
    sources(&ext, &hash, &target.url, &mut facts);
    let watched = queue_row(&ext, &hash, &mut facts);
    host(&ext, &target.host, &mut facts);
    changes(&ext, &hash, watched, &mut facts);
    requests(&ext, &target.url, &mut facts);
    TableIterator::new(facts)
}

/// Which rows of which watches give the URL, and what each row derives to now.
fn sources(ext: &str, hash: &[u8], url: &str, facts: &mut Vec<Fact>) {
    let rows: Vec<SourceRow> = Spi::connect(|client| {
        plan_cache::read(
            client,
            &format!(
                "SELECT s.watch_id, s.row_key, w.tbl::pg_catalog.regclass::pg_catalog.text, \
                        w.pattern, w.active, s.since::pg_catalog.text, \
                        (s.publish_at > pg_catalog.now()), s.publish_at::pg_catalog.text, \
                        s.withdrawn, s.wake_at::pg_catalog.text \
                   FROM {ext}.indexnow_sources s \
                   JOIN {ext}.indexnow_watches w ON w.id = s.watch_id \
                  WHERE s.url_hash = $1 ORDER BY s.watch_id, s.row_key"
            ),
            &[hash.to_vec().into()],
        )?
        .map(|r| {
            Ok(SourceRow {
                watch_id: r.get(1)?.unwrap_or_default(),
                row_key: r.get::<pgrx::JsonB>(2)?.map(|j| j.0),
                table: r.get(3)?.unwrap_or_default(),
                pattern: r.get(4)?.unwrap_or_default(),
                active: r.get(5)?.unwrap_or_default(),
                since: r.get(6)?,
                scheduled: r.get(7)?.unwrap_or_default(),
                publish_at: r.get(8)?,
                withdrawn: r.get(9)?.unwrap_or_default(),
                wake_at: r.get(10)?,
            })
        })
        .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow_explain: reading the rows that give the URL: {e}"));
    if rows.is_empty() {
        fact_no_source(ext, url, facts);
    }
    for s in rows {
        let key = s.row_key.map(|k| k.to_string()).unwrap_or_default();
        let since = match s.since.as_deref() {
            Some("-infinity") | None => "since before it was watched".to_string(),
            Some(t) => format!("since {t}"),
        };
        let of = format!("row {key} of {} (watch for {})", s.table, s.pattern);
        let state = if s.withdrawn {
            format!(
                "withdrawn until {}: its removal was queued when its publication time moved \
                 into the future, and it is announced again then",
                s.publish_at.unwrap_or_default()
            )
        } else if s.scheduled {
            format!(
                "scheduled: public from {} (publish_at)",
                s.publish_at.unwrap_or_default()
            )
        } else {
            "public".to_string()
        };
        let expiry = match (&s.wake_at, s.withdrawn) {
            (Some(at), false) => format!("; it expires at {at} (expire_at), its removal owed then"),
            _ => String::new(),
        };
        let unwatched = if s.active {
            ""
        } else {
            " (the watch was ended with indexnow_unwatch(): its removal is still owed)"
        };
        facts.push((
            "source".into(),
            format!("given by {of}, {since}, as last derived: {state}{expiry}{unwatched}"),
        ));
        if s.active {
            if let Some(now) = row_now(s.watch_id, &key, url) {
                if now != RowNow::AsDerived {
                    facts.push(("source".into(), now.says(url)));
                }
            }
        }
    }
}

struct SourceRow {
    watch_id: i32,
    row_key: Option<serde_json::Value>,
    table: String,
    pattern: String,
    active: bool,
    since: Option<String>,
    scheduled: bool,
    publish_at: Option<String>,
    withdrawn: bool,
    wake_at: Option<String>,
}

/// The row behind a source as the watch's own statement reads it now.
#[derive(PartialEq)]
enum RowNow {
    AsDerived,
    Gone,
    Hidden,
    ElsewhereOrInvalid(Option<String>),
}

impl RowNow {
    fn says(&self, url: &str) -> String {
        let not_yet = "(a change not derived yet: the workers derive it after the commit that \
                       made it; SELECT indexnow_derive() does it now)";
        match self {
            RowNow::AsDerived => String::new(),
            RowNow::Gone => format!("its row is gone now {not_yet}"),
            RowNow::Hidden => {
                format!("its row is hidden now: visible is false or expire_at has passed {not_yet}")
            }
            RowNow::ElsewhereOrInvalid(Some(other)) => {
                format!("its row gives another URL now, {other}, not {url} {not_yet}")
            }
            RowNow::ElsewhereOrInvalid(None) => {
                format!("its row's URL cannot be built or submitted now {not_yet}")
            }
        }
    }
}

/// The row of watch `watch_id` with key `key` (as JSON text) as its statement reads it now,
/// against the URL it gave when last derived (`url`).
fn row_now(watch_id: i32, key: &str, url: &str) -> Option<RowNow> {
    let ext = crate::extension::schema();
    let read = crate::subtransaction::run(|| {
        Spi::connect(|client| {
            let rows = client.select(
                &format!(
                    "SELECT r.present, r.vis, x.url \
                       FROM {ext}._indexnow_watch_rows($1, \
                              pg_catalog.jsonb_build_array($2::pg_catalog.jsonb)) r \
                       LEFT JOIN LATERAL {ext}._indexnow_capture_target(r.url, r.vis) x ON true"
                ),
                None,
                &[watch_id.into(), key.into()],
            )?;
            if rows.is_empty() {
                return Ok(None);
            }
            let r = rows.first();
            Ok::<_, pgrx::spi::Error>(Some((
                r.get::<bool>(1)?.unwrap_or(false),
                r.get::<bool>(2)?.unwrap_or(false),
                r.get::<String>(3)?,
            )))
        })
    });
    let (present, visible, now) = read.ok()?.ok()??;
    Some(match (present, visible, now) {
        (false, _, _) => RowNow::Gone,
        (true, false, _) => RowNow::Hidden,
        (true, true, Some(now)) if now == url => RowNow::AsDerived,
        (true, true, now) => RowNow::ElsewhereOrInvalid(now),
    })
}

/// No row gives the URL now: which watch last derived it, or whose pattern it has the form of.
fn fact_no_source(ext: &str, url: &str, facts: &mut Vec<Fact>) {
    let patterns: Vec<(String, String)> = Spi::connect(|client| {
        plan_cache::read(
            client,
            &format!(
                "SELECT w.tbl::pg_catalog.regclass::pg_catalog.text, w.url \
                   FROM {ext}.indexnow_watches w \
                  WHERE w.active AND w.url IS NOT NULL \
                    AND pg_catalog.starts_with($1, pg_catalog.split_part(w.url, '{{', 1)) \
                  ORDER BY w.id"
            ),
            &[url.into()],
        )?
        .map(|r| Ok((r.get(1)?.unwrap_or_default(), r.get(2)?.unwrap_or_default())))
        .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow_explain: reading the watches: {e}"));
    let mut says = "no row of a watched table gives it now".to_string();
    if !patterns.is_empty() {
        let forms: Vec<String> = patterns
            .iter()
            .map(|(t, p)| format!("{p} of {t}"))
            .collect();
        says.push_str(&format!(
            "; it has the form of {}: no row there gives it as a public page (hidden, a draft, \
             or another value in the URL)",
            forms.join(", ")
        ));
    }
    facts.push(("source".into(), says));
}

/// The URL's queue row: pending or not, and when it is due and what holds it. Returns the watch
/// that last derived it.
fn queue_row(ext: &str, hash: &[u8], facts: &mut Vec<Fact>) -> Option<i32> {
    let undecided = crate::send::sql::undecided(6);
    let sql = format!(
        "SELECT u.reason, u.settled_reason, u.request_seq > u.settled_seq, \
                u.changed_at::pg_catalog.text, u.queued_at::pg_catalog.text, \
                u.last_pushed_at::pg_catalog.text, u.failed_at::pg_catalog.text, \
                u.failed_status, u.failed_note, \
                CASE WHEN u.claimed_until > $1 THEN u.claimed_until::pg_catalog.text END, \
                u.watch_id, {DUE_SQL}, ({DUE_AT_SQL})::pg_catalog.text, \
                {DUE_AT_SQL} = {QUIET_AT_SQL}, {DUE_AT_SQL} = u.available_at, \
                {DUE_AT_SQL} = {GAP_AT_SQL}, ({NEWS_SQL}), {undecided}, \
                u.tried_at::pg_catalog.text, $5, {held}, u.held_by::pg_catalog.text \
           FROM {ext}.indexnow_urls u WHERE u.url_hash = $7",
        held = crate::send::sql::HELD,
    );
    let row = Spi::connect(|client| {
        let mut args = crate::status::reader_args(crate::send::now());
        args.push(hash.to_vec().into());
        let rows = plan_cache::read(client, &sql, &args)?;
        if rows.is_empty() {
            return Ok(None);
        }
        let r = rows.first();
        Ok::<_, pgrx::spi::Error>(Some(QueueRow {
            reason: r.get(1)?.unwrap_or_default(),
            settled_reason: r.get(2)?,
            pending: r.get(3)?.unwrap_or_default(),
            changed_at: r.get(4)?.unwrap_or_default(),
            queued_at: r.get(5)?.unwrap_or_default(),
            last_pushed_at: r.get(6)?,
            failed_at: r.get(7)?,
            failed_status: r.get(8)?,
            failed_note: r.get(9)?,
            leased_until: r.get(10)?,
            watch_id: r.get(11)?,
            due: r.get(12)?.unwrap_or_default(),
            due_at: r.get(13)?,
            by_debounce: r.get(14)?.unwrap_or_default(),
            by_schedule: r.get(15)?.unwrap_or_default(),
            by_gap: r.get(16)?.unwrap_or_default(),
            news: r.get(17)?.unwrap_or_default(),
            undecided: r.get(18)?.unwrap_or_default(),
            tried_at: r.get(19)?,
            held_by: r
                .get::<bool>(21)?
                .unwrap_or_default()
                .then(|| r.get::<String>(22))
                .transpose()?
                .flatten(),
        }))
    })
    .unwrap_or_else(|e| error!("indexnow_explain: reading the queue: {e}"));
    let Some(u) = row else {
        facts.push((
            "queue".into(),
            "not in the queue: no watch derived it and nothing queued it (indexnow_queue())".into(),
        ));
        return None;
    };
    let told = match (&u.settled_reason, &u.last_pushed_at) {
        (Some(r), Some(at)) => format!("; search engines were last told \"{r}\" (sent {at})"),
        (Some(r), None) => format!("; taken as known to search engines as \"{r}\" (never sent)"),
        _ => "; never sent".to_string(),
    };
    if u.pending {
        facts.push((
            "queue".into(),
            format!(
                "pending: \"{}\", requested at {}, content last changed at {}{told}",
                u.reason, u.queued_at, u.changed_at
            ),
        ));
    } else {
        facts.push(("queue".into(), format!("nothing pending{told}")));
    }
    if let (Some(at), Some(status)) = (&u.failed_at, u.failed_status) {
        facts.push((
            "refused".into(),
            format!(
                "the endpoint refused it at {at}: status {status}{}; not sent again until it \
                 is requested again",
                u.failed_note
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ),
        ));
    }
    if u.pending {
        facts.push(("due".into(), due_fact(&u)));
    }
    u.watch_id
}

struct QueueRow {
    reason: String,
    settled_reason: Option<String>,
    pending: bool,
    changed_at: String,
    queued_at: String,
    last_pushed_at: Option<String>,
    failed_at: Option<String>,
    failed_status: Option<i32>,
    failed_note: Option<String>,
    leased_until: Option<String>,
    watch_id: Option<i32>,
    due: bool,
    due_at: Option<String>,
    by_debounce: bool,
    by_schedule: bool,
    by_gap: bool,
    news: bool,
    undecided: bool,
    tried_at: Option<String>,
    /// The transaction it is held for (`crate::send::sql::HELD`), while it is.
    held_by: Option<String>,
}

/// When a pending URL is due, by the due rule, and what a sender would do with it now.
fn due_fact(u: &QueueRow) -> String {
    let due_at = u.due_at.clone().unwrap_or_default();
    if !u.due {
        let why = if u.by_schedule {
            "scheduled: not sent before its publication time (publish_at)".to_string()
        } else if u.by_debounce {
            format!(
                "waiting to be quiet: its content changed at {}, and indexnow.debounce lets it go \
                 only after that long without a change",
                u.changed_at
            )
        } else if u.by_gap && u.news {
            format!(
                "sent at {} and changed since: indexnow.min_gap spaces two sends of one URL",
                u.last_pushed_at.clone().unwrap_or_default()
            )
        } else if u.by_gap {
            format!(
                "a re-announcement of content sent at {}: indexnow.repeat_after spaces those",
                u.last_pushed_at.clone().unwrap_or_default()
            )
        } else {
            "not due yet".to_string()
        };
        return format!("not due before {due_at}: {why}");
    }
    if let Some(until) = &u.leased_until {
        let tried = u
            .tried_at
            .as_deref()
            .map(|t| format!(", tried at {t}"))
            .unwrap_or_default();
        return format!(
            "due, and a sender holds it until {until} (a request in flight{tried}): it is \
             settled by the answer, or due again when the lease ends"
        );
    }
    if let Some(xact) = &u.held_by {
        return format!(
            "due, but held: the transaction whose change it is ({xact}) has change sets not \
             derived yet, and one transaction is one announcement: it goes once they are"
        );
    }
    if !u.undecided {
        return "due, but a dry run decided on this request already (indexnow.dry_run): it is \
                not decided again until a new request"
            .to_string();
    }
    format!("due since {due_at}: the next pass sends it unless its host is held or paused (below)")
}

/// Whether the URL's host may be sent for now: held (no key, disabled, sending off, a copy) or
/// paused, by the rules the senders use.
fn host(ext: &str, host: &str, facts: &mut Vec<Fact>) {
    let (enabled, dry_run) = crate::worker::sending_for_status();
    let held = crate::hosts::held_sql("n.host", "$2");
    let paused = crate::send::sql::paused_until("n.host");
    let (held, paused): (Option<String>, Option<String>) = Spi::connect(|client| {
        let rows = plan_cache::read(
            client,
            &format!(
                "SELECT {held}, ({paused})::pg_catalog.text \
                   FROM (SELECT $3::pg_catalog.text AS host) n \
                   LEFT JOIN {ext}.indexnow_hosts h ON h.host = n.host"
            )
            .replace("@extschema@", ext),
            &[crate::send::now().into(), enabled.into(), host.into()],
        )?;
        let r = rows.first();
        Ok::<_, pgrx::spi::Error>((r.get(1)?, r.get(2)?))
    })
    .unwrap_or_else(|e| error!("indexnow_explain: reading the host: {e}"));
    match (held, paused) {
        (Some(why), _) => facts.push(("host".into(), format!("{host} is held: {why}"))),
        (None, Some(until)) => facts.push((
            "host".into(),
            format!("sending for {host} is paused until {until} (an answer of the endpoint)"),
        )),
        (None, None) if dry_run => facts.push((
            "host".into(),
            "indexnow.dry_run is on: requests are decided and recorded, none is made".into(),
        )),
        (None, None) => facts.push(("host".into(), format!("{host} may be sent for now"))),
    }
}

/// A change recorded for the row that gives the URL (or for its whole table) and not derived
/// yet.
fn changes(ext: &str, hash: &[u8], watch: Option<i32>, facts: &mut Vec<Fact>) {
    let waiting: Vec<(i64, String, bool)> = Spi::connect(|client| {
        plan_cache::read(
            client,
            &format!(
                "SELECT c.id, c.recorded_at::pg_catalog.text, c.keys IS NULL \
                   FROM {ext}.indexnow_changes c \
                  WHERE c.tbl IN (SELECT w.tbl::pg_catalog.oid FROM {ext}.indexnow_watches w \
                                   WHERE w.id = $2 OR w.id IN ( \
                                     SELECT s.watch_id FROM {ext}.indexnow_sources s \
                                      WHERE s.url_hash = $1)) \
                    AND (c.keys IS NULL OR EXISTS ( \
                          SELECT FROM {ext}.indexnow_sources s \
                           WHERE s.url_hash = $1 AND c.keys @> pg_catalog.jsonb_build_array(s.row_key))) \
                  ORDER BY c.id LIMIT 3"
            ),
            &[hash.to_vec().into(), watch.into()],
        )?
        .map(|r| {
            Ok((
                r.get(1)?.unwrap_or_default(),
                r.get(2)?.unwrap_or_default(),
                r.get(3)?.unwrap_or_default(),
            ))
        })
        .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow_explain: reading the recorded changes: {e}"));
    for (id, at, whole) in waiting {
        let what = if whole {
            "a change of its whole table"
        } else {
            "a change of its row"
        };
        facts.push((
            "change".into(),
            format!(
                "{what} recorded at {at} is not derived yet (change set {id}): the workers derive \
                 it; SELECT indexnow_derive() does it now"
            ),
        ));
    }
}

/// The last requests that carried the URL, with their answers (`indexnow_pushes.urls`).
fn requests(ext: &str, url: &str, facts: &mut Vec<Fact>) {
    let sent: Vec<(String, i32, Option<String>)> = Spi::connect(|client| {
        plan_cache::read(
            client,
            &format!(
                "SELECT p.pushed_at::pg_catalog.text, p.status, p.note \
                   FROM {ext}.indexnow_pushes p WHERE $1 = ANY (p.urls) \
                  ORDER BY p.pushed_at DESC, p.id DESC LIMIT 3"
            ),
            &[url.into()],
        )?
        .map(|r| {
            Ok((
                r.get(1)?.unwrap_or_default(),
                r.get(2)?.unwrap_or_default(),
                r.get(3)?,
            ))
        })
        .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow_explain: reading the requests: {e}"));
    if sent.is_empty() {
        facts.push((
            "request".into(),
            "no request kept carried it (indexnow.history_days keeps them)".into(),
        ));
    }
    for (at, status, note) in sent {
        let answer = match (status, note) {
            (0, Some(n)) => format!("no answer ({n})"),
            (0, None) => "no answer".to_string(),
            (s, Some(n)) => format!("status {s} ({n})"),
            (s, None) => format!("status {s}"),
        };
        facts.push(("request".into(), format!("sent at {at}: {answer}")));
    }
}
