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
