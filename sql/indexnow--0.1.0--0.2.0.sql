-- indexnow 0.1.0 -> 0.2.0, run by ALTER EXTENSION indexnow UPDATE.
-- (docs/releases.md says how an upgrade script is made and tested.)
\echo Use "ALTER EXTENSION indexnow UPDATE" to load this file. \quit

-- First, the library this server runs must be 0.2.0's (or later): the new declarations below
-- would be called by the old library's code otherwise, which builds 12 status columns where 14
-- are declared. A library is loaded at server start; 0.1.0's has no indexnow_library_version().
DO $check$
BEGIN
    CREATE FUNCTION @extschema@."indexnow_library_version"() RETURNS TEXT
    STRICT STABLE PARALLEL SAFE
    LANGUAGE c
    AS 'MODULE_PATHNAME', 'indexnow_library_version_wrapper';
    PERFORM @extschema@.indexnow_library_version();
EXCEPTION WHEN undefined_function THEN
    RAISE EXCEPTION 'indexnow: this server still runs the library of an earlier release'
        USING ERRCODE = 'object_not_in_prerequisite_state',
              HINT = 'Install indexnow 0.2.0, restart the server, then run ALTER EXTENSION indexnow UPDATE.';
END
$check$;

-- pg_dump keeps the sequences of the ids of watches, change sets and pushes (0.1.0 dumped the
-- tables without them: after a restore the first push failed on a duplicate id).
SELECT pg_catalog.pg_extension_config_dump('@extschema@.indexnow_watches_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.indexnow_changes_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.indexnow_pushes_id_seq', '');

-- indexnow_status() gains two columns: oldest_due_age (how long the URL due the longest has
-- waited) and dry_run. A function's result columns cannot be changed in place, so it is dropped
-- and created again. The EXECUTE grants roles were given on it (a monitoring role, PUBLIC) are
-- put back — given by the role running the update, whoever gave them first — and kept out of the
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
        "dry_run" bool
    )
    STRICT VOLATILE PARALLEL UNSAFE
    LANGUAGE c
    AS 'MODULE_PATHNAME', 'indexnow_status_wrapper';
    REVOKE ALL ON FUNCTION @extschema@.indexnow_status() FROM PUBLIC;
    ALTER FUNCTION @extschema@.indexnow_status() SECURITY DEFINER
        SET search_path = @extschema@, pg_temp SET max_parallel_workers_per_gather = 0 SET jit = off;

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
