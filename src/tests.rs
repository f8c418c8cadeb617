// SQL-level tests: each runs inside a transaction that is rolled back at its end.
// End-to-end tests on a real cluster (separate transactions, roles, the worker) live in `tests/`.

use crate::queue::due::{self, cases, DUE_AT_SQL, DUE_SQL};
use crate::queue::Reason;
use pgrx::prelude::*;

fn count(sql: &str) -> i64 {
    Spi::get_one::<i64>(sql).unwrap().unwrap()
}

fn text(sql: &str) -> Option<String> {
    Spi::get_one::<String>(sql).unwrap()
}

/// Runs `sql` in a subtransaction and returns `SQLSTATE: message` of the error it raised, if any.
fn error_of(sql: &str) -> Option<String> {
    install_error_catcher();
    let quoted = sql.replace('\'', "''");
    text(&format!("SELECT public.indexnow_test_error_of('{quoted}')"))
}

/// Each statement must fail, with `sqlstate` (when given) and a message containing its text.
fn assert_refused(cases: &[(&str, &str)], sqlstate: Option<&str>) {
    for (sql, want) in cases {
        let err = error_of(sql).unwrap_or_else(|| panic!("no error from {sql}"));
        assert!(err.contains(want), "{sql}: {err}");
        if let Some(code) = sqlstate {
            assert!(err.starts_with(&format!("{code}: ")), "{sql}: {err}");
        }
    }
}

fn install_error_catcher() {
    let installed = Spi::get_one::<bool>(
        "SELECT to_regprocedure('public.indexnow_test_error_of(text)') IS NOT NULL",
    );
    if installed == Ok(Some(true)) {
        return;
    }
    Spi::run(
        "CREATE OR REPLACE FUNCTION public.indexnow_test_error_of(q text) RETURNS text \
         LANGUAGE plpgsql AS $$ \
         BEGIN EXECUTE q; RETURN NULL; \
         EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE || ': ' || SQLERRM; END $$",
    )
    .unwrap();
    Spi::run("GRANT EXECUTE ON FUNCTION public.indexnow_test_error_of(text) TO PUBLIC").unwrap();
}

/// The test server's statistics of the extension's tables never change under the tests (see
/// `crate::pg_test::postgresql_conf_options`): no autovacuum, and nothing vacuumed or analyzed.
#[pg_test]
fn the_extensions_tables_keep_the_statistics_of_create_extension() {
    assert_eq!(text("SHOW autovacuum").as_deref(), Some("off"));
    assert_eq!(
        count(
            "SELECT count(*) FROM pg_stat_all_tables \
              WHERE relname LIKE 'indexnow%' \
                AND (vacuum_count + autovacuum_count + analyze_count + autoanalyze_count) > 0"
        ),
        0
    );
}

#[pg_test]
fn ten_requests_make_one_row() {
    for _ in 0..10 {
        Spi::run("SELECT indexnow_queue('https://www.example.com/th/news')").unwrap();
    }
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 1);
    assert_eq!(count("SELECT request_seq FROM indexnow_urls"), 10);
    assert_eq!(text("SELECT reason FROM indexnow_urls").as_deref(), Some("changed"));
}

#[pg_test]
fn every_request_moves_changed_at() {
    Spi::run("SELECT indexnow_queue('https://www.example.com/a')").unwrap();
    Spi::run("UPDATE indexnow_urls SET changed_at = now() - interval '1 hour'").unwrap();
    Spi::run("SELECT indexnow_queue('https://www.example.com/a', 'changed')").unwrap();
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE changed_at = now() AND queued_at = now()"),
        1
    );
}

#[pg_test]
fn spellings_of_one_url_share_a_row_in_normal_form() {
    Spi::run("SELECT indexnow_queue('https://WWW.Example.com:443/a#top')").unwrap();
    Spi::run("SELECT indexnow_queue('https://www.example.com/a')").unwrap();
    Spi::run("SELECT indexnow_queue('https://bücher.de/x')").unwrap();
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 2);
    assert_eq!(
        text("SELECT string_agg(url || ' ' || host, ', ' ORDER BY url) FROM indexnow_urls").as_deref(),
        Some("https://www.example.com/a www.example.com, https://xn--bcher-kva.de/x xn--bcher-kva.de")
    );
    // The key is sha1 of the normal form (computed independently: Python's hashlib).
    assert_eq!(
        text("SELECT encode(url_hash, 'hex') FROM indexnow_urls WHERE url = 'https://www.example.com/a'")
            .as_deref(),
        Some("d61849747796fc2faf074aff3646bcc33895c77e")
    );
}

#[pg_test]
fn the_last_event_wins() {
    let u = "https://www.example.com/p";
    Spi::run(&format!("SELECT indexnow_queue('{u}', 'unpublished')")).unwrap();
    Spi::run(&format!("SELECT indexnow_queue('{u}', 'changed')")).unwrap();
    assert_eq!(text("SELECT reason FROM indexnow_urls").as_deref(), Some("changed"));
    Spi::run(&format!("SELECT indexnow_queue('{u}', 'deleted')")).unwrap();
    assert_eq!(text("SELECT reason FROM indexnow_urls").as_deref(), Some("deleted"));
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 1);
}

