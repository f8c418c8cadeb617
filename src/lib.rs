//! indexnow: keeps search engines told, through the IndexNow protocol, about every page a
//! Postgres-backed site adds, changes or removes, with the whole queue inside the database.
//!
//! The map of the code, every file (a test fails when a file is missing here, or named here and
//! gone). Layers, from the bottom: settings, protocol, errors and helpers; the queue's rules; hosts;
//! derivation;
//! capture and sending; status; the workers. "Behaviour N" in comments is the numbered list of
//! behaviours in `docs/reliability.md`, each with the tests that would catch its loss.
//!
//! - `lib.rs`              this map, `_PG_init`, the SQL files included in the install script
//! - `guc.rs`              every setting
//! - `compat.rs`           what differs between PostgreSQL 15, 16, 17 and 18
//! - `error.rs`            how bad input is refused (SQLSTATE, quoting a value)
//! - `plan_cache.rs`       statements planned once per backend (SPI_keepplan), under the search_path
//!   they were planned for
//! - `subtransaction.rs`   work that may fail alone (a watch's statement, a re-read)
//! - `quote.rs`            names and text quoted into SQL
//! - `invalidation.rs`     per-backend caches kept right by relation-cache invalidations: one
//!   callback, and when an entry built may be kept
//! - `extension.rs`        the extension's schema, owner and version; the library's version
//! - `registry.rs`         what the workers and every backend share in shared memory: which workers
//!   serve which database and what each is doing
//! - `wake.rs`             waking the workers at the commit of what queued something
//! - `queue/mod.rs`        `indexnow_queue()` and the upsert every request goes through
//! - `queue/reason.rs`     the reasons, and which are removals
//! - `queue/due.rs`        the due rule, in Rust and in SQL
//! - `hosts.rs`            `indexnow_add_host()` and the key rules, switching hosts off and on, the
//!   home rule: a copy of the database sends nothing until `indexnow_confirm_copy()`
//! - `derive/mod.rs`     derivation, the one engine from "these rows of this table changed" to queue
//!   requests: runs a watch's statement over rows (a failing row skipped alone), change sets
//!   derived after commit; used by capture and by the senders, and imports neither
//! - `derive/statements.rs`  the SQL a watch generates (the derivation rules are stated there)
//! - `derive/generated.rs`  a watch's statements, generated where used from its stored arguments and
//!   the catalog, kept per backend until an invalidation
//! - `derive/settings.rs`  the settings every derivation runs under
//! - `derive/change_sets.rs`  change sets: recorded by the writing statement, taken by a deriver
//!   (and rows whose time has come, their expiry or a withdrawn page's publication, woken as such)
//! - `derive/column_changes.rs`  which columns tracked saves changed, counted by their deriver
//! - `derive/key.rs`      a table's primary key as the watches use it
//! - `derive/owner.rs`    a watch's SQL run with its maker's rights, the extension's with its owner's
//! - `derive/template.rs` URL templates and their percent-encoding
//! - `derive/fingerprint.rs`  `indexnow_fingerprint()` for custom triggers (watches fingerprint in
//!   their generated SQL)
//! - `capture/mod.rs`      capture: from writes to content tables to recorded changes
//! - `capture/watch.rs`    `indexnow_watch()`, `indexnow_unwatch()`, `indexnow_reconcile()`,
//!   `indexnow_derive()`: arguments checked against the table, triggers installed, watches repaired
//! - `capture/trigger_function.rs`  `_indexnow_capture()`, the trigger function, and the UPDATE gate
//! - `capture/cache.rs`    what the trigger knows of a written table, kept per backend until an
//!   invalidation
//! - `capture/transition.rs`  transition tables read without SQL: the gate's comparison, the keys
//! - `capture/triggers.rs` the capture triggers: made, dropped, found
//! - `capture/placement.rs` where the capture triggers go: the one rule, put on and taken off
//! - `capture/related.rs`  related tables: from a written parent row to the watched rows that read it
//! - `capture/partitions.rs`  partitions and inheritance children of a watched table
//! - `capture/before_ddl.rs`  DDL seen before it runs: a column renamed (templates follow), a
//!   partition dropped (its parent derived)
//! - `capture/after_ddl.rs`  the end of `CREATE TABLE` and `ALTER TABLE`: triggers where a tree now
//!   needs them, watches made again, the table derived whole when rows may have changed
//! - `capture/dropped.rs`  a watched or related table dropped: its removals queued, its watches gone
//! - `process.rs`          the background process a pass runs in: pg_stat_activity, statistics,
//!   SIGTERM
//! - `send/mod.rs`         one sending pass: hosts in turn, claim, POST, record, log; pauses ending
//! - `send/in_flight.rs`   requests in flight, each in a thread that only does network I/O
//! - `send/sql.rs`         the statements of a pass
//! - `send/push_now.rs`    `indexnow_push_now()`
//! - `status.rs`           `indexnow_status()`; its query is `status.sql`
//! - `explain.rs`          `indexnow_explain()`: why a URL is or is not sent, from the rules that decide it
//! - `coverage.rs`         `indexnow_coverage()`: per watch, what is public, told and owed
//! - `sitemap.rs`          `indexnow_sitemap()`: a sitemaps.org document of a host's public URLs
//! - `worker/mod.rs`       the launcher and the per-database workers
//! - `worker/settings.rs`  database and role settings followed by a running worker
//! - `worker/ddl.rs`       getting out of the way of DROP DATABASE and its kind
//! - `tests.rs`, `capture_tests.rs`, `explain_tests.rs`  the `#[pg_test]`s (SQL-level, in a test database)
//! - `../sql/schema.sql`   tables and indexes
//! - `../sql/capture.sql`  `indexnow_watch()`'s expression check; the event trigger for partitions
//! - `../sql/security.sql` grants, SECURITY DEFINER, search_path pins
//! - `../sql/indexnow--*.sql`  released install scripts and the upgrade scripts between releases
//! - `../crates/protocol`  the IndexNow protocol's rules in plain Rust (URLs, keys, the request,
//!   what an answer means, the HTTP client)
//! - `../crates/receiver`  a local IndexNow endpoint for the tests and the demo
//! - `../tests/e2e`        end-to-end tests on real clusters, the soak, the upgrade test
//! - `../tests/pages.sql`  the demo's `pages` site, as the capture tests use it
//! - `golden.rs`           golden files: generated SQL compared exactly with `../tests/golden`
//! - `../tests/golden`     the statements generated for the demo's watches (the golden test in
//!   `derive/statements.rs`; `capture_tests.rs` checks that a real watch stores the same), the
//!   edited-in-place save, the related-table lookups (`capture/related.rs`), and the sending
//!   pass's claims and settles (`send/sql.rs`)
//! - `../releases`         each release's source, which the upgrade test builds

