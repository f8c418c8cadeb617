//! Upgrading from each earlier release, as a user does it: the server runs that release's library
//! with its SQL, a table is watched and its pages sent; the new release is installed and the
//! server restarted (its library with the old SQL: the worker waits, the capture goes on); then
//! `ALTER EXTENSION indexnow UPDATE` (from 0.1.0 a chain of two scripts). After it the watch
//! still fires, the queue and the history are as they were, what waited is sent, a monitoring
//! role keeps its grant (and pg_dump keeps it), and the extension's catalog equals a fresh
//! install's.
//!
//! Two releases are upgraded from: the previous one (the newest upgrade script, on the data the
//! previous release's worker made) and the first (every script, in one `ALTER EXTENSION UPDATE`,
//! under today's library). That proves an upgrade from every release in between: each upgrade
//! script was proven on the data of the release before it when it was released, and a released
//! script never changes afterwards ([`released_scripts_never_change`] compares each with the
//! copy in every later release's source archive); so a database of any release is, after each
//! script, what that script was proven to make. Building every release's library took most of
//! this file's time on a clean machine and proved nothing more.

use indexnow_e2e::{
    count, release_library, sending_conf, sent_urls, wait_until, wait_until_settled, Cluster,
    Options, PREVIOUS_RELEASE,
};
use indexnow_receiver::Receiver;
use postgres::Client;
use std::time::Duration;

const SECONDS: fn(u64) -> Duration = Duration::from_secs;
const CURRENT: &str = "0.8.2";
const HOST: &str = "www.example.com";
const KEY: &str = "abcdefgh12";
const CATALOG: &str = include_str!("../sql/extension_catalog.sql");

/// A watch whose URL reads a related table that is partitioned, through the second of two
/// foreign keys to it.
const BOOKS: &str = "CREATE TABLE shelves (id int PRIMARY KEY, slug text NOT NULL) \
                       PARTITION BY RANGE (id); \
                     CREATE TABLE shelves_low PARTITION OF shelves FOR VALUES FROM (0) TO (100); \
                     CREATE TABLE books (id int PRIMARY KEY, spare int REFERENCES shelves, \
                       shelf int REFERENCES shelves, slug text NOT NULL);";
const BOOKS_WATCH: &str =
    "SELECT indexnow_watch('books', url_sql => $$'https://www.example.com/' || \
                             (SELECT s.slug FROM shelves s WHERE s.id = shelf) || '/' || slug$$, \
                             related => '{shelves}');";

fn url(slug: &str) -> String {
    format!("https://{HOST}/{slug}")
}

fn version(db: &mut Client) -> String {
    db.query_one(
        "SELECT extversion FROM pg_extension WHERE extname = 'indexnow'",
        &[],
    )
    .unwrap()
    .get(0)
}

/// Fails, saying `what` and the lines each side alone has, unless the two catalogs are equal.
fn assert_same_catalog(got: &[String], want: &[String], what: &str) {
    if got != want {
        let only = |a: &[String], b: &[String]| {
            a.iter()
                .filter(|line| !b.contains(line))
                .cloned()
                .collect::<Vec<_>>()
        };
        panic!(
            "{what}\n only there: {:#?}\n only in a fresh install: {:#?}",
            only(got, want),
            only(want, got)
        );
    }
}

