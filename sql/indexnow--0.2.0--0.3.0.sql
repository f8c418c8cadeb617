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

-- The bodies that call them by name (as sql/capture.sql and sql/security.sql have them).
CREATE OR REPLACE FUNCTION @extschema@._indexnow_on_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = @extschema@, pg_temp
AS $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT DISTINCT objid, command_tag FROM pg_catalog.pg_event_trigger_ddl_commands()
              WHERE object_type IN ('table', 'table column') LOOP
        BEGIN
            PERFORM @extschema@._indexnow_table_changed(c.objid, c.command_tag);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'indexnow: could not follow % of %: %', c.command_tag, c.objid::regclass, SQLERRM;
        END;
    END LOOP;
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
