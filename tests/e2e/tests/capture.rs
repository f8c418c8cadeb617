//! Capture on a real cluster: what needs commits, real client programs, or DROP EXTENSION.

use indexnow_e2e::{count, queued, sigkill, wait_until, Cluster, Options};

const SECONDS: fn(u64) -> std::time::Duration = std::time::Duration::from_secs;
use postgres::Client;

fn site(cluster: &Cluster) -> Client {
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE TABLE pages (id serial PRIMARY KEY, slug text, title text, body text, \
           status text NOT NULL DEFAULT 'draft', updated_at timestamptz DEFAULT now());
         SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{slug}', \
           visible => $$status = 'published'$$);",
    )
    .unwrap();
    db
}

/// Publishes page `slug` and marks what is pending as pushed, as a push after the save would (in a
/// transaction of its own: a later clock than the save's; the save derived first, as a sender
/// derives what was recorded before it claims).
fn publish_and_push(db: &mut Client, slug: &str) {
    db.execute(
        "INSERT INTO pages (slug, status) VALUES ($1, 'published')",
        &[&slug],
    )
    .unwrap();
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    db.batch_execute(
        "UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
           last_pushed_at = now() WHERE request_seq > settled_seq",
    )
    .unwrap();
}

#[test]
fn copy_through_psql_is_caught() {
    // (no worker: it would derive the change sets before they are counted)
    let cluster = Cluster::start(Options {
        preload: false,
        conf: vec![],
    });
    let mut db = site(&cluster);
    let csv = cluster.dir.join("pages.csv");
    let rows: String = (1..=500).map(|i| format!("p{i},T,B,published\n")).collect();
    std::fs::write(&csv, rows).unwrap();
    cluster.psql(
        "site",
        &format!(
            "\\copy pages (slug, title, body, status) FROM '{}' CSV",
            csv.display()
        ),
    );
    // 500 rows are a bulk statement: recorded at write time, derived after the commit.
    // indexnow_status() shows them waiting; indexnow_derive() derives them.
    let waiting = count(
        &mut db,
        "SELECT max(changes_waiting) FROM indexnow_status()",
    );
    assert_eq!(waiting, 500);
    count(&mut db, "SELECT indexnow_derive()");
    let pending = count(
        &mut db,
        "SELECT sum(pending)::bigint FROM indexnow_status()",
    );
    assert_eq!(pending, 500);
    let n = count(
        &mut db,
        "SELECT count(*) FROM indexnow_urls WHERE reason = 'created'",
    );
    assert_eq!(n, 500);
}

#[test]
fn a_rolled_back_update_queues_nothing() {
    let cluster = Cluster::start(Options::default());
    let mut db = site(&cluster);
    let mut other = cluster.connect("site");
    publish_and_push(&mut db, "a");
    let mut tx = db.transaction().unwrap();
    tx.batch_execute("UPDATE pages SET slug = 'b', body = 'x'")
        .unwrap();
    // Uncommitted: no other session (the worker among them) sees the requests.
    assert!(queued(&mut other).is_empty());
    tx.rollback().unwrap();
    assert!(queued(&mut db).is_empty());
    let rows = count(&mut db, "SELECT count(*) FROM indexnow_urls");
    assert_eq!(rows, 1);
}

#[test]
fn a_url_that_cannot_be_built_warns_and_the_statement_succeeds() {
    let cluster = Cluster::start(Options::default());
    let _db = site(&cluster);
    // (derived in the writing statement: its WARNING goes to the writer; recorded, the default,
    // the worker's derivation logs it: a_row_that_cannot_be_derived_is_logged_by_the_worker)
    let out = cluster.psql(
        "site",
        "SET indexnow.derive_at_write = 100; \
         INSERT INTO pages (slug, status) VALUES (NULL, 'published'), ('ok', 'published'), \
             ('http://x', 'draft')",
    );
    assert!(out.contains("INSERT 0 3"), "{out}");
    // One WARNING for the statement, naming the row.
    assert!(
        out.contains(
            "WARNING:  indexnow: 1 row of public.pages skipped for https://www.example.com/th/{slug} \
             ([1]: its URL could not be built"
        ),
        "{out}"
    );
    assert_eq!(out.matches("WARNING:").count(), 1, "{out}");
}

/// Recorded, as saves are by default, a row whose URL cannot be built costs the writer nothing:
/// no WARNING reaches it, and the worker that derives the save logs one, naming the row.
#[test]
fn a_row_that_cannot_be_derived_is_logged_by_the_worker() {
    let cluster = Cluster::start(Options::default());
    let _db = site(&cluster);
    let out = cluster.psql(
        "site",
        "INSERT INTO pages (slug, status) VALUES (NULL, 'published'), ('ok', 'published')",
    );
    assert!(out.contains("INSERT 0 2"), "{out}");
    assert!(!out.contains("WARNING"), "{out}");
    wait_until("the worker logs the row it skipped", SECONDS(30), || {
        cluster.log().contains(
            "WARNING:  indexnow: 1 row of public.pages skipped for https://www.example.com/th/{slug} \
             ([1]: its URL could not be built",
        )
    });
}

#[test]
fn a_failing_watch_warns_and_the_write_succeeds() {
    let cluster = Cluster::start(Options::default());
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE TABLE items (id int PRIMARY KEY, n int);
         SELECT indexnow_watch('items', url_sql => $$'https://www.example.com/i/' || (100 / n)$$);",
    )
    .unwrap();
    let out = cluster.psql(
        "site",
        "SET indexnow.derive_at_write = 100; INSERT INTO items VALUES (1, 0)",
    );
    assert!(out.contains("INSERT 0 1"), "{out}");
    assert!(
        out.contains("WARNING:  indexnow: 1 row of public.items skipped for"),
        "{out}"
    );
    assert!(out.contains("[1]: division by zero"), "{out}");
    // The generated SQL is not repeated in the message.
    assert!(!out.contains("WITH k AS"), "{out}");
    assert!(
        out.contains(
            "HINT:  Only these rows were skipped; a write that caused this succeeded. Fix the watch \
             with indexnow_watch()"
        ),
        "{out}"
    );
}

