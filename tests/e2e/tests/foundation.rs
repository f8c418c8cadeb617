//! The foundation on a real cluster: what needs separate transactions, sessions or client programs.

use indexnow_e2e::{count, Cluster, Options};

const URL: &str = "https://www.example.com/th/news";

#[test]
fn a_rolled_back_transaction_queues_nothing_a_committed_one_does() {
    let cluster = Cluster::start(Options::default());
    let mut db = cluster.create_db_with_extension("site");
    let mut tx = db.transaction().unwrap();
    tx.execute("SELECT indexnow_queue($1)", &[&URL]).unwrap();
    tx.rollback().unwrap();
    let n = count(&mut db, "SELECT count(*) FROM indexnow_urls");
    assert_eq!(n, 0);

    let mut tx = db.transaction().unwrap();
    tx.execute("SELECT indexnow_queue($1)", &[&URL]).unwrap();
    tx.commit().unwrap();
    let n = count(&mut db, "SELECT count(*) FROM indexnow_urls");
    assert_eq!(n, 1);
}

/// A session keeps the extension's schema once read, until an invalidation: the session that
/// drops the extension and creates it again in another schema, and another session that used it
/// before, both go on working with it there.
#[test]
fn sessions_follow_the_extension_created_again_in_another_schema() {
    let cluster = Cluster::start(Options::default());
    let mut one = cluster.create_db_with_extension("site");
    let mut two = cluster.connect("site");
    for db in [&mut one, &mut two] {
        db.execute("SELECT indexnow_queue($1)", &[&URL]).unwrap();
        db.batch_execute("SELECT * FROM indexnow_status()").unwrap();
    }
    one.batch_execute(
        "DROP EXTENSION indexnow; CREATE SCHEMA seo; CREATE EXTENSION indexnow SCHEMA seo",
    )
    .unwrap();
    for db in [&mut one, &mut two] {
        db.execute("SELECT seo.indexnow_queue($1)", &[&URL])
            .unwrap();
        db.batch_execute("SELECT * FROM seo.indexnow_status()")
            .unwrap();
    }
    assert_eq!(
        count(&mut two, "SELECT request_seq FROM seo.indexnow_urls"),
        2,
        "both sessions queued into the extension's new tables"
    );
}

#[test]
fn ten_saves_in_ten_transactions_make_one_row_and_restart_the_debounce_each_time() {
    let cluster = Cluster::start(Options::default());
    let mut db = cluster.create_db_with_extension("site");
    let mut seen = vec![];
    for _ in 0..10 {
        db.execute("SELECT indexnow_queue($1)", &[&URL]).unwrap();
        let row = db
            .query_one(
                "SELECT count(*) OVER (), changed_at, request_seq FROM indexnow_urls",
                &[],
            )
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), 1);
        seen.push((
            row.get::<_, chrono::DateTime<chrono::Utc>>(1),
            row.get::<_, i64>(2),
        ));
    }
    for pair in seen.windows(2) {
        assert!(pair[1].0 > pair[0].0, "changed_at did not move: {pair:?}");
        assert_eq!(pair[1].1, pair[0].1 + 1);
    }
}

#[test]
fn settings_reload_without_restart_into_open_sessions() {
    let cluster = Cluster::start(Options::default());
    let mut open = cluster.create_db_with_extension("site");
    let show = |c: &mut postgres::Client| -> String {
        c.query_one("SHOW indexnow.debounce", &[]).unwrap().get(0)
    };
    assert_eq!(show(&mut open), "2min");
    let mut admin = cluster.connect("site");
    admin
        .batch_execute("ALTER SYSTEM SET indexnow.debounce = '45s'")
        .unwrap();
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    // The open session takes the new value at its next command after the SIGHUP arrives.
    let mut value = show(&mut open);
    for _ in 0..50 {
        if value == "45s" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        value = show(&mut open);
    }
    assert_eq!(value, "45s");
}

