-- indexnow 0.2.0 -> 0.3.0, run by ALTER EXTENSION indexnow UPDATE.
-- (docs/releases.md says how an upgrade script is made and tested.)
\echo Use "ALTER EXTENSION indexnow UPDATE" to load this file. \quit

-- First, the library this server runs must be 0.3.0's (or later): 0.2.0's calls the internal
-- functions by their old names, which this script changes. A library is loaded at server start.
DO $check$
DECLARE
    running text := @extschema@.indexnow_library_version();
BEGIN
    IF pg_catalog.string_to_array(running, '.')::int[] < '{0,3,0}' THEN
        RAISE EXCEPTION 'indexnow: this server still runs the library of release %', running
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Install indexnow 0.3.0, restart the server, then run ALTER EXTENSION indexnow UPDATE.';
    END IF;
END
$check$;

-- 0.3.0 is created only in a UTF8 database (sql/schema.sql): an upgraded database in another
-- encoding keeps working as it did, and is told.
DO $encoding$
BEGIN
    IF pg_catalog.getdatabaseencoding() <> 'UTF8' THEN
        RAISE WARNING 'indexnow needs a database in the UTF8 encoding; this one is %: a key or '
                      'slug outside ASCII fails the write that saves it', pg_catalog.getdatabaseencoding()
            USING HINT = 'Move the site into a database created with ENCODING ''UTF8''.';
    END IF;
END
$encoding$;

-- Each backend keeps what the capture trigger knows about a watched table (src/capture/cache.rs);
-- a write to the watch tables tells every backend to read them again. Made first, so that this
-- script's own writes to indexnow_watches (the statements rewritten below) reach the backends
-- whose trigger kept the old statements since the server restarted with this library.
CREATE FUNCTION @extschema@."_indexnow_watches_changed"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'indexnow_watches_changed_wrapper';
CREATE TRIGGER indexnow_watches_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.indexnow_watches
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@._indexnow_watches_changed();
CREATE TRIGGER indexnow_relations_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.indexnow_relations
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@._indexnow_watches_changed();

-- The internal functions take a leading underscore, so that `\df indexnow_*` lists only what
-- users call. A rename keeps each function's oid, grants and settings, and the capture triggers
-- on the users' tables (which name their function by oid) keep firing.
ALTER FUNCTION @extschema@.indexnow_capture() RENAME TO _indexnow_capture;
ALTER FUNCTION @extschema@.indexnow_capture_target(text, boolean) RENAME TO _indexnow_capture_target;
ALTER FUNCTION @extschema@.indexnow_url_part(text) RENAME TO _indexnow_url_part;
ALTER FUNCTION @extschema@.indexnow_watch_rows(integer, jsonb) RENAME TO _indexnow_watch_rows;
ALTER FUNCTION @extschema@.indexnow_table_changed(oid, text) RENAME TO _indexnow_table_changed;
ALTER FUNCTION @extschema@.indexnow_written_by_this_transaction(bigint)
    RENAME TO _indexnow_written_by_this_transaction;
ALTER FUNCTION @extschema@.indexnow_wake_launcher_at_commit() RENAME TO _indexnow_wake_launcher_at_commit;
ALTER FUNCTION @extschema@.indexnow_expression_type(text, text, text) RENAME TO _indexnow_expression_type;
ALTER FUNCTION @extschema@.indexnow_watching_privilege(regrole, boolean)
    RENAME TO _indexnow_watching_privilege;
ALTER FUNCTION @extschema@.indexnow_on_ddl() RENAME TO _indexnow_on_ddl;

