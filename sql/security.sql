-- indexnow: who may do what (spec behaviour 20). Runs after every object exists.
--
-- Nothing is readable by PUBLIC: the queue tells what a site is about to publish and the hosts
-- table holds keys. The owner (the role that created the extension) grants what others need:
--   GRANT EXECUTE ON FUNCTION indexnow_queue(text, text) TO app;      -- custom triggers
--   GRANT EXECUTE ON FUNCTION indexnow_status() TO monitoring;
-- Functions that write the queue for other roles are SECURITY DEFINER, and every function that
-- runs the extension's own SQL pins search_path to pg_catalog and pg_temp: not to this schema,
-- which may be open to others (public), whose function with a closer argument type than a
-- built-in's would be chosen over it. The SQL names this schema's objects explicitly
-- (src/extension.rs, OWN_SEARCH_PATH).

-- Watching, for a role that is not the extension's owner, in one step:
--   SELECT indexnow_grant_watching('editor');   -- and indexnow_revoke_watching('editor')
-- The role may then watch, unwatch and reconcile the tables it has the TRIGGER privilege on (its
-- own), and a watch's SQL runs with that role's rights (src/derive/owner.rs).
CREATE FUNCTION _indexnow_watching_privilege(role regrole, give boolean) RETURNS void
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
CREATE FUNCTION indexnow_grant_watching(role regrole) RETURNS void
LANGUAGE sql AS $$ SELECT @extschema@._indexnow_watching_privilege(role, true) $$;
CREATE FUNCTION indexnow_revoke_watching(role regrole) RETURNS void
LANGUAGE sql AS $$ SELECT @extschema@._indexnow_watching_privilege(role, false) $$;

REVOKE ALL ON indexnow_hosts, indexnow_urls, indexnow_pushes, indexnow_backoff, indexnow_watches,
    indexnow_changes, indexnow_sources, indexnow_relations FROM PUBLIC;

REVOKE ALL ON FUNCTION indexnow_add_host(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_set_key_location(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_disable_host(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_enable_host(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_confirm_copy() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_queue(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_column_changes(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_explain(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_coverage(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_sitemap(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_watch(regclass, text, text, text[], text, text, text, text[], boolean, boolean, text, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION _indexnow_watching_privilege(regrole, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_grant_watching(regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_revoke_watching(regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION _indexnow_watch_rows(integer, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_unwatch(regclass, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_reconcile(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION _indexnow_capture() FROM PUBLIC;
REVOKE ALL ON FUNCTION _indexnow_capture_target(text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_derive(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION _indexnow_table_changed(oid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION _indexnow_schema_renamed(oid) FROM PUBLIC;
REVOKE ALL ON FUNCTION _indexnow_table_dropped(oid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION _indexnow_before_ddl() FROM PUBLIC;
-- _indexnow_expression_type() stays PUBLIC: it runs as its caller (a watcher's expressions are
-- checked with the watcher's rights) and tells only what the caller could find out with a query.
-- So do _indexnow_url_part() and _indexnow_publish_time(), which a watch's row statement calls
-- as the watch's maker: functions of their arguments alone.
REVOKE ALL ON FUNCTION indexnow_push_now() FROM PUBLIC;
REVOKE ALL ON FUNCTION _indexnow_written_by_this_transaction(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION _indexnow_wake_launcher_at_commit() FROM PUBLIC;

ALTER FUNCTION indexnow_add_host(text, text, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION indexnow_set_key_location(text, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION indexnow_disable_host(text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION indexnow_enable_host(text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION indexnow_confirm_copy() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION indexnow_queue(text, text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
-- indexnow_status() is a monitoring call: no parallel workers, no JIT. The planner takes a third
-- of the queue to be pending (it cannot estimate request_seq > settled_seq) and started two
-- workers to count an empty pending index: 5 ms of a 7 ms call, measured with 200,000 pushed URLs.
ALTER FUNCTION indexnow_status() SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET max_parallel_workers_per_gather = 0 SET jit = off;
ALTER FUNCTION indexnow_column_changes(regclass) SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp;
-- indexnow_explain() reads the queue, the watches' rows (with their makers' rights, through
-- _indexnow_watch_rows()) and the history: for whom the owner grants it, as indexnow_status().
ALTER FUNCTION indexnow_explain(text) SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET jit = off;
ALTER FUNCTION indexnow_coverage(regclass) SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET jit = off;
-- indexnow_sitemap() is for the web application that serves /sitemap.xml: grant it to that role.
ALTER FUNCTION indexnow_sitemap(text, integer) SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off;
-- Watching runs as its caller (the caller's rights and search_path check the arguments and the
-- watch's SQL), then does the extension's part as the extension's owner (src/derive/owner.rs).
-- indexnow_watch is not pinned: the watch's expressions are written for the caller's search_path.
ALTER FUNCTION indexnow_unwatch(regclass, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION indexnow_reconcile(regclass) SET search_path = pg_catalog, pg_temp;
-- _indexnow_watch_rows() (src/derive/owner.rs) runs a watch's SQL as the role that made it, under
-- the watch's own search_path, which the derivation that calls it has set: not pinned here.
-- Follows partitions joining or leaving a watched tree (called by the event trigger, as the
-- extension's owner: see _indexnow_on_ddl() in capture.sql).
ALTER FUNCTION _indexnow_table_changed(oid, text) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION _indexnow_schema_renamed(oid) SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION _indexnow_table_dropped(oid, text) SET search_path = pg_catalog, pg_temp;
-- Derives the change sets the capture triggers recorded, for whoever may read the queue.
ALTER FUNCTION indexnow_derive(bigint) SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET jit = off;
-- The capture trigger reads the watches of the table and records (or derives) what a statement
-- changed whoever writes the table. jit is off: the statement that records a bulk change set has
-- a plan cost (transition tables have no statistics) that can look large enough to trigger JIT,
-- which then costs more than the statement (measured, for the earlier statements of this trigger:
-- 735 ms of compilation for an 834 ms statement over 20,000 rows). The SET clause puts the
-- caller's search_path back on return.
ALTER FUNCTION _indexnow_capture() SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET jit = off;
-- No JIT in a sending pass (as in the worker, see src/worker/mod.rs): short statements whose
-- estimated cost, over a pending set the planner cannot estimate, can pass jit_above_cost.
ALTER FUNCTION indexnow_push_now() SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET jit = off;

-- Planner hints: one URL in, at most one row out.
ALTER FUNCTION _indexnow_capture_target(text, boolean) ROWS 1;

-- The launcher starts this database's worker when this CREATE EXTENSION commits.
SELECT _indexnow_wake_launcher_at_commit();
