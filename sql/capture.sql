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
-- watched (src/capture/partitions.rs), a watched table altered, and a schema renamed under a
-- watched or related table (src/capture/watch.rs). Never fails the DDL it follows: a problem is a
-- WARNING.
CREATE FUNCTION _indexnow_on_ddl() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT DISTINCT objid, object_type, command_tag, object_identity
               FROM pg_catalog.pg_event_trigger_ddl_commands()
              WHERE object_type IN ('table', 'table column', 'foreign table', 'schema') LOOP
        BEGIN
            IF c.object_type = 'schema' THEN
                PERFORM @extschema@._indexnow_schema_renamed(c.objid);
            ELSE
                PERFORM @extschema@._indexnow_table_changed(c.objid, c.command_tag);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'indexnow: could not follow % of %: %', c.command_tag, c.object_identity, SQLERRM;
        END;
    END LOOP;
END
$$;
CREATE EVENT TRIGGER indexnow_partitions ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'ALTER TABLE', 'ALTER SCHEMA', 'CREATE FOREIGN TABLE',
                  'ALTER FOREIGN TABLE')
    EXECUTE FUNCTION _indexnow_on_ddl();

-- A watched or related table dropped (src/capture/dropped.rs): the removals of its pages are
-- queued and its watches end, or the watches that read it are told. Never fails the DROP. Not
-- while the extension itself is being dropped (its tables are gone then).
CREATE FUNCTION _indexnow_on_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d record;
BEGIN
    IF pg_catalog.to_regclass('@extschema@.indexnow_relations') IS NULL THEN
        RETURN;
    END IF;
    FOR d IN SELECT DISTINCT o.objid, o.object_identity
               FROM pg_catalog.pg_event_trigger_dropped_objects() o
              WHERE o.object_type = 'table'
                AND (o.objid IN (SELECT w.tbl::pg_catalog.oid FROM @extschema@.indexnow_watches w)
                     OR o.objid IN (SELECT r.tbl::pg_catalog.oid FROM @extschema@.indexnow_relations r)) LOOP
        BEGIN
            PERFORM @extschema@._indexnow_table_dropped(d.objid, d.object_identity);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'indexnow: could not follow the drop of %: %', d.object_identity, SQLERRM;
        END;
    END LOOP;
END
$$;
CREATE EVENT TRIGGER indexnow_drops ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION _indexnow_on_drop();

-- DDL seen before it runs (src/capture/before_ddl.rs; only C is given the statement): a column of a
-- watched table renamed renames it in the templates and ignore lists that name it (the end of the
-- ALTER then makes the watches again, indexnow_partitions); a partition or child of a watched table
-- dropped records a whole-table change set for the table above it; a foreign table joining the tree
-- of a watched or related table is refused. Not SECURITY DEFINER: the
-- statement's names are resolved with the user's search_path; the function then switches to the
-- extension's owner itself.
CREATE FUNCTION _indexnow_before_ddl() RETURNS event_trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'indexnow_before_ddl_wrapper';
CREATE EVENT TRIGGER indexnow_before_ddl ON ddl_command_start
    WHEN TAG IN ('ALTER TABLE', 'DROP TABLE', 'CREATE TABLE', 'CREATE FOREIGN TABLE',
                  'ALTER FOREIGN TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION _indexnow_before_ddl();

-- For a watch's row statement (src/derive/statements.rs): its publish_at as a point in time,
-- whatever the type of the column or expression, which picks the overload: a value without time
-- zone is read in the watch maker's TimeZone (`zone`), a date at its midnight there. Inlined by
-- the planner (one SQL expression each).
CREATE FUNCTION _indexnow_publish_time(at timestamptz, zone text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN at;

CREATE FUNCTION _indexnow_publish_time(at timestamp, zone text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN pg_catalog.timezone(zone, at);

CREATE FUNCTION _indexnow_publish_time(at date, zone text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN pg_catalog.timezone(zone, at::pg_catalog.timestamp);

-- What the single-row UPDATEs of the watched tables changed, column by column, to choose a
-- watch's ignore list (counted with indexnow.track_columns on: src/derive/column_changes.rs).
-- `ignored`: every active watch of the table ignores the column (NULL: the table has no active
-- watch now); `read_by_expressions`: a watch's visible, url_sql, publish_at or expire_at reads it
-- (its change is compared even when ignored).
CREATE FUNCTION indexnow_column_changes(tbl regclass DEFAULT NULL)
RETURNS TABLE (tbl regclass, column_name text, updates bigint, changed_alone bigint,
               announced bigint, ignored boolean, read_by_expressions boolean,
               since timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT c.tbl, c.column_name, c.updates, c.alone, c.announced,
           (SELECT pg_catalog.bool_and(c.column_name OPERATOR(pg_catalog.=) ANY (w.ignore))
              FROM @extschema@.indexnow_watches w WHERE w.tbl OPERATOR(pg_catalog.=) c.tbl AND w.active),
           (SELECT pg_catalog.bool_or(c.column_name OPERATOR(pg_catalog.=) ANY (w.expression_columns))
              FROM @extschema@.indexnow_watches w WHERE w.tbl OPERATOR(pg_catalog.=) c.tbl AND w.active),
           c.since
      FROM @extschema@.indexnow_column_changes c
     WHERE (indexnow_column_changes.tbl IS NULL OR c.tbl OPERATOR(pg_catalog.=) indexnow_column_changes.tbl)
       AND EXISTS (SELECT FROM pg_catalog.pg_class r WHERE r.oid OPERATOR(pg_catalog.=) c.tbl)
     ORDER BY c.tbl::pg_catalog.text, c.updates DESC, c.column_name
$$;
