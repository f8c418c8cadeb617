// Capture, SQL level: watches on real tables, triggers firing inside the test's transaction.
// (Each test is rolled back at its end; what needs commits, client programs or DROP EXTENSION is
// in tests/e2e/tests/capture.rs.)


/// The queue as `url reason pending` lines, sorted, for compact assertions (after deriving what
/// bulk statements recorded).
fn queue() -> String {
    derive();
    text(
        "SELECT coalesce(string_agg(url || ' ' || reason || ' ' || (request_seq - settled_seq), E'\\n' \
                ORDER BY url), '') FROM indexnow_urls",
    )
    .unwrap()
}

/// Pending requests only: what would be sent.
fn pending() -> String {
    derive();
    text(
        "SELECT coalesce(string_agg(url || ' ' || reason, E'\\n' ORDER BY url), '') \
           FROM indexnow_urls WHERE request_seq > settled_seq",
    )
    .unwrap()
}

/// How many capture triggers the tables `tables` (names, `regclass` syntax) carry together.
fn capture_triggers(tables: &[&str]) -> i64 {
    let list = tables
        .iter()
        .map(|t| format!("'{t}'::regclass"))
        .collect::<Vec<_>>()
        .join(", ");
    count(&format!(
        "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'indexnow_capture_%' \
          AND tgrelid IN ({list})"
    ))
}

/// Derives the change sets the saves recorded (as every reader of the queue does).
fn derive() {
    run("SELECT indexnow_derive()");
}

/// From here on in the test's transaction, each statement of at most 100 rows is derived in the
/// statement itself (`indexnow.derive_at_write = 100`) instead of recorded: for what a save that
/// derives must do in the writer's session (its rights, its search_path, a failing row skipped
/// and the write kept), and for sequences whose every statement must be derived before the next
/// (as a worker derives between one commit and the next).
fn derive_in_statements() {
    run("SET LOCAL indexnow.derive_at_write = 100");
}

/// Marks every pending request as pushed now: what search engines were told.
fn pushed() {
    derive();
    run(
        "UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
           last_pushed_at = clock_timestamp(), pushed_changed_at = changed_at \
         WHERE request_seq > settled_seq",
    );
}

fn run(sql: &str) {
    Spi::run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The demo's site (`tests/pages.sql`): a pages table watched for a Thai and an English URL.
fn site() {
    run(include_str!("../tests/pages.sql"));
}

/// The statements a real watch runs, generated from what `indexnow_watch()` stored and the
/// catalog, are those of the golden test's definition (`demo_site::pages`, built by hand): reading
/// the table, its key, its columns and the watch's arguments gives exactly what the golden files
/// pin.
#[pg_test]
fn a_watch_generates_the_golden_statements() {
    // (the golden watches were made in UTC: a publish_at without time zone is read in the
    // watcher's)
    run("SET TimeZone = 'UTC'");
    site();
    let ext = crate::extension::schema();
    for lang in ["th", "en"] {
        let id = Spi::get_one::<i32>(&format!(
            "SELECT id FROM indexnow_watches WHERE pattern LIKE '%/{lang}/%'"
        ))
        .unwrap()
        .unwrap();
        let want = crate::derive::statements::demo_site::pages(lang, id).statements();
        let made = crate::derive::generated::of(&ext, id).unwrap();
        for (name, made, want) in [
            ("rows_keys", &made.rows_keys, &want.rows_keys),
            ("rows_all", &made.rows_all, &want.rows_all),
            ("derive_keys", &made.derive_keys, &want.derive_keys),
            ("derive_all", &made.derive_all, &want.derive_all),
            ("baseline", &made.baseline, &want.baseline),
            ("baseline_keys", &made.baseline_keys, &want.baseline_keys),
        ] {
            if made != want {
                let at = made
                    .chars()
                    .zip(want.chars())
                    .take_while(|(a, b)| a == b)
                    .count();
                let around = |s: &str| s.chars().skip(at.saturating_sub(60)).take(160).collect::<String>();
                panic!(
                    "{lang}: {name} differs at character {at}:\n generated: {}\n golden: {}",
                    around(made),
                    around(want)
                );
            }
        }
    }
}

fn publish(slug: &str) {
    run(&format!(
        "INSERT INTO pages (slug, title, body, status) VALUES ('{slug}', 'T', 'B', 'published')"
    ));
}

/// A column added to a watched table announces no page by itself, whatever its default (Django
/// adds a `default=''` column that way; a volatile default rewrites every row): the fingerprints
/// follow the columns added. A page changed before the ALTER and not derived yet is still
/// announced, so is one changed unseen (replica mode: the ALTER derives the table whole, as any
/// that may change rows does), and a later change of the new column is a change.
#[pg_test]
fn a_column_added_announces_nothing_by_itself() {
    site();
    for slug in ["a", "b", "c"] {
        publish(slug);
    }
    pushed();
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("UPDATE pages SET body = 'changed before' WHERE slug = 'b'");
    run("SET LOCAL session_replication_role = replica");
    run("UPDATE pages SET body = 'changed unseen' WHERE slug = 'a'");
    run("SET LOCAL session_replication_role = origin");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 1);
    run("ALTER TABLE pages ADD COLUMN teaser text NOT NULL DEFAULT ''");
    run(
        "ALTER TABLE pages ADD COLUMN token uuid DEFAULT gen_random_uuid(), \
           ADD COLUMN rank int DEFAULT 1, ALTER COLUMN teaser DROP DEFAULT",
    );
    assert_eq!(
        pending(),
        "https://www.example.com/th/a changed\nhttps://www.example.com/th/b changed"
    );
    pushed();
    run("UPDATE pages SET teaser = 'new' WHERE slug = 'c'");
    assert_eq!(pending(), "https://www.example.com/th/c changed");
}

/// A watch made again with `current_is_known => true` takes what its table holds now as known:
/// a column no longer ignored announces no page, nor does a page `visible` now makes public; a
/// page it no longer makes public still owes its removal, and a change recorded before and not
/// derived is still announced. Without it, the same change announces them all.
#[pg_test]
fn a_watch_made_again_can_take_what_is_there_as_known() {
    site();
    for slug in ["a", "b", "c", "d"] {
        publish(slug);
    }
    run("UPDATE pages SET noindex = true WHERE slug = 'd'");
    run("UPDATE pages SET keywords = 'k ' || slug");
    pushed();
    assert_eq!(pending(), "");
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("UPDATE pages SET body = 'changed before' WHERE slug = 'b'");
    let watch_again = |known: bool| {
        run(&format!(
            "SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{{slug}}', \
               visible => $$status = 'published' AND slug <> 'c'$$, \
               ignore => '{{sort_order,is_featured,created_at,updated_at,title_en,body_en}}', \
               publish_at => 'published_at', current_is_known => {known})"
        ))
    };
    watch_again(true);
    assert_eq!(
        pending(),
        "https://www.example.com/th/b changed\nhttps://www.example.com/th/c unpublished"
    );
    // Made again as it is now, without: nothing is owed (it changed nothing more).
    pushed();
    watch_again(false);
    assert_eq!(pending(), "");
    // Without it, a change of what is counted announces every page it changes.
    run(
        "SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{slug}', \
           visible => $$status = 'published' AND slug <> 'c'$$, \
           ignore => '{sort_order,is_featured,keywords,created_at,updated_at,title_en,body_en}', \
           publish_at => 'published_at')",
    );
    assert_eq!(
        pending(),
        "https://www.example.com/th/a changed\nhttps://www.example.com/th/b changed\n\
         https://www.example.com/th/d changed"
    );
    assert_refused(
        &[(
            "SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{slug}', \
               current_is_known => NULL)",
            "indexnow_watch: current_is_known must not be NULL",
        )],
        Some("22004"),
    );
}

/// A watch made with `replica_writes => true` makes its table's capture triggers fire in replica
/// mode too (`session_replication_role = replica`, as ETL tools write); made again without, they
/// fire where writes originate only. Enabling a trigger that fires already (a restore sets them
/// ALWAYS right after making them) derives nothing; enabling a disabled one derives the table.
#[pg_test]
fn replica_writes_are_captured_when_a_watch_asks() {
    site();
    publish("a");
    pushed();
    let fires = || {
        text(
            "SELECT string_agg(DISTINCT tgenabled::text, ',') FROM pg_trigger \
              WHERE tgrelid = 'pages'::regclass AND tgname LIKE 'indexnow_capture_%'",
        )
        .unwrap()
    };
    let watch_th = |replica_writes: bool| {
        run(&format!(
            "SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{{slug}}', \
               visible => $$status = 'published' AND NOT noindex$$, \
               ignore => '{{sort_order,is_featured,keywords,created_at,updated_at,title_en,body_en}}', \
               publish_at => 'published_at', replica_writes => {replica_writes})"
        ))
    };
    let in_replica_mode = |sql: &str| {
        run("SET LOCAL session_replication_role = replica");
        run(sql);
        run("SET LOCAL session_replication_role = origin");
    };
    assert_eq!(fires(), "O");
    watch_th(true);
    assert_eq!(fires(), "A");
    in_replica_mode("UPDATE pages SET body = 'seen' WHERE slug = 'a'");
    assert_eq!(pending(), "https://www.example.com/th/a changed");
    pushed();
    watch_th(false);
    assert_eq!(fires(), "O");
    in_replica_mode("UPDATE pages SET body = 'unseen' WHERE slug = 'a'");
    assert_eq!(pending(), "");
    // (the unseen write is caught up by the next derivation of the whole table)
    run("SELECT indexnow_reconcile('pages')");
    pushed();
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("ALTER TABLE pages ENABLE ALWAYS TRIGGER indexnow_capture_insert");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
    run("ALTER TABLE pages DISABLE TRIGGER indexnow_capture_update");
    run("ALTER TABLE pages ENABLE TRIGGER indexnow_capture_update");
    assert_eq!(
        count("SELECT count(*) FROM indexnow_changes WHERE keys IS NULL"),
        1,
        "disabling and enabling again derive the table whole (once a transaction)"
    );
}

/// `indexnow_status()` names the watched tables whose writes the capture triggers cannot see now:
/// a capture trigger disabled, the triggers gone (a restore makes them last). (A subscription's
/// table: the end-to-end test `a_subscribers_applied_changes_are_named_in_status`.)
#[pg_test]
fn status_names_the_tables_whose_writes_are_not_seen() {
    let gaps = || text("SELECT DISTINCT capture_gaps FROM indexnow_status()");
    site();
    assert_eq!(gaps(), None);
    run("ALTER TABLE pages DISABLE TRIGGER indexnow_capture_update");
    assert_eq!(
        gaps().as_deref(),
        Some("public.pages: capture triggers disabled")
    );
    run("ALTER TABLE pages ENABLE TRIGGER indexnow_capture_update");
    assert_eq!(gaps(), None);
    // (sessions in replica mode fire triggers enabled ALWAYS only)
    let database = |set: &str| {
        run(&format!(
            "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I {set}', current_database()); END $$"
        ))
    };
    database("SET session_replication_role = replica");
    assert_eq!(
        gaps().as_deref(),
        Some(
            "public.pages: sessions of the database run with session_replication_role = \
             replica, whose writes fire no capture trigger (watch with replica_writes => true, \
             or RESET it)"
        )
    );
    database("RESET session_replication_role");
    assert_eq!(gaps(), None);
    for (name, _, _) in crate::capture::triggers::EVENTS {
        run(&format!("DROP TRIGGER {name} ON pages"));
    }
    assert_eq!(gaps().as_deref(), Some("public.pages: no capture triggers"));
}

/// A watched table dropped and made again before its pages' removals went out (what `pg_restore
/// --clean -t` does): watching it again withdraws the removals of the pages that came back and
/// takes them as known. A page that did not come back still owes its removal; one whose removal
/// a sender has tried (it may have arrived) is announced again.
#[pg_test]
fn a_table_made_again_before_its_removals_went_out_announces_nothing() {
    let make = |slugs: &str| {
        run("CREATE TABLE mugs (id int PRIMARY KEY, slug text NOT NULL)");
        run(&format!("INSERT INTO mugs VALUES {slugs}"));
        run("SELECT indexnow_watch('mugs', url => 'https://www.example.com/{slug}')");
    };
    make("(1, 'a'), (2, 'b'), (3, 'c')");
    assert_eq!(pending(), "");
    run("DROP TABLE mugs");
    assert_eq!(
        pending(),
        "https://www.example.com/a deleted\nhttps://www.example.com/b deleted\n\
         https://www.example.com/c deleted"
    );
    run("UPDATE indexnow_urls SET tried_at = clock_timestamp() WHERE url LIKE '%/c'");
    make("(1, 'a'), (3, 'c')");
    assert_eq!(
        pending(),
        "https://www.example.com/b deleted\nhttps://www.example.com/c changed"
    );
}

#[pg_test]
fn ten_saves_make_one_row() {
    site();
    publish("news");
    for i in 0..10 {
        run(&format!("UPDATE pages SET body = 'edit {i}' WHERE slug = 'news'"));
    }
    // Never announced before: one row, one `created`, however often it was saved (the saves are
    // recorded, and derived together).
    assert_eq!(pending(), "https://www.example.com/th/news created");
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 1);
}

#[pg_test]
fn an_ignored_only_change_queues_nothing() {
    site();
    publish("news");
    derive();
    run("UPDATE indexnow_urls SET changed_at = now() - interval '1 hour', settled_seq = request_seq");
    run("UPDATE pages SET sort_order = 5, is_featured = true, keywords = 'k', updated_at = now() + interval '1 s'");
    assert_eq!(pending(), "");
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE changed_at < now()"), 1);
}

/// A table watched with a `url_sql` that counts its own evaluations in the sequence `url_calls`:
/// how often a capture statement derived a URL. `body` is stored out of line (TOAST) and large.
fn counted_site() {
    run("CREATE SEQUENCE url_calls");
    run("SELECT nextval('url_calls')");
    run(
        "CREATE FUNCTION counted_url(slug text) RETURNS text LANGUAGE sql VOLATILE AS \
           $$ SELECT 'https://www.example.com/c/' || slug || left(nextval('url_calls')::text, 0) $$",
    );
    run(
        "CREATE TABLE docs (id int PRIMARY KEY, slug text, body text, views int, \
           updated_at timestamptz)",
    );
    run("ALTER TABLE docs ALTER body SET STORAGE EXTERNAL");
    run(
        "INSERT INTO docs SELECT g, 'd' || g, repeat(md5(g::text), 300), 0, now() \
           FROM generate_series(1, 50) g",
    );
    run("SELECT indexnow_watch('docs', url_sql => 'counted_url(slug)', ignore => '{views,updated_at}')");
    // a second watch of the same table that cares about views
    run("SELECT indexnow_watch('docs', url => 'https://www.example.com/v/{slug}', ignore => '{}')");
}

fn url_calls() -> i64 {
    count("SELECT last_value FROM url_calls")
}

#[pg_test]
fn an_update_of_ignored_columns_does_not_run_the_watch_statement() {
    counted_site();
    let before = url_calls();
    run("UPDATE docs SET views = views + 1, updated_at = now() + interval '1 s'");
    derive();
    // The first watch ignores both columns: its statement did not run (no URL derived, over
    // large out-of-line bodies too); the second watch compares views: its URLs are changed.
    assert_eq!(url_calls(), before);
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"),
        50
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq \
               AND url LIKE 'https://www.example.com/v/%' AND reason = 'changed'"
        ),
        50
    );
    // A change to one row's public column runs it (and queues that row only).
    run("UPDATE docs SET body = body || 'x' WHERE id = 7");
    derive();
    assert!(url_calls() > before);
    assert_eq!(
        pending_like("https://www.example.com/c/%"),
        "https://www.example.com/c/d7 changed"
    );
}

#[pg_test]
fn a_bulk_update_whose_last_row_alone_changes_queues_that_row() {
    counted_site();
    pushed();
    run("INSERT INTO docs SELECT g, 'd' || g, 'short', 0 FROM generate_series(51, 20000) g");
    pushed();
    // Transition tables larger than work_mem are on disk: the gate reads both to the end, then
    // the statement reads them again.
    run("SET LOCAL work_mem = '64kB'");
    run("UPDATE docs SET views = views + 1, body = CASE WHEN id = 20000 THEN 'new' ELSE body END");
    assert_eq!(
        pending_like("https://www.example.com/c/%"),
        "https://www.example.com/c/d20000 changed"
    );
}

#[pg_test]
fn an_update_of_the_key_alone_runs_the_watch_statement() {
    counted_site();
    // The key is compared even when ignored: a new key is a new row to the statements.
    run("SELECT indexnow_watch('docs', url_sql => 'counted_url(slug)', ignore => '{id,views,updated_at}')");
    let before = url_calls();
    run("UPDATE docs SET id = id + 1000, slug = slug WHERE id = 3");
    derive();
    assert!(url_calls() > before);
}

fn pending_like(pattern: &str) -> String {
    derive();
    text(&format!(
        "SELECT coalesce(string_agg(url || ' ' || reason, E'\\n' ORDER BY url), '') \
           FROM indexnow_urls WHERE request_seq > settled_seq AND url LIKE '{pattern}'"
    ))
    .unwrap()
}

#[pg_test]
fn a_slug_change_moves_the_old_url() {
    site();
    publish("news");
    pushed();
    run("UPDATE pages SET slug = 'latest-news' WHERE slug = 'news'");
    // The new URL was never announced: `created`.
    assert_eq!(
        pending(),
        "https://www.example.com/th/latest-news created\nhttps://www.example.com/th/news moved"
    );
}

#[pg_test]
fn unpublish_then_republish_leaves_one_live_row() {
    derive_in_statements();
    site();
    publish("news");
    // Not announced yet: unpublishing cancels the request, republishing makes it again.
    run("UPDATE pages SET status = 'draft'");
    assert_eq!(pending(), "");
    run("UPDATE pages SET status = 'published'");
    assert_eq!(pending(), "https://www.example.com/th/news created");
    // Announced: unpublishing is a removal, republishing before the send a live page again.
    pushed();
    run("UPDATE pages SET noindex = true");
    assert_eq!(pending(), "https://www.example.com/th/news unpublished");
    run("UPDATE pages SET noindex = false");
    assert_eq!(pending(), "https://www.example.com/th/news changed");
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 1);
}

#[pg_test]
fn delete_and_truncate_queue_removals() {
    site();
    publish("a");
    publish("b");
    publish("c");
    run("UPDATE pages SET title_en = 'A' WHERE slug = 'a'");
    pushed();
    run("INSERT INTO pages (slug, status) VALUES ('draft', 'draft')");
    run("DELETE FROM pages WHERE slug = 'a'");
    assert_eq!(
        pending(),
        "https://www.example.com/en/a deleted\nhttps://www.example.com/th/a deleted"
    );
    run("TRUNCATE pages");
    assert_eq!(
        pending(),
        "https://www.example.com/en/a deleted\nhttps://www.example.com/th/a deleted\n\
         https://www.example.com/th/b deleted\nhttps://www.example.com/th/c deleted"
    );
    // The draft was never public: no URL of it was ever queued.
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%draft%'"), 0);
}

#[pg_test]
fn insert_select_of_ten_thousand_rows_is_one_statement_and_ten_thousand_urls() {
    site();
    run(
        "INSERT INTO pages (slug, title, body, status) \
         SELECT 'p' || g, 'T', 'B', CASE WHEN g % 4 = 0 THEN 'draft' ELSE 'published' END \
           FROM generate_series(1, 13333) g",
    );
    derive();
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE reason = 'created'"), 10_000);
    run("UPDATE pages SET body = body || ' more'");
    derive();
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE request_seq = 2"), 10_000);
}

#[pg_test]
fn per_language_watches_queue_only_their_language() {
    site();
    publish("news");
    run("UPDATE pages SET title_en = 'News' WHERE slug = 'news'");
    pushed();
    run("UPDATE pages SET body_en = 'English only'");
    assert_eq!(pending(), "https://www.example.com/en/news changed");
    pushed();
    run("UPDATE pages SET body = 'Thai only'");
    assert_eq!(pending(), "https://www.example.com/th/news changed");
    pushed();
    run("UPDATE pages SET title_en = NULL");
    assert_eq!(pending(), "https://www.example.com/en/news untranslated");
}

#[pg_test]
fn a_translation_table_with_url_sql() {
    run("CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, published boolean NOT NULL)");
    run(
        "CREATE TABLE post_translations (post_id int REFERENCES posts, lang text, title text, \
           body text, updated_at timestamptz, PRIMARY KEY (post_id, lang))",
    );
    run("INSERT INTO posts VALUES (1, 'hello', true), (2, 'draft', false)");
    run(
        "SELECT indexnow_watch('post_translations', \
           url_sql => $$'https://www.example.com/' || lang || '/' || (SELECT p.slug FROM posts p WHERE p.id = post_id)$$, \
           visible => $$(SELECT p.published FROM posts p WHERE p.id = post_id)$$)",
    );
    run("INSERT INTO post_translations VALUES (1, 'th', 'T', 'B', now()), (1, 'en', 'T', 'B', now()), (2, 'en', 'D', 'D', now())");
    pushed();
    run("UPDATE post_translations SET body = 'new english' WHERE post_id = 1 AND lang = 'en'");
    assert_eq!(pending(), "https://www.example.com/en/hello changed");
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%draft%'"), 0);
}

#[pg_test]
fn scheduled_rescheduled_and_cancelled() {
    site();
    run(
        "INSERT INTO pages (slug, status, published_at) VALUES \
           ('soon', 'published', now() + interval '1 day'), \
           ('later', 'published', now() + interval '2 days')",
    );
    derive();
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE available_at = now() + interval '1 day' AND url LIKE '%/soon'"),
        1
    );
    run("UPDATE pages SET published_at = now() + interval '3 days' WHERE slug = 'soon'");
    derive();
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE available_at = now() + interval '3 days' AND url LIKE '%/soon'"),
        1
    );
    // Cancelled before its time: never public, so never sent.
    run("UPDATE pages SET status = 'draft' WHERE slug = 'later'");
    assert_eq!(pending(), "https://www.example.com/th/soon created");
    // Deleted before its time: the same.
    run("DELETE FROM pages WHERE slug = 'soon'");
    assert_eq!(pending(), "");
    // Published now instead: sent now.
    run("INSERT INTO pages (slug, status, published_at) VALUES ('x', 'published', now() + interval '1 day')");
    run("UPDATE pages SET published_at = now() - interval '1 minute' WHERE slug = 'x'");
    derive();
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/x' AND available_at = now()"), 1);
}

#[pg_test]
fn a_rescheduled_page_search_engines_knew_is_removed_when_cancelled() {
    derive_in_statements();
    site();
    publish("known");
    pushed();
    run("UPDATE pages SET published_at = now() + interval '1 day'");
    run("UPDATE pages SET status = 'draft'");
    assert_eq!(pending(), "https://www.example.com/th/known unpublished");
}

#[pg_test]
fn a_never_public_url_is_never_queued() {
    site();
    run("INSERT INTO pages (slug, status) VALUES ('d', 'draft')");
    run("UPDATE pages SET body = 'still a draft'");
    run("UPDATE pages SET slug = 'd2'");
    run("DELETE FROM pages");
    publish("th-only");
    assert_eq!(queue(), "https://www.example.com/th/th-only created 1");
}

#[pg_test]
fn a_row_whose_url_cannot_be_built_is_skipped_and_the_write_succeeds() {
    derive_in_statements();
    site();
    run("INSERT INTO pages (slug, status) VALUES (NULL, 'published'), ('ok', 'published')");
    assert_eq!(queue(), "https://www.example.com/th/ok created 1");
    pushed();
    run("UPDATE pages SET slug = repeat('x', 3000) WHERE slug = 'ok'");
    assert_eq!(count("SELECT count(*) FROM pages WHERE length(slug) = 3000"), 1);
    // The old URL is still removed; the new one, too long, is skipped.
    assert_eq!(pending(), "https://www.example.com/th/ok moved");
}

#[pg_test]
fn a_failing_watch_never_fails_the_write() {
    derive_in_statements();
    run("CREATE TABLE items (id int PRIMARY KEY, n int)");
    run("SELECT indexnow_watch('items', url_sql => $$'https://www.example.com/i/' || (100 / n)$$)");
    run("INSERT INTO items VALUES (1, 0), (2, 5)");
    assert_eq!(count("SELECT count(*) FROM items"), 2);
}

#[pg_test]
fn a_failing_watch_is_rolled_back_alone_and_the_other_watches_still_queue() {
    derive_in_statements();
    run("CREATE TABLE items (id int PRIMARY KEY, n int)");
    run("SELECT indexnow_watch('items', url_sql => $$'https://www.example.com/i/' || id || '-' || (100 / n)$$)");
    run("SELECT indexnow_watch('items', url => 'https://www.example.com/ok/{id}')");
    let queued = |like: &str| {
        derive();
        count(&format!(
            "SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/{like}/%'"
        ))
    };
    // A bulk statement: one row fails the first watch's derivation and is skipped alone; the
    // other 199 are queued, and so is every row for the second watch. (Before derivations
    // skipped failing rows alone, the whole statement's 200 were lost: (0, 200).)
    run("INSERT INTO items SELECT g, CASE WHEN g = 1 THEN 0 ELSE g END FROM generate_series(1, 200) g");
    assert_eq!((queued("i"), queued("ok")), (199, 200));
    // Single-row statements (kept plans), the good and the failing.
    run("INSERT INTO items VALUES (300, 5)");
    assert_eq!((queued("i"), queued("ok")), (200, 201));
    run("INSERT INTO items VALUES (301, 0)");
    assert_eq!((queued("i"), queued("ok")), (200, 202));
    assert_eq!(count("SELECT count(*) FROM items"), 202);
}

#[pg_test]
fn a_watch_whose_url_writes_another_watched_table_queues_both() {
    // The capture statement of `articles` calls a function that writes `audit`, whose own
    // capture trigger runs a kept statement while the first one is still running.
    run("CREATE TABLE audit (id serial PRIMARY KEY, note text)");
    run("SELECT indexnow_watch('audit', url => 'https://www.example.com/audit/{id}')");
    run(
        "CREATE FUNCTION slug_noted(slug text) RETURNS text LANGUAGE sql VOLATILE AS \
           $$ INSERT INTO audit (note) VALUES (slug) RETURNING note $$",
    );
    run("CREATE TABLE articles (id int PRIMARY KEY, slug text)");
    run(
        "SELECT indexnow_watch('articles', \
           url_sql => $$'https://www.example.com/a/' || slug_noted(slug)$$)",
    );
    for id in 1..=3 {
        run(&format!("INSERT INTO articles VALUES ({id}, 'story-{id}')"));
    }
    derive();
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/a/story-%'"),
        3
    );
    // Every row the function wrote was captured too (the URL expression may be evaluated more
    // than once a row, so the count is the audit table's).
    assert!(count("SELECT count(*) FROM audit") >= 3);
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/audit/%'"),
        count("SELECT count(*) FROM audit")
    );
}

