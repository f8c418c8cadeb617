#!/usr/bin/env bash
# Sending benchmark (not a test), one run on one cluster with the worker preloaded and the local
# receiver (release build) on 127.0.0.1:
#   drain  URLS (default 1000000) due URLs over two hosts, sent by the worker in batches of
#          10,000: URLs per second from the moment sending is switched on until nothing is
#          pending, and the worker's peak memory: its anonymous (heap) memory, sampled every
#          50 ms (shared buffers it touched are shared memory, not its own)
#   idle   one sending pass with URLS pushed rows and nothing due (the pass a worker makes every
#          naptime), through indexnow_push_now(), averaged over 1,000 runs inside the server
# Goals (issue 4): drain >= 50,000 URLs/s and < 64 MiB; idle pass < 1 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
URLS=${URLS:-1000000}

bash scripts/setup.sh >/dev/null
echo "[bench] building and installing the extension and the receiver (release)"
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null 2>&1
cargo build --release -q -p indexnow-receiver

source scripts/cluster.sh
dir=/tmp/indexnow-bench-send
rport=$(free_port)
target/release/indexnow-receiver --listen "127.0.0.1:$rport" >/dev/null &
receiver=$!
port=$(free_port)
while [ "$port" = "$rport" ]; do sleep 0.2; port=$(free_port); done
cluster_start "$dir" "$port" "shared_buffers = '1GB'" "max_wal_size = '8GB'" \
  "indexnow.endpoint = 'http://127.0.0.1:$rport/indexnow'" "indexnow.enabled = off" \
  "indexnow.debounce = 0" "indexnow.naptime = '1s'"
trap 'cluster_stop "$dir"; kill $receiver 2>/dev/null || true' EXIT
psql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 "$@"; }

echo "[bench] $URLS URLs over two hosts; $(nproc) cores; PostgreSQL $(psql -Atc 'SHOW server_version')"
psql <<SQL
CREATE EXTENSION indexnow;
SELECT indexnow_add_host('a.example.com', 'benchkey-a1');
SELECT indexnow_add_host('b.example.com', 'benchkey-b2');
SELECT count(indexnow_queue('https://' || CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END
                            || '.example.com/articles/' || g)) AS queued
  FROM generate_series(1, $URLS) g \gset
VACUUM ANALYZE indexnow_urls;
SQL

worker_pid() {
  psql -Atc "SELECT pid FROM pg_stat_activity WHERE backend_type = 'indexnow worker' AND datname = 'postgres'"
}
heap_kib() {
  awk '/^Anonymous:/ { s += $2 } END { print s + 0 }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0
}

pid=$(worker_pid)
[ -n "$pid" ] || { echo "[bench] no worker is running" >&2; exit 1; }
before=$(heap_kib "$pid")
peak=$before
start=$(date +%s.%N)
psql -c "ALTER SYSTEM SET indexnow.enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
while :; do
  kib=$(heap_kib "$pid"); [ "$kib" -gt "$peak" ] && peak=$kib
  # polls the small history table: counting the queue would compete with the worker for the CPU
  sent=$(psql -Atc "SELECT coalesce(sum(url_count), 0) FROM indexnow_pushes")
  [ "$sent" -ge "$URLS" ] && break
  sleep 0.05
done
end=$(date +%s.%N)
hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")
read -r requests sent < <(psql -Atc "SELECT count(*), sum(url_count) FROM indexnow_pushes WHERE status = 200" | tr '|' ' ')
awk -v n="$sent" -v r="$requests" -v s="$start" -v e="$end" -v p="$peak" -v b="$before" -v h="$hwm" 'BEGIN {
  t = e - s
  printf "[bench] drain: %d URLs in %d requests, %.2f s: %.0f URLs/s (goal >= 50000)\n", n, r, t, n / t
  printf "[bench] worker memory: %.1f MiB peak heap (%.1f MiB before sending; goal < 64 MiB); VmHWM %.1f MiB counts the shared buffers it touched\n", p / 1024, b / 1024, h / 1024
}'

psql -c "ALTER SYSTEM SET indexnow.enabled = off" -c "SELECT pg_reload_conf()" >/dev/null
psql <<'SQL'
\echo [bench] idle: 1,000 passes with every row pushed and nothing due
SET indexnow.enabled = on;
DO $$
DECLARE t0 timestamptz; n int;
BEGIN
  SELECT count(*) INTO n FROM indexnow_urls WHERE request_seq = settled_seq;
  t0 := clock_timestamp();
  FOR i IN 1..1000 LOOP PERFORM * FROM indexnow_push_now(); END LOOP;
  RAISE NOTICE '[bench] idle pass (indexnow_push_now) over % pushed rows: % ms (goal < 1 ms)', n,
    round((extract(epoch FROM clock_timestamp() - t0) * 1000 / 1000)::numeric, 3);
END $$;
SQL