use pgrx::prelude::*;

mod capture;
mod compat;
mod coverage;
mod derive;
mod error;
mod explain;
mod extension;
#[cfg(test)]
mod golden;
mod guc;
mod hosts;
mod invalidation;
mod plan_cache;
mod process;
mod queue;
mod quote;
mod registry;
mod send;
mod sitemap;
mod status;
mod subtransaction;
mod wake;
mod worker;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!(
    "../sql/capture.sql",
    name = "capture",
    requires = ["schema"]
);
extension_sql_file!("../sql/security.sql", name = "security", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::register();
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        worker::register_at_preload();
    }
}

// #[pg_schema] takes only an inline module, so the tests' file is included into one.
#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    include!("tests.rs");
    include!("capture_tests.rs");
    include!("explain_tests.rs");
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    /// No autovacuum in the test server: every test's transaction is rolled back, so the
    /// extension's tables hold only dead rows, and a vacuum of them at a random moment (one
    /// whose truncation another test's lock prevents) records them as having pages but no rows.
    /// The planner then takes them for empty in every later test, whatever that test wrote in
    /// its transaction, and some statements of a test that writes 50,000 rows took hours
    /// instead of seconds (a nested loop rescanning a CTE per row). Without autovacuum the
    /// statistics are those of `CREATE EXTENSION` for the whole run, the same in every run.
    /// (A server in use analyzes what its transactions committed within a minute; the
    /// end-to-end tests run with autovacuum.)
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["autovacuum = off"]
    }
}