#[pg_test]
fn a_cancel_during_capture_cancels_the_write() {
    // (a write that derives in its statement: recorded, the write never runs the expression)
    run("SET LOCAL indexnow.derive_at_write = 100");
    run("CREATE TABLE slow (id int PRIMARY KEY)");
    // (in a function of the user's: a watch refuses PostgreSQL's volatile functions)
    run(
        "CREATE FUNCTION cancel_on_first(id int) RETURNS text LANGUAGE sql AS $$ \
           SELECT CASE WHEN id = 1 THEN CASE WHEN pg_cancel_backend(pg_backend_pid()) \
                                             THEN (SELECT '' FROM pg_sleep(1)) END END $$",
    );
    run(
        "SELECT indexnow_watch('slow', url_sql => $$'https://www.example.com/s/' || id || \
           cancel_on_first(id)$$)",
    );
    run("CREATE TABLE outcome (what text)");
    run(
        "DO $$ BEGIN \
           INSERT INTO slow VALUES (1); \
           INSERT INTO outcome VALUES ('written'); \
         EXCEPTION WHEN query_canceled THEN INSERT INTO outcome VALUES ('canceled'); END $$",
    );
    assert_eq!(text("SELECT string_agg(what, ',') FROM outcome").as_deref(), Some("canceled"));
    assert_eq!(count("SELECT count(*) FROM slow"), 0);
}

#[pg_test]
fn a_replaced_watch_is_followed_by_the_next_save() {
    derive_in_statements();
    site();
    publish("news");
    run("UPDATE pages SET body = 'one' WHERE slug = 'news'");
    run(
        "SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{slug}', \
           visible => $$status = 'published'$$, ignore => '{body}')",
    );
    pushed();
    // the same backend saved through the old statements just before
    run("UPDATE pages SET body = 'two' WHERE slug = 'news'");
    assert_eq!(pending(), "");
    run("UPDATE pages SET title = 'two' WHERE slug = 'news'");
    assert_eq!(pending(), "https://www.example.com/th/news changed");
}

#[pg_test]
fn rollback_of_a_statement_queues_nothing() {
    site();
    run(
        "DO $$ BEGIN \
           INSERT INTO pages (slug, status) VALUES ('gone', 'published'); \
           RAISE EXCEPTION 'roll back'; \
         EXCEPTION WHEN raise_exception THEN NULL; END $$",
    );
    assert_eq!(queue(), "");
}

#[pg_test]
fn reconcile_catches_writes_the_triggers_missed() {
    site();
    publish("a");
    publish("b");
    publish("c");
    pushed();
    run("SET LOCAL session_replication_role = replica");
    run("UPDATE pages SET body = 'changed behind our back' WHERE slug = 'a'");
    run("DELETE FROM pages WHERE slug = 'b'");
    run("INSERT INTO pages (slug, status) VALUES ('d', 'published')");
    run("SET LOCAL session_replication_role = origin");
    assert_eq!(pending(), "");
    let counts = text(
        "SELECT string_agg(concat_ws(' ', pattern, created, changed, gone), '; ' ORDER BY pattern) \
           FROM indexnow_reconcile('pages')",
    )
    .unwrap();
    assert_eq!(counts, "https://www.example.com/en/{slug} 0 0 0; https://www.example.com/th/{slug} 1 1 1");
    assert_eq!(
        pending(),
        "https://www.example.com/th/a changed\nhttps://www.example.com/th/b gone\nhttps://www.example.com/th/d created"
    );
    // A second pass finds nothing more.
    assert_eq!(count("SELECT sum(created + changed + gone)::bigint FROM indexnow_reconcile('pages')"), 0);
}

#[pg_test]
fn watching_records_existing_pages_without_announcing_them() {
    run("CREATE TABLE pages (id int PRIMARY KEY, slug text, live boolean, publish timestamptz)");
    run(
        "INSERT INTO pages VALUES (1, 'a', true, NULL), (2, 'b', false, NULL), \
           (3, 'c', true, now() + interval '1 hour')",
    );
    run("SELECT indexnow_watch('pages', url => 'https://x.example.com/{slug}', visible => 'live', publish_at => 'publish')");
    assert_eq!(
        queue(),
        "https://x.example.com/a created 0\nhttps://x.example.com/c created 1"
    );
    // A table already known: a TRUNCATE removes what was public.
    run("TRUNCATE pages");
    assert_eq!(pending(), "https://x.example.com/a deleted");
}

#[pg_test]
fn watch_checks_its_arguments() {
    run("CREATE TABLE pages (id int PRIMARY KEY, slug text, status text, published_at timestamptz, n int)");
    run("CREATE TABLE nokey (slug text)");
    run("CREATE TABLE deferred_key (id int PRIMARY KEY DEFERRABLE, slug text)");
    let cases = [
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{title}')", "names column \"title\", which public.pages does not have"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug')", "unclosed"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/static')", "names no column"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', ignore => '{colour}')", "ignore names column \"colour\""),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', ignore => '{slug}')", "in the URL and in ignore"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', visible => 'status =')", "visible is not a valid SQL expression over public.pages"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', visible => 'status')", "visible must be a boolean expression over public.pages; \"status\" is text"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', visible => 'colour = 1')", "column \"colour\" does not exist"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', publish_at => 'n')", "publish_at column \"n\" is not a timestamp"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', publish_at => 'when')", "publish_at names column \"when\""),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', hidden_reason => 'changed')", "not a removal reason"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', hidden_reason => 'hidden')", "unknown reason \"hidden\""),
        ("SELECT indexnow_watch('pages')", "give the URL"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', url_sql => 'slug')", "not both"),
        ("SELECT indexnow_watch('pages', url_sql => 'slug ||| 1')", "url_sql is not a valid SQL expression"),
        ("SELECT indexnow_watch('nokey', url => 'https://x.com/{slug}')", "has no primary key"),
        ("SELECT indexnow_watch('deferred_key', url => 'https://x.com/{slug}')", "has no primary key (a deferrable one does not count"),
        ("SELECT indexnow_watch('no_such_table', url => 'https://x.com/{slug}')", "relation \"no_such_table\" does not exist"),
    ];
    assert_refused(&cases, None);
    assert_eq!(count("SELECT count(*) FROM indexnow_watches"), 0);
    assert_eq!(count("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pages'::regclass"), 0);
}

#[pg_test]
fn watch_again_replaces_and_unwatch_removes_triggers_and_configuration() {
    site();
    assert_eq!(count("SELECT count(*) FROM indexnow_watches"), 2);
    assert_eq!(count("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pages'::regclass"), 4);
    // The same pattern again replaces the watch.
    run(
        "SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{slug}', \
           visible => $$status = 'published'$$)",
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_watches"), 2);
    assert_eq!(
        text("SELECT visible FROM indexnow_watches WHERE pattern LIKE '%/th/%'").as_deref(),
        Some("status = 'published'")
    );
    run("SELECT indexnow_unwatch('pages', 'https://www.example.com/en/{slug}')");
    assert_eq!(count("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pages'::regclass"), 4);
    publish("only-th");
    assert_eq!(pending(), "https://www.example.com/th/only-th created");
    run("SELECT indexnow_unwatch('pages')");
    assert_eq!(count("SELECT count(*) FROM indexnow_watches WHERE active"), 0);
    assert_eq!(count("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pages'::regclass"), 0);
    publish("unwatched");
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%unwatched'"), 0);
    let err = error_of("SELECT indexnow_unwatch('pages')").unwrap();
    assert!(err.contains("public.pages is not watched"), "{err}");
}

#[pg_test]
fn a_role_that_may_only_write_the_table_still_has_its_change_queued() {
    site();
    run("CREATE ROLE indexnow_test_editor");
    run("GRANT USAGE ON SCHEMA public TO indexnow_test_editor");
    run("GRANT SELECT, INSERT, UPDATE, DELETE ON pages TO indexnow_test_editor");
    // The sequence's name is not fixed (tests run in parallel, each creating its own "pages").
    run(
        "DO $$ BEGIN EXECUTE format('GRANT USAGE ON SEQUENCE %s TO indexnow_test_editor', \
                                    pg_get_serial_sequence('pages', 'id')); END $$",
    );
    install_error_catcher(); // before the role change: that role cannot create it
    run("SET LOCAL ROLE indexnow_test_editor");
    // Recorded (the default), then derived in the statement, with the editor's rights.
    run("INSERT INTO pages (slug, status) VALUES ('by-editor', 'published')");
    run("RESET ROLE");
    derive_in_statements();
    run("SET LOCAL ROLE indexnow_test_editor");
    run("INSERT INTO pages (slug, status) VALUES ('by-editor-now', 'published')");
    let err = error_of("SELECT count(*) FROM indexnow_urls").unwrap();
    assert!(err.starts_with("42501"), "{err}");
    // Nothing of the extension's but the save is the editor's: no table, no management
    // function, no setting.
    for sql in [
        "SELECT indexnow_watch('pages', url => 'https://evil.example.com/{slug}')",
        "SELECT indexnow_unwatch('pages')",
        "SELECT * FROM indexnow_reconcile('pages')",
        "SELECT indexnow_derive()",
        "SELECT * FROM indexnow_push_now()",
        "SELECT indexnow_add_host('www.example.com', 'stolen-key-1')",
        "SELECT indexnow_disable_host('www.example.com')",
        "SELECT indexnow_enable_host('www.example.com')",
        "SELECT indexnow_set_key_location('www.example.com', NULL)",
        "SELECT indexnow_confirm_copy()",
        "SELECT indexnow_queue('https://www.example.com/planted')",
        "SELECT count(*) FROM indexnow_watches",
        "UPDATE indexnow_watches SET visible = 'true'",
        "SELECT count(*) FROM indexnow_sources",
        "SELECT count(*) FROM indexnow_changes",
        "INSERT INTO indexnow_changes (tbl, keys) VALUES ('pages'::regclass, '[]')",
        "SELECT count(*) FROM indexnow_relations",
        "SELECT key FROM indexnow_hosts",
        "DELETE FROM indexnow_urls",
        "SET indexnow.enabled = off",
        "SET indexnow.derive_at_write = 0",
        "ALTER TABLE pages DISABLE TRIGGER ALL",
    ] {
        let err = error_of(sql).unwrap_or_else(|| panic!("the editor could run {sql}"));
        assert!(err.starts_with("42501"), "{sql}: {err}");
    }
    run("RESET ROLE");
    assert_eq!(
        pending(),
        "https://www.example.com/th/by-editor created\nhttps://www.example.com/th/by-editor-now created"
    );
}

#[pg_test]
fn a_writer_cannot_slip_its_own_function_into_the_watchs_expressions() {
    derive_in_statements();
    // The watch's url_sql calls a function of the site's, found through the watcher's
    // search_path; a writer who puts a schema of its own first, with a function of that name,
    // must not have it called (with the extension's rights) when its save is derived.
    run("CREATE FUNCTION public.indexnow_test_slug(s text) RETURNS text LANGUAGE sql IMMUTABLE \
           AS $$ SELECT lower(s) $$");
    run("CREATE TABLE posts (id int PRIMARY KEY, slug text)");
    run("SELECT indexnow_watch('posts', \
           url_sql => $$'https://www.example.com/p/' || indexnow_test_slug(slug)$$)");
    run("CREATE ROLE indexnow_test_intruder");
    run("GRANT USAGE ON SCHEMA public TO indexnow_test_intruder");
    run("GRANT SELECT, INSERT, UPDATE ON posts TO indexnow_test_intruder");
    run("CREATE SCHEMA indexnow_test_own AUTHORIZATION indexnow_test_intruder");
    run("CREATE TABLE public.indexnow_test_called (who text)");
    run("GRANT INSERT ON public.indexnow_test_called TO PUBLIC");
    install_error_catcher();
    run("SET LOCAL ROLE indexnow_test_intruder");
    run("CREATE FUNCTION indexnow_test_own.indexnow_test_slug(s text) RETURNS text \
           LANGUAGE sql VOLATILE AS $$ \
             INSERT INTO public.indexnow_test_called VALUES (current_user); \
             SELECT 'hijacked' $$");
    run("SET LOCAL search_path = indexnow_test_own, public");
    run("INSERT INTO posts VALUES (1, 'Hello')");
    run("UPDATE posts SET slug = 'World' WHERE id = 1");
    run("RESET ROLE");
    run("SET LOCAL search_path = public");
    assert_eq!(count("SELECT count(*) FROM indexnow_test_called"), 0);
    assert_eq!(
        pending_like("%/p/%"),
        "https://www.example.com/p/world created"
    );
}

// Issue 10's findings, each a test that failed on the capture that derived URLs from the old row
// at write time.

#[pg_test]
fn a_scheduled_post_cancelled_before_its_time_is_never_announced() {
    derive_in_statements();
    site();
    run("INSERT INTO pages (slug, status, published_at) VALUES ('launch', 'published', now() + interval '1 day')");
    run("DELETE FROM pages WHERE slug = 'launch'");
    assert_eq!(pending(), "");
    // Neither reconcile nor a later TRUNCATE learns of it.
    assert_eq!(
        count("SELECT sum(created + changed + gone)::bigint FROM indexnow_reconcile('pages')"),
        0
    );
    publish("other");
    pushed();
    run("TRUNCATE pages");
    assert_eq!(pending(), "https://www.example.com/th/other deleted");
}

#[pg_test]
fn an_insert_then_rename_in_one_transaction_announces_only_the_final_url() {
    derive_in_statements();
    site();
    // The site's index page is known to search engines.
    run("SELECT indexnow_queue('https://www.example.com/th/')");
    pushed();
    // The ORM inserts with an empty slug, then sets it; another row is inserted and deleted.
    run("INSERT INTO pages (slug, status) VALUES ('', 'published')");
    run("UPDATE pages SET slug = 'story' WHERE slug = ''");
    run("INSERT INTO pages (slug, status) VALUES ('tmp', 'published')");
    run("DELETE FROM pages WHERE slug = 'tmp'");
    assert_eq!(pending(), "https://www.example.com/th/story created");
}

#[pg_test]
fn a_broken_watch_watched_again_catches_up_on_what_changed_meanwhile() {
    run("CREATE TABLE items (id int PRIMARY KEY, slug text, body text, hidden boolean)");
    run("INSERT INTO items VALUES (1, 'a', 'A', false), (2, 'b', 'B', false), (3, 'c', 'C', false)");
    run(
        "SELECT indexnow_watch('items', url => 'https://www.example.com/{slug}', \
           visible => 'NOT hidden', ignore => '{hidden}')",
    );
    run("UPDATE items SET body = body || '!' WHERE id = 3");
    pushed();
    // The watch breaks: the column its visible names is gone. Writes go on, with a WARNING each.
    run("ALTER TABLE items DROP COLUMN hidden");
    run("INSERT INTO items VALUES (4, 'd', 'D')");
    run("UPDATE items SET body = 'changed' WHERE id = 1");
    run("DELETE FROM items WHERE id = 3");
    assert_eq!(pending(), "");
    // What the WARNING's HINT says: watch again. Unchanged rows stay known; the rest is queued.
    run("SELECT indexnow_watch('items', url => 'https://www.example.com/{slug}')");
    assert_eq!(
        pending(),
        "https://www.example.com/a changed\nhttps://www.example.com/c gone\nhttps://www.example.com/d created"
    );
    assert_eq!(
        count("SELECT sum(created + changed + gone)::bigint FROM indexnow_reconcile('items')"),
        0
    );
}

#[pg_test]
fn unwatch_and_a_new_watch_keep_the_old_watchs_removals_owed() {
    site();
    publish("a");
    pushed();
    run("SELECT indexnow_unwatch('pages', 'https://www.example.com/th/{slug}')");
    run("SELECT indexnow_watch('pages', url => 'https://www.example.com/thai/{slug}', visible => $$status = 'published'$$)");
    assert_eq!(pending(), "");
    // The old pattern's URL was announced: the next reconcile removes it.
    let owed = text(
        "SELECT string_agg(concat_ws(' ', pattern, gone), '; ' ORDER BY pattern) FROM indexnow_reconcile('pages')",
    )
    .unwrap();
    assert!(owed.contains("(unwatched) 1"), "{owed}");
    assert_eq!(pending(), "https://www.example.com/th/a gone");
    pushed();
    // A TRUNCATE removes what the new watch knows.
    run("TRUNCATE pages");
    assert_eq!(pending(), "https://www.example.com/thai/a deleted");
}

/// An unwatched pattern's URL whose request was tried and never answered (it may have arrived)
/// is owed its removal when the table is reconciled; one never tried is cancelled. Only a live
/// lease counted there: the tried one was cancelled too.
#[pg_test]
fn an_unwatched_url_tried_without_an_answer_is_still_removed() {
    run("CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL)");
    run("SELECT indexnow_watch('pages', url => 'https://www.example.com/old/{slug}')");
    run("SELECT indexnow_watch('pages', url => 'https://www.example.com/new/{slug}')");
    run("INSERT INTO pages VALUES (1, 'tried'), (2, 'never')");
    derive();
    run("UPDATE indexnow_urls SET tried_at = clock_timestamp() WHERE url LIKE '%/old/tried'");
    run("SELECT indexnow_unwatch('pages', 'https://www.example.com/old/{slug}')");
    run("SELECT * FROM indexnow_reconcile('pages')");
    assert_eq!(
        pending(),
        "https://www.example.com/new/never created\n\
         https://www.example.com/new/tried created\n\
         https://www.example.com/old/tried gone"
    );
}

#[pg_test]
fn two_watches_giving_one_url_keep_their_own_fingerprints() {
    run("CREATE TABLE items (id int PRIMARY KEY, slug text, body text, note text)");
    run("INSERT INTO items VALUES (1, 'a', 'A', 'N')");
    run("SELECT indexnow_watch('items', url => 'https://www.example.com/{slug}', ignore => '{note}')");
    run("SELECT indexnow_watch('items', url_sql => $$'https://www.example.com/' || slug$$, ignore => '{body}')");
    pushed();
    // Reconcile finds nothing to announce, twice: neither watch overwrites the other's record.
    for _ in 0..2 {
        assert_eq!(
            count("SELECT sum(created + changed + gone)::bigint FROM indexnow_reconcile('items')"),
            0
        );
    }
    // One watch's row gone hides nothing the other still gives.
    run("UPDATE items SET body = 'B'");
    assert_eq!(pending(), "https://www.example.com/a changed");
}

#[pg_test]
fn session_settings_change_no_url_fingerprint_or_publication_time() {
    run("SET LOCAL TimeZone = 'Asia/Bangkok'");
    run(
        "CREATE TABLE events (id int PRIMARY KEY, day date, starts timestamptz, \
           publish timestamp, live boolean)",
    );
    run(
        "INSERT INTO events VALUES (1, '2030-01-02', '2030-01-02 09:00+07', '2030-01-01 09:00', true), \
           (2, '2020-05-06', '2020-05-06 10:00+07', NULL, true)",
    );
    run("SELECT indexnow_watch('events', url => 'https://www.example.com/{day}', visible => 'live', publish_at => 'publish')");
    // (what is due is pushed; the page scheduled for 2030 is not sent before its time)
    run(
        "UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
           last_pushed_at = clock_timestamp() WHERE request_seq > settled_seq AND available_at <= now()",
    );
    // The URL takes the date in ISO form; a timestamp without zone is read in the watcher's zone.
    assert_eq!(
        count(
            "SELECT count(*) FROM indexnow_urls WHERE url = 'https://www.example.com/2030-01-02' \
               AND available_at = '2030-01-01 02:00+00'"
        ),
        1
    );
    run("SET LOCAL TimeZone = 'America/New_York'");
    run("SET LOCAL DateStyle = 'SQL, DMY'");
    run("SET LOCAL IntervalStyle = 'sql_standard'");
    assert_eq!(
        count("SELECT sum(created + changed + gone)::bigint FROM indexnow_reconcile('events')"),
        0
    );
    run("UPDATE events SET live = live");
    run("UPDATE events SET day = '2020-05-07' WHERE id = 2");
    assert_eq!(
        pending(),
        "https://www.example.com/2020-05-06 moved\nhttps://www.example.com/2020-05-07 created\n\
         https://www.example.com/2030-01-02 created"
    );
    // The caller's settings are its own again.
    assert_eq!(text("SELECT current_setting('DateStyle')").as_deref(), Some("SQL, DMY"));
}

#[pg_test]
fn a_change_of_stored_value_is_a_change_even_when_the_type_calls_them_equal() {
    run("CREATE TABLE prices (id int PRIMARY KEY, slug text, price numeric)");
    run("INSERT INTO prices VALUES (1, 'p', 1.0)");
    run("SELECT indexnow_watch('prices', url => 'https://www.example.com/{slug}')");
    pushed();
    run("UPDATE prices SET price = 1.00");
    assert_eq!(pending(), "https://www.example.com/p changed");
}

/// An unlogged table loses its rows at a crash without firing a trigger (their pages would stay
/// announced): a watched or related tree has none, whether watched, made below, attached or set
/// unlogged. One outside any watched tree is no concern of indexnow's.
#[pg_test]
fn unlogged_tables_are_refused_in_watched_trees() {
    run("CREATE UNLOGGED TABLE scratch (id int PRIMARY KEY, slug text)");
    run("CREATE TABLE parts (id int, slug text, PRIMARY KEY (id)) PARTITION BY RANGE (id)");
    run("CREATE TABLE parts_low PARTITION OF parts FOR VALUES FROM (0) TO (100)");
    run("CREATE UNLOGGED TABLE loose (id int PRIMARY KEY, slug text)");
    run("CREATE TABLE plain (id int PRIMARY KEY, slug text)");
    run("SELECT indexnow_watch('parts', url => 'https://www.example.com/p/{slug}')");
    run("SELECT indexnow_watch('plain', url => 'https://www.example.com/q/{slug}')");
    let cases = [
        ("SELECT indexnow_watch('scratch', url => 'https://www.example.com/s/{slug}')", "public.scratch is an unlogged table: a crash empties it without firing a trigger"),
        ("CREATE UNLOGGED TABLE parts_high PARTITION OF parts FOR VALUES FROM (100) TO (200)", "parts_high, in the tree of public.parts, is an unlogged table"),
        ("ALTER TABLE parts ATTACH PARTITION loose FOR VALUES FROM (200) TO (300)", "public.loose, in the tree of public.parts, is an unlogged table"),
        ("ALTER TABLE plain SET UNLOGGED", "public.plain is an unlogged table"),
        ("ALTER TABLE parts_low SET UNLOGGED", "public.parts_low, in the tree of public.parts, is an unlogged table"),
    ];
    assert_refused(&cases, None);
    assert_eq!(
        count("SELECT count(*) FROM pg_class WHERE relpersistence = 'u' AND relkind IN ('r', 'p')"),
        2
    );
    run("ALTER TABLE scratch SET LOGGED");
    run("ALTER TABLE scratch SET UNLOGGED");
    run("ALTER TABLE loose SET LOGGED");
    run("ALTER TABLE parts ATTACH PARTITION loose FOR VALUES FROM (200) TO (300)");
}

#[pg_test]
fn watches_that_cannot_work_are_refused() {
    run("CREATE TABLE pages (id int PRIMARY KEY, slug text, n int, live boolean)");
    let too_long = format!(
        "SELECT indexnow_watch('pages', url => 'https://www.example.com/{}/{{slug}}')",
        "a".repeat(2030)
    );
    let cases = [
        (too_long.as_str(), "makes URLs of at least 2056 bytes"),
        // Evaluated when a row is written: a clock in an expression is never followed.
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', visible => 'live AND n < extract(year FROM now())')", "visible reads the clock (now())"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', visible => $$live OR current_date > '2020-01-01'$$)", "visible reads the clock (current_"),
        ("SELECT indexnow_watch('pages', url_sql => $$'https://x.com/' || slug || age(timestamptz '2020-01-01')::text$$)", "url_sql reads the clock (age())"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', publish_at => $$'tomorrow'::timestamptz$$)", "publish_at reads the clock ('tomorrow')"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', expire_at => 'now()')", "expire_at reads the clock (now())"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', visible => 'random() < 0.5')", "visible calls random(), a volatile function"),
        ("SELECT indexnow_watch('pages', url_sql => $$'https://x.com/' || gen_random_uuid()$$)", "url_sql calls gen_random_uuid(), a volatile function"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', expire_at => 'slug')", "expire_at column \"slug\" is not a timestamp"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', expire_at => 'gone_at')", "expire_at names column \"gone_at\", which public.pages does not have"),
        ("SELECT indexnow_watch('pages', url => 'https://shop.test/{slug}')", "is under .test, a domain reserved for special use"),
        ("SELECT indexnow_watch('pages', url => 'https://www.example.com:0/{slug}')", "the URL's port is 0"),
        ("SELECT indexnow_watch('pages', url_sql => 'n')", "url_sql must be a text expression over public.pages; \"n\" is integer"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', visible => 'count(*) > 0')", "aggregate functions are not allowed"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', visible => 'row_number() over () = 1')", "window functions are not allowed"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', visible => 'live)) FROM pages; SELECT ((true')", "visible is not a valid SQL expression"),
        // (valid in the parentheses the statements put them in, and more than one expression:
        // every row public, every URL the first part)
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', visible => $$live) OR (true$$)", "visible must be one SQL expression over the row; \"live) OR (true\" is not"),
        ("SELECT indexnow_watch('pages', url_sql => $$'https://x.com/' || slug) || ('/x'$$)", "url_sql must be one SQL expression over the row"),
        ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', publish_at => $$now()) - (interval '1 day'$$)", "publish_at must be one SQL expression over the row"),
        ("SELECT indexnow_watch('pages', url => 'https://localhost/{slug}')", "does not make a URL that can be submitted"),
        ("SELECT indexnow_watch('pages', url => 'www.example.com/{slug}')", "must start with https:// or http://"),
        ("SELECT indexnow_watch('indexnow_urls', url => 'https://x.com/{url}')", "is one of indexnow's own tables"),
    ];
    assert_refused(&cases, None);
    assert_eq!(count("SELECT count(*) FROM indexnow_watches"), 0);
    // A word of the clock that is not read as a time is none.
    run("SELECT indexnow_watch('pages', url => 'https://www.example.com/{slug}', visible => $$live AND slug <> 'now'$$)");
}