#[pg_test]
fn refresh_is_not_a_content_change() {
    let u = "https://www.example.com/r";
    Spi::run(&format!("SELECT indexnow_queue('{u}', 'deleted')")).unwrap();
    Spi::run("UPDATE indexnow_urls SET changed_at = now() - interval '1 day'").unwrap();
    Spi::run(&format!("SELECT indexnow_queue('{u}', 'refresh')")).unwrap();
    // A pending removal is not turned into a re-announcement, and the content did not change.
    assert_eq!(text("SELECT reason FROM indexnow_urls").as_deref(), Some("deleted"));
    // Nor is a scheduled request made sendable early.
    Spi::run("UPDATE indexnow_urls SET available_at = now() + interval '1 day'").unwrap();
    Spi::run(&format!("SELECT indexnow_queue('{u}', 'refresh')")).unwrap();
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE available_at = now() + interval '1 day'"),
        1
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE changed_at < now()"), 1);
    // Once settled (pushed), a refresh is a request of its own.
    Spi::run("UPDATE indexnow_urls SET settled_seq = request_seq").unwrap();
    Spi::run(&format!("SELECT indexnow_queue('{u}', 'refresh')")).unwrap();
    assert_eq!(text("SELECT reason FROM indexnow_urls").as_deref(), Some("refresh"));
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"), 1);
}

#[pg_test]
fn every_reason_is_accepted_and_the_table_agrees() {
    for (i, r) in Reason::ALL.iter().enumerate() {
        Spi::run(&format!(
            "SELECT indexnow_queue('https://www.example.com/{i}', '{}')",
            r.as_str()
        ))
        .unwrap();
    }
    assert_eq!(count("SELECT count(DISTINCT reason) FROM indexnow_urls"), 8);
    // The CHECK constraint refuses what the Rust list refuses.
    let err = error_of(
        "INSERT INTO indexnow_urls (url, url_hash, host, reason, changed_at, queued_at, available_at) \
         VALUES ('https://x.com/', decode(repeat('00', 20), 'hex'), 'x.com', 'purged', now(), now(), now())",
    )
    .unwrap();
    assert!(err.starts_with("23514"), "{err}");
}

#[pg_test]
fn bad_requests_are_refused_with_the_problem_named() {
    let cases = [
        ("SELECT indexnow_queue('https://www.example.com/', 'purged')", "unknown reason \"purged\"; the reasons are: created, changed, refresh, moved, unpublished, deleted, gone, untranslated"),
        ("SELECT indexnow_queue('/relative')", "not an absolute http(s) URL"),
        ("SELECT indexnow_queue('ftp://www.example.com/x')", "only http and https"),
        ("SELECT indexnow_queue('https://u:p@www.example.com/')", "user info"),
        ("SELECT indexnow_queue('http://localhost/x')", "is localhost"),
        ("SELECT indexnow_queue('http://10.0.0.8/x')", "private IP address"),
        ("SELECT indexnow_queue('http://127.0.0.1/x')", "loopback IP address"),
        ("SELECT indexnow_queue('http://169.254.169.254/x')", "link-local IP address"),
        ("SELECT indexnow_queue('http://240.0.0.1/x')", "reserved IP address"),
        ("SELECT indexnow_queue('http://metadata.google.internal/x')", "cloud metadata"),
        ("SELECT indexnow_queue('https://www.example.com/' || repeat('a', 2100))", "at most 2048 bytes"),
    ];
    assert_refused(&cases, Some("22023"));
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 0);
}

#[pg_test]
fn a_rolled_back_subtransaction_queues_nothing() {
    Spi::run(
        "DO $$ BEGIN \
           PERFORM indexnow_queue('https://www.example.com/rolled-back'); \
           RAISE EXCEPTION 'roll back'; \
         EXCEPTION WHEN raise_exception THEN NULL; END $$",
    )
    .unwrap();
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 0);
}

#[pg_test]
fn add_host_checks_and_replaces_keys() {
    Spi::run("SELECT indexnow_add_host('WWW.Example.com', '5f2b9c0e4d8a4b7f9e1c3a6d8b0f2e4c')").unwrap();
    Spi::run(
        "SELECT indexnow_add_host('www.example.com', 'second-key-123', 'https://www.example.com/keys/second-key-123.txt')",
    )
    .unwrap();
    assert_eq!(
        text("SELECT host || ' ' || key || ' ' || key_location FROM indexnow_hosts").as_deref(),
        Some("www.example.com second-key-123 https://www.example.com/keys/second-key-123.txt")
    );
    let cases = [
        ("SELECT indexnow_add_host('www.example.com', 'short')", "the key is 5 characters long: it must have 8 to 128"),
        ("SELECT indexnow_add_host('www.example.com', 'has_underscore')", "only a-z, A-Z, 0-9 and '-'"),
        ("SELECT indexnow_add_host('www.example.com', repeat('a', 129))", "129 characters long"),
        ("SELECT indexnow_add_host('www.example.com', 'abcdefgh', 'https://cdn.example.com/k.txt')", "must be on the host it speaks for"),
        ("SELECT indexnow_add_host('www.example.com', 'abcdefgh', 'ftp://www.example.com/k.txt')", "key_location is not usable"),
        ("SELECT indexnow_add_host('https://www.example.com/', 'abcdefgh')", "give the host name alone, \"www.example.com\""),
        ("SELECT indexnow_add_host('localhost', 'abcdefgh')", "is localhost"),
    ];
    assert_refused(&cases, Some("22023"));
    assert_eq!(count("SELECT count(*) FROM indexnow_hosts"), 1);
}

