-- indexnow 0.4.0 -> 0.5.0, run by ALTER EXTENSION indexnow UPDATE.
-- (docs/releases.md says how an upgrade script is made and tested.)
\echo Use "ALTER EXTENSION indexnow UPDATE" to load this file. \quit

-- First, the library this server runs must be 0.5.0's (or later): 0.4.0's has no function for the
-- declarations below. A library is loaded at server start.
DO $check$
DECLARE
    running text := @extschema@.indexnow_library_version();
BEGIN
    IF pg_catalog.string_to_array(running, '.')::int[] < '{0,5,0}' THEN
        RAISE EXCEPTION 'indexnow: this server still runs the library of release %', running
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Install indexnow 0.5.0, restart the server, then run ALTER EXTENSION indexnow UPDATE.';
    END IF;
END
$check$;

-- A watch may say when a public row stops being public (expire_at), and name related tables
-- whose any write derives the whole watched table (related_whole).
ALTER TABLE @extschema@.indexnow_watches ADD COLUMN expire_at text;
ALTER TABLE @extschema@.indexnow_relations ADD COLUMN whole boolean NOT NULL DEFAULT false;

-- A source remembers when its row must be derived again without a write (its expiry, or the
-- new publication time of a page withdrawn from search engines until then).
ALTER TABLE @extschema@.indexnow_sources
    ADD COLUMN withdrawn boolean NOT NULL DEFAULT false,
    ADD COLUMN wake_at timestamptz;
CREATE INDEX indexnow_sources_wake ON @extschema@.indexnow_sources (wake_at)
    WHERE wake_at IS NOT NULL;

-- A watch's rows are read with their expiry: the function's columns change, so it is made again
-- (internal: no user holds a grant on it).
DROP FUNCTION @extschema@._indexnow_watch_rows(integer, jsonb);
CREATE FUNCTION @extschema@."_indexnow_watch_rows"(
	"watch_id" INT,
	"keys" jsonb
) RETURNS TABLE (
	"row_key" TEXT,
	"present" bool,
	"url" TEXT,
	"vis" bool,
	"pub_at" timestamp with time zone,
	"exp_at" timestamp with time zone,
	"fp" TEXT
)
STABLE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'rows_of_watch_wrapper';
REVOKE ALL ON FUNCTION @extschema@._indexnow_watch_rows(integer, jsonb) FROM PUBLIC;

-- indexnow_watch() takes expire_at and related_whole: the function is made again with them,
-- keeping the EXECUTE the old one was granted (indexnow_grant_watching()) and its initial
-- privileges (so that pg_dump dumps the users' grants as before), and the helper that grants it
-- names the new one.
CREATE FUNCTION @extschema@.indexnow_watch(
	"tbl" regclass,
	"url" TEXT DEFAULT NULL,
	"visible" TEXT DEFAULT NULL,
	"ignore" TEXT[] DEFAULT '{created_at,updated_at}',
	"publish_at" TEXT DEFAULT NULL,
	"hidden_reason" TEXT DEFAULT 'unpublished',
	"url_sql" TEXT DEFAULT NULL,
	"related" TEXT[] DEFAULT NULL,
	"current_is_known" bool DEFAULT false,
	"replica_writes" bool DEFAULT false,
	"expire_at" TEXT DEFAULT NULL,
	"related_whole" TEXT[] DEFAULT NULL
) RETURNS void
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'watch_pattern_wrapper';
REVOKE ALL ON FUNCTION @extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[], boolean, boolean, text, text[]) FROM PUBLIC;
DO $grants$
DECLARE
    granted record;
BEGIN
    FOR granted IN
        SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END AS role,
               a.is_grantable
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid = '@extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[], boolean, boolean)'::pg_catalog.regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION @extschema@.indexnow_watch(regclass, text, text, text[], '
            'text, text, text, text[], boolean, boolean, text, text[]) TO %s%s',
            granted.role, CASE WHEN granted.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$grants$;
UPDATE pg_catalog.pg_init_privs n SET initprivs = o.initprivs
  FROM pg_catalog.pg_init_privs o
 WHERE n.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND n.objsubid = 0
   AND n.objoid = '@extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[], boolean, boolean, text, text[])'::pg_catalog.regprocedure
   AND o.classoid = n.classoid AND o.objsubid = 0
   AND o.objoid = '@extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[], boolean, boolean)'::pg_catalog.regprocedure;
DROP FUNCTION @extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[], boolean, boolean);
CREATE OR REPLACE FUNCTION @extschema@._indexnow_watching_privilege(role regrole, give boolean) RETURNS void
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
        '@extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[], boolean, boolean, text, text[]), '
        '@extschema@.indexnow_unwatch(regclass, text), @extschema@.indexnow_reconcile(regclass) '
        '%s %s',
        CASE WHEN give THEN 'GRANT' ELSE 'REVOKE' END, CASE WHEN give THEN 'TO' ELSE 'FROM' END,
        role);
END
$$;

-- Which columns the saves of a watched table change (indexnow.track_columns): the change set of
-- a tracked single-row UPDATE names them, its deriver counts them, indexnow_column_changes()
-- reads the counts.
ALTER TABLE @extschema@.indexnow_changes ADD COLUMN columns text[];
CREATE TABLE @extschema@.indexnow_column_changes (
    tbl         regclass NOT NULL,
    column_name text NOT NULL,
    updates     bigint NOT NULL,
    alone       bigint NOT NULL,
    announced   bigint NOT NULL,
    since       timestamptz NOT NULL,
    last_at     timestamptz NOT NULL,
    PRIMARY KEY (tbl, column_name)
);
CREATE FUNCTION @extschema@.indexnow_column_changes(tbl regclass DEFAULT NULL)
RETURNS TABLE (tbl regclass, column_name text, updates bigint, changed_alone bigint,
               announced bigint, ignored boolean, read_by_expressions boolean,
               since timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT c.tbl, c.column_name, c.updates, c.alone, c.announced,
           (SELECT pg_catalog.bool_and(c.column_name OPERATOR(pg_catalog.=) ANY (w.ignore))
              FROM @extschema@.indexnow_watches w WHERE w.tbl OPERATOR(pg_catalog.=) c.tbl AND w.active),
           (SELECT pg_catalog.bool_or(c.column_name OPERATOR(pg_catalog.=) ANY (w.expression_columns))
              FROM @extschema@.indexnow_watches w WHERE w.tbl OPERATOR(pg_catalog.=) c.tbl AND w.active),
           c.since
      FROM @extschema@.indexnow_column_changes c
     WHERE (indexnow_column_changes.tbl IS NULL OR c.tbl OPERATOR(pg_catalog.=) indexnow_column_changes.tbl)
       AND EXISTS (SELECT FROM pg_catalog.pg_class r WHERE r.oid OPERATOR(pg_catalog.=) c.tbl)
     ORDER BY c.tbl::pg_catalog.text, c.updates DESC, c.column_name
$$;
REVOKE ALL ON FUNCTION @extschema@.indexnow_column_changes(regclass) FROM PUBLIC;
ALTER FUNCTION @extschema@.indexnow_column_changes(regclass) SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp;
