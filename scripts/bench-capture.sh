#!/usr/bin/env bash
# Capture benchmark (not a test): what watching a table costs its writers, and what deriving the
# recorded changes costs afterwards, measured side by side in one run on one cluster.
#
# Write time, as ratios to the same statement on an identical unwatched table:
#   plain    no trigger
#   watched  indexnow_watch() (statement triggers with transition tables; a bulk statement
#            records the keys it changed, a change set)
#   floor    a statement trigger with transition tables that does nothing: what PostgreSQL itself
#            charges for capturing the old and new rows, before any of our work
# Each UPDATE of all ROWS rows is timed with the CHECKPOINT that writes it out; tables are vacuumed
# between runs. The cluster runs without the worker here, so nothing derives behind the timing.
# After the watched UPDATE of a public column: deriving its change sets as the worker does (one
# a transaction: indexnow_derive(1) in a loop), in keys per second, the deriving backend's largest private memory (sampled), and single-row saves
# of the same table meanwhile (pgbench, 1 client): their tps and longest save against the same
# saves with nothing deriving. Beside it, under the same saves, the least derivation of the same
# keys: a fourth table, bare, whose changed rows a statement written by hand for it derives in
# batches of 10,000 keys (`least_derive`: read the rows, their URL and fingerprint as indexnow
# does, compare with their sources, write the queue rows and the sources), and the same without
# the sources write (one write a key, the most any data model keeping a queue row per URL can
# hope for).

# Single-row saves (pgbench, one client, SAVE_SECONDS each, SAVE_ROUNDS rounds, then medians):
# plain, floor, watched and recorded (a public column: the default), watched and derived in the
# statement (indexnow.derive_at_write = 100), watched with an ignored column only, and the least
# derivation by hand, in transactions per second; then the first save of a new session
# (pgbench -C), plain against recorded.
# Then with the worker (debounce 0, a local receiver): a single save, commit to POST.
# ROWS (default 1000000), ROUNDS (default 2), SAVE_SECONDS (8), SAVE_ROUNDS (5) and PARTS (which of
# "bulk saves worker" run; all by default) can be set in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-1000000}
ROUNDS=${ROUNDS:-2}
SAVE_SECONDS=${SAVE_SECONDS:-8}
SAVE_ROUNDS=${SAVE_ROUNDS:-5}
# PARTS: which parts run, of "bulk saves worker" (all by default).
PARTS=${PARTS:-bulk saves worker}

bash scripts/setup.sh >/dev/null
echo "[bench] building and installing the extension and the receiver (release)"
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null 2>&1
cargo build --release -q -p indexnow-receiver

source scripts/cluster.sh
dir=/tmp/indexnow-bench
rport=$(free_port)
target/release/indexnow-receiver --listen "127.0.0.1:$rport" >/dev/null &
receiver=$!
port=$(free_port)
while [ "$port" = "$rport" ]; do sleep 0.2; port=$(free_port); done
cluster_start "$dir" "$port" "shared_buffers = '2GB'" "max_wal_size = '16GB'" \
  "checkpoint_timeout = '1h'" "work_mem = '64MB'" "maintenance_work_mem = '512MB'" \
  "shared_preload_libraries = ''" "indexnow.endpoint = 'http://127.0.0.1:$rport/indexnow'" \
  "indexnow.debounce = 0"
trap 'cluster_stop "$dir"; kill $receiver 2>/dev/null || true' EXIT
psql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 "$@"; }
# (its progress lines go to a file; when it fails, the end of that file says why, and the run stops)
pgbench() {
  "$PG_BIN/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n "$@" postgres 2>>"$dir/pgbench.err" || {
    echo "[bench] pgbench $* failed:" >&2
    tail -n 20 "$dir/pgbench.err" >&2
    return 1
  }
}

