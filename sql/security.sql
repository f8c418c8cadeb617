-- indexnow: who may do what (spec behaviour 20). Runs after every object exists.
--
-- Nothing is readable by PUBLIC: the queue tells what a site is about to publish and the hosts
-- table holds keys. The owner (the role that created the extension) grants what others need:
--   GRANT EXECUTE ON FUNCTION indexnow_queue(text, text) TO app;      -- custom triggers
--   GRANT EXECUTE ON FUNCTION indexnow_status() TO monitoring;
-- Functions that write the queue for other roles are SECURITY DEFINER, and every function that
-- runs SQL pins search_path to this schema, so no caller can slip its own objects in.

REVOKE ALL ON indexnow_hosts, indexnow_urls, indexnow_pushes, indexnow_backoff, indexnow_watches,
    indexnow_changes, indexnow_sources, indexnow_relations FROM PUBLIC;

REVOKE ALL ON FUNCTION indexnow_add_host(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_set_key_location(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_disable_host(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_enable_host(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_confirm_copy() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_queue(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_watch(regclass, text, text, text[], text, text, text, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_unwatch(regclass, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_reconcile(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_capture() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_capture_target(text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_derive(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_table_changed(oid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_expression_type(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_push_now() FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_written_by_this_transaction(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_wake_launcher_at_commit() FROM PUBLIC;

ALTER FUNCTION indexnow_add_host(text, text, text) SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_set_key_location(text, text) SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_disable_host(text) SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_enable_host(text) SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_confirm_copy() SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_queue(text, text) SECURITY DEFINER SET search_path = @extschema@, pg_temp;
-- indexnow_status() is a monitoring call: no parallel workers, no JIT. The planner takes a third
-- of the queue to be pending (it cannot estimate request_seq > settled_seq) and started two
-- workers to count an empty pending index: 5 ms of a 7 ms call, measured with 200,000 pushed URLs.
ALTER FUNCTION indexnow_status() SECURITY DEFINER SET search_path = @extschema@, pg_temp
    SET max_parallel_workers_per_gather = 0 SET jit = off;
ALTER FUNCTION indexnow_unwatch(regclass, text) SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_reconcile(regclass) SET search_path = @extschema@, pg_temp;
-- Follows partitions joining or leaving a watched tree (called by the event trigger, as the
-- extension's owner: see indexnow_on_ddl() in capture.sql).
ALTER FUNCTION indexnow_table_changed(oid, text) SET search_path = @extschema@, pg_temp;
-- Derives the change sets the capture triggers recorded, for whoever may read the queue.
ALTER FUNCTION indexnow_derive(bigint) SECURITY DEFINER SET search_path = @extschema@, pg_temp
    SET jit = off;
-- The capture trigger reads the watches of the table and records (or derives) what a statement
-- changed whoever writes the table. jit is off: the statement that records a bulk change set has
-- a plan cost (transition tables have no statistics) that can look large enough to trigger JIT,
-- which then costs more than the statement (measured, for the earlier statements of this trigger:
-- 735 ms of compilation for an 834 ms statement over 20,000 rows). The SET clause puts the
-- caller's search_path back on return.
ALTER FUNCTION indexnow_capture() SECURITY DEFINER SET search_path = @extschema@, pg_temp
    SET jit = off;
-- No JIT in a sending pass (as in the worker, see src/worker/mod.rs): short statements whose
-- estimated cost, over a pending set the planner cannot estimate, can pass jit_above_cost.
ALTER FUNCTION indexnow_push_now() SECURITY DEFINER SET search_path = @extschema@, pg_temp
    SET jit = off;
-- indexnow_watch is not pinned on purpose: it resolves the caller's visible and url_sql
-- expressions with the caller's search_path (and names its own objects with their schema).

-- Planner hints: one URL in, at most one row out.
ALTER FUNCTION indexnow_capture_target(text, boolean) ROWS 1;

-- The launcher starts this database's worker when this CREATE EXTENSION commits.
SELECT indexnow_wake_launcher_at_commit();
