-- indexnow 0.3.0 -> 0.4.0, run by ALTER EXTENSION indexnow UPDATE.
-- (docs/releases.md says how an upgrade script is made and tested.)
\echo Use "ALTER EXTENSION indexnow UPDATE" to load this file. \quit

-- First, the library this server runs must be 0.4.0's (or later): 0.3.0's reads the statements
-- it stored in the columns this script drops. A library is loaded at server start.
DO $check$
DECLARE
    running text := @extschema@.indexnow_library_version();
BEGIN
    IF pg_catalog.string_to_array(running, '.')::int[] < '{0,4,0}' THEN
        RAISE EXCEPTION 'indexnow: this server still runs the library of release %', running
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Install indexnow 0.4.0, restart the server, then run ALTER EXTENSION indexnow UPDATE.';
    END IF;
END
$check$;

-- A watch may ask for its tables' capture triggers to fire in replica mode too. (First: the end
-- of every ALTER TABLE below reads it, with this library.)
ALTER TABLE @extschema@.indexnow_watches ADD COLUMN replica_writes boolean NOT NULL DEFAULT false;

-- A watch's statements are generated where they are used, from its arguments and its table as
-- the catalog has it (src/derive/generated.rs): the stored ones go. (The statement trigger on the
-- two tables tells every backend to generate them afresh.)
ALTER TABLE @extschema@.indexnow_watches
    DROP COLUMN rows_keys, DROP COLUMN rows_all, DROP COLUMN derive_keys, DROP COLUMN derive_all;
ALTER TABLE @extschema@.indexnow_relations DROP COLUMN dependents;

-- A watch's publish_at read as a point in time, whatever its type (the statements no longer
-- carry the type the watch was made with).
CREATE FUNCTION @extschema@._indexnow_publish_time(at timestamptz, zone text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN at;

CREATE FUNCTION @extschema@._indexnow_publish_time(at timestamp, zone text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN pg_catalog.timezone(zone, at);

CREATE FUNCTION @extschema@._indexnow_publish_time(at date, zone text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN pg_catalog.timezone(zone, at::pg_catalog.timestamp);

-- The columns a watch's expression reads are found by parse analysis in the library: the function
-- that made a temporary view for it (which made PREPARE TRANSACTION fail) goes.
DROP FUNCTION @extschema@._indexnow_expression_columns(text, text);

-- An unlogged table made below a watched or related table (CREATE UNLOGGED TABLE ... PARTITION
-- OF) is refused before it is made: the statement tells whether it is unlogged.
DROP EVENT TRIGGER indexnow_before_ddl;
CREATE EVENT TRIGGER indexnow_before_ddl ON ddl_command_start
    WHEN TAG IN ('ALTER TABLE', 'DROP TABLE', 'CREATE TABLE', 'CREATE FOREIGN TABLE',
                  'ALTER FOREIGN TABLE', 'CREATE TRIGGER', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION @extschema@._indexnow_before_ddl();

-- indexnow_watch() takes current_is_known and replica_writes: the function is made again with it, keeping the
-- EXECUTE the old one was granted (indexnow_grant_watching()), and the helper that grants it
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
	"replica_writes" bool DEFAULT false
) RETURNS void
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'watch_table_wrapper';
REVOKE ALL ON FUNCTION @extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[], boolean, boolean) FROM PUBLIC;
DO $grants$
DECLARE
    granted record;
BEGIN
    FOR granted IN
        SELECT a.grantee::pg_catalog.regrole AS role, a.is_grantable
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid = '@extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[])'::pg_catalog.regprocedure
           AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION @extschema@.indexnow_watch(regclass, text, text, text[], '
            'text, text, text, text[], boolean, boolean) TO %s%s',
            granted.role, CASE WHEN granted.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$grants$;
-- A GRANT in an extension script is recorded as the extension's own (pg_init_privs), which
-- pg_dump leaves out: the new function's initial privileges are made the old one's, so that the
-- grants carried over stay the user's, dumped and restored as before.
UPDATE pg_catalog.pg_init_privs n SET initprivs = o.initprivs
  FROM pg_catalog.pg_init_privs o
 WHERE n.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND n.objsubid = 0
   AND n.objoid = '@extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[], boolean, boolean)'::pg_catalog.regprocedure
   AND o.classoid = n.classoid AND o.objsubid = 0
   AND o.objoid = '@extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[])'::pg_catalog.regprocedure;
DROP FUNCTION @extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[]);
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
        '@extschema@.indexnow_watch(regclass, text, text, text[], text, text, text, text[], boolean, boolean), '
        '@extschema@.indexnow_unwatch(regclass, text), @extschema@.indexnow_reconcile(regclass) '
        '%s %s',
        CASE WHEN give THEN 'GRANT' ELSE 'REVOKE' END, CASE WHEN give THEN 'TO' ELSE 'FROM' END,
        role);
END
$$;

-- indexnow_status() gains capture_gaps: which watched tables are written where the capture
-- triggers cannot see. A function's result columns cannot be changed in place, so it is dropped
-- and created again, as in 0.2.0 -> 0.3.0: the EXECUTE grants roles were given on it are put back
-- and kept out of the extension's initial privileges, so that pg_dump still dumps them.
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
        "changes_waiting" bigint,
        "capture_gaps" TEXT
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