echo "[bench] $ROWS rows per table; $(nproc) cores; PostgreSQL $(psql -Atc 'SHOW server_version')"
psql <<SQL
CREATE EXTENSION indexnow;
SELECT indexnow_add_host('www.example.com', 'benchkey-0001');
DO \$\$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['plain', 'watched', 'floor', 'bare'] LOOP
    EXECUTE format('CREATE TABLE %I (id int PRIMARY KEY, slug text NOT NULL, title text, body text,
                    live boolean NOT NULL, sort_order int, updated_at timestamptz)', t);
    EXECUTE format('INSERT INTO %I SELECT g, ''page-'' || g, ''Title '' || g, repeat(md5(g::text), 6),
                    g %% 10 <> 0, g, now() FROM generate_series(1, $ROWS) g', t);
  END LOOP;
END \$\$;
SELECT indexnow_watch('watched', url => 'https://www.example.com/w/{slug}', visible => 'live',
                      ignore => '{sort_order,updated_at}');
CREATE FUNCTION floor_nothing() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN RETURN NULL; END \$\$;
CREATE TRIGGER floor AFTER UPDATE ON floor REFERENCING OLD TABLE AS o NEW TABLE AS n
  FOR EACH STATEMENT EXECUTE FUNCTION floor_nothing();
VACUUM ANALYZE plain; VACUUM ANALYZE watched; VACUUM ANALYZE floor;
SQL
# The least a save that derives in its statement must do, written by hand for this one table:
# read the row back (its URL, visibility and fingerprint), compare with its source, and write
# the queue row and the source. Called after a save of the plain table (it writes the queue row
# and source of the watched table's row of the same key: the two tables hold the same rows).
watch_id=$(psql -Atc "SELECT id FROM indexnow_watches")
psql <<SQL
CREATE FUNCTION least_derivation(k int) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
  rk jsonb := jsonb_build_array(k);
  fp bigint;
  the_url text;
  the_hash bytea;
  the_host text;
BEGIN
  SELECT x.url, x.url_hash, x.host,
         ('x' || left(md5(jsonb_strip_nulls(jsonb_build_object('id', r.id, 'slug', r.slug,
           'title', r.title, 'body', r.body, 'live', r.live))::text), 16))::bit(64)::bigint
    INTO the_url, the_hash, the_host, fp
    FROM plain r CROSS JOIN LATERAL
         _indexnow_capture_target('https://www.example.com/w/' || r.slug, r.live) x
   WHERE r.id = k;
  PERFORM FROM indexnow_sources
    WHERE watch_id = $watch_id AND row_key = rk AND url_hash = the_hash AND fingerprint64 <> fp;
  IF FOUND THEN
    INSERT INTO indexnow_urls AS u (url, url_hash, host, reason, changed_at, queued_at,
                                    available_at, watch_id)
    SELECT the_url, the_hash, the_host,
           CASE WHEN coalesce(v.settled_reason NOT IN ('moved', 'unpublished', 'untranslated',
                                                       'deleted', 'gone'), false)
                THEN 'changed' ELSE 'created' END, now(), now(), now(), $watch_id
      FROM (SELECT) one LEFT JOIN indexnow_urls v ON v.url_hash = the_hash
    ON CONFLICT (url_hash) DO UPDATE SET reason = excluded.reason, changed_at = excluded.changed_at,
       queued_at = excluded.queued_at, available_at = excluded.available_at,
       request_seq = u.request_seq + 1;
    UPDATE indexnow_sources SET fingerprint64 = fp WHERE watch_id = $watch_id AND row_key = rk;
  END IF;
END \$\$;
SQL

# The least a derivation of a change set must do, written by hand for the bare table and for
# this benchmark's change (every row keeps its URL, its content changed): the rows of the keys
# (as a change set holds them), their URL checked and hashed and their fingerprint as indexnow
# computes them, compared with the sources, then the queue upserted and (with_sources) the
# sources updated. The same tables as indexnow's, under a watch id no watch has (-1), and its
# URLs under /b/: nothing of the real watch's is touched. Baseline: the live rows as known.
psql <<SQL
CREATE TEMP TABLE bare_known AS
SELECT jsonb_build_array(r.id) AS row_key, x.url_hash, x.url, x.host,
       ('x' || left(md5(jsonb_strip_nulls(jsonb_build_object('id', r.id, 'slug', r.slug,
         'title', r.title, 'body', r.body, 'live', r.live))::text), 16))::bit(64)::bigint
         AS fp
  FROM bare r CROSS JOIN LATERAL
       _indexnow_capture_target('https://www.example.com/b/' || r.slug, r.live) x
 WHERE x.url_hash IS NOT NULL;
INSERT INTO indexnow_sources (watch_id, row_key, url_hash, fingerprint64, since)
SELECT -1, row_key, url_hash, fp, '-infinity' FROM bare_known;
INSERT INTO indexnow_urls (url, url_hash, host, reason, changed_at, queued_at, available_at,
                           settled_seq, settled_reason, last_pushed_at)
SELECT url, url_hash, host, 'created', now(), now(), now(), 1, 'created', now()
  FROM bare_known;
VACUUM ANALYZE indexnow_sources; VACUUM ANALYZE indexnow_urls;
CREATE FUNCTION least_derive(keys jsonb, with_sources boolean) RETURNS bigint
LANGUAGE sql AS \$\$
  WITH r AS (
    SELECT k.row_key, x.url, x.url_hash, x.host,
           ('x' || left(md5(jsonb_strip_nulls(jsonb_build_object('id', r.id, 'slug', r.slug,
             'title', r.title, 'body', r.body, 'live', r.live))::text), 16))::bit(64)::bigint AS fp
      FROM (SELECT e AS row_key FROM jsonb_array_elements(keys) e) k
      JOIN bare r ON r.id = (k.row_key ->> 0)::int
      CROSS JOIN LATERAL
           _indexnow_capture_target('https://www.example.com/b/' || r.slug, r.live) x),
  ch AS (
    SELECT r.* FROM r JOIN indexnow_sources s ON s.watch_id = -1 AND s.row_key = r.row_key
     WHERE s.url_hash = r.url_hash AND s.fingerprint64 <> r.fp),
  q AS (
    INSERT INTO indexnow_urls AS u (url, url_hash, host, reason, changed_at, queued_at,
                                    available_at)
    SELECT url, url_hash, host, 'changed', now(), now(), now() FROM ch
    ON CONFLICT (url_hash) DO UPDATE SET reason = excluded.reason,
       changed_at = excluded.changed_at, queued_at = excluded.queued_at,
       available_at = excluded.available_at, request_seq = u.request_seq + 1
    RETURNING 1),
  s AS (
    UPDATE indexnow_sources s SET fingerprint64 = ch.fp FROM ch
     WHERE with_sources AND s.watch_id = -1 AND s.row_key = ch.row_key
    RETURNING 1)
  SELECT (SELECT count(*) FROM q) + (SELECT count(*) FROM s)
\$\$;
SQL
# Derives the bare table's ROWS changed rows with least_derive, 10,000 keys a transaction (as
# the worker derives change sets); $1 is with_sources. Prints the milliseconds it took.
least_derive_all() {
  local start lo
  start=$(date +%s%N)
  for lo in $(seq 1 10000 "$ROWS"); do
    psql -Atc "SELECT least_derive((SELECT jsonb_agg(jsonb_build_array(g))
                                      FROM generate_series($lo, $((lo + 9999))) g), $1)" >/dev/null
  done
  echo $(( ($(date +%s%N) - start) / 1000000 ))
}

