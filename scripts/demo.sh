#!/usr/bin/env bash
# The demo: a throwaway cluster with indexnow preloaded, a site's key, a few queued URLs (the same
# page saved three times, a bad URL refused, a removal), and what indexnow_status() says.
# The full demo (a bilingual site, capture triggers, a local IndexNow receiver) grows with the
# capture and sending issues.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "[demo] building and installing the extension"
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null

source scripts/cluster.sh
dir=/tmp/indexnow-demo
port=$(free_port)
cluster_start "$dir" "$port"
trap 'cluster_stop "$dir"' EXIT
echo "[demo] cluster on 127.0.0.1:$port (data in $dir)"

psql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -X "$@"; }
psql -e <<'SQL'
CREATE EXTENSION indexnow;
SELECT indexnow_add_host('www.example.com', '5f2b9c0e4d8a4b7f9e1c3a6d8b0f2e4c');

-- The same page saved three times: one row, the debounce restarted each time.
SELECT indexnow_queue('https://www.example.com/th/news');
SELECT indexnow_queue('https://WWW.Example.com/th/news#top');
SELECT indexnow_queue('https://www.example.com/th/news', 'changed');
-- A page that was removed, and one on a host with no key yet (held, shown in status).
SELECT indexnow_queue('https://www.example.com/en/old-offer', 'deleted');
SELECT indexnow_queue('https://shop.example.com/item/7', 'created');
\set ON_ERROR_STOP 0
-- A URL search engines could never fetch is refused with the rule it broke.
SELECT indexnow_queue('http://10.0.0.5/admin');
\set ON_ERROR_STOP 1

SELECT url, host, reason, request_seq, changed_at::time(0), available_at::time(0) FROM indexnow_urls ORDER BY url;
SET indexnow.debounce = 0;   -- as if two minutes had passed
SELECT host, has_key, pending, due_now, failed, backoff_until, worker FROM indexnow_status();
SQL