#[test]
fn drop_extension_refuses_while_a_table_is_watched() {
    let cluster = Cluster::start(Options::default());
    let mut db = site(&cluster);
    let err = db.batch_execute("DROP EXTENSION indexnow").unwrap_err();
    let msg = err
        .as_db_error()
        .map(|e| format!("{} {:?}", e.message(), e.detail()))
        .unwrap();
    assert!(
        msg.contains("cannot drop extension indexnow because other objects depend on it"),
        "{msg}"
    );
    assert!(
        msg.contains("trigger indexnow_capture_insert on table pages"),
        "{msg}"
    );
    // CASCADE takes the triggers with it: the table stays writable.
    db.batch_execute("DROP EXTENSION indexnow CASCADE").unwrap();
    db.batch_execute("UPDATE pages SET body = 'after'; INSERT INTO pages (slug) VALUES ('z')")
        .unwrap();
    let triggers = count(
        &mut db,
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pages'::regclass",
    );
    assert_eq!(triggers, 0);
}

#[test]
fn unwatch_then_drop_extension_leaves_a_clean_table() {
    let cluster = Cluster::start(Options::default());
    let mut db = site(&cluster);
    db.batch_execute("SELECT indexnow_unwatch('pages'); DROP EXTENSION indexnow;")
        .unwrap();
    db.batch_execute("INSERT INTO pages (slug) VALUES ('z')")
        .unwrap();
}

#[test]
fn pg_dump_and_restore_keep_the_watch_working() {
    let cluster = Cluster::start(Options::default());
    let mut db = site(&cluster);
    publish_and_push(&mut db, "a");
    let mut restored = cluster.dump_and_restore("site", "restored");
    restored
        .batch_execute("UPDATE pages SET slug = 'b'")
        .unwrap();
    assert_eq!(
        queued(&mut restored),
        vec![
            "https://www.example.com/th/a moved",
            "https://www.example.com/th/b created"
        ]
    );
}

/// A partitioned table watched, and one of its partitions watched on its own: the dump restores
/// (the capture triggers are the dump's, not made again by the event triggers on the way) and both
/// watches capture in the restored database.
#[test]
fn pg_dump_and_restore_keep_watched_partitions_working() {
    let cluster = Cluster::start(Options::default());
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE TABLE parts (id int PRIMARY KEY, slug text NOT NULL) PARTITION BY RANGE (id);
         CREATE TABLE parts_a PARTITION OF parts FOR VALUES FROM (0) TO (10);
         INSERT INTO parts VALUES (1, 'x');
         SELECT indexnow_watch('parts', url => 'https://www.example.com/{slug}');
         SELECT indexnow_watch('parts_a', url => 'https://www.example.com/a/{slug}');",
    )
    .unwrap();
    let mut restored = cluster.dump_and_restore("site", "restored");
    restored
        .batch_execute(
            "SELECT indexnow_derive(); \
             UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
               last_pushed_at = now() WHERE request_seq > settled_seq; \
             UPDATE parts SET slug = 'y'",
        )
        .unwrap();
    assert_eq!(
        queued(&mut restored),
        vec![
            "https://www.example.com/a/x moved",
            "https://www.example.com/a/y created",
            "https://www.example.com/x moved",
            "https://www.example.com/y created"
        ]
    );
}