#[test]
fn status_tells_whether_the_worker_runs_and_why_not() {
    for preload in [false, true] {
        let cluster = Cluster::start(Options {
            preload,
            conf: vec![],
        });
        let mut db = cluster.create_db_with_extension("site");
        db.execute("SELECT indexnow_queue($1)", &[&URL]).unwrap();
        let mut worker = || -> String { indexnow_e2e::worker_state(&mut db) };
        if preload {
            indexnow_e2e::wait_until(
                "the worker runs",
                std::time::Duration::from_secs(30),
                || worker().starts_with("running: idle (pid "),
            );
        } else {
            assert_eq!(
                worker(),
                "not running: indexnow is not in shared_preload_libraries"
            );
        }
    }
}

#[test]
fn pg_dump_keeps_keys_and_queue() {
    let cluster = Cluster::start(Options::default());
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "SELECT indexnow_add_host('www.example.com', '5f2b9c0e4d8a4b7f9e1c3a6d8b0f2e4c');
         SELECT indexnow_queue('https://www.example.com/a', 'changed');
         SELECT indexnow_queue('https://www.example.com/b', 'deleted');",
    )
    .unwrap();
    let mut restored = cluster.dump_and_restore("site", "restored");
    let row = restored
        .query_one(
            "SELECT (SELECT string_agg(url || ' ' || reason, ', ' ORDER BY url) FROM indexnow_urls), \
                    (SELECT key FROM indexnow_hosts)",
            &[],
        )
        .unwrap();
    assert_eq!(
        row.get::<_, String>(0),
        "https://www.example.com/a changed, https://www.example.com/b deleted"
    );
    assert_eq!(row.get::<_, String>(1), "5f2b9c0e4d8a4b7f9e1c3a6d8b0f2e4c");
}

/// Text read from the database is UTF-8 to the library: in another encoding a key or slug with
/// an accent would fail the user's write, so the extension refuses to be created there.
#[test]
fn create_extension_refuses_a_database_not_in_utf8() {
    let cluster = Cluster::start(Options::default());
    cluster
        .connect("postgres")
        .batch_execute(
            "CREATE DATABASE latin ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' \
             TEMPLATE template0",
        )
        .unwrap();
    let mut db = cluster.connect("latin");
    let err = db.batch_execute("CREATE EXTENSION indexnow").unwrap_err();
    let message = err
        .as_db_error()
        .expect("a server error")
        .message()
        .to_string();
    assert!(
        message.contains("needs a database in the UTF8 encoding; this one is LATIN1"),
        "{message}"
    );
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM pg_extension WHERE extname = 'indexnow'"
        ),
        0
    );
    // A UTF8 database of the same cluster takes it.
    cluster.create_db_with_extension("site");
}

