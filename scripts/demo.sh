#!/usr/bin/env bash
# The demo: a throwaway cluster with indexnow preloaded, a small bilingual site (Thai and English
# URLs of one pages table), and what the database queues as the site is edited: saves, an
# admin-only change, a bulk UPDATE, a slug change, a translation, an unpublish, a delete, a
# scheduled post, a bad URL; then what the worker sent to a local IndexNow receiver, a 429 that
# pauses sending, and indexnow_status().
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "[demo] building and installing the extension and the local IndexNow receiver"
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null 2>&1
cargo build --release -q -p indexnow-receiver

source scripts/cluster.sh
dir=/tmp/indexnow-demo
rport=$(free_port)
target/release/indexnow-receiver --listen "127.0.0.1:$rport" >/dev/null &
receiver=$!
port=$(free_port)
while [ "$port" = "$rport" ]; do sleep 0.2; port=$(free_port); done
# A short debounce so the demo does not wait two minutes for the edits to be quiet.
cluster_start "$dir" "$port" "indexnow.endpoint = 'http://127.0.0.1:$rport/indexnow'" \
  "indexnow.debounce = '3s'" "indexnow.naptime = '1s'"
trap 'cluster_stop "$dir"; kill $receiver 2>/dev/null || true' EXIT
echo "[demo] cluster on 127.0.0.1:$port (data in $dir), receiver on 127.0.0.1:$rport"

# Talks to the receiver with bash alone: receiver METHOD PATH [BODY]
receiver() {
  local body=${3:-}
  exec 3<>"/dev/tcp/127.0.0.1/$rport"
  printf '%s %s HTTP/1.0\r\nContent-Length: %s\r\n\r\n%s' "$1" "$2" "${#body}" "$body" >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}

psql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -X "$@"; }
psql -e <<'SQL'
CREATE EXTENSION indexnow;
SELECT indexnow_add_host('www.example.com', '5f2b9c0e4d8a4b7f9e1c3a6d8b0f2e4c');

-- A bilingual site: Thai columns and English columns in one table.
CREATE TABLE pages (
  id serial PRIMARY KEY, slug text, category text,
  title text, body text, title_en text, body_en text,
  status text NOT NULL DEFAULT 'draft', noindex boolean NOT NULL DEFAULT false,
  sort_order int, is_featured boolean, keywords text,
  created_at timestamptz DEFAULT now(), updated_at timestamptz DEFAULT now(), published_at timestamptz);
INSERT INTO pages (slug, category, title, body, title_en, body_en, status) VALUES
  ('welcome', 'info', 'ยินดีต้อนรับ', '...', 'Welcome', '...', 'published'),
  ('news-1',  'news', 'ข่าว 1', '...', 'News 1', '...', 'published'),
  ('news-2',  'news', 'ข่าว 2', '...', NULL, NULL, 'published'),
  ('plans',   'info', 'แผน', '...', NULL, NULL, 'draft');

-- One watch per language. The pages already live are taken as known: watching announces nothing.
SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{slug}',
  visible => $$status = 'published' AND NOT noindex$$,
  ignore => '{sort_order,is_featured,keywords,created_at,updated_at,title_en,body_en}',
  publish_at => 'published_at');
SELECT indexnow_watch('pages', url => 'https://www.example.com/en/{slug}',
  visible => $$status = 'published' AND NOT noindex AND title_en IS NOT NULL$$,
  ignore => '{sort_order,is_featured,keywords,created_at,updated_at,title,body}',
  hidden_reason => 'untranslated', publish_at => 'published_at');
SELECT url, reason, request_seq > settled_seq AS pending FROM indexnow_urls ORDER BY url;

-- Ten saves of one page (ten statements): one row.
SELECT $$UPDATE pages SET body = body || '.' WHERE slug = 'welcome'$$ FROM generate_series(1, 10) \gexec
-- Admin-only columns: nothing is queued.
UPDATE pages SET sort_order = 1, is_featured = true, keywords = 'k' WHERE slug = 'news-1';
-- Bulk SQL is caught too: one set-based step for the whole statement (a statement of more than
-- 100 rows is recorded and derived after its commit; status and the worker derive it).
UPDATE pages SET body = body || ' (updated)' WHERE category = 'news';
-- A slug change: the old URL (known to search engines) is moved, the new one created.
UPDATE pages SET slug = 'welcome-home' WHERE slug = 'welcome';
-- English translation added: only the English URL.
UPDATE pages SET title_en = 'News 2', body_en = '...' WHERE slug = 'news-2';
-- The draft stays a draft: never public, never queued.
UPDATE pages SET body = 'still a draft' WHERE slug = 'plans';
-- Unpublished, then deleted.
UPDATE pages SET status = 'draft' WHERE slug = 'news-1';
DELETE FROM pages WHERE slug = 'news-1';
-- A scheduled post: queued now, not sent before its time.
INSERT INTO pages (slug, title, body, status, published_at)
  VALUES ('launch', 'เปิดตัว', '...', 'published', now() + interval '1 day');
-- A row whose URL cannot be built is skipped with a WARNING; the statement succeeds.
INSERT INTO pages (slug, title, body, status) VALUES (NULL, 'no slug', '...', 'published');
\set ON_ERROR_STOP 0
-- A direct call with a URL search engines could never fetch is an ERROR naming the rule.
SELECT indexnow_queue('http://10.0.0.5/admin');
\set ON_ERROR_STOP 1

SELECT url, reason, request_seq - settled_seq AS requests,
       CASE WHEN available_at > now() THEN 'at ' || available_at::timestamp(0) ELSE 'now' END AS sendable
  FROM indexnow_urls WHERE request_seq > settled_seq ORDER BY url;
SELECT host, has_key, pending, due_now, next_due_at::timestamp(0), worker FROM indexnow_status();

-- The worker was woken at each commit; once the pages are quiet for the debounce it sends.
SELECT pg_sleep(5);
SELECT host, url_count, status, duration FROM indexnow_pushes ORDER BY id;
SELECT url, reason, last_pushed_at IS NOT NULL AS pushed,
       CASE WHEN request_seq > settled_seq THEN 'pending' ELSE '' END AS still
  FROM indexnow_urls ORDER BY url;
SQL

echo "[demo] what the receiver got (the request body, as the real API would see it):"
receiver GET /__received | head -c 900; echo

echo "[demo] the endpoint now answers 429 with Retry-After: 600; a new page is held, not lost"
receiver POST /__script '[{"status":429,"retry_after":"600","body":"slow down"}]' >/dev/null
psql -e <<'SQL'
INSERT INTO pages (slug, title, body, title_en, body_en, status)
  VALUES ('news-3', 'ข่าว 3', '...', 'News 3', '...', 'published');
-- (an edit of a page pushed less than min_gap ago waits for min_gap: it is pending, not due)
UPDATE pages SET body = body || ' (again)' WHERE slug = 'welcome-home';
SELECT pg_sleep(5);
SELECT host, url_count, status, note FROM indexnow_pushes ORDER BY id DESC LIMIT 1;
SELECT scope, until::timestamp(0), status FROM indexnow_backoff;
SELECT url, reason FROM indexnow_urls WHERE request_seq > settled_seq ORDER BY url;
SELECT host, pending, due_now, failed, last_status, backoff_until::timestamp(0), worker
  FROM indexnow_status();
SQL