#[pg_test]
fn a_bulk_statement_is_recorded_and_status_shows_it_waiting_without_deriving() {
    site();
    run("INSERT INTO pages (slug, title, body, status) SELECT 'p' || g, 'T', 'B', 'published' FROM generate_series(1, 500) g");
    // Recorded, not yet derived: the keys of 500 rows in one change set.
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 1);
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 0);
    // indexnow_status() derives nothing: it shows what waits, as such.
    assert_eq!(count("SELECT sum(pending)::bigint FROM indexnow_status()"), 0);
    assert_eq!(count("SELECT max(changes_waiting) FROM indexnow_status()"), 500);
    assert_eq!(
        count("SELECT count(*) FROM indexnow_status() WHERE oldest_change_age IS NOT NULL"),
        1
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 1);
    // indexnow_derive() derives it all; status then shows the queue as it is.
    assert_eq!(count("SELECT indexnow_derive()"), 1);
    assert_eq!(count("SELECT sum(pending)::bigint FROM indexnow_status()"), 500);
    assert_eq!(count("SELECT max(changes_waiting) FROM indexnow_status()"), 0);
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
    // A single-row save is recorded too (the default), and derived in its own statement when
    // indexnow.derive_at_write allows.
    run("UPDATE pages SET body = 'x' WHERE slug = 'p1'");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 1);
    derive();
    run("SET LOCAL indexnow.derive_at_write = 100");
    run("UPDATE pages SET body = 'y' WHERE slug = 'p1'");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
}

/// Monitoring does no derivation work: recorded changes of a watch whose expression is slow leave
/// `indexnow_status()` answering at once (deriving them takes 20 × 0.1 s).
#[pg_test]
fn status_answers_at_once_however_slow_the_recorded_changes_are_to_derive() {
    run("CREATE FUNCTION slowly_visible() RETURNS boolean LANGUAGE plpgsql AS \
           'BEGIN PERFORM pg_sleep(0.1); RETURN true; END'");
    run("CREATE TABLE notes (id int PRIMARY KEY, slug text NOT NULL)");
    run("SELECT indexnow_watch('notes', url => 'https://www.example.com/n/{slug}', \
           visible => 'slowly_visible()')");
    run("SET indexnow.derive_at_write = 0");
    run("INSERT INTO notes SELECT g, 'n' || g FROM generate_series(1, 20) g");
    let started = std::time::Instant::now();
    assert_eq!(count("SELECT max(changes_waiting) FROM indexnow_status()"), 20);
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_millis(1_000), "status took {took:?}");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 1);
}

/// The usual CMS shape: articles with translations, in categories; the watch is on the
/// translations and reads its visibility, publication time and URL parts from the parents.
fn translated_site() {
    run("CREATE TABLE categories (id int PRIMARY KEY, slug text NOT NULL)");
    run(
        "CREATE TABLE articles (id int PRIMARY KEY, published boolean NOT NULL, \
           published_at timestamptz, category_id int NOT NULL REFERENCES categories)",
    );
    run(
        "CREATE TABLE article_translations (article_id int REFERENCES articles ON DELETE CASCADE, \
           lang text, slug text NOT NULL, title text, PRIMARY KEY (article_id, lang))",
    );
    run(
        "SELECT indexnow_watch('article_translations', \
           url_sql => $$'https://www.example.com/' || lang || '/' || \
             (SELECT c.slug FROM articles a JOIN categories c ON c.id = a.category_id \
               WHERE a.id = article_id) || '/' || slug$$, \
           visible => $$(SELECT a.published FROM articles a WHERE a.id = article_id)$$, \
           publish_at => $$(SELECT a.published_at FROM articles a WHERE a.id = article_id)$$, \
           related => '{articles,categories}')",
    );
    run("INSERT INTO categories VALUES (1, 'news'), (2, 'sport')");
    run("INSERT INTO articles VALUES (1, true, NULL, 1), (2, true, NULL, 1), (3, true, NULL, 2)");
    run(
        "INSERT INTO article_translations VALUES (1, 'th', 'a1', 'T'), (1, 'en', 'a1', 'T'), \
           (2, 'en', 'a2', 'T'), (3, 'en', 'a3', 'T')",
    );
}

#[pg_test]
fn a_parent_change_re_derives_exactly_its_translations() {
    translated_site();
    assert_eq!(
        pending(),
        "https://www.example.com/en/news/a1 created\nhttps://www.example.com/en/news/a2 created\n\
         https://www.example.com/en/sport/a3 created\nhttps://www.example.com/th/news/a1 created"
    );
    pushed();
    // Unpublishing the parent removes its translations' URLs, and only those.
    run("UPDATE articles SET published = false WHERE id = 1");
    assert_eq!(
        pending(),
        "https://www.example.com/en/news/a1 unpublished\nhttps://www.example.com/th/news/a1 unpublished"
    );
    pushed();
    // Deleting a parent (ON DELETE CASCADE) removes its translations' URLs.
    run("DELETE FROM articles WHERE id = 2");
    assert_eq!(pending(), "https://www.example.com/en/news/a2 deleted");
    pushed();
    // A category's new slug moves its articles' URLs.
    run("UPDATE categories SET slug = 'football' WHERE id = 2");
    assert_eq!(
        pending(),
        "https://www.example.com/en/football/a3 created\nhttps://www.example.com/en/sport/a3 moved"
    );
    pushed();
    // A parent save that changes nothing its translations show queues nothing.
    run("UPDATE articles SET category_id = category_id");
    assert_eq!(pending(), "");
}

#[pg_test]
fn a_parent_schedules_and_reschedules_its_translations() {
    translated_site();
    pushed();
    run("INSERT INTO articles VALUES (4, true, now() + interval '1 day', 1)");
    run("INSERT INTO article_translations VALUES (4, 'en', 'soon', 'T')");
    derive();
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/soon' AND available_at = now() + interval '1 day'"),
        1
    );
    run("UPDATE articles SET published_at = now() + interval '2 days' WHERE id = 4");
    derive();
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/soon' AND available_at = now() + interval '2 days'"),
        1
    );
    // Cancelled before its time: never announced.
    run("UPDATE articles SET published = false WHERE id = 4");
    assert_eq!(pending(), "");
}

#[pg_test]
fn a_related_table_must_be_reachable_by_foreign_keys() {
    run("CREATE TABLE pages (id int PRIMARY KEY, slug text)");
    run("CREATE TABLE elsewhere (id int PRIMARY KEY)");
    assert_refused(
        &[
            ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', related => '{elsewhere}')", "related table public.elsewhere is not reachable from public.pages through foreign keys"),
            ("SELECT indexnow_watch('pages', url => 'https://x.com/{slug}', related => '{nowhere}')", "related table \"nowhere\" does not exist"),
        ],
        None,
    );
}

#[pg_test]
fn partitions_and_inheritance_children_are_covered() {
    run(
        "CREATE TABLE pages (id int, region text, slug text, live boolean, PRIMARY KEY (id, region)) \
           PARTITION BY LIST (region)",
    );
    run("CREATE TABLE pages_th PARTITION OF pages FOR VALUES IN ('th')");
    run("SELECT indexnow_watch('pages', url => 'https://www.example.com/{region}/{slug}', visible => 'live')");
    // A partition created after the watch is covered too.
    run("CREATE TABLE pages_en PARTITION OF pages FOR VALUES IN ('en')");
    // Writes straight to a partition are seen.
    run("INSERT INTO pages_th VALUES (1, 'th', 'a', true)");
    run("INSERT INTO pages_en VALUES (2, 'en', 'b', true)");
    assert_eq!(
        pending(),
        "https://www.example.com/en/b created\nhttps://www.example.com/th/a created"
    );
    pushed();
    run("UPDATE pages_en SET slug = 'c'");
    assert_eq!(
        pending(),
        "https://www.example.com/en/b moved\nhttps://www.example.com/en/c created"
    );
    pushed();
    // DETACH takes the partition's pages off the site; ATTACH brings them back.
    run("ALTER TABLE pages DETACH PARTITION pages_en");
    assert_eq!(pending(), "https://www.example.com/en/c deleted");
    assert_eq!(count("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pages_en'::regclass"), 0);
    pushed();
    run("ALTER TABLE pages ATTACH PARTITION pages_en FOR VALUES IN ('en')");
    // Each ALTER TABLE of the tree re-derives the whole table: one change set a transaction.
    run("ALTER TABLE pages DETACH PARTITION pages_en");
    run("ALTER TABLE pages ATTACH PARTITION pages_en FOR VALUES IN ('en')");
    assert_eq!(
        count("SELECT count(*) FROM indexnow_changes WHERE tbl = 'pages'::regclass AND keys IS NULL"),
        1
    );
    assert_eq!(pending(), "https://www.example.com/en/c created");
    pushed();
    // TRUNCATE of one partition removes its pages only.
    run("TRUNCATE pages_th");
    assert_eq!(pending(), "https://www.example.com/th/a deleted");

    // Inheritance: TRUNCATE ONLY the parent leaves the children's pages.
    run("CREATE TABLE posts (id int PRIMARY KEY, slug text)");
    run("CREATE TABLE old_posts () INHERITS (posts)");
    run("SELECT indexnow_watch('posts', url => 'https://www.example.com/p/{slug}')");
    run("INSERT INTO posts VALUES (1, 'parent')");
    run("INSERT INTO old_posts VALUES (2, 'child')");
    pushed();
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/p/%'"), 2);
    run("TRUNCATE ONLY posts");
    assert_eq!(pending(), "https://www.example.com/p/parent deleted");
}

#[pg_test]
fn merge_and_a_rolled_back_bulk_statement() {
    site();
    run("CREATE TABLE incoming (slug text, body text)");
    run("INSERT INTO incoming SELECT 'm' || g, 'B' FROM generate_series(1, 150) g");
    run("INSERT INTO pages (slug, title, body, status) VALUES ('m1', 'T', 'old', 'published')");
    pushed();
    run(
        "MERGE INTO pages p USING incoming i ON p.slug = i.slug \
           WHEN MATCHED THEN UPDATE SET body = i.body \
           WHEN NOT MATCHED THEN INSERT (slug, title, body, status) VALUES (i.slug, 'T', i.body, 'published')",
    );
    derive();
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq AND reason = 'created'"), 149);
    assert_eq!(pending_like("%/th/m1"), "https://www.example.com/th/m1 changed");
    // A bulk statement rolled back leaves no change set.
    run(
        "DO $$ BEGIN \
           INSERT INTO pages (slug, status) SELECT 'r' || g, 'published' FROM generate_series(1, 500) g; \
           RAISE EXCEPTION 'roll back'; \
         EXCEPTION WHEN raise_exception THEN NULL; END $$",
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/r%'"), 0);
}

#[pg_test]
fn reconcile_after_a_failing_row_names_nothing_it_cannot_derive() {
    run("CREATE TABLE items (id int PRIMARY KEY, n int)");
    run("INSERT INTO items VALUES (1, 0), (2, 5)");
    run("SELECT indexnow_watch('items', url_sql => $$'https://www.example.com/i/' || id || '-' || (100 / n)$$)");
    // The row that fails is skipped, the other derived; reconcile does not fail either.
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 1);
    assert_eq!(
        count("SELECT sum(created + changed + gone)::bigint FROM indexnow_reconcile('items')"),
        0
    );
    run("UPDATE items SET n = 4 WHERE id = 1");
    assert_eq!(pending(), "https://www.example.com/i/1-25 created");
}

#[pg_test]
fn a_save_is_recorded_and_derived_after_unless_derive_at_write_allows_it() {
    site();
    // The default: recorded, derived by a reader (or a worker after the commit).
    publish("news");
    assert_eq!(count("SELECT count(*) FROM indexnow_urls"), 0);
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 1);
    assert_eq!(pending(), "https://www.example.com/th/news created");
    // An ignored-only save records nothing, as always.
    run("UPDATE pages SET sort_order = 9");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
    // Derived in its statement: in the queue at once, nothing recorded.
    pushed();
    run("SET LOCAL indexnow.derive_at_write = 100");
    run("UPDATE pages SET body = 'now' WHERE slug = 'news'");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq AND reason = 'changed'"),
        1
    );
}

#[pg_test]
fn unpublished_republished_and_unpublished_again_before_the_send_is_still_a_removal() {
    site();
    publish("toggle");
    pushed();
    run("UPDATE pages SET status = 'draft'");
    assert_eq!(pending(), "https://www.example.com/th/toggle unpublished");
    run("UPDATE pages SET status = 'published'");
    assert_eq!(pending(), "https://www.example.com/th/toggle changed");
    // Search engines still know it as live: hiding it again is a removal, not a cancellation.
    run("UPDATE pages SET status = 'draft'");
    assert_eq!(pending(), "https://www.example.com/th/toggle unpublished");
}

#[pg_test]
fn a_key_written_under_another_time_zone_finds_its_source() {
    run("SET LOCAL TimeZone = 'Asia/Bangkok'");
    run("CREATE TABLE events (at timestamptz PRIMARY KEY, slug text)");
    run("SELECT indexnow_watch('events', url => 'https://www.example.com/e/{slug}')");
    run("INSERT INTO events VALUES ('2030-01-01 09:00+07', 'launch')");
    pushed();
    run("SET LOCAL TimeZone = 'America/New_York'");
    run("DELETE FROM events");
    assert_eq!(pending(), "https://www.example.com/e/launch deleted");
    assert_eq!(count("SELECT count(*) FROM indexnow_sources"), 0);
}

#[pg_test]
fn status_in_a_read_only_transaction_reports_without_deriving() {
    site();
    run("INSERT INTO pages (slug, title, body, status) SELECT 'p' || g, 'T', 'B', 'published' FROM generate_series(1, 300) g");
    run("SET LOCAL transaction_read_only = on");
    assert_eq!(count("SELECT count(*) FROM indexnow_status()"), 1);
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 1);
}

#[pg_test]
fn a_table_owner_given_watching_watches_its_own_tables_with_its_own_rights() {
    run("CREATE ROLE indexnow_test_owner");
    run("GRANT USAGE, CREATE ON SCHEMA public TO indexnow_test_owner");
    run("DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO indexnow_test_owner', \
                                    current_database()); END $$");
    run("SELECT indexnow_grant_watching('indexnow_test_owner')");
    run("SELECT indexnow_add_host('www.example.com', 'abcdefgh')");
    run("CREATE TABLE public.indexnow_test_others (id int PRIMARY KEY, slug text)");
    // What a watch's expression runs as, and whether it could read the keys. It also changes a
    // setting for the session, which must not outlive it.
    run("CREATE TABLE public.indexnow_test_seen (who text, reads_keys boolean)");
    run("GRANT INSERT ON public.indexnow_test_seen TO PUBLIC");
    run("CREATE FUNCTION public.indexnow_test_probe() RETURNS boolean LANGUAGE plpgsql VOLATILE \
           AS $$ BEGIN \
             INSERT INTO public.indexnow_test_seen \
             VALUES (current_user, has_table_privilege('indexnow_hosts', 'SELECT')); \
             PERFORM set_config('work_mem', '77kB', false); \
             RETURN true; END $$");
    // A watch's expression that would make another watch while it is derived.
    run("CREATE FUNCTION public.indexnow_test_nested(id int) RETURNS boolean LANGUAGE plpgsql \
           AS $$ BEGIN \
             IF id IS NOT NULL THEN \
               PERFORM indexnow_watch('indexnow_test_nest', url => 'https://www.example.com/n2/{id}'); \
             END IF; \
             RETURN true; END $$");
    install_error_catcher();
    run("SET LOCAL ROLE indexnow_test_owner");
    // The owner's own schema first in its path, with a now() of its own: the derivation
    // statements (run as the extension's owner, or a superuser) must not call it.
    run("CREATE SCHEMA indexnow_test_own_s");
    run("CREATE FUNCTION indexnow_test_own_s.now() RETURNS timestamptz LANGUAGE sql VOLATILE \
           AS $$ INSERT INTO public.indexnow_test_seen VALUES (current_user || ' now()', false) \
                 RETURNING pg_catalog.now() $$");
    run("SET LOCAL search_path = indexnow_test_own_s, pg_catalog, public");
    run("CREATE TABLE public.indexnow_test_mine (id int PRIMARY KEY, slug text)");
    run("INSERT INTO indexnow_test_mine VALUES (1, 'before')");
    run("SELECT indexnow_watch('indexnow_test_mine', url => 'https://www.example.com/m/{slug}', \
           visible => 'indexnow_test_probe()')");
    run("CREATE TABLE public.indexnow_test_nest (id int PRIMARY KEY)");
    run("SELECT indexnow_watch('indexnow_test_nest', url => 'https://www.example.com/n/{id}', \
           visible => 'indexnow_test_nested(id)')");
    // An expression that reads the keys is checked with the owner's rights: refused.
    let err = error_of(
        "SELECT indexnow_watch('indexnow_test_mine', url_sql => \
           $$'https://www.example.com/k/' || (SELECT key FROM indexnow_hosts LIMIT 1)$$)",
    )
    .unwrap();
    assert!(err.contains("permission denied for table indexnow_hosts"), "{err}");
    // Another role's table: refused.
    for sql in [
        "SELECT indexnow_watch('indexnow_test_others', url => 'https://www.example.com/o/{slug}')",
        "SELECT * FROM indexnow_reconcile('indexnow_test_others')",
        "SELECT indexnow_unwatch('indexnow_test_others')",
    ] {
        let err = error_of(sql).unwrap_or_else(|| panic!("the owner could run {sql}"));
        assert!(err.starts_with("42501") && err.contains("TRIGGER privilege"), "{sql}: {err}");
    }
    // Still nothing of the extension's is readable.
    let err = error_of("SELECT count(*) FROM indexnow_watches").unwrap();
    assert!(err.starts_with("42501"), "{err}");
    run("INSERT INTO indexnow_test_mine VALUES (2, 'after')");
    run("INSERT INTO indexnow_test_nest VALUES (1)");
    run("RESET ROLE");
    run("SET LOCAL search_path = public");
    // (checking the expression when the watch was made ran it once, in the maker's own session)
    run("RESET work_mem");
    // Another role's table as a related one: refused too.
    run("ALTER TABLE indexnow_test_mine ADD COLUMN other int REFERENCES indexnow_test_others");
    run("SET LOCAL ROLE indexnow_test_owner");
    let err = error_of(
        "SELECT indexnow_watch('indexnow_test_mine', url => 'https://www.example.com/r/{slug}', \
           related => '{indexnow_test_others}')",
    )
    .unwrap();
    assert!(err.starts_with("42501") && err.contains("indexnow_test_others"), "{err}");
    run("RESET ROLE");
    // A superuser's write of the table: the watch's SQL still runs as the role that made it.
    run("INSERT INTO indexnow_test_mine VALUES (3, 'by-admin')");
    run("INSERT INTO indexnow_test_mine SELECT g, 'bulk-' || g FROM generate_series(10, 400) g");
    assert_eq!(count("SELECT count(*) FROM indexnow_reconcile('indexnow_test_mine')"), 1);
    derive();
    assert!(count("SELECT count(*) FROM indexnow_test_seen") > 390);
    assert_eq!(
        text("SELECT string_agg(DISTINCT who || ' ' || reads_keys, ', ') FROM indexnow_test_seen")
            .as_deref(),
        Some("indexnow_test_owner false")
    );
    assert_ne!(text("SHOW work_mem").as_deref(), Some("77kB"));
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/m/%' AND request_seq > settled_seq"),
        393
    );
    // The expression that tried to make a watch while derived was refused (its row skipped).
    assert_eq!(count("SELECT count(*) FROM indexnow_watches WHERE pattern LIKE '%/n2/%'"), 0);
    assert_eq!(count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/n/%'"), 0);
    // Taken back in one step too.
    run("SELECT indexnow_revoke_watching('indexnow_test_owner')");
    run("SET LOCAL ROLE indexnow_test_owner");
    let err = error_of("SELECT indexnow_unwatch('indexnow_test_mine')").unwrap();
    assert!(err.starts_with("42501"), "{err}");
    run("RESET ROLE");
}

#[pg_test]
fn keys_of_types_defined_in_the_database_are_refused() {
    run("CREATE TYPE indexnow_test_mood AS ENUM ('happy', 'sad')");
    run("CREATE TABLE moods (m indexnow_test_mood PRIMARY KEY, slug text)");
    let err = error_of("SELECT indexnow_watch('moods', url => 'https://www.example.com/{slug}')")
        .unwrap();
    assert!(err.contains("is of a type defined in the database"), "{err}");
    run("CREATE DOMAIN indexnow_test_code AS text CHECK (VALUE <> '')");
    run("CREATE TABLE coded (c indexnow_test_code PRIMARY KEY, slug text)");
    run("SELECT indexnow_watch('coded', url => 'https://www.example.com/c/{slug}')");
}

#[pg_test]
fn hostile_values_skip_their_row_alone_and_never_fail_the_write() {
    derive_in_statements();
    // Direct calls: a clear ERROR each.
    assert_refused(
        &[
            ("SELECT indexnow_queue('https://www.example.com/%zz')", "broken percent-encoding"),
            ("SELECT indexnow_queue('https:///x')", "single label"),
            ("SELECT indexnow_queue('https://intranet/x')", "single label"),
            ("SELECT indexnow_queue('https://www.example.com/' || repeat('a', 10000000))", "bytes in all"),
        ],
        Some("22023"),
    );
    // Through a watched table: good and bad rows in one statement; each bad row is skipped for
    // the watch it breaks, the rest is queued, and the write succeeds.
    run("CREATE TABLE hostile (id int PRIMARY KEY, slug text, host text, raw bytea, doc json)");
    run("SELECT indexnow_watch('hostile', url => 'https://www.example.com/t/{slug}')");
    run("SELECT indexnow_watch('hostile', url => 'https://{host}/h/{id}')");
    run("SELECT indexnow_watch('hostile', url_sql => $$'https://www.example.com/s/' || slug$$)");
    run("SELECT indexnow_watch('hostile', \
           url_sql => $$'https://www.example.com/b/' || convert_from(raw, 'UTF8')$$)");
    run("SELECT indexnow_watch('hostile', url_sql => $$'https://www.example.com/j/' || (doc ->> 's')$$)");
    run(r#"INSERT INTO hostile VALUES
             (1, 'good', 'www.example.com', 'ok'::bytea, '{"s": "ok"}'),
             (2, repeat('a', 10000000), 'intranet', '\x00'::bytea, '{"s": "\u0000"}'),
             (3, '%zz', 'WWW.Example.com.', '\xff'::bytea, '{"s": "x"}')"#);
    assert_eq!(count("SELECT count(*) FROM hostile"), 3);
    assert_eq!(
        pending_like("%"),
        [
            "https://www.example.com/b/ok created",
            "https://www.example.com/h/1 created",
            "https://www.example.com/h/3 created",
            "https://www.example.com/j/ok created",
            "https://www.example.com/j/x created",
            "https://www.example.com/s/good created",
            "https://www.example.com/t/%25zz created",
            "https://www.example.com/t/good created",
        ]
        .join("\n")
    );
}

/// Keys are recorded as `jsonb_build_array()` writes them, whether the trigger reads them from
/// the transition tables itself (integers, text) or by SQL (other types), and cut into change
/// sets of 10,000.
#[pg_test]
fn keys_are_recorded_as_sql_writes_them_whoever_reads_them() {
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("CREATE TABLE k (a int2, b bigint, c text, d varchar, body text, PRIMARY KEY (a, b, c, d))");
    run("CREATE TABLE u (id uuid PRIMARY KEY, body text)");
    run("SELECT indexnow_watch('k', url_sql => $$'https://www.example.com/k/' || b$$)");
    run("SELECT indexnow_watch('u', url => 'https://www.example.com/u/{id}')");
    run(
        "INSERT INTO k SELECT g % 300, g * 4000000000, \
           CASE g % 4 WHEN 0 THEN 'quote\"' WHEN 1 THEN E'back\\\\slash\\nline' \
                      WHEN 2 THEN 'ünïcødé ไทย' ELSE '' END, 'v' || g, 'x' \
           FROM generate_series(1, 25000) g",
    );
    run("INSERT INTO u SELECT gen_random_uuid(), 'x' FROM generate_series(1, 50)");
    let same = |table: &str, key: &str| {
        let sql = format!(
            "SELECT (SELECT array_agg(pg_catalog.jsonb_array_length(c.keys) ORDER BY c.id) \
                       FROM indexnow_changes c WHERE c.tbl = '{table}'::regclass)::text || ' ' || \
                    ((SELECT jsonb_agg(e ORDER BY e) FROM indexnow_changes c, \
                             jsonb_array_elements(c.keys) e WHERE c.tbl = '{table}'::regclass) \
                     = (SELECT jsonb_agg(jsonb_build_array({key}) ORDER BY jsonb_build_array({key})) \
                          FROM {table}))::text"
        );
        text(&sql).unwrap()
    };
    assert_eq!(same("k", "a, b, c, d"), "{10000,10000,5000} true");
    assert_eq!(same("u", "id"), "{50} true");
    // And both derive: every row's URL is queued.
    run("SELECT indexnow_derive()");
    assert_eq!(
        count("SELECT sum(pending)::bigint FROM indexnow_status()"),
        25050
    );
}

/// Recorded saves leave a change set each; a derivation takes the oldest with the next ones of
/// the same table and watches (up to 10,000 keys), and no other table's. `indexnow_derive(n)`
/// derives at most n change sets and says how many.
#[pg_test]
fn small_change_sets_of_one_table_are_derived_together() {
    site();
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("CREATE TABLE other (id int PRIMARY KEY, slug text)");
    run("SELECT indexnow_watch('other', url => 'https://www.example.com/o/{slug}')");
    for i in 1..=30 {
        run(&format!(
            "INSERT INTO pages (slug, status) VALUES ('p{i}', 'published')"
        ));
        if i == 10 {
            run("INSERT INTO other VALUES (1, 'o1')");
        }
    }
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 31);
    assert_eq!(count("SELECT indexnow_derive(30)"), 30);
    // The 30 saves of pages, derived together; the other table's change set, the 11th, waits.
    assert_eq!(
        text("SELECT string_agg(tbl::regclass::text, ',') FROM indexnow_changes").as_deref(),
        Some("other")
    );
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/p%' AND request_seq > settled_seq"),
        30
    );
    // A bulk change set of 10,000 keys is derived alone.
    run("INSERT INTO pages (slug, status) SELECT 'b' || g, 'published' FROM generate_series(1, 10000) g");
    run("INSERT INTO pages (slug, status) VALUES ('after', 'published')");
    assert_eq!(count("SELECT indexnow_derive(2)"), 2);
    assert_eq!(
        count("SELECT count(*) FROM indexnow_changes WHERE tbl = 'pages'::regclass"),
        1
    );
}

