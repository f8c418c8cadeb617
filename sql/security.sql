-- indexnow: who may do what (spec behaviour 20). Runs after every object exists.
--
-- Nothing is readable by PUBLIC: the queue tells what a site is about to publish and the hosts
-- table holds keys. The owner (the role that created the extension) grants what others need:
--   GRANT EXECUTE ON FUNCTION indexnow_queue(text, text) TO app;      -- custom triggers
--   GRANT EXECUTE ON FUNCTION indexnow_status() TO monitoring;
-- Functions that write the queue for other roles are SECURITY DEFINER, and every function that
-- runs SQL pins search_path to this schema, so no caller can slip its own objects in.

REVOKE ALL ON indexnow_hosts, indexnow_urls, indexnow_pushes, indexnow_backoff FROM PUBLIC;

REVOKE ALL ON FUNCTION indexnow_add_host(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_queue(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION indexnow_status() FROM PUBLIC;

ALTER FUNCTION indexnow_add_host(text, text, text) SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_queue(text, text) SECURITY DEFINER SET search_path = @extschema@, pg_temp;
ALTER FUNCTION indexnow_status() SECURITY DEFINER SET search_path = @extschema@, pg_temp;
