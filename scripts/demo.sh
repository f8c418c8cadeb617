#!/usr/bin/env bash
# The demo: a throwaway cluster with indexnow preloaded, a small bilingual site (Thai and English
# URLs of one pages table) and a local IndexNow receiver. The site is edited step by step; after
# each step the demo waits until the worker has sent what it owes and shows what the queue holds
# for the URLs concerned and what the receiver got since the step before. Then indexnow_status().
#   bash scripts/demo.sh [--pg-config PATH] [--debug]
#     --pg-config  the PostgreSQL to install into and run (default: Debian's PostgreSQL 15)
#     --debug      a debug build instead of the release build (quicker to build)
#   INDEXNOW_DEMO_SKIP_SETUP=1  do not run scripts/setup.sh (the machine is set up already)
set -euo pipefail
cd "$(dirname "$0")/.."

pg_config=/usr/lib/postgresql/15/bin/pg_config
profile=release
while [ $# -gt 0 ]; do
  case "$1" in
    --pg-config) pg_config=${2:?--pg-config needs a path}; shift 2 ;;
    --debug) profile=debug; shift ;;
    *) echo "demo.sh: unknown argument $1 (expected --pg-config PATH, --debug)" >&2; exit 2 ;;
  esac
done

[ "${INDEXNOW_DEMO_SKIP_SETUP:-}" = 1 ] || bash scripts/setup.sh
[ -x "$pg_config" ] || { echo "demo.sh: no pg_config at $pg_config (give --pg-config PATH)" >&2; exit 2; }

echo "[demo] building and installing the extension ($profile), the local IndexNow receiver and the picture command"
build_log=$(mktemp /tmp/indexnow-demo-build.XXXXXX)
install_args=(--pg-config "$pg_config")
cargo_args=(--release)
[ "$profile" = debug ] && { install_args+=(--debug); cargo_args=(); }
if ! { bash scripts/install.sh "${install_args[@]}" &&
       cargo build "${cargo_args[@]}" -q -p indexnow-receiver -p indexnow-picture; } >"$build_log" 2>&1; then
  tail -n 40 "$build_log" >&2
  echo "demo.sh: the build failed (whole log: $build_log)" >&2
  exit 1
fi
rm -f "$build_log"
started=$(date +%s%N)

source scripts/cluster.sh
# cluster.sh's functions run the PostgreSQL named by PG_BIN when they are called: this one's.
PG_BIN=$("$pg_config" --bindir)
dir=/tmp/indexnow-demo
receiver_pid=
# Whatever way the demo ends, the cluster and the receiver stop with it.
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  cluster_stop "$dir"
  if [ -n "$receiver_pid" ]; then
    kill "$receiver_pid" 2>/dev/null || true
    wait "$receiver_pid" 2>/dev/null || true
  fi
  if [ "$rc" = 0 ]; then
    rm -rf "$dir"
  else
    echo "[demo] stopped (exit $rc); the server log is $dir/server.log" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rport=$(free_port)
"target/$profile/indexnow-receiver" --listen "127.0.0.1:$rport" >/dev/null &
receiver_pid=$!
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$rport") 2>/dev/null && break; sleep 0.1; done
port=$(free_port)
# Short times, so that the demo waits seconds where a site waits minutes: a URL goes out once it
# is quiet for 2 s (default 120 s), may be sent again 1 s after its last push (min_gap, default
# 3600 s), and the worker sleeps at most 1 s (naptime, default 5 s).
cluster_start "$dir" "$port" "indexnow.endpoint = 'http://127.0.0.1:$rport/indexnow'" \
  "indexnow.debounce = '2s'" "indexnow.min_gap = '1s'" "indexnow.naptime = '1s'"
echo "[demo] PostgreSQL $("$pg_config" --version | cut -d' ' -f2) on 127.0.0.1:$port, receiver on 127.0.0.1:$rport"
echo "[demo] debounce 2 s, min_gap 1 s, naptime 1 s (defaults 120 s, 3600 s, 5 s)"

