-- indexnow: who may do what (spec behaviour 20). Runs after every object exists.
--
-- Nothing is readable by PUBLIC: the queue tells what a site is about to publish and the hosts
-- table holds keys. The owner (the role that created the extension) grants what others need:
--   GRANT EXECUTE ON FUNCTION indexnow_queue(text, text) TO app;      -- custom triggers
--   GRANT EXECUTE ON FUNCTION indexnow_status() TO monitoring;
-- Functions that write the queue for other roles are SECURITY DEFINER, and every function that
-- runs SQL pins search_path to this schema, so no caller can slip its own objects in.

REVOKE ALL ON indexnow_hosts, indexnow_urls, indexnow_pushes, indexnow_backoff, indexnow_watches
    FROM PUBLIC;

REVOKE ALL ON FUNCTION indexnow_add_host(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_queue(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_watch(regclass, text, text, text[], text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_unwatch(regclass, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_reconcile(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_capture() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_capture_statements() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_capture_target(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_expression_type(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_push_now() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_written_by_this_transaction(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_wake_worker_at_commit() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_wake_launcher_at_commit() FROM PUBLIC;

ALTER FUNCTION indexnow_add_host(text, text, text) SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_queue(text, text) SECURITY DEFINER SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_status() SECURITY DEFINER SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_unwatch(regclass, text) SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_reconcile(regclass) SET search_path = @extschema@, pg_temp;
-- The capture trigger reads the watches of the table whoever writes it.
ALTER FUNCTION indexnow_capture() SECURITY DEFINER SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_push_now() SECURITY DEFINER SET search_path = @extschema@, pg_temp;
-- indexnow_watch is not pinned on purpose: it resolves the caller's visible and url_sql
-- expressions with the caller's search_path (and names its own objects with their schema).

-- Planner hints: one URL in, at most one row out.
ALTER FUNCTION indexnow_capture_target(text, text, text) ROWS 1;

-- The launcher starts this database's worker when this CREATE EXTENSION commits.
SELECT indexnow_wake_launcher_at_commit();
