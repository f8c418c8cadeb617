-- indexnow 0.8.1 -> 0.8.2, run by ALTER EXTENSION indexnow UPDATE: the library only (many hosts
-- sent for faster: a settle planned once, the schema read once, a pool of request threads).
-- No SQL changes.
-- (docs/releases.md says how an upgrade script is made and tested.)
\echo Use "ALTER EXTENSION indexnow UPDATE" to load this file. \quit

-- The library this server runs must be 0.8.2's (or later): updated under 0.8.1's, the database
-- would say 0.8.2 to a library of 0.8.1, whose workers would wait for an update until a restart.
DO $check$
DECLARE
    running text := @extschema@.indexnow_library_version();
BEGIN
    IF pg_catalog.string_to_array(running, '.')::int[] < '{0,8,2}' THEN
        RAISE EXCEPTION 'indexnow: this server still runs the library of release %', running
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Install indexnow 0.8.2, restart the server, then run ALTER EXTENSION indexnow UPDATE.';
    END IF;
END
$check$;