/// The same trees, and a related partition written through its parent, dumped in the custom
/// format and restored by `pg_restore -j 2` (tables, data and triggers restored by parallel
/// sessions): every table has the capture triggers it had, and writes through the parents are
/// captured for the watches below them.
#[test]
fn pg_restore_in_parallel_keeps_watched_and_related_trees_working() {
    // (no worker: what the restore records stays to be seen)
    let cluster = Cluster::start(Options {
        preload: false,
        conf: vec![],
    });
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE TABLE parts (id int PRIMARY KEY, slug text NOT NULL) PARTITION BY RANGE (id);
         CREATE TABLE parts_a PARTITION OF parts FOR VALUES FROM (0) TO (10);
         CREATE TABLE parts_b PARTITION OF parts FOR VALUES FROM (10) TO (20);
         INSERT INTO parts VALUES (1, 'x'), (11, 'z');
         SELECT indexnow_watch('parts_a', url => 'https://www.example.com/a/{slug}');
         CREATE TABLE shelves (code text PRIMARY KEY, name text) PARTITION BY LIST (code);
         CREATE TABLE shelves_x PARTITION OF shelves FOR VALUES IN ('x');
         CREATE TABLE books (id int PRIMARY KEY, slug text NOT NULL, \
           shelf text NOT NULL REFERENCES shelves_x (code));
         INSERT INTO shelves VALUES ('x', 'ex');
         INSERT INTO books VALUES (1, 'one', 'x');
         SELECT indexnow_watch('books', url_sql => $$'https://www.example.com/' || \
           (SELECT s.name FROM shelves_x s WHERE s.code = shelf) || '/' || slug$$, \
           related => '{shelves_x}');",
    )
    .unwrap();
    let triggers = |db: &mut Client| -> Vec<String> {
        db.query(
            "SELECT tgrelid::regclass::text || ' ' || count(*) FROM pg_trigger \
              WHERE tgname LIKE 'indexnow_capture_%' GROUP BY tgrelid ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    let before = triggers(&mut db);
    assert_eq!(before.len(), 5, "{before:?}");
    let dump = cluster.dir.join("site.dump");
    cluster.client_program(
        "pg_dump",
        &["-d", "site", "-Fc", "-f", dump.to_str().unwrap()],
    );
    cluster
        .connect("postgres")
        .batch_execute("CREATE DATABASE restored")
        .unwrap();
    cluster.client_program(
        "pg_restore",
        &[
            "-j",
            "2",
            "--exit-on-error",
            "-d",
            "restored",
            dump.to_str().unwrap(),
        ],
    );
    let mut restored = cluster.connect("restored");
    assert_eq!(triggers(&mut restored), before);
    // The restore's ALTERs (keys, foreign keys, partitions attached) changed no row of what was
    // dumped: nothing to derive (a derivation racing another job's load of the rows or of
    // indexnow_sources took every row for new, or every page for removed). In order, as a
    // restore without -j makes them, too.
    let recorded = "SELECT count(*) FROM indexnow_changes";
    assert_eq!(count(&mut restored, recorded), 0);
    cluster
        .connect("postgres")
        .batch_execute("CREATE DATABASE restored_in_order")
        .unwrap();
    cluster.client_program(
        "pg_restore",
        &[
            "--exit-on-error",
            "-d",
            "restored_in_order",
            dump.to_str().unwrap(),
        ],
    );
    let mut in_order = cluster.connect("restored_in_order");
    assert_eq!(count(&mut in_order, recorded), 0);
    restored
        .batch_execute(
            "SELECT indexnow_derive(); \
             UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
               last_pushed_at = now() WHERE request_seq > settled_seq; \
             UPDATE parts SET slug = slug || '2'; \
             UPDATE shelves SET name = 'ex2'",
        )
        .unwrap();
    assert_eq!(
        queued(&mut restored),
        vec![
            "https://www.example.com/a/x moved",
            "https://www.example.com/a/x2 created",
            "https://www.example.com/ex/one moved",
            "https://www.example.com/ex2/one created"
        ]
    );
}

#[test]
fn a_repeatable_read_writer_loses_no_capture_when_a_sender_touched_the_url() {
    let cluster = Cluster::start(Options::default());
    let mut db = site(&cluster);
    publish_and_push(&mut db, "a");
    let mut writer = cluster.connect("site");
    let mut tx = writer
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .start()
        .unwrap();
    tx.batch_execute("SELECT count(*) FROM pages").unwrap(); // the snapshot is taken
                                                             // A sender updates the URL's queue row after that snapshot (a lease, a settle).
    db.batch_execute("UPDATE indexnow_urls SET claimed_until = NULL")
        .unwrap();
    // The save at REPEATABLE READ is recorded, not derived (an upsert of that row would fail with
    // a serialization error: the capture was a WARNING and the edit was never sent).
    tx.batch_execute("UPDATE pages SET body = 'edited' WHERE slug = 'a'")
        .unwrap();
    tx.commit().unwrap();
    count(&mut db, "SELECT indexnow_derive()");
    assert_eq!(
        queued(&mut db),
        vec!["https://www.example.com/th/a changed"]
    );
}

#[test]
fn sigkill_mid_derivation_loses_nothing() {
    let cluster = Cluster::start(Options::default());
    let mut db = site(&cluster);
    // 80,000 rows: eight change sets, which the worker derives one transaction each.
    db.batch_execute(
        "INSERT INTO pages (slug, status) SELECT 'p' || g, 'published' FROM generate_series(1, 80000) g",
    )
    .unwrap();
    wait_until("the worker is deriving", SECONDS(60), || {
        let left = count(&mut db, "SELECT count(*) FROM indexnow_changes");
        left > 0 && left < 8
    });
    let pid: i32 = db
        .query_one(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'indexnow worker' LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    sigkill(pid);
    drop(db);
    // The postmaster restarts every process; the worker derives what is left.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut connected = None;
    wait_until("the server accepts connections again", SECONDS(120), || {
        connected = postgres::Client::connect(&cluster.conninfo("site"), postgres::NoTls).ok();
        connected.is_some()
    });
    let mut db = connected.unwrap();
    // (a debug build beside three other versions' suites derived 10,000 rows in more than 3 s)
    wait_until("every change set is derived", SECONDS(300), || {
        count(&mut db, "SELECT count(*) FROM indexnow_changes") == 0
    });
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_urls"), 80_000);
    assert_eq!(
        count(&mut db, "SELECT count(*) FROM indexnow_sources"),
        80_000
    );
    assert!(cluster.log().contains("was terminated by signal 9"));
}

#[test]
fn the_worker_derives_bulk_statements_while_sending_is_paused() {
    let cluster = Cluster::start(Options {
        conf: vec![
            "indexnow.enabled = off".into(),
            "indexnow.naptime = '200ms'".into(),
        ],
        ..Options::default()
    });
    let mut db = site(&cluster);
    db.batch_execute(
        "INSERT INTO pages (slug, status) SELECT 'p' || g, 'published' FROM generate_series(1, 500) g",
    )
    .unwrap();
    // No reader is asked: the worker derives what was recorded, though it sends nothing.
    wait_until("the worker derived the change set", SECONDS(30), || {
        count(&mut db, "SELECT count(*) FROM indexnow_changes") == 0
    });
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_urls"), 500);
}

/// Translations saved before their article in one transaction, the foreign key checked at
/// commit (`DEFERRABLE INITIALLY DEFERRED`, as Django makes them): no WARNING reaches the client,
/// and after the commit every translation is queued; a translation whose URL still cannot be
/// built after the commit is warned of by the worker, in the server log.
#[test]
fn rows_saved_before_the_rows_they_reference_warn_of_nothing_that_commit_fixes() {
    let cluster = Cluster::start(Options {
        conf: vec![
            "indexnow.enabled = off".into(),
            "indexnow.naptime = '200ms'".into(),
        ],
        ..Options::default()
    });
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE TABLE articles (id int PRIMARY KEY, slug text NOT NULL);
         CREATE TABLE texts (article int REFERENCES articles DEFERRABLE INITIALLY DEFERRED, \
           lang text, slug text NOT NULL, PRIMARY KEY (article, lang));
         SELECT indexnow_watch('texts', url_sql => $$'https://www.example.com/' || \
           nullif(lang, 'xx') || '/' || (SELECT a.slug FROM articles a WHERE a.id = article) \
           || '/' || slug$$, related => '{articles}');",
    )
    .unwrap();
    let out = cluster.psql(
        "site",
        "INSERT INTO texts VALUES (1, 'en', 'hello'); INSERT INTO texts VALUES (1, 'de', 'hallo'); \
         INSERT INTO texts VALUES (1, 'xx', 'broken'); INSERT INTO articles VALUES (1, 'a1')",
    );
    assert!(!out.contains("WARNING"), "{out}");
    wait_until("the worker derived the change sets", SECONDS(30), || {
        count(&mut db, "SELECT count(*) FROM indexnow_changes") == 0
    });
    assert_eq!(
        queued(&mut db),
        [
            "https://www.example.com/de/a1/hallo created",
            "https://www.example.com/en/a1/hello created"
        ]
    );
    wait_until("the worker warned of the row", SECONDS(10), || {
        cluster
            .log()
            .contains("1 row of public.texts skipped for 'https://www.example.com/' || ")
    });
}

/// Each session keeps what the capture trigger knows about a table (its watches, their ignore
/// lists, the related watches); a change made by another session is seen by the next save: a
/// watch replaced with another ignore list, a watch removed, a watch added.
#[test]
fn a_session_saving_all_along_follows_watch_changes_made_by_another() {
    let cluster = Cluster::start(Options::default());
    let mut db = site(&cluster);
    let mut admin = cluster.connect("site");
    publish_and_push(&mut db, "a");
    db.batch_execute("UPDATE pages SET body = 'one' WHERE slug = 'a'")
        .unwrap();
    assert_eq!(queued(&mut db), ["https://www.example.com/th/a changed"]);
    // Another session replaces the watch: body is ignored now.
    admin
        .batch_execute(
            "SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{slug}', \
               visible => $$status = 'published'$$, ignore => '{body,updated_at}')",
        )
        .unwrap();
    // (a watch replaced re-derives every row under its new fingerprint: sent as pushed)
    publish_and_push(&mut db, "b2");
    db.batch_execute("UPDATE pages SET body = 'two' WHERE slug = 'a'")
        .unwrap();
    assert_eq!(queued(&mut db), Vec::<String>::new());
    db.batch_execute("UPDATE pages SET title = 'two' WHERE slug = 'a'")
        .unwrap();
    assert_eq!(queued(&mut db), ["https://www.example.com/th/a changed"]);
    publish_and_push(&mut db, "c");
    // A second watch on the table, for another language: the next save queues its URL too.
    admin
        .batch_execute(
            "SELECT indexnow_watch('pages', url => 'https://www.example.com/en/{slug}', \
               visible => $$status = 'published'$$)",
        )
        .unwrap();
    publish_and_push(&mut db, "d");
    db.batch_execute("UPDATE pages SET body = 'three' WHERE slug = 'd'")
        .unwrap();
    assert_eq!(queued(&mut db), ["https://www.example.com/en/d changed"]);
    publish_and_push(&mut db, "e");
    // One of the two unwatched by the other session: the next save queues only the other's URL.
    admin
        .batch_execute("SELECT indexnow_unwatch('pages', 'https://www.example.com/en/{slug}')")
        .unwrap();
    db.batch_execute("UPDATE pages SET title = 'four' WHERE slug = 'd'")
        .unwrap();
    let after = queued(&mut db);
    assert!(
        after.contains(&"https://www.example.com/th/d changed".to_string()),
        "{after:?}"
    );
    assert!(
        !after
            .iter()
            .any(|u| u.starts_with("https://www.example.com/en/d ")),
        "{after:?}"
    );
    publish_and_push(&mut db, "f");
    // A write to the watch table alone (no DDL, as an upgrade script makes one) is heard too:
    // with title ignored by the UPDATE gate, a title-only save does not reach the derivation.
    admin
        .batch_execute("UPDATE indexnow_watches SET ignore = ignore || '{title}' WHERE active")
        .unwrap();
    db.batch_execute("UPDATE pages SET title = 'five' WHERE slug = 'd'")
        .unwrap();
    assert_eq!(queued(&mut db), Vec::<String>::new());
    // Within one transaction of the saving session too (its locks already held, it takes none
    // that would make it hear the change): body is ignored no more from its next statement.
    let mut tx = db.transaction().unwrap();
    tx.batch_execute("UPDATE pages SET body = 'six' WHERE slug = 'd'")
        .unwrap();
    admin
        .batch_execute(
            "UPDATE indexnow_watches SET ignore = array_remove(ignore, 'body') WHERE active",
        )
        .unwrap();
    tx.batch_execute("UPDATE pages SET body = 'seven' WHERE slug = 'd'")
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(queued(&mut db), ["https://www.example.com/th/d changed"]);
}

/// A session derives with statements generated from the watch and kept for the session (none is
/// stored); DDL made by another session is followed from its next derivation: the table renamed,
/// a column added (content from then on: a save that fills it alone is a change).
#[test]
fn a_session_deriving_all_along_follows_ddl_made_by_another() {
    let cluster = Cluster::start(Options::default());
    let mut db = site(&cluster);
    let mut admin = cluster.connect("site");
    publish_and_push(&mut db, "a");
    db.batch_execute("UPDATE pages SET body = 'one' WHERE slug = 'a'")
        .unwrap();
    assert_eq!(queued(&mut db), ["https://www.example.com/th/a changed"]);
    let pushed = |db: &mut Client| {
        db.batch_execute(
            "UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
               last_pushed_at = now() WHERE request_seq > settled_seq",
        )
        .unwrap()
    };
    pushed(&mut db);
    admin
        .batch_execute(
            "ALTER TABLE pages RENAME TO web_pages; ALTER TABLE web_pages ADD COLUMN teaser text",
        )
        .unwrap();
    // (the column added holds NULL: no page's fingerprint changes)
    assert_eq!(queued(&mut db), Vec::<String>::new());
    db.batch_execute("UPDATE web_pages SET teaser = 'new' WHERE slug = 'a'")
        .unwrap();
    assert_eq!(queued(&mut db), ["https://www.example.com/th/a changed"]);
    pushed(&mut db);
    db.batch_execute("UPDATE web_pages SET slug = 'a2' WHERE slug = 'a'")
        .unwrap();
    assert_eq!(
        queued(&mut db),
        [
            "https://www.example.com/th/a moved",
            "https://www.example.com/th/a2 created"
        ]
    );
}

/// A transaction that watches a table, or alters a watched one whose watch has an expression,
/// can be prepared for two-phase commit: finding the columns an expression reads makes no
/// temporary object (PostgreSQL refuses to prepare a transaction that used one).
#[test]
fn watching_and_altering_a_watched_table_can_be_prepared() {
    let cluster = Cluster::start(Options {
        preload: true,
        conf: vec!["max_prepared_transactions = 2".into()],
    });
    let mut db = cluster.create_db_with_extension("site");
    // (each its own statement: a multi-statement string is one transaction block, where COMMIT
    // PREPARED cannot run)
    for statement in [
        "CREATE TABLE pages (id int PRIMARY KEY, slug text, status text, noindex boolean)",
        "INSERT INTO pages VALUES (1, 'a', 'published', false)",
        "BEGIN",
        "SELECT indexnow_watch('pages', url => 'https://www.example.com/{slug}', \
           visible => $$status = 'published' AND NOT noindex$$, ignore => '{noindex}')",
        "PREPARE TRANSACTION 'watch'",
        "COMMIT PREPARED 'watch'",
        "BEGIN",
        "ALTER TABLE pages ALTER COLUMN status SET DEFAULT 'draft'",
        "PREPARE TRANSACTION 'alter'",
        "COMMIT PREPARED 'alter'",
    ] {
        db.batch_execute(statement)
            .unwrap_or_else(|e| panic!("{statement}: {e:?}"));
    }
    // The watch knows what its expression reads: the ignored column it reads still counts.
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_watches WHERE expression_columns = '{noindex,status}'"
        ),
        1
    );
    db.batch_execute("UPDATE pages SET noindex = true").unwrap();
    assert_eq!(queued(&mut db), ["https://www.example.com/a unpublished"]);
}