-- The functions that run the extension's own statements resolve names in pg_catalog only (and
-- pg_temp), not in the extension's schema: that schema (public, often) may be open to others,
-- whose function with a closer argument type (format(text, name, name), unnest(text[])) would be
-- chosen over the built-in one and run with the extension's rights. The library names the
-- extension's objects with their schema (src/extension.rs, OWN_SEARCH_PATH).
ALTER FUNCTION @extschema@.indexnow_add_host(text, text, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.indexnow_set_key_location(text, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.indexnow_disable_host(text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.indexnow_enable_host(text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.indexnow_confirm_copy() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.indexnow_queue(text, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.indexnow_unwatch(regclass, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.indexnow_reconcile(regclass) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@._indexnow_table_changed(oid, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.indexnow_derive(bigint) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@._indexnow_capture() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@.indexnow_push_now() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION @extschema@._indexnow_watching_privilege(regrole, boolean)
    SET search_path = pg_catalog, pg_temp;

-- A schema renamed under a watched or related table makes its watches again, as an ALTER TABLE
-- does (src/capture/watch.rs): their statements name the schema.
CREATE FUNCTION @extschema@."_indexnow_schema_renamed"(
	"schema" oid
) RETURNS void
	STRICT VOLATILE PARALLEL UNSAFE
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'indexnow_schema_renamed_wrapper';

DROP EVENT TRIGGER indexnow_partitions;
CREATE EVENT TRIGGER indexnow_partitions ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'ALTER SCHEMA', 'CREATE FOREIGN TABLE',
                  'ALTER FOREIGN TABLE')
    EXECUTE FUNCTION @extschema@._indexnow_on_ddl();

-- The bodies that call them by name (as sql/capture.sql and sql/security.sql have them).
CREATE OR REPLACE FUNCTION @extschema@._indexnow_on_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT DISTINCT objid, object_type, command_tag, object_identity
               FROM pg_catalog.pg_event_trigger_ddl_commands()
              WHERE object_type IN ('table', 'table column', 'foreign table', 'schema') LOOP
        BEGIN
            IF c.object_type = 'schema' THEN
                PERFORM @extschema@._indexnow_schema_renamed(c.objid);
            ELSE
                PERFORM @extschema@._indexnow_table_changed(c.objid, c.command_tag);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'indexnow: could not follow % of %: %', c.command_tag, c.object_identity, SQLERRM;
        END;
    END LOOP;
END
$$;
-- No foreign key from indexnow_relations to indexnow_watches (sql/schema.sql): pg_restore -j
-- refused to restore a database with related-table watches. (After the event trigger's function
-- above calls _indexnow_table_changed by its new name: the update's own ALTER TABLE fires it, and
-- 0.2.0's body warned that indexnow_table_changed(oid, text), renamed above, does not exist.)
ALTER TABLE @extschema@.indexnow_relations DROP CONSTRAINT indexnow_relations_watch_id_fkey;
DELETE FROM @extschema@.indexnow_relations r
 WHERE NOT EXISTS (SELECT FROM @extschema@.indexnow_watches w WHERE w.id = r.watch_id);

-- (and a NULL role is refused by name)
CREATE OR REPLACE FUNCTION @extschema@._indexnow_watching_privilege(role regrole, give boolean)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF role IS NULL THEN
        RAISE EXCEPTION '%: the role must not be NULL',
            CASE WHEN give THEN 'indexnow_grant_watching' ELSE 'indexnow_revoke_watching' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    EXECUTE pg_catalog.format(
        '%s EXECUTE ON FUNCTION '
        '@extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[]), '
        '@extschema@.indexnow_unwatch(regclass, text), @extschema@.indexnow_reconcile(regclass) '
        '%s %s',
        CASE WHEN give THEN 'GRANT' ELSE 'REVOKE' END, CASE WHEN give THEN 'TO' ELSE 'FROM' END,
        role);
END
$$;
CREATE OR REPLACE FUNCTION @extschema@.indexnow_grant_watching(role regrole) RETURNS void
LANGUAGE sql AS $$ SELECT @extschema@._indexnow_watching_privilege(role, true) $$;
CREATE OR REPLACE FUNCTION @extschema@.indexnow_revoke_watching(role regrole) RETURNS void
LANGUAGE sql AS $$ SELECT @extschema@._indexnow_watching_privilege(role, false) $$;

-- The statements stored for each watch call three of them, qualified with the extension's
-- schema as the library quotes it: always in double quotes (src/quote.rs), which
-- quote_ident() does only when needed.
DO $statements$
DECLARE
    ext text := (SELECT '"' || pg_catalog.replace(n.nspname, '"', '""') || '"'
                   FROM pg_catalog.pg_extension e
                   JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
                  WHERE e.extname = 'indexnow');
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['indexnow_url_part', 'indexnow_capture_target', 'indexnow_watch_rows'] LOOP
        UPDATE @extschema@.indexnow_watches
           SET rows_keys = pg_catalog.replace(rows_keys, ext || '.' || f || '(', ext || '._' || f || '('),
               rows_all = pg_catalog.replace(rows_all, ext || '.' || f || '(', ext || '._' || f || '('),
               derive_keys = pg_catalog.replace(derive_keys, ext || '.' || f || '(', ext || '._' || f || '('),
               derive_all = pg_catalog.replace(derive_all, ext || '.' || f || '(', ext || '._' || f || '(');
    END LOOP;
END
$statements$;

-- A watched table dropped queues the removals of its pages and ends its watches; a related table
-- dropped is told (src/capture/dropped.rs). Before, the watches stayed active on a dropped table's
-- oid and their sources kept the removals of a table made again under the same name from ever
-- being queued.
CREATE FUNCTION @extschema@."_indexnow_table_dropped"(
	"table" oid,
	"identity" TEXT
) RETURNS void
	STRICT VOLATILE PARALLEL UNSAFE
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'indexnow_table_dropped_wrapper';
REVOKE ALL ON FUNCTION @extschema@._indexnow_table_dropped(oid, text) FROM PUBLIC;
ALTER FUNCTION @extschema@._indexnow_table_dropped(oid, text) SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION @extschema@._indexnow_schema_renamed(oid) FROM PUBLIC;
ALTER FUNCTION @extschema@._indexnow_schema_renamed(oid) SET search_path = pg_catalog, pg_temp;
-- A watched or related table dropped (src/capture/dropped.rs): the removals of its pages are
-- queued and its watches end, or the watches that read it are told. Never fails the DROP. Not
-- while the extension itself is being dropped (its tables are gone then).
CREATE FUNCTION @extschema@._indexnow_on_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d record;
BEGIN
    IF pg_catalog.to_regclass('@extschema@.indexnow_relations') IS NULL THEN
        RETURN;
    END IF;
    FOR d IN SELECT DISTINCT o.objid, o.object_identity
               FROM pg_catalog.pg_event_trigger_dropped_objects() o
              WHERE o.object_type = 'table'
                AND (o.objid IN (SELECT w.tbl::pg_catalog.oid FROM @extschema@.indexnow_watches w)
                     OR o.objid IN (SELECT r.tbl::pg_catalog.oid FROM @extschema@.indexnow_relations r)) LOOP
        BEGIN
            PERFORM @extschema@._indexnow_table_dropped(d.objid, d.object_identity);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'indexnow: could not follow the drop of %: %', d.object_identity, SQLERRM;
        END;
    END LOOP;
END
$$;
CREATE EVENT TRIGGER indexnow_drops ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION @extschema@._indexnow_on_drop();

-- DDL seen before it runs (src/capture/before_ddl.rs; only C is given the statement): a column of a
-- watched table renamed renames it in the templates and ignore lists that name it (the end of the
-- ALTER then makes the watches again, indexnow_partitions); a partition or child of a watched table
-- dropped records a whole-table change set for the table above it; a foreign table joining the tree
-- of a watched or related table is refused; a capture trigger a restore makes on a table that has
-- it already replaces it. Not SECURITY DEFINER: the
-- statement's names are resolved with the user's search_path; the function then switches to the
-- extension's owner itself.
CREATE FUNCTION @extschema@._indexnow_before_ddl() RETURNS event_trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'indexnow_before_ddl_wrapper';
CREATE EVENT TRIGGER indexnow_before_ddl ON ddl_command_start
    WHEN TAG IN ('ALTER TABLE', 'DROP TABLE', 'CREATE FOREIGN TABLE', 'ALTER FOREIGN TABLE',
                  'CREATE TRIGGER', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION @extschema@._indexnow_before_ddl();
REVOKE ALL ON FUNCTION @extschema@._indexnow_before_ddl() FROM PUBLIC;

-- A watch's keyed row statement takes its keys from a subquery in FROM, not from a CTE named k:
-- the CTE hid a table named k from the watch's own expressions (src/capture/statements.rs).
UPDATE @extschema@.indexnow_watches
   SET rows_keys = pg_catalog.replace(
         pg_catalog.regexp_replace(rows_keys,
           '^WITH k AS \((.*?)\) SELECT k\.row_key::text, x\.row_key IS NOT NULL, x\.url, x\.vis, '
           'x\.pub_at, x\.fp FROM k LEFT JOIN LATERAL \( SELECT k\.row_key, ',
           'SELECT indexnow_asked.row_key::text, x.row_key IS NOT NULL, x.url, x.vis, x.pub_at, '
           'x.fp FROM (\1) indexnow_asked LEFT JOIN LATERAL ( SELECT indexnow_asked.row_key, '),
         '(k.row_key ->> ', '(indexnow_asked.row_key ->> ')
 WHERE rows_keys LIKE 'WITH k AS (%';

-- A row that starts giving a URL search engines know as live takes that URL's last push as the
-- time since it gave it (src/capture/statements.rs): before, only a URL whose removal was
-- pending did, and the removal of a URL another row had given (a new key, a second row, a page
-- moved between watched tables, a page of the baseline republished) was cancelled unsent. And a
-- URL with a request tried since its last push, never answered (it may have arrived), takes the
-- time it was tried.
UPDATE @extschema@.indexnow_watches
   SET derive_keys = pg_catalog.replace(derive_keys, old_since, new_since),
       derive_all = pg_catalog.replace(derive_all, old_since, new_since)
  FROM (VALUES (
          'WHEN u.request_seq > u.settled_seq AND u.reason IN (''moved'', ''unpublished'', '
          || '''deleted'', ''gone'', ''untranslated'') AND u.last_pushed_at IS NOT NULL '
          || 'THEN u.last_pushed_at',
          'WHEN coalesce(u.settled_reason NOT IN (''moved'', ''unpublished'', ''deleted'', '
          || '''gone'', ''untranslated''), false) THEN coalesce(u.last_pushed_at, ''-infinity'') '
          || 'WHEN u.tried_at > coalesce(u.last_pushed_at, ''-infinity'') THEN u.tried_at'
       )) AS since_rule (old_since, new_since);

-- A derivation locks the queue rows of the URLs going away before it reads whether search engines
-- may know them (src/capture/statements.rs, the CTE gu): a sender's claim committing meanwhile is
-- seen, and the URL gets its removal, where the statement's snapshot would not show the claim
-- and its request was cancelled while the announcement went out.
DO $gone$
DECLARE
    ext text := (SELECT '"' || pg_catalog.replace(n.nspname, '"', '""') || '"'
                   FROM pg_catalog.pg_extension e
                   JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
                  WHERE e.extname = 'indexnow');
    old_gone text := 'given AS (SELECT DISTINCT new_hash FROM pr WHERE new_hash IS NOT NULL), gone AS (';
    new_gone text := 'given AS (SELECT DISTINCT new_hash FROM pr WHERE new_hash IS NOT NULL), gu AS ( '
        || 'SELECT u.url_hash, u.request_seq, u.settled_reason, u.last_pushed_at, u.tried_at '
        || 'FROM ' || ext || '.indexnow_urls u '
        || 'WHERE u.url_hash IN (SELECT old_hash FROM pr WHERE old_hash IS NOT NULL '
        || 'AND old_hash IS DISTINCT FROM new_hash) '
        || 'ORDER BY u.url_hash FOR NO KEY UPDATE OF u), gone AS (';
    old_join text := 'FROM pr JOIN ' || ext || '.indexnow_urls u ON u.url_hash = pr.old_hash';
    new_join text := 'FROM pr JOIN gu u ON u.url_hash = pr.old_hash';
BEGIN
    UPDATE @extschema@.indexnow_watches
       SET derive_keys = pg_catalog.replace(pg_catalog.replace(derive_keys, old_gone, new_gone),
                                            old_join, new_join),
           derive_all = pg_catalog.replace(pg_catalog.replace(derive_all, old_gone, new_gone),
                                           old_join, new_join);
END
$gone$;

-- indexnow_watch() finds the columns a watch's expressions read (sql/capture.sql) and keeps them
-- in indexnow_watches.expression_columns: the UPDATE gate compares those even when they are
-- ignored as content (a change to one may hide the page or move its URL). The watches made
-- before get them too (NULL, for a watch whose expressions no longer parse: its gate then
-- compares every column).
ALTER TABLE @extschema@.indexnow_watches ADD COLUMN expression_columns text[];
CREATE FUNCTION @extschema@._indexnow_expression_columns(tbl text, expr text) RETURNS text[]
LANGUAGE plpgsql
AS $$
DECLARE
    columns text[];
BEGIN
    BEGIN
        EXECUTE format('CREATE TEMPORARY VIEW indexnow_expression_probe AS SELECT (%s) AS x FROM %s r',
                       expr, tbl);
        SELECT coalesce(pg_catalog.array_agg(DISTINCT a.attname::text), '{}') INTO columns
          FROM pg_catalog.pg_rewrite w
          JOIN pg_catalog.pg_depend d
            ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND d.objid = w.oid
          JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
         WHERE w.ev_class = 'pg_temp.indexnow_expression_probe'::pg_catalog.regclass
           AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
           AND d.refobjid = tbl::pg_catalog.regclass AND d.refobjsubid > 0;
        IF pg_catalog.strpos(pg_catalog.pg_get_viewdef('pg_temp.indexnow_expression_probe'::pg_catalog.regclass),
                             'r.*') > 0 THEN
            columns := NULL;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'INXP1';  -- undo the view
    EXCEPTION
        WHEN SQLSTATE 'INXP1' THEN RETURN columns;
        WHEN OTHERS THEN RETURN NULL;
    END;
END
$$;
DO $columns$
DECLARE
    w record;
    expr text;
    read text[];
    found_columns text[];
    path text := pg_catalog.current_setting('search_path');
BEGIN
    FOR w IN SELECT x.id, x.owner, x.search_path, x.visible, x.url_sql, x.publish_at,
                    pg_catalog.format('%I.%I', n.nspname, c.relname) AS tbl
               FROM @extschema@.indexnow_watches x
               JOIN pg_catalog.pg_class c ON c.oid = x.tbl
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace LOOP
        read := '{}';
        -- As the role that made the watch (its expressions are its text), with its search_path.
        PERFORM pg_catalog.set_config('search_path', w.search_path, true);
        FOREACH expr IN ARRAY ARRAY[w.visible, w.url_sql, w.publish_at] LOOP
            CONTINUE WHEN expr IS NULL;
            -- publish_at naming a column is read as the library reads it: r."column".
            IF EXISTS (SELECT FROM pg_catalog.pg_attribute a
                        WHERE a.attrelid = w.tbl::pg_catalog.regclass AND a.attname = expr
                          AND a.attnum > 0 AND NOT a.attisdropped) THEN
                expr := 'r."' || pg_catalog.replace(expr, '"', '""') || '"';
            END IF;
            BEGIN
                PERFORM pg_catalog.set_config('role', w.owner, true);
                found_columns := @extschema@._indexnow_expression_columns(w.tbl, expr);
                PERFORM pg_catalog.set_config('role', 'none', true);
            EXCEPTION WHEN OTHERS THEN
                found_columns := NULL;
            END;
            read := CASE WHEN found_columns IS NOT NULL THEN read || found_columns END;
            EXIT WHEN read IS NULL;
        END LOOP;
        PERFORM pg_catalog.set_config('search_path', path, true);
        UPDATE @extschema@.indexnow_watches SET expression_columns = read WHERE id = w.id;
    END LOOP;
END
$columns$;

-- The key's state, per host (crates/protocol/src/response.rs, key_state). A host of an upgraded
-- database starts as 'unused': its next answer says what the key is.
ALTER TABLE @extschema@.indexnow_hosts
    ADD COLUMN key_state text NOT NULL DEFAULT 'unused'
        CHECK (key_state IN ('unused', 'pending', 'verified', 'rejected')),
    ADD COLUMN key_state_at timestamptz,
    ADD COLUMN key_state_note text;

-- indexnow_status() gains five columns: key_state, key_state_at, key_state_note,
-- oldest_change_age and changes_waiting. A function's
-- result columns cannot be changed in place, so it is dropped and created again, as in
-- 0.1.0 -> 0.2.0: the EXECUTE grants roles were given on it are put back and kept out of the
-- extension's initial privileges, so that pg_dump still dumps them.
DO $upgrade$
DECLARE
    grants text[];
    initial pg_catalog.aclitem[];
BEGIN
    SELECT pg_catalog.array_agg(pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s',
                                p.oid::pg_catalog.regprocedure,
                                CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                     ELSE a.grantee::pg_catalog.regrole::text END,
                                CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END))
      INTO grants
      FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
     WHERE p.oid = '@extschema@.indexnow_status()'::pg_catalog.regprocedure
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner;

    DROP FUNCTION @extschema@.indexnow_status();
    CREATE FUNCTION @extschema@."indexnow_status"() RETURNS TABLE (
        "host" TEXT,
        "has_key" bool,
        "enabled" bool,
        "pending" bigint,
        "due_now" bigint,
        "failed" bigint,
        "next_due_at" timestamp with time zone,
        "last_push_at" timestamp with time zone,
        "last_status" INT,
        "backoff_until" timestamp with time zone,
        "held" TEXT,
        "worker" TEXT,
        "oldest_due_age" interval,
        "dry_run" bool,
        "key_state" TEXT,
        "key_state_at" timestamp with time zone,
        "key_state_note" TEXT,
        "oldest_change_age" interval,
        "changes_waiting" bigint
    )
    STRICT VOLATILE PARALLEL UNSAFE
    LANGUAGE c
    AS 'MODULE_PATHNAME', 'indexnow_status_wrapper';
    REVOKE ALL ON FUNCTION @extschema@.indexnow_status() FROM PUBLIC;
    ALTER FUNCTION @extschema@.indexnow_status() SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp SET max_parallel_workers_per_gather = 0 SET jit = off;

    SELECT i.initprivs INTO initial FROM pg_catalog.pg_init_privs i
     WHERE i.objoid = '@extschema@.indexnow_status()'::pg_catalog.regprocedure
       AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
    IF grants IS NOT NULL THEN
        FOR i IN 1 .. pg_catalog.array_length(grants, 1) LOOP
            EXECUTE grants[i];
        END LOOP;
        -- A GRANT inside an extension script counts as the extension's own; these are the users'.
        UPDATE pg_catalog.pg_init_privs SET initprivs = initial
         WHERE objoid = '@extschema@.indexnow_status()'::pg_catalog.regprocedure
           AND classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND objsubid = 0;
    END IF;
END
$upgrade$;


-- Watches with related tables are planned again (src/capture/related.rs): every chain of foreign
-- keys from the watched table to a related table is followed now (before, the shortest only: a
-- change to an article's second category moved nothing), and the partitions of a partitioned
-- related table carry the capture triggers (a write straight to one was not seen), as do the
-- tables above a watched or related partition or inheritance child (a write through the parent
-- was not seen). Each such
-- watch is made again as after an ALTER SCHEMA ... RENAME (as its maker; a watch that cannot be
-- made again keeps its old plan, with a WARNING). No row changed: nothing is recorded.
DO $relations$
DECLARE
    s oid;
    t oid;
BEGIN
    FOR s IN SELECT DISTINCT c.relnamespace FROM @extschema@.indexnow_watches w
               JOIN pg_catalog.pg_class c ON c.oid = w.tbl
              WHERE w.active AND EXISTS (SELECT FROM @extschema@.indexnow_relations r
                                          WHERE r.watch_id = w.id) LOOP
        PERFORM @extschema@._indexnow_schema_renamed(s);
    END LOOP;
    FOR t IN SELECT r.tbl::pg_catalog.oid FROM @extschema@.indexnow_relations r
               JOIN @extschema@.indexnow_watches w ON w.id = r.watch_id WHERE w.active
             UNION SELECT w.tbl::pg_catalog.oid FROM @extschema@.indexnow_watches w
              WHERE w.active LOOP
        PERFORM @extschema@._indexnow_table_changed(t, 'CREATE TABLE');
    END LOOP;
END
$relations$;