psql() { "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -X -q "$@"; }
# One value from the database.
value() { psql -At -c "$1"; }

# Talks to the receiver with bash alone: receiver METHOD PATH [BODY]
receiver() {
  local body=${3:-}
  exec 3<>"/dev/tcp/127.0.0.1/$rport"
  printf '%s %s HTTP/1.0\r\nContent-Length: %s\r\n\r\n%s' "$1" "$2" "${#body}" "$body" >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}

# A step: its heading, and the moment it starts (the database's clock, in epoch seconds).
t0=
step() {
  printf '\n== %s\n' "$1"
  t0=$(value "SELECT extract(epoch FROM clock_timestamp())")
}
# The statements that matter, as text for the reader.
sql() { printf '   sql> %s\n' "$@"; }
note() { printf '   %s\n' "$@"; }
# One statement, shown and run.
run() { sql "$1"; psql -c "$1"; }

# wait_until TIMEOUT SQL: polls until the query answers t.
wait_until() {
  local deadline=$(($(date +%s) + $1))
  until [ "$(value "$2")" = t ]; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "demo.sh: not so after $1 s: $2" >&2; exit 1; }
    sleep 0.2
  done
}
# Until nothing is pending and no recorded change waits to be derived (indexnow_status() derives
# nothing: it shows what waits as changes_waiting).
wait_sent() {
  wait_until "${1:-15}" \
    "SELECT coalesce(sum(pending), 0) = 0 AND coalesce(max(changes_waiting), 0) = 0 FROM indexnow_status()"
}

# What the queue holds for the URLs a filter (SQL over indexnow_urls; by default the URLs requested
# since the step began) selects: one line per URL, or, for many, one line per reason and state.
show_queue() {
  # (a reader of the queue derives first what the saves recorded, as indexnow_push_now() does)
  value "SELECT indexnow_derive()" >/dev/null
  psql -At -v t0="$t0" -v filter="${1:-queued_at >= to_timestamp($t0)}" <<'SQL'
WITH q AS (
  SELECT url, reason,
         CASE WHEN request_seq > settled_seq THEN
                'pending (' || (request_seq - settled_seq) || ' request'
                || CASE WHEN request_seq - settled_seq > 1 THEN 's' ELSE '' END || ')'
                || CASE WHEN available_at > now()
                        THEN ', not before +' || round(extract(epoch FROM available_at) - :t0, 1) || ' s'
                        ELSE '' END
              WHEN failed_at >= queued_at THEN 'failed (' || failed_status || ')'
              WHEN last_pushed_at >= queued_at
                THEN 'pushed at +' || round(extract(epoch FROM last_pushed_at) - :t0, 1) || ' s'
              ELSE 'settled, never sent' END AS state
    FROM indexnow_urls WHERE :filter),
n AS (SELECT count(*) AS n FROM q)
SELECT line FROM (
  SELECT 1 AS k, url AS o, format('   queue     %-42s %-12s %s', url, reason, state) AS line
    FROM q, n WHERE n <= 6
  UNION ALL
  SELECT 1, min(url), format('   queue     %s URLs, %-29s %-12s %s', count(*),
           (array_agg(url ORDER BY url))[1] || ' ...', reason, state)
    FROM q, n WHERE n > 6 GROUP BY reason, state
  UNION ALL
  SELECT 0, '', '   queue     nothing requested' FROM n WHERE n = 0) lines
ORDER BY k, o;
SQL
}

# What the receiver got since the last call: each POST, its answer, when it came and its URLs.
seen=0
show_received() {
  local json
  json=$(receiver GET /__received)
  psql -At -v rec="$json" -v seen="$seen" -v t0="$t0" <<'SQL'
WITH r AS (
  SELECT n, e->>'status' AS status, (e->>'arrived_at')::numeric AS at,
         e->'request'->'urlList' AS urls, e->>'problem' AS problem
    FROM jsonb_array_elements(:'rec'::jsonb) WITH ORDINALITY AS x(e, n) WHERE n > :seen)
SELECT line FROM (
  SELECT 0 AS n, format('   receiver  %s', CASE count(*) WHEN 0 THEN 'nothing'
                                          WHEN 1 THEN '1 POST' ELSE count(*) || ' POSTs' END) AS line
    FROM r
  UNION ALL
  SELECT n, format('             POST #%s at +%s s, answered %s: %s', n, round(at - :t0, 1), status,
           coalesce(problem,
             jsonb_array_length(urls) || CASE jsonb_array_length(urls) WHEN 1 THEN ' URL ' ELSE ' URLs ' END
             || (SELECT string_agg(u, ' ' ORDER BY i) FROM jsonb_array_elements_text(urls)
                   WITH ORDINALITY AS t(u, i) WHERE i <= 4)
             || CASE WHEN jsonb_array_length(urls) > 4
                     THEN ' ... (' || (jsonb_array_length(urls) - 4) || ' more)' ELSE '' END))
    FROM r) lines
ORDER BY n;
SQL
  seen=$(grep -o '"arrived_at"' <<<"$json" | wc -l)
}