/// The monitoring queries of docs/operations.md, as written there: the exporter's queries run as
/// the monitoring role given the grants the guide lists, and every metric they declare is a
/// column they return; the SQL checks run too, and on a healthy site none of them reports.
#[test]
fn the_operations_guide_monitoring_queries_run_as_written() {
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/operations.md"
    ))
    .unwrap();
    let section = |title: &str| {
        let start = guide.find(title).unwrap_or_else(|| panic!("no {title:?}"));
        let rest = &guide[start + title.len()..];
        let end = ["\n## ", "\n### "]
            .iter()
            .filter_map(|heading| rest.find(heading))
            .min()
            .unwrap_or(rest.len());
        rest[..end].to_string()
    };
    let blocks = |text: &str, lang: &str| -> Vec<String> {
        let fence = format!("```{lang}\n");
        text.split(&fence)
            .skip(1)
            .map(|b| b[..b.find("```").unwrap()].to_string())
            .collect()
    };
    let exporter = section("### Prometheus: postgres_exporter custom queries");
    let grants = blocks(&exporter, "sql").concat();
    let yaml = blocks(&exporter, "yaml").concat();
    // Each query: the indented lines after `query: |`, and the metric names after `metrics:`.
    let mut queries: Vec<(String, Vec<String>)> = vec![];
    let mut names: Vec<String> = vec![];
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(name) = line.strip_suffix(':').filter(|_| !line.starts_with(' ')) {
            names.push(name.to_string());
        } else if line.trim() == "query: |" {
            let mut sql = String::new();
            while let Some(l) = lines.next_if(|l| l.starts_with("    ")) {
                sql.push_str(l);
                sql.push('\n');
            }
            queries.push((sql, vec![]));
        } else if let Some(name) = line
            .strip_prefix("    - ")
            .and_then(|m| m.strip_suffix(':'))
        {
            queries.last_mut().unwrap().1.push(name.to_string());
        }
    }
    assert!(queries.len() >= 6, "{} queries", queries.len());
    assert_eq!(names.len(), queries.len(), "{names:?}");
    // The alert rules name metrics the exporter makes: `<query name>_<column>`.
    let exported: Vec<String> = names
        .iter()
        .zip(&queries)
        .flat_map(|(name, (_, metrics))| metrics.iter().map(move |m| format!("{name}_{m}")))
        .collect();
    let rules = section("### Alert rules (Prometheus)");
    let mut named = 0;
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("pg_indexnow_") {
            named += 1;
            assert!(
                exported.contains(&word.to_string()),
                "{word} is not exported: {exported:?}"
            );
        }
    }
    assert!(named >= 8, "{named} metrics named by the alert rules");
    let checks = blocks(&section("### The same checks in SQL"), "sql").concat();
    let checks: Vec<&str> = checks
        .split(';')
        .map(str::trim)
        .filter(|s| s.lines().any(|l| !l.trim_start().starts_with("--")))
        .collect();
    assert!(checks.len() >= 6, "{} checks", checks.len());

    let cluster = Cluster::start(Options {
        preload: true,
        conf: vec!["indexnow.naptime = '200ms'".into()],
    });
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(&format!(
        "CREATE ROLE monitoring LOGIN; {grants}; \
         SELECT indexnow_add_host('www.example.com', 'k0123456789');"
    ))
    .unwrap();
    indexnow_e2e::wait_until(
        "the worker runs",
        std::time::Duration::from_secs(30),
        || indexnow_e2e::worker_state(&mut db).starts_with("running"),
    );
    let mut monitoring = cluster.connect_as("site", "monitoring");
    for (sql, metrics) in &queries {
        let statement = monitoring
            .prepare(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let columns: Vec<&str> = statement.columns().iter().map(|c| c.name()).collect();
        for metric in metrics {
            assert!(
                columns.contains(&metric.as_str()),
                "{metric} not in {columns:?} of {sql}"
            );
        }
        monitoring
            .query(&statement, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for check in checks {
        let rows = monitoring
            .query(check, &[])
            .unwrap_or_else(|e| panic!("{check}: {e}"));
        assert!(
            rows.is_empty(),
            "{check}: {} rows on a healthy site",
            rows.len()
        );
    }
}

/// A database whose extension is there but whose tables are not (a cluster half restored by a
/// failed pg_upgrade; here a table renamed away) has its worker say so once and wait, looking again less and less often:
/// before, the worker failed on its first query and was started again, dozens of times a second.
#[test]
fn a_worker_whose_tables_are_missing_says_so_once_and_waits() {
    let cluster = Cluster::start(Options::default());
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "ALTER TABLE indexnow_pushes RENAME TO indexnow_pushes_gone; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
          WHERE backend_type = 'indexnow worker' AND datname = 'site'",
    )
    .unwrap();
    let waiting = |db: &mut postgres::Client| -> Option<i32> {
        db.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
        db.query_opt(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'indexnow worker' \
               AND datname = 'site' AND query LIKE 'indexnow: waiting: the extension''s tables%'",
            &[],
        )
        .unwrap()
        .map(|r| r.get(0))
    };
    let start = std::time::Instant::now();
    let mut pid = None;
    while pid.is_none() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "no worker waits"
        );
        pid = waiting(&mut db);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // (the same worker waits on, through its next looks, 1 s and 2 s later, and says nothing
    // more; the worker terminated above may have said it too before it went)
    let said = |cluster: &Cluster| {
        cluster
            .log()
            .matches("the extension's tables indexnow_pushes are missing")
            .count()
    };
    let said_before = said(&cluster);
    assert!((1..=2).contains(&said_before), "{}", cluster.log());
    let watched = std::time::Instant::now();
    while watched.elapsed() < std::time::Duration::from_secs(3) {
        assert_eq!(waiting(&mut db), pid, "the worker was started again");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(said(&cluster), said_before, "{}", cluster.log());
}