fn catalog(db: &mut Client) -> Vec<String> {
    db.query(CATALOG, &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// What must survive the upgrade row for row: the queue and the request history.
fn queue_and_history(db: &mut Client) -> (Vec<String>, Vec<String>) {
    let rows = |db: &mut Client, sql: &str| -> Vec<String> {
        db.query(sql, &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    (
        rows(
            db,
            "SELECT concat_ws(' ', url, reason, request_seq, settled_seq, last_pushed_at) \
               FROM indexnow_urls ORDER BY url",
        ),
        rows(
            db,
            "SELECT concat_ws(' ', pushed_at, host, url_count, status) \
               FROM indexnow_pushes ORDER BY pushed_at",
        ),
    )
}

#[test]
fn an_upgrade_from_the_previous_release_keeps_everything_and_equals_a_fresh_install() {
    upgrade_from(PREVIOUS_RELEASE, 20);
}

#[test]
fn an_upgrade_from_the_first_release_keeps_everything_and_equals_a_fresh_install() {
    upgrade_from("0.1.0", 12);
}

/// The install and upgrade scripts of each release (`sql/indexnow--*.sql` in its source archive,
/// `releases/indexnow-<version>.tar.gz`) are, byte for byte, the ones kept in `sql/` now: a released
/// script is never edited (a fix is a new upgrade script), which is what lets two upgrades prove
/// every one.
#[test]
fn released_scripts_never_change() {
    let root = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut compared = 0;
    for archive in std::fs::read_dir(root.join("releases")).unwrap() {
        let archive = archive.unwrap().path();
        let listed = std::process::Command::new("tar")
            .arg("-tzf")
            .arg(&archive)
            .output()
            .unwrap();
        assert!(listed.status.success(), "tar -tzf {}", archive.display());
        let scripts: Vec<String> = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .filter(|p| p.starts_with("sql/indexnow--") && p.ends_with(".sql"))
            .map(str::to_string)
            .collect();
        for script in scripts {
            let released = std::process::Command::new("tar")
                .arg("-xzOf")
                .arg(&archive)
                .arg(&script)
                .output()
                .unwrap();
            assert!(
                released.status.success(),
                "{script} in {}",
                archive.display()
            );
            let kept = std::fs::read(root.join(&script))
                .unwrap_or_else(|e| panic!("{script} of {} is not kept: {e}", archive.display()));
            assert!(
                released.stdout == kept,
                "{script} differs from its copy in {}: a released script is never edited",
                archive.display()
            );
            compared += 1;
        }
    }
    // (every release's archive has at least its upgrade script from the one before)
    assert!(compared >= 10, "only {compared} scripts compared");
}

/// Every release the installed files offer (`scripts/install.sh` installs the install scripts
/// today's library can run: `shipped_scripts` in scripts/versions.sh) installs with today's library
/// and updates to this release, equal then to a fresh install. 0.1.0 to 0.4.0 are not offered:
/// their install scripts name a C function today's library does not have (`CREATE EXTENSION
/// indexnow VERSION '0.3.0'` failed with `could not find function "indexnow_watch_rows_wrapper"`).
#[test]
fn every_release_offered_installs_with_this_library_and_updates_to_this_one() {
    let shipped = std::process::Command::new("bash")
        .arg("-c")
        .arg("source scripts/versions.sh && shipped_scripts \"$1\"")
        .arg("shipped")
        .arg(format!("{}/indexnow.so", pkglibdir()))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap();
    assert!(
        shipped.status.success(),
        "{}",
        String::from_utf8_lossy(&shipped.stderr)
    );
    let offered: Vec<String> = String::from_utf8_lossy(&shipped.stdout)
        .lines()
        .filter_map(|script| script.strip_prefix("sql/indexnow--")?.strip_suffix(".sql"))
        .filter(|version| !version.contains("--"))
        .map(str::to_string)
        .collect();
    assert!(offered.contains(&CURRENT.to_string()), "{offered:?}");
    assert!(!offered.contains(&"0.1.0".to_string()), "{offered:?}");
    let cluster = Cluster::start(Options {
        preload: true,
        conf: vec!["indexnow.enabled = off".into()],
    });
    let mut fresh = cluster.create_db_with_extension("fresh");
    let want = catalog(&mut fresh);
    for release in &offered {
        let db_name = format!("from_{}", release.replace('.', "_"));
        cluster
            .connect("postgres")
            .batch_execute(&format!("CREATE DATABASE {db_name}"))
            .unwrap();
        let mut db = cluster.connect(&db_name);
        db.batch_execute(&format!(
            "CREATE EXTENSION indexnow VERSION '{release}'; ALTER EXTENSION indexnow UPDATE"
        ))
        .unwrap_or_else(|e| panic!("{release}: {e}\n{}", cluster.log()));
        assert_eq!(version(&mut db), CURRENT);
        assert_same_catalog(
            &catalog(&mut db),
            &want,
            &format!("{release} updated differs from a fresh install"),
        );
    }
}

/// The library folder of the PostgreSQL the tests run against.
fn pkglibdir() -> String {
    let out = std::process::Command::new(format!("{}/pg_config", indexnow_e2e::pg_bin()))
        .arg("--pkglibdir")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The upgrade from release `previous`, whose `indexnow_status()` has `status_columns` columns.
fn upgrade_from(previous: &str, status_columns: i64) {
    let library = release_library(previous);
    let receiver = Receiver::start("127.0.0.1:0").unwrap();
    let cluster = Cluster::start(Options {
        preload: true,
        conf: sending_conf(&receiver.endpoint(), &[]),
    });
    cluster.use_library(Some(&library));
    cluster.restart();

    // The previous release, in use.
    cluster
        .connect("postgres")
        .batch_execute("CREATE DATABASE site")
        .unwrap();
    let mut db = cluster.connect("site");
    db.batch_execute(&format!(
        "CREATE EXTENSION indexnow VERSION '{previous}'; \
         CREATE ROLE monitoring LOGIN; \
         GRANT EXECUTE ON FUNCTION indexnow_status() TO monitoring; \
         CREATE ROLE editor; SELECT indexnow_grant_watching('editor'); \
         SELECT indexnow_add_host('{HOST}', '{KEY}'); \
         CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, published boolean NOT NULL); \
         SELECT indexnow_watch('pages', url => 'https://{HOST}/{{slug}}', \
                               visible => 'published', ignore => '{{published}}'); \
         INSERT INTO pages VALUES (1, 'one', true), (2, 'two', true), (3, 'draft', false); \
         CREATE TABLE drafts (id int PRIMARY KEY, slug text NOT NULL); \
         SELECT indexnow_watch('drafts', url => 'https://{HOST}/drafts/{{slug}}'); \
         {BOOKS} \
         INSERT INTO shelves VALUES (1, 'poems'), (2, 'spare'); \
         INSERT INTO books VALUES (1, 2, 1, 'odes'); \
         {BOOKS_WATCH}"
    ))
    .unwrap();
    assert_eq!(version(&mut db), previous);
    assert_eq!(
        count(
            &mut db,
            "SELECT array_length(proallargtypes, 1)::int8 FROM pg_proc WHERE proname = 'indexnow_status'"
        ),
        status_columns,
        "the library and SQL of {previous} are in use: its indexnow_status() has {status_columns} columns"
    );
    wait_until("the previous release sent the pages", SECONDS(30), || {
        sent_urls(&receiver) == [url("one"), url("two")]
    });
    db.batch_execute("UPDATE pages SET slug = 'one-renamed' WHERE id = 1")
        .unwrap();
    // (both requests recorded: the receiver has a request before the worker records its answer)
    wait_until("the previous release sent the rename", SECONDS(30), || {
        sent_urls(&receiver).len() == 4
            && count(&mut db, "SELECT count(*) FROM indexnow_pushes") == 2
    });
    let before = queue_and_history(&mut db);
    // The new release's files are installed, but the server still runs the old library: the
    // update is refused before it changes anything.
    let refused = db
        .batch_execute("ALTER EXTENSION indexnow UPDATE")
        .unwrap_err();
    let refused = refused.as_db_error().unwrap();
    assert!(
        refused
            .message()
            .starts_with("indexnow: this server still runs the library of")
            && refused
                .hint()
                .is_some_and(|h| h.contains("restart the server")),
        "{refused:?}"
    );
    assert_eq!(version(&mut db), previous);
    drop(db);

    // The new release installed, the server restarted: its library, the old SQL.
    cluster.use_library(None);
    cluster.restart();
    let mut db = cluster.connect("site");
    assert_eq!(version(&mut db), previous);
    let refused = db
        .query("SELECT * FROM indexnow_status()", &[])
        .unwrap_err();
    let refused = refused.as_db_error().unwrap();
    assert!(
        refused.message().contains(&format!("version {previous}"))
            && refused.hint() == Some("Run ALTER EXTENSION indexnow UPDATE in this database."),
        "{refused:?}"
    );
    wait_until(
        "the worker says it waits for the update",
        SECONDS(20),
        || {
            count(
                &mut db,
                "SELECT count(*) FROM pg_stat_activity \
              WHERE query = 'indexnow: waiting for ALTER EXTENSION indexnow UPDATE'",
            ) == 1
        },
    );
    assert!(
        cluster
            .log()
            .contains(&format!("the extension in this database is version {previous} and the installed library is {CURRENT}")),
        "{}",
        cluster.log()
    );
    // Saves go on being captured (recorded: the workers derive them after the update); nothing is
    // sent until the update.
    db.batch_execute("INSERT INTO pages VALUES (4, 'four', true)")
        .unwrap();
    let waiting: i64 = db
        .query_one(
            "SELECT count(*) FROM indexnow_changes WHERE keys IS NOT NULL",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(waiting, 1, "the save is recorded before the update");
    // A TRUNCATE too (its change set names the internal functions of the old SQL).
    let mut tx = db.transaction().unwrap();
    tx.batch_execute("TRUNCATE drafts").unwrap();
    let recorded: i64 = tx
        .query_one(
            "SELECT count(*) FROM indexnow_changes WHERE keys IS NULL",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(recorded, 1, "the TRUNCATE is recorded before the update");
    tx.rollback().unwrap();
    // A new watch would generate statements for the new SQL: refused until the update.
    let refused = db
        .batch_execute("SELECT indexnow_watch('drafts', url => 'https://{HOST}/d/{{slug}}')")
        .unwrap_err();
    assert!(
        refused.as_db_error().is_some_and(
            |e| e.hint() == Some("Run ALTER EXTENSION indexnow UPDATE in this database.")
        ),
        "{refused:?}"
    );
    std::thread::sleep(SECONDS(2));
    assert_eq!(
        sent_urls(&receiver).len(),
        4,
        "nothing sent before the update"
    );
    let (queue, history) = queue_and_history(&mut db);
    assert_eq!(history, before.1, "no request made before the update");
    assert!(
        before.0.iter().all(|row| queue.contains(row)),
        "the queue is kept: {queue:?}"
    );

    // (through psql, which prints the update's NOTICEs and WARNINGs): the extension's own
    // update warns of nothing (its event trigger followed the update's own ALTER TABLE with a
    // function the update had renamed: "could not follow ALTER TABLE of indexnow_relations")
    let printed = cluster.psql("site", "ALTER EXTENSION indexnow UPDATE");
    assert!(
        !printed.contains("WARNING"),
        "the update from {previous} warned: {printed}"
    );
    assert_eq!(version(&mut db), CURRENT);
    wait_until(
        "the page saved before the update is sent",
        SECONDS(30),
        || sent_urls(&receiver).contains(&url("four")),
    );
    // The watch fires after the update too.
    db.batch_execute("UPDATE pages SET published = false WHERE id = 2")
        .unwrap();
    wait_until("the unpublish is sent", SECONDS(30), || {
        sent_urls(&receiver).len() == 6
    });
    wait_until_settled(&mut db, "the unpublish is recorded", SECONDS(30));
    // What the watches derived before the update was converted, not lost or made anew (0.8.0
    // turned each source's fingerprint into 8 bytes of it): a reconcile of each watched table
    // finds every page as it was.
    for table in ["pages", "books"] {
        assert_eq!(
            count(
                &mut db,
                &format!(
                    "SELECT coalesce(sum(created + changed + gone), 0)::int8 \
                       FROM indexnow_reconcile('{table}')"
                )
            ),
            0,
            "a reconcile of {table} after the update from {previous} found pages changed"
        );
    }
    let (queue_before, history_before) = before;
    let (queue_after, history_after) = queue_and_history(&mut db);
    assert!(
        history_after.starts_with(&history_before),
        "the history before the update is kept: {history_before:?} / {history_after:?}"
    );
    for row in &queue_before {
        let url = row.split(' ').next().unwrap();
        if url.ends_with("/one") || url.ends_with("/one-renamed") || url.ends_with("/draft") {
            assert!(queue_after.contains(row), "{row} kept: {queue_after:?}");
        }
    }
    let row = db
        .query_one(
            "SELECT host, pending, oldest_due_age IS NULL, dry_run FROM indexnow_status()",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, i64>(1),
            row.get::<_, bool>(2),
            row.get::<_, bool>(3)
        ),
        (HOST.to_string(), 0, true, false)
    );

    // The monitoring role's grant survived the new indexnow_status() (pg_dump keeps it: below).
    let mut monitoring = cluster.connect_as("site", "monitoring");
    assert_eq!(
        count(&mut monitoring, "SELECT count(*) FROM indexnow_status()"),
        1
    );

    // The upgraded extension equals a fresh install (the user's grant aside), and the watches
    // made before the update are stored as the same watches made now (their statements are
    // generated from that, wherever they are used).
    // A role granted watching keeps it through indexnow_watch() made again with another argument.
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM pg_proc WHERE proname = 'indexnow_watch' \
                AND has_function_privilege('editor', oid, 'EXECUTE')"
        ),
        1,
        "the role granted watching may still watch"
    );
    // pg_dump keeps both grants: they are the user's, not the extension's.
    let dump = std::fs::read_to_string(cluster.dump("site")).unwrap();
    for grant in [
        "GRANT ALL ON FUNCTION public.indexnow_status() TO monitoring;",
        "TO editor;",
    ] {
        assert!(
            dump.contains(grant),
            "the dump keeps {grant}:\n{}",
            dump.lines()
                .filter(|l| l.contains("GRANT"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    db.batch_execute(
        "REVOKE EXECUTE ON FUNCTION indexnow_status() FROM monitoring; \
         SELECT indexnow_revoke_watching('editor')",
    )
    .unwrap();
    let mut fresh = cluster.create_db_with_extension("fresh");
    fresh
        .batch_execute(&format!(
            "CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, published boolean NOT NULL); \
             SELECT indexnow_watch('pages', url => 'https://{HOST}/{{slug}}', \
                                   visible => 'published', ignore => '{{published}}'); \
             CREATE TABLE drafts (id int PRIMARY KEY, slug text NOT NULL); \
             SELECT indexnow_watch('drafts', url => 'https://{HOST}/drafts/{{slug}}'); \
             {BOOKS} {BOOKS_WATCH}"
        ))
        .unwrap();
    let statements = |db: &mut Client| -> Vec<String> {
        db.query(
            "SELECT concat_ws(E'\n', id, tbl, url, url_sql, visible, ignore, publish_at, \
                              hidden_reason, expression_columns, active) \
               FROM indexnow_watches ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    let (upgraded, made_now) = (statements(&mut db), statements(&mut fresh));
    assert_eq!(upgraded.len(), 3);
    for (upgraded, made_now) in upgraded.iter().zip(&made_now) {
        assert!(
            upgraded == made_now,
            "a watch after the update differs from the same watch made now:\n\
             after the update: {upgraded}\nmade now: {made_now}"
        );
    }
    // The related watch is planned again: both chains of foreign keys to its related table, and
    // the capture triggers on the related table's partition.
    let relations = |db: &mut Client| -> Vec<String> {
        db.query(
            "SELECT concat_ws(E'\n', watch_id, tbl, \
                      (SELECT count(*) FROM pg_trigger \
                        WHERE tgrelid = 'shelves_low'::regclass AND tgname LIKE 'indexnow_capture_%')) \
               FROM indexnow_relations ORDER BY watch_id, tbl",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    assert_eq!(relations(&mut db), relations(&mut fresh));
    let (upgraded, fresh) = (catalog(&mut db), catalog(&mut fresh));
    assert!(upgraded.len() > 100, "the catalog query sees the extension");
    assert_same_catalog(&upgraded, &fresh, "upgraded and fresh differ");
    // A write straight to the related table's partition, to the shelf the URL reads (reached by
    // the second foreign key declared), moves the book.
    db.batch_execute("UPDATE shelves_low SET slug = 'verse' WHERE id = 1")
        .unwrap();
    db.batch_execute("SELECT indexnow_derive()").unwrap();
    assert_eq!(
        count(
            &mut db,
            &format!(
                "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq \
                   AND (url, reason) IN (('{}', 'moved'), ('{}', 'created'))",
                url("poems/odes"),
                url("verse/odes")
            )
        ),
        2
    );
}
