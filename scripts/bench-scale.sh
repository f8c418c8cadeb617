#!/usr/bin/env bash
# Scale benchmark (not a test): what indexnow costs a big site, side by side in one run on one
# cluster, the figures issue targets are stated in (docs/benchmarks.md, "At scale").
#
# A shop's table of ROWS product rows (default 1,000,000) of about 106 bytes each, 90 % public,
# watched once; beside it a plain twin of the same rows, never watched. Printed:
#   - indexnow_watch() of the table: its time and the backend's largest private memory (sampled);
#   - the extension's bytes per watched page, each of its tables and indexes, against the content
#     table's own bytes per row;
#   - a bulk UPDATE of BULK rows (default 200,000) of a public column: plain, and watched with its
#     change derived (indexnow_derive(), as a worker would), each the median of ROUNDS rounds
#     (default 3), the ratio, and the keys derived per second;
#   - a bulk INSERT of BULK new rows: plain and watched (the write; then its derivation apart);
#   - readers, each the median of ROUNDS calls: indexnow_sitemap() page 1 and its last page
#     (50,000 URLs a page), indexnow_coverage() of the table, indexnow_explain() of one URL,
#     and indexnow_status() with every public page pending (every row changed and derived);
#   - the drain of all those pending URLs by indexnow_push_now() to a local receiver that answers
#     at once: URLs per second.
# Single-row saves and a new session's first save are scripts/bench-capture.sh's.
# ROWS, BULK and ROUNDS can be set in the environment; PG_CONFIG picks the PostgreSQL
# (default Debian's 15).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-1000000}
BULK=${BULK:-200000}
ROUNDS=${ROUNDS:-3}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_BIN
PG_BIN=$("$PG_CONFIG" --bindir)

bash scripts/setup.sh >/dev/null
echo "[bench] building and installing the extension and the receiver (release)"
cargo pgrx install --release --pg-config "$PG_CONFIG" >/dev/null 2>&1
cargo build --release -q -p indexnow-receiver

source scripts/cluster.sh
dir=/tmp/indexnow-bench-scale
rport=$(free_port)
target/release/indexnow-receiver --listen "127.0.0.1:$rport" >/dev/null &
receiver=$!
port=$(free_port)
[ "$port" = "$rport" ] && port=$((port + 1))
cluster_start "$dir" "$port" "shared_buffers = '2GB'" "max_wal_size = '16GB'" \
  "checkpoint_timeout = '1h'" "work_mem = '64MB'" "maintenance_work_mem = '512MB'" \
  "shared_preload_libraries = ''" "indexnow.endpoint = 'http://127.0.0.1:$rport/indexnow'" \
  "indexnow.debounce = 0" "indexnow.min_gap = 0"
trap 'cluster_stop "$dir"; kill "$receiver" 2>/dev/null || true' EXIT
psql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 "$@"; }

