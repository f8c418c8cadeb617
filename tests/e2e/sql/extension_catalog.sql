-- Everything the indexnow extension consists of in this database, one line per fact, in a stable
-- order and without OIDs: two databases have the same extension schema when their lines are equal.
-- (pg_dump --schema-only leaves an extension's own objects out, so it cannot tell.)
WITH ext AS (
    SELECT oid, extversion, extrelocatable, extnamespace::regnamespace::text AS schema,
           coalesce((SELECT array_agg(c::regclass::text ORDER BY c::regclass::text)
                       FROM unnest(extconfig) c), '{}') AS config,
           extcondition
      FROM pg_extension WHERE extname = 'indexnow'),
member AS (
    SELECT d.classid, d.objid, pg_describe_object(d.classid, d.objid, 0) AS name
      FROM pg_depend d, ext
     WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
facts AS (
    SELECT 'extension ' || extversion || ' in ' || schema || ' relocatable=' || extrelocatable
           || ' dumped=' || config::text || ' conditions=' || coalesce(extcondition::text, '')
      FROM ext
    UNION ALL
    -- functions: their whole definition, privileges (the owner's name is in them: compare two
    -- databases whose extension has one owner) and comment
    SELECT m.name || E'\n' || pg_get_functiondef(p.oid)
           || 'acl=' || coalesce(p.proacl::text, 'default')
           || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '')
      FROM member m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
    UNION ALL
    -- tables, sequences, views: kind, options, privileges, comment
    SELECT m.name || ' kind=' || c.relkind::text || ' persistence=' || c.relpersistence::text
           || ' options=' || coalesce(c.reloptions::text, '') || ' acl=' || coalesce(c.relacl::text, 'default')
           || ' rls=' || c.relrowsecurity || ' comment=' || coalesce(obj_description(c.oid, 'pg_class'), '')
           || CASE WHEN c.relkind::text = 'v' THEN E'\n' || pg_get_viewdef(c.oid) ELSE '' END
      FROM member m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
    UNION ALL
    -- their columns, in order (a column added by an upgrade script lands where a fresh install
    -- has it; one it drops leaves a gap in the attribute numbers that no user sees: counted among
    -- the live columns)
    SELECT m.name || ' column '
           || row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
           || coalesce(' default ' || pg_get_expr(ad.adbin, ad.adrelid), '')
           || CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END
           || CASE WHEN a.attgenerated <> '' THEN ' generated' ELSE '' END
           || ' collation=' || coalesce(nullif(a.attcollation, 0)::regcollation::text, '')
           || ' comment=' || coalesce(col_description(a.attrelid, a.attnum), '')
      FROM member m JOIN pg_attribute a ON m.classid = 'pg_class'::regclass AND a.attrelid = m.objid
      LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
     WHERE a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT m.name || ' constraint ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
      FROM member m JOIN pg_constraint k ON m.classid = 'pg_class'::regclass AND k.conrelid = m.objid
    UNION ALL
    SELECT m.name || ' index ' || pg_get_indexdef(i.indexrelid)
      FROM member m JOIN pg_index i ON m.classid = 'pg_class'::regclass AND i.indrelid = m.objid
    UNION ALL
    SELECT m.name || ' trigger ' || pg_get_triggerdef(t.oid)
      FROM member m JOIN pg_trigger t ON m.classid = 'pg_class'::regclass AND t.tgrelid = m.objid
     WHERE NOT t.tgisinternal
    UNION ALL
    SELECT m.name || ' policy ' || pol.polname || ' ' || coalesce(pg_get_expr(pol.polqual, pol.polrelid), '')
      FROM member m JOIN pg_policy pol ON m.classid = 'pg_class'::regclass AND pol.polrelid = m.objid
    UNION ALL
    SELECT m.name || ' event trigger on ' || e.evtevent || ' tags=' || coalesce(e.evttags::text, '')
           || ' enabled=' || e.evtenabled::text || ' function=' || e.evtfoid::regproc::text
      FROM member m JOIN pg_event_trigger e ON m.classid = 'pg_event_trigger'::regclass AND e.oid = m.objid
    UNION ALL
    -- any other kind of member (types, casts, operators, schemas): by its description
    SELECT m.name FROM member m
     WHERE m.classid NOT IN ('pg_proc'::regclass, 'pg_class'::regclass, 'pg_event_trigger'::regclass)
    UNION ALL
    -- the privileges pg_dump takes as the extension's own (a user's grant is not among them)
    SELECT 'initial privileges of ' || pg_describe_object(ip.classoid, ip.objoid, ip.objsubid)
           || ' ' || ip.initprivs::text
      FROM pg_init_privs ip, ext
     WHERE ip.privtype = 'e'
       AND EXISTS (SELECT FROM member m WHERE m.classid = ip.classoid AND m.objid = ip.objoid)
)
SELECT f FROM facts f(f) ORDER BY f COLLATE "C"