/// A table read only as a related table needs no primary key (its foreign key may reference a
/// unique constraint): writing it works, and re-derives the pages that read it.
#[pg_test]
fn a_related_table_without_a_primary_key_can_be_written() {
    run("CREATE TABLE sections (code text UNIQUE NOT NULL, name text)");
    run(
        "CREATE TABLE docs (id int PRIMARY KEY, slug text NOT NULL, \
           section text NOT NULL REFERENCES sections (code))",
    );
    run(
        "SELECT indexnow_watch('docs', url_sql => $$'https://www.example.com/' || \
           (SELECT s.name FROM sections s WHERE s.code = section) || '/' || slug$$, \
           related => '{sections}')",
    );
    run("INSERT INTO sections VALUES ('a', 'alpha')");
    run("INSERT INTO docs VALUES (1, 'one', 'a')");
    pushed();
    run("UPDATE sections SET name = 'beta'");
    assert_eq!(
        pending(),
        "https://www.example.com/alpha/one moved\nhttps://www.example.com/beta/one created"
    );
}

/// A related table whose path to the watched rows can no longer be planned (its foreign key
/// dropped) is still followed: a write of it records the watch's whole table, whose derivation
/// finds the rows that changed.
#[pg_test]
fn a_related_table_whose_foreign_key_is_dropped_records_the_whole_table() {
    run("CREATE TABLE sections (code text PRIMARY KEY, name text)");
    run(
        "CREATE TABLE docs (id int PRIMARY KEY, slug text NOT NULL, \
           section text NOT NULL CONSTRAINT docs_section REFERENCES sections (code))",
    );
    run(
        "SELECT indexnow_watch('docs', url_sql => $$'https://www.example.com/' || \
           (SELECT s.name FROM sections s WHERE s.code = section) || '/' || slug$$, \
           related => '{sections}')",
    );
    run("INSERT INTO sections VALUES ('a', 'alpha'), ('b', 'other')");
    run("INSERT INTO docs VALUES (1, 'one', 'a')");
    pushed();
    run("ALTER TABLE docs DROP CONSTRAINT docs_section");
    // (the ALTER derives docs whole itself: its watch could not be made the same again)
    derive();
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("UPDATE sections SET name = 'beta' WHERE code = 'a'");
    assert_eq!(
        text(
            "SELECT string_agg(c.tbl::regclass::text || ' ' || coalesce(c.keys::text, 'every row'), \
                    ', ' ORDER BY c.id) FROM indexnow_changes c"
        )
        .as_deref(),
        Some("docs every row")
    );
    assert_eq!(
        pending(),
        "https://www.example.com/alpha/one moved\nhttps://www.example.com/beta/one created"
    );
}

/// A per-backend cache entry (what the trigger knows of a table, a watch's generated statements)
/// is kept only when nothing may have made it stale while it was built: no invalidation arrived
/// meanwhile, and it was read at READ COMMITTED, whose snapshot is as new as the invalidations
/// heard.
#[pg_test]
fn a_cache_entry_is_kept_only_when_read_fresh() {
    use crate::invalidation;
    run("CREATE TABLE altered (id int PRIMARY KEY)");
    invalidation::listen(|_| {});
    assert!(invalidation::built(|| ()).1, "nothing happened: kept");
    assert!(
        !invalidation::built(|| run("ALTER TABLE altered ADD COLUMN body text")).1,
        "a table altered while it was built: not kept"
    );
    // SAFETY: this backend's isolation level, set for one call and put back.
    let kept = unsafe {
        let was = pg_sys::XactIsoLevel;
        pg_sys::XactIsoLevel = pg_sys::XACT_REPEATABLE_READ as i32;
        let kept = invalidation::built(|| ()).1;
        pg_sys::XactIsoLevel = was;
        kept
    };
    assert!(!kept, "read at REPEATABLE READ: not kept");
}

/// Two tables whose keys have one name and other types (read by SQL, not in Rust): the
/// statements over their transition tables have the same text, and a plan kept for one must not
/// read the other's rows (each table's kept plans carry its tag, `super::cache`). Both ways: keys
/// recorded, and derived in the statement.
#[pg_test]
fn same_named_keys_of_other_types_keep_their_own_plans() {
    // Both key types take the SQL route (were one read in Rust, this would prove nothing).
    for type_oid in [pg_sys::UUIDOID, pg_sys::DATEOID] {
        assert!(crate::capture::cache::key_kind(type_oid).is_none());
    }
    run("CREATE TABLE by_uuid (k uuid PRIMARY KEY, slug text)");
    run("CREATE TABLE by_date (k date PRIMARY KEY, slug text)");
    run("SELECT indexnow_watch('by_uuid', url => 'https://www.example.com/u/{k}')");
    run("SELECT indexnow_watch('by_date', url => 'https://www.example.com/d/{k}')");
    let insert = |rows: std::ops::RangeInclusive<i32>| {
        for i in rows {
            run(&format!(
                "INSERT INTO by_uuid VALUES ('00000000-0000-0000-0000-00000000000{i}', 'u')"
            ));
            run(&format!("INSERT INTO by_date VALUES ('2026-01-0{i}', 'd')"));
        }
    };
    run("SET LOCAL indexnow.derive_at_write = 0");
    insert(1..=3);
    assert_eq!(
        text(
            "SELECT string_agg(c.tbl::regclass::text || ' ' || (c.keys ->> 0), ', ' ORDER BY c.id) \
               FROM indexnow_changes c"
        )
        .as_deref(),
        Some(
            "by_uuid [\"00000000-0000-0000-0000-000000000001\"], by_date [\"2026-01-01\"], \
             by_uuid [\"00000000-0000-0000-0000-000000000002\"], by_date [\"2026-01-02\"], \
             by_uuid [\"00000000-0000-0000-0000-000000000003\"], by_date [\"2026-01-03\"]"
        )
    );
    run("SELECT indexnow_derive(100)");
    run("SET LOCAL indexnow.derive_at_write = 100");
    insert(4..=6);
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
    assert_eq!(
        text("SELECT string_agg(url, ' ' ORDER BY url) FROM indexnow_urls").as_deref(),
        Some(
            (1..=6)
                .map(|i| format!("https://www.example.com/d/2026-01-0{i}"))
                .chain((1..=6).map(|i| {
                    format!("https://www.example.com/u/00000000-0000-0000-0000-00000000000{i}")
                }))
                .collect::<Vec<_>>()
                .join(" ")
                .as_str()
        )
    );
}

/// A key's type changed by `ALTER TABLE` (read by SQL, not in Rust): the statement kept over the
/// table's transition tables was planned for the old type, and must not read the new values as
/// that type. PostgreSQL replans it (a transition table carries its table's OID into the plan);
/// this holds it to that.
#[pg_test]
fn a_key_of_another_type_after_alter_table_is_recorded_as_written() {
    assert!(crate::capture::cache::key_kind(pg_sys::DATEOID).is_none());
    run("CREATE TABLE by_day (k date PRIMARY KEY, slug text)");
    run("SELECT indexnow_watch('by_day', url => 'https://www.example.com/d/{slug}')");
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("SET LOCAL TimeZone = 'UTC'");
    run("INSERT INTO by_day VALUES ('2026-01-01', 'a')");
    run("ALTER TABLE by_day ALTER COLUMN k TYPE timestamptz");
    run("INSERT INTO by_day VALUES ('2026-01-02 03:04:05+00', 'b')");
    assert_eq!(
        text("SELECT string_agg(c.keys::text, ', ' ORDER BY c.id) FROM indexnow_changes c")
            .as_deref(),
        Some("[[\"2026-01-01\"]], [[\"2026-01-02T03:04:05+00:00\"]]")
    );
    assert_eq!(
        pending(),
        "https://www.example.com/d/a created\nhttps://www.example.com/d/b created"
    );
}

/// The keys of a change set must be a JSON array of keys: anything else is refused with an error
/// that says so, not recorded.
#[pg_test(error = "indexnow: the keys of a change set are not a JSON array: {\"k\":1}")]
fn change_set_keys_that_are_not_an_array_are_refused() {
    run("CREATE TABLE by_one (k int PRIMARY KEY, slug text)");
    let oid = count("SELECT 'by_one'::regclass::oid::bigint") as u32;
    crate::derive::change_sets::record_keys(
        "public",
        pg_sys::Oid::from(oid),
        None,
        serde_json::json!({"k": 1}),
    );
}

/// A page edited in place (its URL the same) is derived by the small statement
/// (`statements::edited_in_place`), with what the whole derivation would queue and keep; a save
/// that is anything else (a new page, a slug change, an unpublish) is left to the whole
/// derivation.
#[pg_test]
fn a_page_edited_in_place_takes_the_small_statement() {
    use std::sync::atomic::Ordering::Relaxed;
    let taken = || crate::derive::EDITED_IN_PLACE.load(Relaxed);
    let source = |what: &str| {
        text(&format!(
            "SELECT {what} FROM indexnow_sources \
              WHERE url_hash = (SELECT url_hash FROM indexnow_urls \
                                 WHERE url = 'https://www.example.com/th/a')"
        ))
    };
    // (a save derived in its statement)
    run("SET LOCAL indexnow.derive_at_write = 100");
    site();
    let start = taken();
    run("INSERT INTO pages (slug, title, status) VALUES ('a', 'A', 'published')");
    assert_eq!(taken(), start);
    assert_eq!(pending(), "https://www.example.com/th/a created");
    pushed();
    let (since, fingerprint) = (source("since::text"), source("fingerprint64::text"));

    run("UPDATE pages SET body = 'new' WHERE slug = 'a'");
    assert_eq!(taken(), start + 1);
    assert_eq!(pending(), "https://www.example.com/th/a changed");
    assert_eq!(source("since::text"), since);
    assert_ne!(source("fingerprint64::text"), fingerprint);
    // A live page moved into the future is no edit in place: it is withdrawn until its new
    // time (its removal now; its source woken then, spec behaviour 23), and back when its time
    // is taken away again.
    run("UPDATE pages SET published_at = now() + interval '1 day' WHERE slug = 'a'");
    assert_eq!(taken(), start + 1);
    assert_eq!(pending(), "https://www.example.com/th/a unpublished");
    assert_eq!(source("withdrawn::text").as_deref(), Some("true"));
    assert_eq!(
        source("(wake_at > now() + interval '23 hours')::text").as_deref(),
        Some("true")
    );
    run("UPDATE pages SET published_at = NULL WHERE slug = 'a'");
    assert_eq!(pending(), "https://www.example.com/th/a changed");
    assert_eq!(source("withdrawn::text").as_deref(), Some("false"));
    assert_eq!(source("wake_at::text").as_deref(), None);
    pushed();

    // A slug change and an unpublish are not edits in place.
    run("UPDATE pages SET slug = 'b' WHERE slug = 'a'");
    assert_eq!(
        pending(),
        "https://www.example.com/th/a moved\nhttps://www.example.com/th/b created"
    );
    pushed();
    run("UPDATE pages SET status = 'draft' WHERE slug = 'b'");
    assert_eq!(pending(), "https://www.example.com/th/b unpublished");
    assert_eq!(taken(), start + 1);
}

/// A URL search engines know as live keeps its removal owed when another row starts giving it:
/// a new key (an UPDATE of the primary key), a second row, a page moved to another watched
/// table, a page of the watch's baseline republished or renamed back. Each removal below was
/// cancelled unsent when the new row's `since` was taken as now.
#[pg_test]
fn a_known_url_given_by_another_row_is_still_removed() {
    let url = |slug: &str| format!("https://www.example.com/{slug}");
    run("CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, status text DEFAULT 'pub')");
    run("CREATE TABLE legacy (id int PRIMARY KEY, slug text NOT NULL)");
    // Known from the watch's baseline: never pushed by indexnow, taken as known to search engines.
    run("INSERT INTO pages VALUES (1, 'base'), (2, 'back')");
    run("INSERT INTO legacy VALUES (1, 'old')");
    run(
        "SELECT indexnow_watch('pages', url => 'https://www.example.com/{slug}', \
           visible => $$status = 'pub'$$)",
    );
    run("SELECT indexnow_watch('legacy', url => 'https://www.example.com/{slug}')");
    assert_eq!(pending(), "");

    // A baseline page unpublished, republished before the removal went out, then deleted.
    run("UPDATE pages SET status = 'draft' WHERE id = 1");
    run("UPDATE pages SET status = 'pub' WHERE id = 1");
    run("DELETE FROM pages WHERE id = 1");
    assert_eq!(pending(), format!("{} deleted", url("base")));
    pushed();
    // A baseline page renamed and back, then renamed for good.
    run("UPDATE pages SET slug = 'away' WHERE id = 2");
    run("UPDATE pages SET slug = 'back' WHERE id = 2");
    run("UPDATE pages SET slug = 'gone' WHERE id = 2");
    assert_eq!(
        pending(),
        format!("{} moved\n{} created", url("back"), url("gone"))
    );
    pushed();
    // A page moved from one watched table to another, then deleted there.
    run("INSERT INTO pages VALUES (3, 'old')");
    run("DELETE FROM legacy WHERE id = 1");
    assert_eq!(pending(), format!("{} changed", url("old")));
    run("DELETE FROM pages WHERE id = 3");
    assert_eq!(pending(), format!("{} deleted", url("old")));
    pushed();
    // A pushed page whose key changes, then deleted.
    run("INSERT INTO pages VALUES (4, 'keyed')");
    pushed();
    run("UPDATE pages SET id = 40 WHERE id = 4");
    run("DELETE FROM pages WHERE id = 40");
    assert_eq!(pending(), format!("{} deleted", url("keyed")));
    pushed();
    // A pushed page given by a second row too; both deleted in turn.
    run("INSERT INTO pages VALUES (5, 'twice')");
    pushed();
    run("INSERT INTO pages VALUES (6, 'twice')");
    run("DELETE FROM pages WHERE id = 5");
    run("DELETE FROM pages WHERE id = 6");
    assert_eq!(pending(), format!("{} deleted", url("twice")));
}

/// A URL whose request was tried and never answered (a timeout, a killed worker, a 5xx: it may
/// have arrived) may be known to search engines: a row that gives it next, under a new key (an
/// ORM's delete and insert), owes its removal. It was cancelled, the new row's `since` taken as
/// now. A URL whose last accepted push was its removal is new again: no removal is owed for it.
#[pg_test]
fn a_url_tried_without_an_answer_and_given_by_another_row_is_still_removed() {
    run("CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL)");
    run("SELECT indexnow_watch('pages', url => 'https://www.example.com/{slug}')");
    // Tried, no answer: the request stays pending, as a worker leaves it.
    let tried = || run("UPDATE indexnow_urls SET tried_at = clock_timestamp()");
    // (each statement derived before the next, as a worker soon after each commit)
    let write = |sql: &str| {
        run(sql);
        derive();
    };
    write("INSERT INTO pages VALUES (1, 'tried')");
    tried();
    write("UPDATE pages SET id = 2 WHERE id = 1");
    write("DELETE FROM pages WHERE id = 2");
    assert_eq!(pending(), "https://www.example.com/tried deleted");
    // Its removal accepted: the URL is gone for search engines. Given again, by a new key too,
    // and gone before it was told: nothing to send.
    pushed();
    write("INSERT INTO pages VALUES (3, 'tried')");
    write("UPDATE pages SET id = 4 WHERE id = 3");
    write("DELETE FROM pages WHERE id = 4");
    assert_eq!(pending(), "");
    // Given again and tried, then taken over by a new key and gone: the removal is owed.
    write("INSERT INTO pages VALUES (5, 'tried')");
    tried();
    write("UPDATE pages SET id = 6 WHERE id = 5");
    write("DELETE FROM pages WHERE id = 6");
    assert_eq!(pending(), "https://www.example.com/tried deleted");
}

/// An ignored column that the watch's `visible` or `url_sql` reads is no content change, but a
/// change to it can hide the page or move its URL: the UPDATE gate compares it all the same, and
/// the derivation decides (it compares the URL and visibility whatever the fingerprint says).
#[pg_test]
fn an_ignored_column_the_expressions_read_still_moves_and_hides() {
    run(
        "CREATE TABLE pages (id int PRIMARY KEY, slug text, noindex boolean DEFAULT false, \
           sort int DEFAULT 0, hits int DEFAULT 0)",
    );
    run("INSERT INTO pages (id, slug) VALUES (1, 'a'), (2, 'b')");
    run(
        "SELECT indexnow_watch('pages', \
           url_sql => $$'https://www.example.com/' || slug || \
                       CASE WHEN (SELECT sort > 5) THEN '-x' ELSE '' END$$, \
           visible => 'NOT noindex', ignore => '{noindex,sort,hits}')",
    );
    // The gate skips only the column no expression reads.
    assert_eq!(
        text("SELECT ignore::text || ' ' || expression_columns::text FROM indexnow_watches")
            .as_deref(),
        Some("{noindex,sort,hits} {noindex,slug,sort}")
    );
    run("UPDATE pages SET hits = 1");
    assert_eq!(pending(), "");
    run("UPDATE pages SET noindex = true WHERE id = 1");
    assert_eq!(pending(), "https://www.example.com/a unpublished");
    run("UPDATE pages SET sort = 10 WHERE id = 2");
    assert_eq!(
        pending(),
        "https://www.example.com/a unpublished\nhttps://www.example.com/b moved\n\
         https://www.example.com/b-x created"
    );
}

/// After an `ALTER TABLE` the watch is made again for the table as it is: a column added counts
/// as content (a change to it is announced; added with a default, every page changed), a column
/// the watch does not name can be renamed or dropped, and the table renamed or moved, without
/// breaking it — its related tables' queries included.
#[pg_test]
fn a_watch_follows_alter_table() {
    run("CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, body text, extra text)");
    run("INSERT INTO pages VALUES (1, 'a', 'x', 'e'), (2, 'b', 'y', 'e')");
    run("SELECT indexnow_watch('pages', url => 'https://www.example.com/{slug}')");
    pushed();
    run("ALTER TABLE pages ADD COLUMN summary text");
    assert_eq!(pending(), "");
    run("UPDATE pages SET summary = 's' WHERE id = 1");
    assert_eq!(pending(), "https://www.example.com/a changed");
    pushed();
    // A column added with a default announces nothing by itself (the fingerprints follow it).
    run("ALTER TABLE pages ADD COLUMN lang text NOT NULL DEFAULT 'th'");
    assert_eq!(pending(), "");
    run("UPDATE pages SET lang = 'en' WHERE id = 2");
    assert_eq!(pending(), "https://www.example.com/b changed");
    pushed();
    // (A column renamed or dropped changes what the fingerprint is made of: every page changed.)
    run("ALTER TABLE pages RENAME COLUMN body TO content");
    run("ALTER TABLE pages DROP COLUMN extra");
    assert_eq!(
        pending(),
        "https://www.example.com/a changed\nhttps://www.example.com/b changed"
    );
    pushed();
    run("UPDATE pages SET content = 'z' WHERE id = 1");
    assert_eq!(pending(), "https://www.example.com/a changed");
    pushed();
    // The table renamed and moved to another schema.
    run("CREATE SCHEMA site");
    run("ALTER TABLE pages RENAME TO articles");
    run("ALTER TABLE articles SET SCHEMA site");
    run("UPDATE site.articles SET content = 'v' WHERE id = 1");
    assert_eq!(pending(), "https://www.example.com/a changed");
    run("ALTER TABLE site.articles SET SCHEMA public");
    run("ALTER TABLE articles RENAME TO pages");
    pushed();
    // A column the URL names, renamed: the template follows (its fingerprint's names changed:
    // every page changed, as above).
    run("ALTER TABLE pages RENAME COLUMN slug TO path");
    assert_eq!(
        text("SELECT pattern FROM indexnow_watches"),
        Some("https://www.example.com/{path}".into())
    );
    assert_eq!(
        pending(),
        "https://www.example.com/a changed\nhttps://www.example.com/b changed"
    );
    pushed();
    run("UPDATE pages SET content = 'w' WHERE id = 2");
    assert_eq!(pending(), "https://www.example.com/b changed");
}

/// A watched table renamed: its related table's writes still find the dependent pages (their
/// query, which names the watched table, is planned again).
#[pg_test]
fn a_renamed_table_keeps_its_related_tables_followed() {
    run("CREATE TABLE sections (id int PRIMARY KEY, slug text NOT NULL)");
    run(
        "CREATE TABLE docs (id int PRIMARY KEY, slug text NOT NULL, \
           section int NOT NULL REFERENCES sections)",
    );
    run(
        "SELECT indexnow_watch('docs', url_sql => $$'https://www.example.com/' || \
           (SELECT s.slug FROM sections s WHERE s.id = section) || '/' || slug$$, \
           related => '{sections}')",
    );
    run("INSERT INTO sections VALUES (1, 'news')");
    run("INSERT INTO docs VALUES (1, 'one', 1)");
    pushed();
    run("ALTER TABLE docs RENAME TO articles");
    run("UPDATE sections SET slug = 'sport'");
    assert_eq!(
        pending(),
        "https://www.example.com/news/one moved\nhttps://www.example.com/sport/one created"
    );
}

/// An expression that reads the whole row (a function of `r`) reads columns no dependency
/// record names: then no ignored column is skipped by the UPDATE gate.
#[pg_test]
fn an_expression_over_the_whole_row_keeps_every_column_compared() {
    run("CREATE TABLE pages (id int PRIMARY KEY, slug text, noindex boolean DEFAULT false)");
    run(
        "CREATE FUNCTION page_is_public(p pages) RETURNS boolean LANGUAGE sql \
           AS $$ SELECT NOT p.noindex $$",
    );
    run("INSERT INTO pages (id, slug) VALUES (1, 'a')");
    run(
        "SELECT indexnow_watch('pages', url => 'https://www.example.com/{slug}', \
           visible => 'page_is_public(r)', ignore => '{noindex}')",
    );
    assert_eq!(
        text("SELECT coalesce(expression_columns::text, 'unknown') FROM indexnow_watches")
            .as_deref(),
        Some("unknown")
    );
    run("UPDATE pages SET noindex = true");
    assert_eq!(pending(), "https://www.example.com/a unpublished");
}

/// A schema renamed under a watched table (or under a table a watch reads): the watch follows,
/// as it follows the table's own rename.
#[pg_test]
fn a_watch_follows_its_schema_renamed() {
    run("CREATE SCHEMA blog");
    run("CREATE SCHEMA lookup");
    run("CREATE TABLE lookup.groups (id int PRIMARY KEY, slug text NOT NULL)");
    run(
        "CREATE TABLE lookup.sections (id int PRIMARY KEY, slug text NOT NULL, \
           grp int NOT NULL REFERENCES lookup.groups)",
    );
    run(
        "CREATE TABLE blog.posts (id int PRIMARY KEY, slug text NOT NULL, body text, \
           section int NOT NULL REFERENCES lookup.sections)",
    );
    // A function with an SQL-standard body names its tables by oid: it survives the rename.
    run(
        "CREATE FUNCTION section_path(section int) RETURNS text LANGUAGE sql STABLE \
           BEGIN ATOMIC SELECT g.slug || '/' || s.slug FROM lookup.sections s \
             JOIN lookup.groups g ON g.id = s.grp WHERE s.id = section; END",
    );
    run("INSERT INTO lookup.groups VALUES (1, 'world')");
    run("INSERT INTO lookup.sections VALUES (1, 'news', 1)");
    run("INSERT INTO blog.posts VALUES (1, 'one', 'x', 1)");
    run(
        "SELECT indexnow_watch('blog.posts', \
           url_sql => $$'https://www.example.com/' || section_path(section) || '/' || slug$$, \
           related => '{lookup.sections,lookup.groups}')",
    );
    pushed();
    run("ALTER SCHEMA blog RENAME TO site");
    run("UPDATE site.posts SET body = 'y'");
    assert_eq!(pending(), "https://www.example.com/world/news/one changed");
    pushed();
    // The path from a written group to its posts joins the sections, by name.
    run("ALTER SCHEMA lookup RENAME TO shared");
    run("UPDATE shared.groups SET slug = 'sport'");
    assert_eq!(
        pending(),
        "https://www.example.com/sport/news/one created\n\
         https://www.example.com/world/news/one moved"
    );
    pushed();
    run("DELETE FROM site.posts");
    assert_eq!(pending(), "https://www.example.com/sport/news/one deleted");
}

/// groups <- sections <- posts, the posts' URL built from both through a function that names
/// its tables by oid; watched with both as related tables, announced.
fn sections_site() {
    run("CREATE TABLE groups (id int PRIMARY KEY, slug text NOT NULL)");
    run(
        "CREATE TABLE sections (id int PRIMARY KEY, slug text NOT NULL, \
           grp int NOT NULL REFERENCES groups)",
    );
    run(
        "CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, \
           section int NOT NULL REFERENCES sections)",
    );
    run(
        "CREATE FUNCTION section_path(section int) RETURNS text LANGUAGE sql STABLE \
           BEGIN ATOMIC SELECT g.slug || '/' || s.slug FROM sections s \
             JOIN groups g ON g.id = s.grp WHERE s.id = section; END",
    );
    run("INSERT INTO groups VALUES (1, 'world')");
    run("INSERT INTO sections VALUES (1, 'news', 1)");
    run("INSERT INTO posts VALUES (1, 'one', 1)");
    run(
        "SELECT indexnow_watch('posts', \
           url_sql => $$'https://www.example.com/' || section_path(section) || '/' || slug$$, \
           related => '{sections,groups}')",
    );
    pushed();
}

/// A related table renamed: the path from a written group to its posts joins the sections by
/// name, and follows the rename as the watched table's own rename is followed.
#[pg_test]
fn a_watch_follows_a_related_table_renamed() {
    sections_site();
    run("ALTER TABLE sections RENAME TO topics");
    assert_eq!(pending(), "");
    run("UPDATE groups SET slug = 'sport'");
    // Found through the renamed table: the post's key recorded for its watch.
    assert_eq!(
        text("SELECT string_agg(keys::text, ',') FROM indexnow_changes WHERE tbl = 'posts'::regclass"),
        Some("[[1]]".into())
    );
    assert_eq!(
        pending(),
        "https://www.example.com/sport/news/one created\n\
         https://www.example.com/world/news/one moved"
    );
    pushed();
    // An ALTER that rewrites a related table's values fires no trigger: the watch derives again.
    // (A body kept as text, which does not pin the column's type.)
    run(
        "CREATE OR REPLACE FUNCTION section_path(section int) RETURNS text LANGUAGE sql STABLE \
           AS $$SELECT g.slug || '/' || s.slug FROM topics s \
                 JOIN groups g ON g.id = s.grp WHERE s.id = section$$",
    );
    run("ALTER TABLE groups ALTER COLUMN slug TYPE varchar USING upper(slug)");
    assert_eq!(
        pending(),
        "https://www.example.com/SPORT/news/one created\n\
         https://www.example.com/sport/news/one moved"
    );
}

