#!/usr/bin/env bash
# Capture benchmark (not a test): what watching a table costs a bulk UPDATE, measured side by side
# in one run on one cluster, as ratios to the same UPDATE of an identical unwatched table.
#   plain    no trigger
#   watched  indexnow_watch() (statement triggers with transition tables)
#   by hand  what a user would write: a plpgsql AFTER ROW trigger that compares the row without
#            its ignored columns and calls indexnow_queue() per changed row
#   floor    a statement trigger with transition tables that does nothing: what PostgreSQL itself
#            charges for capturing the old and new rows, before any of our work
# Then single-row saves, what an application does most (pgbench, one client, SAVE_SECONDS each,
# interleaved over 3 rounds): UPDATE of one random row of plain, of watched (a public column), of
# watched (an ignored column only), in transactions per second.
# Each UPDATE is timed with the CHECKPOINT that writes it out; tables are vacuumed between runs.
# ROWS (default 1000000) and ROUNDS (default 2) can be set in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-1000000}
ROUNDS=${ROUNDS:-2}

bash scripts/setup.sh >/dev/null
echo "[bench] building and installing the extension (release)"
cargo pgrx install --release --pg-config /usr/lib/postgresql/15/bin/pg_config >/dev/null 2>&1

source scripts/cluster.sh
dir=/tmp/indexnow-bench
port=$(free_port)
cluster_start "$dir" "$port" "shared_buffers = '2GB'" "max_wal_size = '16GB'" \
  "checkpoint_timeout = '1h'" "work_mem = '64MB'" "maintenance_work_mem = '512MB'"
trap 'cluster_stop "$dir"' EXIT
psql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -X -q -v ON_ERROR_STOP=1 "$@"; }

echo "[bench] $ROWS rows per table; $(nproc) cores; PostgreSQL $(psql -Atc 'SHOW server_version')"
psql <<SQL
CREATE EXTENSION indexnow;
DO \$\$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['plain', 'watched', 'byhand', 'floor'] LOOP
    EXECUTE format('CREATE TABLE %I (id int PRIMARY KEY, slug text NOT NULL, title text, body text,
                    live boolean NOT NULL, sort_order int, updated_at timestamptz)', t);
    EXECUTE format('INSERT INTO %I SELECT g, ''page-'' || g, ''Title '' || g, repeat(md5(g::text), 6),
                    g %% 10 <> 0, g, now() FROM generate_series(1, $ROWS) g', t);
  END LOOP;
END \$\$;
SELECT indexnow_watch('watched', url => 'https://www.example.com/w/{slug}', visible => 'live',
                      ignore => '{sort_order,updated_at}');
CREATE FUNCTION byhand_queue() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
  IF NEW.live AND (to_jsonb(OLD) - '{sort_order,updated_at}'::text[])
                  IS DISTINCT FROM (to_jsonb(NEW) - '{sort_order,updated_at}'::text[]) THEN
    PERFORM indexnow_queue('https://www.example.com/h/' || NEW.slug, 'changed');
  END IF;
  RETURN NULL;
END \$\$;
CREATE TRIGGER byhand AFTER UPDATE ON byhand FOR EACH ROW EXECUTE FUNCTION byhand_queue();
CREATE FUNCTION floor_nothing() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN RETURN NULL; END \$\$;
CREATE TRIGGER floor AFTER UPDATE ON floor REFERENCING OLD TABLE AS o NEW TABLE AS n
  FOR EACH STATEMENT EXECUTE FUNCTION floor_nothing();
VACUUM ANALYZE plain; VACUUM ANALYZE watched; VACUUM ANALYZE byhand; VACUUM ANALYZE floor;
SQL

# Prints the milliseconds of "UPDATE ...; CHECKPOINT" on table $1 with SET clause $2.
timed_update() {
  psql -c "VACUUM $1" -c "CHECKPOINT"
  psql -c '\timing on' -c "UPDATE $1 SET $2" -c "CHECKPOINT" |
    awk '/^Time:/ { sum += $2 } END { printf "%.0f", sum }'
}
pending() { psql -Atc "SELECT count(*) FROM indexnow_urls WHERE request_seq > settled_seq AND url LIKE '%/$1/%'"; }

printf '\n%-6s %-20s %9s %9s %9s %9s %8s %8s %8s\n' round change plain_ms watch_ms hand_ms floor_ms watch× hand× floor×
for round in $(seq 1 "$ROUNDS"); do
  for change in "public column" "ignored only"; do
    case "$change" in
      public*) set_clause="body = body || 'r'" ;;
      *) set_clause="sort_order = sort_order + 1" ;;
    esac
    before_w=$(pending w); before_h=$(pending h)
    plain=$(timed_update plain "$set_clause")
    watched=$(timed_update watched "$set_clause")
    byhand=$(timed_update byhand "$set_clause")
    floor=$(timed_update floor "$set_clause")
    after_w=$(pending w); after_h=$(pending h)
    awk -v r="$round" -v c="$change" -v p="$plain" -v w="$watched" -v h="$byhand" -v f="$floor" \
      'BEGIN { printf "%-6s %-20s %9d %9d %9d %9d %8.2f %8.2f %8.2f\n", r, c, p, w, h, f, w / p, h / p, f / p }'
    if [ "$change" = "ignored only" ] && { [ "$after_w" != "$before_w" ] || [ "$after_h" != "$before_h" ]; }; then
      echo "  !! an ignored-only UPDATE changed the queue (watched $before_w -> $after_w, by hand $before_h -> $after_h)"
    fi
    # Settle what was queued, so each round starts from the same queue state.
    psql -c "UPDATE indexnow_urls SET settled_seq = request_seq" -c "VACUUM indexnow_urls"
  done
done
echo
echo "[bench] queue rows: $(psql -Atc 'SELECT count(*) FROM indexnow_urls')"

SAVE_SECONDS=${SAVE_SECONDS:-8}
printf '\n%-6s %12s %14s %15s %8s %8s\n' round plain_tps public_tps ignored_tps public× ignored×
for round in 1 2 3; do
  declare -A tps=()
  for kind in plain public ignored; do
    case $kind in
      plain) sql="UPDATE plain SET body = md5(random()::text) WHERE id = :id" ;;
      public) sql="UPDATE watched SET body = md5(random()::text) WHERE id = :id" ;;
      ignored) sql="UPDATE watched SET sort_order = sort_order + 1 WHERE id = :id" ;;
    esac
    printf '\\set id random(1, %d)\n%s;\n' "$ROWS" "$sql" > "$dir/save-$kind.sql"
    tps[$kind]=$("$PG_BIN/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -c 1 -T "$SAVE_SECONDS" \
      -f "$dir/save-$kind.sql" postgres 2>/dev/null | awk '/^tps/ { printf "%d", $3 }')
  done
  awk -v r="$round" -v p="${tps[plain]}" -v w="${tps[public]}" -v i="${tps[ignored]}" \
    'BEGIN { printf "%-6s %12d %14d %15d %8.2f %8.2f\n", r, p, w, i, p / w, p / i }'
done
echo "(× = how many times longer a save takes than on the plain table)"