/// A session at REPEATABLE READ whose snapshot predates a new watch does not capture for it in
/// that transaction (as before), and captures for it from its next transaction on.
#[test]
fn a_watch_made_during_a_repeatable_read_transaction_is_followed_after_it() {
    let cluster = Cluster::start(Options::default());
    let mut db = site(&cluster);
    db.batch_execute("CREATE TABLE notes (id int PRIMARY KEY, slug text)")
        .unwrap();
    let mut admin = cluster.connect("site");
    let mut tx = db
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .start()
        .unwrap();
    tx.batch_execute("SELECT 1").unwrap();
    admin
        .batch_execute("SELECT indexnow_watch('notes', url => 'https://www.example.com/n/{slug}')")
        .unwrap();
    tx.batch_execute("INSERT INTO notes VALUES (1, 'first')")
        .unwrap();
    tx.commit().unwrap();
    db.batch_execute("INSERT INTO notes VALUES (2, 'second')")
        .unwrap();
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    let queued = queued(&mut db);
    assert!(
        queued.contains(&"https://www.example.com/n/second created".to_string()),
        "{queued:?}"
    );
}

/// The same for related tables: a session that writes a category all along re-derives the pages
/// of a watch another session made since on a second table reading that category.
#[test]
fn a_session_writing_a_related_table_follows_a_watch_added_by_another() {
    let cluster = Cluster::start(Options::default());
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE TABLE categories (id int PRIMARY KEY, slug text NOT NULL);
         CREATE TABLE articles (id int PRIMARY KEY, slug text NOT NULL, \
           category_id int NOT NULL REFERENCES categories);
         CREATE TABLE videos (id int PRIMARY KEY, slug text NOT NULL, \
           category_id int NOT NULL REFERENCES categories);
         INSERT INTO categories VALUES (1, 'news');
         INSERT INTO articles VALUES (1, 'a1', 1);
         INSERT INTO videos VALUES (1, 'v1', 1);
         SELECT indexnow_watch('articles', url_sql => $$'https://www.example.com/' || \
           (SELECT c.slug FROM categories c WHERE c.id = category_id) || '/' || slug$$, \
           related => '{categories}');",
    )
    .unwrap();
    let settle = "UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
                    last_pushed_at = now() WHERE request_seq > settled_seq";
    db.batch_execute(settle).unwrap();
    db.batch_execute("UPDATE categories SET slug = 'world'")
        .unwrap();
    assert_eq!(
        queued(&mut db),
        [
            "https://www.example.com/news/a1 moved",
            "https://www.example.com/world/a1 created"
        ]
    );
    let mut admin = cluster.connect("site");
    admin
        .batch_execute(
            "SELECT indexnow_watch('videos', url_sql => $$'https://www.example.com/video/' || \
               (SELECT c.slug FROM categories c WHERE c.id = category_id) || '/' || slug$$, \
               related => '{categories}')",
        )
        .unwrap();
    db.batch_execute(settle).unwrap();
    db.batch_execute("UPDATE categories SET slug = 'planet'")
        .unwrap();
    assert_eq!(
        queued(&mut db),
        [
            "https://www.example.com/planet/a1 created",
            "https://www.example.com/video/planet/v1 created",
            "https://www.example.com/video/world/v1 moved",
            "https://www.example.com/world/a1 moved"
        ]
    );
}