/// A related table's write whose watched rows cannot be found (here a table of the path renamed
/// where the event trigger does not fire) succeeds, and the watch derives every row instead.
#[pg_test]
fn a_related_write_whose_path_is_broken_succeeds_and_loses_nothing() {
    sections_site();
    run("SET session_replication_role = replica");
    run("ALTER TABLE sections RENAME TO topics");
    run("RESET session_replication_role");
    run("UPDATE groups SET slug = 'sport'");
    assert_eq!(
        pending(),
        "https://www.example.com/sport/news/one created\n\
         https://www.example.com/world/news/one moved"
    );
}

/// A tree of pages (a page's URL is its ancestors' slugs and its own; it is public when it and
/// every ancestor are published), watched with the table itself as related: a change to a page
/// re-derives every page below it.
fn page_tree() {
    run(
        "CREATE TABLE tree (id int PRIMARY KEY, parent int REFERENCES tree ON DELETE CASCADE, \
           slug text NOT NULL, published boolean NOT NULL DEFAULT true, views int DEFAULT 0)",
    );
    run(
        "CREATE FUNCTION tree_path(page int) RETURNS text LANGUAGE sql STABLE BEGIN ATOMIC \
           WITH RECURSIVE up(id, parent, slug, depth) AS ( \
             SELECT id, parent, slug, 0 FROM tree WHERE id = page \
             UNION ALL SELECT t.id, t.parent, t.slug, up.depth + 1 FROM tree t JOIN up ON t.id = up.parent) \
             CYCLE id SET looped USING visited \
           SELECT string_agg(slug, '/' ORDER BY depth DESC) FROM up WHERE NOT looped; END",
    );
    run(
        "CREATE FUNCTION tree_public(page int) RETURNS boolean LANGUAGE sql STABLE BEGIN ATOMIC \
           WITH RECURSIVE up(id, parent, published) AS ( \
             SELECT id, parent, published FROM tree WHERE id = page \
             UNION ALL SELECT t.id, t.parent, t.published FROM tree t JOIN up ON t.id = up.parent) \
             CYCLE id SET looped USING visited \
           SELECT bool_and(published) FROM up WHERE NOT looped; END",
    );
    run(
        "INSERT INTO tree (id, parent, slug) VALUES (1, NULL, 'docs'), (2, 1, 'guide'), \
           (3, 2, 'install'), (4, 2, 'usage'), (5, 1, 'faq')",
    );
    run(
        "SELECT indexnow_watch('tree', url_sql => $$'https://www.example.com/' || tree_path(id)$$, \
           visible => 'tree_public(id)', ignore => '{views}', related => '{tree}')",
    );
    pushed();
}

#[pg_test]
fn a_page_tree_moves_and_hides_the_pages_below_a_changed_page() {
    page_tree();
    run("UPDATE tree SET slug = 'manual' WHERE id = 2");
    assert_eq!(
        pending(),
        "https://www.example.com/docs/guide moved\n\
         https://www.example.com/docs/guide/install moved\n\
         https://www.example.com/docs/guide/usage moved\n\
         https://www.example.com/docs/manual created\n\
         https://www.example.com/docs/manual/install created\n\
         https://www.example.com/docs/manual/usage created"
    );
    pushed();
    // A subtree moved under another page.
    run("UPDATE tree SET parent = 5 WHERE id = 2");
    assert_eq!(
        pending(),
        "https://www.example.com/docs/faq/manual created\n\
         https://www.example.com/docs/faq/manual/install created\n\
         https://www.example.com/docs/faq/manual/usage created\n\
         https://www.example.com/docs/manual moved\n\
         https://www.example.com/docs/manual/install moved\n\
         https://www.example.com/docs/manual/usage moved"
    );
    pushed();
    // Unpublished: the page and every page below it.
    run("UPDATE tree SET published = false WHERE id = 5");
    assert_eq!(
        pending(),
        "https://www.example.com/docs/faq unpublished\n\
         https://www.example.com/docs/faq/manual unpublished\n\
         https://www.example.com/docs/faq/manual/install unpublished\n\
         https://www.example.com/docs/faq/manual/usage unpublished"
    );
    pushed();
    run("UPDATE tree SET published = true WHERE id = 5");
    pushed();
    // A cycle in the data: the search for the pages below ends (and so do the functions).
    run("SET LOCAL statement_timeout = '10s'");
    run("UPDATE tree SET parent = 4 WHERE id = 2");
    run("UPDATE tree SET parent = 5 WHERE id = 2");
    run("RESET statement_timeout");
    pushed();
    // Deleted with its subtree (the cascade), and nothing else.
    run("DELETE FROM tree WHERE id = 2");
    assert_eq!(
        pending(),
        "https://www.example.com/docs/faq/manual deleted\n\
         https://www.example.com/docs/faq/manual/install deleted\n\
         https://www.example.com/docs/faq/manual/usage deleted"
    );
}

#[pg_test]
fn a_page_tree_records_nothing_for_an_ignored_column_of_a_parent() {
    page_tree();
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("UPDATE tree SET views = views + 1 WHERE id = 1");
    assert_eq!(text("SELECT count(*)::text FROM indexnow_changes"), Some("0".into()));
    run("UPDATE tree SET slug = 'doc' WHERE id = 1");
    assert_eq!(
        text("SELECT count(*)::text FROM indexnow_changes"),
        Some("2".into()),
        "the page's own change set and its descendants'"
    );
}

#[pg_test]
#[should_panic(expected = "has no foreign key to itself")]
fn a_table_related_to_itself_needs_a_foreign_key_to_itself() {
    run("CREATE TABLE flat (id int PRIMARY KEY, slug text)");
    run("SELECT indexnow_watch('flat', url => 'https://www.example.com/{slug}', related => '{flat}')");
}

/// A role that owns its table and may watch, for the row-level security tests.
fn rls_owner() {
    run("CREATE ROLE indexnow_test_tenant");
    run("GRANT USAGE, CREATE ON SCHEMA public TO indexnow_test_tenant");
    run("SELECT indexnow_grant_watching('indexnow_test_tenant')");
    run("SET LOCAL ROLE indexnow_test_tenant");
    run("CREATE TABLE public.tenant_pages (id int PRIMARY KEY, tenant int NOT NULL, slug text)");
    run("INSERT INTO tenant_pages VALUES (1, 1, 'one'), (2, 2, 'two')");
    run(
        "CREATE POLICY mine ON tenant_pages \
           USING (tenant::text = current_setting('app.tenant', true))",
    );
}

#[pg_test]
#[should_panic(expected = "row-level security applies to role indexnow_test_tenant")]
fn a_watch_is_refused_where_row_level_security_hides_rows_from_its_maker() {
    rls_owner();
    run("ALTER TABLE tenant_pages ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY");
    run("SELECT indexnow_watch('tenant_pages', url => 'https://www.example.com/{slug}')");
}

/// Row-level security forced on a watched table later: a row the maker cannot see is not taken
/// as deleted (its derivation fails, with a WARNING) when the change is derived by a session
/// the policy hides it from (as the workers are).
#[pg_test]
fn row_level_security_added_later_queues_no_removal_of_a_live_page() {
    rls_owner();
    run("SELECT indexnow_watch('tenant_pages', url => 'https://www.example.com/{slug}')");
    run("ALTER TABLE tenant_pages ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY");
    run("RESET ROLE");
    pushed();
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("SET LOCAL ROLE indexnow_test_tenant");
    run("SET LOCAL app.tenant = '1'");
    run("UPDATE tenant_pages SET slug = 'one-b' WHERE id = 1");
    run("RESET ROLE");
    run("SET LOCAL app.tenant = ''");
    // Both pages stay as search engines know them: live (the edit waits for the watch to be
    // mended; the WARNINGs say so).
    assert_eq!(
        queue(),
        "https://www.example.com/one created 0\n\
         https://www.example.com/two created 0"
    );
    // Mended (the policy no longer applies to the maker, the table's owner): the edit that
    // waited is derived.
    run("ALTER TABLE tenant_pages NO FORCE ROW LEVEL SECURITY");
    assert_eq!(
        pending(),
        "https://www.example.com/one moved\n\
         https://www.example.com/one-b created"
    );
}

/// The maker of a watch lost a privilege on its related table for a while: the writes in between
/// succeed, their changes are kept (one whole-table derivation owed, however many writes), and
/// derived once the privilege is back.
#[pg_test]
fn changes_made_while_a_watch_cannot_read_are_derived_once_it_can() {
    run("CREATE ROLE indexnow_test_lender");
    run("GRANT USAGE, CREATE ON SCHEMA public TO indexnow_test_lender");
    run("SELECT indexnow_grant_watching('indexnow_test_lender')");
    run("CREATE TABLE shelves (id int PRIMARY KEY, slug text NOT NULL)");
    run(
        "CREATE TABLE shelved (id int PRIMARY KEY, shelf int REFERENCES shelves, \
           slug text NOT NULL)",
    );
    run("ALTER TABLE shelved OWNER TO indexnow_test_lender");
    run("GRANT SELECT, TRIGGER ON shelves TO indexnow_test_lender");
    run("INSERT INTO shelves VALUES (1, 'x')");
    run("INSERT INTO shelved VALUES (1, 1, 'p')");
    run("SET LOCAL ROLE indexnow_test_lender");
    run(
        "SELECT indexnow_watch('shelved', url_sql => $$'https://www.example.com/' || \
           (SELECT s.slug FROM shelves s WHERE s.id = shelf) || '/' || slug$$, \
           related => '{shelves}')",
    );
    run("RESET ROLE");
    pushed();
    run("REVOKE SELECT ON shelves FROM indexnow_test_lender");
    run("UPDATE shelves SET slug = 'y'");
    run("UPDATE shelved SET slug = 'q' WHERE id = 1");
    run("INSERT INTO shelved VALUES (2, 1, 'r')");
    assert_eq!(pending(), "");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 1);
    // Monitoring sees that changes wait (the same in every row).
    assert_eq!(
        count("SELECT count(*) FROM indexnow_status() WHERE oldest_change_age IS NOT NULL"),
        count("SELECT count(*) FROM indexnow_status()")
    );
    run("GRANT SELECT ON shelves TO indexnow_test_lender");
    assert_eq!(
        pending(),
        "https://www.example.com/x/p moved\n\
         https://www.example.com/y/q created\n\
         https://www.example.com/y/r created"
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
    assert_eq!(
        count("SELECT count(*) FROM indexnow_status() WHERE oldest_change_age IS NOT NULL"),
        0
    );
}

#[pg_test]
#[should_panic(expected = "is a temporary table")]
fn a_temporary_table_is_refused() {
    run("CREATE TEMPORARY TABLE scratch (id int PRIMARY KEY, slug text)");
    run("SELECT indexnow_watch('scratch', url => 'https://www.example.com/{slug}')");
}

/// A related table may have any name, `k` included: the statements' own names do not hide it
/// from the watch's expressions.
#[pg_test]
fn a_related_table_named_like_an_internal_name_is_read() {
    run("CREATE TABLE k (id int PRIMARY KEY, slug text NOT NULL)");
    run("INSERT INTO k VALUES (1, 'news')");
    run("CREATE TABLE kposts (id int PRIMARY KEY, kid int REFERENCES k, slug text)");
    run("INSERT INTO kposts VALUES (1, 1, 'p1')");
    run(
        "SELECT indexnow_watch('kposts', url_sql => $$'https://www.example.com/' || \
           (SELECT slug FROM k WHERE id = kid) || '/' || slug$$, related => '{k}')",
    );
    pushed();
    run("UPDATE kposts SET slug = 'p2'");
    assert_eq!(
        pending(),
        "https://www.example.com/news/p1 moved\n\
         https://www.example.com/news/p2 created"
    );
}

