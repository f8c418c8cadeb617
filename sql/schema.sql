-- indexnow: the tables. Functions come from Rust; grants and search_path pins are in security.sql.

-- URLs, keys and the JSON sent are UTF-8, and so is every text the library reads from the
-- database (a key of a LATIN1 row would fail the user's write): other encodings are refused.
DO $encoding$
BEGIN
    IF pg_catalog.getdatabaseencoding() <> 'UTF8' THEN
        RAISE EXCEPTION 'indexnow needs a database in the UTF8 encoding; this one is %',
            pg_catalog.getdatabaseencoding()
            USING HINT = 'Create the database with ENCODING ''UTF8'' (and a UTF-8 locale, or '
                         'LOCALE_PROVIDER icu), move the site''s data into it, and create the '
                         'extension there.';
    END IF;
END
$encoding$;

-- The sites we may speak for: one key per host (the `host` of the IndexNow request, in the normal
-- form of indexnow-protocol: lower case, punycode, `:port` only when not the default).
CREATE TABLE indexnow_hosts (
    host         text PRIMARY KEY,
    key          text NOT NULL CHECK (key ~ '^[A-Za-z0-9-]{8,128}$'),
    key_location text,
    enabled      boolean NOT NULL DEFAULT true,
    added_at     timestamptz NOT NULL DEFAULT now(),
    -- The database this key was added in (or confirmed for, indexnow_confirm_copy()): the
    -- cluster's system identifier and the database's OID. A copy of the database (restored into
    -- another cluster, or CREATE DATABASE ... TEMPLATE) carries the row but is not its home, and
    -- sends nothing for the host until an administrator confirms it (see src/hosts.rs).
    home_system   bigint NOT NULL,
    home_database oid NOT NULL,
    -- The key's state as the endpoint's answers reveal it (crates/protocol/src/response.rs,
    -- key_state): unused (no answer since the key was set), pending (202, or 403
    -- SiteVerificationNotCompleted), verified (200), rejected (another 403, or a 422 naming the
    -- key); since when, and the answer that said so.
    key_state      text NOT NULL DEFAULT 'unused'
                   CHECK (key_state IN ('unused', 'pending', 'verified', 'rejected')),
    key_state_at   timestamptz,
    key_state_note text
);

-- The queue: one row per URL, ever. A row is never deleted by sending; it keeps the URL's history
-- (when it was last pushed, what content was pushed) so that the due rule can tell a change from a
-- re-announcement and a pushed URL with no new request is never sent again.
--
-- "Pending" is a count, not a timestamp comparison: every request adds one to request_seq, and a
-- push (or a permanent failure) settles the requests it saw, settled_seq = the request_seq it
-- claimed. A request that arrives while a push is in flight leaves request_seq > settled_seq, so the
-- URL stays pending however the two transactions' clocks interleave (spec behaviour 14).
CREATE TABLE indexnow_urls (
    url_hash          bytea PRIMARY KEY CHECK (octet_length(url_hash) = 20),  -- sha1(url)
    url               text NOT NULL,
    host              text NOT NULL,
    reason            text NOT NULL CHECK (reason IN ('created', 'changed', 'refresh',
                          'moved', 'unpublished', 'deleted', 'gone', 'untranslated')),
    changed_at        timestamptz NOT NULL,         -- last content change: drives the debounce
    queued_at         timestamptz NOT NULL,         -- last request of any kind
    available_at      timestamptz NOT NULL,         -- not sent before (scheduled publication)
    last_pushed_at    timestamptz,                  -- last accepted push
    pushed_changed_at timestamptz,                  -- the changed_at that push carried
    request_seq       bigint NOT NULL DEFAULT 1,
    settled_seq       bigint NOT NULL DEFAULT 0,
    settled_reason    text,                         -- reason of the last settled request: what
                                                    --   search engines were last told (or, for a
                                                    --   watch's baseline, are taken to know)
    failed_at         timestamptz,                  -- last refused push (4xx): not retried
    failed_status     integer,                      --   until a new request comes
    failed_note       text,
    watch_id          integer,                      -- the watch that last derived this URL
    claimed_until     timestamptz,                  -- a sender's lease: while it runs, no other
                                                    --   sender takes the row; when it has passed
                                                    --   (the sender died), the row is due again
    tried_at          timestamptz,                  -- when a worker last claimed it to send (not
                                                    --   a dry run): the request may have arrived
                                                    --   even if no answer was recorded (a killed
                                                    --   worker, a timeout), so search engines may
                                                    --   know the URL from then on
    dry_run_seq       bigint,                       -- the request_seq a dry run last decided on:
                                                    --   not decided again until a new request
    held_by           xid8                          -- the transaction whose change this request
                                                    --   is: not sent while change sets of that
                                                    --   transaction wait to be derived (one
                                                    --   transaction, one announcement); cleared
                                                    --   when the request is settled
) WITH (fillfactor = 70);
-- fillfactor: a sender leases every row it sends (claimed_until, in no index); with room left on
-- the page that update is HOT, writing no index entry. Measured: draining 200,000 URLs took
-- 8.9 s at the default fillfactor, 6.1-7.3 s at 70.

-- The due query's index: only pending rows are in it, per host (a sender claims one host's batch
-- at a time) and ordered by what the debounce compares, so an idle pass reads nothing when nothing
-- is pending and a claim reads only that host's quiet rows. (Measured with changed_at alone:
-- draining 1,000,000 URLs of two interleaved hosts slowed as it went, each claim of one host
-- walking past the other host's pending rows; 18,800 URLs/s.)
CREATE INDEX indexnow_urls_pending ON indexnow_urls (host, changed_at)
    WHERE request_seq > settled_seq;

-- Under a backlog, what search engines do not have yet (content changed or removed since the
-- last push, or never pushed) goes before re-announcements of unchanged content: a claim reads
-- these rows first, in order, through this index, then the others through the one above
-- (src/send/sql.rs, `due_of_host`). Without it, a site-wide `refresh` of a million URLs would be
-- walked past by every claim looking for the few changes behind it.
CREATE INDEX indexnow_urls_news ON indexnow_urls (host, changed_at)
    WHERE request_seq > settled_seq AND changed_at IS DISTINCT FROM pushed_changed_at;

-- indexnow_status() counts the refused URLs per host: few rows, found without reading the queue
-- (measured: 40 ms a call with 200,000 pushed URLs without it). Only settles write failed_at, and
-- they write the pending index's columns anyway, so this index makes no HOT update non-HOT.
CREATE INDEX indexnow_urls_failed ON indexnow_urls (host) WHERE failed_at IS NOT NULL;

-- What indexnow_watch() set up: one row per watched table and URL pattern, with its arguments as
-- checked. The statements that derive the watch's URLs from rows of the table are generated from
-- them and the table as it is, where they are used (src/derive/generated.rs), and not stored.
-- `indexnow_unwatch()` keeps the row, inactive, while URLs it gave are still known to search
-- engines, so their removals stay owed.
CREATE TABLE indexnow_watches (
    id            integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tbl           regclass NOT NULL,
    url           text,
    url_sql       text,
    pattern       text GENERATED ALWAYS AS (coalesce(url, url_sql)) STORED,  -- names the watch
    visible       text,
    ignore        text[] NOT NULL,
    publish_at    text,
    hidden_reason text NOT NULL,
    search_path   text NOT NULL,                    -- the watcher's, for visible and url_sql
    time_zone     text NOT NULL,                    -- the watcher's, for a publish_at without zone
    active        boolean NOT NULL DEFAULT true,    -- false: unwatched, removals still owed
    owner         name NOT NULL,                    -- who made it: its SQL runs with this role's rights
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- the columns visible, url_sql and publish_at read: the UPDATE gate compares them even when
    -- they are ignored as content (NULL: not known, the gate compares every column)
    expression_columns text[],
    -- its tables' capture triggers fire in replica mode too (ENABLE ALWAYS): see placement.rs
    replica_writes boolean NOT NULL DEFAULT false,
    expire_at     text,                             -- when a public row stops being public
    CHECK ((url IS NULL) <> (url_sql IS NULL))
);
CREATE UNIQUE INDEX indexnow_watches_pattern ON indexnow_watches (tbl, pattern) WHERE active;

-- Tables a watch reads besides its own (a translation row's parent page, a page's category),
-- declared with indexnow_watch(related => ...): a write to one re-derives the watched rows that
-- reference the written rows, found through foreign keys (the query from the written rows' keys
-- to the watched rows' keys is planned where it is used: src/capture/related.rs). No foreign key to
-- indexnow_watches: `pg_restore -j` loads the two tables in parallel sessions, into the
-- constraints CREATE EXTENSION made, and would refuse a relation loaded before its watch; the
-- code that deletes a watch deletes its relations.
CREATE TABLE indexnow_relations (
    watch_id   integer NOT NULL,                    -- the watch (indexnow_watches.id)
    tbl        regclass NOT NULL,                   -- the related table
    whole      boolean NOT NULL DEFAULT false,      -- related_whole: a write to it derives the
                                                    --   whole watched table
    PRIMARY KEY (watch_id, tbl)
);

-- Change sets: which rows of a watched table a statement wrote, recorded by the capture trigger
-- (every statement by default: indexnow.derive_at_write), and derived after commit by the
-- workers or by any reader that must see them first (indexnow_push_now(), indexnow_reconcile(),
-- indexnow_derive(); indexnow_status() only counts them).
-- Recording is an insert into this table only: it never conflicts with a sender.
CREATE TABLE indexnow_changes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tbl         oid NOT NULL,                       -- the written table
    watches     integer[],                          -- the watches to derive (NULL: all of tbl's)
    keys        jsonb,                              -- [[key columns...], ...]; NULL: every row
                                                    --   (TRUNCATE)
    recorded_at timestamptz NOT NULL DEFAULT now(),
    columns     text[],                             -- the columns a single-row UPDATE changed,
                                                    --   with indexnow.track_columns on
    xact        xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id()
                                                    -- the transaction that recorded it: what
                                                    --   it derives is held until the others of
                                                    --   that transaction are derived too
);
-- The senders' hold (src/send/sql.rs, `claimable`): does a transaction still have change sets?
CREATE INDEX indexnow_changes_xact ON indexnow_changes (xact);

-- What each watch last derived from each row that gave it a public URL (live or scheduled): the
-- URL (by its hash: the text is kept once, in the URL's queue row, which every source has), the
-- fingerprint of the row's public columns and its publication time. A derivation compares the row
-- as it is now with this, not with the row's old version: a URL that no row gives any more is a
-- removal if search engines were told of it while this row gave it (the queue's last push is
-- later than `since`), and a cancelled request if they never were.
--
-- One row a watched page, so its width is what a site pays a page: no URL text, no host (both in
-- indexnow_urls), an 8-byte fingerprint. The three text columns are NULL: they are kept, nullable,
-- for the restore of a dump made by 0.7.0 or earlier, whose COPY names them (a row restored so
-- holds its URL, host and md5 text until it is derived again: src/derive/statements.rs,
-- `kept_fingerprint`).
CREATE TABLE indexnow_sources (
    watch_id    integer NOT NULL,
    row_key     jsonb NOT NULL,                     -- the row's primary key, [value, ...]
    url_hash    bytea NOT NULL,                     -- the URL's queue row (indexnow_urls)
    url         text,                               -- NULL (a dump of 0.7.0 or earlier: the URL)
    host        text,                               -- NULL (the same: the URL's host)
    fingerprint text,                               -- NULL (the same: the md5 as text)
    publish_at  timestamptz,
    since       timestamptz NOT NULL,               -- since when this row gives this URL
                                                    --   (-infinity: public before it was watched)
    -- A page search engines know as live whose publication time moved into the future: its
    -- removal was queued, and its announcement is owed at publish_at (src/derive/statements.rs).
    withdrawn   boolean NOT NULL DEFAULT false,
    -- When the row must be derived again without a write: its expiry, or the publication time
    -- of a withdrawn page. The workers derive the rows whose time has come (`record_woken` in
    -- src/derive/change_sets.rs).
    wake_at     timestamptz,
    -- The fingerprint of the row's public columns: the first 8 bytes of their md5
    -- (src/derive/statements.rs, `fingerprint_of`); NULL in a row restored from an older dump.
    fingerprint64 bigint,
    PRIMARY KEY (watch_id, row_key)
) WITH (fillfactor = 70);
-- fillfactor: a content change rewrites the row's fingerprint only (neither indexed column), and
-- with room on the page that update is HOT. Measured on 1,000,000 sources, 200,000 fingerprints
-- rewritten: 1.0 s at 70, 3.6-4.0 s at the default (every update a new tuple on another page and
-- an entry in both indexes), and after two such rounds the table at the default fillfactor was as
-- large as at 70 (141.6 and 143.7 bytes a row).
CREATE INDEX indexnow_sources_url ON indexnow_sources (url_hash);
CREATE INDEX indexnow_sources_wake ON indexnow_sources (wake_at) WHERE wake_at IS NOT NULL;

-- Which columns the single-row UPDATEs of each watched table changed (indexnow.track_columns),
-- counted by the deriver of their change sets (src/derive/column_changes.rs): how many updates
-- changed the column, how many changed it alone, and how many of those the derivation announced
-- (queued a request for). Read with indexnow_column_changes(); delete rows to start again.
CREATE TABLE indexnow_column_changes (
    tbl         regclass NOT NULL,
    column_name text NOT NULL,
    updates     bigint NOT NULL,
    alone       bigint NOT NULL,
    announced   bigint NOT NULL,
    since       timestamptz NOT NULL,               -- first counted
    last_at     timestamptz NOT NULL,               -- last counted
    PRIMARY KEY (tbl, column_name)
);

-- One row per request made (or per dry-run decision), with the URLs it carried: "was this page
-- sent, when, and what was the answer" is answered here for as long as the request is kept
-- (indexnow.history_days). One array a request, not a row a URL: a million URLs sent take the
-- size docs/benchmarks.md gives ("The URLs of every request"), compressed with their row.
CREATE TABLE indexnow_pushes (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pushed_at timestamptz NOT NULL DEFAULT now(),
    host      text NOT NULL,
    url_count integer NOT NULL,
    status    integer NOT NULL,                     -- HTTP status; 0 = no response
    duration  interval,
    note      text,
    urls      text[]                                -- the URLs it carried, in normal form
                                                    --   (NULL: a request made before 0.6.0)
);
CREATE INDEX indexnow_pushes_host_time ON indexnow_pushes (host, pushed_at DESC);
CREATE INDEX indexnow_pushes_time ON indexnow_pushes (pushed_at);

-- Pauses ordered by the endpoint, kept in the database so a restart keeps them.
-- scope '*' pauses all sending (429, 5xx, no connection); a host name pauses that host only
-- (403 SiteVerificationNotCompleted).
CREATE TABLE indexnow_backoff (
    scope  text PRIMARY KEY,
    until  timestamptz NOT NULL,
    status integer NOT NULL,
    note   text
);

-- pg_dump keeps the keys and the queue (extension tables are otherwise left out of a dump).
SELECT pg_catalog.pg_extension_config_dump('indexnow_hosts', '');
SELECT pg_catalog.pg_extension_config_dump('indexnow_urls', '');
SELECT pg_catalog.pg_extension_config_dump('indexnow_pushes', '');
SELECT pg_catalog.pg_extension_config_dump('indexnow_backoff', '');
SELECT pg_catalog.pg_extension_config_dump('indexnow_watches', '');
SELECT pg_catalog.pg_extension_config_dump('indexnow_changes', '');
SELECT pg_catalog.pg_extension_config_dump('indexnow_sources', '');
SELECT pg_catalog.pg_extension_config_dump('indexnow_relations', '');
-- and the sequences of their ids, or a restored history's ids would be handed out again.
SELECT pg_catalog.pg_extension_config_dump('indexnow_watches_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('indexnow_changes_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('indexnow_pushes_id_seq', '');
