-- indexnow: SQL helpers of capture (the trigger function and the derivation are Rust, under
-- src/capture/).

-- For indexnow_watch(): the type of an expression over a row of tbl, or an ERROR naming the
-- argument when it is not one expression over one row. Evaluated over one all-NULL row, so it
-- reads no rows of tbl. The expression is also placed in a WHERE clause, where PostgreSQL
-- refuses aggregates, window functions and set-returning functions: a derivation evaluates it
-- once per row, which none of those can be.
CREATE FUNCTION _indexnow_expression_type(tbl text, expr text, what text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    result text;
BEGIN
    BEGIN
        EXECUTE format('SELECT pg_catalog.pg_typeof((%s))::regtype::text '
                       'FROM (SELECT 1) indexnow_one LEFT JOIN %s r ON false '
                       'WHERE ((%s) IS NULL OR true)', expr, tbl, expr)
           INTO result;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'indexnow_watch: % is not a valid SQL expression over %: %', what, tbl, SQLERRM
            USING ERRCODE = 'invalid_parameter_value';
    END;
    RETURN result;
END
$$;

-- Partitions and inheritance children that join or leave a watched table's tree after it was
-- watched (src/capture/partitions.rs). Never fails the DDL it follows: a problem is a WARNING.
CREATE FUNCTION _indexnow_on_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = @extschema@, pg_temp
AS $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT DISTINCT objid, command_tag FROM pg_catalog.pg_event_trigger_ddl_commands()
              WHERE object_type IN ('table', 'table column') LOOP
        BEGIN
            PERFORM @extschema@._indexnow_table_changed(c.objid, c.command_tag);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'indexnow: could not follow % of %: %', c.command_tag, c.objid::regclass, SQLERRM;
        END;
    END LOOP;
END
$$;
CREATE EVENT TRIGGER indexnow_partitions ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE')
    EXECUTE FUNCTION _indexnow_on_ddl();