#[pg_test]
fn a_new_key_keeps_the_host_switched_off_and_its_key_location() {
    Spi::run(
        "SELECT indexnow_add_host('SA3.Example.COM.', 'first-key-123', \
                                  'https://sa3.example.com/indexnow.txt')",
    )
    .unwrap();
    Spi::run("SELECT indexnow_disable_host('sa3.example.com')").unwrap();
    Spi::run("SELECT indexnow_add_host('sa3.example.com', 'second-key-456')").unwrap();
    let host = || {
        text("SELECT host || ' ' || key || ' ' || enabled || ' ' || coalesce(key_location, '-') \
                FROM indexnow_hosts")
    };
    assert_eq!(
        host().as_deref(),
        Some("sa3.example.com second-key-456 false https://sa3.example.com/indexnow.txt")
    );
    Spi::run("SELECT indexnow_set_key_location('sa3.example.com', NULL)").unwrap();
    Spi::run("SELECT indexnow_enable_host('SA3.example.com')").unwrap();
    assert_eq!(host().as_deref(), Some("sa3.example.com second-key-456 true -"));
    let cases = [
        ("SELECT indexnow_disable_host('other.example.com')", "there is no host other.example.com"),
        ("SELECT indexnow_enable_host('other.example.com')", "add it with indexnow_add_host"),
        ("SELECT indexnow_set_key_location('sa3.example.com', 'https://cdn.example.com/k.txt')", "must be on the host"),
        ("SELECT indexnow_add_host(repeat('x', 10000000), 'abcdefgh')", "bytes in all"),
    ];
    assert_refused(&cases, Some("22023"));
    let long = error_of("SELECT indexnow_queue('https://www.example.com/' || repeat('a', 10000000))")
        .unwrap();
    assert!(long.len() < 1_000, "the error quotes {} bytes", long.len());
}

#[pg_test]
fn a_copy_of_the_database_holds_its_hosts_until_confirmed() {
    Spi::run("SELECT indexnow_add_host('www.example.com', 'abcdef1234')").unwrap();
    Spi::run("SELECT indexnow_add_host('other.example.com', 'abcdef1234')").unwrap();
    let held = || {
        text("SELECT string_agg(host || ': ' || coalesce(held, 'sends'), '; ' ORDER BY host) \
                FROM indexnow_status()")
        .unwrap()
    };
    assert_eq!(held(), "other.example.com: sends; www.example.com: sends");
    // What a copy looks like from inside: the row came from a database with another OID.
    Spi::run(
        "UPDATE indexnow_hosts SET home_database = 1 WHERE host = 'www.example.com'",
    )
    .unwrap();
    let now = held();
    assert!(
        now.starts_with("other.example.com: sends; www.example.com: this database is a copy"),
        "{now}"
    );
    assert!(now.contains("SELECT indexnow_confirm_copy()"), "{now}");
    // The worker's host list leaves it out, though both hosts have a URL due.
    Spi::run("SELECT indexnow_queue('https://www.example.com/a'), indexnow_queue('https://other.example.com/a')").unwrap();
    Spi::run("UPDATE indexnow_urls SET changed_at = now() - interval '1 day'").unwrap();
    let sendable = || {
        let [debounce, min_gap, repeat_after] = crate::guc::due_rule().sql_args();
        let sql = format!(
            "SELECT string_agg(host, ',') FROM ({}) s",
            crate::send::sql::sendable_hosts()
        );
        Spi::get_one_with_args::<String>(
            &crate::plan_cache::qualified(&sql),
            &[
                crate::send::now().into(),
                debounce.into(),
                min_gap.into(),
                repeat_after.into(),
                false.into(),
            ],
        )
        .unwrap()
    };
    assert_eq!(sendable().as_deref(), Some("other.example.com"));
    assert_eq!(count("SELECT indexnow_confirm_copy()"), 1);
    assert_eq!(held(), "other.example.com: sends; www.example.com: sends");
    assert_eq!(sendable().as_deref(), Some("other.example.com,www.example.com"));
    assert_eq!(count("SELECT indexnow_confirm_copy()"), 0);
}