# Prints the milliseconds of "UPDATE ...; CHECKPOINT" on table $1 with SET clause $2.
timed_update() {
  psql -c "VACUUM $1" -c "CHECKPOINT"
  psql -c '\timing on' -c "UPDATE $1 SET $2" -c "CHECKPOINT" |
    awk '/^Time:/ { sum += $2 } END { printf "%.0f", sum }'
}
changes() { psql -Atc "SELECT count(*) FROM indexnow_changes"; }
pending() { psql -Atc "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq"; }
# The largest private memory (KiB) of any backend of this cluster, sampled every 50 ms while the
# process $1 runs.
peak_private_kib() {
  local peak=0 kib p
  while kill -0 "$1" 2>/dev/null; do
    for p in $(pgrep -f "postgres: postgres postgres 127.0.0.1" || true); do
      kib=$(awk '/^Anonymous:/ { s += $2 } END { print s + 0 }' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
      [ "$kib" -gt "$peak" ] && peak=$kib
    done
    sleep 0.05
  done
  echo "$peak"
}
# Single-row saves of random rows of `watched` for $1 seconds: "tps max_ms".
saves() {
  printf '\\set id random(1, %d)\nUPDATE watched SET body = md5(random()::text) WHERE id = :id;\n' "$ROWS" > "$dir/save.sql"
  rm -f "$dir"/pgbench_log.*
  (cd "$dir" && pgbench -c 1 -T "$1" -l -f "$dir/save.sql" | awk '/^tps/ { printf "%d", $3 }')
  printf ' '
  awk '{ if ($3 > m) m = $3 } END { printf "%.1f", m / 1000 }' "$dir"/pgbench_log.*
}

if [[ " $PARTS " == *" bulk "* ]]; then
printf '\n%-6s %-14s %9s %9s %9s %8s %8s %8s %s\n' round change plain_ms watch_ms floor_ms watch× floor× w/floor queued
for round in $(seq 1 "$ROUNDS"); do
  for change in "public column" "ignored only"; do
    case "$change" in
      public*) set_clause="body = body || 'r'" ;;
      *) set_clause="sort_order = sort_order + 1" ;;
    esac
    before=$(pending)
    plain=$(timed_update plain "$set_clause")
    # (what the UPDATE recorded, not what the saves of an earlier round left)
    changes_before=$(changes)
    watched=$(timed_update watched "$set_clause")
    recorded=$(( $(changes) - changes_before ))
    floor=$(timed_update floor "$set_clause")
    awk -v r="$round" -v c="$change" -v p="$plain" -v w="$watched" -v f="$floor" -v n="$recorded" \
      'BEGIN { printf "%-6s %-14s %9d %9d %9d %8.2f %8.2f %8.2f %s change sets\n", r, c, p, w, f, w / p, f / p, w / f, n }'
    if [ "$change" = "ignored only" ] && [ "$recorded" != 0 ]; then
      echo "  !! an ignored-only UPDATE recorded $recorded change sets"
    fi
    if [ "$recorded" != 0 ]; then
      # Derive what the UPDATE recorded as the worker does, one change set (10,000 keys) a
      # transaction, with single-row saves of the same table going on.
      start=$(date +%s%N)
      ( while [ "$(psql -Atc "SELECT indexnow_derive(1)")" = 1 ]; do :; done ) &
      deriving=$!
      peak_private_kib "$deriving" > "$dir/peak" &
      sampler=$!
      during=$(saves 4)
      wait "$deriving"
      took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
      wait "$sampler"
      alone=$(saves 4)
      awk -v r="$round" -v n="$ROWS" -v ms="$took_ms" -v kib="$(cat "$dir/peak")" -v d="$during" -v a="$alone" \
        'BEGIN { split(d, x, " "); split(a, y, " ");
                 printf "%-6s %-14s %9d ms: %.0f keys/s, %.1f MiB at most; saves meanwhile %d tps (longest %s ms), alone %d tps (longest %s ms)\n",
                        r, "derive", ms, n * 1000 / ms, kib / 1024, x[1], x[2], y[1], y[2] }'
      echo "       queued now: $(pending) pending (was $before)"
      # The least derivation of the same change on the bare table, under the same saves: with
      # both writes, then with the queue write alone.
      for sources in true false; do
        psql -c "UPDATE bare SET $set_clause" -c "CHECKPOINT"
        least_derive_all "$sources" > "$dir/least_ms" &
        deriving=$!
        saves 4 >/dev/null
        wait "$deriving"
        least_ms=$(cat "$dir/least_ms")
        awk -v r="$round" -v n="$ROWS" -v ms="$least_ms" -v ours="$took_ms" -v s="$sources" \
          'BEGIN { printf "%-6s %-14s %9d ms: %.0f keys/s, by hand %s; derive × least %.2f\n",
                          r, "least derive", ms, n * 1000 / ms,
                          s == "true" ? "(queue and sources)" : "(queue only: one write a key)", ours / ms }'
      done
    fi
    # Settle what was queued, so each round starts from the same queue state.
    psql -c "UPDATE indexnow_urls SET settled_seq = request_seq, settled_reason = reason, last_pushed_at = clock_timestamp()" -c "VACUUM indexnow_urls"
  done
