#!/usr/bin/env bash
# Sending benchmark (not a test), one run on one cluster with the worker preloaded and the local
# receiver (release build) on 127.0.0.1:
#   drain  URLS (default 1000000) due URLs over two hosts, sent in batches of 10,000 by one
#          worker, then (the same queue again) by two (indexnow.workers_per_database = 2), ROUNDS
#          times (default 1): URLs per second from the moment sending is switched on until
#          nothing is pending, and a worker's peak memory: its anonymous (heap) memory, sampled
#          every 50 ms (shared buffers it touched are shared memory, not its own)
#   idle   one sending pass with URLS pushed rows and nothing due (the pass a worker makes every
#          naptime), through indexnow_push_now(), averaged over 1,000 runs inside the server;
#          and indexnow_status() over the same rows, averaged over 100 calls
#   hosts  (`bash scripts/bench-send.sh hosts`, this part alone) HOSTS (default 1000) hosts with
#          PER_HOST (default 20) due URLs each, the receiver answering every request after 50 ms
#          and one host's after 2 s; sent by one worker with indexnow.max_in_flight = 1 and then
#          the default (32): the time until everything is sent, requests per second, when every
#          host but the slow one was done, and the worker's peak heap (IN_FLIGHT, default
#          "1 32", the max_in_flight values to send with, in turn)
# Goals: drain >= 50,000 URLs/s and < 64 MiB; idle pass < 1 ms; hosts >= 500 requests/s at
# 50 ms, the slow host delaying the others by at most its own time.
set -euo pipefail
cd "$(dirname "$0")/.."
URLS=${URLS:-1000000}
MODE=${1:-drain}

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

receiver() {
  local body=${3:-}
  exec 3<>"/dev/tcp/127.0.0.1/$rport"
  printf '%s %s HTTP/1.0\r\nContent-Length: %s\r\n\r\n%s' "$1" "$2" "${#body}" "$body" >&3
  sed '1,/^\r$/d' <&3 >/dev/null
  exec 3<&-
}
worker_pids() {
  psql -Atc "SELECT pid FROM pg_stat_activity WHERE backend_type = 'indexnow worker' AND datname = 'postgres'"
}
heap_kib() {
  awk '/^Anonymous:/ { s += $2 } END { print s + 0 }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0
}

