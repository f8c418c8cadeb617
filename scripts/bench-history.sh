#!/usr/bin/env bash
# History benchmark (not a test): what keeping the URLs of every request costs
# (`indexnow_pushes.urls`), and how long "was this URL sent, and what was the answer" takes.
#
# URLS URLs (default 1000000) recorded as the worker records them: requests of 10,000 URLs each,
# one `indexnow_pushes` row a request, URLs of a realistic shape
# (https://www.example.com/blog/2026/12/a-slug-of-some-words-123456/). Printed: the table's size
# with and without the URLs (the same rows, urls NULL), per million URLs, and the time of the
# look-up of one URL's last request over the whole history (a sequential read of the arrays),
# median of 5.
set -euo pipefail
cd "$(dirname "$0")/.."
URLS=${URLS:-1000000}

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