/// A write to a related table whose search for the watched rows fails for a moment (here its
/// wait for a lock on the watched table, ended by the writer's `lock_timeout`) fails as such a
/// wait fails without indexnow, with its SQLSTATE, for the writer to retry: it is not taken for a
/// broken watch (a WARNING, and every row of the watch derived again).
#[test]
fn a_lock_timeout_in_a_related_write_is_the_writers_to_retry() {
    let cluster = Cluster::start(Options::default());
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE TABLE categories (id int PRIMARY KEY, slug text NOT NULL);
         CREATE TABLE articles (id int PRIMARY KEY, slug text NOT NULL, \
           category_id int NOT NULL REFERENCES categories);
         INSERT INTO categories VALUES (1, 'news');
         INSERT INTO articles VALUES (1, 'a1', 1);
         SELECT indexnow_watch('articles', url_sql => $$'https://www.example.com/' || \
           (SELECT c.slug FROM categories c WHERE c.id = category_id) || '/' || slug$$, \
           related => '{categories}');
         UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
           last_pushed_at = now() WHERE request_seq > settled_seq;",
    )
    .unwrap();
    let mut holder = cluster.connect("site");
    holder
        .batch_execute("BEGIN; LOCK TABLE articles IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let err = db
        .batch_execute("SET lock_timeout = '200ms'; UPDATE categories SET slug = 'world'")
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE),
        "{err}"
    );
    holder.batch_execute("ROLLBACK").unwrap();
    // Retried, the write goes through and is captured.
    db.batch_execute("RESET lock_timeout; UPDATE categories SET slug = 'world'")
        .unwrap();
    assert_eq!(
        queued(&mut db),
        [
            "https://www.example.com/news/a1 moved",
            "https://www.example.com/world/a1 created"
        ]
    );
}