# Milliseconds `psql -c "$1"` takes.
ms() {
  local start
  start=$(date +%s%N)
  psql -c "$1" >/dev/null
  echo $((($(date +%s%N) - start) / 1000000))
}
# The median of the numbers given.
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# Median milliseconds of ROUNDS runs of the statement $1.
median_ms() {
  local times=() i
  for i in $(seq "$ROUNDS"); do times+=("$(ms "$1")"); done
  median "${times[@]}"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
# The largest private memory (KiB) of the backend $2, sampled every 50 ms while the process $1
# runs.
peak_private_kib() {
  local peak=0 kib
  while kill -0 "$1" 2>/dev/null; do
    kib=$(awk '/^Anonymous:/ { s += $2 } END { print s + 0 }' "/proc/$2/smaps_rollup" 2>/dev/null || echo 0)
    [ "$kib" -gt "$peak" ] && peak=$kib
    sleep 0.05
  done
  echo "$peak"
}

echo "[bench] $ROWS rows, bulk statements of $BULK; $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB;" \
  "PostgreSQL $(psql -Atc 'SHOW server_version'); indexnow $(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1)"
psql <<SQL
CREATE EXTENSION indexnow;
SELECT indexnow_add_host('www.example.com', '5f2b9c0e4d8a4b7f9e1c3a6d8b0f2e4c') \g /dev/null
CREATE TABLE products (id int PRIMARY KEY, slug text NOT NULL, title text NOT NULL,
                       price numeric(10,2) NOT NULL, stock int NOT NULL, live boolean NOT NULL,
                       updated_at timestamptz NOT NULL);
INSERT INTO products SELECT g, 'product-' || g || '-' || substr(md5(g::text), 1, 8),
                            'Product ' || g || ' ' || substr(md5(g::text), 9, 12), g % 1000 + 0.99,
                            g % 50, g % 10 <> 0, now()
                       FROM generate_series(1, $ROWS) g;
CREATE TABLE plain (LIKE products INCLUDING ALL);
INSERT INTO plain SELECT * FROM products;
VACUUM ANALYZE products; VACUUM ANALYZE plain;
SQL
row_bytes=$(psql -Atc "SELECT round(pg_total_relation_size('products')::numeric / $ROWS)")
heap_bytes=$(psql -Atc "SELECT round(pg_relation_size('products')::numeric / $ROWS)")
echo "[bench] the content table: $row_bytes bytes a row with its key ($heap_bytes in the heap)"

# The watch of the whole table, as a site installs indexnow: every public page taken as known.
psql -c "CHECKPOINT" >/dev/null
start=$(date +%s%N)
{
  psql <<SQL
\o /dev/null
SELECT pg_backend_pid() AS pid \gset
\o $dir/watch.pid
\qecho :pid
\o /dev/null
SELECT indexnow_watch('products', url => 'https://www.example.com/p/{slug}', visible => 'live',
                      current_is_known => true);
SQL
} &
watching=$!
while [ ! -s "$dir/watch.pid" ]; do sleep 0.01; done
peak=$(peak_private_kib "$watching" "$(cat "$dir/watch.pid")")
wait "$watching"
echo "[bench] indexnow_watch() of $ROWS rows: $((($(date +%s%N) - start) / 1000000)) ms, the backend's largest private memory $((peak / 1024)) MiB"

pages=$(psql -Atc "SELECT count(*) FROM products WHERE live")
psql -c "VACUUM ANALYZE" >/dev/null
echo "[bench] the extension's bytes per watched page ($pages public pages):"
psql -At -F ' ' <<SQL | awk '{printf "          %-34s %8s bytes a page\n", $1, $2}'
SELECT relname, per_page FROM (
  SELECT c.relname, round(pg_relation_size(c.oid)::numeric / $pages) AS per_page
    FROM pg_class c
   WHERE c.relname LIKE 'indexnow\_%' AND c.relkind IN ('r', 'i')
      OR c.oid IN (SELECT reltoastrelid FROM pg_class WHERE relname LIKE 'indexnow\_%')) r
 WHERE per_page > 0 ORDER BY per_page DESC;
SELECT 'in_all', round(sum(pg_total_relation_size(c.oid))::numeric / $pages)
  FROM pg_class c WHERE c.relname LIKE 'indexnow\_%' AND c.relkind = 'r';
SQL
total=$(psql -Atc "SELECT round(sum(pg_total_relation_size(c.oid))::numeric / $pages)
                     FROM pg_class c WHERE c.relname LIKE 'indexnow\_%' AND c.relkind = 'r'")
echo "[bench] the extension per page against the content table per row: $(ratio "$total" "$row_bytes") x"

# A bulk UPDATE of a public column, plain against watched with its change derived.
plain=() watched=() derive=()
for i in $(seq "$ROUNDS"); do
  plain+=("$(ms "UPDATE plain SET title = title || '.' WHERE id <= $BULK")")
  psql -c "VACUUM plain" >/dev/null
  start=$(date +%s%N)
  psql -c "UPDATE products SET title = title || '.' WHERE id <= $BULK" >/dev/null
  written=$((($(date +%s%N) - start) / 1000000))
  derive+=("$(ms "SELECT indexnow_derive()")")
  watched+=("$((written + ${derive[-1]}))")
  psql -c "VACUUM products" -c "UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason,
             last_pushed_at = now(), pushed_changed_at = changed_at, held_by = NULL
           WHERE request_seq > settled_seq" -c "VACUUM indexnow_urls" -c "VACUUM indexnow_sources" >/dev/null
done
p=$(median "${plain[@]}") w=$(median "${watched[@]}") d=$(median "${derive[@]}")
changed=$(awk -v b="$BULK" 'BEGIN {print int(b * 0.9)}')
echo "[bench] bulk UPDATE of $BULK rows: plain $p ms, watched and derived $w ms ($(ratio "$w" "$p") x; deriving $d ms," \
  "$(awk -v k="$changed" -v d="$d" 'BEGIN {printf "%d", k / (d / 1000)}') public keys/s)"

# A bulk INSERT of new rows, plain against watched (the write; its derivation apart).
psql -c "CHECKPOINT" >/dev/null
p=$(ms "INSERT INTO plain SELECT g + $ROWS, 'new-' || g, 'New ' || g, 1.99, 1, true, now() FROM generate_series(1, $BULK) g")
w=$(ms "INSERT INTO products SELECT g + $ROWS, 'new-' || g, 'New ' || g, 1.99, 1, true, now() FROM generate_series(1, $BULK) g")
d=$(ms "SELECT indexnow_derive()")
echo "[bench] bulk INSERT of $BULK rows: plain $p ms, watched $w ms ($(ratio "$w" "$p") x); deriving it $d ms"
psql -c "DELETE FROM products WHERE id > $ROWS; DELETE FROM plain WHERE id > $ROWS" >/dev/null
psql -c "SELECT indexnow_derive()" -c "DELETE FROM indexnow_urls WHERE url LIKE 'https://www.example.com/p/new-%'" \
  -c "VACUUM ANALYZE" >/dev/null

# The readers.
last_page=$(( (pages + 49999) / 50000 ))
echo "[bench] indexnow_sitemap() page 1: $(median_ms "SELECT length(indexnow_sitemap('www.example.com', 1))") ms;" \
  "page $last_page: $(median_ms "SELECT length(indexnow_sitemap('www.example.com', $last_page))") ms;" \
  "the index (page 0): $(median_ms "SELECT length(indexnow_sitemap('www.example.com', 0))") ms"
echo "[bench] indexnow_coverage('products'): $(median_ms "SELECT * FROM indexnow_coverage('products')") ms"
url=$(psql -Atc "SELECT url FROM indexnow_urls ORDER BY url_hash LIMIT 1")
echo "[bench] indexnow_explain() of one URL: $(median_ms "SELECT * FROM indexnow_explain('$url')") ms"
echo "[bench] indexnow_status(), nothing pending: $(median_ms "SELECT * FROM indexnow_status()") ms"

# Every public page pending: a change to every row (a site-wide template field), derived.
psql -c "UPDATE products SET title = title || '!'" >/dev/null
start=$(date +%s%N)
psql -c "SELECT indexnow_derive()" >/dev/null
echo "[bench] every row changed, derived in $((($(date +%s%N) - start) / 1000000)) ms"
psql -c "VACUUM ANALYZE" >/dev/null
pending=$(psql -Atc "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq")
echo "[bench] indexnow_status(), $pending URLs pending: $(median_ms "SELECT * FROM indexnow_status()") ms"
echo "[bench] indexnow_explain() of one pending URL: $(median_ms "SELECT * FROM indexnow_explain('$url')") ms"

# The drain: every pending URL sent by indexnow_push_now() (10,000 a request), until none is left.
start=$(date +%s%N)
while [ "$(psql -Atc "SELECT coalesce(sum(url_count), 0) FROM indexnow_push_now()")" != 0 ]; do :; done
took=$((($(date +%s%N) - start) / 1000000))
left=$(psql -Atc "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq")
echo "[bench] the drain of $pending URLs: $took ms, $(awk -v n="$pending" -v t="$took" 'BEGIN {printf "%d", n / (t / 1000)}') URLs/s ($left left)"