# ---------------------------------------------------------------------------------------------
psql <<'SQL'
CREATE EXTENSION indexnow;
SELECT indexnow_add_host('www.example.com', '5f2b9c0e4d8a4b7f9e1c3a6d8b0f2e4c') \g /dev/null

-- A bilingual site: Thai columns and English columns in one table.
CREATE TABLE pages (
  id serial PRIMARY KEY, slug text, category text,
  title text, body text, title_en text, body_en text,
  status text NOT NULL DEFAULT 'draft', noindex boolean NOT NULL DEFAULT false,
  sort_order int, is_featured boolean, keywords text,
  created_at timestamptz DEFAULT now(), updated_at timestamptz DEFAULT now(), published_at timestamptz);
INSERT INTO pages (slug, category, title, body, title_en, body_en, status) VALUES
  ('welcome', 'info', 'ยินดีต้อนรับ', '...', 'Welcome', '...', 'published'),
  ('plans',   'info', 'แผน', '...', NULL, NULL, 'draft');
INSERT INTO pages (slug, category, title, body, title_en, body_en, status)
  SELECT 'news-' || i, 'news', 'ข่าว ' || i, '...', 'News ' || i, '...', 'published'
    FROM generate_series(1, 120) AS i;

-- One watch per language. The pages already live are taken as known: watching announces nothing.
SELECT indexnow_watch('pages', url => 'https://www.example.com/th/{slug}',
  visible => $$status = 'published' AND NOT noindex$$,
  ignore => '{sort_order,is_featured,keywords,created_at,updated_at,title_en,body_en}',
  publish_at => 'published_at') \g /dev/null
SELECT indexnow_watch('pages', url => 'https://www.example.com/en/{slug}',
  visible => $$status = 'published' AND NOT noindex AND title_en IS NOT NULL$$,
  ignore => '{sort_order,is_featured,keywords,created_at,updated_at,title,body}',
  hidden_reason => 'untranslated', publish_at => 'published_at') \g /dev/null
SQL
echo
echo "[demo] the site: table pages, Thai columns title/body and English columns title_en/body_en"
psql -At <<'SQL'
SELECT format('       %s rows (%s): welcome, news-1 ... news-%s in category news, plans', sum(c),
              string_agg(c || ' ' || s, ', ' ORDER BY s),
              (SELECT count(*) FROM pages WHERE category = 'news'))
  FROM (SELECT status AS s, count(*) AS c FROM pages GROUP BY status) x;
SELECT format('       watch %s  visible when %s; hidden: %s', pattern, visible, hidden_reason)
  FROM indexnow_watches ORDER BY id;
SELECT format('       baseline: %s live URLs taken as known to search engines, %s pending',
              count(*), count(*) FILTER (WHERE request_seq > settled_seq))
  FROM indexnow_urls;
SQL

# ---------------------------------------------------------------------------------------------
step "1. Ten quick edits of one page"
sql "UPDATE pages SET body = body || '.' WHERE slug = 'welcome'     -- ten times, each its own transaction"
psql <<'SQL'
SELECT $$UPDATE pages SET body = body || '.' WHERE slug = 'welcome'$$ FROM generate_series(1, 10) \gexec
SQL
note "right after the edits (body is Thai: the English URL is not concerned):"
show_queue
wait_sent
note "once the page was quiet for the debounce:"
show_queue
show_received

step "2. An admin-only change (columns the watches ignore)"
run "UPDATE pages SET sort_order = 1, is_featured = true, keywords = 'k' WHERE slug = 'news-1'"
sleep 3   # the debounce and a worker pass: anything queued would have gone by now
show_queue
show_received