/// A save derived in its own statement never waits for a worker deriving a change set that holds
/// the same page (most of a second for 10,000 keys): it leaves its event to the workers instead
/// (recorded, derived after that change set), and nothing is lost.
#[test]
fn a_save_does_not_wait_for_a_derivation_holding_its_page() {
    // (no worker: this session plays it)
    let cluster = Cluster::start(Options {
        preload: false,
        ..Options::default()
    });
    let mut db = site(&cluster);
    db.batch_execute(
        "INSERT INTO pages (slug, status) SELECT 'p' || g, 'published' FROM generate_series(1, 200) g; \
         SELECT indexnow_derive(); \
         UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
           last_pushed_at = now() WHERE request_seq > settled_seq; \
         UPDATE pages SET body = 'bulk'",
    )
    .unwrap();
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_changes"), 1);
    // A deriver (as a worker does, one change set a transaction), not yet committed.
    let mut deriver = cluster.connect("site");
    deriver
        .batch_execute("BEGIN; SELECT indexnow_derive(1)")
        .unwrap();
    // (a save that derives in its statement: recorded, as by default, it has nothing to wait for)
    let mut saver = cluster.connect("site");
    saver
        .batch_execute("SET statement_timeout = '5s'; SET indexnow.derive_at_write = 100")
        .unwrap();
    let started = std::time::Instant::now();
    saver
        .batch_execute("UPDATE pages SET body = 'mine' WHERE slug = 'p5'")
        .unwrap();
    assert!(started.elapsed() < SECONDS(2), "{:?}", started.elapsed());
    // (the change set being derived, and the save's own)
    assert_eq!(
        count(&mut saver, "SELECT count(*) FROM indexnow_changes"),
        2
    );
    deriver.batch_execute("COMMIT").unwrap();
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    let queued = queued(&mut db);
    assert_eq!(queued.len(), 200);
    assert!(queued.contains(&"https://www.example.com/th/p5 changed".to_string()));
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_changes"), 0);
    // The page's source is the saved version: saving it again as it is queues nothing more.
    let seq = "SELECT request_seq FROM indexnow_urls WHERE url = 'https://www.example.com/th/p5'";
    let before = count(&mut db, seq);
    db.batch_execute("UPDATE pages SET body = 'mine' WHERE slug = 'p5'; SELECT indexnow_derive()")
        .unwrap();
    assert_eq!(count(&mut db, seq), before);
}

/// `indexnow_push_now()` derives what was recorded before it sends, but a transaction that holds
/// what a derivation would write (here a prepared one, which may stay for days) makes it wait a
/// second at most: the change set is left to the workers, with a NOTICE, and derived once that
/// transaction ends. `indexnow_status()` derives nothing, and answers at once.
#[test]
fn readers_do_not_wait_for_a_transaction_left_open() {
    let cluster = Cluster::start(Options {
        preload: false,
        conf: vec!["max_prepared_transactions = 2".into()],
    });
    let mut db = site(&cluster);
    db.batch_execute(
        "INSERT INTO pages (slug, status) VALUES ('a', 'published'), ('b', 'published')",
    )
    .unwrap();
    // Derived, then pushed in a transaction of its own (a later clock than the derivation's).
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    db.batch_execute(
        "UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
           last_pushed_at = now() WHERE request_seq > settled_seq",
    )
    .unwrap();
    // (the held save derived in its statement, so that it holds its URL's queue row)
    db.batch_execute(
        "BEGIN; SET LOCAL indexnow.derive_at_write = 100; \
         UPDATE pages SET body = 'held' WHERE slug = 'a'",
    )
    .unwrap();
    db.batch_execute("PREPARE TRANSACTION 'held'").unwrap();
    // The second page takes the first one's URL: recorded, and its derivation cannot run while
    // the prepared transaction holds that URL's queue row.
    db.batch_execute("UPDATE pages SET slug = 'a', body = 'q' WHERE slug = 'b'")
        .unwrap();
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_changes"), 1);
    db.batch_execute("SET statement_timeout = '10s'").unwrap();
    for reader in [
        "SELECT count(*) FROM indexnow_status()",
        "SELECT count(*) FROM indexnow_push_now()",
    ] {
        let started = std::time::Instant::now();
        db.batch_execute(reader)
            .unwrap_or_else(|e| panic!("{reader}: {e}"));
        assert!(
            started.elapsed() < SECONDS(5),
            "{reader} took {:?}",
            started.elapsed()
        );
    }
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_changes"), 1);
    db.batch_execute("COMMIT PREPARED 'held'").unwrap();
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_changes"), 0);
    assert_eq!(
        queued(&mut db),
        [
            "https://www.example.com/th/a changed",
            "https://www.example.com/th/b moved"
        ]
    );
}

