-- indexnow 0.6.0 -> 0.7.0, run by ALTER EXTENSION indexnow UPDATE.
-- (docs/releases.md says how an upgrade script is made and tested.)
\echo Use "ALTER EXTENSION indexnow UPDATE" to load this file. \quit

-- First, the library this server runs must be 0.7.0's (or later): 0.6.0's does not know the
-- columns below.
DO $check$
DECLARE
    running text := @extschema@.indexnow_library_version();
BEGIN
    IF pg_catalog.string_to_array(running, '.')::int[] < '{0,7,0}' THEN
        RAISE EXCEPTION 'indexnow: this server still runs the library of release %', running
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Install indexnow 0.7.0, restart the server, then run ALTER EXTENSION indexnow UPDATE.';
    END IF;
END
$check$;

-- One transaction, one announcement: each change set names the transaction that recorded it
-- (those recorded before the update are taken as the update's), and a request derived from
-- one is held while that transaction has change sets waiting (src/send/sql.rs, `HELD`).
ALTER TABLE @extschema@.indexnow_changes
    ADD COLUMN xact xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id();
CREATE INDEX indexnow_changes_xact ON @extschema@.indexnow_changes (xact);
ALTER TABLE @extschema@.indexnow_urls ADD COLUMN held_by xid8;

-- A restore's CREATE TRIGGER is no longer looked at before it runs (nothing else makes a capture
-- trigger during a restore: docs/operations.md, "Backup and restore").
DROP EVENT TRIGGER indexnow_before_ddl;
CREATE EVENT TRIGGER indexnow_before_ddl ON ddl_command_start
    WHEN TAG IN ('ALTER TABLE', 'DROP TABLE', 'CREATE TABLE', 'CREATE FOREIGN TABLE',
                  'ALTER FOREIGN TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION @extschema@._indexnow_before_ddl();