step "3. A bulk UPDATE of a category"
run "UPDATE pages SET body = body || ' (updated)' WHERE category = 'news'"
note "$(value "SELECT count(*) FROM pages WHERE category = 'news'") rows: one statement, recorded as one change set, derived by the worker its commit woke"
wait_sent
show_queue
show_received

step "4. A slug change"
run "UPDATE pages SET slug = 'welcome-home' WHERE slug = 'welcome'"
wait_sent
show_queue
show_received

step "5. An unpublish"
run "UPDATE pages SET status = 'draft' WHERE slug = 'news-1'"
wait_sent
show_queue
note "(the English watch removes with its hidden_reason, 'untranslated', whatever hid the page)"
show_received

step "6. A delete"
run "DELETE FROM pages WHERE slug = 'news-2'"
wait_sent
show_queue
show_received

step "7. An untranslated page (no title_en: its English URL is never sent)"
run "INSERT INTO pages (slug, category, title, body, status) VALUES ('recipes', 'info', 'สูตรอาหาร', '...', 'published')"
wait_sent
show_queue
note "rows for https://www.example.com/en/recipes in indexnow_urls: $(value "SELECT count(*) FROM indexnow_urls WHERE url = 'https://www.example.com/en/recipes'")"
show_received

step "8. A scheduled post"
sql "INSERT INTO pages (slug, ..., status, published_at) VALUES ('launch', ..., 'published', now() + interval '6 seconds')"
psql <<'SQL'
INSERT INTO pages (slug, category, title, body, title_en, body_en, status, published_at)
  VALUES ('launch', 'info', 'เปิดตัว', '...', 'Launch', '...', 'published', now() + interval '6 seconds');
SQL
published_at=$(value "SELECT extract(epoch FROM published_at) FROM pages WHERE slug = 'launch'")
note "published_at is +$(value "SELECT round($published_at - $t0, 1)") s"
sleep 3   # past the debounce, before the publication time
note "at +$(value "SELECT round(extract(epoch FROM clock_timestamp()) - $t0, 1)") s (quiet for the debounce, but not published yet):"
show_queue
show_received
wait_sent
note "after its time:"
show_queue
show_received

step "9. A 429 with Retry-After: 5"
note "the receiver will answer the next POST with 429 and Retry-After: 5"
receiver POST /__script '[{"status":429,"retry_after":"5","body":"slow down"}]' >/dev/null
sql "INSERT INTO pages (slug, ...) VALUES ('sale', ...)     -- Thai and English"
psql <<'SQL'
INSERT INTO pages (slug, category, title, body, title_en, body_en, status)
  VALUES ('sale', 'info', 'ลดราคา', '...', 'Sale', '...', 'published');
SQL
wait_until 15 "SELECT backoff_until IS NOT NULL FROM indexnow_status()"
show_received
note "indexnow_status() during the pause:"
psql -At -v t0="$t0" <<'SQL'
SELECT format('   status    pending %s, due_now %s, last_status %s, backoff_until +%s s, next_due_at +%s s, oldest_due_age %s',
              pending, due_now, last_status, round(extract(epoch FROM backoff_until) - :t0, 1),
              round(extract(epoch FROM next_due_at) - :t0, 1), date_trunc('milliseconds', oldest_due_age))
  FROM indexnow_status();
SQL
note "an edit during the pause:"
run "UPDATE pages SET body = body || '!' WHERE slug = 'recipes'"
wait_sent 20
note "after the pause: the held URLs and the edit made meanwhile, in one POST"
show_queue
show_received

step "10. indexnow_status()"
psql -P pager=off -P footer=off -c "SELECT host, pending, due_now, failed, last_status, next_due_at, oldest_due_age, held, dry_run, worker FROM indexnow_status()"

step "11. The picture"
picture=${INDEXNOW_DEMO_PICTURE:-/tmp/indexnow-demo-picture.svg}
seconds=$(( ($(date +%s%N) - started) / 1000000000 / 10 + 1 ))
"target/$profile/indexnow-picture" "host=127.0.0.1 port=$port user=postgres dbname=postgres" \
  "$picture" 10 "$seconds"
note "URLs sent per 10 s by answer, the pause shaded, the backlog as a line: open $picture"

elapsed=$((($(date +%s%N) - started) / 100000000))
echo "[demo] done in $((elapsed / 10)).$((elapsed % 10)) s after the build"
