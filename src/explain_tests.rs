// `indexnow_explain()`, SQL level: each fact it can say, and the due rule's every branch.

/// What `indexnow_explain(url)` says about `topic`, its facts joined by " | ".
fn explained(url: &str, topic: &str) -> String {
    text(&format!(
        "SELECT coalesce(string_agg(says, ' | '), '') FROM indexnow_explain('{url}') \
          WHERE topic = '{topic}'"
    ))
    .unwrap_or_default()
}

/// Every row of the due table (`queue::due::cases`) explained as the senders' rule decides it:
/// due or not, and when not, the term that holds it (debounce, publication time, min_gap,
/// repeat_after); a URL with nothing pending has no due fact.
#[pg_test]
fn explain_says_what_the_due_rule_says_on_every_branch() {
    run("SET LOCAL indexnow.debounce = '120s'");
    run("SET LOCAL indexnow.min_gap = '3600s'");
    run("SET LOCAL indexnow.repeat_after = '86400s'");
    run("SELECT indexnow_add_host('www.example.com', 'abcdefgh12')");
    let rule = cases::rule();
    for (n, (what, row, due_now, due_at)) in cases::table().into_iter().enumerate() {
        let url = format!("https://www.example.com/case-{n}");
        // The case's times, relative to its NOW, made relative to the clock (explain reads it),
        // from one reading of it (two rows' equal times stay equal).
        let base = text("SELECT clock_timestamp()::text").unwrap();
        let at = |m: due::Micros| {
            format!(
                "'{base}'::timestamptz + interval '{} microseconds'",
                m - cases::NOW
            )
        };
        run(&format!(
            "INSERT INTO indexnow_urls (url, url_hash, host, reason, changed_at, queued_at, \
               available_at, last_pushed_at, pushed_changed_at, request_seq, settled_seq, \
               settled_reason) \
             VALUES ('{url}', decode('{hash}', 'hex'), 'www.example.com', 'changed', {changed}, \
               {changed}, {available}, {pushed}, {pushed_changed}, {req}, {settled}, {told})",
            hash = hex(&crate::queue::url_hash(&url)),
            changed = at(row.changed_at),
            available = at(row.available_at),
            pushed = row.last_pushed_at.map(at).unwrap_or("NULL".into()),
            pushed_changed = row.pushed_changed_at.map(at).unwrap_or("NULL".into()),
            req = row.request_seq,
            settled = row.settled_seq,
            told = if row.settled_seq > 0 { "'changed'" } else { "NULL" },
        ));
        let says = explained(&url, "due");
        let Some(due_at) = due_at else {
            assert_eq!(says, "", "{what}: nothing pending, no due fact");
            assert!(explained(&url, "queue").starts_with("nothing pending"), "{what}");
            continue;
        };
        if due_now {
            assert!(says.starts_with("due since "), "{what}: {says}");
            continue;
        }
        assert!(says.starts_with("not due before "), "{what}: {says}");
        let quiet = row.changed_at + rule.debounce.as_micros() as due::Micros;
        let held_by = if row.available_at == due_at {
            "scheduled"
        } else if quiet == due_at {
            "indexnow.debounce"
        } else if row.pushed_changed_at != Some(row.changed_at) {
            "indexnow.min_gap"
        } else {
            "indexnow.repeat_after"
        };
        assert!(says.contains(held_by), "{what}: {says} should name {held_by}");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Beyond the due rule: a sender's lease, a dry run's decision, and each hold and pause of the
/// host, by the senders' own conditions.
#[pg_test]
fn explain_names_what_keeps_a_due_url_from_going() {
    run("SET LOCAL indexnow.debounce = 0");
    let url = "https://www.example.com/held";
    run(&format!("SELECT indexnow_queue('{url}')"));
    assert!(explained(url, "host").contains("is held: no key"));
    run("SELECT indexnow_add_host('www.example.com', 'abcdefgh12')");
    assert_eq!(explained(url, "host"), "www.example.com may be sent for now");
    assert!(explained(url, "due").starts_with("due since "));
    run("SELECT indexnow_disable_host('www.example.com')");
    assert!(explained(url, "host").contains("is held: disabled"));
    run("SELECT indexnow_enable_host('www.example.com')");
    // A copy of the database (its key was added in another database) holds the host.
    run("UPDATE indexnow_hosts SET home_database = 1");
    assert!(
        explained(url, "host").contains("this database is a copy"),
        "{}",
        explained(url, "host")
    );
    run("SELECT indexnow_confirm_copy()");
    assert_eq!(explained(url, "host"), "www.example.com may be sent for now");
    run("SET LOCAL indexnow.enabled = off");
    assert!(explained(url, "host").contains("indexnow.enabled is off"));
    run("SET LOCAL indexnow.enabled = on");
    run(
        "INSERT INTO indexnow_backoff VALUES ('*', now() + interval '1 hour', 429, 'slow down')",
    );
    assert!(explained(url, "host").contains("is paused until"));
    run("DELETE FROM indexnow_backoff");
    run("SET LOCAL indexnow.dry_run = on");
    assert!(explained(url, "host").contains("indexnow.dry_run is on"));
    run(&format!(
        "UPDATE indexnow_urls SET dry_run_seq = request_seq WHERE url = '{url}'"
    ));
    assert!(explained(url, "due").contains("a dry run decided on this request"));
    run("SET LOCAL indexnow.dry_run = off");
    run(&format!(
        "UPDATE indexnow_urls SET claimed_until = now() + interval '5 minutes', tried_at = now() \
          WHERE url = '{url}'"
    ));
    assert!(explained(url, "due").contains("a sender holds it until"));
    // A refusal, and the requests kept with their answers.
    run(&format!(
        "UPDATE indexnow_urls SET claimed_until = NULL, settled_seq = request_seq, \
           failed_at = now(), failed_status = 422, failed_note = 'url not of the host' \
          WHERE url = '{url}'"
    ));
    run(&format!(
        "INSERT INTO indexnow_pushes (host, url_count, status, note, urls) \
           VALUES ('www.example.com', 1, 422, 'url not of the host', ARRAY['{url}'])"
    ));
    assert!(explained(url, "refused").contains("status 422 (url not of the host)"));
    assert!(explained(url, "request").contains("status 422"));
    assert_eq!(explained(url, "due"), "", "settled: nothing due");
}

/// Where the URL comes from: the row that gives it, scheduled, withdrawn or with an expiry; a
/// row hidden or gone since it was derived (a change recorded, not derived); no row, with the
/// watch whose form it has; a URL that cannot be submitted; one not in the queue at all.
#[pg_test]
fn explain_says_which_row_gives_a_url_and_what_it_is_now() {
    run(
        "CREATE TABLE posts (id int PRIMARY KEY, slug text NOT NULL, live boolean NOT NULL, \
           pub timestamptz, ends timestamptz)",
    );
    run(
        "INSERT INTO posts VALUES (1, 'a', true, NULL, now() + interval '1 day'), \
           (2, 'b', true, now() + interval '1 day', NULL), (3, 'c', true, NULL, NULL)",
    );
    run(
        "SELECT indexnow_watch('posts', url => 'https://www.example.com/p/{slug}', \
           visible => 'live', publish_at => 'pub', expire_at => 'ends')",
    );
    let a = "https://www.example.com/p/a";
    assert!(
        explained(a, "source")
            .contains("given by row [1] of public.posts (watch for https://www.example.com/p/{slug})"),
        "{}",
        explained(a, "source")
    );
    assert!(explained(a, "source").contains("expires at"));
    assert!(explained("https://www.example.com/p/b", "source").contains("scheduled: public from"));
    assert!(explained(a, "queue").contains("taken as known"));
    // Written, not derived yet: the row as it is now, and the change recorded.
    run("UPDATE posts SET live = false WHERE id = 3");
    let c = "https://www.example.com/p/c";
    assert!(explained(c, "source").contains("its row is hidden now"), "{}", explained(c, "source"));
    assert!(explained(c, "change").contains("a change of its row recorded at"));
    run("DELETE FROM posts WHERE id = 1");
    assert!(explained(a, "source").contains("its row is gone now"));
    run("SELECT indexnow_derive()");
    assert!(explained(c, "source").starts_with("no row of a watched table gives it now; it has the form of https://www.example.com/p/{slug} of public.posts"), "{}", explained(c, "source"));
    assert_eq!(explained(c, "change"), "");
    // (taken as known when the table was watched: its removal is owed)
    assert!(
        explained(c, "queue").starts_with("pending: \"unpublished\""),
        "{}",
        explained(c, "queue")
    );
    // A live page rescheduled is withdrawn.
    run("UPDATE indexnow_urls SET settled_reason = 'created', last_pushed_at = now() WHERE url LIKE '%/p/b'");
    run("UPDATE posts SET pub = NULL WHERE id = 2");
    run("SELECT indexnow_derive()");
    run("UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, last_pushed_at = clock_timestamp() WHERE url LIKE '%/p/b'");
    run("UPDATE posts SET pub = now() + interval '2 days' WHERE id = 2");
    run("SELECT indexnow_derive()");
    assert!(explained("https://www.example.com/p/b", "source").contains("withdrawn until"));
    // Input.
    assert!(explained("HTTPS://WWW.Example.com/p/b", "url").contains("read as https://www.example.com/p/b"));
    assert!(explained("https://localhost/x", "url").starts_with("refused: "));
    assert!(explained("https://www.example.com/nowhere", "queue").starts_with("not in the queue"));
    assert!(explained("https://www.example.com/nowhere", "request").starts_with("no request kept"));
}

/// `indexnow_coverage()` counts, per watch, exactly: public (live now), scheduled, told since
/// their last change, pending, due now, never announced (and of those held by their host, and
/// refused), removals owed, change sets waiting.
#[pg_test]
fn coverage_counts_what_is_public_told_and_owed() {
    run("SET LOCAL indexnow.debounce = 0");
    run("SELECT indexnow_add_host('www.example.com', 'abcdefgh12')");
    run(
        "CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, site text NOT NULL, \
           live boolean NOT NULL, pub timestamptz)",
    );
    run(
        "SELECT indexnow_watch('pages', url_sql => $$'https://' || site || '/' || slug$$, \
           visible => 'live', publish_at => 'pub')",
    );
    run(
        "INSERT INTO pages VALUES (1, 'told', 'www.example.com', true, NULL), \
           (2, 'new', 'www.example.com', true, NULL), \
           (3, 'hidden', 'www.example.com', false, NULL), \
           (4, 'later', 'www.example.com', true, now() + interval '1 day'), \
           (5, 'refused', 'www.example.com', true, NULL), \
           (6, 'nokey', 'held.example.com', true, NULL), \
           (7, 'gone', 'www.example.com', true, NULL)",
    );
    run("SELECT indexnow_derive()");
    run(
        "UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, \
           last_pushed_at = clock_timestamp(), pushed_changed_at = changed_at \
          WHERE url LIKE '%/told' OR url LIKE '%/gone'",
    );
    run(
        "UPDATE indexnow_urls SET settled_seq = request_seq, failed_at = now(), \
           failed_status = 422, failed_note = 'not of the host' WHERE url LIKE '%/refused'",
    );
    // (as if derived by an earlier transaction: this test is one, whose change sets below would
    // hold what it derived before them)
    run("UPDATE indexnow_urls SET held_by = NULL");
    run("DELETE FROM pages WHERE id = 7");
    run("UPDATE pages SET slug = 'newer' WHERE id = 2"); // recorded, not derived: waiting
    assert_eq!(
        text(
            "SELECT concat_ws(' ', tbl, public, scheduled, told, pending, due_now, \
                              never_announced, held, failed, removals_owed, changes_waiting) \
               FROM indexnow_coverage('pages')"
        )
        .as_deref(),
        Some("public.pages 5 1 2 2 1 3 1 1 0 2"),
        "before deriving: as last derived (the deleted page still public and told), and the \
         delete and the edit waiting as change sets"
    );
    run("SELECT indexnow_derive()");
    assert_eq!(
        text(
            "SELECT concat_ws(' ', public, scheduled, told, pending, due_now, never_announced, \
                              held, failed, removals_owed, changes_waiting) \
               FROM indexnow_coverage()"
        )
        .as_deref(),
        Some("4 1 1 2 1 3 1 1 1 0")
    );
}

/// The `<loc>`s and `<lastmod>`s of a sitemap document, checked against the protocol's schema as
/// a structure: an XML declaration in UTF-8, one root element `root` in the sitemaps.org
/// namespace, whose children are `item` elements each with one `<loc>` (an absolute URL of at
/// most 2048 characters) and at most one `<lastmod>` (W3C datetime), nothing else.
fn sitemap_entries(xml: &str, root: &str, item: &str) -> Vec<(String, Option<String>)> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().trim_text(true);
    let mut path: Vec<String> = vec![];
    let mut entries: Vec<(String, Option<String>)> = vec![];
    let mut declared = false;
    let mut current = String::new();
    loop {
        match reader.read_event().unwrap() {
            Event::Decl(d) => {
                assert_eq!(&*d.encoding().unwrap().unwrap(), b"UTF-8");
                declared = true;
            }
            Event::Start(e) => {
                let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                match path.len() {
                    0 => {
                        assert_eq!(name, root);
                        let ns = e.try_get_attribute("xmlns").unwrap().unwrap();
                        assert_eq!(&*ns.value, b"http://www.sitemaps.org/schemas/sitemap/0.9");
                    }
                    1 => {
                        assert_eq!(name, item);
                        entries.push((String::new(), None));
                    }
                    2 => {
                        assert!(name == "loc" || name == "lastmod", "{name}");
                        current.clear();
                    }
                    _ => panic!("{name} nested too deep"),
                }
                path.push(name);
            }
            Event::Text(t) => current.push_str(&t.decode().unwrap()),
            Event::GeneralRef(r) => current.push_str(
                match &*r.decode().unwrap() {
                    "amp" => "&",
                    "lt" => "<",
                    "gt" => ">",
                    "quot" => "\"",
                    "apos" => "'",
                    other => panic!("unknown entity {other}"),
                },
            ),
            Event::End(_) => {
                let text = std::mem::take(&mut current);
                match path.pop().as_deref() {
                    Some("loc") => {
                        let entry = entries.last_mut().unwrap();
                        assert!(entry.0.is_empty(), "one loc");
                        assert!(text.starts_with("https://") && text.len() <= 2048, "{text}");
                        entry.0 = text;
                    }
                    Some("lastmod") => {
                        let entry = entries.last_mut().unwrap();
                        assert!(entry.1.is_none(), "one lastmod");
                        assert_eq!(text.len(), 25, "{text}");
                        assert!(text.ends_with("+00:00") && text.as_bytes()[10] == b'T');
                        entry.1 = Some(text);
                    }
                    _ => assert!(text.is_empty(), "text outside loc and lastmod: {text}"),
                }
            }
            Event::Eof => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(declared && path.is_empty());
    assert!(entries.iter().all(|(loc, _)| !loc.is_empty()));
    assert!(entries.len() as i64 <= crate::sitemap::URLS_A_FILE);
    entries
}

/// `indexnow_sitemap()`: the host's public URLs (not hidden, not scheduled, not another host's),
/// escaped, with the last change the derivation saw (none for a page only known from the watch's
/// baseline); a page leaves when it is hidden; 50,000 URLs a page, and an index of the pages.
#[pg_test]
fn the_sitemap_lists_the_public_urls_by_the_protocol() {
    run(
        "CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, site text NOT NULL, \
           live boolean NOT NULL, pub timestamptz)",
    );
    run("INSERT INTO pages VALUES (1, 'old', 'www.example.com', true, NULL)");
    run(
        "SELECT indexnow_watch('pages', url_sql => $$'https://' || site || '/' || slug$$, \
           visible => 'live', publish_at => 'pub')",
    );
    run(
        "INSERT INTO pages VALUES (2, 'a?x=1&y=<2>', 'www.example.com', true, NULL), \
           (3, 'hidden', 'www.example.com', false, NULL), \
           (4, 'later', 'www.example.com', true, now() + interval '1 day'), \
           (5, 'other', 'other.example.com', true, NULL)",
    );
    run("SELECT indexnow_derive()");
    let xml = text("SELECT indexnow_sitemap('www.example.com')").unwrap();
    let entries = sitemap_entries(&xml, "urlset", "url");
    let locs: Vec<&str> = entries.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        locs,
        [
            "https://www.example.com/a?x=1&y=%3C2%3E",
            "https://www.example.com/old"
        ]
    );
    assert!(entries[0].1.is_some(), "a change the derivation saw");
    assert!(entries[1].1.is_none(), "known from the baseline only: no lastmod");
    run("UPDATE pages SET live = false WHERE id = 1");
    run("SELECT indexnow_derive()");
    let xml = text("SELECT indexnow_sitemap('WWW.Example.com')").unwrap();
    assert_eq!(sitemap_entries(&xml, "urlset", "url").len(), 1, "hidden: gone from it");
    // A page boundary at 50,000, and the index.
    run(
        "INSERT INTO pages SELECT g, 'p' || g, 'www.example.com', true, NULL \
           FROM generate_series(10, 50009) g",
    );
    run("SELECT indexnow_derive()");
    let first = sitemap_entries(
        &text("SELECT indexnow_sitemap('www.example.com', 1)").unwrap(),
        "urlset",
        "url",
    );
    let second = sitemap_entries(
        &text("SELECT indexnow_sitemap('www.example.com', 2)").unwrap(),
        "urlset",
        "url",
    );
    assert_eq!((first.len(), second.len()), (50_000, 1));
    // A page past the last is not there (the web application answers 404); page 1 of a host
    // without public URLs is, empty, as the index lists it.
    assert_eq!(text("SELECT indexnow_sitemap('www.example.com', 3)"), None);
    let empty = text("SELECT indexnow_sitemap('nothing.example.com', 1)").unwrap();
    assert!(sitemap_entries(&empty, "urlset", "url").is_empty());
    assert_eq!(text("SELECT indexnow_sitemap('nothing.example.com', 2)"), None);
    assert!(first.last().unwrap().0 < second[0].0, "in URL order across pages");
    let index = sitemap_entries(
        &text("SELECT indexnow_sitemap('www.example.com', 0)").unwrap(),
        "sitemapindex",
        "sitemap",
    );
    assert_eq!(
        index.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(),
        [
            "https://www.example.com/sitemap.xml?page=1",
            "https://www.example.com/sitemap.xml?page=2"
        ]
    );
}