/// A watched table dropped: the pages search engines were told of are removed, the rest
/// cancelled, and its watch ends; a table made again under the same name is watched anew and
/// its removals are owed as any table's.
#[pg_test]
fn a_dropped_watched_table_queues_the_removals_of_its_pages() {
    run("CREATE TABLE gone_pages (id int PRIMARY KEY, slug text NOT NULL)");
    run("INSERT INTO gone_pages VALUES (1, 'a'), (2, 'b')");
    run("SELECT indexnow_watch('gone_pages', url => 'https://www.example.com/{slug}')");
    run("INSERT INTO gone_pages VALUES (3, 'c')");
    pushed();
    run("INSERT INTO gone_pages VALUES (4, 'never-sent')");
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("UPDATE gone_pages SET slug = 'b2' WHERE id = 2");
    run("RESET indexnow.derive_at_write");
    run("DROP TABLE gone_pages");
    assert_eq!(
        pending(),
        "https://www.example.com/a deleted\n\
         https://www.example.com/b deleted\n\
         https://www.example.com/c deleted"
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_watches"), 0);
    assert_eq!(count("SELECT count(*) FROM indexnow_sources"), 0);
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
    pushed();
    run("CREATE TABLE gone_pages (id int PRIMARY KEY, slug text NOT NULL)");
    run("SELECT indexnow_watch('gone_pages', url => 'https://www.example.com/{slug}')");
    run("INSERT INTO gone_pages VALUES (1, 'a')");
    pushed();
    run("DELETE FROM gone_pages");
    assert_eq!(pending(), "https://www.example.com/a deleted");
}

/// A related table dropped (with CASCADE, its foreign keys go too): the watch that read it is
/// told, keeps its pages, and can be ended.
#[pg_test]
fn a_dropped_related_table_leaves_a_watch_that_can_be_mended_or_ended() {
    run("CREATE TABLE cats (id int PRIMARY KEY, slug text NOT NULL)");
    run("CREATE TABLE cat_posts (id int PRIMARY KEY, cat int REFERENCES cats, slug text)");
    run("INSERT INTO cats VALUES (1, 'news')");
    run("INSERT INTO cat_posts VALUES (1, 1, 'p1')");
    run(
        "SELECT indexnow_watch('cat_posts', url_sql => $$'https://www.example.com/' || \
           coalesce((SELECT slug FROM cats WHERE id = cat), 'misc') || '/' || slug$$, \
           related => '{cats}')",
    );
    pushed();
    run("DROP TABLE cats CASCADE");
    assert_eq!(count("SELECT count(*) FROM indexnow_relations"), 0);
    assert_eq!(pending(), "");
    run(
        "SELECT indexnow_unwatch('cat_posts', $$'https://www.example.com/' || \
           coalesce((SELECT slug FROM cats WHERE id = cat), 'misc') || '/' || slug$$)",
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_watches WHERE active"), 0);
}

/// A virtual generated column (PostgreSQL 18) is never stored: an UPDATE of only the ignored
/// columns it is computed from still moves the URL, or hides the page, that it gives.
#[cfg(feature = "pg18")]
#[pg_test]
fn a_virtual_generated_column_follows_the_ignored_columns_it_is_computed_from() {
    run(
        "CREATE TABLE vpages (id int PRIMARY KEY, title text, st text, \
           slug text GENERATED ALWAYS AS (lower(title)) VIRTUAL, \
           pub boolean GENERATED ALWAYS AS (st = 'p') VIRTUAL)",
    );
    run("INSERT INTO vpages (id, title, st) VALUES (1, 'AA', 'p')");
    run(
        "SELECT indexnow_watch('vpages', url => 'https://www.example.com/{slug}', \
           visible => 'pub', ignore => '{title,st}')",
    );
    pushed();
    run("UPDATE vpages SET title = 'BB'");
    assert_eq!(
        pending(),
        "https://www.example.com/aa moved\nhttps://www.example.com/bb created"
    );
    pushed();
    run("UPDATE vpages SET st = 'draft'");
    assert_eq!(pending(), "https://www.example.com/bb unpublished");
}

/// A column the template names, renamed: the template follows (the watch keeps its id, sources
/// and what search engines were told), and so does the ignore list.
#[pg_test]
fn a_template_and_ignore_list_follow_a_column_renamed() {
    run("CREATE TABLE rpages (id int PRIMARY KEY, slug text NOT NULL, views int DEFAULT 0)");
    run("INSERT INTO rpages VALUES (1, 'a'), (2, 'b'), (3, 'c')");
    run(
        "SELECT indexnow_watch('rpages', url => 'https://www.example.com/{slug}', \
           ignore => '{views}')",
    );
    pushed();
    run("ALTER TABLE rpages RENAME COLUMN slug TO path");
    run("ALTER TABLE rpages RENAME COLUMN views TO hits");
    assert_eq!(
        text("SELECT pattern || ' ' || ignore::text FROM indexnow_watches"),
        Some("https://www.example.com/{path} {hits}".into())
    );
    pushed();
    run("UPDATE rpages SET hits = hits + 1");
    assert_eq!(pending(), "");
    run("UPDATE rpages SET path = 'a2' WHERE id = 1");
    run("DELETE FROM rpages WHERE id = 3");
    assert_eq!(
        pending(),
        "https://www.example.com/a moved\n\
         https://www.example.com/a2 created\n\
         https://www.example.com/c deleted"
    );
    run("SELECT indexnow_unwatch('rpages', 'https://www.example.com/{path}')");
}

/// A schema dropped with its watched table (`DROP SCHEMA ... CASCADE`) is a drop of the table.
#[pg_test]
fn a_schema_dropped_with_its_watched_table_queues_the_removals() {
    run("CREATE SCHEMA shop");
    run("CREATE TABLE shop.items (id int PRIMARY KEY, slug text NOT NULL)");
    run("INSERT INTO shop.items VALUES (1, 'kettle')");
    run("SELECT indexnow_watch('shop.items', url => 'https://www.example.com/shop/{slug}')");
    pushed();
    run("DROP SCHEMA shop CASCADE");
    assert_eq!(pending(), "https://www.example.com/shop/kettle deleted");
    assert_eq!(count("SELECT count(*) FROM indexnow_watches"), 0);
}

/// A partition of a watched table dropped on its own, with its schema (`DROP SCHEMA ...
/// CASCADE`) or with its owner's objects (`DROP OWNED BY`): its pages are removed (the table
/// above is derived again after the drop), the other partitions' stay.
#[pg_test]
fn a_dropped_partition_removes_its_pages() {
    run(
        "CREATE TABLE regions (id int, region text, slug text, PRIMARY KEY (id, region)) \
           PARTITION BY LIST (region)",
    );
    run("CREATE SCHEMA archive");
    run("CREATE ROLE region_keeper");
    run("CREATE TABLE regions_th PARTITION OF regions FOR VALUES IN ('th')");
    run("CREATE TABLE regions_en PARTITION OF regions FOR VALUES IN ('en')");
    run("CREATE TABLE archive.regions_old PARTITION OF regions FOR VALUES IN ('old')");
    run("CREATE TABLE regions_fr PARTITION OF regions FOR VALUES IN ('fr')");
    run("ALTER TABLE regions_fr OWNER TO region_keeper");
    run("INSERT INTO regions VALUES (1, 'th', 'a'), (2, 'en', 'b'), (3, 'old', 'c'), (4, 'fr', 'd')");
    run("SELECT indexnow_watch('regions', url => 'https://www.example.com/{region}/{slug}')");
    pushed();
    run("DROP TABLE regions_en");
    assert_eq!(pending(), "https://www.example.com/en/b deleted");
    pushed();
    run("DROP SCHEMA archive CASCADE");
    assert_eq!(pending(), "https://www.example.com/old/c deleted");
    pushed();
    run("DROP OWNED BY region_keeper");
    assert_eq!(pending(), "https://www.example.com/fr/d deleted");
    run("DROP ROLE region_keeper");
}

/// A tree dropped (the table is its own related table), and a watched table dropped together
/// with its related table in one statement: both followed.
#[pg_test]
fn a_dropped_tree_and_a_table_dropped_with_its_related_table_queue_their_removals() {
    page_tree();
    run("CREATE TABLE shelf (id int PRIMARY KEY, slug text NOT NULL)");
    run("CREATE TABLE books (id int PRIMARY KEY, shelf int REFERENCES shelf, slug text NOT NULL)");
    run("INSERT INTO shelf VALUES (1, 's')");
    run("INSERT INTO books VALUES (1, 1, 'b')");
    run(
        "SELECT indexnow_watch('books', url => 'https://www.example.com/books/{slug}', \
           related => '{shelf}')",
    );
    pushed();
    run("DROP TABLE tree CASCADE"); // (with the functions that read it)
    run("DROP TABLE books, shelf");
    assert_eq!(
        pending(),
        "https://www.example.com/books/b deleted\n\
         https://www.example.com/docs deleted\n\
         https://www.example.com/docs/faq deleted\n\
         https://www.example.com/docs/guide deleted\n\
         https://www.example.com/docs/guide/install deleted\n\
         https://www.example.com/docs/guide/usage deleted"
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_watches"), 0);
}

/// Names in `related` are resolved with the caller's search_path, as the watched table's is.
#[pg_test]
fn related_names_follow_the_callers_search_path() {
    run("CREATE SCHEMA store");
    run("CREATE TABLE store.cats (id int PRIMARY KEY, slug text NOT NULL)");
    run("CREATE TABLE store.goods (id int PRIMARY KEY, cat int REFERENCES store.cats, slug text)");
    run("INSERT INTO store.cats VALUES (1, 'tea')");
    run("INSERT INTO store.goods VALUES (1, 1, 'green')");
    run("SET LOCAL search_path = store, public");
    run(
        "SELECT indexnow_watch('goods', url_sql => $$'https://www.example.com/' || \
           (SELECT slug FROM cats WHERE id = cat) || '/' || slug$$, related => '{cats}')",
    );
    run("RESET search_path");
    pushed();
    run("UPDATE store.cats SET slug = 'tisane'");
    assert_eq!(
        pending(),
        "https://www.example.com/tea/green moved\n\
         https://www.example.com/tisane/green created"
    );
}

#[pg_test]
#[should_panic(expected = "row-level security applies to role indexnow_test_tenant on related table")]
fn a_related_table_hidden_by_row_level_security_is_refused() {
    rls_owner();
    run("CREATE TABLE public.tenant_notes (id int PRIMARY KEY, page int REFERENCES tenant_pages)");
    run("ALTER TABLE tenant_pages ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY");
    run(
        "SELECT indexnow_watch('tenant_notes', url_sql => $$'https://www.example.com/' || \
           (SELECT slug FROM tenant_pages WHERE id = page)$$, related => '{tenant_pages}')",
    );
}

/// A tree whose table has two foreign keys to itself (the parent, and a translation's
/// original): the pages below a changed page are found whichever was declared first.
#[pg_test]
fn a_tree_with_two_foreign_keys_to_itself_follows_the_parent() {
    run(
        "CREATE TABLE tree (id int PRIMARY KEY, translation_of int REFERENCES tree, parent int, \
           slug text NOT NULL, published boolean NOT NULL DEFAULT true, views int DEFAULT 0)",
    );
    run("ALTER TABLE tree ADD FOREIGN KEY (parent) REFERENCES tree ON DELETE CASCADE");
    run(
        "CREATE FUNCTION tree_path(page int) RETURNS text LANGUAGE sql STABLE BEGIN ATOMIC \
           WITH RECURSIVE up(id, parent, slug, depth) AS ( \
             SELECT id, parent, slug, 0 FROM tree WHERE id = page \
             UNION ALL SELECT t.id, t.parent, t.slug, up.depth + 1 FROM tree t JOIN up ON t.id = up.parent) \
           SELECT string_agg(slug, '/' ORDER BY depth DESC) FROM up; END",
    );
    run("INSERT INTO tree (id, parent, slug) VALUES (1, NULL, 'docs'), (2, 1, 'guide')");
    run(
        "SELECT indexnow_watch('tree', url_sql => $$'https://www.example.com/' || tree_path(id)$$, \
           related => '{tree}')",
    );
    pushed();
    run("UPDATE tree SET slug = 'manual' WHERE id = 1");
    assert_eq!(
        pending(),
        "https://www.example.com/docs moved\n\
         https://www.example.com/docs/guide moved\n\
         https://www.example.com/manual created\n\
         https://www.example.com/manual/guide created"
    );
}

/// Two foreign keys to one related table (a main and a second category): a change to either
/// category re-derives the articles, whichever key was declared first.
#[pg_test]
fn two_foreign_keys_to_one_related_table_are_both_followed() {
    run("CREATE TABLE topics (id int PRIMARY KEY, slug text NOT NULL)");
    run(
        "CREATE TABLE stories (id int PRIMARY KEY, alt_topic int REFERENCES topics, \
           main_topic int REFERENCES topics, slug text)",
    );
    run("INSERT INTO topics VALUES (1, 'news'), (2, 'sport')");
    run("INSERT INTO stories VALUES (1, 2, 1, 'a')");
    run(
        "SELECT indexnow_watch('stories', url_sql => $$'https://www.example.com/' || \
           (SELECT slug FROM topics t WHERE t.id = main_topic) || '/' || slug$$, \
           related => '{topics}')",
    );
    pushed();
    run("UPDATE topics SET slug = 'headlines' WHERE id = 1");
    assert_eq!(
        pending(),
        "https://www.example.com/headlines/a created\n\
         https://www.example.com/news/a moved"
    );
}

/// A partitioned tree, written straight to a partition: the pages below the written page are
/// derived too, as for a write through the partitioned table.
#[pg_test]
fn a_partitioned_tree_written_through_a_partition_moves_the_pages_below() {
    run(
        "CREATE TABLE sites (site int, id int, parent int, slug text NOT NULL, \
           PRIMARY KEY (site, id), \
           FOREIGN KEY (site, parent) REFERENCES sites (site, id) ON DELETE CASCADE) \
           PARTITION BY LIST (site)",
    );
    run("CREATE TABLE sites_1 PARTITION OF sites FOR VALUES IN (1)");
    run(
        "CREATE FUNCTION site_path(s int, page int) RETURNS text LANGUAGE sql STABLE BEGIN ATOMIC \
           WITH RECURSIVE up(id, parent, slug, depth) AS ( \
             SELECT id, parent, slug, 0 FROM sites WHERE site = s AND id = page \
             UNION ALL SELECT t.id, t.parent, t.slug, up.depth + 1 FROM sites t \
                         JOIN up ON t.site = s AND t.id = up.parent) \
             CYCLE id SET looped USING visited \
           SELECT string_agg(slug, '/' ORDER BY depth DESC) FROM up WHERE NOT looped; END",
    );
    run("INSERT INTO sites VALUES (1, 1, NULL, 'x'), (1, 2, 1, 'y')");
    run(
        "SELECT indexnow_watch('sites', url_sql => $$'https://www.example.com/' || site || '/' || \
           site_path(site, id)$$, related => '{sites}')",
    );
    pushed();
    run("UPDATE sites_1 SET slug = 'z' WHERE id = 1");
    assert_eq!(
        pending(),
        "https://www.example.com/1/x moved\n\
         https://www.example.com/1/x/y moved\n\
         https://www.example.com/1/z created\n\
         https://www.example.com/1/z/y created"
    );
}

/// A tree with another related table: a section set on a top page and inherited below it through
/// a function; a change to the section moves the top page and every page below it.
#[pg_test]
fn a_tree_moves_the_pages_below_those_another_related_table_moves() {
    run("CREATE TABLE sections (id int PRIMARY KEY, slug text NOT NULL)");
    run(
        "CREATE TABLE tree (id int PRIMARY KEY, parent int REFERENCES tree ON DELETE CASCADE, \
           section int REFERENCES sections, slug text NOT NULL)",
    );
    run(
        "CREATE FUNCTION tree_at(page int, OUT path text, OUT section text) LANGUAGE sql STABLE \
         BEGIN ATOMIC \
           WITH RECURSIVE up(id, parent, section, slug, depth) AS ( \
             SELECT id, parent, section, slug, 0 FROM tree WHERE id = page \
             UNION ALL SELECT t.id, t.parent, t.section, t.slug, up.depth + 1 FROM tree t \
                         JOIN up ON t.id = up.parent) \
             CYCLE id SET looped USING visited \
           SELECT string_agg(up.slug, '/' ORDER BY depth DESC), \
                  (SELECT s.slug FROM up u JOIN sections s ON s.id = u.section \
                    ORDER BY u.depth LIMIT 1) \
             FROM up WHERE NOT looped; END",
    );
    run("INSERT INTO sections VALUES (1, 'docs'), (2, 'blog')");
    run(
        "INSERT INTO tree VALUES (1, NULL, 1, 'guide'), (2, 1, NULL, 'intro'), \
           (3, 2, NULL, 'setup'), (4, NULL, 2, 'news')",
    );
    run(
        "SELECT indexnow_watch('tree', url_sql => $$'https://www.example.com/' || \
           (tree_at(id)).section || '/' || (tree_at(id)).path$$, related => '{tree,sections}')",
    );
    pushed();
    run("UPDATE sections SET slug = 'manual' WHERE id = 1");
    assert_eq!(
        pending(),
        "https://www.example.com/docs/guide moved\n\
         https://www.example.com/docs/guide/intro moved\n\
         https://www.example.com/docs/guide/intro/setup moved\n\
         https://www.example.com/manual/guide created\n\
         https://www.example.com/manual/guide/intro created\n\
         https://www.example.com/manual/guide/intro/setup created"
    );
}

/// A related table that is a tree itself (nested categories, each URL made of the category's
/// path): a change to a category moves the articles of every category below it.
#[pg_test]
fn a_related_tree_moves_the_rows_that_reference_the_rows_below_a_changed_row() {
    run("CREATE TABLE kinds (id int PRIMARY KEY, parent int REFERENCES kinds, slug text NOT NULL)");
    run(
        "CREATE FUNCTION kind_path(kind int) RETURNS text LANGUAGE sql STABLE BEGIN ATOMIC \
           WITH RECURSIVE up(id, parent, slug, depth) AS ( \
             SELECT id, parent, slug, 0 FROM kinds WHERE id = kind \
             UNION ALL SELECT k.id, k.parent, k.slug, up.depth + 1 FROM kinds k \
                         JOIN up ON k.id = up.parent) \
             CYCLE id SET looped USING visited \
           SELECT string_agg(slug, '/' ORDER BY depth DESC) FROM up WHERE NOT looped; END",
    );
    run("CREATE TABLE finds (id int PRIMARY KEY, kind int REFERENCES kinds, slug text NOT NULL)");
    run("INSERT INTO kinds VALUES (1, NULL, 'sport'), (2, 1, 'football'), (3, 2, 'cups'), (4, NULL, 'arts')");
    run("INSERT INTO finds VALUES (1, 3, 'final'), (2, 4, 'opera')");
    run(
        "SELECT indexnow_watch('finds', url_sql => $$'https://www.example.com/' || \
           kind_path(kind) || '/' || slug$$, related => '{kinds}')",
    );
    pushed();
    run("UPDATE kinds SET slug = 'sports' WHERE id = 1");
    assert_eq!(
        pending(),
        "https://www.example.com/sport/football/cups/final moved\n\
         https://www.example.com/sports/football/cups/final created"
    );
}

/// A related table named twice is one; a watch made again without it takes the triggers off it.
#[pg_test]
fn a_related_table_named_twice_is_one_and_dropped_from_related_loses_its_triggers() {
    run("CREATE TABLE racks (id int PRIMARY KEY, slug text NOT NULL)");
    run("CREATE TABLE tapes (id int PRIMARY KEY, rack int REFERENCES racks, slug text)");
    let watch = |related: &str| {
        run(&format!(
            "SELECT indexnow_watch('tapes', url_sql => $$'https://www.example.com/' || \
               (SELECT slug FROM racks r2 WHERE r2.id = rack) || '/' || slug$${related})"
        ))
    };
    watch(", related => '{racks,public.racks}'");
    assert_eq!(count("SELECT count(*) FROM indexnow_relations"), 1);
    assert_eq!(capture_triggers(&["racks"]), 4);
    watch("");
    assert_eq!(count("SELECT count(*) FROM indexnow_relations"), 0);
    assert_eq!(capture_triggers(&["racks"]), 0);
}

/// A related table with a foreign table below it (an archive kept elsewhere) is refused: with the
/// capture triggers on it, PostgreSQL would refuse every UPDATE and DELETE through it.
#[pg_test]
#[should_panic(expected = "related table public.bins has the foreign table public.bins_archive below it")]
fn a_related_table_with_a_foreign_child_is_refused() {
    foreign_server();
    run("CREATE TABLE bins (id int PRIMARY KEY, slug text NOT NULL)");
    run("CREATE FOREIGN TABLE bins_archive () INHERITS (bins) SERVER indexnow_test_files");
    run("CREATE TABLE jars (id int PRIMARY KEY, bin int REFERENCES bins, slug text)");
    run(
        "SELECT indexnow_watch('jars', url_sql => $$'https://www.example.com/' || \
           (SELECT slug FROM ONLY bins b WHERE b.id = bin) || '/' || slug$$, related => '{bins}')",
    );
}

fn foreign_server() {
    run("CREATE FOREIGN DATA WRAPPER indexnow_test_fdw");
    run("CREATE SERVER indexnow_test_files FOREIGN DATA WRAPPER indexnow_test_fdw");
}

/// A foreign table joining the tree of a watched or related table, in each way one can, is
/// refused (PostgreSQL would refuse every UPDATE and DELETE through the tree); a foreign table
/// joining the table above a watched partition takes the capture triggers off that table, and
/// the watched partition's writes through it keep working.
#[pg_test]
fn a_foreign_table_joining_a_watched_or_related_tree_is_refused() {
    foreign_server();
    run("CREATE TABLE fparts (id int PRIMARY KEY, slug text NOT NULL) PARTITION BY RANGE (id)");
    run("CREATE TABLE fparts_a PARTITION OF fparts FOR VALUES FROM (0) TO (10) PARTITION BY RANGE (id)");
    run("CREATE TABLE fparts_a1 PARTITION OF fparts_a FOR VALUES FROM (0) TO (5)");
    run("SELECT indexnow_watch('fparts', url => 'https://www.example.com/{slug}')");
    run("CREATE TABLE fkin (id int PRIMARY KEY, name text NOT NULL)");
    run("CREATE TABLE fpins (id int PRIMARY KEY, kin int REFERENCES fkin, slug text NOT NULL)");
    run(
        "SELECT indexnow_watch('fpins', url_sql => $$'https://www.example.com/' || \
           (SELECT k.name FROM fkin k WHERE k.id = kin) || '/' || slug$$, related => '{fkin}')",
    );
    run("CREATE FOREIGN TABLE floose (id int NOT NULL, slug text NOT NULL) SERVER indexnow_test_files");
    run("CREATE FOREIGN TABLE fkin_loose (id int NOT NULL, name text NOT NULL) SERVER indexnow_test_files");
    run("CREATE TABLE fother (id int)");
    run("CREATE TABLE fkin_c (id int NOT NULL, name text NOT NULL)");
    run("CREATE FOREIGN TABLE fkin_cf () INHERITS (fkin_c) SERVER indexnow_test_files");
    let refused = "which indexnow watches or reads for a watch: PostgreSQL refuses UPDATE and DELETE";
    assert_refused(
        &[
            (
                "CREATE FOREIGN TABLE fparts_f PARTITION OF fparts_a FOR VALUES FROM (5) TO (10) \
                   SERVER indexnow_test_files",
                "foreign table fparts_f cannot join the tree of public.fparts, ",
            ),
            (
                "ALTER TABLE fparts ATTACH PARTITION floose FOR VALUES FROM (10) TO (20)",
                "foreign table floose cannot join the tree of public.fparts, ",
            ),
            (
                "CREATE FOREIGN TABLE fkin_f () INHERITS (fkin) SERVER indexnow_test_files",
                "foreign table fkin_f cannot join the tree of public.fkin, ",
            ),
            (
                "ALTER FOREIGN TABLE fkin_loose INHERIT fkin",
                "foreign table fkin_loose cannot join the tree of public.fkin, ",
            ),
            (
                "ALTER FOREIGN TABLE fkin_loose INHERIT fother, INHERIT fkin",
                "foreign table fkin_loose cannot join the tree of public.fkin, ",
            ),
            (
                "ALTER TABLE fkin_c INHERIT fkin",
                "foreign table public.fkin_cf cannot join the tree of public.fkin, ",
            ),
        ],
        Some("55000"),
    );
    assert_refused(
        &[("ALTER TABLE fparts ATTACH PARTITION floose FOR VALUES FROM (10) TO (20)", refused)],
        None,
    );
    let triggers = |t: &str| capture_triggers(&[t]);
    // (a partitioned table with a unique index can have no foreign partition)
    run("CREATE TABLE fmom (id int, slug text NOT NULL) PARTITION BY RANGE (id)");
    run("CREATE TABLE fmom_a PARTITION OF fmom (PRIMARY KEY (id)) FOR VALUES FROM (0) TO (10)");
    run("SELECT indexnow_watch('fmom_a', url => 'https://www.example.com/a/{slug}')");
    assert_eq!(triggers("fmom"), 4);
    run(
        "CREATE FOREIGN TABLE fmom_f PARTITION OF fmom FOR VALUES FROM (10) TO (20) \
           SERVER indexnow_test_files",
    );
    assert_eq!((triggers("fmom"), triggers("fmom_a")), (0, 4));
    run("INSERT INTO fmom_a VALUES (1, 'x')");
    assert_eq!(pending(), "https://www.example.com/a/x created");
    run("ALTER TABLE fmom DETACH PARTITION fmom_f");
    assert_eq!(triggers("fmom"), 4);
}

/// A watched child whose parent has a foreign table below it: the parent gets no capture
/// triggers (PostgreSQL would refuse UPDATE and DELETE through it), the child does; and the last
/// watched child dropped takes the triggers off its parent.
#[pg_test]
fn a_parent_with_a_foreign_child_gets_no_triggers_and_a_dropped_child_takes_them_along() {
    foreign_server();
    let triggers = |t: &str| capture_triggers(&[t]);
    run("CREATE TABLE kin2 (id int, slug text NOT NULL)");
    run("CREATE TABLE kin2_a (PRIMARY KEY (id)) INHERITS (kin2)");
    run("CREATE FOREIGN TABLE kin2_f () INHERITS (kin2) SERVER indexnow_test_files");
    run("SELECT indexnow_watch('kin2_a', url => 'https://www.example.com/{slug}')");
    assert_eq!((triggers("kin2"), triggers("kin2_a")), (0, 4));
    run("CREATE TABLE kin3 (id int, slug text NOT NULL)");
    run("CREATE TABLE kin3_a (PRIMARY KEY (id)) INHERITS (kin3)");
    run("SELECT indexnow_watch('kin3_a', url => 'https://www.example.com/3/{slug}')");
    assert_eq!(triggers("kin3"), 4);
    run("DROP TABLE kin3_a");
    assert_eq!(triggers("kin3"), 0);
}

#[pg_test]
#[should_panic(expected = "more than 16 chains of foreign keys lead from public.many to related table public.media")]
fn more_chains_to_a_related_table_than_are_followed_are_refused() {
    run("CREATE TABLE media (id int PRIMARY KEY, slug text NOT NULL)");
    let columns = (1..=17)
        .map(|i| format!("m{i} int REFERENCES media"))
        .collect::<Vec<_>>()
        .join(", ");
    run(&format!("CREATE TABLE many (id int PRIMARY KEY, slug text, {columns})"));
    run(
        "SELECT indexnow_watch('many', url_sql => $$'https://www.example.com/' || \
           (SELECT slug FROM media WHERE id = m17) || '/' || slug$$, related => '{media}')",
    );
}

/// A partitioned related table written straight to a partition, one there when the watch was
/// made and one attached after: the watched rows that read the written rows are derived as for a
/// write through the partitioned table; unwatching takes the triggers off every partition.
#[pg_test]
fn a_partitioned_related_table_written_through_a_partition_moves_the_pages() {
    run("CREATE TABLE shelves (id int PRIMARY KEY, slug text NOT NULL) PARTITION BY RANGE (id)");
    run("CREATE TABLE shelves_low PARTITION OF shelves FOR VALUES FROM (0) TO (100)");
    run("CREATE TABLE books (id int PRIMARY KEY, shelf int REFERENCES shelves, slug text)");
    run("INSERT INTO shelves VALUES (1, 'poems')");
    run("INSERT INTO books VALUES (1, 1, 'odes')");
    run(
        "SELECT indexnow_watch('books', url_sql => $$'https://www.example.com/' || \
           (SELECT slug FROM shelves s WHERE s.id = shelf) || '/' || slug$$, \
           related => '{shelves}')",
    );
    run("CREATE TABLE shelves_high PARTITION OF shelves FOR VALUES FROM (100) TO (200)");
    run("INSERT INTO shelves VALUES (100, 'novels')");
    run("INSERT INTO books VALUES (2, 100, 'epic')");
    pushed();
    run("UPDATE shelves_low SET slug = 'verse'");
    run("UPDATE shelves_high SET slug = 'prose'");
    assert_eq!(
        pending(),
        "https://www.example.com/novels/epic moved\n\
         https://www.example.com/poems/odes moved\n\
         https://www.example.com/prose/epic created\n\
         https://www.example.com/verse/odes created"
    );
    run("SELECT indexnow_unwatch('books')");
    assert_eq!(
        capture_triggers(&["shelves", "shelves_low", "shelves_high", "books"]),
        0
    );
}

/// A table dropped and made again with its pages, watched again: the removals the drop queued
/// are not left to go out for pages that are live again (not sent yet: withdrawn, and the page
/// taken as known, as search engines still have it), and a page whose removal was sent is
/// announced again.
#[pg_test]
fn a_table_made_again_and_watched_again_takes_back_the_removals_of_live_pages() {
    run("CREATE TABLE again (id int PRIMARY KEY, slug text NOT NULL)");
    run("INSERT INTO again VALUES (1, 'x1'), (2, 'x2')");
    run("SELECT indexnow_watch('again', url => 'https://www.example.com/{slug}')");
    pushed();
    run("DROP TABLE again");
    run("UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
           last_pushed_at = clock_timestamp() WHERE url LIKE '%x2'");
    run("CREATE TABLE again (id int PRIMARY KEY, slug text NOT NULL)");
    run("INSERT INTO again VALUES (1, 'x1'), (2, 'x2'), (3, 'x3')");
    run("SELECT indexnow_watch('again', url => 'https://www.example.com/{slug}')");
    assert_eq!(pending(), "https://www.example.com/x2 created");
    assert_eq!(
        text("SELECT reason || ' ' || settled_reason FROM indexnow_urls WHERE url LIKE '%x1'")
            .as_deref(),
        Some("created created"),
        "x1's removal withdrawn: as search engines were last told"
    );
}

/// A column renamed in a table reached through the writer's search_path (not the extension's):
/// the template follows all the same.
#[pg_test]
fn a_column_renamed_through_the_writers_search_path_is_followed() {
    run("CREATE SCHEMA shelf2");
    run("CREATE TABLE shelf2.items (id int PRIMARY KEY, slug text NOT NULL)");
    run("SELECT indexnow_watch('shelf2.items', url => 'https://www.example.com/{slug}')");
    run("SET LOCAL search_path = shelf2");
    run("ALTER TABLE items RENAME COLUMN slug TO path");
    run("RESET search_path");
    assert_eq!(
        text("SELECT pattern FROM indexnow_watches"),
        Some("https://www.example.com/{path}".into())
    );
}

/// Expressions that are a column alone (`visible => 'live'`, `publish_at => 'go_at'`) follow
/// the column renamed, and so does a watch on an inheritance child when the column is renamed
/// through its parent.
#[pg_test]
fn a_bare_column_expression_and_a_childs_watch_follow_a_column_renamed() {
    run(
        "CREATE TABLE notes (id int PRIMARY KEY, slug text NOT NULL, live boolean NOT NULL, \
           go_at timestamptz)",
    );
    run("INSERT INTO notes VALUES (1, 'a', true, NULL), (2, 'b', true, NULL)");
    run(
        "SELECT indexnow_watch('notes', url => 'https://www.example.com/{slug}', \
           visible => 'live', publish_at => 'r.go_at')",
    );
    run("CREATE TABLE kin (id int PRIMARY KEY, slug text NOT NULL)");
    run("CREATE TABLE kin_a (PRIMARY KEY (id)) INHERITS (kin)");
    run("INSERT INTO kin_a VALUES (1, 'k')");
    run("SELECT indexnow_watch('kin_a', url => 'https://www.example.com/kin/{slug}')");
    pushed();
    run("ALTER TABLE notes RENAME COLUMN live TO shown");
    run("ALTER TABLE notes RENAME COLUMN go_at TO starts");
    run("ALTER TABLE kin RENAME COLUMN slug TO path");
    assert_eq!(
        text(
            "SELECT string_agg(concat_ws(' ', pattern, visible, publish_at), ', ' ORDER BY id) \
               FROM indexnow_watches"
        ),
        Some(
            "https://www.example.com/{slug} \"shown\" r.\"starts\", \
             https://www.example.com/kin/{path}"
                .into()
        )
    );
    run("UPDATE notes SET shown = false WHERE id = 1");
    // (a live page moved into the future: withdrawn until then, spec behaviour 23)
    run("UPDATE notes SET starts = now() + interval '1 day' WHERE id = 2");
    run("UPDATE kin_a SET path = 'k2'");
    derive();
    assert_eq!(
        text(
            "SELECT string_agg(url || ' ' || reason || ' ' || (available_at > now())::text, \
                               E'\\n' ORDER BY url) \
               FROM indexnow_urls WHERE request_seq > settled_seq"
        ),
        Some(
            "https://www.example.com/a unpublished false\n\
             https://www.example.com/b unpublished false\n\
             https://www.example.com/kin/k moved false\n\
             https://www.example.com/kin/k2 created false"
                .into()
        )
    );
}

/// A partition watched alone, then its parent too: a write through the parent and a write
/// straight to the partition are each captured for both watches (a statement fires the triggers
/// of the table it names only).
#[pg_test]
fn a_watched_partition_sees_writes_through_its_parent_and_both_can_be_watched() {
    run("CREATE TABLE parts (id int PRIMARY KEY, slug text NOT NULL) PARTITION BY RANGE (id)");
    run("CREATE TABLE parts_a PARTITION OF parts FOR VALUES FROM (0) TO (10)");
    run("CREATE TABLE parts_b PARTITION OF parts FOR VALUES FROM (10) TO (20)");
    run("SELECT indexnow_watch('parts_a', url => 'https://www.example.com/a/{slug}')");
    run("INSERT INTO parts VALUES (1, 'x'), (11, 'z')");
    run("INSERT INTO parts_a VALUES (2, 'y')");
    assert_eq!(
        pending(),
        "https://www.example.com/a/x created\n\
         https://www.example.com/a/y created"
    );
    pushed();
    run("UPDATE parts SET slug = 'y2' WHERE id = 2");
    run("DELETE FROM parts WHERE id = 1");
    assert_eq!(
        pending(),
        "https://www.example.com/a/x deleted\n\
         https://www.example.com/a/y moved\n\
         https://www.example.com/a/y2 created"
    );
    run("SELECT indexnow_watch('parts', url => 'https://www.example.com/{slug}')");
    pushed();
    run("UPDATE parts SET slug = 'y3' WHERE id = 2");
    run("UPDATE parts_a SET slug = 'y4' WHERE id = 2");
    run("UPDATE parts_b SET slug = 'z2'");
    assert_eq!(
        pending(),
        "https://www.example.com/a/y2 moved\n\
         https://www.example.com/a/y4 created\n\
         https://www.example.com/y2 moved\n\
         https://www.example.com/y4 created\n\
         https://www.example.com/z moved\n\
         https://www.example.com/z2 created"
    );
    run("SELECT indexnow_unwatch('parts')");
    run("SELECT indexnow_unwatch('parts_a')");
    assert_eq!(
        capture_triggers(&["parts", "parts_a", "parts_b"]),
        0
    );
}

/// A watched table attached under a middle partition after the top table's writes were seen: the
/// next write through the top table is captured for it.
#[pg_test]
fn a_watched_table_attached_deep_in_a_tree_is_captured_through_the_top() {
    run("CREATE TABLE g (id int PRIMARY KEY, slug text NOT NULL) PARTITION BY RANGE (id)");
    run("CREATE TABLE g_r PARTITION OF g FOR VALUES FROM (0) TO (10)");
    run("CREATE TABLE g_p PARTITION OF g FOR VALUES FROM (10) TO (100) PARTITION BY RANGE (id)");
    run("SELECT indexnow_watch('g_r', url => 'https://www.example.com/r/{slug}')");
    run("INSERT INTO g VALUES (1, 'a')");
    run("CREATE TABLE q (id int PRIMARY KEY, slug text NOT NULL)");
    run("SELECT indexnow_watch('q', url => 'https://www.example.com/q/{slug}')");
    run("ALTER TABLE g_p ATTACH PARTITION q FOR VALUES FROM (10) TO (20)");
    run("INSERT INTO g VALUES (11, 'b')");
    assert_eq!(
        pending(),
        "https://www.example.com/q/b created\n\
         https://www.example.com/r/a created"
    );
}

/// A watched table made an inheritance child, and a related table attached as a partition: both
/// ALTERs succeed on every minor release (some refuse a table with transition-table triggers
/// joining a tree), and both tables keep being captured.
#[pg_test]
fn a_watched_or_related_table_joining_a_tree_keeps_its_capture() {
    run("CREATE TABLE kin (id int, slug text NOT NULL)");
    run("CREATE TABLE kin_c (id int PRIMARY KEY, slug text NOT NULL)");
    run("SELECT indexnow_watch('kin_c', url => 'https://www.example.com/k/{slug}')");
    run("ALTER TABLE kin_c INHERIT kin");
    run("INSERT INTO kin_c VALUES (1, 'a')");
    run("UPDATE kin SET slug = 'b'");
    assert_eq!(pending(), "https://www.example.com/k/b created");

    run("CREATE TABLE shelves (code text PRIMARY KEY, name text) PARTITION BY LIST (code)");
    run("CREATE TABLE shelves_x (code text PRIMARY KEY, name text)");
    run(
        "CREATE TABLE books (id int PRIMARY KEY, slug text NOT NULL, \
           shelf text NOT NULL REFERENCES shelves_x (code))",
    );
    run(
        "SELECT indexnow_watch('books', url_sql => $$'https://www.example.com/' || \
           (SELECT s.name FROM shelves_x s WHERE s.code = shelf) || '/' || slug$$, \
           related => '{shelves_x}')",
    );
    run("INSERT INTO shelves_x VALUES ('x', 'ex')");
    run("INSERT INTO books VALUES (1, 'one', 'x')");
    pushed();
    run("ALTER TABLE shelves ATTACH PARTITION shelves_x FOR VALUES IN ('x')");
    run("UPDATE shelves_x SET name = 'ex2'");
    run("UPDATE shelves SET name = 'ex3'");
    assert_eq!(
        pending(),
        "https://www.example.com/ex/one moved\n\
         https://www.example.com/ex3/one created"
    );
}

/// A related table that is a partition, and one that is an inheritance child keyed by a column
/// of its own, written through the table above them (a statement fires the triggers of the table
/// it names only): the pages that read the written rows move; a write to another partition moves
/// nothing; unwatching takes the triggers off the tables above.
#[pg_test]
fn a_related_partition_written_through_its_parent_moves_the_pages() {
    run("CREATE TABLE shelves (code text PRIMARY KEY, name text) PARTITION BY LIST (code)");
    run("CREATE TABLE shelves_x PARTITION OF shelves FOR VALUES IN ('x')");
    run("CREATE TABLE shelves_y PARTITION OF shelves FOR VALUES IN ('y')");
    run(
        "CREATE TABLE books (id int PRIMARY KEY, slug text NOT NULL, \
           shelf text NOT NULL REFERENCES shelves_x (code))",
    );
    run("INSERT INTO shelves VALUES ('x', 'ex'), ('y', 'why')");
    run("INSERT INTO books VALUES (1, 'one', 'x')");
    run(
        "SELECT indexnow_watch('books', url_sql => $$'https://www.example.com/' || \
           (SELECT s.name FROM shelves_x s WHERE s.code = shelf) || '/' || slug$$, \
           related => '{shelves_x}')",
    );
    run("CREATE TABLE rooms (id int, name text NOT NULL)");
    run("CREATE TABLE rooms_c (code text PRIMARY KEY) INHERITS (rooms)");
    run("INSERT INTO rooms_c VALUES (1, 'hall', 'h')");
    run(
        "CREATE TABLE seats (id int PRIMARY KEY, room text NOT NULL REFERENCES rooms_c (code), \
           slug text NOT NULL)",
    );
    run("INSERT INTO seats VALUES (1, 'h', 's1')");
    run(
        "SELECT indexnow_watch('seats', url_sql => $$'https://www.example.com/' || \
           (SELECT r.name FROM rooms_c r WHERE r.code = room) || '/' || slug$$, \
           related => '{rooms_c}')",
    );
    pushed();
    run("UPDATE shelves SET name = 'ex2' WHERE code = 'x'");
    run("UPDATE shelves SET name = 'why2' WHERE code = 'y'");
    run("UPDATE rooms SET name = 'aula'");
    assert_eq!(
        pending(),
        "https://www.example.com/aula/s1 created\n\
         https://www.example.com/ex/one moved\n\
         https://www.example.com/ex2/one created\n\
         https://www.example.com/hall/s1 moved"
    );
    run("SELECT indexnow_unwatch('books')");
    run("SELECT indexnow_unwatch('seats')");
    assert_eq!(
        capture_triggers(&["shelves", "rooms"]),
        0
    );
}

/// Watching a child puts the capture triggers on its parent too: a caller without TRIGGER on the
/// parent (another role's table) is refused.
#[pg_test]
#[should_panic(expected = "indexnow_watch: the table above: permission denied for table public.mom")]
fn watching_a_child_needs_the_trigger_privilege_on_its_parent() {
    run("CREATE ROLE indexnow_test_kin");
    run("GRANT USAGE, CREATE ON SCHEMA public TO indexnow_test_kin");
    run("SELECT indexnow_grant_watching('indexnow_test_kin')");
    run("CREATE TABLE public.mom (id int, slug text NOT NULL)");
    run("CREATE TABLE public.mom_k (PRIMARY KEY (id)) INHERITS (public.mom)");
    run("ALTER TABLE public.mom_k OWNER TO indexnow_test_kin");
    run("SET LOCAL ROLE indexnow_test_kin");
    run("SELECT indexnow_watch('public.mom_k', url => 'https://www.example.com/{slug}')");
}

/// A related inheritance child gets the capture triggers on its parent too: a caller without
/// TRIGGER on the parent (another role's table) is refused.
#[pg_test]
#[should_panic(
    expected = "indexnow_watch: the table above a related table: permission denied for table public.dad"
)]
fn a_related_child_needs_the_trigger_privilege_on_its_parent() {
    run("CREATE ROLE indexnow_test_kin");
    run("GRANT USAGE, CREATE ON SCHEMA public TO indexnow_test_kin");
    run("SELECT indexnow_grant_watching('indexnow_test_kin')");
    run("CREATE TABLE public.dad (id int PRIMARY KEY, name text NOT NULL)");
    run("CREATE TABLE public.dad_k (PRIMARY KEY (id)) INHERITS (public.dad)");
    run("ALTER TABLE public.dad_k OWNER TO indexnow_test_kin");
    run("SET LOCAL ROLE indexnow_test_kin");
    run(
        "CREATE TABLE public.toys (id int PRIMARY KEY, slug text NOT NULL, \
           dad int REFERENCES public.dad_k)",
    );
    run(
        "SELECT indexnow_watch('public.toys', url_sql => $$'https://www.example.com/' || \
           (SELECT d.name FROM public.dad_k d WHERE d.id = dad) || '/' || slug$$, \
           related => '{public.dad_k}')",
    );
}

/// A translation inserted before its article, in a transaction that checks the foreign key at
/// commit (`DEFERRABLE INITIALLY DEFERRED`, as ORMs make them): its URL cannot be built yet, so its
/// save is left to the derivation after commit (recorded, not warned of); the article's insert
/// announces it.
#[pg_test]
fn a_row_saved_before_the_row_it_references_under_a_deferred_key_is_derived_later() {
    // (a save that would derive in its statement finds it cannot, and records instead)
    derive_in_statements();
    run("CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL)");
    run(
        "CREATE TABLE post_texts (post int REFERENCES posts DEFERRABLE INITIALLY DEFERRED, \
           lang text, slug text NOT NULL, PRIMARY KEY (post, lang))",
    );
    run(
        "SELECT indexnow_watch('post_texts', url_sql => $$'https://www.example.com/' || lang || \
           '/' || (SELECT p.slug FROM posts p WHERE p.id = post) || '/' || slug$$, \
           related => '{posts}')",
    );
    run("INSERT INTO post_texts VALUES (1, 'en', 'hello')");
    assert_eq!(
        (
            count("SELECT count(*) FROM indexnow_changes"),
            count("SELECT count(*) FROM indexnow_urls")
        ),
        (1, 0)
    );
    run("INSERT INTO posts VALUES (1, 'p1')");
    assert_eq!(pending(), "https://www.example.com/en/p1/hello created");
}

/// A parallel restore's state when one job has made the dump's capture triggers on a watched
/// partition and not yet on the table above it: another job's `ALTER TABLE` that adds a
/// constraint (to any table of the tree) makes none, so the dump's own `CREATE TRIGGER` of them
/// cannot find them made ("trigger ... already exists" failed the restore), and takes no lock on
/// the tree (a deadlock with another job's `COPY`). The dump's triggers then capture the tree.
#[pg_test]
fn a_restores_alter_table_makes_no_capture_trigger() {
    run("CREATE TABLE vases (id int NOT NULL, slug text NOT NULL) PARTITION BY RANGE (id)");
    run("CREATE TABLE vases_a PARTITION OF vases FOR VALUES FROM (0) TO (10)");
    run("ALTER TABLE vases_a ADD PRIMARY KEY (id)");
    run("SELECT indexnow_watch('vases_a', url => 'https://www.example.com/{slug}')");
    assert_eq!(capture_triggers(&["vases", "vases_a"]), 8);
    // (the watch without its triggers, as a restore loads it; then the dump's triggers of the
    // partition made, those of the table above not yet)
    let events = crate::capture::triggers::EVENTS;
    for table in ["vases", "vases_a"] {
        for (name, _, _) in events {
            run(&format!("DROP TRIGGER {name} ON {table}"));
        }
    }
    let dumped = |table: &str| {
        for (name, event, referencing) in events {
            run(&format!(
                "CREATE TRIGGER {name} AFTER {event} ON public.{table} {referencing} \
                   FOR EACH STATEMENT EXECUTE FUNCTION public._indexnow_capture()"
            ));
        }
    };
    dumped("vases_a");
    run("CREATE FUNCTION public.vases_noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$");
    run("CREATE TRIGGER vases_noop AFTER INSERT ON public.vases_a FOR EACH STATEMENT \
           EXECUTE FUNCTION public.vases_noop()");
    run("ALTER TABLE ONLY public.vases ADD CONSTRAINT vases_pkey PRIMARY KEY (id)");
    run("ALTER TABLE public.vases_a DISABLE TRIGGER vases_noop");
    run("ALTER TABLE ONLY public.vases_a ADD CONSTRAINT vases_a_slug UNIQUE (slug)");
    run("ALTER TABLE ONLY public.vases_a ENABLE TRIGGER indexnow_capture_insert");
    assert_eq!(capture_triggers(&["vases"]), 0, "the end of an ALTER made triggers");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
    dumped("vases");
    run("INSERT INTO vases VALUES (1, 'v')");
    assert_eq!(pending(), "https://www.example.com/v created");
}

/// A parallel restore's state when one job has made a watched table's capture triggers from the
/// dump and another has not loaded (or not committed) `indexnow_watches` yet: an `ALTER TABLE`
/// that adds a key, to any table, leaves those triggers alone. Its end took them off every table
/// no watch it could see used, and the watched table stayed uncaptured once its watch was loaded.
#[pg_test]
fn a_restores_alter_table_keeps_the_triggers_made_before_the_watches_are_loaded() {
    run("CREATE TABLE tomes (id int PRIMARY KEY, slug text NOT NULL, stack text NOT NULL)");
    run("CREATE TABLE stacks (code text NOT NULL, name text)");
    for (name, event, referencing) in [
        ("indexnow_capture_insert", "INSERT", "REFERENCING NEW TABLE AS indexnow_new"),
        (
            "indexnow_capture_update",
            "UPDATE",
            "REFERENCING OLD TABLE AS indexnow_old NEW TABLE AS indexnow_new",
        ),
        ("indexnow_capture_delete", "DELETE", "REFERENCING OLD TABLE AS indexnow_old"),
        ("indexnow_capture_truncate", "TRUNCATE", ""),
    ] {
        run(&format!(
            "CREATE TRIGGER {name} AFTER {event} ON public.tomes {referencing} \
               FOR EACH STATEMENT EXECUTE FUNCTION public._indexnow_capture()"
        ));
    }
    assert_eq!(count("SELECT count(*) FROM indexnow_watches"), 0);
    // (another table's key, then the watched table's foreign key, as the restore adds them)
    run("ALTER TABLE ONLY public.stacks ADD CONSTRAINT stacks_pkey PRIMARY KEY (code)");
    assert_eq!(capture_triggers(&["tomes"]), 4);
    run(
        "ALTER TABLE ONLY public.tomes ADD CONSTRAINT tomes_stack_fkey FOREIGN KEY (stack) \
           REFERENCES public.stacks(code)",
    );
    assert_eq!(capture_triggers(&["tomes"]), 4);
}

/// A child that stops inheriting from a watched parent (`NO INHERIT`) takes its rows out of the
/// parent's watch: their pages are removed, and the child's own watch goes on.
#[pg_test]
fn a_child_that_stops_inheriting_takes_its_pages_out_of_the_parents_watch() {
    run("CREATE TABLE lib (id int PRIMARY KEY, slug text NOT NULL)");
    run("CREATE TABLE lib_old (PRIMARY KEY (id)) INHERITS (lib)");
    run("INSERT INTO lib VALUES (1, 'new')");
    run("INSERT INTO lib_old VALUES (2, 'old')");
    run("SELECT indexnow_watch('lib', url => 'https://www.example.com/{slug}')");
    run("SELECT indexnow_watch('lib_old', url => 'https://www.example.com/old/{slug}')");
    run("UPDATE lib SET slug = slug || '2'");
    pushed();
    run("ALTER TABLE lib_old NO INHERIT lib");
    assert_eq!(pending(), "https://www.example.com/old2 deleted");
    run("UPDATE lib_old SET slug = 'old3'");
    assert_eq!(
        pending(),
        "https://www.example.com/old/old2 moved\n\
         https://www.example.com/old/old3 created\n\
         https://www.example.com/old2 deleted"
    );
    assert_eq!(capture_triggers(&["lib_old"]), 4);
}

/// Inheritance children watched each on their own: a write through the parent is captured for
/// the child whose rows it wrote, also for a child keyed by a column of its own (its whole table
/// is derived then).
#[pg_test]
fn watched_inheritance_children_see_writes_through_their_parent() {
    run("CREATE TABLE heirs (id int, slug text NOT NULL)");
    run("CREATE TABLE heirs_a (PRIMARY KEY (id)) INHERITS (heirs)");
    run("CREATE TABLE heirs_b (code text PRIMARY KEY) INHERITS (heirs)");
    run("INSERT INTO heirs_a VALUES (1, 'a1')");
    run("INSERT INTO heirs_b VALUES (1, 'b1', 'c1')");
    run("SELECT indexnow_watch('heirs_a', url => 'https://www.example.com/a/{slug}')");
    run("SELECT indexnow_watch('heirs_b', url => 'https://www.example.com/b/{code}/{slug}')");
    pushed();
    run("UPDATE heirs SET slug = slug || 'x'");
    assert_eq!(
        pending(),
        "https://www.example.com/a/a1 moved\n\
         https://www.example.com/a/a1x created\n\
         https://www.example.com/b/c1/b1 moved\n\
         https://www.example.com/b/c1/b1x created"
    );
    pushed();
    run("DELETE FROM heirs");
    assert_eq!(
        pending(),
        "https://www.example.com/a/a1x deleted\n\
         https://www.example.com/b/c1/b1x deleted"
    );
}

/// Following a rename never fails the user's ALTER: two watches whose templates would become
/// one pattern leave the ALTER to succeed, with a WARNING.
#[pg_test]
fn a_rename_the_watches_cannot_follow_still_succeeds() {
    run("CREATE TABLE twins (id int PRIMARY KEY, slug text NOT NULL)");
    run("SELECT indexnow_watch('twins', url => 'https://www.example.com/{ id }/{slug}')");
    run("SELECT indexnow_watch('twins', url => 'https://www.example.com/{id}/{slug}')");
    run("ALTER TABLE twins RENAME COLUMN slug TO s2");
    assert_eq!(
        count("SELECT count(*) FROM pg_attribute WHERE attrelid = 'twins'::regclass AND attname = 's2'"),
        1
    );
}

#[pg_test]
#[should_panic(expected = "tmp_cats is a temporary table: its rows are this session")]
fn a_temporary_related_table_is_refused() {
    run("CREATE TEMPORARY TABLE tmp_cats (id int PRIMARY KEY, slug text)");
    run("CREATE TABLE tmp_posts (id int PRIMARY KEY, cat int, slug text)");
    run(
        "SELECT indexnow_watch('tmp_posts', url => 'https://www.example.com/{slug}', \
           related => '{tmp_cats}')",
    );
}

/// A watched table losing its primary key (a migration from one key to another) still takes
/// writes: they are kept as a derivation of the whole table, and the pages come out right.
#[pg_test]
fn a_table_that_lost_its_primary_key_still_takes_writes() {
    run("CREATE TABLE mig (id int PRIMARY KEY, slug text)");
    run("INSERT INTO mig VALUES (1, 'a'), (2, 'b')");
    run("SELECT indexnow_watch('mig', url => 'https://www.example.com/mig/{slug}')");
    pushed();
    run("ALTER TABLE mig ADD COLUMN uid int");
    run("ALTER TABLE mig DROP CONSTRAINT mig_pkey");
    run("UPDATE mig SET uid = id + 100");
    run("UPDATE mig SET slug = 'a2' WHERE id = 1");
    run("INSERT INTO mig VALUES (3, 'c', 103)");
    run("DELETE FROM mig WHERE id = 2");
    run("TRUNCATE mig");
    run("INSERT INTO mig VALUES (1, 'a2', 101), (3, 'c', 103)");
    run("ALTER TABLE mig ADD PRIMARY KEY (uid)");
    run("UPDATE mig SET slug = 'c2' WHERE uid = 103");
    assert_eq!(
        pending(),
        "https://www.example.com/mig/a deleted\n\
         https://www.example.com/mig/a2 created\n\
         https://www.example.com/mig/b deleted\n\
         https://www.example.com/mig/c2 created"
    );
}

/// An `ALTER TABLE` that changes no row (a constraint or index added or dropped, a default,
/// statistics) and leaves the watch as it was records nothing to derive: a parallel restore
/// adds a watched table's constraints while another job still loads what the watch derived
/// (`indexnow_sources`), and a derivation then would take every row for new. One that may
/// change rows (a column retyped) or changes the watch (a new primary key) records the table.
#[pg_test]
fn an_alter_that_changes_no_row_records_nothing_to_derive() {
    for t in ["calm", "retyped", "rekeyed"] {
        run(&format!("CREATE TABLE {t} (id int PRIMARY KEY, uid int UNIQUE, slug varchar)"));
        run(&format!("INSERT INTO {t} VALUES (1, 101, 'A')"));
        run(&format!(
            "SELECT indexnow_watch('{t}', url => 'https://www.example.com/{t}/{{slug}}')"
        ));
    }
    pushed();
    let recorded = |t: &str| count(&format!("SELECT count(*) FROM indexnow_changes WHERE tbl = '{t}'::regclass"));
    run("ALTER TABLE calm ADD CONSTRAINT calm_slug CHECK (slug <> ''), ALTER slug SET DEFAULT 'x', \
           ALTER slug SET STATISTICS 200");
    run("CREATE TABLE calm_ref (id int PRIMARY KEY)");
    run("ALTER TABLE calm ADD COLUMN ref int");
    run("ALTER TABLE calm DROP COLUMN ref");
    assert_eq!(recorded("calm"), 1, "a column added or dropped is recorded");
    run("DELETE FROM indexnow_changes");
    run("ALTER TABLE calm ADD CONSTRAINT calm_uid_ref FOREIGN KEY (id) REFERENCES calm_ref NOT VALID");
    run("ALTER TABLE calm DROP CONSTRAINT calm_slug");
    assert_eq!(recorded("calm"), 0);
    run("ALTER TABLE retyped ALTER slug TYPE varchar USING lower(slug)");
    assert_eq!(recorded("retyped"), 1);
    run("ALTER TABLE rekeyed DROP CONSTRAINT rekeyed_pkey, ADD PRIMARY KEY (uid)");
    assert_eq!(recorded("rekeyed"), 1);
    // (a page known by another key is announced once as changed: docs/capture.md, "Changing a
    // watched table")
    assert_eq!(
        pending(),
        "https://www.example.com/rekeyed/A changed\n\
         https://www.example.com/retyped/A moved\n\
         https://www.example.com/retyped/a created"
    );
}

/// A watch its maker could not derive is refused when it is made: a table the maker may trigger
/// but not read (the watch took no baseline, and announced every row once it could read), and a
/// key of an array type (a row's key did not read back from the JSON it is kept as).
#[pg_test]
fn a_watch_its_maker_could_not_derive_is_refused() {
    run("CREATE ROLE indexnow_test_blind");
    run("SELECT indexnow_grant_watching('indexnow_test_blind')");
    run("CREATE TABLE unread (id int PRIMARY KEY, slug text)");
    run("GRANT TRIGGER ON unread TO indexnow_test_blind");
    run("CREATE TABLE half_read (id int PRIMARY KEY, slug text, secret text)");
    run("GRANT TRIGGER ON half_read TO indexnow_test_blind");
    run("GRANT SELECT (id, slug) ON half_read TO indexnow_test_blind");
    run("CREATE TABLE read_by_column (id int PRIMARY KEY, slug text)");
    run("GRANT TRIGGER, SELECT (id, slug) ON read_by_column TO indexnow_test_blind");
    run("CREATE TABLE arrays (k int[] PRIMARY KEY, slug text)");
    install_error_catcher();
    run("SET LOCAL ROLE indexnow_test_blind");
    let cases = [
        ("SELECT indexnow_watch('unread', url => 'https://www.example.com/{slug}')", "indexnow_watch: permission denied for table public.unread: a watch reads its rows with the rights of the role that makes it, which needs SELECT on it"),
        ("SELECT indexnow_watch('half_read', url => 'https://www.example.com/{slug}')", "permission denied for table public.half_read"),
    ];
    assert_refused(&cases, Some("42501"));
    run("SELECT indexnow_watch('read_by_column', url => 'https://www.example.com/c/{slug}')");
    run("RESET ROLE");
    assert_refused(
        &[("SELECT indexnow_watch('arrays', url => 'https://www.example.com/a/{slug}')", "public.arrays's primary key column \"k\" is an array")],
        Some("22023"),
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_watches"), 1);
}

/// The queue keeps no row for a removal search engines accepted longer ago than the history is
/// kept (`indexnow.history_days`): only for what is pending, live, recent, or given by a row.
#[pg_test]
fn settled_removals_are_pruned_after_the_history_and_nothing_else() {
    site();
    run(
        "INSERT INTO pages (slug, title, status) VALUES ('old', 'T', 'published'), \
           ('recent', 'T', 'published'), ('live', 'T', 'published'), ('again', 'T', 'published')",
    );
    pushed();
    run("DELETE FROM pages WHERE slug IN ('old', 'recent', 'again')");
    pushed();
    run(
        "UPDATE indexnow_urls SET last_pushed_at = now() - interval '40 days' \
          WHERE url ~ '/th/(old|again|live)$'",
    );
    // Requested again since: pending, kept.
    run("SELECT indexnow_queue('https://www.example.com/th/again', 'gone')");
    assert_eq!(crate::send::prune_settled_removals(30), 1);
    assert_eq!(
        text("SELECT string_agg(url, ' ' ORDER BY url) FROM indexnow_urls").unwrap(),
        "https://www.example.com/th/again https://www.example.com/th/live \
         https://www.example.com/th/recent"
    );
    assert_eq!(crate::send::prune_settled_removals(30), 0);
}

/// The SQL blocks of the section `heading` of docs/capture.md, in order.
fn manual_blocks(heading: &str) -> Vec<String> {
    let manual = include_str!("../docs/capture.md");
    let section = manual
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("docs/capture.md has no section {heading:?}"));
    section
        .split("```sql\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_string())
        .collect()
}

/// docs/capture.md's Wagtail site (spec behaviour 24): its two blocks, the tables as Wagtail
/// makes them and the watch, run as they are, then the writes of the table under them, each
/// sending what the table says.
#[pg_test]
fn the_wagtail_example_of_the_manual_announces_what_wagtail_serves() {
    let blocks = manual_blocks("A Wagtail site");
    assert_eq!(blocks.len(), 2, "the tables, then the watch");
    run(&blocks[0]);
    run("SELECT indexnow_add_host('www.example.com', 'abcdefgh12')");
    run("SELECT indexnow_add_host('www.example.org', 'abcdefgh12')");
    run(
        "INSERT INTO django_content_type (app_label, model) VALUES ('wagtailcore', 'page'), \
           ('blog', 'blogpage')",
    );
    run("INSERT INTO wagtailcore_locale (language_code) VALUES ('en')");
    // A page as Wagtail writes one (its other columns at the values a new page has).
    run(
        "CREATE FUNCTION page(id int, path text, slug text, url_path text, live boolean) \
           RETURNS void LANGUAGE sql AS $$ \
           INSERT INTO wagtailcore_page (id, path, depth, numchild, title, slug, live, \
             has_unpublished_changes, url_path, seo_title, show_in_menus, search_description, \
             expired, content_type_id, locked, draft_title, translation_key, locale_id) \
           VALUES (id, path, length(path) / 4, 0, initcap(slug), slug, live, NOT live, url_path, \
             '', false, '', false, 1, false, initcap(slug), gen_random_uuid(), 1) $$",
    );
    run(
        "SELECT page(1, '0001', 'root', '/', true), \
                page(2, '00010001', 'home', '/home/', true), \
                page(3, '000100010001', 'blog', '/home/blog/', true), \
                page(4, '0001000100010001', 'first', '/home/blog/first/', true), \
                page(5, '0001000100010002', 'second', '/home/blog/second/', true), \
                page(6, '000100010002', 'about', '/home/about/', true)",
    );
    run(
        "INSERT INTO blog_blogpage VALUES (4, '2026-01-01', 'One', 'Body one'), \
           (5, '2026-01-02', 'Two', 'Body two')",
    );
    run(
        "INSERT INTO wagtailcore_site (hostname, port, is_default_site, root_page_id, site_name) \
           VALUES ('www.example.com', 443, true, 2, 'Site')",
    );
    run(&blocks[1]);
    assert_eq!(pending(), "", "the pages there are known, not announced");
    let site_urls = || {
        text(
            "SELECT string_agg(u.url, ' ' ORDER BY u.url) FROM indexnow_sources s \
               JOIN indexnow_urls u ON u.url_hash = s.url_hash \
               JOIN indexnow_watches w ON w.id = s.watch_id \
              WHERE w.tbl = 'wagtailcore_page'::regclass",
        )
        .unwrap()
    };
    assert_eq!(
        site_urls(),
        "https://www.example.com/ https://www.example.com/about/ \
         https://www.example.com/blog/ https://www.example.com/blog/first/ \
         https://www.example.com/blog/second/",
        "the tree's root (depth 1) is no page of the site"
    );

    // A draft saved, a lock, a child page added as a draft: nothing.
    run(
        "UPDATE wagtailcore_page SET draft_title = 'First (draft)', has_unpublished_changes = true, \
           latest_revision_created_at = now(), latest_revision_id = 10 WHERE id = 4",
    );
    run("UPDATE wagtailcore_page SET locked = true, locked_at = now(), locked_by_id = 1 WHERE id = 4");
    run("SELECT page(7, '0001000100010003', 'third', '/home/blog/third/', false)");
    run("UPDATE wagtailcore_page SET numchild = 3 WHERE id = 3");
    assert_eq!(pending(), "");

    // Published: the page and its body row.
    run(
        "UPDATE wagtailcore_page SET title = 'First!', last_published_at = now(), \
           live_revision_id = 11, has_unpublished_changes = false WHERE id = 4",
    );
    run("UPDATE blog_blogpage SET body = 'Body one, again' WHERE page_ptr_id = 4");
    assert_eq!(pending(), "https://www.example.com/blog/first/ changed");
    pushed();
    // The body alone, in SQL.
    run("UPDATE blog_blogpage SET body = 'Body two, fixed' WHERE page_ptr_id = 5");
    assert_eq!(pending(), "https://www.example.com/blog/second/ changed");
    pushed();

    // A restriction on the blog covers the pages below it (the draft was never public).
    run(
        "INSERT INTO wagtailcore_pageviewrestriction (password, page_id, restriction_type) \
           VALUES ('', 3, 'login')",
    );
    assert_eq!(
        pending(),
        "https://www.example.com/blog/ unpublished\n\
         https://www.example.com/blog/first/ unpublished\n\
         https://www.example.com/blog/second/ unpublished"
    );
    pushed();
    run("DELETE FROM wagtailcore_pageviewrestriction");
    assert_eq!(
        pending(),
        "https://www.example.com/blog/ created\n\
         https://www.example.com/blog/first/ created\n\
         https://www.example.com/blog/second/ created"
    );
    pushed();

    // The blog's slug changed: Wagtail rewrites the url_path of the page and of those below.
    run("UPDATE wagtailcore_page SET slug = 'news', url_path = '/home/news/' WHERE id = 3");
    run(
        "UPDATE wagtailcore_page SET url_path = replace(url_path, '/home/blog/', '/home/news/') \
          WHERE path LIKE '000100010001%' AND id <> 3",
    );
    assert_eq!(
        pending(),
        "https://www.example.com/blog/ moved\n\
         https://www.example.com/blog/first/ moved\n\
         https://www.example.com/blog/second/ moved\n\
         https://www.example.com/news/ created\n\
         https://www.example.com/news/first/ created\n\
         https://www.example.com/news/second/ created"
    );
    pushed();

    // The site's host name: every page of the site moves.
    run("UPDATE wagtailcore_site SET hostname = 'www.example.org'");
    derive();
    assert_eq!(
        text(
            "SELECT string_agg(host || ' ' || reason || ' ' || count, ', ' ORDER BY host) FROM ( \
               SELECT split_part(url, '/', 3) AS host, reason, count(*) FROM indexnow_urls \
                WHERE request_seq > settled_seq GROUP BY 1, 2) x"
        )
        .as_deref(),
        Some("www.example.com moved 5, www.example.org created 5")
    );
    pushed();

    // Expired (here by a write; with time alone, the e2e test
    // an_expiry_and_a_publication_moved_later_are_sent_at_their_times_without_a_write),
    // unpublished, deleted.
    run("UPDATE wagtailcore_page SET expire_at = now() - interval '1 minute' WHERE id = 6");
    run("UPDATE wagtailcore_page SET live = false WHERE id = 5");
    run("DELETE FROM blog_blogpage WHERE page_ptr_id = 4");
    run("DELETE FROM wagtailcore_page WHERE id = 4");
    assert_eq!(
        pending(),
        "https://www.example.org/about/ unpublished\n\
         https://www.example.org/news/first/ deleted\n\
         https://www.example.org/news/second/ unpublished"
    );
}

/// With `indexnow.track_columns` on, `indexnow_column_changes()` says which columns single-row
/// saves changed, how often alone, and how many of them were announced: what a site owner reads
/// to choose `ignore`. A save of ignored columns only is gated (nothing recorded, nothing
/// counted); a statement of several rows, and a save with tracking off, count nothing.
#[pg_test]
fn the_columns_saves_change_are_counted_with_their_announcements() {
    run(
        "CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, title text, body text, \
           draft_title text, views int NOT NULL DEFAULT 0, status text NOT NULL)",
    );
    run(
        "INSERT INTO posts VALUES (1, 'a', 'A', 'x', 'A', 0, 'published'), \
           (2, 'b', 'B', 'y', 'B', 0, 'draft')",
    );
    run(
        "SELECT indexnow_watch('posts', url => 'https://www.example.com/{slug}', \
           visible => $$status = 'published'$$, ignore => '{views}')",
    );
    run("UPDATE posts SET title = 'A1' WHERE id = 1"); // not tracked yet
    derive();
    run("SET LOCAL indexnow.track_columns = on");
    run("UPDATE posts SET title = 'A2' WHERE id = 1");
    derive();
    run("UPDATE posts SET draft_title = 'A (draft)' WHERE id = 1");
    derive();
    run("UPDATE posts SET draft_title = 'B (draft)', views = 3 WHERE id = 2"); // hidden page
    derive();
    run("UPDATE posts SET views = 7 WHERE id = 1"); // ignored alone: gated
    run("UPDATE posts SET status = 'draft' WHERE id = 1"); // unpublished: a removal
    run("UPDATE posts SET body = body || '!'"); // two rows
    derive();
    assert_eq!(
        text(
            "SELECT string_agg(concat_ws(' ', tbl, column_name, updates, changed_alone, \
                                         announced, ignored, read_by_expressions), E'\\n') \
               FROM indexnow_column_changes('posts')"
        )
        .as_deref(),
        Some(
            "posts draft_title 2 1 1 f f\n\
             posts status 1 1 1 f t\n\
             posts title 1 1 1 f f\n\
             posts views 1 0 0 t f"
        )
    );
    assert_eq!(
        count("SELECT count(*) FROM indexnow_column_changes()"),
        4,
        "every table when none is named"
    );
    // The UPDATE gate is not changed by it: a save of ignored columns records nothing.
    run("UPDATE posts SET views = 9 WHERE id = 2");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
}

/// A page's expiry and its body table stay out of what a tuning announces: a column added with a
/// default to a body table, and an `ignore` changed with `current_is_known`, announce no page
/// (with an expiry to come or a body row); the body edited alone still does.
#[pg_test]
fn a_body_table_and_an_expiry_are_taken_as_known_when_the_watch_is_tuned() {
    run(
        "CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, title text, views int, \
           expires timestamptz)",
    );
    run("CREATE TABLE bodies (page_id int PRIMARY KEY REFERENCES pages, body text)");
    run(
        "INSERT INTO pages VALUES (1, 'a', 'A', 0, now() + interval '1 day'), \
           (2, 'b', 'B', 0, NULL)",
    );
    run("INSERT INTO bodies VALUES (1, 'x'), (2, 'y')");
    let watch = |ignore: &str, known: bool| {
        run(&format!(
            "SELECT indexnow_watch('pages', url => 'https://www.example.com/{{slug}}', \
               ignore => '{ignore}', expire_at => 'expires', related => '{{bodies}}', \
               current_is_known => {known})"
        ))
    };
    watch("{views}", false);
    pushed();
    run("ALTER TABLE bodies ADD COLUMN summary text NOT NULL DEFAULT 'none'");
    assert_eq!(pending(), "", "a column added to the body table");
    watch("{views,title}", true);
    assert_eq!(pending(), "", "a changed ignore taken as known");
    run("UPDATE pages SET expires = now() + interval '2 days' WHERE id = 1");
    assert_eq!(pending(), "", "the expiry moved: no content");
    run("UPDATE bodies SET body = 'z' WHERE page_id = 2");
    assert_eq!(pending(), "https://www.example.com/b changed");
}

/// A page rescheduled into the future is withdrawn only when no other row gives its URL live:
/// a second row (here of another watched table) scheduled for later under a live page's URL
/// leaves the page announced, and waits for its time.
#[pg_test]
fn a_url_another_row_gives_live_is_not_withdrawn() {
    run("CREATE TABLE news (id int PRIMARY KEY, slug text NOT NULL, pub timestamptz)");
    run("CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, pub timestamptz)");
    for t in ["news", "posts"] {
        run(&format!(
            "SELECT indexnow_watch('{t}', url => 'https://www.example.com/{{slug}}', \
               publish_at => 'pub')"
        ));
    }
    run("INSERT INTO news VALUES (1, 'p', NULL)");
    pushed();
    run("INSERT INTO posts VALUES (1, 'p', now() + interval '1 day')");
    assert_eq!(pending(), "https://www.example.com/p changed");
    assert_eq!(
        count(
            "SELECT count(*) FROM indexnow_urls WHERE available_at > now() + interval '23 hours'"
        ),
        1
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_sources WHERE withdrawn"), 0);
}

/// One transaction is one announcement: what the derivation of one of its change sets queues is
/// held while its other change sets wait (a product derived, its prices not yet: the page would
/// be sent, and sent again once they were), in the senders' claim, `indexnow_status()`'s
/// `due_now` and `indexnow_explain()` alike; once the last is derived, it goes. A request of a
/// transaction whose change sets are all derived is not held.
#[pg_test]
fn a_transactions_requests_are_held_until_its_change_sets_are_all_derived() {
    site();
    run("SELECT indexnow_add_host('www.example.com', 'abcdefgh12')");
    run("CREATE TABLE notes (id int PRIMARY KEY, slug text NOT NULL)");
    run("SELECT indexnow_watch('notes', url => 'https://www.example.com/n/{slug}')");
    run("SET LOCAL indexnow.debounce = 0");
    // (two change sets of this transaction, of two tables: derived one at a time)
    run("INSERT INTO pages (slug, status) VALUES ('held', 'published')");
    run("INSERT INTO notes VALUES (1, 'n1')");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 2);
    let due_now = || count("SELECT due_now FROM indexnow_status() WHERE host = 'www.example.com'");
    assert_eq!(count("SELECT indexnow_derive(1)"), 1);
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"),
        1,
        "the first change set is derived"
    );
    assert_eq!(due_now(), 0, "held while the transaction's other change set waits");
    assert!(
        text(
            "SELECT says FROM indexnow_explain('https://www.example.com/th/held') \
              WHERE topic = 'due'"
        )
        .is_some_and(|says| says.contains("has change sets not derived yet")),
        "explain says it is held"
    );
    assert_eq!(count("SELECT indexnow_derive()"), 1);
    assert_eq!(due_now(), 2, "the last change set derived: all of it goes");
    // (a request of a transaction that recorded nothing else is not held)
    run("SELECT indexnow_queue('https://www.example.com/direct')");
    assert_eq!(due_now(), 3);
}

/// A change of a whole big table (one whose rows and sources are more than a change set's
/// 10,000 keys: here an ALTER that may change rows, after writes no trigger saw) is derived as
/// keyed change sets of every key of the table and of its sources, in key order, with the
/// recording transaction and age of the whole-table change: what is derived is what the whole
/// table's derivation finds (a row changed, a row gone, a row new), a slice at a time.
#[pg_test]
fn a_whole_table_change_of_a_big_table_is_derived_as_keyed_change_sets() {
    run("SELECT indexnow_add_host('www.example.com', 'abcdefgh12')");
    run("CREATE TABLE big (id int PRIMARY KEY, slug text NOT NULL)");
    run("INSERT INTO big SELECT i, 'p' || i FROM generate_series(1, 25000) i");
    run("SELECT indexnow_watch('big', url => 'https://www.example.com/b/{slug}')");
    pushed();
    run("SET LOCAL session_replication_role = replica");
    run("UPDATE big SET slug = slug || '-x' WHERE id % 5000 = 0");
    run("DELETE FROM big WHERE id > 24990");
    run("INSERT INTO big SELECT i, 'n' || i FROM generate_series(30001, 30003) i");
    run("SET LOCAL session_replication_role = origin");
    run("ALTER TABLE big ALTER slug SET DATA TYPE varchar");
    let whole = "SELECT count(*) FROM indexnow_changes WHERE keys IS NULL";
    assert_eq!(count(whole), 1);
    let recorded = text("SELECT xact::text || recorded_at::text FROM indexnow_changes").unwrap();
    assert_eq!(count("SELECT indexnow_derive(1)"), 1);
    assert_eq!(count(whole), 0, "the whole-table change set is unfolded");
    assert_eq!(
        count("SELECT count(*) FROM indexnow_changes"),
        3,
        "25,003 keys (24,993 rows, 10 sources of rows gone): three change sets"
    );
    assert_eq!(
        count("SELECT sum(jsonb_array_length(keys)) FROM indexnow_changes"),
        25_003
    );
    assert_eq!(
        text("SELECT string_agg(DISTINCT xact::text || recorded_at::text, ',') FROM indexnow_changes"),
        Some(recorded),
        "each keyed change set is of the transaction and age of the whole-table one"
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM indexnow_changes c \
              WHERE (keys -> 0) < (SELECT p.keys -> -1 FROM indexnow_changes p \
                                    WHERE p.id < c.id ORDER BY p.id DESC LIMIT 1)"
        ),
        0,
        "in key order"
    );
    assert_eq!(
        count("SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"),
        0,
        "nothing is derived by unfolding"
    );
    derive();
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
    assert_eq!(
        text(
            "SELECT string_agg(reason || ' ' || n, ', ' ORDER BY reason) FROM ( \
               SELECT reason, count(*) AS n FROM indexnow_urls \
                WHERE request_seq > settled_seq GROUP BY reason) x"
        )
        .unwrap(),
        "created 7, deleted 10, moved 4",
        "4 pages moved (and their new URLs created), 10 gone (one of them moved first), 3 new"
    );
}

/// A whole-table change of a big table with a watch that cannot derive now (its maker lost a
/// privilege) is derived as keyed change sets for the other watch, and owed whole by that one:
/// kept (not unfolded again on every pass) until it can derive, then derived.
#[pg_test]
fn a_big_tables_watch_that_cannot_derive_owes_the_whole_table_and_the_others_go_on() {
    run("CREATE ROLE indexnow_test_lender");
    run("GRANT USAGE, CREATE ON SCHEMA public TO indexnow_test_lender");
    run("SELECT indexnow_grant_watching('indexnow_test_lender')");
    run("CREATE TABLE shelves (id int PRIMARY KEY, slug text NOT NULL)");
    run("INSERT INTO shelves VALUES (1, 'x')");
    run("CREATE TABLE wide (id int PRIMARY KEY, shelf int REFERENCES shelves, slug text NOT NULL)");
    run("INSERT INTO wide SELECT i, 1, 'p' || i FROM generate_series(1, 12000) i");
    run("ALTER TABLE wide OWNER TO indexnow_test_lender");
    run("GRANT SELECT, TRIGGER ON shelves TO indexnow_test_lender");
    run("SELECT indexnow_watch('wide', url => 'https://www.example.com/w/{slug}')");
    run("SET LOCAL ROLE indexnow_test_lender");
    run(
        "SELECT indexnow_watch('wide', url_sql => $$'https://www.example.com/' || \
           (SELECT s.slug FROM shelves s WHERE s.id = shelf) || '/' || slug$$, \
           related => '{shelves}')",
    );
    run("RESET ROLE");
    pushed();
    let (plain, lent) = (
        count("SELECT min(id) FROM indexnow_watches"),
        count("SELECT max(id) FROM indexnow_watches"),
    );
    run("REVOKE SELECT ON shelves FROM indexnow_test_lender");
    run("SET LOCAL session_replication_role = replica");
    run("UPDATE wide SET slug = 'q' || id WHERE id <= 2");
    run("SET LOCAL session_replication_role = origin");
    run("ALTER TABLE wide ALTER slug SET DATA TYPE varchar");
    assert_eq!(count("SELECT indexnow_derive(1)"), 1);
    assert_eq!(
        text("SELECT string_agg(coalesce(keys::text, 'whole') || ' ' || watches::text, ', ' ORDER BY id) \
               FROM (SELECT id, CASE WHEN keys IS NOT NULL THEN 'keyed' END AS keys, watches \
                       FROM indexnow_changes) c"),
        Some(format!("keyed {{{plain}}}, keyed {{{plain}}}, whole {{{lent}}}")),
        "the watch that cannot derive owes the whole table; the other's keys are unfolded"
    );
    assert_eq!(
        pending(),
        "https://www.example.com/w/p1 moved\n\
         https://www.example.com/w/p2 moved\n\
         https://www.example.com/w/q1 created\n\
         https://www.example.com/w/q2 created"
    );
    assert_eq!(
        count("SELECT count(*) FROM indexnow_changes WHERE keys IS NULL"),
        1,
        "still owed, and not unfolded again"
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 1);
    run("GRANT SELECT ON shelves TO indexnow_test_lender");
    assert_eq!(
        pending_like("https://www.example.com/x/%"),
        "https://www.example.com/x/p1 moved\n\
         https://www.example.com/x/p2 moved\n\
         https://www.example.com/x/q1 created\n\
         https://www.example.com/x/q2 created"
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0);
}

/// A table of 6,000 rows watched twice (12,000 sources, of 6,000 keys) has fewer keys than a
/// change set holds: its whole-table change is derived whole, in one statement.
#[pg_test]
fn a_table_of_fewer_keys_than_a_change_set_is_derived_whole() {
    run("CREATE TABLE twice (id int PRIMARY KEY, slug text NOT NULL)");
    run("INSERT INTO twice SELECT i, 'p' || i FROM generate_series(1, 6000) i");
    run("SELECT indexnow_watch('twice', url => 'https://www.example.com/a/{slug}')");
    run("SELECT indexnow_watch('twice', url => 'https://www.example.com/b/{slug}')");
    pushed();
    assert_eq!(count("SELECT count(*) FROM indexnow_sources"), 12_000);
    run("ALTER TABLE twice ALTER slug SET DATA TYPE varchar");
    assert_eq!(count("SELECT indexnow_derive(1)"), 1);
    assert_eq!(count("SELECT count(*) FROM indexnow_changes"), 0, "derived whole");
}

/// A source restored from a dump of 0.7.0 or earlier holds its fingerprint as md5 text, its
/// `fingerprint64` NULL (`kept_fingerprint` in src/derive/statements.rs): the derivation reads the
/// text as the same 8 bytes, so the restored rows announce nothing, and a row changed since is
/// still a change; derived again, a source drops the text.
#[pg_test]
fn a_source_restored_from_an_older_dump_keeps_its_fingerprint() {
    run("CREATE TABLE olden (id int PRIMARY KEY, slug text NOT NULL, body text)");
    run("INSERT INTO olden VALUES (1, 'a', 'x'), (2, 'b', 'y')");
    run("SELECT indexnow_watch('olden', url => 'https://www.example.com/o/{slug}')");
    pushed();
    // As a 0.7.0 dump's COPY leaves them: the md5 as text (its first 16 hex digits are the 8
    // bytes), the URL and host, no fingerprint64.
    run("UPDATE indexnow_sources \
            SET fingerprint = lpad(to_hex(fingerprint64), 16, '0') || repeat('0', 16), \
                fingerprint64 = NULL, url = 'https://www.example.com/o/?', host = 'www.example.com'");
    assert_eq!(
        count("SELECT sum(created + changed + gone)::int8 FROM indexnow_reconcile('olden')"),
        0
    );
    assert_eq!(pending(), "");
    run("UPDATE olden SET body = 'z' WHERE id = 2");
    assert_eq!(pending(), "https://www.example.com/o/b changed");
    assert_eq!(
        text("SELECT string_agg(row_key::text, ' ' ORDER BY row_key) FROM indexnow_sources \
               WHERE fingerprint IS NOT NULL OR url IS NOT NULL")
        .as_deref(),
        Some("[1]"),
        "the source derived again dropped the text"
    );
}

/// A whole table is read a fetch of 10,000 rows at a time (`_indexnow_watch_rows()` with no keys,
/// `RowCursor` in src/derive/owner.rs): every row once across the fetches, each as its watch
/// derives it, and a watch of the whole table takes every public row as known.
#[pg_test]
fn a_whole_table_is_read_in_fetches_every_row_once() {
    run("CREATE TABLE fetched (id int PRIMARY KEY, slug text NOT NULL, live boolean NOT NULL)");
    run("INSERT INTO fetched SELECT i, 'p' || i, i % 10 <> 0 FROM generate_series(1, 25001) i");
    run("SELECT indexnow_watch('fetched', url => 'https://www.example.com/f/{slug}', \
                               visible => 'live')");
    assert_eq!(count("SELECT count(*) FROM indexnow_sources"), 22_501);
    let id = count("SELECT id::int8 FROM indexnow_watches WHERE tbl = 'fetched'::regclass");
    assert_eq!(
        text(&format!(
            "SELECT count(*) || ' ' || count(DISTINCT row_key) || ' ' || count(*) FILTER (WHERE vis) \
                    || ' ' || count(DISTINCT fp) || ' ' || min(url) \
               FROM _indexnow_watch_rows({id}, NULL)"
        ))
        .as_deref(),
        Some("25001 25001 22501 25001 https://www.example.com/f/p1")
    );
    // Stopped early (a LIMIT): the cursor is left to the transaction, which goes on.
    assert_eq!(
        count(&format!(
            "SELECT count(*) FROM (SELECT * FROM _indexnow_watch_rows({id}, NULL) LIMIT 15000) r"
        )),
        15_000
    );
    assert_eq!(count("SELECT count(*) FROM fetched"), 25_001);
}

/// A whole-table change of a big table whose sources were derived under another key (its key
/// column retyped: `[5]` is `["5"]` now) is derived whole: a keyed derivation would read `[5]`
/// as the row `["5"]` and leave the source of `[5]` behind, its URL never given up.
#[pg_test]
fn a_big_table_whose_key_changed_is_derived_whole() {
    run("CREATE TABLE rekeyed (id int PRIMARY KEY, slug text NOT NULL)");
    run("INSERT INTO rekeyed SELECT i, 'p' || i FROM generate_series(1, 12000) i");
    run("SELECT indexnow_watch('rekeyed', url => 'https://www.example.com/r/{slug}')");
    pushed();
    run("ALTER TABLE rekeyed ALTER id SET DATA TYPE text");
    assert_eq!(count("SELECT count(*) FROM indexnow_changes WHERE keys IS NULL"), 1);
    assert_eq!(count("SELECT indexnow_derive(1)"), 1);
    assert_eq!(
        count("SELECT count(*) FROM indexnow_changes"),
        0,
        "derived whole, not unfolded"
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM indexnow_sources \
              WHERE pg_catalog.jsonb_typeof(row_key -> 0) <> 'string'"
        ),
        0,
        "no source is left under the old key"
    );
    assert_eq!(count("SELECT count(*) FROM indexnow_sources"), 12_000);
}

