#!/usr/bin/env bash
# The site owner's questions (not a test): what keeping the URLs of every request costs
# (`indexnow_pushes.urls`), how long "was this URL sent, and what was the answer" takes, and how
# long indexnow_coverage() and indexnow_explain() take on a watched table of ROWS rows.
#
# URLS URLs (default 1000000) recorded as the worker records them: requests of 10,000 URLs each,
# one `indexnow_pushes` row a request, URLs of a realistic shape
# (https://www.example.com/blog/2026/12/a-slug-of-some-words-123456/). Printed: the table's size
# with and without the URLs (the same rows, urls NULL), per million URLs, and the time of the
# look-up of one URL's last request over the whole history (a sequential read of the arrays),
# median of 5. Then a table of ROWS rows (default 1000000) watched (its baseline: every page
# known), 1 % of its pages changed and derived (pending): indexnow_coverage() and
# indexnow_explain() of one URL, each median of 5.
set -euo pipefail
cd "$(dirname "$0")/.."
URLS=${URLS:-1000000}
ROWS=${ROWS:-1000000}

bash scripts/setup.sh >/dev/null
echo "[bench] building and installing the extension (release)"
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null 2>&1

source scripts/cluster.sh
dir=/tmp/indexnow-bench-history
port=$(free_port)
cluster_start "$dir" "$port" "shared_preload_libraries = ''"
trap 'cluster_stop "$dir"' EXIT
psql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 "$@"; }

echo "[bench] $URLS URLs; $(nproc) cores; PostgreSQL $(psql -Atc 'SHOW server_version')"
requests=$(( (URLS + 9999) / 10000 ))
psql <<SQL
CREATE EXTENSION indexnow;
CREATE TABLE bare (LIKE indexnow_pushes);
INSERT INTO indexnow_pushes (pushed_at, host, url_count, status, duration, urls)
SELECT now() - r * interval '1 minute', 'www.example.com', 10000, 200, interval '80 ms',
       ARRAY(SELECT 'https://www.example.com/blog/2026/12/'
                    || (ARRAY['spring', 'notes', 'on', 'a', 'garden', 'walk', 'recipe', 'for',
                              'bread', 'the'])[1 + (g % 10)]
                    || '-of-' || md5((r * 10000 + g)::text)::varchar(8) || '-' || (r * 10000 + g) || '/'
               FROM generate_series(1, 10000) g)
  FROM generate_series(1, $requests) r;
INSERT INTO bare SELECT * FROM indexnow_pushes;
UPDATE bare SET urls = NULL;
VACUUM FULL bare;
VACUUM ANALYZE indexnow_pushes;
SQL
with=$(psql -Atc "SELECT pg_total_relation_size('indexnow_pushes')")
without=$(psql -Atc "SELECT pg_total_relation_size('bare')")
avg=$(psql -Atc "SELECT round(avg(length(u)))::int FROM (SELECT unnest(urls) u FROM indexnow_pushes LIMIT 100000) x")
awk -v w="$with" -v o="$without" -v n="$URLS" -v a="$avg" 'BEGIN {
  printf "history of %d URLs (%d bytes a URL on average): %.1f MiB with the URLs, %.1f MiB without: %.1f MiB a million URLs (%.1f bytes a URL)\n",
         n, a, w / 1048576, o / 1048576, (w - o) / 1048576 * 1000000 / n, (w - o) / n }'
probe="https://www.example.com/blog/2026/12/$(psql -Atc "SELECT split_part(urls[5000], '/', 7) FROM indexnow_pushes ORDER BY id LIMIT 1")/"
for i in 1 2 3 4 5; do
  psql -At <<SQL
\timing on
SELECT pushed_at, status FROM indexnow_pushes WHERE '$probe' = ANY (urls)
 ORDER BY pushed_at DESC LIMIT 1;
SQL
done | awk '/^Time:/ { print $2 }' | sort -n | awk '{ v[NR] = $1 } END { printf "one URL'"'"'s last request, over the whole history: median %.0f ms (of %d)\n", v[int((NR + 1) / 2)], NR }'

# Median of 5 runs of the SQL `$1` (ms).
median_ms() {
  for i in 1 2 3 4 5; do
    psql -At <<SQL
\\timing on
$1
SQL
  done | awk '/^Time:/ { print $2 }' | sort -n | awk '{ v[NR] = $1 } END { printf "%.0f", v[int((NR + 1) / 2)] }'
}
psql <<SQL
SELECT indexnow_add_host('www.example.com', 'abcdefgh12');
CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, title text, live boolean NOT NULL);
INSERT INTO pages SELECT g, 'page-' || g, 'Title ' || g, g % 10 <> 0 FROM generate_series(1, $ROWS) g;
SELECT indexnow_watch('pages', url => 'https://www.example.com/p/{slug}', visible => 'live');
UPDATE pages SET title = title || '!' WHERE id % 100 = 1;
SELECT indexnow_derive();
VACUUM ANALYZE;
SQL
echo "indexnow_coverage() on $ROWS rows ($(psql -Atc "SELECT public FROM indexnow_coverage('pages')") public, $(psql -Atc "SELECT pending FROM indexnow_coverage('pages')") pending): median $(median_ms "SELECT * FROM indexnow_coverage('pages');") ms (of 5)"
echo "indexnow_explain() of one URL: median $(median_ms "SELECT * FROM indexnow_explain('https://www.example.com/p/page-501');") ms (of 5)"