done
fi

if [[ " $PARTS " == *" saves "* ]]; then
# Single-row saves, SAVE_ROUNDS rounds (each kind SAVE_SECONDS in turn), then the medians. Kinds:
# plain (no trigger), floor (the do-nothing statement trigger with transition tables), recorded
# (watched, a public column: the default, recorded and derived by a worker), derived (the same
# derived in the statement: indexnow.derive_at_write = 100), ignored (an ignored column only),
# least (the least a save that derives in its statement must do, by hand), tracked (recorded with
# indexnow.track_columns on: every column of the saved row compared, the change set names them).
kinds=(plain floor recorded derived ignored least tracked)
printf '\n%-6s' round; for k in "${kinds[@]}"; do printf ' %10s' "${k}_tps"; done
printf ' %10s %11s %9s %9s %9s\n' rec/plain rec/floor der/plain ign/plain trk/rec
declare -A all=()
for round in $(seq 1 "$SAVE_ROUNDS"); do
  declare -A tps=()
  for kind in "${kinds[@]}"; do
    options=""
    case $kind in
      plain) sql="UPDATE plain SET body = md5(random()::text) WHERE id = :id" ;;
      floor) sql="UPDATE floor SET body = md5(random()::text) WHERE id = :id" ;;
      recorded) sql="UPDATE watched SET body = md5(random()::text) WHERE id = :id" ;;
      derived) sql="UPDATE watched SET body = md5(random()::text) WHERE id = :id"
               options="-c indexnow.derive_at_write=100" ;;
      ignored) sql="UPDATE watched SET sort_order = sort_order + 1 WHERE id = :id" ;;
      tracked) sql="UPDATE watched SET body = md5(random()::text) WHERE id = :id"
               options="-c indexnow.track_columns=on" ;;
      least) sql="UPDATE plain SET body = md5(random()::text) WHERE id = :id \\; SELECT least_derivation(:id)" ;;
    esac
    printf '\\set id random(1, %d)\n%s;\n' "$ROWS" "$sql" > "$dir/save-$kind.sql"
    tps[$kind]=$(PGOPTIONS="$options" pgbench -c 1 -T "$SAVE_SECONDS" -f "$dir/save-$kind.sql" | awk '/^tps/ { printf "%d", $3 }')
    all[$kind]="${all[$kind]:-} ${tps[$kind]}"
  done
  printf '%-6s' "$round"; for k in "${kinds[@]}"; do printf ' %10d' "${tps[$k]}"; done
  awk -v p="${tps[plain]}" -v f="${tps[floor]}" -v c="${tps[recorded]}" -v d="${tps[derived]}" -v i="${tps[ignored]}" \
      -v t="${tps[tracked]}" \
    'BEGIN { printf " %10.2f %11.2f %9.2f %9.2f %9.2f\n", p / c, f / c, p / d, p / i, c / t }'
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-6s' median; for k in "${kinds[@]}"; do printf ' %10d' "$(median "${all[$k]}")"; done
awk -v p="$(median "${all[plain]}")" -v f="$(median "${all[floor]}")" -v c="$(median "${all[recorded]}")" \
    -v d="$(median "${all[derived]}")" -v i="$(median "${all[ignored]}")" -v t="$(median "${all[tracked]}")" \
  'BEGIN { printf " %10.2f %11.2f %9.2f %9.2f %9.2f\n", p / c, f / c, p / d, p / i, c / t;
           printf "(x/y = how many times longer a save takes: the recorded save, the default, is %.2f x plain (target 1.25) and %.2f x the floor (target 1.15))\n", p / c, f / c }'

