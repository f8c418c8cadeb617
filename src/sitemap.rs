//! `indexnow_sitemap(host, page)`: a sitemaps.org document of a host's public URLs, for the web
//! application to serve (as it serves the key file), for the search engines that take no
//! IndexNow and read sitemaps.
//!
//! The URLs are those the watches' derivation holds public now (given by `indexnow_sources`: not
//! scheduled, not withdrawn; their text is the queue row's), so a page appears once it is public
//! and leaves when it is not, as it is announced and removed. `<lastmod>` is the last content change the derivation saw (the
//! queue row's `changed_at`); a page only known from the watch's baseline, whose last change no
//! one saw, has none: a lastmod is worth something only where it is true.
//!
//! Page `n` (from 1) is a `<urlset>` of at most [`URLS_A_FILE`] URLs in URL order; page 0 is the
//! `<sitemapindex>` of the pages, at `https://<host>/sitemap.xml?page=<n>` (the web application
//! answers that address with page `n`). A page past the last is NULL.

use crate::plan_cache;
use pgrx::prelude::*;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::Writer;

/// The protocol's limit: at most 50,000 URLs in one sitemap file.
pub const URLS_A_FILE: i64 = 50_000;

const NAMESPACE: &str = "http://www.sitemaps.org/schemas/sitemap/0.9";

/// The sitemap document of `host`'s public URLs: page `page` (from 1), or with `page` 0 the index
/// of the pages.
#[pg_extern(name = "indexnow_sitemap", stable, parallel_unsafe)]
fn indexnow_sitemap(host: Option<&str>, page: default!(Option<i32>, "1")) -> Option<String> {
    let Some(host) = host else {
        error!("indexnow_sitemap: the host must not be NULL");
    };
    let Some(page) = page.filter(|p| *p >= 0) else {
        error!("indexnow_sitemap: page must be 0 (the index) or a page number from 1");
    };
    crate::extension::require_current_version();
    let host = indexnow_protocol::submittable_url(&format!("https://{host}/"))
        .map(|t| t.host)
        .unwrap_or_else(|e| {
            error!("indexnow_sitemap: {host:?} is not a host URLs can be submitted for: {e}")
        });
    let ext = crate::extension::schema();
    if page == 0 {
        let urls = plan_cache::get_one::<i64>(
            &format!("SELECT count(*) FROM ({}) u", public_urls(&ext)),
            &[host.as_str().into()],
        )
        .unwrap_or_else(|e| error!("indexnow_sitemap: {e}"))
        .unwrap_or(0);
        let pages = ((urls + URLS_A_FILE - 1) / URLS_A_FILE).max(1);
        return Some(index(&host, pages));
    }
    let sql = format!("{} ORDER BY url OFFSET $2 LIMIT $3", public_urls(&ext));
    let rows: Vec<(String, Option<String>)> = Spi::connect(|client| {
        plan_cache::read(
            client,
            &sql,
            &[
                host.as_str().into(),
                ((i64::from(page) - 1) * URLS_A_FILE).into(),
                URLS_A_FILE.into(),
            ],
        )?
        .map(|r| Ok((r.get(1)?.unwrap_or_default(), r.get(2)?)))
        .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| error!("indexnow_sitemap: {e}"));
    // Page 1 is there for a host without public URLs (the index lists it), empty; a page past
    // the last is not there at all, so that the web application answers 404 for it.
    if rows.is_empty() && page > 1 {
        return None;
    }
    Some(urlset(&rows))
}

/// The public URLs of host `$1`, each once, with its lastmod in W3C form (UTC) or NULL: the queue
/// rows of the host (one a URL, with its text) that a source of an active watch gives public now.
/// (`OFFSET 0` keeps the look-up of each URL's sources one through their URL's index: as a
/// join, or through the watch's, the planner read every source for each URL when the statistics
/// took the sources for empty — see `crate::derive::statements` — and a page of 50,000 URLs
/// took minutes.)
pub(crate) fn public_urls(ext: &str) -> String {
    format!(
        "SELECT u.url, \
                CASE WHEN u.last_pushed_at IS NULL AND u.request_seq = u.settled_seq \
                     THEN NULL \
                     ELSE pg_catalog.to_char(u.changed_at AT TIME ZONE 'UTC', \
                                             'YYYY-MM-DD\"T\"HH24:MI:SS\"+00:00\"') END AS lastmod \
           FROM {ext}.indexnow_urls u \
          WHERE u.host = $1 AND EXISTS ( \
                SELECT FROM (SELECT s.watch_id FROM {ext}.indexnow_sources s \
                              WHERE s.url_hash = u.url_hash AND NOT s.withdrawn \
                                AND NOT coalesce(s.publish_at > pg_catalog.now(), false) \
                             OFFSET 0) s \
                  JOIN {ext}.indexnow_watches w ON w.id = s.watch_id AND w.active)"
    )
}

fn urlset(rows: &[(String, Option<String>)]) -> String {
    document("urlset", |w| {
        for (loc, lastmod) in rows {
            w.write_event(Event::Start(BytesStart::new("url")))?;
            element(w, "loc", loc)?;
            if let Some(lastmod) = lastmod {
                element(w, "lastmod", lastmod)?;
            }
            w.write_event(Event::End(BytesEnd::new("url")))?;
        }
        Ok(())
    })
}

fn index(host: &str, pages: i64) -> String {
    document("sitemapindex", |w| {
        for page in 1..=pages {
            w.write_event(Event::Start(BytesStart::new("sitemap")))?;
            element(w, "loc", &format!("https://{host}/sitemap.xml?page={page}"))?;
            w.write_event(Event::End(BytesEnd::new("sitemap")))?;
        }
        Ok(())
    })
}

type XmlWriter = Writer<std::io::Cursor<Vec<u8>>>;

/// A UTF-8 XML document whose root `root` (in the sitemaps.org namespace) holds what `body`
/// writes.
fn document(root: &str, body: impl FnOnce(&mut XmlWriter) -> std::io::Result<()>) -> String {
    let mut w = Writer::new_with_indent(std::io::Cursor::new(Vec::new()), b' ', 2);
    let written = (|| {
        w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
        let mut start = BytesStart::new(root);
        start.push_attribute(("xmlns", NAMESPACE));
        w.write_event(Event::Start(start))?;
        body(&mut w)?;
        w.write_event(Event::End(BytesEnd::new(root)))
    })();
    written.unwrap_or_else(|e| error!("indexnow_sitemap: writing the document: {e}"));
    String::from_utf8(w.into_inner().into_inner()).expect("the writer writes UTF-8")
}

/// `<name>text</name>`, the text escaped.
fn element(w: &mut XmlWriter, name: &str, text: &str) -> std::io::Result<()> {
    w.write_event(Event::Start(BytesStart::new(name)))?;
    w.write_event(Event::Text(BytesText::new(text)))?;
    w.write_event(Event::End(BytesEnd::new(name)))
}