if [ "$MODE" = hosts ]; then
  HOSTS=${HOSTS:-1000}
  PER_HOST=${PER_HOST:-20}
  # (host names of one width, so that none is cut short: h0001 ... h1000, h00001 ... h10000)
  width=$(( ${#HOSTS} > 4 ? ${#HOSTS} : 4 ))
  slow=$(printf 'h%0*d.example.com' "$width" $((HOSTS / 2)))
  echo "[bench] $HOSTS hosts x $PER_HOST URLs, answers after 50 ms ($slow: 2 s); $(nproc) cores; PostgreSQL $(psql -Atc 'SHOW server_version')"
  psql -o /dev/null -c "CREATE EXTENSION indexnow"
  receiver PUT /__latency '{"ms": 50}'
  receiver PUT /__latency "{\"ms\": 2000, \"host\": \"$slow\"}"
  # sends: the queue again, sent with indexnow.max_in_flight = LIMIT
  sends() {
    local limit=$1 pid peak=0 kib start end sent
    psql -o /dev/null <<SQL
TRUNCATE indexnow_urls, indexnow_pushes;
SELECT indexnow_add_host(format('h%s.example.com', lpad(h::text, $width, '0')), 'benchkey-' || h)
  FROM generate_series(1, $HOSTS) h;
SELECT count(indexnow_queue(format('https://h%s.example.com/articles/%s', lpad(h::text, $width, '0'), g)))
  FROM generate_series(1, $HOSTS) h, generate_series(1, $PER_HOST) g;
VACUUM ANALYZE indexnow_urls;
ALTER SYSTEM SET indexnow.max_in_flight = $limit;
SQL
    psql -o /dev/null -c "SELECT pg_reload_conf()"
    pid=$(worker_pids | head -1)
    peak=$(heap_kib "$pid")
    start=$(psql -Atc "SELECT extract(epoch FROM clock_timestamp())")
    psql -c "ALTER SYSTEM SET indexnow.enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
    while :; do
      kib=$(heap_kib "$pid"); [ "$kib" -gt "$peak" ] && peak=$kib
      sent=$(psql -Atc "SELECT coalesce(sum(url_count), 0) FROM indexnow_pushes")
      [ "$sent" -ge $((HOSTS * PER_HOST)) ] && break
      sleep 0.05
    done
    psql -c "ALTER SYSTEM SET indexnow.enabled = off" -c "SELECT pg_reload_conf()" >/dev/null
    psql -At -v start="$start" -v limit="$limit" -v peak="$peak" -v slow="$slow" <<'SQL'
SELECT format('[bench] hosts, max_in_flight = %s: %s requests (%s URLs) in %s s: %s requests/s; every other host done after %s s (%s requests/s; goal >= 500), %s after %s s; peak heap of the worker %s MiB',
              :'limit', count(*), sum(url_count),
              round((extract(epoch FROM max(done)) - :start)::numeric, 2),
              round((count(*) / (extract(epoch FROM max(done)) - :start))::numeric),
              round((extract(epoch FROM max(done) FILTER (WHERE host <> :'slow')) - :start)::numeric, 2),
              round(((count(*) - 1) / (extract(epoch FROM max(done) FILTER (WHERE host <> :'slow')) - :start))::numeric),
              :'slow',
              round((extract(epoch FROM max(done) FILTER (WHERE host = :'slow')) - :start)::numeric, 2),
              round(:peak / 1024.0, 1))
  -- pushed_at is when a request started; it was answered `duration` later
  FROM (SELECT host, url_count, pushed_at + duration AS done FROM indexnow_pushes
         WHERE status = 200) p;
SQL
  }
  for round in $(seq "${ROUNDS:-1}"); do
    for limit in ${IN_FLIGHT:-1 32}; do
      sends "$limit"
    done
  done
  exit 0
fi

echo "[bench] $URLS URLs over two hosts; $(nproc) cores; PostgreSQL $(psql -Atc 'SHOW server_version')"
psql -o /dev/null <<SQL
CREATE EXTENSION indexnow;
SELECT indexnow_add_host('a.example.com', 'benchkey-a1');
SELECT indexnow_add_host('b.example.com', 'benchkey-b2');
SQL

queue_all() {
  psql <<SQL
TRUNCATE indexnow_urls, indexnow_pushes;
SELECT count(indexnow_queue('https://' || CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END
                            || '.example.com/articles/' || g)) AS queued
  FROM generate_series(1, $URLS) g \gset
VACUUM ANALYZE indexnow_urls;
CHECKPOINT;
SQL
}
# drain WORKERS: the same queue drained by WORKERS workers (indexnow.workers_per_database)
drain() {
  local workers=$1 pids=() pid kib peak=0 before=0 start end sent requests
  psql -c "ALTER SYSTEM SET indexnow.workers_per_database = $workers" -c "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 100); do
    mapfile -t pids < <(worker_pids)
    [ "${#pids[@]}" -eq "$workers" ] && break
    sleep 0.1
  done
  [ "${#pids[@]}" -eq "$workers" ] || { echo "[bench] expected $workers workers, found ${#pids[@]}" >&2; exit 1; }
  queue_all
  for pid in "${pids[@]}"; do kib=$(heap_kib "$pid"); [ "$kib" -gt "$before" ] && before=$kib; done
  peak=$before
  start=$(date +%s.%N)
  psql -c "ALTER SYSTEM SET indexnow.enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
  while :; do
    for pid in "${pids[@]}"; do kib=$(heap_kib "$pid"); [ "$kib" -gt "$peak" ] && peak=$kib; done
    # polls the small history table: counting the queue would compete with the worker for the CPU
    sent=$(psql -Atc "SELECT coalesce(sum(url_count), 0) FROM indexnow_pushes")
    [ "$sent" -ge "$URLS" ] && break
    sleep 0.05
  done
  end=$(date +%s.%N)
  psql -c "ALTER SYSTEM SET indexnow.enabled = off" -c "SELECT pg_reload_conf()" >/dev/null
  read -r requests sent < <(psql -Atc "SELECT count(*), sum(url_count) FROM indexnow_pushes WHERE status = 200" | tr '|' ' ')
  awk -v w="$workers" -v n="$sent" -v r="$requests" -v s="$start" -v e="$end" -v p="$peak" -v b="$before" 'BEGIN {
    t = e - s
    printf "[bench] drain, %d worker(s): %d URLs in %d requests, %.2f s: %.0f URLs/s (goal >= 50000); peak heap of one worker %.1f MiB (%.1f before sending; goal < 64 MiB)\n", w, n, r, t, n / t, p / 1024, b / 1024
  }'
}

for round in $(seq "${ROUNDS:-1}"); do
  drain 1
  drain 2
done

# idle WHEN: the idle pass and indexnow_status(), with every row pushed and nothing due
idle() {
  psql -v label="$1" <<'SQL'
SET indexnow.enabled = on;
SET bench.label = :'label';
DO $$
DECLARE t0 timestamptz; n int; pass numeric; status numeric;
BEGIN
  SELECT count(*) INTO n FROM indexnow_urls WHERE request_seq = settled_seq;
  t0 := clock_timestamp();
  FOR i IN 1..1000 LOOP PERFORM * FROM indexnow_push_now(); END LOOP;
  pass := round((extract(epoch FROM clock_timestamp() - t0) * 1000 / 1000)::numeric, 3);
  t0 := clock_timestamp();
  FOR i IN 1..100 LOOP PERFORM * FROM indexnow_status(); END LOOP;
  status := round((extract(epoch FROM clock_timestamp() - t0) * 1000 / 100)::numeric, 3);
  RAISE NOTICE '[bench] idle, %: pass (indexnow_push_now, 1,000 runs) over % pushed rows % ms (goal < 1 ms); indexnow_status() % ms',
    current_setting('bench.label'), n, pass, status;
END $$;
SQL
}
# Right after the drains the pending index still holds the drained rows' dead entries, which
# every pass steps over until (auto)vacuum removes them; then as a vacuumed table leaves it.
psql -c "ALTER SYSTEM SET autovacuum = off" -c "SELECT pg_reload_conf()" >/dev/null
idle "right after the drains"
psql -c "VACUUM indexnow_urls" >/dev/null
idle "after VACUUM"