# The first save of a new session: a connection a transaction (pgbench -C, as an application that
# connects per request does), one save each; the milliseconds a transaction takes, connection
# included, plain against recorded, SAVE_ROUNDS rounds side by side.
printf '\n%-6s %14s %17s %14s\n' round plain_first_ms recorded_first_ms extra_ms
extras=""
for round in $(seq 1 "$SAVE_ROUNDS"); do
  declare -A ms=()
  for kind in plain recorded; do
    ms[$kind]=$(pgbench -C -c 1 -T "$SAVE_SECONDS" -f "$dir/save-$kind.sql" | awk '/^tps/ { printf "%.3f", 1000 / $3 }')
  done
  extra=$(awk -v a="${ms[plain]}" -v b="${ms[recorded]}" 'BEGIN { printf "%.3f", b - a }')
  extras="$extras $extra"
  printf '%-6s %14s %17s %14s\n' "$round" "${ms[plain]}" "${ms[recorded]}" "$extra"
done
echo "median extra for the first save of a session: $(median "$extras") ms (target 2)"
fi

if [[ " $PARTS " == *" worker "* ]]; then
# With the worker: a single save, from its commit to the POST reaching the receiver (what the
# saves above queued is settled first, so the worker has no backlog to send before it).
# The recorded saves left a change set each: how fast they are derived afterwards (as a reader
# does, all in one call; a worker takes the same batches, one a transaction).
recorded=$(changes)
start=$(date +%s%N)
psql -c "SELECT indexnow_derive()" >/dev/null
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
awk -v n="$recorded" -v ms="$took_ms" \
  'BEGIN { printf "\nrecorded saves derived afterwards: %d change sets in %d ms (%.0f saves/s)\n", n, ms, n * 1000 / ms }'
psql -c "UPDATE indexnow_urls SET settled_seq = request_seq WHERE request_seq > settled_seq" >/dev/null
echo "shared_preload_libraries = 'indexnow'" >> "$dir/data/postgresql.conf"
sudo -n -u postgres "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w restart >/dev/null
until psql -Atc "SELECT worker FROM indexnow_status()" | grep -q "running: idle"; do sleep 0.5; done
received() {
  exec 3<>"/dev/tcp/127.0.0.1/$rport"
  printf 'GET /__received HTTP/1.0\r\n\r\n' >&3
  grep -o "$1" <&3 | wc -l
  exec 3<&-
}
printf '\n%-6s %s\n' save commit_to_post_ms
for i in 1 2 3 4 5; do
  slug="single-save-$i-$RANDOM"
  start=$(date +%s%N)
  psql -c "UPDATE watched SET slug = '$slug' WHERE id = $((i * 10 + 1))"
  until [ "$(received "$slug")" -gt 0 ]; do sleep 0.01; done
  printf '%-6s %d\n' "$i" $(( ($(date +%s%N) - start) / 1000000 ))
done
fi