#[cfg(test)]
mod map {
    //! The map at the top of this file against the tree, and the imports between its files.
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    fn named() -> Vec<String> {
        let text: String = include_str!("lib.rs")
            .lines()
            .filter(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        text.split('`')
            .skip(1)
            .step_by(2)
            .filter(|t| t.ends_with(".rs") || t.ends_with(".sql"))
            .map(str::to_string)
            .collect()
    }

    fn files(dir: &Path, base: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, base, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }

    #[test]
    fn the_map_names_every_source_file_and_no_other() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = vec![];
        files(&src, &src, &mut found);
        let named = named();
        for file in &found {
            assert!(
                named.contains(file),
                "src/{file} is missing from the map in src/lib.rs"
            );
        }
        for name in named.iter().filter(|n| !n.contains('*')) {
            assert!(
                src.join(name).exists(),
                "the map in src/lib.rs names {name}, which does not exist"
            );
        }
    }

    /// A source file's module path (`capture::watch`; `derive` for `derive/mod.rs`).
    fn module_of(file: &str) -> Vec<String> {
        let mut parts: Vec<String> = file
            .trim_end_matches(".rs")
            .split('/')
            .map(String::from)
            .collect();
        if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
            parts.pop();
        }
        parts
    }

    /// `text` without comments, and without the items under a test-only `#[cfg(...)]` (a test
    /// module, a test function): what the library itself is made of.
    fn library_code(text: &str) -> String {
        let mut lines: Vec<&str> = vec![];
        for line in text.lines() {
            let code = line.split(" // ").next().unwrap_or_default();
            if !code.trim_start().starts_with("//") {
                lines.push(code);
            }
        }
        let code = lines.join("\n");
        let mut kept = String::new();
        let mut rest = code.as_str();
        while let Some(at) = ["#[cfg(test)]", "#[cfg(any(test, feature = \"pg_test\"))]"]
            .iter()
            .filter_map(|a| rest.find(a))
            .min()
        {
            kept.push_str(&rest[..at]);
            // The item that follows (after its other attributes): up to its `;`, or through the
            // brace that closes its body.
            let item = &rest[at..];
            let mut depth = 0usize;
            let mut end = item.len();
            for (i, c) in item.char_indices().skip_while(|(_, c)| *c != ']') {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    ';' if depth == 0 => {
                        end = i + 1;
                        break;
                    }
                    _ => {}
                }
            }
            rest = &item[end..];
        }
        kept.push_str(rest);
        kept
    }

    /// The paths a use tree at `chars[*at..]` names, each as its segments (`a::{b, c::{d, e}}`:
    /// `a::b`, `a::c::d`, `a::c::e`, and `a` and `a::c` themselves).
    fn paths(chars: &[char], at: &mut usize) -> Vec<Vec<String>> {
        let skip_space = |at: &mut usize| {
            while *at < chars.len() && chars[*at].is_whitespace() {
                *at += 1;
            }
        };
        let mut segments: Vec<String> = vec![];
        loop {
            skip_space(at);
            if *at < chars.len() && chars[*at] == '{' {
                *at += 1;
                let mut found = vec![segments.clone()];
                loop {
                    skip_space(at);
                    if *at >= chars.len() || chars[*at] == '}' {
                        *at += 1;
                        return found;
                    }
                    for tail in paths(chars, at) {
                        found.push(segments.iter().cloned().chain(tail).collect());
                    }
                    skip_space(at);
                    if *at < chars.len() && chars[*at] == ',' {
                        *at += 1;
                    }
                }
            }
            let start = *at;
            while *at < chars.len() && (chars[*at].is_alphanumeric() || chars[*at] == '_') {
                *at += 1;
            }
            if *at == start {
                return vec![segments];
            }
            let word: String = chars[start..*at].iter().collect();
            if word != "self" {
                segments.push(word);
            }
            skip_space(at);
            if chars[*at..].starts_with(&[':', ':']) {
                *at += 2;
            } else {
                return vec![segments];
            }
        }
    }

    /// The modules the library code of `module` names: through `crate::`, `super::` and `self::`
    /// paths, and, in a folder's `mod.rs`, through paths that start with one of its own child
    /// modules (`sql::CLAIM`); each path resolved to the longest module it starts with.
    fn imports(
        module: &[String],
        text: &str,
        known: &BTreeSet<Vec<String>>,
    ) -> BTreeSet<Vec<String>> {
        let chars: Vec<char> = library_code(text).chars().collect();
        let children: Vec<String> = known
            .iter()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .map(|m| m[module.len()].clone())
            .collect();
        let mut found = BTreeSet::new();
        let mut at = 0;
        while at < chars.len() {
            let word_start = (at == 0
                || !(chars[at - 1].is_alphanumeric()
                    || chars[at - 1] == '_'
                    || chars[at - 1] == ':'))
                && (chars[at].is_alphabetic() || chars[at] == '_');
            if !word_start {
                at += 1;
                continue;
            }
            let mut end = at;
            while end < chars.len() && (chars[end].is_alphanumeric() || chars[end] == '_') {
                end += 1;
            }
            let word: String = chars[at..end].iter().collect();
            let follows_path = chars[end..].starts_with(&[':', ':']);
            let base: Option<Vec<String>> = match word.as_str() {
                _ if !follows_path => None,
                "crate" => Some(vec![]),
                // (`super` of `a::b` is `a`, whether `b` is a file or a folder's mod.rs)
                "super" => Some(module[..module.len().saturating_sub(1)].to_vec()),
                "self" => Some(module.to_vec()),
                w if children.iter().any(|c| c == w) => {
                    end = at; // the child's name is the path's first segment
                    Some(module.to_vec())
                }
                _ => None,
            };
            let Some(mut base) = base else {
                at = end;
                continue;
            };
            let mut tree_at = if end == at { at } else { end + 2 };
            for path in paths(&chars, &mut tree_at) {
                let mut full = base.clone();
                let mut segments = path.into_iter().peekable();
                while segments.peek().is_some_and(|s| s == "super") {
                    segments.next();
                    full.pop();
                }
                full.extend(segments);
                let target = (1..=full.len())
                    .rev()
                    .map(|n| full[..n].to_vec())
                    .find(|m| known.contains(m));
                if let Some(target) = target.filter(|t| t.as_slice() != module) {
                    found.insert(target);
                }
            }
            base.clear();
            at = tree_at.max(at + 1);
        }
        found
    }

    #[test]
    fn no_two_modules_import_each_other_directly_or_in_a_loop() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = vec![];
        files(&src, &src, &mut found);
        let found: Vec<String> = found
            .into_iter()
            .filter(|f| !f.ends_with("tests.rs"))
            .collect();
        let known: BTreeSet<Vec<String>> = found.iter().map(|f| module_of(f)).collect();
        let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for file in &found {
            let module = module_of(file);
            let text = std::fs::read_to_string(src.join(file)).unwrap();
            graph.insert(module.clone(), imports(&module, &text, &known));
        }
        // A loop is a path back to where it started: depth-first from every module.
        fn back_to<'a>(
            graph: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
            start: &'a Vec<String>,
            at: &'a Vec<String>,
            path: &mut Vec<&'a Vec<String>>,
            seen: &mut BTreeSet<&'a Vec<String>>,
        ) -> Option<Vec<String>> {
            for next in graph.get(at).into_iter().flatten() {
                if next == start {
                    return Some(
                        path.iter()
                            .chain(std::iter::once(&next))
                            .map(|m| m.join("::"))
                            .collect(),
                    );
                }
                if seen.insert(next) {
                    path.push(next);
                    if let Some(found) = back_to(graph, start, next, path, seen) {
                        return Some(found);
                    }
                    path.pop();
                }
            }
            None
        }
        for module in graph.keys() {
            let mut path = vec![module];
            if let Some(circle) = back_to(&graph, module, module, &mut path, &mut BTreeSet::new()) {
                panic!("imports run in a circle: {}", circle.join(" -> "));
            }
        }
        // (the test can fail: the capture module does import the derivation engine)
        assert!(graph[&vec!["capture".to_string(), "watch".to_string()]]
            .contains(&vec!["derive".to_string()]));
    }
}
