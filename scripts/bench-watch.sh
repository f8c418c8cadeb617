#!/usr/bin/env bash
# Watch benchmark (not a test): what `indexnow_watch()` on a large table costs the table's
# writers, measured side by side in one run on one cluster.
#
# A table of ROWS rows (the capture benchmark's shape). A writer (pgbench, one client) updates one
# random row a transaction, first alone for WRITE_SECONDS, then beside a plain bulk write of
# about the watch's volume (INSERT ... SELECT of the table into a copy with a key: what any large
# write does to a writer on this machine), then while another session runs indexnow_watch() on
# the table; its transactions are logged one by one (pgbench -l, in chunks of
# a few seconds, so that each chunk's log is complete). Printed: how long the watch took, the
# writer's longest and median transaction alone and during the watch, and then what the watch
# left for after its commit (the table derived whole: the writes made while it derived were not
# seen) and how long deriving that took (indexnow_derive(), as a worker would).
# ROWS (default 1000000) and WRITE_SECONDS (default 10) can be set in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-1000000}
WRITE_SECONDS=${WRITE_SECONDS:-10}

bash scripts/setup.sh >/dev/null
echo "[bench] building and installing the extension (release)"
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null 2>&1

source scripts/cluster.sh
dir=/tmp/indexnow-bench-watch
port=$(free_port)
logs=$(mktemp -d)
cluster_start "$dir" "$port" "shared_buffers = '2GB'" "max_wal_size = '16GB'" \
  "checkpoint_timeout = '1h'" "work_mem = '64MB'" "maintenance_work_mem = '512MB'" \
  "shared_preload_libraries = ''"
trap 'cluster_stop "$dir"; rm -rf "$logs"' EXIT
psql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 "$@"; }

echo "[bench] $ROWS rows; $(nproc) cores; PostgreSQL $(psql -Atc 'SHOW server_version')"
psql <<SQL
CREATE EXTENSION indexnow;
CREATE TABLE pages (id int PRIMARY KEY, slug text NOT NULL, title text, body text,
                    live boolean NOT NULL, sort_order int, updated_at timestamptz);
INSERT INTO pages SELECT g, 'page-' || g, 'Title ' || g, repeat(md5(g::text), 6),
                         g % 10 <> 0, g, now() FROM generate_series(1, $ROWS) g;
VACUUM ANALYZE pages;
SQL
cat > "$logs/write.sql" <<SQL
\set id random(1, $ROWS)
UPDATE pages SET body = md5(random()::text) WHERE id = :id;
SQL

# Runs the writer in chunks of 2 s while `$1` (a pid) runs, or for WRITE_SECONDS without one.
write() {
  local prefix=$1 while_pid=${2:-} n=0 until=$((SECONDS + WRITE_SECONDS))
  while { [ -n "$while_pid" ] && kill -0 "$while_pid" 2>/dev/null; } ||
        { [ -z "$while_pid" ] && [ $SECONDS -lt $until ]; }; do
    (cd "$logs" && "$PG_BIN/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -c 1 -T 2 \
      -f write.sql -l --log-prefix="$prefix.$n" postgres >/dev/null 2>&1)
    n=$((n + 1))
  done
}
# Longest and median transaction (ms) and the count, from the per-transaction logs `$1.*`, and
# when the longest ended, in seconds after `$2` (an epoch, when given).
latencies() {
  cat "$logs/$1".* | awk '{printf "%.3f %.6f\n", $3 / 1000, $5 + $6 / 1000000}' | sort -n |
    awk -v from="${2:-}" '{v[NR] = $1; t[NR] = $2}
      END {printf "%d transactions, median %.2f ms, longest %.1f ms", NR, v[int((NR + 1) / 2)], v[NR];
           if (from != "") printf " (ended %.1f s after the watch began)", t[NR] - from}'
}

write alone
echo "[bench] writer alone:            $(latencies alone)"
# The same writer beside a plain bulk write of about the watch's volume (the watch writes a queue
# row and a source a public row, with their indexes): a copy of the table into one with a key.
psql -c "CREATE TABLE copy (LIKE pages INCLUDING ALL)"
start=$(date +%s.%N)
psql -c "INSERT INTO copy SELECT * FROM pages" >/dev/null &
copying=$!
write copying "$copying"
wait "$copying"
echo "[bench] plain bulk copy:         $(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)") s"
echo "[bench] writer during the copy:  $(latencies copying "$start")"
psql -c "DROP TABLE copy; CHECKPOINT"
start=$(date +%s.%N)
psql -c "SELECT indexnow_watch('pages', url => 'https://www.example.com/{slug}', visible => 'live',
                               ignore => '{sort_order,updated_at}')" >/dev/null &
watching=$!
# The watch's phases as pg_stat_activity shows them, sampled every 0.2 s.
while kill -0 "$watching" 2>/dev/null; do
  psql -Atc "SELECT extract(epoch FROM clock_timestamp()) || ' ' || query FROM pg_stat_activity
              WHERE query LIKE 'indexnow\_watch: %'" >> "$logs/phases" 2>/dev/null || true
  sleep 0.2
done &
write during "$watching"
wait "$watching"
took=$(echo "$(date +%s.%N) - $start" | bc)
echo "[bench] indexnow_watch():        $(printf '%.1f' "$took") s; its phases began, in seconds after it:"
awk -v from="$start" '{t = $1; $1 = ""; if (!seen[$0]++) printf "          %6.1f %s\n", t - from, substr($0, 2, 70)}' "$logs/phases"
echo "[bench] writer during the watch: $(latencies during "$start")"
left=$(psql -Atc "SELECT count(*) FILTER (WHERE keys IS NULL) || ' whole-table, ' ||
                          coalesce(sum(jsonb_array_length(keys)), 0) || ' keys' FROM indexnow_changes")
start=$(date +%s.%N)
psql -Atc "SELECT indexnow_derive()" >/dev/null
derived=$(echo "$(date +%s.%N) - $start" | bc)
queued=$(psql -Atc "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq")
echo "[bench] left for after the commit: $left, derived in $(printf '%.1f' "$derived") s; $queued URLs queued"