#[pg_test]
fn fingerprint_from_sql() {
    let same = |a: &str, b: &str| {
        Spi::get_one::<bool>(&format!("SELECT indexnow_fingerprint({a}) = indexnow_fingerprint({b})"))
            .unwrap()
            .unwrap()
    };
    assert!(same(r#"'{"a":1,"b":2}'"#, r#"'{"b":2,"a":1}'"#));
    assert!(same(r#"'{"a":1,"updated_at":"x"}'"#, r#"'{"a":1,"updated_at":"y"}'"#));
    assert!(same(r#"'{"a":1,"k":5}', '{k}'"#, r#"'{"a":1}', '{k}'"#));
    assert!(!same(r#"'{"a":1,"k":5}'"#, r#"'{"a":1}'"#));
    assert!(!same(r#"'{"a":null}'"#, r#"'{}'"#));
    assert!(!same(r#"'{"n":12345678901234567890.123}'"#, r#"'{"n":12345678901234567890.124}'"#));
    assert_eq!(Spi::get_one::<String>("SELECT indexnow_fingerprint(NULL)").unwrap(), None);
    assert_eq!(
        Spi::get_one::<String>("SELECT indexnow_fingerprint(to_jsonb(t)) FROM (SELECT 1 AS id, 'x' AS slug) t")
            .unwrap()
            .map(|s| s.len()),
        Some(32)
    );
}

/// The due table of `queue/due.rs`, run through the SQL form of the rule: both forms must agree.
#[pg_test]
fn the_sql_due_rule_agrees_with_the_rust_one() {
    let rule = cases::rule();
    let [d, g, r] = rule.sql_args();
    let at = |m: due::Micros| TimestampWithTimeZone::try_from(m).unwrap();
    for (what, row, due_now, due_at) in cases::table() {
        Spi::run("DELETE FROM indexnow_urls").unwrap();
        Spi::run_with_args(
            "INSERT INTO indexnow_urls (url, url_hash, host, reason, changed_at, queued_at, \
               available_at, last_pushed_at, pushed_changed_at, request_seq, settled_seq) \
             VALUES ('https://x.com/', decode(repeat('00', 20), 'hex'), 'x.com', 'changed', \
               $1, $1, $2, $3, $4, $5, $6)",
            &[
                at(row.changed_at).into(),
                at(row.available_at).into(),
                row.last_pushed_at.map(at).into(),
                row.pushed_changed_at.map(at).into(),
                row.request_seq.into(),
                row.settled_seq.into(),
            ],
        )
        .unwrap();
        let args = [at(cases::NOW).into(), d.into(), g.into(), r.into()];
        let sql_due = Spi::get_one_with_args::<bool>(
            &format!("SELECT {DUE_SQL} FROM indexnow_urls"),
            &args,
        )
        .unwrap()
        .unwrap();
        let sql_due_at = Spi::get_one_with_args::<TimestampWithTimeZone>(
            &format!("SELECT {DUE_AT_SQL} FROM indexnow_urls"),
            &args,
        )
        .unwrap();
        assert_eq!(sql_due, due_now, "{what}: due now");
        assert_eq!(sql_due_at, due_at.map(at), "{what}: due at");
    }
}

/// The idle pass must not scan the queue: with 100,000 rows none of which is due, the due query
/// reads the partial index, whether the rows are all pushed or all still in their debounce.
#[pg_test]
fn the_due_query_uses_the_index_when_nothing_is_due() {
    Spi::run(
        "INSERT INTO indexnow_urls (url, url_hash, host, reason, changed_at, queued_at, \
           available_at, last_pushed_at, pushed_changed_at, request_seq, settled_seq) \
         SELECT u, substring(sha256(convert_to(u, 'UTF8')) FROM 1 FOR 20), 'www.example.com', \
                'changed', now() - interval '2 days', now() - interval '2 days', \
                now() - interval '2 days', now() - interval '1 day', now() - interval '2 days', 1, 1 \
           FROM (SELECT 'https://www.example.com/p/' || g AS u FROM generate_series(1, 100000) g) s",
    )
    .unwrap();
    Spi::run("ANALYZE indexnow_urls").unwrap();
    // The query a sender claims with (push_now's form: a plain read of one host's due rows).
    let plan = || {
        let [d, g, r] = crate::guc::due_rule().sql_args();
        let explain = Spi::explain_with_args(
            &crate::plan_cache::qualified(&crate::send::sql::claim_by_reading(true)),
            &[
                now().into(),
                d.into(),
                g.into(),
                r.into(),
                false.into(),
                "www.example.com".into(),
                10_000i64.into(),
            ],
        )
        .unwrap();
        serde_json::to_string(&explain.0).unwrap()
    };
    // (a scan of the queue; the hold's look at the change sets may scan that small table)
    let scans_the_queue = |plan: &str| {
        fn walk(node: &serde_json::Value) -> bool {
            let seq = node["Node Type"] == "Seq Scan" && node["Relation Name"] == "indexnow_urls";
            seq || node["Plans"]
                .as_array()
                .is_some_and(|plans| plans.iter().any(walk))
                || node.as_array().is_some_and(|a| a.iter().any(walk))
                || node["Plan"].is_object() && walk(&node["Plan"])
        }
        walk(&serde_json::from_str::<serde_json::Value>(plan).unwrap())
    };
    let all_pushed = plan();
    assert!(all_pushed.contains("indexnow_urls_pending"), "{all_pushed}");
    assert!(!scans_the_queue(&all_pushed), "{all_pushed}");

    // All requested again a moment ago: pending, but inside the debounce.
    Spi::run("UPDATE indexnow_urls SET request_seq = 2, changed_at = now(), queued_at = now()").unwrap();
    Spi::run("ANALYZE indexnow_urls").unwrap();
    assert_eq!(
        count(&format!(
            "SELECT count(*) FROM ({}) d",
            crate::plan_cache::qualified(&crate::send::sql::claim_by_reading(true))
                .replace("$1", "now()")
                .replace("$5", "false")
                .replace("$6", "'www.example.com'")
                .replace("$7", "10000")
                .replace("$2", "120")
                .replace("$3", "3600")
                .replace("$4", "86400")
        )),
        0
    );
    let all_quiet_pending = plan();
    assert!(all_quiet_pending.contains("indexnow_urls_pending"), "{all_quiet_pending}");
    assert!(!scans_the_queue(&all_quiet_pending), "{all_quiet_pending}");
}

#[pg_test]
fn settings_have_units_ranges_and_contexts() {
    let row = |name: &str| {
        text(&format!(
            "SELECT setting || ' ' || coalesce(unit, '-') || ' ' || context FROM pg_settings WHERE name = '{name}'"
        ))
        .unwrap_or_else(|| panic!("{name} is not registered"))
    };
    assert_eq!(row("indexnow.enabled"), "on - superuser");
    assert_eq!(row("indexnow.server_enabled"), "on - sighup");
    assert_eq!(row("indexnow.dry_run"), "off - superuser");
    assert_eq!(row("indexnow.endpoint"), "https://api.indexnow.org/indexnow - superuser");
    assert_eq!(row("indexnow.debounce"), "120 s superuser");
    assert_eq!(row("indexnow.min_gap"), "3600 s superuser");
    assert_eq!(row("indexnow.repeat_after"), "86400 s superuser");
    assert_eq!(row("indexnow.batch_size"), "10000 - superuser");
    assert_eq!(row("indexnow.naptime"), "5000 ms superuser");
    assert_eq!(row("indexnow.http_timeout"), "30000 ms superuser");
    assert_eq!(row("indexnow.backoff_throttled"), "3600 s superuser");
    assert_eq!(row("indexnow.backoff_unavailable"), "900 s superuser");
    assert_eq!(row("indexnow.history_days"), "30 - superuser");
    assert_eq!(row("indexnow.derive_at_write"), "0 - superuser");

    Spi::run("SET LOCAL indexnow.debounce = '2min'").unwrap();
    Spi::run("SET LOCAL indexnow.min_gap = '90min'").unwrap();
    assert_eq!(text("SHOW indexnow.debounce").as_deref(), Some("2min"));
    let rule = crate::guc::due_rule();
    assert_eq!(rule.debounce.as_secs(), 120);
    assert_eq!(rule.min_gap.as_secs(), 5400);

    let err = error_of("SET LOCAL indexnow.batch_size = 10001").unwrap();
    assert!(err.contains("10001 is outside the valid range"), "{err}");
    let err = error_of("SET LOCAL indexnow.debounce = 'soon'").unwrap();
    assert!(err.contains("invalid value"), "{err}");
    // The server's switch: no session (nor database, nor role) can set it.
    let err = error_of("SET LOCAL indexnow.server_enabled = off").unwrap();
    assert!(err.contains("cannot be changed now"), "{err}");
}

#[pg_test]
fn status_counts_per_host_with_the_due_rule() {
    Spi::run("SELECT indexnow_add_host('www.example.com', 'abcdefgh')").unwrap();
    Spi::run("SELECT indexnow_add_host('quiet.example.com', 'abcdefgh')").unwrap();
    for i in 0..3 {
        Spi::run(&format!("SELECT indexnow_queue('https://www.example.com/{i}')")).unwrap();
    }
    Spi::run("SELECT indexnow_queue('https://nokey.example.org/a')").unwrap();
    // Two of the three have been quiet for longer than the debounce.
    Spi::run(
        "UPDATE indexnow_urls SET changed_at = now() - interval '10 min', \
                available_at = now() - interval '10 min' \
          WHERE url IN ('https://www.example.com/0', 'https://www.example.com/1')",
    )
    .unwrap();
    Spi::run(
        "INSERT INTO indexnow_pushes (pushed_at, host, url_count, status) VALUES \
           (now() - interval '2 hours', 'www.example.com', 5, 200), \
           (now() - interval '1 hour', 'www.example.com', 2, 429)",
    )
    .unwrap();
    Spi::run(
        "INSERT INTO indexnow_backoff (scope, until, status) VALUES ('*', now() + interval '1 hour', 429)",
    )
    .unwrap();
    // Each column, '-' for NULL: next_due_at is when a URL can really go out (after the pause;
    // none for a host without a key or with nothing pending); oldest_due_age is how long the URL
    // due the longest has waited (quiet for 10 minutes, due after the debounce).
    let status = || {
        text(
            "SELECT string_agg(concat_ws(' ', host, has_key, pending, due_now, failed, \
                    coalesce(last_status::text, '-'), backoff_until = now() + interval '1 hour', \
                    coalesce((next_due_at = backoff_until)::text, '-'), \
                    coalesce((oldest_due_age = interval '10 min' \
                              - current_setting('indexnow.debounce')::interval)::text, '-'), \
                    coalesce(split_part(held, ':', 1), '-'), dry_run), '; ' ORDER BY host) \
               FROM indexnow_status()",
        )
        .unwrap()
    };
    assert_eq!(
        status(),
        "nokey.example.org f 1 0 0 - t - - no key f; quiet.example.com t 0 0 0 - t - - - f; \
         www.example.com t 3 2 0 429 t true true - f"
    );
    // A host switched off, sending switched off, a dry run: held says why, no next_due_at.
    Spi::run("SELECT indexnow_disable_host('quiet.example.com')").unwrap();
    Spi::run("SET LOCAL indexnow.enabled = off").unwrap();
    Spi::run("SET LOCAL indexnow.dry_run = on").unwrap();
    assert_eq!(
        status(),
        "nokey.example.org f 1 0 0 - t - - no key t; quiet.example.com t 0 0 0 - t - - disabled t; \
         www.example.com t 3 2 0 429 t - true indexnow.enabled is off t"
    );
    Spi::run("RESET indexnow.enabled").unwrap();
    Spi::run("RESET indexnow.dry_run").unwrap();
    // due_now is what a sender may take now: a row leased to a sender in flight is not.
    let due_now = || count("SELECT due_now FROM indexnow_status() WHERE host = 'www.example.com'");
    assert_eq!(due_now(), 2);
    Spi::run(
        "UPDATE indexnow_urls SET claimed_until = now() + interval '1 minute' \
          WHERE url = 'https://www.example.com/0'",
    )
    .unwrap();
    assert_eq!(due_now(), 1);
    assert_eq!(
        text("SELECT DISTINCT worker FROM indexnow_status()").as_deref(),
        Some("not running: indexnow is not in shared_preload_libraries")
    );
}

#[pg_test]
fn nothing_is_readable_by_public_and_keys_only_by_the_owner() {
    Spi::run("SELECT indexnow_add_host('www.example.com', 'abcdefgh')").unwrap();
    Spi::run("CREATE ROLE indexnow_test_writer").unwrap();
    install_error_catcher(); // before the role change: that role cannot create it
    Spi::run("SET LOCAL ROLE indexnow_test_writer").unwrap();
    for sql in [
        "SELECT key FROM indexnow_hosts",
        "SELECT count(*) FROM indexnow_urls",
        "SELECT count(*) FROM indexnow_pushes",
        "SELECT count(*) FROM indexnow_backoff",
        "DELETE FROM indexnow_urls",
        "SELECT indexnow_queue('https://www.example.com/x')",
        "SELECT indexnow_add_host('evil.example.com', 'abcdefgh')",
        "SELECT * FROM indexnow_status()",
        "SET indexnow.enabled = off",
        "SET indexnow.endpoint = 'https://evil.example.com/'",
    ] {
        let err = error_of(sql).unwrap_or_else(|| panic!("PUBLIC could run {sql}"));
        assert!(err.starts_with("42501"), "{sql}: {err}");
    }
    // The endpoint is not even shown to a non-superuser.
    let err = error_of("SHOW indexnow.endpoint").unwrap();
    assert!(err.starts_with("42501"), "{err}");
    Spi::run("RESET ROLE").unwrap();

    // Granted queue access, the role queues through the SECURITY DEFINER function without any
    // privilege on the table itself.
    Spi::run("GRANT EXECUTE ON FUNCTION indexnow_queue(text, text) TO indexnow_test_writer").unwrap();
    Spi::run("SET LOCAL ROLE indexnow_test_writer").unwrap();
    Spi::run("SELECT indexnow_queue('https://www.example.com/x')").unwrap();
    assert!(error_of("SELECT count(*) FROM indexnow_urls").is_some());
    Spi::run("RESET ROLE").unwrap();
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 1);
}

#[pg_test]
fn security_definer_functions_pin_search_path() {
    let unpinned = count(
        "SELECT count(*) FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e' \
           JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'indexnow' \
          WHERE p.prosecdef AND NOT EXISTS \
                (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')",
    );
    assert_eq!(unpinned, 0);
    let definers = count(
        "SELECT count(*) FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e' \
           JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'indexnow' WHERE p.prosecdef",
    );
    assert!(definers >= 2, "{definers}");
}

#[pg_test]
fn push_now_does_not_send_what_its_own_transaction_queued() {
    // Everything here is one transaction, the test's: the queued URL is the caller's own,
    // uncommitted. Were it sent, the request would go to a closed local port (status 0).
    Spi::run("SET LOCAL indexnow.endpoint = 'http://127.0.0.1:9/indexnow'").unwrap();
    Spi::run("SET LOCAL indexnow.http_timeout = '1s'").unwrap();
    Spi::run("SELECT indexnow_add_host('www.example.com', 'abcdef1234')").unwrap();
    Spi::run("SELECT indexnow_queue('https://www.example.com/not-yet-committed')").unwrap();
    // ... and one written in a subtransaction, as a capture trigger's statement is
    Spi::run(
        "DO $$ BEGIN BEGIN PERFORM indexnow_queue('https://www.example.com/in-a-subtransaction'); \
           EXCEPTION WHEN OTHERS THEN NULL; END; END $$",
    )
    .unwrap();
    Spi::run(
        "DO $$ BEGIN BEGIN UPDATE indexnow_urls SET changed_at = now() - interval '1 hour'; \
           EXCEPTION WHEN OTHERS THEN NULL; END; END $$",
    )
    .unwrap();
    assert_eq!(
        count("SELECT sum(due_now)::bigint FROM indexnow_status()"),
        2,
        "both URLs are due"
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_push_now()"), 0);
    assert_eq!(count("SELECT count(*) FROM indexnow_pushes"), 0);
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"),
        2
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_backoff"), 0);
}

#[pg_test]
fn status_writes_nothing() {
    // Read through `select`: the tests' helpers go through pgrx's `Spi::get_one`, which takes a
    // transaction id itself.
    let read = |sql: &str| {
        Spi::connect(|c| c.select(sql, None, &[])?.first().get_one::<String>()).unwrap()
    };
    let xid = "SELECT pg_current_xact_id_if_assigned()::text";
    assert_eq!(read(xid), None, "the test began with a transaction id");
    assert!(read("SELECT string_agg(worker, ',') FROM indexnow_status()").is_some());
    assert_eq!(read(xid), None, "indexnow_status() took a transaction id");
}

#[pg_test]
fn sending_and_status_run_without_jit_and_status_without_parallel_workers() {
    // Their statements are short, but the planner cannot estimate the pending rows and their
    // costs can pass jit_above_cost and the parallel thresholds (docs/design.md).
    let config = |function: &str| {
        text(&format!(
            "SELECT array_to_string(proconfig, ',') FROM pg_proc WHERE proname = '{function}'"
        ))
        .unwrap_or_default()
    };
    let status = config("indexnow_status");
    assert!(status.contains("jit=off"), "{status}");
    assert!(status.contains("max_parallel_workers_per_gather=0"), "{status}");
    let push_now = config("indexnow_push_now");
    assert!(push_now.contains("jit=off"), "{push_now}");
}

/// `\df indexnow_*` lists the public functions only (those of docs/reference.md); every other
/// function of the extension's schema is internal and named `_indexnow_*`. (The tests' own
/// functions are in the schema `tests`.)
#[pg_test]
fn only_the_public_functions_are_named_indexnow() {
    let members = "SELECT p.proname::text AS name FROM pg_catalog.pg_proc p \
                     JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass \
                      AND d.objid = p.oid AND d.deptype = 'e' \
                     JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
                    WHERE e.extname = 'indexnow' AND p.pronamespace = e.extnamespace";
    let public = text(&format!(
        "SELECT string_agg(name, ' ' ORDER BY name) FROM ({members}) m \
          WHERE name LIKE 'indexnow\\_%'"
    ));
    assert_eq!(
        public.as_deref(),
        Some(
            "indexnow_add_host indexnow_column_changes indexnow_confirm_copy indexnow_coverage \
             indexnow_derive indexnow_disable_host \
             indexnow_enable_host indexnow_explain indexnow_fingerprint indexnow_grant_watching \
             indexnow_library_version indexnow_push_now indexnow_queue indexnow_reconcile \
             indexnow_revoke_watching indexnow_set_key_location indexnow_sitemap indexnow_status \
             indexnow_unwatch indexnow_watch"
        )
    );
    let internal = text(&format!(
        "SELECT string_agg(name, ' ' ORDER BY name) FROM ({members}) m \
          WHERE name NOT LIKE 'indexnow\\_%'"
    ));
    assert_eq!(
        internal.as_deref(),
        Some(
            "_indexnow_before_ddl _indexnow_capture _indexnow_capture_target \
             _indexnow_expression_type \
             _indexnow_on_ddl _indexnow_on_drop _indexnow_publish_time _indexnow_publish_time \
             _indexnow_publish_time _indexnow_schema_renamed _indexnow_table_changed \
             _indexnow_table_dropped _indexnow_url_part \
             _indexnow_wake_launcher_at_commit _indexnow_watch_rows \
             _indexnow_watches_changed _indexnow_watching_privilege \
             _indexnow_written_by_this_transaction"
        )
    );
}

/// The default ignore list is one list: the SQL defaults of both functions that take one are
/// `crate::capture::watch::DEFAULT_IGNORE`.
#[pg_test]
fn both_default_ignore_lists_are_the_one_of_the_code() {
    let want = format!(
        "ignore text[] DEFAULT '{{{}}}'::text[]",
        crate::capture::watch::DEFAULT_IGNORE.join(",")
    );
    for function in ["indexnow_watch", "indexnow_fingerprint"] {
        let arguments = text(&format!(
            "SELECT pg_catalog.pg_get_function_arguments(oid) FROM pg_catalog.pg_proc \
              WHERE proname = '{function}'"
        ))
        .unwrap();
        assert!(arguments.contains(&want), "{function}({arguments})");
    }
}

/// A new key requests again the URLs its predecessor got refused (403, or a 422 naming the
/// key); the same key again, or a refusal for another reason, leaves them failed.
#[pg_test]
fn a_new_key_requests_the_urls_the_old_one_got_refused_again() {
    Spi::run(
        "SELECT indexnow_add_host('www.example.com', 'oldkey1234'); \
         SELECT indexnow_queue('https://www.example.com/' || p) \
           FROM unnest('{forbidden,keyless,misplaced,fine}'::text[]) p; \
         UPDATE indexnow_urls SET settled_seq = request_seq, failed_at = now(), \
                failed_status = CASE url WHEN 'https://www.example.com/forbidden' THEN 403 ELSE 422 END, \
                failed_note = CASE url \
                  WHEN 'https://www.example.com/forbidden' THEN '403: key not valid' \
                  WHEN 'https://www.example.com/keyless' THEN '422: The key does not match' \
                  ELSE '422: URLs do not belong to the host' END \
          WHERE url <> 'https://www.example.com/fine'; \
         UPDATE indexnow_urls SET settled_seq = request_seq, last_pushed_at = now() \
          WHERE url = 'https://www.example.com/fine';",
    )
    .unwrap();
    let pending = || {
        text(
            "SELECT coalesce(string_agg(url, ' ' ORDER BY url), '') FROM indexnow_urls \
              WHERE request_seq > settled_seq",
        )
        .unwrap()
    };
    Spi::run("SELECT indexnow_add_host('www.example.com', 'oldkey1234')").unwrap();
    assert_eq!(pending(), "", "the same key asks for nothing again");
    Spi::run("SELECT indexnow_add_host('www.example.com', 'newkey5678')").unwrap();
    assert_eq!(
        pending(),
        "https://www.example.com/forbidden https://www.example.com/keyless"
    );
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE failed_status = 422 AND request_seq = settled_seq"),
        1,
        "a refusal that is not the key's stays failed"
    );
}

/// A thousand hosts are added (or re-keyed) in one statement, with the same checks as one; a
/// bad row fails the statement naming its host, and nothing of it is kept.
#[pg_test]
fn a_thousand_hosts_are_added_in_one_statement() {
    Spi::run(
        "SELECT count(indexnow_add_host(format('t%s.example.com', g), 'tenantkey-' || g)) \
           FROM generate_series(1, 1000) g",
    )
    .unwrap();
    assert_eq!(count("SELECT count(*) FROM indexnow_hosts"), 1000);
    let refused = error_of(
        "SELECT count(indexnow_add_host(format('t%s.example.com', g), \
                CASE WHEN g = 500 THEN 'bad key!' ELSE 'rotated-' || g END)) \
           FROM generate_series(1, 1000) g",
    )
    .unwrap();
    assert!(
        refused.starts_with("22023: ") && refused.contains("key for t500.example.com"),
        "{refused}"
    );
    assert_eq!(
        count("SELECT count(*) FROM indexnow_hosts WHERE key LIKE 'rotated-%'"),
        0,
        "the failed statement changed no host"
    );
}

/// The key-file lookup of docs/reference.md ("Serving the key file") answers the key for its
/// file name on its host, and nothing for another name.
#[pg_test]
fn the_documented_key_file_lookup_finds_the_key() {
    Spi::run(
        "SELECT indexnow_add_host('www.example.com', 'servedkey-42'); \
         CREATE VIEW public.indexnow_key_files AS SELECT host, key FROM indexnow_hosts;",
    )
    .unwrap();
    let lookup = |host: &str, file: &str| -> Option<String> {
        Spi::get_one_with_args(
            "SELECT (SELECT key FROM public.indexnow_key_files \
                      WHERE host = $1 AND key || '.txt' = $2)",
            &[host.into(), file.into()],
        )
        .unwrap()
    };
    assert_eq!(
        lookup("www.example.com", "servedkey-42.txt").as_deref(),
        Some("servedkey-42")
    );
    assert_eq!(lookup("www.example.com", "robots.txt"), None);
    assert_eq!(lookup("other.example.com", "servedkey-42.txt"), None);
}

/// The failures a new key requests again (`KEY_FAILED_SQL`, over the stored status and note) are
/// the refusals whose answer rejects the key (`indexnow_protocol::key_state`): one rule in two
/// forms, which must agree on every refusal.
#[pg_test]
fn a_key_failure_is_a_refusal_that_rejects_the_key() {
    use indexnow_protocol::response::{classify, key_state, note, Answer, Backoffs, KeyState};
    use indexnow_protocol::Outcome;
    let backoffs = Backoffs {
        throttled: std::time::Duration::from_secs(60),
        unavailable: std::time::Duration::from_secs(60),
    };
    let refusals = [
        (403, "key not valid"),
        (403, ""),
        (422, "The key does not match the key file"),
        (422, "KeyLocation is not on the host"),
        (422, "URLs do not belong to the host"),
        (400, "Invalid format"),
    ];
    for (code, body) in refusals {
        let answer = Answer::Status {
            code,
            retry_after: None,
            body: body.to_string(),
        };
        let outcome = classify(&answer, &backoffs, std::time::SystemTime::now(), 0);
        assert!(matches!(outcome, Outcome::Refused { .. }), "{code} {body}");
        let rust = key_state(&answer) == Some(KeyState::Rejected);
        let sql = Spi::get_one_with_args::<bool>(
            &format!(
                "SELECT {} FROM (VALUES ($1::int, $2::text)) v (failed_status, failed_note)",
                crate::queue::due::KEY_FAILED_SQL
            ),
            &[i32::from(code).into(), note(&code.to_string(), body).into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(sql, rust, "{code} {body}");
    }
}

/// Every function that writes says so in a read-only transaction (a hot standby's are read-only
/// too: the e2e standby test), instead of failing inside with an internal error.
#[pg_test]
fn the_writing_functions_refuse_a_read_only_transaction_by_name() {
    run("CREATE TABLE ro_pages (id int PRIMARY KEY, slug text)");
    install_error_catcher();
    run("SET LOCAL transaction_read_only = on");
    let cases = [
        ("SELECT indexnow_push_now()", "indexnow_push_now() writes, and the transaction is read-only"),
        ("SELECT indexnow_queue('https://www.example.com/a')", "indexnow_queue() writes"),
        ("SELECT indexnow_reconcile('ro_pages')", "indexnow_reconcile() writes"),
        (
            "SELECT indexnow_watch('ro_pages', url => 'https://www.example.com/{slug}')",
            "indexnow_watch() writes",
        ),
        ("SELECT indexnow_unwatch('ro_pages')", "indexnow_unwatch() writes"),
        ("SELECT indexnow_add_host('www.example.com', 'k0123456')", "indexnow_add_host() writes"),
        ("SELECT indexnow_set_key_location('www.example.com', NULL)", "indexnow_set_key_location() writes"),
        ("SELECT indexnow_disable_host('www.example.com')", "indexnow_disable_host() writes"),
        ("SELECT indexnow_enable_host('www.example.com')", "indexnow_enable_host() writes"),
        ("SELECT indexnow_confirm_copy()", "indexnow_confirm_copy() writes"),
    ];
    assert_refused(&cases, Some("25006"));
    // Readers still answer.
    assert!(text("SELECT worker FROM indexnow_status()").is_some());
}

/// A setting of the extension's prefix that it does not define is a typo, refused by name:
/// `-c indexnow.server_enable=off` must not pass in silence.
#[pg_test]
#[should_panic(expected = "invalid configuration parameter name \"indexnow.server_enable\"")]
fn a_misspelt_setting_of_the_extension_is_refused() {
    Spi::run("SET indexnow.server_enable = off").unwrap();
}

#[pg_test]
fn a_null_where_a_value_is_needed_is_refused_by_name() {
    let cases = [
        ("SELECT indexnow_watch(NULL, url => 'https://www.example.com/{slug}')", "indexnow_watch: the table must not be NULL"),
        ("SELECT indexnow_watch('pg_class', url => 'https://www.example.com/{relname}', hidden_reason => NULL)", "indexnow_watch: hidden_reason must not be NULL"),
        ("SELECT indexnow_unwatch(NULL)", "indexnow_unwatch: the table must not be NULL"),
        ("SELECT indexnow_add_host(NULL, 'k0123456')", "indexnow_add_host: the host must not be NULL"),
        ("SELECT indexnow_add_host('www.example.com', NULL)", "indexnow_add_host: the key must not be NULL"),
        ("SELECT indexnow_set_key_location(NULL, NULL)", "indexnow_set_key_location: the host must not be NULL"),
        ("SELECT indexnow_grant_watching(NULL)", "indexnow_grant_watching: the role must not be NULL"),
        ("SELECT indexnow_revoke_watching(NULL)", "indexnow_revoke_watching: the role must not be NULL"),
    ];
    assert_refused(&cases, Some("22004"));
}
