-- indexnow: the capture statements' runner, shared by every watched table.
--
-- Statement-level AFTER INSERT/UPDATE/DELETE triggers (with transition tables indexnow_old and
-- indexnow_new) and AFTER TRUNCATE triggers on watched tables call indexnow_capture()
-- (src/capture/gate.rs), which calls this function with the same trigger data; it runs, for each
-- watch of the table, the one set-based statement indexnow_watch() generated for the event
-- (src/capture/plan.rs says what those statements decide). The trigger arguments (TG_ARGV) name
-- the watches to run: for an UPDATE, the gate passes only those whose compared columns changed;
-- no arguments means every watch of the table.
--
-- SECURITY DEFINER: a role that may only write the content table still has its change queued.
-- The search_path is the watch's (its visible and url_sql expressions were written for it); the
-- function's SET clause restores the caller's when it returns.
--
-- jit is off: a capture statement is a short pipeline whose plan cost (transition tables have no
-- statistics) can look large enough to trigger JIT, which then costs more than the statement
-- (measured: 735 ms of compilation for an 834 ms statement over 20,000 rows). work_mem is
-- raised for the statement's pairing of old and new rows, which otherwise spills to disk in
-- many batches on a bulk UPDATE (measured: 1.05 s -> 0.79 s for 200,000 rows).
--
-- The content write never fails because of indexnow: a statement that fails (a url_sql that
-- raises, a watch left stale by ALTER TABLE) is rolled back on its own and reported as a WARNING.
CREATE FUNCTION indexnow_capture_statements() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = @extschema@, pg_temp
    SET jit = off SET work_mem = '64MB'
AS $$
DECLARE
    w record;
    queued bigint;
    any_queued boolean := false;
BEGIN
    FOR w IN
        SELECT pattern, search_path,
               CASE TG_OP WHEN 'INSERT' THEN on_insert WHEN 'UPDATE' THEN on_update
                          WHEN 'DELETE' THEN on_delete ELSE on_truncate END AS statement
          FROM @extschema@.indexnow_watches
         WHERE tbl = TG_RELID
           AND (TG_NARGS = 0 OR id = ANY (TG_ARGV::integer[]))
         ORDER BY id
    LOOP
        PERFORM pg_catalog.set_config('search_path', w.search_path, true);
        BEGIN
            EXECUTE w.statement;
            GET DIAGNOSTICS queued = ROW_COUNT;
            any_queued := any_queued OR queued > 0;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'indexnow: % on %.% was not captured for %: %',
                TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, w.pattern, SQLERRM
                USING HINT = 'The write itself succeeded. Fix the watch with indexnow_watch(), '
                             'then run indexnow_reconcile() to catch up.';
        END;
    END LOOP;
    IF any_queued THEN
        -- the worker looks at the queue when (and if) this transaction commits
        PERFORM @extschema@.indexnow_wake_worker_at_commit();
    END IF;
    RETURN NULL;
END
$$;

-- For indexnow_watch(): the type of an expression over a row of tbl, or an ERROR naming the
-- argument when it does not parse. Evaluated over one all-NULL row, so it reads no data.
CREATE FUNCTION indexnow_expression_type(tbl text, expr text, what text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    result text;
BEGIN
    BEGIN
        EXECUTE format('SELECT pg_catalog.pg_typeof((%s))::regtype::text '
                       'FROM (SELECT 1) indexnow_one LEFT JOIN %s r ON false', expr, tbl)
           INTO result;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'indexnow_watch: % is not a valid SQL expression over %: %', what, tbl, SQLERRM
            USING ERRCODE = 'invalid_parameter_value';
    END;
    RETURN result;
END
$$;
