-- indexnow 0.5.0 -> 0.6.0, run by ALTER EXTENSION indexnow UPDATE.
-- (docs/releases.md says how an upgrade script is made and tested.)
\echo Use "ALTER EXTENSION indexnow UPDATE" to load this file. \quit

-- First, the library this server runs must be 0.6.0's (or later): 0.5.0's has no function for the
-- declarations below. A library is loaded at server start.
DO $check$
DECLARE
    running text := @extschema@.indexnow_library_version();
BEGIN
    IF pg_catalog.string_to_array(running, '.')::int[] < '{0,6,0}' THEN
        RAISE EXCEPTION 'indexnow: this server still runs the library of release %', running
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Install indexnow 0.6.0, restart the server, then run ALTER EXTENSION indexnow UPDATE.';
    END IF;
END
$check$;

-- Under a backlog, content changes and removals go before re-announcements: the claims read
-- them first through this index (src/send/sql.rs). 0.5.0's library does not use it.
CREATE INDEX indexnow_urls_news ON @extschema@.indexnow_urls (host, changed_at)
    WHERE request_seq > settled_seq AND changed_at IS DISTINCT FROM pushed_changed_at;

-- Each request keeps the URLs it carried (NULL for the requests recorded before).
ALTER TABLE @extschema@.indexnow_pushes ADD COLUMN urls text[];

-- indexnow_explain(): why a URL is or is not sent; indexnow_coverage(): per watch, what is
-- public, told and owed. Like indexnow_status(): for whom the owner grants them.
CREATE FUNCTION @extschema@."indexnow_explain"(
	"url" TEXT
) RETURNS TABLE (
	"topic" TEXT,
	"says" TEXT
)
STABLE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'indexnow_explain_wrapper';
CREATE FUNCTION @extschema@."indexnow_coverage"(
	"tbl" regclass DEFAULT NULL
) RETURNS TABLE (
	"tbl" TEXT,
	"pattern" TEXT,
	"public" bigint,
	"scheduled" bigint,
	"told" bigint,
	"pending" bigint,
	"due_now" bigint,
	"never_announced" bigint,
	"held" bigint,
	"failed" bigint,
	"removals_owed" bigint,
	"changes_waiting" bigint
)
STABLE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'indexnow_coverage_wrapper';
REVOKE ALL ON FUNCTION @extschema@.indexnow_explain(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.indexnow_coverage(regclass) FROM PUBLIC;
ALTER FUNCTION @extschema@.indexnow_explain(text) SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off;
ALTER FUNCTION @extschema@.indexnow_coverage(regclass) SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off;

-- indexnow_sitemap(): a sitemaps.org document of a host's public URLs, for the web application.
CREATE FUNCTION @extschema@."indexnow_sitemap"(
	"host" TEXT,
	"page" INT DEFAULT 1
) RETURNS TEXT
STABLE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'indexnow_sitemap_wrapper';
REVOKE ALL ON FUNCTION @extschema@.indexnow_sitemap(text, integer) FROM PUBLIC;
ALTER FUNCTION @extschema@.indexnow_sitemap(text, integer) SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off;