/// The rows an `EXPLAIN (ANALYZE, FORMAT JSON)` plan's nodes produced and filtered out, over all
/// their loops: the executor's work, which grows with the rows a statement handles when every
/// node reads each row a bounded number of times, and with their square when a node reads a
/// whole table or CTE again for each row of another.
fn rows_handled(plan: &serde_json::Value) -> f64 {
    let number = |key: &str| plan.get(key).and_then(|v| v.as_f64()).unwrap_or(0.0);
    let own = (number("Actual Rows")
        + number("Rows Removed by Filter")
        + number("Rows Removed by Join Filter")
        + number("Rows Removed by Index Recheck"))
        * number("Actual Loops").max(1.0);
    let children = plan
        .get("Plans")
        .and_then(|p| p.as_array())
        .map(|plans| plans.iter().map(rows_handled).sum())
        .unwrap_or(0.0);
    own + children
}

/// Runs `sql` with `args` under `EXPLAIN (ANALYZE, FORMAT JSON)` and returns [`rows_handled`].
fn rows_handled_by(sql: &str, args: &[pgrx::datum::DatumWithOid]) -> f64 {
    let explained = Spi::get_one_with_args::<pgrx::Json>(
        &format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"),
        args,
    )
    .unwrap()
    .unwrap();
    rows_handled(&explained.0[0]["Plan"])
}

