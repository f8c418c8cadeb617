-- indexnow 0.7.0 -> 0.8.0, run by ALTER EXTENSION indexnow UPDATE.
-- (docs/releases.md says how an upgrade script is made and tested.)
\echo Use "ALTER EXTENSION indexnow UPDATE" to load this file. \quit

-- First, the library this server runs must be 0.8.0's (or later): 0.7.0's writes the columns
-- dropped below.
DO $check$
DECLARE
    running text := @extschema@.indexnow_library_version();
BEGIN
    IF pg_catalog.string_to_array(running, '.')::int[] < '{0,8,0}' THEN
        RAISE EXCEPTION 'indexnow: this server still runs the library of release %', running
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Install indexnow 0.8.0, restart the server, then run ALTER EXTENSION indexnow UPDATE.';
    END IF;
END
$check$;

-- A source is one row a watched page: its URL's text and host are the queue row's (every source
-- has one), and its fingerprint is 8 bytes (fingerprint64). The fingerprint a row had is kept:
-- the new one is the first 8 bytes of the same md5 (src/derive/statements.rs, `fingerprint_of`),
-- so no page is taken for changed by the update. The text columns stay, NULL, for the restore of
-- a dump of 0.7.0 or earlier (its COPY names them). The table is then rewritten (ALTER COLUMN
-- ... USING, a rewrite), so that it takes the bytes of the new rows only; the UPDATE and the
-- rewrite hold the table's lock for their length: writes to the watched tables go on (they
-- record change sets, which the workers derive after the update).
ALTER TABLE @extschema@.indexnow_sources
    ALTER COLUMN url DROP NOT NULL,
    ALTER COLUMN host DROP NOT NULL,
    ALTER COLUMN fingerprint DROP NOT NULL,
    ADD COLUMN fingerprint64 bigint;
UPDATE @extschema@.indexnow_sources
   SET fingerprint64 = CASE WHEN fingerprint = '' THEN 0
                            ELSE ('x' OPERATOR(pg_catalog.||) pg_catalog.left(fingerprint, 16))
                                 ::pg_catalog.bit(64)::bigint END;
ALTER TABLE @extschema@.indexnow_sources
    ALTER COLUMN url TYPE text USING NULL::text,
    ALTER COLUMN host TYPE text USING NULL::text,
    ALTER COLUMN fingerprint TYPE text USING NULL::text;

-- The rows a derivation reads give that fingerprint (a new C symbol with the new columns).
DROP FUNCTION @extschema@._indexnow_watch_rows(integer, jsonb);
CREATE FUNCTION @extschema@."_indexnow_watch_rows"(
	"watch_id" INT, /* i32 */
	"keys" jsonb /* Option < JsonB > */
) RETURNS TABLE (
	"row_key" TEXT,  /* Option < String > */
	"present" bool,  /* bool */
	"url" TEXT,  /* Option < String > */
	"vis" bool,  /* Option < bool > */
	"pub_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"exp_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"fp" bigint  /* Option < i64 > */
)
STABLE PARALLEL UNSAFE
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'rows_of_watch_fingerprinted_wrapper';
REVOKE ALL ON FUNCTION @extschema@._indexnow_watch_rows(integer, jsonb) FROM PUBLIC;