/// A watch that cannot read its related table for a while (its maker lost the privilege) owes one
/// derivation of its whole table, however many transactions leave it one; the privilege given
/// back, the worker derives what was written meanwhile.
#[test]
fn a_broken_watch_owes_one_derivation_however_many_writes_leave_it_one() {
    let cluster = Cluster::start(Options {
        preload: true,
        conf: vec![
            "indexnow.enabled = off".into(),
            "indexnow.naptime = '200ms'".into(),
        ],
    });
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE ROLE lender; GRANT USAGE, CREATE ON SCHEMA public TO lender; \
         SELECT indexnow_grant_watching('lender'); \
         CREATE TABLE shelves (id int PRIMARY KEY, slug text NOT NULL); \
         CREATE TABLE shelved (id int PRIMARY KEY, shelf int REFERENCES shelves, slug text NOT NULL); \
         ALTER TABLE shelved OWNER TO lender; GRANT SELECT, TRIGGER ON shelves TO lender; \
         INSERT INTO shelves VALUES (1, 'x'); INSERT INTO shelved VALUES (1, 1, 'p'); \
         SET ROLE lender; \
         SELECT indexnow_watch('shelved', url_sql => $$'https://www.example.com/' || \
           (SELECT s.slug FROM shelves s WHERE s.id = shelf) || '/' || slug$$, \
           related => '{shelves}'); \
         RESET ROLE; \
         UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
           last_pushed_at = now() WHERE request_seq > settled_seq; \
         REVOKE SELECT ON shelves FROM lender;",
    )
    .unwrap();
    db.batch_execute("UPDATE shelves SET slug = 'y'").unwrap();
    // Each ALTER of the related table, in a transaction of its own, leaves the watch a
    // derivation of the whole table.
    for _ in 0..5 {
        db.batch_execute("ALTER TABLE shelves ALTER slug SET STATISTICS 100")
            .unwrap();
    }
    let owed = "SELECT count(*) FROM indexnow_changes";
    wait_until("one derivation is owed", SECONDS(30), || {
        count(&mut db, owed) == 1
    });
    std::thread::sleep(std::time::Duration::from_millis(1_000)); // several passes
    assert_eq!(count(&mut db, owed), 1);
    assert!(queued(&mut db).is_empty(), "{:?}", queued(&mut db));
    // Monitoring sees the change waiting, since the first write that left it.
    let waited = "SELECT coalesce(max(extract(epoch FROM oldest_change_age) * 1000), -1)::bigint \
                    FROM indexnow_status()";
    assert!(
        count(&mut db, waited) >= 1_000,
        "{}",
        count(&mut db, waited)
    );
    // A reconcile meanwhile derives nothing, and says so (not that some rows were skipped).
    let said = cluster.psql("site", "SELECT * FROM indexnow_reconcile('shelved')");
    assert!(said.contains("could not derive its URLs"), "{said}");
    assert!(said.contains("HINT:  Nothing was derived"), "{said}");
    db.batch_execute("GRANT SELECT ON shelves TO lender")
        .unwrap();
    wait_until("the change is derived", SECONDS(30), || {
        count(&mut db, owed) == 0
    });
    assert_eq!(
        queued(&mut db),
        [
            "https://www.example.com/x/p moved",
            "https://www.example.com/y/p created"
        ]
    );
    assert_eq!(count(&mut db, waited), -1);
}

/// A watched table that a logical replication subscription writes: its apply worker fires no
/// statement trigger, so the changes it applies are not captured (documented), and
/// `indexnow_status()` says so by the table's name. A page the publisher adds reaches the
/// subscriber's table and is queued only by `indexnow_reconcile()`.
#[test]
fn a_subscribers_applied_changes_are_named_in_status() {
    let cluster = Cluster::start(Options {
        preload: false,
        conf: vec!["wal_level = logical".into()],
    });
    let mut publisher = cluster.create_db_with_extension("publisher");
    publisher
        .batch_execute(
            "CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL); \
             CREATE PUBLICATION content FOR TABLE pages",
        )
        .unwrap();
    publisher
        .batch_execute("SELECT pg_create_logical_replication_slot('content', 'pgoutput')")
        .unwrap();
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL); \
         SELECT indexnow_watch('pages', url => 'https://www.example.com/{slug}', \
                               replica_writes => true)",
    )
    .unwrap();
    let gaps = |db: &mut Client| -> Option<String> {
        db.query_one("SELECT DISTINCT capture_gaps FROM indexnow_status()", &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(gaps(&mut db), None);
    // (a subscription to a database of the same cluster: its slot made beforehand)
    db.batch_execute(&format!(
        "CREATE SUBSCRIPTION content CONNECTION '{}' PUBLICATION content \
           WITH (create_slot = false, slot_name = 'content')",
        cluster.conninfo("publisher")
    ))
    .unwrap();
    assert_eq!(
        gaps(&mut db).as_deref(),
        Some(
            "public.pages: written by subscription content, whose applied changes fire no \
             statement trigger"
        )
    );
    // (the initial copy done: what follows is applied)
    wait_until("the table is synchronized", SECONDS(30), || {
        count(
            &mut db,
            "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate = 'r'",
        ) == 1
    });
    publisher
        .batch_execute("INSERT INTO pages VALUES (1, 'replicated')")
        .unwrap();
    wait_until("the page is replicated", SECONDS(30), || {
        count(&mut db, "SELECT count(*) FROM pages") == 1
    });
    assert_eq!(queued(&mut db), Vec::<String>::new());
    db.batch_execute("SELECT indexnow_reconcile('pages')")
        .unwrap();
    assert_eq!(
        queued(&mut db),
        ["https://www.example.com/replicated created"]
    );
    db.batch_execute(
        "ALTER SUBSCRIPTION content DISABLE; \
                      ALTER SUBSCRIPTION content SET (slot_name = NONE); \
                      DROP SUBSCRIPTION content",
    )
    .unwrap();
}

/// Watching a table makes no write wait for its rows to be recorded: the capture triggers go on
/// last, for a moment. Here the baseline is held (its `visible` waits, for a real row, on an
/// advisory lock another session holds) while a third session updates one page and deletes another, without waiting;
/// the session watching shows what it does in `pg_stat_activity`. Once the watch commits, both
/// writes made during the baseline come out as if they followed it: the update is announced, the
/// deleted page's removal is owed.
#[test]
fn watching_a_table_makes_no_write_wait() {
    let cluster = Cluster::start(Options::default());
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, body text); \
         INSERT INTO pages SELECT i, 'p' || i, 'b' FROM generate_series(1, 100) i; \
         CREATE FUNCTION gate(id int) RETURNS boolean LANGUAGE plpgsql AS \
           $$BEGIN \
               IF id IS NOT NULL THEN PERFORM pg_advisory_xact_lock_shared(42); END IF; \
               RETURN true; \
             END$$",
    )
    .unwrap();
    let mut gatekeeper = cluster.connect("site");
    gatekeeper
        .batch_execute("SELECT pg_advisory_lock(42)")
        .unwrap();
    let mut watcher = cluster.connect("site");
    let watching = std::thread::spawn(move || {
        watcher
            .batch_execute(
                "SELECT indexnow_watch('pages', url => 'https://www.example.com/{slug}', \
                                       visible => 'gate(id)')",
            )
            .map_err(|e| format!("{e:?}"))
    });
    wait_until("the baseline waits at the gate", SECONDS(30), || {
        count(
            &mut db,
            "SELECT count(*) FROM pg_stat_activity \
              WHERE query LIKE 'indexnow_watch: recording the rows of public.pages%' \
                AND wait_event_type = 'Lock'",
        ) == 1
    });
    let mut writer = cluster.connect("site");
    writer
        .batch_execute(
            "SET lock_timeout = '20s'; \
             UPDATE pages SET body = 'edited meanwhile' WHERE id = 1; \
             DELETE FROM pages WHERE id = 2",
        )
        .expect("the writes do not wait for the baseline");
    gatekeeper
        .batch_execute("SELECT pg_advisory_unlock(42)")
        .unwrap();
    watching.join().unwrap().unwrap();
    assert_eq!(
        queued(&mut db),
        [
            "https://www.example.com/p1 changed",
            "https://www.example.com/p2 deleted"
        ]
    );
}