/// A table that held no rows when it was last vacuumed counts as empty to the planner, however
/// many rows it has now: its statistics say pages but no rows (`reltuples` 0), and the estimate
/// is the pages it has times the rows a page had. Planned so, a join of the queue with a set of
/// rows made a nested loop that read the whole set again for each queue row, and the SQL-level
/// tests' server (whose tables hold only rolled-back rows) made one test's derivation of 50,000
/// rows take hours. The derivation's statement and the sitemap read the queue through each row's
/// key instead (`crate::derive::statements`): with such statistics, every step of a page's life
/// (moved while told, moved while never told, deleted) and a sitemap page handle rows in
/// proportion to the pages, not to their square; so do `indexnow_coverage()` and a claim's re-read
/// of its rows (`send::sql::STILL_AS_CLAIMED`), which look up each row's queue row by its key,
/// and the settle of an answer, planned without nested loops (`plan_cache::write_generic`).
#[pg_test]
fn the_statements_stay_linear_when_the_statistics_take_the_queue_for_empty() {
    const PAGES: f64 = 2_000.0;
    let taken_for_empty = || {
        run("UPDATE pg_class SET relpages = 1000, reltuples = 0 \
              WHERE relname LIKE 'indexnow%' AND relkind IN ('r', 'i')");
    };
    taken_for_empty();
    run("CREATE TABLE items (id int PRIMARY KEY, slug text NOT NULL)");
    run("SELECT indexnow_watch('items', url => 'https://www.example.com/{slug}')");
    let id = Spi::get_one::<i32>("SELECT id FROM indexnow_watches WHERE tbl = 'items'::regclass")
        .unwrap()
        .unwrap();
    let ext = crate::extension::schema();
    let derive_keys = crate::derive::generated::of(&ext, id).unwrap().derive_keys.clone();
    let keys = || {
        Spi::get_one::<pgrx::JsonB>(
            "SELECT coalesce(jsonb_agg(jsonb_build_array(id)), '[]') FROM generate_series(1, 2000) id",
        )
        .unwrap()
        .unwrap()
    };
    let derive_every_key = |what: &str| {
        taken_for_empty();
        let rows = rows_handled_by(&derive_keys, &[keys().into(), "deleted".into()]);
        (what.to_string(), rows)
    };
    let mut handled = vec![];
    run("SET LOCAL indexnow.derive_at_write = 0");
    run("INSERT INTO items SELECT g, 'p' || g FROM generate_series(1, 2000) g");
    handled.push(derive_every_key("created"));
    pushed();
    run("UPDATE items SET slug = slug || '-told'");
    handled.push(derive_every_key("moved, told"));
    run("UPDATE items SET slug = slug || '-again'");
    handled.push(derive_every_key("moved, never told"));
    run("DELETE FROM items");
    handled.push(derive_every_key("deleted"));
    run("INSERT INTO items SELECT g, 'q' || g FROM generate_series(1, 2000) g");
    handled.push(derive_every_key("created again"));
    taken_for_empty();
    handled.push((
        "a sitemap page".into(),
        rows_handled_by(
            &format!("{} ORDER BY url OFFSET 0 LIMIT 50000", crate::sitemap::public_urls(&ext)),
            &["www.example.com".into()],
        ),
    ));
    taken_for_empty();
    handled.push((
        "coverage".into(),
        rows_handled_by(&crate::coverage::statement(), &crate::coverage::arguments(None)),
    ));
    // (every queue row claimed: the arrays a sender passes, read by the statement itself)
    let re_read = crate::send::sql::STILL_AS_CLAIMED
        .replace("$1", "(SELECT array_agg(url_hash ORDER BY url) FROM @extschema@.indexnow_urls)")
        .replace("$2", "(SELECT array_agg(request_seq ORDER BY url) FROM @extschema@.indexnow_urls)")
        .replace("@extschema@", &ext);
    taken_for_empty();
    handled.push(("a claim's re-read".into(), rows_handled_by(&re_read, &[])));
    // The sender's settle of an answer, by the rows' ctid and by their key, planned as the
    // sender plans it (a generic plan: the arrays' length unknown).
    let arrays = |sql: &str| {
        let column = |c: &str| {
            format!("ARRAY(SELECT {c} FROM @extschema@.indexnow_urls ORDER BY url)")
        };
        sql.replace("$1", &column("url_hash"))
            .replace("$2", &column("changed_at"))
            .replace("$3", &column("request_seq"))
            .replace("$4", &column("reason"))
            .replace("$5", &column("ctid::text"))
            .replace("@extschema@", &ext)
    };
    use crate::send::sql::{settle, Locate, Settle};
    for (what, locate) in [("a settle by ctid", Locate::ByTid), ("a settle by key", Locate::ByKey)] {
        let statement = arrays(&settle(Settle::Accepted, locate));
        taken_for_empty();
        let rows = crate::guc::with_settings(&crate::plan_cache::settings_of_generic(), || {
            rows_handled_by(&statement, &[])
        });
        handled.push((what.into(), rows));
    }
    // The queue held what each step was about (2,000 new URLs a step: 8,000 rows at most).
    assert!(count("SELECT count(*) FROM indexnow_urls") >= 8_000);
    for (what, rows) in &handled {
        assert!(
            *rows < 200.0 * PAGES,
            "{what}: {rows} rows handled for {PAGES} pages (all: {handled:?})"
        );
    }
}