/// A save derived in its statement (`indexnow.derive_at_write`) never fails for the session's
/// `statement_timeout`: the derivation gets at most a quarter of what the timeout leaves the
/// statement (none under a timeout that leaves it less than 25 ms), and past it the save records
/// its change instead, derived after the commit. (Before: a 5-row save under `ALTER DATABASE ...
/// SET statement_timeout = '50ms'` failed with "canceling statement due to statement timeout";
/// with half of what was left, it still did once on a loaded machine.)
#[test]
fn a_save_derived_in_its_statement_never_fails_for_the_sessions_statement_timeout() {
    // (no worker: what the save recorded stays to be seen)
    let cluster = Cluster::start(Options {
        preload: false,
        conf: vec![],
    });
    let mut db = cluster.create_db_with_extension("site");
    db.batch_execute(
        "CREATE FUNCTION slow_visible(i int) RETURNS boolean LANGUAGE plpgsql \
           AS $$BEGIN PERFORM pg_sleep(0.02); RETURN true; END$$; \
         CREATE TABLE items (id int PRIMARY KEY, slug text NOT NULL); \
         SELECT indexnow_watch('items', url => 'https://www.example.com/i/{slug}', \
                               visible => 'slow_visible(id)'); \
         ALTER DATABASE site SET statement_timeout = '50ms'; \
         ALTER DATABASE site SET indexnow.derive_at_write = 100;",
    )
    .unwrap();
    let mut session = cluster.connect("site");
    // (5 rows: 100 ms of deriving, twice the statement's whole time)
    session
        .batch_execute("INSERT INTO items SELECT g, 'i' || g FROM generate_series(1, 5) g")
        .unwrap_or_else(|e| panic!("the save failed: {e}"));
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_changes WHERE tbl = 'items'::regclass AND keys IS NOT NULL"
        ),
        1,
        "the save recorded its change"
    );
    // (given 100 ms of a 400 ms timeout, 20 rows of 20 ms run out of it: rolled back, recorded)
    db.batch_execute(
        "ALTER DATABASE site SET statement_timeout = '400ms'; DELETE FROM indexnow_changes",
    )
    .unwrap();
    let mut session = cluster.connect("site");
    session
        .batch_execute("INSERT INTO items SELECT g, 'i' || g FROM generate_series(11, 30) g")
        .unwrap_or_else(|e| panic!("the save failed: {e}"));
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_changes WHERE tbl = 'items'::regclass AND keys IS NOT NULL"
        ),
        1,
        "the save recorded its change"
    );
    // (a save that fits is still derived in its statement)
    db.batch_execute(
        "ALTER DATABASE site SET statement_timeout = '10s'; DELETE FROM indexnow_changes",
    )
    .unwrap();
    let mut session = cluster.connect("site");
    session
        .batch_execute("INSERT INTO items VALUES (6, 'i6')")
        .unwrap();
    assert_eq!(count(&mut db, "SELECT count(*) FROM indexnow_changes"), 0);
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM indexnow_urls WHERE url LIKE '%/i/i6'"
        ),
        1
    );
}

/// A database whose sessions run in replica mode (`ALTER DATABASE ... SET session_replication_role
/// = replica`) captures nothing a session writes: its worker starts again (the setting changed)
/// and says so in the server log, and `indexnow_status()` names the table in `capture_gaps`.
/// (Before: 55 saves announced nothing, with no word anywhere.)
#[test]
fn replica_mode_for_a_databases_sessions_is_said_in_the_log_and_the_status() {
    let cluster = Cluster::start(Options::default());
    let mut db = site(&cluster);
    db.batch_execute("ALTER DATABASE site SET session_replication_role = replica")
        .unwrap();
    let said = "writes to these tables are not captured: public.pages: sessions of the database \
                run with session_replication_role = replica";
    wait_until("the worker says it", SECONDS(30), || {
        cluster.log().contains(said)
    });
    assert_eq!(
        count(
            &mut db,
            "SELECT count(DISTINCT capture_gaps) FROM indexnow_status() \
              WHERE capture_gaps LIKE '%session_replication_role = replica%'"
        ),
        1
    );
}
